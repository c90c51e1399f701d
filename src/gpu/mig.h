// MIG (Multi-Instance GPU) naming: the profile name of a MIG device, as NVIDIA's tools write
// it ("1g.18gb", "1c.3g.71gb"), from what nvmlDeviceGetAttributes_v2 reports.
//
// The name is what users request (nvidia.com/mig-1g.18gb) and what dcgm-exporter puts in
// GPU_I_PROFILE, so it must match NVIDIA's rule exactly: the memory part is the instance's
// share of the GPU's memory rounded up to an eighth, times the GPU's memory in whole GiB
// (rounded up), rounded to the nearest integer (go-nvlib, pkg/nvlib/device/mig_profile.go,
// getMigMemorySizeGB). Media-extension variants ("+me") cannot be told apart from the
// attributes and get the plain name.
//
// Thread-safety: pure functions.
#ifndef GPULET_GPU_MIG_H_
#define GPULET_GPU_MIG_H_

#include <cstdint>
#include <string>

namespace gpulet::gpu {

// The memory part of a profile name, in GB: `instance_mib` of a GPU with `gpu_total_bytes`.
uint64_t MigMemoryGb(uint64_t gpu_total_bytes, uint64_t instance_mib);

// "<gi>g.<GB>gb", or "<ci>c.<gi>g.<GB>gb" when the compute instance has fewer slices than its
// GPU instance. Empty when the slice counts or sizes are zero (not a MIG device).
std::string MigProfileName(unsigned gpu_instance_slices, unsigned compute_instance_slices,
                           uint64_t instance_mib, uint64_t gpu_total_bytes);

}  // namespace gpulet::gpu

#endif  // GPULET_GPU_MIG_H_
