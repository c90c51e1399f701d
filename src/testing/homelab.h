// The homelab fixture's facts as tests need them: its two GPUs' UUIDs (RTX 3080 at
// 01:00.0, minor 0; RTX 5090 at 02:00.0, minor 1, driver 570.133.20), the inventory
// discovery builds for a fixture root when NVML reports given GPUs, and small helpers for
// tests that run the gpulet binary as the kubelet would see it.
//
// Thread-safety: pure functions.
#ifndef GPULET_TESTING_HOMELAB_H_
#define GPULET_TESTING_HOMELAB_H_

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gpu/gpu_model.h"
#include "node/pci_inventory.h"
#include "proto/deviceplugin/v1beta1/api.pb.h"

namespace gpulet::testing {

inline constexpr char kRtx3080[] = "GPU-3f9d6c2e-1b7a-4e0c-9d35-a1c2e3f43080";
inline constexpr char kRtx5090[] = "GPU-8a41d7b9-52c6-4f13-b0e8-7d2c9e155090";

// The host root of a bundled simulator fixture ("homelab", "h200", "dgx8").
inline std::string SimRoot(const std::string& fixture) {
  return absl::StrCat(GPULET_SOURCE_DIR, "/sim/fixtures/", fixture, "/root");
}

// The gpulet binary of this build.
inline std::string GpuletBinary() { return absl::StrCat(GPULET_BINARY_DIR, "/gpulet"); }

// What NVML would say identifies a GPU; `bus` without NVML's 8-digit domain.
inline gpu::DeviceIdentity GpuIdentity(unsigned index, const std::string& uuid,
                                       const std::string& bus, unsigned minor) {
  gpu::DeviceIdentity id;
  id.index = index;
  id.uuid = uuid;
  id.name = absl::StrCat("GPU ", index);
  id.bus_id = absl::StrCat("0000", bus);
  id.minor = minor;
  return id;
}

// The inventory discovery builds for `root` when NVML reports `ids` and `driver_version`.
inline gpu::Inventory InventoryFor(const std::string& root,
                                   const std::vector<gpu::DeviceIdentity>& ids,
                                   const std::string& driver_version) {
  HostFs host(root);
  gpu::Inventory inv = gpu::BuildInventory(nullptr, host, absl::OkStatus());
  std::vector<absl::StatusOr<gpu::DeviceIdentity>> nvml(ids.begin(), ids.end());
  absl::StatusOr<std::vector<node::PciGpu>> pci = node::ScanPciGpus(host);
  inv.gpus = gpu::MergeGpuViews(nvml, pci.ok() ? *pci : std::vector<node::PciGpu>{});
  inv.system.driver_version = driver_version;
  return inv;
}

// The homelab node as discovery sees it with a working driver.
inline gpu::Inventory HomelabInventory() {
  return InventoryFor(
      SimRoot("homelab"),
      {GpuIdentity(0, kRtx3080, "0000:01:00.0", 0), GpuIdentity(1, kRtx5090, "0000:02:00.0", 1)},
      "570.133.20");
}

// How many devices of a ListAndWatch answer are Healthy.
inline int CountHealthy(const v1beta1::ListAndWatchResponse& r) {
  int n = 0;
  for (const auto& d : r.devices()) n += d.health() == "Healthy";
  return n;
}

}  // namespace gpulet::testing

#endif  // GPULET_TESTING_HOMELAB_H_
