// The one strict reader of the JSON documents gpulet reads back: its state files on the node
// (the XID history, the flight recorder's recordings, the retired GPUs, the DRA checkpoint),
// what another gpulet process wrote (the daemon's /status), and the OCI image archive's index
// and manifests. Hand-edited, truncated or hostile text must give a clear error, never a
// silent default.
//
// ParseStrictJson(text, what, limits) parses a document and refuses, besides text that is not
// JSON, what nlohmann::json would take silently: a key twice in one object (the later one
// would win), nesting deeper than `max_depth`, and more than `max_bytes` of text.
//
// JsonFields reads one object's fields by name. A missing field, a field of another type or
// outside its range is an InvalidArgument that names the field's path ("events[3].xid") and
// what was expected; NoOtherKeys() refuses a key that no call read (a typo in an edited file,
// or a newer gpulet's field), for readers that want that.
//
// Every error reads "not <what>: <why>" (what: "a flight recorder file"); callers add the
// file's path and what to do.
//
// Thread-safety: ParseStrictJson is a pure function; a JsonFields is used by one thread.
#ifndef GPULET_COMMON_JSON_READER_H_
#define GPULET_COMMON_JSON_READER_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace gpulet {

struct JsonLimits {
  size_t max_bytes = size_t{64} << 20;
  int max_depth = 32;
};

absl::StatusOr<nlohmann::json> ParseStrictJson(absl::string_view text, absl::string_view what,
                                               JsonLimits limits = {});

// Whether a field may be absent (the output is then left as it was).
enum class Presence { kRequired, kOptional };

class JsonFields {
 public:
  // `object` must outlive the reader; `path` is where it sits in the document ("" at the top,
  // "events[3]" for a nested one). An `object` that is not an object fails every read.
  JsonFields(const nlohmann::json& object, absl::string_view what, std::string path = "");

  absl::Status String(absl::string_view key, std::string* out,
                      Presence presence = Presence::kRequired);
  // A string of at least one byte.
  absl::Status NonEmptyString(absl::string_view key, std::string* out,
                              Presence presence = Presence::kRequired);
  absl::Status Bool(absl::string_view key, bool* out, Presence presence = Presence::kRequired);
  // A finite number.
  absl::Status Double(absl::string_view key, double* out, Presence presence = Presence::kRequired);
  // An integer from `min` to `max`; `range` words the range for the error ("a time in
  // milliseconds since 1970"; default: "an integer from <min> to <max>").
  absl::Status Int64(absl::string_view key, int64_t min, int64_t max, int64_t* out,
                     Presence presence = Presence::kRequired, absl::string_view range = {});
  // The same for a narrower integer type, its whole range by default.
  template <typename T>
  absl::Status Int(absl::string_view key, T* out, T min = std::numeric_limits<T>::min(),
                   T max = std::numeric_limits<T>::max(), Presence presence = Presence::kRequired,
                   absl::string_view range = {}) {
    static_assert(std::is_integral_v<T> && (std::is_signed_v<T> || sizeof(T) < 8),
                  "Int64 covers 64-bit values");
    int64_t v = 0;
    absl::Status s = Int64(key, min, max, &v, presence, range);
    if (s.ok() && Has(key)) *out = static_cast<T>(v);
    return s;
  }
  // A list of strings (any may be empty); an element of another type is named by its index
  // ("devices[0].cdiDeviceIds[2]").
  absl::Status StringList(absl::string_view key, std::vector<std::string>* out,
                          Presence presence = Presence::kRequired);
  // The object or array at `key`; null when it is absent and optional.
  absl::StatusOr<const nlohmann::json*> Object(absl::string_view key,
                                               Presence presence = Presence::kRequired);
  absl::StatusOr<const nlohmann::json*> Array(absl::string_view key,
                                              Presence presence = Presence::kRequired);

  // Whether `key` is present.
  bool Has(absl::string_view key) const;
  // The path of `key` ("events[3].xid"), for nested readers and errors.
  std::string PathOf(absl::string_view key) const;
  // An error about `key` for a check the reader does not make itself: "not <what>: <path of
  // key> <why>".
  absl::Status Bad(absl::string_view key, absl::string_view why) const;
  // The error for a value the caller's own check refused (a name outside a set, a time that
  // does not parse): "<path> must be <expected>, not <the value>", or "<path> is missing
  // (<expected>)".
  absl::Status Unexpected(absl::string_view key, absl::string_view expected) const;
  // An error about this object itself ("not <what>: <path> <why>").
  absl::Status BadHere(absl::string_view why) const;
  // Refuses the first key no call above read (Has and PathOf do not count as reads).
  absl::Status NoOtherKeys() const;

 private:
  // The value at `key`, or null; marks it read.
  const nlohmann::json* Find(absl::string_view key);
  // Object and Array: the value at `key` when it is of `type` (`kind` words it, "a list").
  absl::StatusOr<const nlohmann::json*> Container(absl::string_view key, Presence presence,
                                                  nlohmann::json::value_t type,
                                                  absl::string_view kind);
  // For an absent `key`: OK when it may be absent, else the error saying what was expected.
  absl::Status Absent(absl::string_view key, Presence presence, absl::string_view expected) const;

  const nlohmann::json& object_;
  std::string what_;
  std::string path_;
  std::set<std::string, std::less<>> read_;
};

}  // namespace gpulet

#endif  // GPULET_COMMON_JSON_READER_H_
