// VRAM slice samples and a snapshot of the GPU they are on, for the tests of the rules that
// read them (daemon/slice_events, daemon/slice_guard).
//
// Thread-safety: functions returning values.
#ifndef GPULET_TESTING_SLICES_H_
#define GPULET_TESTING_SLICES_H_

#include <cstdint>
#include <string>

#include "metrics/slice_metrics.h"
#include "state/device_store.h"

namespace gpulet::testing {

// A device plugin's 4 GiB slice on GPU-b, as ReadSlices gives it (no driver's count yet).
inline metrics::SliceSample FourGiBSlice(const std::string& name) {
  metrics::SliceSample s;
  s.name = name;
  s.usage.gpu_uuid = "GPU-b";
  s.usage.owner = "nvidia.com/gpu-memory GPU-b::mem0";
  s.usage.quota_bytes = uint64_t{4} << 30;
  return s;
}

// The store's view of GPU-b, at index 1.
inline state::Snapshot OneGpu() {
  state::Snapshot s;
  state::DeviceRecord d;
  d.gpu.index = 1;
  d.gpu.uuid = "GPU-b";
  s.devices.push_back(d);
  return s;
}

}  // namespace gpulet::testing

#endif  // GPULET_TESTING_SLICES_H_
