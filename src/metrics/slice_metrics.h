// The VRAM slices' figures for /metrics and /status (docs/sharing.md): each sampling round
// reads every allocation's slice file under the slices' host directory, as the enforcement
// library in the containers keeps them, and names the container holding it when pod
// attribution knows (a device-plugin allocation's directory is named after its lowest slice
// ID; a DRA claim's slice file names the claim).
//
// Thread-safety: pure functions over values and read-only files.
#ifndef GPULET_METRICS_SLICE_METRICS_H_
#define GPULET_METRICS_SLICE_METRICS_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "metrics/pod_attribution.h"
#include "state/device_store.h"
#include "vram/slice_file.h"

namespace gpulet::metrics {

// A slice's memory as the driver counts it: NVML's per-process figures on its GPU, which
// include each process's CUDA context (memory no allocation call shows the library).
struct SliceDeviceUse {
  struct Process {
    unsigned pid = 0;  // as this process sees it
    std::string name;  // comm; "" when unknown
    // starttime from /proc/<pid>/stat: tells this process from a later one given its PID.
    std::optional<uint64_t> start_ticks;
    uint64_t driver_bytes = 0;   // NVML's figure; 0 when NVML does not list it
    uint64_t library_bytes = 0;  // the library's count; 0 when it did not load the library
    bool in_slice = false;       // holds a slot in the slice file
    // NVML's SM utilization of the process since the previous sample (percent); absent
    // when NVML gave none.
    std::optional<unsigned> sm_percent = std::nullopt;
  };
  uint64_t used_bytes = 0;  // the sum over `processes` of the larger of the two figures
  std::vector<Process> processes;
};

struct SliceSample {
  std::string name;  // the allocation directory's name
  vram::SliceUsage usage;
  // Absent when NVML did not answer for the slice's GPU this round.
  std::optional<SliceDeviceUse> device = std::nullopt;
};

// Every readable slice file in `local_dir`'s allocation directories, by name. A file that
// cannot be read is left out (a container being set up, or gone) and logged once per name
// at debug level.
std::vector<SliceSample> ReadSlices(const std::string& local_dir);

// The container holding a slice, from the PodResources map (null: attribution off).
std::optional<PodContainer> SliceHolder(const SliceSample& slice, const PodMap* pods);

// Appends gpulet_vram_{quota,used,peak}_bytes, gpulet_vram_processes and
// gpulet_vram_refused_total, one series per slice, gpulet_vram_device_used_bytes for each
// slice whose `device` is known, and gpulet_vram_compute_share_ratio,
// gpulet_vram_launch_rate and gpulet_vram_launch_wait_seconds_total for each slice with a
// compute share.
void AppendSliceMetrics(const std::vector<SliceSample>& slices, const state::Snapshot& snap,
                        const PodMap* pods, const std::string& hostname, bool openmetrics,
                        std::string* out);

// Appends gpulet_vram_enforcement: 1 per GPU with VRAM quotas, labelled with what holds
// them (`holders`: GPU UUID → "driver", "library", "none" or "refused").
void AppendVramEnforcement(const std::map<std::string, std::string>& holders,
                           const state::Snapshot& snap, const std::string& hostname,
                           bool openmetrics, std::string* out);

}  // namespace gpulet::metrics

#endif  // GPULET_METRICS_SLICE_METRICS_H_
