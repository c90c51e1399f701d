// PCI inventory: the NVIDIA GPUs the kernel sees on the PCI bus, read from sysfs.
//
// This is gpulet's driver-independent view of the hardware. NVML only lists GPUs that the
// nvidia kernel module has bound and initialised; sysfs lists every card the firmware
// enumerated, whether it is bound to nvidia, nouveau, vfio-pci or nothing at all. Comparing
// the two is how `gpulet doctor` tells "no GPU in this machine" from "a GPU the driver did
// not take", and the compiled-in PCI table (pci_ids.h) names each card and says which
// kernel-module flavour it needs before any driver is working.
//
// Thread-safety: ScanPciGpus keeps no state and only reads through the const HostFs; it is
// safe to call concurrently.
#ifndef GPULET_NODE_PCI_INVENTORY_H_
#define GPULET_NODE_PCI_INVENTORY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/host_fs.h"
#include "node/architecture.h"
#include "node/pci_ids.h"

namespace gpulet::node {

// One NVIDIA display-class PCI function (a GPU; its HDMI audio function and NVSwitches are
// other classes and not listed).
struct PciGpu {
  std::string bus_id;  // canonical, "0000:01:00.0" (see bus_id.h)
  uint16_t device_id = 0;
  uint16_t subsystem_vendor_id = 0;  // 0 when sysfs does not say
  uint16_t subsystem_device_id = 0;  // 0 when sysfs does not say
  uint32_t class_code = 0;           // 0x030000 (VGA) or 0x030200 (3D controller)
  // The bound kernel driver: "nvidia", "nouveau", "vfio-pci", ...; "" when none is bound.
  std::string driver;
  int numa_node = -1;    // -1 when the platform does not report one
  int iommu_group = -1;  // -1 when there is no IOMMU group (IOMMU off)

  // From the compiled-in table; product and memory are "" for IDs it does not know.
  std::string product;
  std::string memory;
  Architecture architecture = Architecture::kUnknown;
  // True when the ID is not in the table and `architecture` is only a guess from its
  // device-ID block (GuessArchitectureFromDeviceId).
  bool architecture_guessed = false;
  ModuleFlavor module_flavor = ModuleFlavor::kEither;
};

// True for the PCI classes NVIDIA GPUs use: 0x0300xx (VGA compatible controller) and
// 0x0302xx (3D controller, the usual class of data-centre GPUs).
bool IsGpuPciClass(uint32_t class_code);

// Lists NVIDIA GPUs from <host-root>/sys/bus/pci/devices, sorted by bus ID. An empty list is
// not an error (a node without GPUs). Errors: the directory is missing or unreadable (the
// message names it), or an NVIDIA display-class function whose `device` attribute cannot be
// read or parsed (a GPU that cannot be identified should be reported, not dropped). Entries
// whose vendor or class cannot be read are skipped: they cannot be identified as GPUs.
absl::StatusOr<std::vector<PciGpu>> ScanPciGpus(const HostFs& fs);

}  // namespace gpulet::node

#endif  // GPULET_NODE_PCI_INVENTORY_H_
