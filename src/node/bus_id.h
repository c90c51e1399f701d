// PCI bus IDs ("0000:01:00.0"): parsing the spellings different sources use and printing
// the one gpulet uses everywhere.
//
// The same GPU shows up under several spellings: NVML's nvmlPciInfo_t.busId has an 8-digit
// domain and upper-case hex ("00000000:01:00.0"), busIdLegacy and sysfs a 4-digit one
// ("0000:01:00.0"), kernel log lines such as "NVRM: Xid (PCI:0000:01:00): 79" drop the
// function, and lspci may drop the domain ("01:00.0"). Joining facts from these sources
// (NVML device, sysfs entry, Xid event) needs one canonical form: `dddd:bb:dd.f` in lower
// case, the domain widened beyond 4 digits only when its value needs it.
//
// Thread-safety: pure functions; safe to call concurrently.
#ifndef GPULET_NODE_BUS_ID_H_
#define GPULET_NODE_BUS_ID_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpulet::node {

struct PciAddress {
  uint32_t domain = 0;
  uint8_t bus = 0;
  uint8_t device = 0;    // 0-31
  uint8_t function = 0;  // 0-7

  friend bool operator==(const PciAddress&, const PciAddress&) = default;
};

// Parses "[PCI:][domain:]bus:device[.function]": domain 1-8 hex digits (0 when absent), bus
// and device 1-2 hex digits, function one digit 0-7 (0 when absent), any case, surrounding
// whitespace ignored. InvalidArgument, naming the text, for anything else.
absl::StatusOr<PciAddress> ParsePciAddress(absl::string_view text);

// Prints `dddd:bb:dd.f` in lower case (domain at least 4 digits).
std::string FormatPciAddress(const PciAddress& address);

// ParsePciAddress then FormatPciAddress: "00000000:01:00.0", "0000:01:00", "0000:01:00.0"
// and "PCI:0000:01:00" all give "0000:01:00.0". Returns "" when `text` is not a bus ID, so
// callers comparing two normalised IDs must treat "" as matching nothing.
std::string NormalizeBusId(absl::string_view text);

}  // namespace gpulet::node

#endif  // GPULET_NODE_BUS_ID_H_
