// Kubernetes name rules gpulet checks before a name reaches the API server or a path: a DNS
// subdomain (RFC 1123: lower-case letters, digits, '-' and '.', labels that start and end
// with a letter or digit) and a qualified name (a label, annotation or taint key), as
// apimachinery's validation defines them.
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

// Whether `name` is a qualified name, as label, annotation and taint keys are: an optional
// prefix that is a DNS subdomain and a '/', then 1 to 63 of [A-Za-z0-9_.-], starting and
// ending with a letter or digit ("nvidia.com/gpu.present", "gpu").
bool IsQualifiedName(absl::string_view name);

}  // namespace gpulet

#endif  // GPULET_COMMON_K8S_NAMES_H_
