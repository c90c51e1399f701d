#include "node/pci_inventory.h"

#include <algorithm>
#include <optional>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/hex.h"
#include "node/bus_id.h"

namespace gpulet::node {
namespace {

constexpr absl::string_view kPciDevicesDir = "/sys/bus/pci/devices";

absl::string_view Basename(absl::string_view path) {
  size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

// Reads a hex attribute such as "0x030200"; nullopt when missing or malformed.
std::optional<uint32_t> ReadHexAttribute(const HostFs& fs, const std::string& path) {
  absl::StatusOr<std::string> text = fs.ReadAttribute(path);
  if (!text.ok()) return std::nullopt;
  absl::string_view digits = StripHexPrefix(absl::StripAsciiWhitespace(*text));
  std::optional<uint64_t> value = digits.size() <= 8 ? ParseHexDigits(digits) : std::nullopt;
  if (!value) return std::nullopt;
  return static_cast<uint32_t>(*value);
}

std::optional<uint16_t> ReadId(const HostFs& fs, const std::string& path) {
  absl::StatusOr<std::string> text = fs.ReadAttribute(path);
  if (!text.ok()) return std::nullopt;
  absl::StatusOr<uint16_t> id = ParsePciHexId(*text);
  if (!id.ok()) return std::nullopt;
  return *id;
}

// The basename of a symlink's target ("nvidia" for .../drivers/nvidia), "" when the link
// does not exist: an unbound device simply has no `driver` link.
std::string LinkBasename(const HostFs& fs, const std::string& path) {
  absl::StatusOr<std::string> target = fs.ReadLink(path);
  if (!target.ok()) return "";
  return std::string(Basename(*target));
}

// numa_node holds -1 on machines without NUMA information; an absent or garbled file means
// the same.
int ReadNumaNode(const HostFs& fs, const std::string& dir) {
  absl::StatusOr<std::string> text = fs.ReadAttribute(JoinPath(dir, "numa_node"));
  int node = -1;
  if (!text.ok() || !absl::SimpleAtoi(*text, &node) || node < 0) return -1;
  return node;
}

int ReadIommuGroup(const HostFs& fs, const std::string& dir) {
  std::string name = LinkBasename(fs, JoinPath(dir, "iommu_group"));
  int group = -1;
  if (name.empty() || !absl::SimpleAtoi(name, &group) || group < 0) return -1;
  return group;
}

void FillFromTable(PciGpu* gpu) {
  if (const PciDeviceInfo* info = LookupPciDevice(gpu->device_id)) {
    gpu->product = std::string(info->product);
    gpu->memory = std::string(info->memory);
    gpu->architecture = info->architecture;
  } else {
    gpu->architecture = GuessArchitectureFromDeviceId(gpu->device_id);
    gpu->architecture_guessed = gpu->architecture != Architecture::kUnknown;
  }
  gpu->module_flavor = ModuleFlavorFor(gpu->architecture);
}

}  // namespace

bool IsGpuPciClass(uint32_t class_code) {
  uint32_t class_and_subclass = class_code >> 8;
  return class_and_subclass == 0x0300 || class_and_subclass == 0x0302;
}

absl::StatusOr<std::vector<PciGpu>> ScanPciGpus(const HostFs& fs) {
  absl::StatusOr<std::vector<std::string>> names = fs.ListDir(kPciDevicesDir);
  if (!names.ok()) {
    return absl::Status(names.status().code(),
                        absl::StrCat("cannot list PCI devices in ", fs.Describe(kPciDevicesDir),
                                     ": ", names.status().message()));
  }
  std::vector<PciGpu> gpus;
  for (const std::string& name : *names) {
    std::string bus_id = NormalizeBusId(name);
    if (bus_id.empty()) continue;  // not a device entry
    std::string dir = JoinPath(kPciDevicesDir, name);
    std::optional<uint16_t> vendor = ReadId(fs, JoinPath(dir, "vendor"));
    std::optional<uint32_t> class_code = ReadHexAttribute(fs, JoinPath(dir, "class"));
    if (!vendor || *vendor != kNvidiaPciVendorId || !class_code || !IsGpuPciClass(*class_code)) {
      continue;
    }
    std::string device_path = JoinPath(dir, "device");
    std::optional<uint16_t> device_id = ReadId(fs, device_path);
    if (!device_id) {
      return absl::DataLossError(absl::StrCat(
          "NVIDIA GPU at ", bus_id, " has no readable device ID in ", fs.Describe(device_path)));
    }
    PciGpu gpu;
    gpu.bus_id = std::move(bus_id);
    gpu.device_id = *device_id;
    gpu.subsystem_vendor_id = ReadId(fs, JoinPath(dir, "subsystem_vendor")).value_or(0);
    gpu.subsystem_device_id = ReadId(fs, JoinPath(dir, "subsystem_device")).value_or(0);
    gpu.class_code = *class_code;
    gpu.driver = LinkBasename(fs, JoinPath(dir, "driver"));
    gpu.numa_node = ReadNumaNode(fs, dir);
    gpu.iommu_group = ReadIommuGroup(fs, dir);
    FillFromTable(&gpu);
    gpus.push_back(std::move(gpu));
  }
  // Sort numerically: ListDir's byte order of the raw names is not the order of the
  // canonical IDs when names differ in case or domain width.
  auto key = [](const PciGpu& gpu) {
    PciAddress a = ParsePciAddress(gpu.bus_id).value_or(PciAddress{});
    return std::tuple(a.domain, a.bus, a.device, a.function);
  };
  std::sort(gpus.begin(), gpus.end(),
            [&key](const PciGpu& a, const PciGpu& b) { return key(a) < key(b); });
  return gpus;
}

}  // namespace gpulet::node
