// KubeClient: the few Kubernetes API calls gpulet makes, as JSON over HttpTransport.
//
// Requests: Get, Create (POST), Update (PUT), Patch (merge-patch or strategic-merge-patch)
// and Delete on an API path ("/api/v1/nodes/n1", "/api/v1/nodes/n1/status"), bodies as
// nlohmann::json. Writes ask for fieldValidation=Strict (when `strict_field_validation`), so a
// field the server does not know is a 400 error, never silently dropped.
//
// Around every attempt:
//   - the QPS/burst token bucket (kube/token_bucket.h) on the injected Clock; retries take
//     tokens too, so a retry storm holds the limit;
//   - the bearer token, re-read when its file changed (kube/bearer_token.h); a 401 re-reads
//     it once more and retries when it changed, else fails naming the token's source;
//   - retries, up to `max_attempts` in all: connection errors (Unavailable, DeadlineExceeded,
//     DataLoss from the transport), 429, 500, 503 and 504; the wait is the response's
//     Retry-After (seconds, at most `max_retry_after`) when it has one, else exponential
//     backoff with full jitter (uniform in [0, min(max_backoff, initial_backoff * 2^n)]).
//     Other 4xx are never retried: the request itself is wrong. A Create retried after a
//     connection error may find that its first attempt landed: AlreadyExists.
//
// Errors carry the API server's Status object: the message reads
// "PATCH /api/v1/nodes/n1: 409 Conflict: <Status.message> (reason Conflict)", and
// GetApiStatus() returns its code, reason and message. HTTP statuses map to absl codes:
// 400/422 InvalidArgument, 401 Unauthenticated, 403 PermissionDenied, 404 NotFound,
// 409 Aborted (a resourceVersion conflict: re-read and retry; IsConflict) or AlreadyExists
// (reason AlreadyExists), 410 OutOfRange (IsResourceExpired), 429 ResourceExhausted,
// 504 DeadlineExceeded, 503 Unavailable, other 5xx Internal.
//
// Watch(path, resourceVersion, handler) streams watch events (ADDED, MODIFIED, DELETED,
// BOOKMARK) to the handler. It asks for bookmarks (allowWatchBookmarks=true) and keeps the
// last resourceVersion seen (bookmarks included), so when the stream drops or the server ends
// it, the watch resumes from there; connection errors back off as requests do (reset once a
// stream delivers events). It returns OK when the handler returns false, Cancelled after
// Cancel(), OutOfRange (IsResourceExpired: 410 Gone, as an ERROR event or a response) when
// the server no longer has the resourceVersion, so the caller relists and watches anew from
// the list's resourceVersion, and any non-retryable error.
//
// Thread-safety: every method may be called from any thread, concurrently. Calls block the
// calling thread (the daemon gives the client its own thread, so an unreachable API server
// delays nothing else); Cancel() ends every wait and watch, now and later, with Cancelled.
#ifndef GPULET_KUBE_KUBE_CLIENT_H_
#define GPULET_KUBE_KUBE_CLIENT_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "kube/bearer_token.h"
#include "kube/http.h"
#include "kube/kube_config.h"
#include "kube/token_bucket.h"
#include "nlohmann/json.hpp"

