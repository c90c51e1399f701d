// Keyed statuses: an absl::Status that names the configuration key it is about ("dra.
// checkpointFile", "metrics.webConfigFile") as a typed payload beside its message, so that a
// caller decides by the key and the code, never by reading the text.
//
// AtKey(key, s) gives `s` with its code and payloads kept, its message prefixed "key: " and
// the key attached. When `s` already names a key it is returned unchanged: the innermost key
// is the most precise one (a checkpoint's error inside the DRA driver's start stays
// "dra.checkpointFile", not "dra.enabled"). OK statuses pass through. KeyOf(s) is the key
// attached, or "" when none is.
//
// Thread-safety: pure functions.
#ifndef GPULET_COMMON_KEYED_STATUS_H_
#define GPULET_COMMON_KEYED_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gpulet {

// `s` naming `key` (see above). REQUIRES: `key` is not empty.
absl::Status AtKey(absl::string_view key, absl::Status s);

// The key `s` names, or "".
std::string KeyOf(const absl::Status& s);

}  // namespace gpulet

#endif  // GPULET_COMMON_KEYED_STATUS_H_
