#include "kube/kube_client.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "kube/tls_transport.h"

namespace gpulet::kube {
namespace {

// The type URL an error's Status payload is stored under.
constexpr char kStatusPayload[] = "k8s.io/apimachinery/pkg/apis/meta/v1.Status";
constexpr size_t kMaxWatchEventBytes = 16 * 1024 * 1024;

absl::StatusCode CodeFor(int http, const std::string& reason) {
  switch (http) {
    case 400:
    case 422:
      return absl::StatusCode::kInvalidArgument;
    case 401:
      return absl::StatusCode::kUnauthenticated;
    case 403:
      return absl::StatusCode::kPermissionDenied;
    case 404:
      return absl::StatusCode::kNotFound;
    case 409:
      return reason == "AlreadyExists" ? absl::StatusCode::kAlreadyExists
                                       : absl::StatusCode::kAborted;
    case 410:
      return absl::StatusCode::kOutOfRange;
    case 429:
      return absl::StatusCode::kResourceExhausted;
    case 503:
      return absl::StatusCode::kUnavailable;
    case 504:
      return absl::StatusCode::kDeadlineExceeded;
    default:
      return http >= 500 ? absl::StatusCode::kInternal : absl::StatusCode::kUnknown;
  }
}

absl::Status StatusError(const std::string& what, int http, const std::string& http_reason,
                         const nlohmann::json& status_object) {
  ApiStatus st;
  st.code = http;
  if (status_object.is_object()) {
    if (status_object.contains("reason") && status_object["reason"].is_string()) {
      st.reason = status_object["reason"].get<std::string>();
    }
    if (status_object.contains("message") && status_object["message"].is_string()) {
      st.message = status_object["message"].get<std::string>();
    }
    if (status_object.contains("code") && status_object["code"].is_number_integer()) {
      st.code = status_object["code"].get<int>();
    }
  }
  std::string msg = absl::StrCat(what, ": ", st.code, " ", http_reason);
  if (!st.message.empty()) absl::StrAppend(&msg, ": ", st.message);
  if (!st.reason.empty()) absl::StrAppend(&msg, " (reason ", st.reason, ")");
  absl::Status s(CodeFor(st.code, st.reason), msg);
  nlohmann::json payload = {{"code", st.code}, {"reason", st.reason}, {"message", st.message}};
  s.SetPayload(kStatusPayload, absl::Cord(payload.dump()));
  return s;
}

bool RetryableTransportError(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) || absl::IsDataLoss(s);
}

bool RetryableHttp(int status) {
  return status == 429 || status == 500 || status == 503 || status == 504;
}

const char* ContentType(PatchType type) {
  switch (type) {
    case PatchType::kMerge:
      return "application/merge-patch+json";
    case PatchType::kStrategicMerge:
      return "application/strategic-merge-patch+json";
  }
  return "application/merge-patch+json";
}

// Splits a watch stream into JSON lines (one event each, as the API server writes them).
class LineDecoder {
 public:
  // Calls `on_line` with each whole line; false from it stops. Returns false on a stop or an
  // oversized line (error() then says which).
  template <typename F>
  bool Feed(absl::string_view data, F on_line) {
    while (!data.empty()) {
      size_t nl = data.find('\n');
      absl::string_view part = data.substr(0, nl);
      if (buf_.size() + part.size() > kMaxWatchEventBytes) {
        error_ = absl::ResourceExhaustedError(
            absl::StrCat("a watch event longer than ", kMaxWatchEventBytes, " bytes"));
        return false;
      }
      buf_.append(part.data(), part.size());
      if (nl == absl::string_view::npos) return true;
      data.remove_prefix(nl + 1);
      std::string line = std::move(buf_);
      buf_.clear();
      if (absl::StripAsciiWhitespace(line).empty()) continue;
      if (!on_line(line)) return false;
    }
    return true;
  }
  absl::Status error_;

 private:
  std::string buf_;
};

}  // namespace

std::optional<ApiStatus> GetApiStatus(const absl::Status& status) {
  absl::optional<absl::Cord> p = status.GetPayload(kStatusPayload);
  if (!p.has_value()) return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(std::string(*p), nullptr, false);
  if (!j.is_object()) return std::nullopt;
  ApiStatus st;
  st.code = j.value("code", 0);
  st.reason = j.value("reason", "");
  st.message = j.value("message", "");
  return st;
}

