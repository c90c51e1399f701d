// EventMonitor: the XID signal sources of `gpulet serve`, feeding one XidPolicy.
//
// Three threads: "gpulet-nvml-evt" waits on NVML's event set (XidCriticalError and the ECC
// bits each GPU supports); "gpulet-kmsg" reads the kernel log (/dev/kmsg under the host
// root, starting with what is already in the buffer so XIDs from before a restart count),
// scanning it for XID lines, fallen-off-the-bus messages and PCI → UUID mappings; and
// "gpulet-xid-tick", a PeriodicWorker that lets the policy clear conditions whose quiet
// period has passed.
//
// Stopping: the kernel-log thread blocks in KernelLogSource::Wait with no timeout and is
// woken by KernelLogSource::Interrupt; the tick worker and every back-off wait on the clock
// with the stop flag, so both end at once. NVML's event wait (nvmlEventSetWait) cannot be
// interrupted, so the NVML thread waits in slices of Options::event_wait and Stop() may
// wait out the slice in progress (200 ms by default); GpuLibrary has no way to cut it short.
//
// Time: XIDs are stamped with Options::clock's wall time (the policy's de-duplication
// window and quiet period compare those stamps); ticks and back-offs use its monotonic time.
//
// Thread-safety: Start/Stop from one thread; everything else runs on the monitor's threads.
#ifndef GPULET_HEALTH_EVENT_MONITOR_H_
#define GPULET_HEALTH_EVENT_MONITOR_H_

#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/periodic_worker.h"
#include "gpu/gpu_library.h"
#include "health/kmsg_source.h"
#include "health/xid_policy.h"

namespace gpulet::health {

class EventMonitor {
 public:
  struct Options {
    const Clock* clock = RealClock();
    // One NVML event wait; also the longest Stop() can take (see above).
    absl::Duration event_wait = absl::Milliseconds(200);
    // How often the policy's quiet periods are checked.
    absl::Duration tick_interval = absl::Seconds(1);
    // Pause after a failed NVML wait (a lost GPU fails it at once) or kernel-log read.
    absl::Duration error_backoff = absl::Milliseconds(500);
  };

  // `library` may be null (no NVML); `kmsg` may be null (kernel log disabled or unreadable).
  EventMonitor(gpu::GpuLibrary* library, unsigned gpu_count, std::unique_ptr<KernelLogSource> kmsg,
               XidPolicy* policy, Options options);
  // With the default Options (the real clock).
  EventMonitor(gpu::GpuLibrary* library, unsigned gpu_count, std::unique_ptr<KernelLogSource> kmsg,
               XidPolicy* policy);
  ~EventMonitor();

  void Start();
  void Stop();

 private:
  void NvmlLoop();
  void KmsgLoop();
  // Waits `d` on the clock or until Stop; false when stopping.
  bool Pause(absl::Duration d);
  bool stopping() const;

  gpu::GpuLibrary* library_;
  unsigned gpu_count_;
  std::unique_ptr<KernelLogSource> kmsg_;
  XidPolicy* policy_;
  const Options options_;
  std::unique_ptr<PeriodicWorker> tick_;  // Start/Stop only
  std::thread nvml_thread_, kmsg_thread_;
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace gpulet::health

#endif  // GPULET_HEALTH_EVENT_MONITOR_H_
