#include "node/driver_gpus.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "node/bus_id.h"

namespace gpulet::node {
namespace {

constexpr absl::string_view kGpusDir = "/proc/driver/nvidia/gpus";
// The driver's file is a few hundred bytes; anything far larger is not it.
constexpr size_t kMaxInformationBytes = 64 * 1024;

}  // namespace

DriverGpu ParseGpuInformation(absl::string_view text) {
  DriverGpu gpu;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    const absl::string_view key = absl::StripAsciiWhitespace(line.substr(0, colon));
    const absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
    if (key == "Bus Location") {
      gpu.bus_id = NormalizeBusId(value);
    } else if (key == "Device Minor") {
      unsigned minor = 0;
      if (absl::SimpleAtoi(value, &minor)) gpu.minor = minor;
    } else if (key == "GPU UUID") {
      if (absl::StartsWith(value, "GPU-")) gpu.uuid = std::string(value);
    } else if (key == "GPU Excluded" || key == "Blacklisted") {
      gpu.excluded = value == "Yes";
    }
  }
  return gpu;
}

absl::StatusOr<std::vector<DriverGpu>> ReadDriverGpus(const HostFs& host) {
  absl::StatusOr<std::vector<std::string>> names = host.ListDir(kGpusDir);
  if (!names.ok()) return names.status();  // its message names the directory
  std::vector<DriverGpu> gpus;
  for (const std::string& name : *names) {
    const std::string bus = NormalizeBusId(name);
    if (bus.empty()) continue;  // not a GPU's directory
    absl::StatusOr<std::string> text =
        host.ReadFile(absl::StrCat(kGpusDir, "/", name, "/information"), kMaxInformationBytes);
    DriverGpu gpu = text.ok() ? ParseGpuInformation(*text) : DriverGpu();
    // The directory's name is the driver's own bus ID; a file that disagrees is not trusted.
    if (gpu.bus_id != bus) {
      gpu = DriverGpu();
      gpu.bus_id = bus;
    }
    gpus.push_back(std::move(gpu));
  }
  std::sort(gpus.begin(), gpus.end(),
            [](const DriverGpu& a, const DriverGpu& b) { return a.bus_id < b.bus_id; });
  return gpus;
}

}  // namespace gpulet::node
