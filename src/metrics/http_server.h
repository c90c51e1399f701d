// MetricsServer: gpulet's HTTP endpoint: /metrics (Prometheus text or OpenMetrics), /healthz,
// and /status (per-GPU health, use and processes as JSON, read by `gpulet status`).
//
// Every handler only copies prebuilt data (the sampler's exposition, store snapshots), so
// its cost does not depend on NVML and a hung GPU cannot stall it. Hygiene: TCP_NODELAY
// (cpp-httplib otherwise waits ~40 ms on delayed ACKs), read/write timeouts, a bounded
// worker pool, and optional TLS and basic auth from a Prometheus web-config file
// (tls_server_config.cert_file/key_file, basic_auth_users with bcrypt hashes).
//
// The listener runs on "gpulet-http"; cpp-httplib's worker pool threads are the library's
// and keep their default names. Sample ages in /status are measured on the injected clock.
//
// Thread-safety: Start/Stop from the main thread; handlers run on the server's pool.
#ifndef GPULET_METRICS_HTTP_SERVER_H_
#define GPULET_METRICS_HTTP_SERVER_H_

#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "metrics/sampler.h"
#include "state/device_store.h"

namespace httplib {
class Server;
}

namespace gpulet {

struct WebConfig {
  std::string cert_file, key_file;           // both set: serve HTTPS
  std::map<std::string, std::string> users;  // user → bcrypt hash
};

// Parses a Prometheus web-config file; errors name the file and key.
absl::StatusOr<WebConfig> LoadWebConfig(const std::string& path);

// Checks a password against a bcrypt (or other crypt(3)) hash.
bool CheckPassword(const std::string& password, const std::string& hash);

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
  const Clock* clock_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace gpulet

#endif  // GPULET_METRICS_HTTP_SERVER_H_
