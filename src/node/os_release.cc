#include "node/os_release.h"

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace gpulet::node {

std::string TalosVersion::ToString() const {
  if (patch < 0) return absl::StrCat("v", major, ".", minor);
  return absl::StrCat("v", major, ".", minor, ".", patch);
}

absl::StatusOr<TalosVersion> ParseTalosVersion(absl::string_view text) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  absl::ConsumePrefix(&t, "v");
  t = t.substr(0, t.find_first_of("-+"));
  std::vector<absl::string_view> parts = absl::StrSplit(t, '.');
  TalosVersion v;
  if (parts.size() < 2 || parts.size() > 3 || !absl::SimpleAtoi(parts[0], &v.major) ||
      !absl::SimpleAtoi(parts[1], &v.minor) ||
      (parts.size() == 3 && !absl::SimpleAtoi(parts[2], &v.patch)) || v.major < 0 || v.minor < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text,
                     "' is not a Talos version; write it as v1.13 or v1.12.6 "
                     "(`talosctl version` prints it under Server)"));
  }
  return v;
}

bool TalosAtLeast(const TalosVersion& v, int major, int minor) {
  return v.major > major || (v.major == major && v.minor >= minor);
}

OsInfo ParseOsRelease(absl::string_view text) {
  OsInfo os;
  os.readable = true;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    size_t eq = line.find('=');
    if (line.empty() || line[0] == '#' || eq == absl::string_view::npos) continue;
    absl::string_view key = line.substr(0, eq);
    absl::string_view value = line.substr(eq + 1);
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') &&
        value.back() == value.front()) {
      value = value.substr(1, value.size() - 2);
    }
    if (key == "ID") os.id = std::string(value);
    if (key == "VERSION_ID") os.version_id = std::string(value);
    if (key == "PRETTY_NAME") os.pretty_name = std::string(value);
  }
  os.talos = os.id == "talos";
  if (os.talos) {
    if (absl::StatusOr<TalosVersion> v = ParseTalosVersion(os.version_id); v.ok()) {
      os.talos_version = *v;
      os.talos_major = v->major;
      os.talos_minor = v->minor;
    }
  }
  return os;
}

OsInfo ReadOsRelease(const HostFs& host) {
  for (const char* path : {"/etc/os-release", "/usr/lib/os-release"}) {
    absl::StatusOr<std::string> text = host.ReadFile(path, 64 << 10);
    if (text.ok()) return ParseOsRelease(*text);
  }
  return OsInfo{};
}

}  // namespace gpulet::node
