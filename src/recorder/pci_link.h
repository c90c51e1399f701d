// PCIe link state and error counters of one GPU, read from the kernel's PCI sysfs under the
// host root: the facts that tell a card that fell off the bus because its link failed from
// one that hung on its own.
//
//   /sys/bus/pci/devices/<bdf>/current_link_width   "16"
//   /sys/bus/pci/devices/<bdf>/current_link_speed   "16.0 GT/s PCIe" ("Unknown" when down)
//   /sys/bus/pci/devices/<bdf>/aer_dev_correctable  "RxErr 0\nBadTLP 0\n...TOTAL_ERR_COR 3"
//   /sys/bus/pci/devices/<bdf>/aer_dev_nonfatal     "...TOTAL_ERR_NONFATAL 0"
//   /sys/bus/pci/devices/<bdf>/aer_dev_fatal        "...TOTAL_ERR_FATAL 0"
//
// (Documentation/ABI/testing/sysfs-bus-pci-devices-aer in the Linux source names the AER
// files and their TOTAL_ lines.) A file that is missing (no AER capability, a kernel without
// it, a device gone) leaves its value absent.
//
// Thread-safety: pure functions.
#ifndef GPULET_RECORDER_PCI_LINK_H_
#define GPULET_RECORDER_PCI_LINK_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "common/host_fs.h"

namespace gpulet::recorder {

struct PciLinkReading {
  std::optional<unsigned> width;  // lanes
  std::optional<unsigned> mts;    // megatransfers per second: 16000 for "16.0 GT/s"
  std::optional<uint64_t> aer_correctable, aer_nonfatal, aer_fatal;

  friend bool operator==(const PciLinkReading&, const PciLinkReading&) = default;
};

// The value of the line whose first word is `total_name` ("TOTAL_ERR_COR"); nullopt when
// there is none or its value is not a number.
std::optional<uint64_t> ParseAerTotal(absl::string_view text, absl::string_view total_name);

// "16.0 GT/s PCIe", "2.5 GT/s", "8 GT/s" → MT/s; nullopt for "Unknown" or anything else.
std::optional<unsigned> ParseLinkSpeed(absl::string_view text);

// Reads the files above for the GPU at `bus_id` (any form NormalizeBusId takes); every value
// it cannot read is absent.
PciLinkReading ReadPciLink(const HostFs& host, absl::string_view bus_id);

}  // namespace gpulet::recorder

#endif  // GPULET_RECORDER_PCI_LINK_H_
