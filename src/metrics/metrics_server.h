// MetricsServer: gpulet's HTTP endpoint: /metrics (Prometheus text or OpenMetrics), /healthz,
// and /status (per-GPU health, use and processes as JSON, read by `gpulet status`), served by
// http::Server (http/server.h: connections, limits, TLS and basic auth from a Prometheus
// web-config file; /healthz never asks for auth).
//
// Every handler only copies prebuilt data (the sampler's exposition, store snapshots), so
// its cost does not depend on NVML and a hung GPU cannot stall it. /metrics and /status are
// gzip-compressed when the client's Accept-Encoding allows gzip; the exposition's responses
// (plain and compressed) are made once per sampler round and reused. Sample ages in /status
// are measured on the injected clock.
//
// Thread-safety: Start/Stop from one thread (the main thread); handlers run on the server's
// thread ("gpulet-http").
#ifndef GPULET_METRICS_METRICS_SERVER_H_
#define GPULET_METRICS_METRICS_SERVER_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "http/server.h"
#include "metrics/sampler.h"
#include "state/device_store.h"

namespace gpulet::metrics {

class MetricsServer {
 public:
  MetricsServer(const Sampler* sampler, const state::DeviceStore* store, http::WebConfig web,
                const Clock* clock = RealClock(), http::Limits limits = http::Limits());
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
  int port() const { return server_.port(); }

  // The /status document (also used by tests); sample ages are measured at `now`.
  static std::string StatusJson(const state::Snapshot& snap, const SampleSet& samples,
                                absl::Time now);
  // At the real clock's time.
  static std::string StatusJson(const state::Snapshot& snap, const SampleSet& samples);

 private:
  // The answer to one request, on the server's thread.
  http::Response Serve(const http::Request& request) const;

  const Sampler* sampler_;
  const state::DeviceStore* store_;
  const Clock* clock_;
  http::Server server_;
};

}  // namespace gpulet::metrics

#endif  // GPULET_METRICS_METRICS_SERVER_H_
