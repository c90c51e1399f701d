// The device IDs gpulet advertises to the kubelet, as strings: one format, used by the
// plugin (which makes them) and by pod attribution (which maps the IDs a pod holds back to
// GPUs). A leaf: standard library and absl strings only.
//
//   <base>           a whole GPU; base is the GPU's UUID, or "pci-<bus id>" when NVML
//                    gives none
//   <base>::<n>      time-slicing replica n (0-based)
//   <base>::mem<k>   memory slice k (0-based)
//
// The kubelet treats IDs as opaque; "::" appears in neither a UUID nor a bus id, so the
// physical GPU is everything before the first "::".
//
// Thread-safety: pure functions.
#ifndef GPULET_STATE_DEVICE_ID_H_
#define GPULET_STATE_DEVICE_ID_H_

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gpulet::state {

inline constexpr absl::string_view kDeviceIdSeparator = "::";
inline constexpr absl::string_view kMemorySliceInfix = "mem";

// The ID of a whole GPU.
inline std::string BaseDeviceId(absl::string_view uuid, absl::string_view bus_id) {
  return uuid.empty() ? absl::StrCat("pci-", bus_id) : std::string(uuid);
}

// Replica `n` of the GPU `base`.
inline std::string ReplicaDeviceId(absl::string_view base, int n) {
  return absl::StrCat(base, kDeviceIdSeparator, n);
}

// Memory slice `k` of the GPU `base`.
inline std::string MemorySliceDeviceId(absl::string_view base, int k) {
  return absl::StrCat(base, kDeviceIdSeparator, kMemorySliceInfix, k);
}

// The whole-GPU ID an advertised ID belongs to ("GPU-1::3" -> "GPU-1").
inline std::string PhysicalId(absl::string_view advertised_id) {
  return std::string(advertised_id.substr(0, advertised_id.find(kDeviceIdSeparator)));
}

}  // namespace gpulet::state

#endif  // GPULET_STATE_DEVICE_ID_H_
