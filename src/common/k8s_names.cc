#include "common/k8s_names.h"

namespace gpulet {

bool IsDnsSubdomain(absl::string_view name, size_t max_bytes) {
  bool ok = !name.empty() && name.size() <= max_bytes;
  bool label_start = true;  // at the start of a dot-separated label
  for (size_t i = 0; ok && i < name.size(); ++i) {
    const char c = name[i];
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    const bool label_end = i + 1 == name.size() || name[i + 1] == '.';
    if (c == '.') {
      ok = !label_start;
      label_start = true;
      continue;
    }
    ok = alnum || (c == '-' && !label_start && !label_end);
    label_start = false;
  }
  return ok && !label_start;
}

}  // namespace gpulet
