// libFuzzer target for the strict YAML reader (yaml/reader.h): any bytes must give a node or
// an InvalidArgument error from Load, never an exception or a crash, and CheckKeys and every
// read of a Map over the result must end the same way.
//
// Built and run by scripts/fuzz.sh (the _fuzz.cc suffix keeps it out of the normal build).
//
// Thread-safety: libFuzzer calls LLVMFuzzerTestOneInput from one thread.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "yaml/reader.h"

namespace {

void MustBeOkOrInvalid(const absl::Status& s) {
  if (!s.ok() && !absl::IsInvalidArgument(s)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1 << 16)) return 0;
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<YAML::Node> root = gpulet::yaml::Load(text, "fuzz.yaml");
  MustBeOkOrInvalid(root.status());
  if (!root.ok()) return 0;
  MustBeOkOrInvalid(gpulet::yaml::CheckKeys(*root, "fuzz.yaml", 3));
  gpulet::yaml::Map top(*root, "fuzz.yaml");
  MustBeOkOrInvalid(top.Check());
  if (!top.Check().ok()) return 0;
  for (const std::string& key : top.keys()) {
    std::string s;
    bool b = false;
    MustBeOkOrInvalid(top.String(key, &s));
    MustBeOkOrInvalid(top.NonEmptyString(key, &s, gpulet::Presence::kOptional));
    MustBeOkOrInvalid(top.Bool(key, &b, gpulet::Presence::kOptional));
    gpulet::yaml::Map sub(top.Get(key), "fuzz.yaml", top.PathOf(key));
    MustBeOkOrInvalid(sub.Check());
  }
  MustBeOkOrInvalid(top.OnlyKeys({"a", "b"}));
  return 0;
}
