// PluginManager: keeps gpulet registered with the kubelet, whatever the kubelet does.
//
// It owns one DevicePluginServer per advertised resource and one thread ("gpulet-plugin")
// that: serves first, then registers once kubelet.sock exists (retrying with backoff while
// it is absent or refuses); watches the device-plugins directory with inotify, and when
// kubelet.sock is re-created or our own socket is deleted (a kubelet restart does both)
// re-serves and re-registers at once. It never exits because the kubelet went away.
//
// The registration back-off runs on the injected clock's monotonic time; the thread waits in
// DirWatcher (inotify, real time), and Stop()/Reconfigure() wake it at once. Stop also
// cancels a Register call in flight: a kubelet that accepts the connection and never answers
// would otherwise hold gpulet's shutdown for the call's whole 5 s timeout.
//
// A registration the kubelet refuses (it answered with an error) moves that resource to a new
// socket name (NextSocketName) before the retry. Kubelet 1.37 refuses a registration whose
// endpoint path it still counts as connected, which happens when gpulet re-registers right
// after a reload restarted its server there, and after refusing it never lets that path go
// (the refusal drops the old connection's bookkeeping, so its end is never seen): every later
// registration at that path fails the same way. Found by `make e2e` (docs/e2e.md).
//
// Thread-safety: Start/Reconfigure/Stop are called from the main thread; the watch thread
// owns the servers while running (Reconfigure hands it a new config through a mailbox).
#ifndef GPULET_PLUGIN_PLUGIN_MANAGER_H_
#define GPULET_PLUGIN_PLUGIN_MANAGER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/dir_watcher.h"
#include "config/config.h"
#include "plugin/plugin_server.h"
#include "state/device_store.h"

namespace gpulet::plugin {

// The socket name to serve a resource under after the kubelet refused `name`:
// "gpulet-gpu.sock" -> "gpulet-gpu.r1.sock" -> "gpulet-gpu.r2.sock".
std::string NextSocketName(const std::string& name);

class PluginManager {
 public:
  PluginManager(state::DeviceStore* store, ControlNodes control, const Clock* clock = RealClock(),
                SliceFiles slice_files = {});
  ~PluginManager();
  PluginManager(const PluginManager&) = delete;
  PluginManager& operator=(const PluginManager&) = delete;

  // Creates <kubelet_dir>/device-plugins if needed, starts the servers and the watch
  // thread. Fails only when the directory cannot be used at all.
  absl::Status Start(std::shared_ptr<const config::Config> config);

  // Replaces the config: servers are rebuilt and re-registered.
  void Reconfigure(std::shared_ptr<const config::Config> config);

  // Stops the thread and the servers; sockets are removed.
  void Stop();

  // Looks at the store's MIG layout now rather than within a second (the MIG watcher calls
  // it after a change). Thread-safe.
  void Wake();

  // Successful Register calls so far (for tests and benchmarks).
  int registrations() const { return registrations_.load(); }

 private:
  void Run();
  // Rebuilds the server set when the store's MIG layout calls for other resources; keeps
  // `registered` in step with servers_. Watch thread only.
  void FollowLayout(std::vector<bool>* registered);
  // Stops server `i` and serves its resource again under NextSocketName. Watch thread only.
  void MoveToNewSocket(size_t i);

  state::DeviceStore* store_;
  ControlNodes control_;
  SliceFiles slice_files_;
  const Clock* clock_;
  std::string plugin_dir_;
  std::string kubelet_socket_;
  std::thread thread_;
  std::unique_ptr<DirWatcher> watcher_;  // created by Start
  std::atomic<bool> stop_{false};
  std::atomic<int> registrations_{0};
  RegisterCancel register_cancel_;  // Stop ends a Register the kubelet never answers
  absl::Mutex mu_;
  std::shared_ptr<const config::Config> pending_config_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const config::Config> config_;  // owned by the watch thread after Start
  std::vector<std::unique_ptr<DevicePluginServer>> servers_;  // watch thread only
  uint64_t layout_version_ = 0;  // store version FollowLayout last looked at (watch thread)
  std::string mig_error_;        // the MIG layout error last logged (watch thread)
};

}  // namespace gpulet::plugin

#endif  // GPULET_PLUGIN_PLUGIN_MANAGER_H_
