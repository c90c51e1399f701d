// LivenessMonitor: notices GPUs that stop answering and brings them back when they answer
// again.
//
// Every probe interval it asks each GPU for its UUID through GpuLibrary::Probe, under a
// short deadline. A GPU that returns GPU_IS_LOST or RESET_REQUIRED, whose handle cannot be
// opened, or that does not answer in time (a hung GPU) gets an Unhealthy "liveness"
// condition in the DeviceStore at once, with the reason and the action. When it answers
// again and has stayed answering for the quiet period, the condition is cleared. The same
// probe reads row remapping on GPUs that have it: a failed remap takes the GPU out, a pending
// one marks it Degraded until a reset applies it (condition source "row-remap"). A GPU that
// fails again and again (kMaxFailures within an hour) stays out until gpulet restarts: a
// card that flaps would otherwise keep killing the pods scheduled onto it.
//
// Thread-safety: Start/Stop from one thread; the monitor runs on its own thread
// ("health-liveness"); ProbeOnce is for tests and must not run concurrently with it.
#ifndef GPULET_HEALTH_LIVENESS_H_
#define GPULET_HEALTH_LIVENESS_H_

#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "config/config.h"
#include "gpu/gpu_library.h"
#include "state/device_store.h"

namespace gpulet {

class LivenessMonitor {
 public:
  static constexpr int kMaxFailures = 3;

  struct Options {
    absl::Duration interval = absl::Seconds(1);
    absl::Duration probe_timeout = absl::Seconds(1);
    absl::Duration quiet_period = absl::Minutes(5);
  };

  LivenessMonitor(GpuLibrary* library, DeviceStore* store, Options options);
  ~LivenessMonitor();

  void Start();
  void Stop();

  // One round over every GPU NVML knows.
  void ProbeOnce(absl::Time now);

 private:
  void CheckRowRemapping(const Gpu& gpu, const ProbeAnswer& answer, absl::Time now);

  struct Track {
    absl::Time last_failure = absl::InfinitePast();
    std::vector<absl::Time> failures;  // transitions into failure, for the flap limit
    bool failing = false;
  };

  GpuLibrary* library_;
  DeviceStore* store_;
  Options options_;
  std::map<std::string, Track> tracks_;  // by UUID; monitor thread only
  std::thread thread_;
  std::atomic<bool> stop_{false};
};

}  // namespace gpulet

#endif  // GPULET_HEALTH_LIVENESS_H_