namespace gpulet::kube {

enum class PatchType {
  kMerge,           // application/merge-patch+json (RFC 7386)
  kStrategicMerge,  // application/strategic-merge-patch+json (lists merged by key)
};

struct KubeClientOptions {
  double qps = 5;  // client-go's defaults
  int burst = 10;
  int max_attempts = 5;
  absl::Duration initial_backoff = absl::Milliseconds(200);
  absl::Duration max_backoff = absl::Seconds(30);
  absl::Duration max_retry_after = absl::Seconds(60);
  absl::Duration request_timeout = absl::Seconds(30);
  absl::Duration watch_idle_timeout = absl::Minutes(5);  // bookmarks come about every minute
  bool strict_field_validation = true;
  std::string user_agent = "gpulet/" GPULET_VERSION;  // the API server logs and audits it
  // Uniform in [0, 1), for jitter; tests pin it. Default: absl::BitGen.
  std::function<double()> random;
};

// The API server's Status object (meta/v1 Status) behind an error.
struct ApiStatus {
  int code = 0;         // the HTTP status
  std::string reason;   // "Conflict", "NotFound", "Expired", "TooManyRequests", ...
  std::string message;  // the server's words
};

// The Status an error from KubeClient carries, or nullopt (a transport or local error).
std::optional<ApiStatus> GetApiStatus(const absl::Status& status);
// A resourceVersion conflict (409, reason Conflict): re-read the object and try again.
bool IsConflict(const absl::Status& status);
// The watch's resourceVersion is too old (410 Gone / reason Expired): relist.
bool IsResourceExpired(const absl::Status& status);

struct WatchEvent {
  std::string type;  // ADDED, MODIFIED, DELETED, BOOKMARK
  nlohmann::json object;
};
// Returns false to end the watch (Watch then returns OK).
using WatchHandler = std::function<bool(const WatchEvent&)>;

class KubeClient {
 public:
  // The TLS transport for `config`, its credentials and base path.
  static absl::StatusOr<std::unique_ptr<KubeClient>> FromConfig(const KubeConfig& config,
                                                                KubeClientOptions options,
                                                                const Clock* clock);
  // Any transport (tests: a fake). From `config` only the credentials and base_path are used.
  KubeClient(std::unique_ptr<HttpTransport> transport, const KubeConfig& config,
             KubeClientOptions options, const Clock* clock);
  ~KubeClient();
  KubeClient(const KubeClient&) = delete;
  KubeClient& operator=(const KubeClient&) = delete;

  absl::StatusOr<nlohmann::json> Get(const std::string& path);
  absl::StatusOr<nlohmann::json> Create(const std::string& path, const nlohmann::json& body);
  absl::StatusOr<nlohmann::json> Update(const std::string& path, const nlohmann::json& body);
  absl::StatusOr<nlohmann::json> Patch(const std::string& path, PatchType type,
                                       const nlohmann::json& patch);
  // DELETE: OK on 200 (the object, or its last state) and 202 (deletion accepted, finalizers
  // pending); a missing object is NotFound, as for the other calls (callers that only want it
  // gone treat that as done).
  absl::Status Delete(const std::string& path);

  // `path` may carry a query already (a fieldSelector); `resource_version` "" starts from
  // the server's current state.
  absl::Status Watch(const std::string& path, const std::string& resource_version,
                     const WatchHandler& handler);

  void Cancel();

 private:
  absl::StatusOr<nlohmann::json> Call(const std::string& method, const std::string& path,
                                      const std::string& content_type, const std::string* body);
  // Waits on the Clock until `until`; false when cancelled.
  bool SleepUntil(MonoTime until);
  absl::Duration Backoff(int failures);
  // The wait a 429/5xx response asks for: its Retry-After, or backoff.
  absl::Duration RetryDelay(const HttpResponse& response, int failures);
  absl::StatusOr<HttpRequest> NewRequest(const std::string& method, const std::string& target,
                                         std::string* token_sent);
  absl::Status UnauthorizedError(const std::string& what, const HttpResponse& response);

  std::unique_ptr<HttpTransport> transport_;
  const std::string base_path_;
  BearerToken token_;
  const bool has_token_;
  const KubeClientOptions options_;
  const Clock* const clock_;
  TokenBucket bucket_;
  std::atomic<bool> cancelled_{false};
  absl::Mutex mu_;
  bool cancelled_flag_ ABSL_GUARDED_BY(mu_) = false;  // cancelled_, for waits' Condition
};

// An error for `what` ("GET /api/v1/nodes/n1") from a response with a non-2xx status,
// carrying its Status object when the body is one.
absl::Status ApiError(const std::string& what, const HttpResponse& response);

// Percent-encodes a query parameter value (RFC 3986 unreserved characters pass).
std::string QueryEscape(absl::string_view value);

}  // namespace gpulet::kube

#endif  // GPULET_KUBE_KUBE_CLIENT_H_
