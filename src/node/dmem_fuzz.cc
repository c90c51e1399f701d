// libFuzzer target for the dmem rules' readers (node/dmem.h): a host tree under --host-root
// may hold anything in /proc/<pid>/cgroup and dmem.capacity, and the daemon acts on what
// they return, so any bytes must give an answer, never a crash or a hang. Properties checked:
//  - a unified cgroup path, when found, is absolute and one line;
//  - the common cgroup of the input's absolute lines holds each of them, and every line's
//    common cgroup is found (the climb ends even for lines that are not absolute).
//
// Built and run by scripts/fuzz.sh (the _fuzz.cc suffix keeps it out of the normal build).
//
// Thread-safety: libFuzzer calls LLVMFuzzerTestOneInput from one thread.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "node/dmem.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::optional<std::string> path = gpulet::node::UnifiedCgroupPath(text);
  if (path && (path->empty() || (*path)[0] != '/' || path->find('\n') != std::string::npos)) {
    abort();
  }
  gpulet::node::DmemCapacityLists(text, "0000:02:00.0");
  gpulet::node::DriverHasMemoryLimits(text);
  const std::vector<std::string> lines = absl::StrSplit(text, '\n');
  std::vector<std::string> absolute;
  for (const std::string& l : lines) {
    if (!l.empty() && l[0] == '/') absolute.push_back(l);
  }
  const std::string common = gpulet::node::CommonCgroup(absolute);
  for (const std::string& l : absolute) {
    if (!gpulet::node::CgroupWithin(l, common)) abort();
  }
  gpulet::node::CommonCgroup(lines);
  return 0;
}
