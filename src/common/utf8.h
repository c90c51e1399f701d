// Cutting text to a byte limit without splitting a UTF-8 character: for the fields other
// systems cap in bytes (a Kubernetes Event's note and a condition's message, the flight
// recorder's event text).
//
// Thread-safety: pure functions.
#ifndef GPULET_COMMON_UTF8_H_
#define GPULET_COMMON_UTF8_H_

#include <string>

#include "absl/strings/string_view.h"

namespace gpulet {

// `text` cut to at most `limit` bytes, on a character boundary, with `marker` ("..." says
// that something was cut) ending the cut text within the limit. Unchanged when it fits.
std::string CutUtf8(std::string text, size_t limit, absl::string_view marker = "");

}  // namespace gpulet

#endif  // GPULET_COMMON_UTF8_H_
