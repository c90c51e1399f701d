#include "node/bus_id.h"

#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/hex.h"

namespace gpulet::node {
namespace {

// Parses 1..max_digits (at most 8) hex digits; false on anything else (no sign, no "0x").
bool ParseHexField(absl::string_view s, size_t max_digits, uint32_t* out) {
  std::optional<uint64_t> value = s.size() <= max_digits ? ParseHexDigits(s) : std::nullopt;
  if (!value) return false;
  *out = static_cast<uint32_t>(*value);
  return true;
}

absl::Status NotABusId(absl::string_view text) {
  return absl::InvalidArgumentError(absl::StrCat(
      "'", text, "' is not a PCI bus ID (expected domain:bus:device.function, e.g. 0000:01:00.0)"));
}

}  // namespace

absl::StatusOr<PciAddress> ParsePciAddress(absl::string_view text) {
  absl::string_view s = absl::StripAsciiWhitespace(text);
  // Kernel log lines wrap the address as "PCI:0000:01:00".
  if (absl::StartsWithIgnoreCase(s, "PCI:")) s.remove_prefix(4);

  uint32_t function = 0;
  if (size_t dot = s.find('.'); dot != absl::string_view::npos) {
    if (!ParseHexField(s.substr(dot + 1), 1, &function) || function > 7) return NotABusId(text);
    s = s.substr(0, dot);
  }
  std::vector<absl::string_view> parts = absl::StrSplit(s, ':');
  uint32_t domain = 0;
  uint32_t bus = 0;
  uint32_t device = 0;
  if (parts.size() == 3) {
    if (!ParseHexField(parts[0], 8, &domain)) return NotABusId(text);
    parts.erase(parts.begin());
  }
  if (parts.size() != 2 || !ParseHexField(parts[0], 2, &bus) ||
      !ParseHexField(parts[1], 2, &device) || device > 31) {
    return NotABusId(text);
  }
  return PciAddress{domain, static_cast<uint8_t>(bus), static_cast<uint8_t>(device),
                    static_cast<uint8_t>(function)};
}

std::string FormatPciAddress(const PciAddress& address) {
  return absl::StrFormat("%04x:%02x:%02x.%x", address.domain, address.bus, address.device,
                         address.function);
}

std::string NormalizeBusId(absl::string_view text) {
  absl::StatusOr<PciAddress> address = ParsePciAddress(text);
  if (!address.ok()) return "";
  return FormatPciAddress(*address);
}

}  // namespace gpulet::node
