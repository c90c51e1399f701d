// What `gpulet manifests --inspect` learns about a node from its host root without NVML:
// the OS (and Talos version), the NVIDIA GPUs and NVSwitches on the PCI bus, and the driver
// the kernel runs. The deploy layer chooses extensions and manifests from it.
//
// Thread-safety: InspectNode only reads through the const HostFs; safe to call
// concurrently.
#ifndef GPULET_NODE_NODE_FACTS_H_
#define GPULET_NODE_NODE_FACTS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/host_fs.h"
#include "node/driver_info.h"
#include "node/os_release.h"
#include "node/pci_inventory.h"

namespace gpulet::node {

struct NodeFacts {
  std::string os_id;           // /etc/os-release ID: "talos", "debian", ...; "" if unreadable
  std::string os_pretty_name;  // PRETTY_NAME, for messages
  std::optional<TalosVersion> talos_version;  // VERSION_ID, on Talos
  std::vector<PciGpu> gpus;
  absl::Status pci_status;  // why the PCI scan failed, if it did
  // NVIDIA functions of PCI class 0x068000 ("bridge, other"): NVSwitches, which need Fabric
  // Manager before the GPUs behind them can run CUDA work.
  int nvswitch_count = 0;
  DriverInfo driver;

  bool IsTalos() const { return os_id == "talos"; }
};

// Reads os-release, PCI sysfs and the driver's /proc files. Never fails: what cannot be
// read is left empty (and pci_status says why for PCI).
NodeFacts InspectNode(const HostFs& host);

}  // namespace gpulet::node

#endif  // GPULET_NODE_NODE_FACTS_H_
