// libFuzzer target for the /status document reader (state/status_report.h): `gpulet status`
// reads what the daemon's endpoint answered, so any bytes must give a report or an error,
// never a crash. Property checked: a report that parses writes back (ToJsonText) to a document
// that parses again and writes back byte for byte the same (the first write normalises: times
// to whole seconds, "+79" to "79").
//
// Built and run by scripts/fuzz.sh (the _fuzz.cc suffix keeps it out of the normal build).
//
// Thread-safety: libFuzzer calls LLVMFuzzerTestOneInput from one thread.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "state/status_report.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 65536) return 0;
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<gpulet::state::StatusReport> report =
      gpulet::state::StatusReport::FromJsonText(text);
  if (!report.ok()) {
    if (report.status().message().empty()) std::abort();
    return 0;
  }
  const std::string once = report->ToJsonText();
  absl::StatusOr<gpulet::state::StatusReport> again =
      gpulet::state::StatusReport::FromJsonText(once);
  if (!again.ok()) {
    std::fprintf(stderr, "written:\n%s\nread back: %s\n", once.c_str(),
                 std::string(again.status().message()).c_str());
    std::abort();
  }
  if (again->ToJsonText() != once) {
    std::fprintf(stderr, "written:\n%s\nwritten again:\n%s\n", once.c_str(),
                 again->ToJsonText().c_str());
    std::abort();
  }
  return 0;
}
