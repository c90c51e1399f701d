// libFuzzer target for the pod-identity parsers (metrics/pod_identity.h). They read
// /proc/<pid>/cgroup of every GPU process and the names under /var/log/pods, which any
// workload can influence, so any text must give a pod or nothing. Properties checked:
//  - a pod UID is 36 characters in the 8-4-4-4-12 hex form or 32 hex characters;
//  - a container ID is empty or 64 hex characters;
//  - a parsed log directory name is exactly "<namespace>_<pod>_<uid>" again.
//
// Built and run by scripts/fuzz.sh (the _fuzz.cc suffix keeps it out of the normal build).
//
// Thread-safety: libFuzzer calls LLVMFuzzerTestOneInput from one thread.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "metrics/pod_identity.h"

namespace {

bool Hex(const std::string& s) {
  for (char c : s) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

void CheckUid(const std::string& uid) {
  if (uid.size() == 32 && Hex(uid)) return;
  if (uid.size() != 36) std::abort();
  for (size_t i = 0; i < uid.size(); ++i) {
    bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash != (uid[i] == '-')) std::abort();
    if (!dash && !absl::ascii_isxdigit(static_cast<unsigned char>(uid[i]))) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  if (std::optional<gpulet::metrics::CgroupPod> pod = gpulet::metrics::ParseCgroupPod(text)) {
    CheckUid(pod->pod_uid);
    if (!pod->container_id.empty() && (pod->container_id.size() != 64 || !Hex(pod->container_id))) {
      std::abort();
    }
  }
  if (std::optional<gpulet::metrics::PodLogDir> dir = gpulet::metrics::ParsePodLogDir(text)) {
    CheckUid(dir->uid);
    if (absl::StrCat(dir->namespace_name, "_", dir->pod, "_", dir->uid) != text) std::abort();
  }
  return 0;
}
