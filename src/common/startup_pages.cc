#include "common/startup_pages.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace gpulet {

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21  // Linux 5.4; glibc headers older than the kernel may lack it
#endif

absl::StatusOr<size_t> ReleaseStartupCode() {
  std::error_code ec;
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) return absl::InternalError(absl::StrCat("cannot read /proc/self/exe: ", ec.message()));
  std::ifstream maps("/proc/self/maps");
  if (!maps) return absl::InternalError("cannot read /proc/self/maps");
  struct Range {
    uintptr_t start, end;
  };
  std::vector<Range> ranges;
  std::string line;
  while (std::getline(maps, line)) {
    // "start-end perms offset dev inode path"; a path with spaces keeps them after field 5.
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::MaxSplits(' ', 5), absl::SkipWhitespace());
    if (fields.size() < 6 || absl::StripLeadingAsciiWhitespace(fields[5]) != exe) continue;
    // Read-only only: a writable mapping's touched pages are private copies, not the file's.
    if (fields[1].size() < 2 || fields[1][1] == 'w') continue;
    std::vector<absl::string_view> bounds = absl::StrSplit(fields[0], '-');
    Range r{};
    if (bounds.size() != 2 || !absl::SimpleHexAtoi(bounds[0], &r.start) ||
        !absl::SimpleHexAtoi(bounds[1], &r.end) || r.end <= r.start) {
      continue;
    }
    ranges.push_back(r);
  }
  size_t advised = 0;
  for (const Range& r : ranges) {
    if (madvise(reinterpret_cast<void*>(r.start), r.end - r.start, MADV_PAGEOUT) != 0) {
      if (errno == EINVAL) return absl::UnimplementedError("this kernel has no MADV_PAGEOUT");
      return absl::InternalError(absl::StrCat("madvise(MADV_PAGEOUT): ", std::strerror(errno)));
    }
    advised += r.end - r.start;
  }
  return advised;
}

}  // namespace gpulet