bool IsConflict(const absl::Status& status) {
  std::optional<ApiStatus> st = GetApiStatus(status);
  return absl::IsAborted(status) && st.has_value() && st->code == 409;
}

bool IsResourceExpired(const absl::Status& status) {
  std::optional<ApiStatus> st = GetApiStatus(status);
  return st.has_value() && (st->code == 410 || st->reason == "Expired" || st->reason == "Gone");
}

absl::Status ApiError(const std::string& what, const HttpResponse& response) {
  nlohmann::json body = nlohmann::json::parse(response.body, nullptr, false);
  if (!body.is_object() || body.value("kind", "") != "Status") {
    // Not a Status (a proxy's page): its start, escaped, says enough.
    nlohmann::json st = {{"message", absl::CEscape(response.body.substr(0, 200))}};
    return StatusError(what, response.status, response.reason, st);
  }
  return StatusError(what, response.status, response.reason, body);
}

std::string QueryEscape(absl::string_view value) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (char c : value) {
    unsigned char u = static_cast<unsigned char>(c);
    if (absl::ascii_isalnum(u) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += c;
    } else {
      out += '%';
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<KubeClient>> KubeClient::FromConfig(const KubeConfig& config,
                                                                   KubeClientOptions options,
                                                                   const Clock* clock) {
  TlsTransportOptions t;
  t.host = config.host;
  t.port = config.port;
  t.server_name = config.tls_server_name;
  t.ca_pem = config.ca_pem;
  t.ca_source = config.ca_source;
  t.client_cert_pem = config.client_cert_pem;
  t.client_key_pem = config.client_key_pem;
  absl::StatusOr<std::unique_ptr<TlsTransport>> transport = TlsTransport::Create(std::move(t));
  if (!transport.ok()) {
    return absl::Status(transport.status().code(),
                        absl::StrCat(config.source, ": ", transport.status().message()));
  }
  return std::make_unique<KubeClient>(std::move(*transport), config, std::move(options), clock);
}

KubeClient::KubeClient(std::unique_ptr<HttpTransport> transport, const KubeConfig& config,
                       KubeClientOptions options, const Clock* clock)
    : transport_(std::move(transport)),
      base_path_(config.base_path),
      token_(config.token_file.empty() ? BearerToken::Fixed(config.token)
                                       : BearerToken::FromFile(config.token_file)),
      has_token_(!config.token.empty() || !config.token_file.empty()),
      options_(std::move(options)),
      clock_(clock),
      bucket_(options_.qps, options_.burst, clock) {}

KubeClient::~KubeClient() = default;

void KubeClient::Cancel() {
  cancelled_.store(true);
  absl::MutexLock lock(&mu_);
  cancelled_flag_ = true;
}

bool KubeClient::SleepUntil(MonoTime until) {
  absl::MutexLock lock(&mu_);
  if (cancelled_flag_) return false;
  if (until <= clock_->Monotonic()) return true;
  return !clock_->AwaitWithDeadline(&mu_, absl::Condition(&cancelled_flag_), until);
}

absl::Duration KubeClient::Backoff(int failures) {
  absl::Duration cap = options_.initial_backoff;
  for (int i = 1; i < failures && cap < options_.max_backoff; ++i) cap *= 2;
  cap = std::min(cap, options_.max_backoff);
  double r;
  if (options_.random) {
    r = options_.random();
  } else {
    thread_local absl::BitGen gen;
    r = absl::Uniform(gen, 0.0, 1.0);
  }
  return cap * std::clamp(r, 0.0, 1.0);
}

absl::Duration KubeClient::RetryDelay(const HttpResponse& response, int failures) {
  std::optional<std::string> ra = response.Header("Retry-After");
  int64_t seconds = 0;
  if (ra.has_value() && absl::SimpleAtoi(*ra, &seconds) && seconds >= 0) {
    return std::min(absl::Seconds(seconds), options_.max_retry_after);
  }
  return Backoff(failures);
}

absl::StatusOr<HttpRequest> KubeClient::NewRequest(const std::string& method,
                                                   const std::string& target,
                                                   std::string* token_sent) {
  HttpRequest req;
  req.method = method;
  req.target = absl::StrCat(base_path_, target);
  req.headers.push_back({"Accept", "application/json"});
  req.headers.push_back({"User-Agent", options_.user_agent});
  if (has_token_) {
    absl::StatusOr<std::string> token = token_.Get();
    if (!token.ok()) return token.status();
    *token_sent = *token;
    req.headers.push_back({"Authorization", absl::StrCat("Bearer ", *token)});
  }
  return req;
}

absl::Status KubeClient::UnauthorizedError(const std::string& what, const HttpResponse& response) {
  absl::Status api = ApiError(what, response);
  std::string advice =
      token_.file().empty()
          ? (has_token_
                 ? "the kubeconfig's token was refused; replace it"
                 : "the client certificate was refused; check that the cluster's CA signed it")
          : absl::StrCat("the bearer token read from ", token_.file(),
                         " was refused and the file holds no newer one; the token has expired or "
                         "been revoked: check that the kubelet still refreshes the projected "
                         "service-account token (or replace the file)");
  absl::Status s(api.code(), absl::StrCat(api.message(), "; ", advice));
  api.ForEachPayload([&](absl::string_view url, const absl::Cord& p) { s.SetPayload(url, p); });
  return s;
}

absl::StatusOr<nlohmann::json> KubeClient::Call(const std::string& method, const std::string& path,
                                                const std::string& content_type,
                                                const std::string* body) {
  std::string target = path;
  if (body != nullptr && options_.strict_field_validation) {
    absl::StrAppend(&target, path.find('?') == std::string::npos ? "?" : "&",
                    "fieldValidation=Strict");
  }
  const std::string what = absl::StrCat(method, " ", path);
  bool reauthed = false;
  absl::Status last;
  for (int attempt = 1;; ++attempt) {
    if (cancelled_.load() || !SleepUntil(bucket_.Reserve())) {
      return absl::CancelledError(absl::StrCat(what, ": cancelled"));
    }
    std::string token_sent;
    absl::StatusOr<HttpRequest> req = NewRequest(method, target, &token_sent);
    if (!req.ok()) return req.status();
    if (body != nullptr) {
      req->headers.push_back({"Content-Type", content_type});
      req->body = *body;
    }
    absl::StatusOr<HttpResponse> resp = transport_->RoundTrip(*req, options_.request_timeout);
    absl::Duration delay;
    if (!resp.ok()) {
      last = absl::Status(resp.status().code(), absl::StrCat(what, ": ", resp.status().message()));
      if (!RetryableTransportError(resp.status())) return last;
      delay = Backoff(attempt);
    } else if (resp->status >= 200 && resp->status < 300) {
      if (absl::StripAsciiWhitespace(resp->body).empty()) return nlohmann::json::object();
      nlohmann::json j = nlohmann::json::parse(resp->body, nullptr, false);
      if (j.is_discarded()) {
        return absl::DataLossError(
            absl::StrCat(what, ": the API server's ", resp->status, " response is not JSON"));
      }
      return j;
    } else if (resp->status == 401) {
      // A rotated token the file now holds is worth one immediate retry.
      if (!reauthed && token_.Reload(token_sent)) {
        reauthed = true;
        --attempt;
        continue;
      }
      return UnauthorizedError(what, *resp);
    } else if (RetryableHttp(resp->status)) {
      last = ApiError(what, *resp);
      delay = RetryDelay(*resp, attempt);
    } else {
      return ApiError(what, *resp);
    }
    if (attempt >= options_.max_attempts) {
      // The server's Status stays attached: a caller decides by its code (GetApiStatus).
      absl::Status out(last.code(),
                       absl::StrCat(last.message(), " (gave up after ", attempt, " attempts)"));
      last.ForEachPayload([&out](absl::string_view type_url, const absl::Cord& payload) {
        out.SetPayload(type_url, payload);
      });
      return out;
    }
    if (!SleepUntil(clock_->Monotonic() + delay)) {
      return absl::CancelledError(absl::StrCat(what, ": cancelled"));
    }
  }
}

absl::StatusOr<nlohmann::json> KubeClient::Get(const std::string& path) {
  return Call("GET", path, "", nullptr);
}

absl::StatusOr<nlohmann::json> KubeClient::Create(const std::string& path,
                                                  const nlohmann::json& body) {
  std::string text = body.dump();
  return Call("POST", path, "application/json", &text);
}

absl::StatusOr<nlohmann::json> KubeClient::Update(const std::string& path,
                                                  const nlohmann::json& body) {
  std::string text = body.dump();
  return Call("PUT", path, "application/json", &text);
}

absl::StatusOr<nlohmann::json> KubeClient::Patch(const std::string& path, PatchType type,
                                                 const nlohmann::json& patch) {
  std::string text = patch.dump();
  return Call("PATCH", path, ContentType(type), &text);
}

absl::Status KubeClient::Delete(const std::string& path) {
  // No body: DeleteOptions are not needed (background propagation is the default), so
  // fieldValidation does not apply either.
  return Call("DELETE", path, "", nullptr).status();
}

absl::Status KubeClient::Watch(const std::string& path, const std::string& resource_version,
                               const WatchHandler& handler) {
  const std::string what = absl::StrCat("WATCH ", path);
  std::string rv = resource_version;
  int failures = 0;
  bool reauthed = false;
  for (;;) {
    if (cancelled_.load() || !SleepUntil(bucket_.Reserve())) {
      return absl::CancelledError(absl::StrCat(what, ": cancelled"));
    }
    std::string target = absl::StrCat(path, path.find('?') == std::string::npos ? "?" : "&",
                                      "watch=true&allowWatchBookmarks=true");
    if (!rv.empty()) absl::StrAppend(&target, "&resourceVersion=", QueryEscape(rv));
    std::string token_sent;
    absl::StatusOr<HttpRequest> req = NewRequest("GET", target, &token_sent);
    if (!req.ok()) return req.status();

    LineDecoder lines;
    bool stopped = false;  // the handler said stop
    int events = 0;
    std::optional<absl::Status> error_event;
    auto on_line = [&](const std::string& line) {
      nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
        lines.error_ = absl::DataLossError(
            absl::StrCat(what, ": a watch event that is not a JSON object with a type: ",
                         absl::CEscape(line.substr(0, 120))));
        return false;
      }
      WatchEvent ev;
      ev.type = j["type"].get<std::string>();
      if (j.contains("object")) ev.object = std::move(j["object"]);
      if (ev.type == "ERROR") {
        int code = ev.object.is_object() ? ev.object.value("code", 0) : 0;
        error_event = StatusError(what, code, code == 410 ? "Gone" : "error event", ev.object);
        return false;
      }
      ++events;
      if (ev.object.is_object() && ev.object.contains("metadata") &&
          ev.object["metadata"].is_object()) {
        std::string next = ev.object["metadata"].value("resourceVersion", "");
        if (!next.empty()) rv = next;
      }
      if (!handler(ev)) {
        stopped = true;
        return false;
      }
      return true;
    };
    StreamOptions so;
    so.idle_timeout = options_.watch_idle_timeout;
    so.cancel = &cancelled_;
    absl::StatusOr<HttpResponse> resp =
        transport_->Stream(*req, options_.request_timeout, so,
                           [&](absl::string_view piece) { return lines.Feed(piece, on_line); });
    if (stopped) return absl::OkStatus();
    if (cancelled_.load()) return absl::CancelledError(absl::StrCat(what, ": cancelled"));
    if (events > 0) failures = 0;
    absl::Duration delay = absl::ZeroDuration();
    if (error_event.has_value()) {
      if (IsResourceExpired(*error_event)) return *error_event;
      // Another ERROR event (an internal error on the server): resume after a pause.
      delay = Backoff(++failures);
    } else if (!lines.error_.ok()) {
      if (!absl::IsDataLoss(lines.error_)) return lines.error_;
      delay = Backoff(++failures);
    } else if (!resp.ok()) {
      if (!RetryableTransportError(resp.status())) {
        return absl::Status(resp.status().code(),
                            absl::StrCat(what, ": ", resp.status().message()));
      }
      delay = Backoff(++failures);  // a dropped connection: resume from rv
    } else if (resp->status == 401) {
      if (reauthed || !token_.Reload(token_sent)) return UnauthorizedError(what, *resp);
      reauthed = true;
      continue;
    } else if (resp->status < 200 || resp->status >= 300) {
      if (!RetryableHttp(resp->status)) return ApiError(what, *resp);
      delay = RetryDelay(*resp, ++failures);
    } else if (events == 0) {
      // The server ended the stream at once: do not spin.
      delay = Backoff(++failures);
    }
    reauthed = false;
    if (delay > absl::ZeroDuration() && !SleepUntil(clock_->Monotonic() + delay)) {
      return absl::CancelledError(absl::StrCat(what, ": cancelled"));
    }
  }
}

}  // namespace gpulet::kube
