#include "registry/registry_server.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace gpulet::registry {

namespace {

constexpr unsigned kNotFound = 404;
constexpr unsigned kInternalError = 500;
constexpr char kApiVersionHeader[] = "Docker-Distribution-API-Version";
constexpr char kApiVersion[] = "registry/2.0";

// The distribution spec's error body: {"errors":[{"code":..., "message":...}]}.
std::string ErrorBody(const std::string& code, const std::string& message) {
  nlohmann::json e = {{"errors", nlohmann::json::array({{{"code", code}, {"message", message}}})}};
  return e.dump();
}

}  // namespace

RegistryServer::RegistryServer(const OciArchive* archive, ServerOptions options)
    : archive_(archive), options_(std::move(options)) {}

RegistryServer::~RegistryServer() { Stop(); }

http::Response RegistryServer::Answer(absl::string_view url) {
  requests_.fetch_add(1);
  http::Response r;
  r.headers.emplace_back(kApiVersionHeader, kApiVersion);
  auto error = [&r](unsigned status, const std::string& code, const std::string& message) {
    r.status = status;
    r.content_type = "application/json";
    r.body = std::make_shared<const std::string>(ErrorBody(code, message));
    return r;
  };
  if (url == "/v2" || url == "/v2/") {
    r.content_type = "application/json";
    r.body = std::make_shared<const std::string>("{}");
    return r;
  }
  if (!absl::StartsWith(url, "/v2/")) {
    return error(kNotFound, "NAME_UNKNOWN", "only the /v2/ API is served here");
  }
  const std::string rest(url.substr(4));
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
    return error(kNotFound, "NAME_UNKNOWN", absl::StrCat("no such API path: ", url));
  }
  if (name != options_.repository) {
    return error(kNotFound, "NAME_UNKNOWN",
                 absl::StrCat("repository '", name, "' is not served here; this serves '",
                              options_.repository, "'"));
  }
  if (kind == "/tags/list") {
    if (!ref.empty()) return error(kNotFound, "NAME_UNKNOWN", "no such API path");
    nlohmann::json tags = nlohmann::json::array();
    for (const NamedImage& image : archive_->images()) {
      if (image.name.repository == name && !image.name.tag.empty()) {
        tags.push_back(image.name.tag);
      }
    }
    r.content_type = "application/json";
    r.body =
        std::make_shared<const std::string>(nlohmann::json{{"name", name}, {"tags", tags}}.dump());
    return r;
  }
  if (kind == "/blobs/") {
    const TarEntry* blob = archive_->Blob(ref);
    if (blob == nullptr || !IsSha256Digest(ref)) {
      return error(kNotFound, "BLOB_UNKNOWN",
                   absl::StrCat("blob ", ref.substr(0, 80), " is not in ", archive_->path()));
    }
    r.content_type = "application/octet-stream";
    r.headers.emplace_back("Docker-Content-Digest", ref);
    r.file_fd = archive_->fd();
    r.file_offset = blob->offset;
    r.file_size = blob->size;
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
    return error(kNotFound, "MANIFEST_UNKNOWN",
                 absl::StrCat("manifest '", ref.substr(0, 80), "' is not in ", archive_->path()));
  }
  absl::StatusOr<std::string> body = archive_->ReadBlob(*archive_->Blob(d->digest));
  if (!body.ok()) {
    return error(kInternalError, "UNKNOWN", std::string(body.status().message()));
  }
  r.content_type = d->media_type.c_str();  // the archive outlives the server
  r.headers.emplace_back("Docker-Content-Digest", d->digest);
  r.body = std::make_shared<const std::string>(*std::move(body));
  return r;
}

absl::Status RegistryServer::Start(const std::string& address, const std::string& flag) {
  if (server_ != nullptr) {
    return absl::FailedPreconditionError("the image registry is already serving");
  }
  http::Options options;
  options.name = "image-serve";
  options.address_flag = flag;
  options.limits.idle_timeout = options_.idle_timeout;
  options.limits.max_connections = options_.max_connections;
  options.access_log = options_.access_log;
  // A push, refused by the server before it reads the body, in the spec's error format.
  options.refused_write.content_type = "application/json";
  options.refused_write.body = std::make_shared<const std::string>(
      ErrorBody("UNSUPPORTED",
                "this registry is read-only (gpulet image-serve): push to a registry of your own"));
  options.refused_write.headers = {{kApiVersionHeader, kApiVersion}};
  auto server = std::make_unique<http::Server>(
      [this](const http::Request& r) { return Answer(r.path); }, std::move(options));
  if (absl::Status s = server->Start(address); !s.ok()) return s;
  server_ = std::move(server);
  return absl::OkStatus();
}

void RegistryServer::Stop() { server_.reset(); }  // ~Server stops it

}  // namespace gpulet::registry
