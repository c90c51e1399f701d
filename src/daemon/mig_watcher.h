// MigWatcher: keeps the DeviceStore's MIG layouts current while an operator (nvidia-smi,
// mig-parted, a GPU operator) changes them under a running gpulet.
//
// Every interval it reads the MIG mode and devices of each MIG-capable GPU the store knows
// (GpuLibrary::GetMigLayout, on the GPU's NVML lane) and hands them to the store, which
// publishes a new snapshot only when something changed; ListAndWatch streams, the metrics
// and the plugin manager follow the store. `on_change` (optional) runs after a change, on
// the watcher's thread, for what is not driven by the store (the CDI spec and labels files).
// A GPU whose layout cannot be read keeps its last layout; health sources report the GPU.
//
// The rule that decides what changed is the store's (SetMigLayout compares layouts); Tick()
// is public so tests drive it without the thread.
//
// Thread-safety: Start/Stop from the owning thread; Tick runs on the worker thread (or a
// test's), never twice at once.
#ifndef GPULET_DAEMON_MIG_WATCHER_H_
#define GPULET_DAEMON_MIG_WATCHER_H_

#include <functional>
#include <memory>

#include "absl/time/time.h"
#include "common/clock.h"
#include "common/periodic_worker.h"
#include "gpu/gpu_library.h"
#include "state/device_store.h"

namespace gpulet::daemon {

class MigWatcher {
 public:
  struct Options {
    absl::Duration interval = absl::Seconds(1);
    absl::Duration timeout = absl::Milliseconds(750);  // per GPU
    const Clock* clock = RealClock();
  };

  // `library` and `store` must outlive the watcher.
  MigWatcher(gpu::GpuLibrary* library, state::DeviceStore* store, Options options,
             std::function<void()> on_change = nullptr);
  ~MigWatcher();

  void Start();
  void Stop();

  // Reads every MIG-capable GPU's layout once; true when the store changed.
  bool Tick();

 private:
  gpu::GpuLibrary* library_;
  state::DeviceStore* store_;
  Options options_;
  std::function<void()> on_change_;
  std::unique_ptr<PeriodicWorker> worker_;
};

}  // namespace gpulet::daemon

#endif  // GPULET_DAEMON_MIG_WATCHER_H_
