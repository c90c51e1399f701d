#include "gpu/gpu_library.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gpulet::gpu {

std::string SystemInfo::CudaVersionString() const {
  if (cuda_driver_version <= 0) return "";
  return absl::StrCat(cuda_driver_version / 1000, ".", (cuda_driver_version % 1000) / 10);
}

absl::Status GpuLibrary::SetMemoryLimit(unsigned index, const std::string& cgroup,
                                        uint64_t /*hard_bytes*/, absl::Duration /*timeout*/) {
  return absl::UnimplementedError(absl::StrCat("cannot set the driver's VRAM limit of ", cgroup,
                                               " on GPU ", index,
                                               ": this GPU library has no such call"));
}

}  // namespace gpulet::gpu
