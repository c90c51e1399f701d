// DraPluginServer: the kubelet DRA service, `v1.DRAPlugin` and `v1beta1.DRAPlugin`
// (proto/dra/), served over gRPC on the unix socket the registration advertises
// (<kubelet-dir>/plugins/<driver>/dra.sock).
//
// Both versions are the same two calls: NodePrepareResources and NodeUnprepareResources take
// claim references and answer per claim UID. They translate between the protos and
// PreparedClaims (prepared_claims.h), which holds the idempotency and checkpoint rules and
// calls the ClaimPreparer; this class only serves. A failure is always reported per claim,
// never as a failed call, so that the kubelet keeps the other claims' answers; v1beta1 has no
// share IDs, so a share's ID is dropped there.
//
// With a health source (SetHealthSource), the same socket also serves
// `v1alpha1.DRAResourceHealth` (health_service.h): the kubelet calls it on the DRA endpoint and
// treats Unimplemented as "this driver reports no health", so without a source it is absent.
//
// The socket's directory is created (mode 0750) when missing; the socket is mode 0600 and
// removed by Stop unless it was replaced meanwhile.
//
// Thread-safety: Start/Drain/Stop are called from one owning thread; running() and SocketIntact()
// from any; RPCs run on gRPC's threads. `claims` (and a health source's store) must outlive
// the server.
#ifndef GPULET_DRA_DRA_SERVICE_H_
#define GPULET_DRA_DRA_SERVICE_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dra/health_service.h"
#include "dra/prepared_claims.h"
#include "dra/socket_server.h"

namespace grpc {
class Server;
}

namespace gpulet::dra {

class DraPluginServer {
 public:
  DraPluginServer(std::string socket_path, PreparedClaims* claims);
  ~DraPluginServer();
  DraPluginServer(const DraPluginServer&) = delete;
  DraPluginServer& operator=(const DraPluginServer&) = delete;

  // Serves DRAResourceHealth from `store` too, with `options.pool` as the pool name (the node
  // name); from the next Start on. nullptr: not served.
  void SetHealthSource(const state::DeviceStore* store, HealthService::Options options);

  // Creates the directory if needed, removes a stale socket and serves both versions. Errors
  // name the path and what to do. Idempotent while running.
  absl::Status Start();
  // Keeps serving until no Prepare or Unprepare call has arrived for `quiet` (counted from
  // the later of this call and the last arrival), `at_most` in all; returns how many arrived
  // meanwhile. For the time between withdrawing the registration and Stop: a kubelet that
  // picked this endpoint just before the registration went still has a call on its way
  // (in a rolling update, the kubelet may pick the old instance an instant before the new
  // one registers), and a server already shut down would fail it. 0 when not running.
  int Drain(absl::Duration quiet, absl::Duration at_most);
  // Finishes in-flight calls (2 s at most), stops serving, removes the socket if ours.
  void Stop();
  bool running() const { return server_.running(); }
  // Serving, and the socket file is still the one Start created.
  bool SocketIntact() const { return server_.SocketIntact(); }

  const std::string& socket_path() const { return server_.socket_path(); }

 private:
  class V1Service;
  class V1beta1Service;

  // When the last Prepare or Unprepare call arrived (RealClock()'s monotonic time, in ns
  // since its origin), and how many have; the services write it on gRPC's threads, Drain
  // reads it.
  struct CallClock {
    std::atomic<int64_t> last_ns{0};
    std::atomic<int> calls{0};
    void Arrived();
  };

  PreparedClaims* const claims_;
  CallClock clock_;
  // Set before Start, on the owning thread.
  const state::DeviceStore* health_store_ = nullptr;
  HealthService::Options health_options_;

  // Replaced only by Start/Stop, on the owning thread; they outlive the server that calls them.
  std::unique_ptr<V1Service> v1_;
  std::unique_ptr<V1beta1Service> v1beta1_;
  std::unique_ptr<HealthService> health_;
  SocketServer server_;
};

}  // namespace gpulet::dra

#endif  // GPULET_DRA_DRA_SERVICE_H_
