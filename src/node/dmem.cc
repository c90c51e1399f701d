#include "node/dmem.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "node/bus_id.h"

namespace gpulet::node {

std::string DmemRegion(absl::string_view bus_id) {
  const std::string bus = NormalizeBusId(bus_id);
  if (bus.empty()) return "";
  return absl::StrCat("nvidia/", bus, "/vidmem");
}

bool DmemCapacityLists(absl::string_view capacity, absl::string_view bus_id) {
  const std::string region = DmemRegion(bus_id);
  if (region.empty()) return false;
  for (absl::string_view line : absl::StrSplit(capacity, '\n')) {
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.size() == 2 && fields[0] == region) return true;
  }
  return false;
}

bool DriverHasMemoryLimits(absl::string_view driver_version) {
  int major = 0;
  return absl::SimpleAtoi(driver_version.substr(0, driver_version.find('.')), &major) &&
         major >= 615;
}

std::optional<std::string> UnifiedCgroupPath(absl::string_view proc_cgroup) {
  for (absl::string_view line : absl::StrSplit(proc_cgroup, '\n')) {
    if (!absl::ConsumePrefix(&line, "0::")) continue;
    line = absl::StripTrailingAsciiWhitespace(line);
    if (!absl::StartsWith(line, "/")) return std::nullopt;
    return std::string(line);
  }
  return std::nullopt;
}

bool CgroupWithin(absl::string_view inner, absl::string_view outer) {
  if (outer == "/") return absl::StartsWith(inner, "/");
  return inner == outer || (absl::StartsWith(inner, outer) && inner[outer.size()] == '/');
}

std::string CommonCgroup(const std::vector<std::string>& paths) {
  if (paths.empty()) return "";
  std::string common = paths[0];
  for (const std::string& p : paths) {
    // "/" is where the climb ends, even for a path that is not absolute (which no cgroup is).
    while (common != "/" && !CgroupWithin(p, common)) {
      const size_t slash = common.rfind('/');
      common = slash == 0 || slash == std::string::npos ? "/" : common.substr(0, slash);
    }
  }
  return common;
}

}  // namespace gpulet::node
