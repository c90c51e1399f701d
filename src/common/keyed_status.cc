#include "common/keyed_status.h"

#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace gpulet {
namespace {

// A type URL of our own: payloads are keyed by URL, and no other library uses this one.
constexpr absl::string_view kKeyPayload = "type.gpulet.dev/config-key";

}  // namespace

absl::Status AtKey(absl::string_view key, absl::Status s) {
  if (s.ok() || s.GetPayload(kKeyPayload).has_value()) return s;
  absl::Status keyed(s.code(), absl::StrCat(key, ": ", s.message()));
  s.ForEachPayload(
      [&keyed](absl::string_view url, const absl::Cord& p) { keyed.SetPayload(url, p); });
  keyed.SetPayload(kKeyPayload, absl::Cord(key));
  return keyed;
}

std::string KeyOf(const absl::Status& s) {
  auto key = s.GetPayload(kKeyPayload);  // absl::optional in Debian's Abseil
  return key.has_value() ? std::string(*key) : std::string();
}

}  // namespace gpulet
