#include "metrics/pod_identity.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace gpulet::metrics {
namespace {

bool AllHex(absl::string_view s) {
  for (char c : s) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return !s.empty();
}

// API-server pods have RFC 4122 UIDs; static pods have a 32-hex hash as UID.
bool ValidPodUid(absl::string_view uid) {
  if (uid.size() == 32) return AllHex(uid);
  if (uid.size() != 36) return false;
  for (size_t i = 0; i < uid.size(); ++i) {
    bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash != (uid[i] == '-')) return false;
    if (!dash && !absl::ascii_isxdigit(static_cast<unsigned char>(uid[i]))) return false;
  }
  return true;
}

// "pod<uid>" (cgroupfs) or "kubepods[-<qos>]-pod<uid_with_underscores>.slice" (systemd).
std::optional<std::string> PodUidOfSegment(absl::string_view seg) {
  if (absl::ConsumeSuffix(&seg, ".slice")) {
    size_t at = seg.rfind("-pod");
    if (at == absl::string_view::npos) return std::nullopt;
    seg.remove_prefix(at + 4);
    std::string uid = absl::StrReplaceAll(seg, {{"_", "-"}});
    if (ValidPodUid(uid)) return uid;
    return std::nullopt;
  }
  if (absl::ConsumePrefix(&seg, "pod") && ValidPodUid(seg)) return std::string(seg);
  return std::nullopt;
}

// "<64 hex>" (cgroupfs), "cri-containerd-<id>.scope", "docker-<id>.scope", "crio-<id>.scope".
// CRI-O's "crio-conmon-<id>.scope" is the monitor, not the container: not an ID.
std::string ContainerIdOfSegment(absl::string_view seg) {
  absl::ConsumeSuffix(&seg, ".scope");
  for (absl::string_view prefix : {"cri-containerd-", "docker-", "crio-", "containerd-"}) {
    if (absl::ConsumePrefix(&seg, prefix)) break;
  }
  return seg.size() == 64 && AllHex(seg) ? std::string(seg) : std::string();
}

}  // namespace

std::optional<CgroupPod> ParseCgroupPod(absl::string_view cgroup_file) {
  for (absl::string_view line : absl::StrSplit(cgroup_file, '\n', absl::SkipEmpty())) {
    // hierarchy-ID:controllers:path; the path may itself contain ':' (never in pod paths,
    // but split at most twice anyway).
    std::vector<absl::string_view> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3) continue;
    std::vector<absl::string_view> segs = absl::StrSplit(parts[2], '/', absl::SkipEmpty());
    for (size_t i = 0; i < segs.size(); ++i) {
      std::optional<std::string> uid = PodUidOfSegment(segs[i]);
      if (!uid) continue;
      CgroupPod out;
      out.pod_uid = *uid;
      if (i + 1 < segs.size()) out.container_id = ContainerIdOfSegment(segs[i + 1]);
      return out;
    }
  }
  return std::nullopt;
}

std::optional<PodLogDir> ParsePodLogDir(absl::string_view name) {
  std::vector<absl::string_view> parts = absl::StrSplit(name, '_');
  if (parts.size() != 3 || parts[0].empty() || parts[1].empty() || !ValidPodUid(parts[2])) {
    return std::nullopt;
  }
  return PodLogDir{std::string(parts[0]), std::string(parts[1]), std::string(parts[2])};
}

}  // namespace gpulet::metrics
