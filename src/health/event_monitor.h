// EventMonitor: the XID signal sources of `gpulet serve`, feeding one XidPolicy.
//
// Two threads: "health-nvml-events" waits on NVML's event set (XidCriticalError and the ECC
// bits each GPU supports) and "health-kmsg" reads the kernel log (/dev/kmsg under the host
// root, starting with what is already in the buffer so XIDs from before a restart count),
// scanning it for XID lines, fallen-off-the-bus messages and PCI → UUID mappings. The
// policy's quiet-period recovery is ticked by the kmsg thread's loop.
//
// Thread-safety: Start/Stop from one thread; everything else runs on the monitor's threads.
#ifndef GPULET_HEALTH_EVENT_MONITOR_H_
#define GPULET_HEALTH_EVENT_MONITOR_H_

#include <atomic>
#include <memory>
#include <thread>

#include "gpu/gpu_library.h"
#include "health/kmsg_source.h"
#include "health/xid_policy.h"

namespace gpulet {

class EventMonitor {
 public:
  // `library` may be null (no NVML); `kmsg` may be null (kernel log disabled or unreadable).
  EventMonitor(GpuLibrary* library, unsigned gpu_count, std::unique_ptr<KernelLogSource> kmsg,
               XidPolicy* policy);
  ~EventMonitor();

  void Start();
  void Stop();

 private:
  void NvmlLoop();
  void KmsgLoop();

  GpuLibrary* library_;
  unsigned gpu_count_;
  std::unique_ptr<KernelLogSource> kmsg_;
  XidPolicy* policy_;
  std::atomic<bool> stop_{false};
  std::thread nvml_thread_, kmsg_thread_;
};

}  // namespace gpulet

#endif  // GPULET_HEALTH_EVENT_MONITOR_H_
