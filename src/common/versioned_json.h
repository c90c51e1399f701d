// ParseVersionedJson: the first checks of every JSON state file gpulet keeps on the node (the
// XID history, the flight recorder's recordings, the retired GPUs): strict JSON
// (common/json_reader.h: no key twice, bounded depth and size), an object, and the "version"
// this gpulet writes; the callers read the fields with JsonFields. Errors read "not a <what>: <what
// is wrong>"; callers add the path and what to do.
//
// Thread-safety: a pure function.
#ifndef GPULET_COMMON_VERSIONED_JSON_H_
#define GPULET_COMMON_VERSIONED_JSON_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace gpulet {

absl::StatusOr<nlohmann::json> ParseVersionedJson(absl::string_view text, int version,
                                                  absl::string_view what);

}  // namespace gpulet

#endif  // GPULET_COMMON_VERSIONED_JSON_H_
