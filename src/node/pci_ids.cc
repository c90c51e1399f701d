#include "node/pci_ids.h"

#include <algorithm>
#include <iterator>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/hex.h"

namespace gpulet::node {
namespace {

constexpr Architecture kKepler = Architecture::kKepler;
constexpr Architecture kMaxwell = Architecture::kMaxwell;
constexpr Architecture kPascal = Architecture::kPascal;
constexpr Architecture kVolta = Architecture::kVolta;
constexpr Architecture kTuring = Architecture::kTuring;
constexpr Architecture kAmpere = Architecture::kAmpere;
constexpr Architecture kAda = Architecture::kAda;
constexpr Architecture kHopper = Architecture::kHopper;
constexpr Architecture kBlackwell = Architecture::kBlackwell;

// Sorted by device ID (checked at compile time below) so lookups can binary-search.
// IDs up to early 2023 match Debian's pci.ids; later ones (H20, H200, H200 NVL, GH200, L40S,
// L20, the Ada SUPER cards, all Blackwell parts) come from NVIDIA's driver README and
// gpu-admin-tools and from lspci output of real machines. Product names follow NVML.
constexpr PciDeviceInfo kDevices[] = {
    {0x1021, "Tesla K20Xm", kKepler, "6 GB"},
    {0x1022, "Tesla K20c", kKepler, "5 GB"},
    {0x1023, "Tesla K40m", kKepler, "12 GB"},
    {0x1024, "Tesla K40c", kKepler, "12 GB"},
    {0x1028, "Tesla K20m", kKepler, "5 GB"},
    {0x102d, "Tesla K80", kKepler, "12 GB"},
    {0x13bd, "Tesla M10", kMaxwell, "8 GB"},
    {0x13c2, "NVIDIA GeForce GTX 970", kMaxwell, "4 GB"},
    {0x13f2, "Tesla M60", kMaxwell, "8 GB"},
    {0x13f3, "Tesla M6", kMaxwell, "8 GB"},
    {0x1430, "Quadro M2000", kMaxwell, "4 GB"},
    {0x1431, "Tesla M4", kMaxwell, "4 GB"},
    {0x15f7, "Tesla P100-PCIE-12GB", kPascal, "12 GB"},
    {0x15f8, "Tesla P100-PCIE-16GB", kPascal, "16 GB"},
    {0x15f9, "Tesla P100-SXM2-16GB", kPascal, "16 GB"},
    {0x17c8, "NVIDIA GeForce GTX 980 Ti", kMaxwell, "6 GB"},
    {0x17fd, "Tesla M40", kMaxwell, "12/24 GB"},
    {0x1b00, "NVIDIA TITAN X (Pascal)", kPascal, "12 GB"},
    {0x1b02, "NVIDIA TITAN Xp", kPascal, "12 GB"},
    {0x1b06, "NVIDIA GeForce GTX 1080 Ti", kPascal, "11 GB"},
    {0x1b30, "Quadro P6000", kPascal, "24 GB"},
    {0x1b38, "Tesla P40", kPascal, "24 GB"},
    {0x1b80, "NVIDIA GeForce GTX 1080", kPascal, "8 GB"},
    {0x1b81, "NVIDIA GeForce GTX 1070", kPascal, "8 GB"},
    {0x1bb3, "Tesla P4", kPascal, "8 GB"},
    {0x1c03, "NVIDIA GeForce GTX 1060 6GB", kPascal, "6 GB"},
    {0x1d81, "NVIDIA TITAN V", kVolta, "12 GB"},
    {0x1db1, "Tesla V100-SXM2-16GB", kVolta, "16 GB"},
    {0x1db2, "Tesla V100-DGXS-16GB", kVolta, "16 GB"},
    {0x1db3, "Tesla V100-FHHL-16GB", kVolta, "16 GB"},
    {0x1db4, "Tesla V100-PCIE-16GB", kVolta, "16 GB"},
    {0x1db5, "Tesla V100-SXM2-32GB", kVolta, "32 GB"},
    {0x1db6, "Tesla V100-PCIE-32GB", kVolta, "32 GB"},
    {0x1db7, "Tesla V100-DGXS-32GB", kVolta, "32 GB"},
    {0x1db8, "Tesla V100-SXM3-32GB", kVolta, "32 GB"},
    {0x1dba, "Quadro GV100", kVolta, "32 GB"},
    {0x1df5, "Tesla V100-SXM2-16GB", kVolta, "16 GB"},
    {0x1df6, "Tesla V100S-PCIE-32GB", kVolta, "32 GB"},
    {0x1e02, "NVIDIA TITAN RTX", kTuring, "24 GB"},
    {0x1e04, "NVIDIA GeForce RTX 2080 Ti", kTuring, "11 GB"},
    {0x1e07, "NVIDIA GeForce RTX 2080 Ti", kTuring, "11 GB"},
    {0x1e30, "Quadro RTX 6000/8000", kTuring, "24/48 GB"},
    {0x1e36, "Quadro RTX 6000", kTuring, "24 GB"},
    {0x1e81, "NVIDIA GeForce RTX 2080 SUPER", kTuring, "8 GB"},
    {0x1e82, "NVIDIA GeForce RTX 2080", kTuring, "8 GB"},
    {0x1e84, "NVIDIA GeForce RTX 2070 SUPER", kTuring, "8 GB"},
    {0x1e87, "NVIDIA GeForce RTX 2080", kTuring, "8 GB"},
    {0x1e89, "NVIDIA GeForce RTX 2060", kTuring, "6 GB"},
    {0x1eb0, "Quadro RTX 5000", kTuring, "16 GB"},
    {0x1eb1, "Quadro RTX 4000", kTuring, "8 GB"},
    {0x1eb8, "Tesla T4", kTuring, "16 GB"},
    {0x1f02, "NVIDIA GeForce RTX 2070", kTuring, "8 GB"},
    {0x1f08, "NVIDIA GeForce RTX 2060", kTuring, "6 GB"},
    {0x1ff0, "NVIDIA T1000 8GB", kTuring, "8 GB"},
    {0x1ff2, "NVIDIA T400 4GB", kTuring, "4 GB"},
    {0x20b0, "NVIDIA A100-SXM4-40GB", kAmpere, "40 GB"},
    {0x20b2, "NVIDIA A100-SXM4-80GB", kAmpere, "80 GB"},
    {0x20b3, "NVIDIA A100-SXM-64GB", kAmpere, "64 GB"},
    {0x20b5, "NVIDIA A100 80GB PCIe", kAmpere, "80 GB"},
    {0x20b7, "NVIDIA A30", kAmpere, "24 GB"},
    {0x20f1, "NVIDIA A100-PCIE-40GB", kAmpere, "40 GB"},
    {0x2182, "NVIDIA GeForce GTX 1660 Ti", kTuring, "6 GB"},
    {0x2184, "NVIDIA GeForce GTX 1660", kTuring, "6 GB"},
    {0x2203, "NVIDIA GeForce RTX 3090 Ti", kAmpere, "24 GB"},
    {0x2204, "NVIDIA GeForce RTX 3090", kAmpere, "24 GB"},
    {0x2206, "NVIDIA GeForce RTX 3080", kAmpere, "10 GB"},
    {0x2208, "NVIDIA GeForce RTX 3080 Ti", kAmpere, "12 GB"},
    {0x220a, "NVIDIA GeForce RTX 3080", kAmpere, "12 GB"},  // the 12 GB model
    {0x2216, "NVIDIA GeForce RTX 3080", kAmpere, "10 GB"},  // Lite Hash Rate
    {0x2230, "NVIDIA RTX A6000", kAmpere, "48 GB"},
    {0x2231, "NVIDIA RTX A5000", kAmpere, "24 GB"},
    {0x2232, "NVIDIA RTX A4500", kAmpere, "20 GB"},
    {0x2233, "NVIDIA RTX A5500", kAmpere, "24 GB"},
    {0x2235, "NVIDIA A40", kAmpere, "48 GB"},
    {0x2236, "NVIDIA A10", kAmpere, "24 GB"},
    {0x2237, "NVIDIA A10G", kAmpere, "24 GB"},
    {0x2313, "NVIDIA H100 CNX", kHopper, "80 GB"},
    {0x2321, "NVIDIA H100 NVL", kHopper, "94 GB"},
    {0x2322, "NVIDIA H800 PCIe", kHopper, "80 GB"},
    {0x2324, "NVIDIA H800", kHopper, "80 GB"},
    {0x2329, "NVIDIA H20", kHopper, "96 GB"},
    {0x2330, "NVIDIA H100 80GB HBM3", kHopper, "80 GB"},  // SXM5
    {0x2331, "NVIDIA H100 PCIe", kHopper, "80 GB"},
    {0x2335, "NVIDIA H200", kHopper, "141 GB"},  // SXM
    {0x233b, "NVIDIA H200 NVL", kHopper, "141 GB"},
    {0x2342, "NVIDIA GH200", kHopper, "96 GB"},  // NVML appends "120GB"/"480GB" per subsystem
    {0x2482, "NVIDIA GeForce RTX 3070 Ti", kAmpere, "8 GB"},
    {0x2484, "NVIDIA GeForce RTX 3070", kAmpere, "8 GB"},
    {0x2486, "NVIDIA GeForce RTX 3060 Ti", kAmpere, "8 GB"},
    {0x2488, "NVIDIA GeForce RTX 3070", kAmpere, "8 GB"},     // Lite Hash Rate
    {0x2489, "NVIDIA GeForce RTX 3060 Ti", kAmpere, "8 GB"},  // Lite Hash Rate
    {0x24b0, "NVIDIA RTX A4000", kAmpere, "16 GB"},
    {0x2503, "NVIDIA GeForce RTX 3060", kAmpere, "12 GB"},
    {0x2504, "NVIDIA GeForce RTX 3060", kAmpere, "12 GB"},  // Lite Hash Rate
    {0x2531, "NVIDIA RTX A2000", kAmpere, "6 GB"},
    {0x2571, "NVIDIA RTX A2000 12GB", kAmpere, "12 GB"},
    {0x25b6, "NVIDIA A2 / NVIDIA A16", kAmpere, "16 GB"},  // told apart by subsystem ID
    {0x2684, "NVIDIA GeForce RTX 4090", kAda, "24 GB"},
    {0x2685, "NVIDIA GeForce RTX 4090 D", kAda, "24 GB"},
    {0x26b1, "NVIDIA RTX 6000 Ada Generation", kAda, "48 GB"},
    {0x26b2, "NVIDIA RTX 5000 Ada Generation", kAda, "32 GB"},
    {0x26b5, "NVIDIA L40", kAda, "48 GB"},
    {0x26b9, "NVIDIA L40S", kAda, "48 GB"},
    {0x26ba, "NVIDIA L20", kAda, "48 GB"},
    {0x2702, "NVIDIA GeForce RTX 4080 SUPER", kAda, "16 GB"},
    {0x2704, "NVIDIA GeForce RTX 4080", kAda, "16 GB"},
    {0x2705, "NVIDIA GeForce RTX 4070 Ti SUPER", kAda, "16 GB"},
    {0x2782, "NVIDIA GeForce RTX 4070 Ti", kAda, "12 GB"},
    {0x2783, "NVIDIA GeForce RTX 4070 SUPER", kAda, "12 GB"},
    {0x2786, "NVIDIA GeForce RTX 4070", kAda, "12 GB"},
    {0x27b0, "NVIDIA RTX 4000 SFF Ada Generation", kAda, "20 GB"},
    {0x27b1, "NVIDIA RTX 4500 Ada Generation", kAda, "24 GB"},
    {0x27b2, "NVIDIA RTX 4000 Ada Generation", kAda, "20 GB"},
    {0x27b8, "NVIDIA L4", kAda, "24 GB"},
    {0x2803, "NVIDIA GeForce RTX 4060 Ti", kAda, "8 GB"},
    {0x2805, "NVIDIA GeForce RTX 4060 Ti", kAda, "16 GB"},
    {0x2882, "NVIDIA GeForce RTX 4060", kAda, "8 GB"},
    {0x2901, "NVIDIA B200", kBlackwell, "180 GB"},
    {0x2941, "NVIDIA GB200", kBlackwell, "186 GB"},
    {0x2b85, "NVIDIA GeForce RTX 5090", kBlackwell, "32 GB"},
    {0x2b87, "NVIDIA GeForce RTX 5090 D", kBlackwell, "32 GB"},
    {0x2bb1, "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", kBlackwell, "96 GB"},
    {0x2bb5, "NVIDIA RTX PRO 6000 Blackwell Server Edition", kBlackwell, "96 GB"},
    {0x2c02, "NVIDIA GeForce RTX 5080", kBlackwell, "16 GB"},
    {0x2c05, "NVIDIA GeForce RTX 5070 Ti", kBlackwell, "16 GB"},
    {0x2d04, "NVIDIA GeForce RTX 5060 Ti", kBlackwell, "8/16 GB"},
    {0x2d05, "NVIDIA GeForce RTX 5060", kBlackwell, "8 GB"},
    {0x2f04, "NVIDIA GeForce RTX 5070", kBlackwell, "12 GB"},
};

constexpr bool SortedAndUnique() {
  for (size_t i = 1; i < std::size(kDevices); ++i) {
    if (kDevices[i - 1].device_id >= kDevices[i].device_id) return false;
  }
  return true;
}
static_assert(SortedAndUnique(), "kDevices must be sorted by device_id without duplicates");

// Device-ID blocks per GPU die. NVIDIA assigns each die a block of IDs (0x80 or 0x40 wide)
// and carves every SKU of that die out of it; NVIDIA's own gpu-admin-tools identifies chips
// the same way. Only generations are recorded here, not die names.
struct IdBlock {
  uint16_t first;
  uint16_t last;
  Architecture arch;
};
constexpr IdBlock kIdBlocks[] = {
    {0x0fc0, 0x103f, kKepler},     // GK107, GK110/GK180/GK210
    {0x1180, 0x11ff, kKepler},     // GK104, GK106
    {0x1280, 0x12bf, kKepler},     // GK208
    {0x1340, 0x143f, kMaxwell},    // GM108, GM107, GM204, GM206
    {0x15c0, 0x15ff, kPascal},     // GP100
    {0x1600, 0x167f, kMaxwell},    // GM204, GM206 (second blocks)
    {0x1700, 0x173f, kPascal},     // GP100 (second block)
    {0x1740, 0x183f, kMaxwell},    // GM108, GM107, GM200
    {0x1b00, 0x1d7f, kPascal},     // GP102, GP104, GP106, GP107, GP108
    {0x1d80, 0x1dff, kVolta},      // GV100
    {0x1e00, 0x1fff, kTuring},     // TU102, TU104, TU106, TU117
    {0x2080, 0x20ff, kAmpere},     // GA100
    {0x2180, 0x21ff, kTuring},     // TU116
    {0x2200, 0x227f, kAmpere},     // GA102
    {0x2300, 0x237f, kHopper},     // GH100
    {0x2400, 0x25ff, kAmpere},     // GA103, GA104, GA106, GA107
    {0x2680, 0x28ff, kAda},        // AD102, AD103, AD104, AD106, AD107
    {0x2900, 0x29ff, kBlackwell},  // GB100, GB102
    {0x2b80, 0x2c7f, kBlackwell},  // GB202, GB203
    {0x2d00, 0x2dff, kBlackwell},  // GB206, GB207
    {0x2f00, 0x2f7f, kBlackwell},  // GB205
    {0x3180, 0x327f, kBlackwell},  // GB110, GB112
};

constexpr bool BlocksSortedAndDisjoint() {
  for (size_t i = 0; i < std::size(kIdBlocks); ++i) {
    if (kIdBlocks[i].first > kIdBlocks[i].last) return false;
    if (i > 0 && kIdBlocks[i - 1].last >= kIdBlocks[i].first) return false;
  }
  return true;
}
static_assert(BlocksSortedAndDisjoint(), "kIdBlocks must be sorted and disjoint");

}  // namespace

ModuleFlavor ModuleFlavorFor(Architecture arch) {
  switch (arch) {
    case Architecture::kKepler:
    case Architecture::kMaxwell:
    case Architecture::kPascal:
    case Architecture::kVolta:
      return ModuleFlavor::kProprietaryRequired;
    case Architecture::kBlackwell:
    case Architecture::kRubin:
      return ModuleFlavor::kOpenRequired;
    case Architecture::kTuring:
    case Architecture::kAmpere:
    case Architecture::kAda:
    case Architecture::kHopper:
    case Architecture::kUnknown:
      break;
  }
  return ModuleFlavor::kEither;
}

absl::string_view ModuleFlavorName(ModuleFlavor flavor) {
  switch (flavor) {
    case ModuleFlavor::kOpenRequired:
      return "open required";
    case ModuleFlavor::kProprietaryRequired:
      return "proprietary required";
    case ModuleFlavor::kEither:
      break;
  }
  return "either";
}

absl::string_view TalosExtensionFor(ModuleFlavor flavor) {
  if (flavor == ModuleFlavor::kProprietaryRequired) return "nonfree-kmod-nvidia-production";
  return "nvidia-open-gpu-kernel-modules-production";
}

const PciDeviceInfo* LookupPciDevice(uint16_t device_id) {
  const PciDeviceInfo* end = std::end(kDevices);
  const PciDeviceInfo* it =
      std::lower_bound(std::begin(kDevices), end, device_id,
                       [](const PciDeviceInfo& row, uint16_t id) { return row.device_id < id; });
  if (it == end || it->device_id != device_id) return nullptr;
  return it;
}

std::span<const PciDeviceInfo> AllPciDevices() { return kDevices; }

Architecture GuessArchitectureFromDeviceId(uint16_t device_id) {
  for (const IdBlock& block : kIdBlocks) {
    if (device_id >= block.first && device_id <= block.last) return block.arch;
  }
  return Architecture::kUnknown;
}

absl::StatusOr<uint16_t> ParsePciHexId(absl::string_view text) {
  absl::string_view digits = StripHexPrefix(absl::StripAsciiWhitespace(text));
  std::optional<uint64_t> value = digits.size() <= 4 ? ParseHexDigits(digits) : std::nullopt;
  if (!value) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not a 16-bit hexadecimal PCI ID"));
  }
  return static_cast<uint16_t>(*value);
}

absl::StatusOr<PciId> ParsePciId(absl::string_view text) {
  absl::string_view s = absl::StripAsciiWhitespace(text);
  size_t colon = s.find(':');
  if (colon == absl::string_view::npos || s.find(':', colon + 1) != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not a PCI ID of the form vendor:device (10de:2b85)"));
  }
  absl::StatusOr<uint16_t> vendor = ParsePciHexId(s.substr(0, colon));
  absl::StatusOr<uint16_t> device = ParsePciHexId(s.substr(colon + 1));
  if (!vendor.ok() || !device.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not a PCI ID of the form vendor:device (10de:2b85)"));
  }
  return PciId{*vendor, *device};
}

}  // namespace gpulet::node
