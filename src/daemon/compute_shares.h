// ComputeShares: gpulet's side of the compute share (docs/sharing.md, "Compute share").
//
// Each sampling round, for every slice whose file has a compute share (written at allocation
// under sharing.memorySlices.computeShare), the holder's SM time (NVML's per-process
// utilization of its processes, summed) and the cost units its processes launched since the
// last round (the slice file's counter, which the enforcement library keeps) give the next
// launch rate (vram::ComputeShareRule); it is written into the slice file, where the library
// paces the holder's kernel launches by it. A slice whose GPU NVML did not answer for keeps
// its rate; a slice that is gone is forgotten.
//
// Thread-safety: Next() may be called from any thread and serialises with itself (the old
// and the new sampler of a reload may overlap); rates() likewise.
#ifndef GPULET_DAEMON_COMPUTE_SHARES_H_
#define GPULET_DAEMON_COMPUTE_SHARES_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "metrics/slice_metrics.h"
#include "vram/compute_share.h"

namespace gpulet::daemon {

class ComputeShares {
 public:
  // `slice_dir`: where the slices' allocation directories are, as this process reaches them.
  explicit ComputeShares(std::string slice_dir) : slice_dir_(std::move(slice_dir)) {}

  void Next(const std::vector<metrics::SliceSample>& slices, absl::Time now);

  // The rate each paced slice was given last, by allocation directory name.
  std::map<std::string, uint64_t> rates() const;

 private:
  struct Holder {
    vram::ComputeShareRule rule;
    uint64_t units = 0;  // the slice file's launch counter at `at`
    absl::Time at;
    uint64_t written = 0;  // the rate in the file
    bool warned = false;   // a failure to write it was logged (once per slice)
  };

  const std::string slice_dir_;
  mutable absl::Mutex mu_;
  std::map<std::string, Holder> holders_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpulet::daemon

#endif  // GPULET_DAEMON_COMPUTE_SHARES_H_
