// SliceGuard: what gpulet does about a VRAM slice holder over its quota by the driver's count
// (sharing.memorySlices.overQuota; docs/sharing.md).
//
// The enforcement library counts what allocation calls add. Each process's CUDA context
// (hundreds of MiB on a recent card) is memory no call shows it, so the sampler adds NVML's
// per-process figures (SliceSample::device). A holder whose figure is over its quota by more
// than the margin starts an episode: one Warning Event (GpuVramOverQuota) that names the
// process a kill would take, the holder's largest by the driver's count. With action kill,
// that process is killed (GpuVramOverQuotaKilled) once the holder has been over for the grace
// period, which starts again after each kill; the node's kills are budgeted per hour, and a
// kill the budget refuses, or that fails, is one Event (GpuVramOverQuotaNotKilled) per
// episode. The episode ends when the holder is back within quota and margin, or its slice is
// gone. Action event is the dry run: it says what a kill would take and kills nothing.
//
// Times are the injected clock's wall time, and the policy the configuration's, both passed
// in by the caller: each sampler's round callback holds the policy of the configuration it
// was built for, so a reload that is refused after the new sampler was built changes
// nothing here.
//
// Thread-safety: Next() may be called from any thread; an internal mutex serialises the
// calls (the old and the new sampler of a reload may overlap).
#ifndef GPULET_DAEMON_SLICE_GUARD_H_
#define GPULET_DAEMON_SLICE_GUARD_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cluster/node_health.h"
#include "config/config.h"
#include "metrics/pod_attribution.h"
#include "metrics/slice_metrics.h"
#include "state/device_store.h"

namespace gpulet::daemon {

// Kills one process of the host, and only the one that was sampled.
class ProcessKiller {
 public:
  virtual ~ProcessKiller() = default;
  // SIGKILL to `pid` if it is still the process that started at `start_ticks` (nullopt: not
  // known, and then it is not killed). NotFound: it is gone; FailedPrecondition: the PID now
  // names another process, or its start is unknown; PermissionDenied: this process may not
  // signal it (gpulet needs the host's PID namespace, hostPID: true); Internal: other errors.
  virtual absl::Status Kill(unsigned pid, std::optional<uint64_t> start_ticks) = 0;
};

// The real killer: opens <host_root>/proc/<pid> (which pins that very process: a PID reused
// later is another directory), checks its stat's start time, and signals it through that
// descriptor with pidfd_send_signal.
std::unique_ptr<ProcessKiller> MakeProcessKiller(std::string host_root);

class SliceGuard {
 public:
  explicit SliceGuard(ProcessKiller* killer) : killer_(killer) {}

  // The Events of one sampling round, after acting on it under `policy`.
  std::vector<cluster::NodeEvent> Next(const std::vector<metrics::SliceSample>& slices,
                                       const state::Snapshot& snap, const metrics::PodMap* pods,
                                       const config::Config::MemorySlices::OverQuota& policy,
                                       absl::Time now);

  // Processes killed since gpulet started (gpulet_vram_over_quota_kills_total).
  const std::atomic<uint64_t>* kills() const { return &kills_; }

 private:
  struct Episode {
    absl::Time grace_from;  // over since, or since the last kill
    bool refusal_told = false;
  };

  ProcessKiller* killer_;
  absl::Mutex mu_;
  std::map<std::string, Episode> episodes_ ABSL_GUARDED_BY(mu_);  // by slice name
  std::deque<absl::Time> kill_times_ ABSL_GUARDED_BY(mu_);        // within the last hour
  std::atomic<uint64_t> kills_{0};
};

}  // namespace gpulet::daemon

#endif  // GPULET_DAEMON_SLICE_GUARD_H_
