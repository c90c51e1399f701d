// MetricsServer: gpulet's HTTP endpoint: /metrics (Prometheus text or OpenMetrics), /healthz,
// and /status (per-GPU health, use and processes as JSON, read by `gpulet status`).
//
// Every handler only copies prebuilt data (the sampler's exposition, store snapshots), so
// its cost does not depend on NVML and a hung GPU cannot stall it. Hygiene: TCP_NODELAY
// (cpp-httplib otherwise waits ~40 ms on delayed ACKs), read/write timeouts, a bounded
// worker pool, and optional TLS and basic auth from a Prometheus web-config file
// (metrics/web_config.h: tls_server_config.cert_file/key_file, basic_auth_users with bcrypt
// hashes).
//
// The listener runs on "gpulet-http"; cpp-httplib's worker pool threads are the library's
// and keep their default names. Sample ages in /status are measured on the injected clock.
//
// Thread-safety: Start/Stop from the main thread; handlers run on the server's pool.
#ifndef GPULET_METRICS_HTTP_SERVER_H_
#define GPULET_METRICS_HTTP_SERVER_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "metrics/sampler.h"
#include "metrics/web_config.h"
#include "state/device_store.h"

namespace httplib {
class Server;
}

namespace gpulet {

// Checks a password against a bcrypt (or other crypt(3)) hash.
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

class MetricsServer {
 public:
  MetricsServer(const Sampler* sampler, const DeviceStore* store, WebConfig web,
                const Clock* clock = RealClock());
  ~MetricsServer();

  // Binds `address` (":9400", "127.0.0.1:9400", "[::1]:9400"; port 0 picks one) and serves
  // on a thread. Fails naming the address.
  absl::Status Start(const std::string& address);
  void Stop();
  int port() const { return port_; }

  // The /status document (also used by tests); sample ages are measured at `now`.
  static std::string StatusJson(const Snapshot& snap, const SampleSet& samples, absl::Time now);
  // At the real clock's time.
  static std::string StatusJson(const Snapshot& snap, const SampleSet& samples);

 private:
  const Sampler* sampler_;
  const DeviceStore* store_;
  WebConfig web_;
  BasicAuth auth_;
  const Clock* clock_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  // Set by the listener thread when listen_after_bind returns (Stop's wait ends then too).
  std::atomic<bool> listen_returned_{false};
  int port_ = 0;
};

}  // namespace gpulet

#endif  // GPULET_METRICS_HTTP_SERVER_H_
