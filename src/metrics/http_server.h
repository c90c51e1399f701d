// MetricsServer: gpulet's HTTP endpoint: /metrics (Prometheus text or OpenMetrics), /healthz,
// and /status (per-GPU health, use and processes as JSON, read by `gpulet status`).
//
// Every handler only copies prebuilt data (the sampler's exposition, store snapshots), so
// its cost does not depend on NVML and a hung GPU cannot stall it. /metrics and /status are
// gzip-compressed when the client's Accept-Encoding allows gzip; the compressed exposition is
// made once per sampler round and reused. Optional TLS and basic auth come from a Prometheus
// web-config file (metrics/web_config.h: tls_server_config.cert_file/key_file,
// basic_auth_users with bcrypt hashes); /healthz never asks for auth.
//
// Event-driven (libmicrohttpd, epoll): one thread, "gpulet-http", serves every connection,
// so an idle or slow connection costs a file descriptor and its buffer (HttpLimits), never a
// thread. Limits (HttpLimits): a connection must send a whole request header within
// `header_deadline` of its accept or of the end of its previous response (so a slowloris
// client, and an idle keep-alive connection, are closed then); a connection silent for
// `idle_timeout` is closed; at most `max_connections` are open: the next one closes the
// oldest connection that is waiting for a header, and when none is waiting the new
// connection is refused. The soft RLIMIT_NOFILE is raised (up to the hard limit) to fit the
// cap. These deadlines run on the real monotonic clock: they bound real sockets.
//
// bcrypt takes tens of milliseconds, so basic auth never runs on the event thread: the
// connection is suspended, a fixed pool ("gpulet-httpauth", `auth_threads`) checks the
// header and resumes it; other connections are served meanwhile. More than
// `max_pending_auth` waiting checks are answered 503 at once. Sample ages in /status are
// measured on the injected clock.
//
// Thread-safety: Start/Stop from one thread (the main thread); handlers run on
// "gpulet-http".
#ifndef GPULET_METRICS_HTTP_SERVER_H_
#define GPULET_METRICS_HTTP_SERVER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "metrics/sampler.h"
#include "metrics/web_config.h"
#include "state/device_store.h"

namespace gpulet {

// Checks a password against a bcrypt hash ($2a$, $2b$, $2x$ or $2y$; anything else is a
// mismatch), comparing in constant time.
bool CheckPassword(const std::string& password, const std::string& hash);

// BasicAuth: decides an HTTP "Authorization: Basic ..." header against the web config's
// basic_auth_users, in time that does not depend on whether the user exists. User names are
// compared without early exit, and an unknown user's password is checked against a fixed
// dummy bcrypt hash of the highest cost among the configured users, so an unknown user costs
// the same hash work as a known user with a wrong password (and is still refused).
//
// Thread-safety: immutable after construction; Authorize may run on any number of threads.
class BasicAuth {
 public:
  // Checks a password against a hash; CheckPassword unless a test injects another.
  using CheckFn = std::function<bool(const std::string& password, const std::string& hash)>;

  explicit BasicAuth(std::map<std::string, std::string> users, CheckFn check = CheckPassword);

  // True when `authorization` is "Basic <base64 user:password>" for a configured user whose
  // hash the password matches. Every header that names a user runs the check exactly once.
  bool Authorize(absl::string_view authorization) const;

  // The bcrypt setting ("$2b$<cost>$<salt>") an unknown user's password is checked against.
  const std::string& dummy_hash() const { return dummy_hash_; }

 private:
  std::map<std::string, std::string> users_;
  CheckFn check_;
  std::string dummy_hash_;
};

// What connections may cost the server; the defaults are gpulet's.
struct HttpLimits {
  // Time a connection has to send a whole request header, from its accept or from the end
  // of its previous response.
  absl::Duration header_deadline = absl::Seconds(10);
  // A connection that sends and receives nothing this long is closed (whole seconds).
  absl::Duration idle_timeout = absl::Seconds(10);
  // Open connections at most (see the file comment for what happens beyond).
  int max_connections = 2048;
  // Threads that check basic auth, and checks that may wait for them.
  int auth_threads = 2;
  int max_pending_auth = 64;
};

class MetricsServer {
 public:
  MetricsServer(const Sampler* sampler, const DeviceStore* store, WebConfig web,
                const Clock* clock = RealClock(), HttpLimits limits = HttpLimits());
  ~MetricsServer();

  // Binds `address` (":9400", "127.0.0.1:9400", "[::1]:9400"; port 0 picks one) and serves
  // on a thread. Fails naming the address (Unavailable) or the cert and key
  // (InvalidArgument, "cannot start HTTPS ..."); FailedPrecondition while already serving
  // (after Stop it may start again). `beside`: a server running on the same address that this
  // one replaces (a reload): the two share its listening socket (a duplicate descriptor), so
  // the port never closes, nothing else can take it in between, and a fixed port needs no
  // second bind.
  absl::Status Start(const std::string& address, const MetricsServer* beside = nullptr);
  // Closes the listener and every connection; idempotent, and fine before Start.
  void Stop();
  int port() const { return port_; }

  // The /status document (also used by tests); sample ages are measured at `now`.
  static std::string StatusJson(const Snapshot& snap, const SampleSet& samples, absl::Time now);
  // At the real clock's time.
  static std::string StatusJson(const Snapshot& snap, const SampleSet& samples);

 private:
  class Impl;
  // Serves on `fd` (bound and listening) through a new Impl.
  absl::Status Serve(const std::string& address, int fd, bool ipv6, int port);

  const Sampler* sampler_;
  const DeviceStore* store_;
  WebConfig web_;
  BasicAuth auth_;
  const Clock* clock_;
  HttpLimits limits_;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
  // While serving: the address it was started on and its listening socket (MHD's to close).
  std::string address_;
  int listen_fd_ = -1;
  bool ipv6_ = false;
};

}  // namespace gpulet

#endif  // GPULET_METRICS_HTTP_SERVER_H_
