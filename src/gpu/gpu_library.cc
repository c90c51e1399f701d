#include "gpu/gpu_library.h"

#include "absl/strings/str_cat.h"

namespace gpulet::gpu {

std::string SystemInfo::CudaVersionString() const {
  if (cuda_driver_version <= 0) return "";
  return absl::StrCat(cuda_driver_version / 1000, ".", (cuda_driver_version % 1000) / 10);
}

}  // namespace gpulet::gpu
