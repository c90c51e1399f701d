// Kubernetes name rules gpulet checks before a name reaches the API server or a path: a DNS
// subdomain (RFC 1123: lower-case letters, digits, '-' and '.', labels that start and end
// with a letter or digit), as apimachinery's validation defines it.
//
// Thread-safety: pure functions.
#ifndef GPULET_COMMON_K8S_NAMES_H_
#define GPULET_COMMON_K8S_NAMES_H_

#include <cstddef>

#include "absl/strings/string_view.h"

namespace gpulet {

// Whether `name` is a DNS subdomain of at most `max_bytes` (the API's limit is 253; fields
// such as ResourceSlice spec.driver allow 63).
bool IsDnsSubdomain(absl::string_view name, size_t max_bytes = 253);

}  // namespace gpulet

#endif  // GPULET_COMMON_K8S_NAMES_H_
