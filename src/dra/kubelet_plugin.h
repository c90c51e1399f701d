// KubeletPlugin: keeps gpulet's DRA driver known to the kubelet: the DRA service
// (dra_service.h) on <kubelet-dir>/plugins/<driver>/dra.sock and its registration
// (registration.h) on <kubelet-dir>/plugins_registry/<driver>-reg.sock.
//
// Start serves the DRA service first and the registration second, so that the kubelet, which
// dials the endpoint as soon as it sees the registration socket, always finds it. A kubelet
// restart needs nothing from us (the new kubelet finds the socket still there and calls
// GetInfo again); but a socket deleted from under us (a cleaned directory, an operator) would
// leave the driver unknown for good, so one thread ("gpulet-dra") watches the registry
// directory with inotify, checks both sockets at least every `recheck` and serves again
// whatever was lost (the DRA service before the registration). Stop withdraws the
// registration first, then keeps the service until no call has arrived for kDrainQuiet
// (kDrainAtMost in all; set_drain), then stops it: the kubelet may have picked this instance just
// before the registration went, and that call is served rather than refused. With SetHealthSource,
// the DRA socket also serves the kubelet's device-health stream (health_service.h).
//
// Rolling updates: with an `instance` (the pod UID) the sockets are
// <driver>-<instance>-reg.sock and dra-<instance>.sock (DraPaths), so an old and a new gpulet
// pod serve side by side; the kubelet (1.33+) calls the most recently registered instance of
// a driver and falls back to another when that one's socket goes. Each instance removes only
// its own sockets. Start also removes the sockets of other instances of the same driver (any
// instance name, and none) that are stale, i.e. whose connect() is refused: no process
// listens on them any more (an instance killed with SIGKILL); a served socket is never
// touched.
//
// Thread-safety: Start/Stop from one owning thread; the accessors from any thread.
// `claims` must outlive the object.
#ifndef GPULET_DRA_KUBELET_PLUGIN_H_
#define GPULET_DRA_KUBELET_PLUGIN_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/dir_watcher.h"
#include "dra/dra_service.h"
#include "dra/prepared_claims.h"
#include "dra/registration.h"

namespace gpulet::dra {

class KubeletPlugin {
 public:
  // `instance`: "" or the pod UID (CheckInstanceName; Start refuses anything else).
  KubeletPlugin(std::string driver, std::string kubelet_dir, PreparedClaims* claims,
                absl::Duration recheck = absl::Seconds(1), std::string instance = "");
  ~KubeletPlugin();
  KubeletPlugin(const KubeletPlugin&) = delete;
  KubeletPlugin& operator=(const KubeletPlugin&) = delete;

  // Serves DRAResourceHealth from `store` on the DRA socket too (DraPluginServer::
  // SetHealthSource); before Start.
  void SetHealthSource(const state::DeviceStore* store, HealthService::Options options) {
    service_.SetHealthSource(store, std::move(options));
  }

  // Removes stale sockets of other instances (logged), serves both sockets and starts the
  // watch thread. Errors (a driver name that is not a DNS subdomain, an instance that is not
  // a pod UID, a socket path too long, a directory that cannot be made or served in) name the
  // name or path; nothing is left running.
  absl::Status Start();
  void Stop();

  // Stop's drain: the kubelet's call on its way arrives within milliseconds of its pick, so a
  // quarter second without calls means none is coming; a kubelet that keeps calling (it has
  // not noticed the registration go) is cut off after two seconds.
  static constexpr absl::Duration kDrainQuiet = absl::Milliseconds(250);
  static constexpr absl::Duration kDrainAtMost = absl::Seconds(2);
  // Other bounds for Stop's drain (tests); from the owning thread, before Stop.
  void set_drain(absl::Duration quiet, absl::Duration at_most) {
    drain_quiet_ = quiet;
    drain_at_most_ = at_most;
  }

  // How often lost sockets were served again since Start (for tests and status).
  int reserves() const { return reserves_.load(); }
  RegistrationServer::Verdict verdict() const { return registration_.verdict(); }
  const DraPaths& paths() const { return paths_; }
  const std::string& instance() const { return instance_; }
  // The stale sockets of other instances the last Start removed (for tests and status).
  const std::vector<std::string>& removed_stale() const { return removed_stale_; }
  const RegistrationServer& registration() const { return registration_; }
  const DraPluginServer& service() const { return service_; }

 private:
  void Run();
  void RemoveStaleInstances();

  const std::string instance_;
  const DraPaths paths_;
  const absl::Duration recheck_;
  absl::Duration drain_quiet_ = kDrainQuiet;
  absl::Duration drain_at_most_ = kDrainAtMost;
  DraPluginServer service_;
  RegistrationServer registration_;
  std::unique_ptr<DirWatcher> watcher_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> reserves_{0};
  std::vector<std::string> removed_stale_;  // written by Start only
};

}  // namespace gpulet::dra

#endif  // GPULET_DRA_KUBELET_PLUGIN_H_
