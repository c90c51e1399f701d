#include "registry/registry_server.h"

#include <fcntl.h>
#include <microhttpd.h>
#include <unistd.h>

#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/tcp_listen.h"
#include "nlohmann/json.hpp"

namespace gpulet::registry {

struct RegistryServer::Response {
  unsigned status = MHD_HTTP_OK;
  std::string content_type;
  std::string digest;              // Docker-Content-Digest, when the body is a manifest or blob
  std::string body;                // in memory, or
  const TarEntry* blob = nullptr;  // sent from the archive's file
  std::string allow;               // for 405
};

namespace {

// The distribution spec's error body: {"errors":[{"code":..., "message":...}]}.
char kWho[] = "image-serve (libmicrohttpd)";

std::string ErrorBody(const std::string& code, const std::string& message) {
  nlohmann::json e = {{"errors", nlohmann::json::array({{{"code", code}, {"message", message}}})}};
  return e.dump();
}

}  // namespace

class RequestHandler {
 public:
  static MHD_Result OnRequest(void* cls, MHD_Connection* c, const char* url, const char* method,
                              const char* /*version*/, const char* /*upload*/, size_t* upload_size,
                              void** state) {
    auto* self = static_cast<RegistryServer*>(cls);
    // The first call for a request carries only its header. A write is refused at once (its
    // body is never read); a read is answered once any body it came with is discarded.
    const bool read = std::strcmp(method, "GET") == 0 || std::strcmp(method, "HEAD") == 0;
    if (*state == nullptr && read) {
      *state = self;
      return MHD_YES;
    }
    if (*upload_size != 0) {
      *upload_size = 0;
      return MHD_YES;
    }
    RegistryServer::Response r = self->Answer(method, url);
    self->requests_.fetch_add(1);
    MHD_Response* resp = nullptr;
    if (r.blob != nullptr) {
      int fd = fcntl(self->archive_->fd(), F_DUPFD_CLOEXEC, 0);
      if (fd >= 0) {
        resp = MHD_create_response_from_fd_at_offset64(r.blob->size, fd, r.blob->offset);
        if (resp == nullptr) close(fd);
      }
    } else {
      resp = MHD_create_response_from_buffer(r.body.size(), r.body.data(), MHD_RESPMEM_MUST_COPY);
    }
    if (resp == nullptr) return MHD_NO;
    MHD_add_response_header(resp, "Docker-Distribution-API-Version", "registry/2.0");
    if (!r.content_type.empty()) {
      MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, r.content_type.c_str());
    }
    if (!r.digest.empty()) {
      MHD_add_response_header(resp, "Docker-Content-Digest", r.digest.c_str());
    }
    if (!r.allow.empty()) MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r.allow.c_str());
    if (self->options_.access_log) {
      GPULET_LOG_INFO("image-serve: {} {} {}", method, url, r.status);
    }
    MHD_Result ok = MHD_queue_response(c, r.status, resp);
    MHD_destroy_response(resp);
    return ok;
  }
};

RegistryServer::RegistryServer(const OciArchive* archive, ServerOptions options)
    : archive_(archive), options_(std::move(options)) {}

RegistryServer::~RegistryServer() { Stop(); }

