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

bool IsQualifiedName(absl::string_view name) {
  if (size_t slash = name.find('/'); slash != absl::string_view::npos) {
    if (!IsDnsSubdomain(name.substr(0, slash))) return false;
    name.remove_prefix(slash + 1);
  }
  auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  if (name.empty() || name.size() > 63 || !alnum(name.front()) || !alnum(name.back())) {
    return false;
  }
  for (char c : name) {
    if (!alnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

}  // namespace gpulet
