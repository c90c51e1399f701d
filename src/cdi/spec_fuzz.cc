// libFuzzer target for the CDI spec reader (cdi/spec.h, ParseSpec), which reads every spec in
// the node's CDI directories, gpulet's and other vendors': any bytes must give a Spec or an
// InvalidArgument error, never an exception or a crash.
//
// Built and run by scripts/fuzz.sh (the _fuzz.cc suffix keeps it out of the normal build).
//
// Thread-safety: libFuzzer calls LLVMFuzzerTestOneInput from one thread.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/status/statusor.h"
#include "cdi/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1 << 16)) return 0;
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<gpulet::cdi::Spec> spec = gpulet::cdi::ParseSpec(text, "fuzz.yaml");
  if (!spec.ok() && !absl::IsInvalidArgument(spec.status())) std::abort();
  return 0;
}
