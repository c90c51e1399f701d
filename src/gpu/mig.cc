#include "gpu/mig.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace gpulet::gpu {

uint64_t MigMemoryGb(uint64_t gpu_total_bytes, uint64_t instance_mib) {
  if (gpu_total_bytes == 0) return 0;
  constexpr double kEighths = 8;
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  double share = static_cast<double>(instance_mib) * kMiB / static_cast<double>(gpu_total_bytes);
  share = std::ceil(share * kEighths) / kEighths;
  const double gpu_gb = static_cast<double>((gpu_total_bytes + kGiB - 1) / kGiB);
  return static_cast<uint64_t>(std::llround(share * gpu_gb));
}

std::string MigProfileName(unsigned gpu_instance_slices, unsigned compute_instance_slices,
                           uint64_t instance_mib, uint64_t gpu_total_bytes) {
  if (gpu_instance_slices == 0 || instance_mib == 0 || gpu_total_bytes == 0) return "";
  const uint64_t gb = MigMemoryGb(gpu_total_bytes, instance_mib);
  if (compute_instance_slices != 0 && compute_instance_slices < gpu_instance_slices) {
    return absl::StrCat(compute_instance_slices, "c.", gpu_instance_slices, "g.", gb, "gb");
  }
  return absl::StrCat(gpu_instance_slices, "g.", gb, "gb");
}

}  // namespace gpulet::gpu
