#include "gpu/gpu_list.h"

namespace gpulet::gpu {

bool GpuListNames(const std::vector<std::string>& list, std::optional<int> index,
                  const std::string& uuid) {
  for (const std::string& g : list) {
    if (g == "all" || g == uuid || (index && g == std::to_string(*index))) return true;
  }
  return false;
}

}  // namespace gpulet::gpu
