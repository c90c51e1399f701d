// The VRAM slices' figures for /metrics and /status (docs/sharing.md): each sampling round
// reads every allocation's slice file under the slices' host directory, as the enforcement
// library in the containers keeps them, and names the container holding it when pod
// attribution knows (a device-plugin allocation's directory is named after its lowest slice
// ID; a DRA claim's slice file names the claim).
//
// Thread-safety: pure functions over values and read-only files.
#ifndef GPULET_METRICS_SLICE_METRICS_H_
#define GPULET_METRICS_SLICE_METRICS_H_

#include <optional>
#include <string>
#include <vector>

#include "metrics/pod_attribution.h"
#include "state/device_store.h"
#include "vram/slice_file.h"

namespace gpulet {

struct SliceSample {
  std::string name;  // the allocation directory's name
  vram::SliceUsage usage;
};

// Every readable slice file in `local_dir`'s allocation directories, by name. A file that
// cannot be read is left out (a container being set up, or gone) and logged once per name
// at debug level.
std::vector<SliceSample> ReadSlices(const std::string& local_dir);

// The container holding a slice, from the PodResources map (null: attribution off).
std::optional<PodContainer> SliceHolder(const SliceSample& slice, const PodMap* pods);

// Appends gpulet_vram_{quota,used,peak}_bytes, gpulet_vram_processes and
// gpulet_vram_refused_total, one series per slice.
void AppendSliceMetrics(const std::vector<SliceSample>& slices, const Snapshot& snap,
                        const PodMap* pods, const std::string& hostname, bool openmetrics,
                        std::string* out);

}  // namespace gpulet

#endif  // GPULET_METRICS_SLICE_METRICS_H_
