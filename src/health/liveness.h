// LivenessMonitor: notices GPUs that stop answering and brings them back when they answer
// again.
//
// Every probe interval it asks each GPU for its UUID through GpuLibrary::Probe, under a
// short deadline. A GPU that returns GPU_IS_LOST or RESET_REQUIRED, whose handle cannot be
// opened, or that does not answer in time (a hung GPU) gets an Unhealthy "liveness"
// condition in the DeviceStore at once, with the reason and the action. When it answers
// again and has stayed answering for the quiet period, the condition is cleared. The same
// probe reads row remapping on GPUs that have it: a failed remap takes the GPU out, a pending
// one marks it Degraded until a reset applies it (condition source "row-remap"). On drivers
// that report it (R570+), the driver's recovery action (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)
// is followed too: GPU reset or node reboot takes the GPU out, drain-P2P and drain-and-reset
// mark it Degraded, NONE clears it (condition source "recovery-action"). A GPU that
// fails again and again (kMaxFailures within an hour) stays out until gpulet restarts: a
// card that flaps would otherwise keep killing the pods scheduled onto it.
//
// Time comes from Options::clock: the probe interval, the quiet period and the flap window
// are measured on its monotonic reading (a wall-clock step neither brings a GPU back early
// nor forgets its failures); condition timestamps are its wall time.
//
// Thread-safety: Start/Stop from one thread; the monitor runs on its own thread
// ("gpulet-liveness", a PeriodicWorker); ProbeOnce is for tests and must not run
// concurrently with it.
#ifndef GPULET_HEALTH_LIVENESS_H_
#define GPULET_HEALTH_LIVENESS_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/clock.h"
#include "common/periodic_worker.h"
#include "gpu/gpu_library.h"
#include "state/device_store.h"

namespace gpulet::health {

class LivenessMonitor {
 public:
  static constexpr int kMaxFailures = 3;

  struct Options {
    absl::Duration interval = absl::Seconds(1);
    absl::Duration probe_timeout = absl::Seconds(1);
    absl::Duration quiet_period = absl::Minutes(5);
    const Clock* clock = RealClock();
  };

  LivenessMonitor(gpu::GpuLibrary* library, state::DeviceStore* store, Options options);
  ~LivenessMonitor();

  void Start();
  void Stop();

  // One round over every GPU NVML knows, at the clock's current time.
  void ProbeOnce();

  // Takes over `old`'s per-GPU failure timers, so that a GPU it took out comes back when the
  // quiet period (this monitor's) has passed, and one it kept out for flapping stays out: a
  // reload that rebuilds the monitor while a GPU is out loses nothing. Both monitors must be
  // stopped.
  void AdoptFrom(const LivenessMonitor& old) { tracks_ = old.tracks_; }

 private:
  void CheckRowRemapping(const gpu::Gpu& gpu, const gpu::ProbeAnswer& answer, absl::Time now);
  void CheckRecoveryAction(const gpu::Gpu& gpu, const gpu::ProbeAnswer& answer, absl::Time now);
  // Raises `c` under `source` (or clears it when absent), publishing only changes.
  void Publish(const gpu::Gpu& gpu, const char* source,
               const std::optional<state::HealthCondition>& c, absl::Time now);

  struct Track {
    MonoTime last_failure;
    std::vector<MonoTime> failures;  // transitions into failure within the last hour
    bool failing = false;
    bool kept_out = false;  // hit the flap limit: out until gpulet restarts
  };

  gpu::GpuLibrary* library_;
  state::DeviceStore* store_;
  Options options_;
  std::map<std::string, Track> tracks_;     // by UUID; monitor thread only
  std::unique_ptr<PeriodicWorker> worker_;  // Start/Stop only
};

}  // namespace gpulet::health

#endif  // GPULET_HEALTH_LIVENESS_H_
