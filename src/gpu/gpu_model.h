// The GPU model: one record per physical GPU, merging what NVML says with what PCI sysfs
// says, keyed by the normalised PCI bus id ("0000:01:00.0"; NVML prints
// "00000000:01:00.0", the kernel log "0000:01:00").
//
// NVML knows the live identity (UUID, minor number, memory, compute capability) but only
// for GPUs the driver has; PCI sysfs knows every card in the slots, which driver is bound
// and its NUMA node, and our device table knows the product, architecture and which kernel
// module flavour it needs even when no driver loads. A Gpu carries both views and says
// which sources saw it, so "on PCI but not in NVML" is visible rather than silently lost.
//
// Thread-safety: plain values; Inventory is immutable once built.
#ifndef GPULET_GPU_GPU_MODEL_H_
#define GPULET_GPU_GPU_MODEL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpu/gpu_library.h"
#include "gpu/nvml_attempt.h"
#include "nlohmann/json_fwd.hpp"
#include "node/architecture.h"
#include "node/driver_info.h"
#include "node/pci_inventory.h"

namespace gpulet::gpu {

// Maps an nvmlDeviceArchitecture_t value (KEPLER 2 ... BLACKWELL 10, RUBIN 13). Values NVML
// has not defined yet, and NVML_DEVICE_ARCH_UNKNOWN, give kUnknown.
node::Architecture ArchitectureFromNvml(unsigned nvml_arch);

struct Gpu {
  std::optional<unsigned> index;  // NVML index (enumeration order; not stable across boots)
  std::string uuid;               // "GPU-…"; empty when NVML did not see the GPU
  std::string name;               // NVML's name, else the device table's product name
  std::string bus_id;             // normalised "0000:01:00.0"
  uint16_t pci_device_id = 0;     // e.g. 0x2b85
  std::optional<unsigned> minor;  // /dev/nvidia<minor>
  std::optional<uint64_t> memory_total_bytes;
  std::optional<int> cc_major, cc_minor;
  node::Architecture architecture = node::Architecture::kUnknown;
  node::ModuleFlavor module_flavor = node::ModuleFlavor::kEither;  // kernel modules this GPU needs
  int numa_node = -1;         // -1 when the platform has no NUMA information
  std::string kernel_driver;  // bound PCI driver: "nvidia", "nouveau", "vfio-pci", ""
  std::optional<std::string> serial;
  std::optional<std::string> vbios_version;
  std::optional<bool> mig_capable;  // NVML: the GPU supports MIG
  bool mig_enabled = false;         // MIG mode is on now (then only its MIG devices run work)
  std::vector<MigDeviceInfo> mig_devices;  // the MIG devices it has now
  std::optional<int> virtualization_mode;  // NVML_GPU_VIRTUALIZATION_MODE_*
  bool in_nvml = false;                    // NVML returned an identity for it
  bool on_pci = false;                     // PCI sysfs lists it
  std::string nvml_error;                  // why NVML could not read it, when it should have

  // "/dev/nvidia0", or "" when the minor number is unknown.
  std::string DeviceNode() const;
  // "8.6", or "".
  std::string ComputeCapability() const;
  // The MIG device with that UUID, or with that GPU instance (and compute instance) id.
  const MigDeviceInfo* FindMig(const std::string& mig_uuid) const;
  const MigDeviceInfo* FindMigInstance(unsigned gpu_instance_id,
                                       std::optional<unsigned> compute_instance_id) const;
};

struct Inventory {
  std::vector<Gpu> gpus;     // NVML index order first, then PCI-only GPUs by bus id
  SystemInfo system;         // driver and CUDA versions, NVML library path (when NVML loaded)
  absl::Status nvml_status;  // OK when NVML loaded and counted GPUs
  int nvml_code = -1;        // NVML return code of the failure, when there is one
  std::vector<NvmlLoadAttempt> nvml_attempts;
  absl::Status pci_status;  // OK when PCI sysfs was readable
  node::DriverInfo driver;  // kernel-side facts (/proc/driver/nvidia, /proc/modules, /dev)

  const Gpu* FindByUuid(const std::string& uuid) const;
  Gpu* FindByUuid(const std::string& uuid);
  const Gpu* FindByBusId(const std::string& any_bus_id_form) const;
};

// Merges the two views. `nvml` holds one entry per NVML index (an error where that GPU
// could not be read). Pure function: no I/O.
std::vector<Gpu> MergeGpuViews(const std::vector<absl::StatusOr<DeviceIdentity>>& nvml,
                               const std::vector<node::PciGpu>& pci);

// Sets the GPU's MIG mode and devices from a layout read from NVML.
void ApplyMigLayout(const MigLayout& layout, Gpu* gpu);

// Builds an inventory from an open GPU library (null when NVML is unavailable; then
// `nvml_status` should say why) and the host's PCI sysfs.
Inventory BuildInventory(GpuLibrary* library, const HostFs& host, absl::Status nvml_status);

// JSON for `gpulet list --json` and the HTTP status endpoint. Absent values are omitted.
void to_json(nlohmann::json& out, const Gpu& gpu);
void to_json(nlohmann::json& out, const Inventory& inventory);

}  // namespace gpulet::gpu

#endif  // GPULET_GPU_GPU_MODEL_H_