RegistryServer::Response RegistryServer::Answer(const std::string& method,
                                                const std::string& url) const {
  Response r;
  auto error = [&r](unsigned status, const std::string& code, const std::string& message) {
    r.status = status;
    r.content_type = "application/json";
    r.body = ErrorBody(code, message);
    return r;
  };
  if (method != "GET" && method != "HEAD") {
    r.allow = "GET, HEAD";
    return error(MHD_HTTP_METHOD_NOT_ALLOWED, "UNSUPPORTED",
                 "this registry is read-only (gpulet image-serve): push to a registry of your own");
  }
  if (url == "/v2" || url == "/v2/") {
    r.content_type = "application/json";
    r.body = "{}";
    return r;
  }
  if (!absl::StartsWith(url, "/v2/")) {
    return error(MHD_HTTP_NOT_FOUND, "NAME_UNKNOWN", "only the /v2/ API is served here");
  }
  const std::string rest = url.substr(4);
  std::string name;
  std::string kind;
  std::string ref;
  for (const char* k : {"/manifests/", "/blobs/", "/tags/list"}) {
    size_t at = rest.rfind(k);
    if (at != std::string::npos && at > 0) {
      name = rest.substr(0, at);
      kind = k;
      ref = rest.substr(at + kind.size());
      break;
    }
  }
  if (kind.empty()) {
    return error(MHD_HTTP_NOT_FOUND, "NAME_UNKNOWN", absl::StrCat("no such API path: ", url));
  }
  if (name != options_.repository) {
    return error(MHD_HTTP_NOT_FOUND, "NAME_UNKNOWN",
                 absl::StrCat("repository '", name, "' is not served here; this serves '",
                              options_.repository, "'"));
  }
  if (kind == "/tags/list") {
    if (!ref.empty()) return error(MHD_HTTP_NOT_FOUND, "NAME_UNKNOWN", "no such API path");
    nlohmann::json tags = nlohmann::json::array();
    for (const NamedImage& image : archive_->images()) {
      if (image.name.repository == name && !image.name.tag.empty()) {
        tags.push_back(image.name.tag);
      }
    }
    r.content_type = "application/json";
    r.body = nlohmann::json{{"name", name}, {"tags", tags}}.dump();
    return r;
  }
  if (kind == "/blobs/") {
    const TarEntry* blob = archive_->Blob(ref);
    if (blob == nullptr || !IsSha256Digest(ref)) {
      return error(MHD_HTTP_NOT_FOUND, "BLOB_UNKNOWN",
                   absl::StrCat("blob ", ref.substr(0, 80), " is not in ", archive_->path()));
    }
    r.content_type = "application/octet-stream";
    r.digest = ref;
    r.blob = blob;
    return r;
  }
  // A manifest, by digest or by tag.
  const Descriptor* d = nullptr;
  if (auto it = archive_->manifests().find(ref); it != archive_->manifests().end()) {
    d = &it->second;
  } else {
    // A tag names an image of the served repository only; another repository's image in
    // the same archive is reachable by its digest alone.
    for (const NamedImage& image : archive_->images()) {
      if (image.name.repository == name && !image.name.tag.empty() && image.name.tag == ref) {
        d = &archive_->manifests().at(image.manifest.digest);
        break;
      }
    }
  }
  if (d == nullptr) {
    return error(MHD_HTTP_NOT_FOUND, "MANIFEST_UNKNOWN",
                 absl::StrCat("manifest '", ref.substr(0, 80), "' is not in ", archive_->path()));
  }
  absl::StatusOr<std::string> body = archive_->ReadBlob(*archive_->Blob(d->digest));
  if (!body.ok()) {
    return error(MHD_HTTP_INTERNAL_SERVER_ERROR, "UNKNOWN", std::string(body.status().message()));
  }
  r.content_type = d->media_type;
  r.digest = d->digest;
  r.body = std::move(*body);
  return r;
}

absl::Status RegistryServer::Start(const std::string& address, const std::string& flag) {
  if (daemon_ != nullptr) {
    return absl::FailedPreconditionError("the image registry is already serving");
  }
  absl::StatusOr<TcpListener> listener = ListenTcp(address, flag);
  if (!listener.ok()) return listener.status();
  std::vector<MHD_OptionItem> opts = {
      {MHD_OPTION_LISTEN_SOCKET, listener->fd, nullptr},
      {MHD_OPTION_CONNECTION_TIMEOUT,
       static_cast<intptr_t>(absl::ToInt64Seconds(options_.idle_timeout)), nullptr},
      {MHD_OPTION_CONNECTION_LIMIT, options_.max_connections, nullptr},
      // libmicrohttpd's own messages (a client speaking TLS to this plain-HTTP port, as
      // containerd does once before it falls back to HTTP for a loopback registry) at debug.
      {MHD_OPTION_EXTERNAL_LOGGER, reinterpret_cast<intptr_t>(&LogLibraryMessage), kWho},
      {MHD_OPTION_END, 0, nullptr},
  };
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
  if (listener->ipv6) flags |= MHD_USE_IPv6;
  daemon_ = MHD_start_daemon(flags, 0, nullptr, nullptr, &RequestHandler::OnRequest,
                             const_cast<RegistryServer*>(this), MHD_OPTION_ARRAY, opts.data(),
                             MHD_OPTION_END);
  if (daemon_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot serve the image on ", address,
                                               ": libmicrohttpd did not start (see above)"));
  }
  port_ = listener->port;
  return absl::OkStatus();
}

void RegistryServer::Stop() {
  if (daemon_ != nullptr) {
    MHD_stop_daemon(daemon_);
    daemon_ = nullptr;
  }
}

}  // namespace gpulet::registry
