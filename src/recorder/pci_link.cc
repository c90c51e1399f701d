#include "recorder/pci_link.h"

#include <cmath>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "node/bus_id.h"

namespace gpulet::recorder {

std::optional<uint64_t> ParseAerTotal(absl::string_view text, absl::string_view total_name) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::vector<absl::string_view> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (words.size() != 2 || words[0] != total_name) continue;
    uint64_t n = 0;
    if (!absl::SimpleAtoi(words[1], &n)) return std::nullopt;
    return n;
  }
  return std::nullopt;
}

std::optional<unsigned> ParseLinkSpeed(absl::string_view text) {
  std::vector<absl::string_view> words =
      absl::StrSplit(absl::StripAsciiWhitespace(text), ' ', absl::SkipEmpty());
  if (words.size() < 2 || words[1] != "GT/s") return std::nullopt;
  double gts = 0;
  if (!absl::SimpleAtod(words[0], &gts) || !std::isfinite(gts) || gts <= 0 || gts > 1000) {
    return std::nullopt;
  }
  return static_cast<unsigned>(std::lround(gts * 1000));
}

PciLinkReading ReadPciLink(const HostFs& host, absl::string_view bus_id) {
  PciLinkReading out;
  std::string bdf = node::NormalizeBusId(bus_id);
  if (bdf.empty()) return out;
  // The device's directory is resolved once for its five files (this runs for every GPU each
  // sampling round).
  absl::StatusOr<HostFs::Dir> dir = host.OpenDir(absl::StrCat("/sys/bus/pci/devices/", bdf));
  if (!dir.ok()) return out;
  if (auto width = dir->ReadAttribute("current_link_width"); width.ok()) {
    unsigned n = 0;
    if (absl::SimpleAtoi(*width, &n) && n > 0 && n <= 32) out.width = n;
  }
  if (auto speed = dir->ReadAttribute("current_link_speed"); speed.ok()) {
    out.mts = ParseLinkSpeed(*speed);
  }
  struct Aer {
    const char* file;
    const char* total;
    std::optional<uint64_t> PciLinkReading::*field;
  };
  static constexpr Aer kAer[] = {
      {"aer_dev_correctable", "TOTAL_ERR_COR", &PciLinkReading::aer_correctable},
      {"aer_dev_nonfatal", "TOTAL_ERR_NONFATAL", &PciLinkReading::aer_nonfatal},
      {"aer_dev_fatal", "TOTAL_ERR_FATAL", &PciLinkReading::aer_fatal},
  };
  for (const Aer& a : kAer) {
    if (auto text = dir->ReadFile(a.file); text.ok()) {
      out.*a.field = ParseAerTotal(*text, a.total);
    }
  }
  return out;
}

}  // namespace gpulet::recorder
