#include "node/node_facts.h"

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "common/hex.h"
#include "node/pci_ids.h"

namespace gpulet::node {

NodeFacts InspectNode(const HostFs& host) {
  NodeFacts facts;
  OsInfo os = ReadOsRelease(host);
  facts.os_id = os.id;
  facts.os_pretty_name = os.pretty_name;
  facts.talos_version = os.talos_version;
  absl::StatusOr<std::vector<PciGpu>> gpus = ScanPciGpus(host);
  if (gpus.ok()) {
    facts.gpus = std::move(*gpus);
  } else {
    facts.pci_status = gpus.status();
  }
  absl::StatusOr<std::vector<std::string>> devices = host.ListDir("/sys/bus/pci/devices");
  if (devices.ok()) {
    for (const std::string& d : *devices) {
      std::string base = JoinPath("/sys/bus/pci/devices", d);
      absl::StatusOr<std::string> vendor = host.ReadAttribute(JoinPath(base, "vendor"));
      absl::StatusOr<std::string> cls = host.ReadAttribute(JoinPath(base, "class"));
      if (!vendor.ok() || !cls.ok()) continue;
      absl::StatusOr<uint16_t> vendor_id = ParsePciHexId(*vendor);
      std::optional<uint64_t> class_code = ParseHex(*cls);
      if (!vendor_id.ok() || *vendor_id != kNvidiaPciVendorId || !class_code) continue;
      if ((*class_code >> 8) == 0x0680) ++facts.nvswitch_count;
    }
  }
  facts.driver = ReadDriverInfo(host);
  return facts;
}

}  // namespace gpulet::node
