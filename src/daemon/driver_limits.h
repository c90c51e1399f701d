// DriverLimits: the driver's own VRAM limit for each slice holder, where the node has it
// (issue 32; docs/sharing.md "The driver's own limits").
//
// Drivers from r615 hold a VRAM limit per cgroup themselves (nvmlDeviceSetMemoryLimits_v1,
// with the kernel's dmem cgroup controller): every byte counts there, the CUDA contexts
// included, which the enforcement library cannot see. Each sampling round, for every slice
// whose processes run, this sets the driver's hard limit of the holder's cgroup (the deepest
// cgroup holding all its processes: the container's, or the pod's for a DRA claim its
// containers share) to the slice's quota, once per cgroup and quota. The library stays
// loaded either way: it makes cuMemGetInfo and NVML report the quota.
//
// A GPU's quotas are held by the driver when the root cgroup's dmem.capacity lists the GPU,
// the GPU is not in MIG mode (the driver's limits are whole-GPU only), the driver has the
// call, and every running holder's limit is set; otherwise by the library alone. A holder
// whose cgroup cannot be named (a cgroup v1 host, a cgroup outside gpulet's cgroup
// namespace, the root cgroup) or whose cgroup holds another holder of the same GPU (the
// limit would cap both) gets no driver limit, and is logged once. The first Unimplemented
// answer (a driver without the call) ends the tries for this object's life: the daemon
// builds one with each metrics sampler, so until gpulet restarts or a reload rebuilds them.
//
// Thread-safety: Next() may be called from any thread and serialises with itself (the old
// and the new sampler of a reload may overlap); DriverHolds() may be called from any thread
// at any time (the scrape threads) and never waits for a driver call.
#ifndef GPULET_DAEMON_DRIVER_LIMITS_H_
#define GPULET_DAEMON_DRIVER_LIMITS_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/host_fs.h"
#include "gpu/gpu_library.h"
#include "metrics/slice_metrics.h"
#include "state/device_store.h"

namespace gpulet::daemon {

class DriverLimits {
 public:
  // `gpus` and `host` must outlive this.
  DriverLimits(gpu::GpuLibrary* gpus, const HostFs* host) : gpus_(gpus), host_(host) {}

  // One sampling round: sets what is missing, then records per GPU what holds its quotas.
  void Next(const std::vector<metrics::SliceSample>& slices, const state::Snapshot& snap,
            absl::Time now);

  // Whether the driver holds the VRAM quotas of GPU `uuid`, by the last round.
  bool DriverHolds(const std::string& uuid) const;

  // The limits set and still in force, by (GPU UUID, cgroup): the quota set.
  std::map<std::pair<std::string, std::string>, uint64_t> limits() const;

  // How long a read of dmem.capacity serves: it changes only when a driver loads.
  static constexpr absl::Duration kCapacityTtl = absl::Seconds(60);
  // The deadline of one nvmlDeviceSetMemoryLimits_v1 call.
  static constexpr absl::Duration kCallTimeout = absl::Seconds(5);

 private:
  using Key = std::pair<std::string, std::string>;  // GPU UUID, cgroup

  // Logs `message` once for `what` (until gpulet restarts).
  void LogOnce(const std::string& what, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(round_mu_);

  gpu::GpuLibrary* const gpus_;
  const HostFs* const host_;

  absl::Mutex round_mu_;
  std::string capacity_ ABSL_GUARDED_BY(round_mu_);
  absl::Time capacity_read_ ABSL_GUARDED_BY(round_mu_) = absl::InfinitePast();
  bool driver_refused_ ABSL_GUARDED_BY(round_mu_) = false;
  std::map<Key, uint64_t> set_ ABSL_GUARDED_BY(round_mu_);
  // What failed for a (key, quota): not tried again until the quota or the cgroup changes.
  std::set<std::pair<Key, uint64_t>> failed_ ABSL_GUARDED_BY(round_mu_);
  std::set<std::string> logged_ ABSL_GUARDED_BY(round_mu_);

  mutable absl::Mutex holds_mu_;
  std::map<std::string, bool> holds_ ABSL_GUARDED_BY(holds_mu_);
  std::map<Key, uint64_t> published_ ABSL_GUARDED_BY(holds_mu_);
};

}  // namespace gpulet::daemon

#endif  // GPULET_DAEMON_DRIVER_LIMITS_H_
