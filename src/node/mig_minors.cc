#include "node/mig_minors.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace gpulet::node {

absl::StatusOr<MigMinors> ParseMigMinors(absl::string_view text) {
  MigMinors out;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    std::vector<absl::string_view> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
    unsigned minor = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &minor)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mig-minors line ", line_no, " is not \"<capability> <minor>\": \"", line, "\""));
    }
    out[std::string(parts[0])] = minor;
  }
  return out;
}

std::vector<std::string> MigCapDevicePaths(const MigMinors& minors, unsigned gpu_minor,
                                           unsigned gpu_instance_id, unsigned compute_instance_id) {
  const std::string gi = absl::StrCat("gpu", gpu_minor, "/gi", gpu_instance_id);
  auto g = minors.find(absl::StrCat(gi, "/access"));
  auto c = minors.find(absl::StrCat(gi, "/ci", compute_instance_id, "/access"));
  if (g == minors.end() || c == minors.end()) return {};
  return {absl::StrCat("/dev/nvidia-caps/nvidia-cap", g->second),
          absl::StrCat("/dev/nvidia-caps/nvidia-cap", c->second)};
}

}  // namespace gpulet::node
