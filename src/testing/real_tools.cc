#include "testing/real_tools.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace gpulet::testing {

std::string FindOnPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(dir, "/", program);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

std::string RealTool(const std::string& name) {
  std::string cache;
  if (const char* c = std::getenv("GPULET_E2E_CACHE"); c != nullptr && *c != '\0') {
    cache = c;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') {
    cache = absl::StrCat(x, "/gpulet-e2e");
  } else if (const char* h = std::getenv("HOME"); h != nullptr) {
    cache = absl::StrCat(h, "/.cache/gpulet-e2e");
  }
  if (std::string built = absl::StrCat(cache, "/bin/", name);
      !cache.empty() && access(built.c_str(), X_OK) == 0) {
    return built;
  }
  return FindOnPath(name);
}

}  // namespace gpulet::testing
