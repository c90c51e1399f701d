// The GPU list rule of config keys that name GPUs (dra.gpus): "all", or GPU indexes and
// UUIDs. The device plugin (through Config::DraOffers) and the DRA driver's slices
// (dra::Offers) ask it the same question, so a GPU is offered by exactly one of them.
//
// Thread-safety: a pure function.
#ifndef GPULET_GPU_GPU_LIST_H_
#define GPULET_GPU_GPU_LIST_H_

#include <optional>
#include <string>
#include <vector>

namespace gpulet::gpu {

// Whether `list` names the GPU with `index` (nullopt: NVML gave it none) and `uuid`.
bool GpuListNames(const std::vector<std::string>& list, std::optional<int> index,
                  const std::string& uuid);

}  // namespace gpulet::gpu

#endif  // GPULET_GPU_GPU_LIST_H_
