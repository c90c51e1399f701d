// libFuzzer target for the /dev/kmsg record parser (health/kmsg.h). The parser reads
// whatever the host's kernel log, or a file standing in for it, hands gpulet, so any bytes
// must give a record or an InvalidArgument status: no crash, no hang, no out-of-bounds read.
// It also checks properties that must hold for every input:
//  - a parsed record's level is 0-7 and its facility fits the 10-bit priority;
//  - unescaping never makes text longer, and text without a backslash is left unchanged;
//  - every piece SplitKmsgRecords produces ends in a newline and starts a record.
//
// Built and run by scripts/fuzz.sh (the _fuzz.cc suffix keeps it out of the normal build);
// seeds are the records and lines in tests/fixtures/kmsg.
//
// Thread-safety: libFuzzer calls LLVMFuzzerTestOneInput from one thread.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "health/kmsg.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view input(reinterpret_cast<const char*>(data), size);

  absl::StatusOr<gpulet::health::KmsgRecord> record = gpulet::health::ParseKmsgRecord(input);
  if (record.ok()) {
    if (record->level < 0 || record->level > 7) std::abort();
    if (record->facility < 0 || record->facility > 127) std::abort();
    if (record->text.size() > input.size()) std::abort();
  } else if (record.status().message().empty()) {
    std::abort();  // errors must say what was wrong
  }

  std::string unescaped = gpulet::health::UnescapeKmsgText(input);
  if (unescaped.size() > input.size()) std::abort();
  if (input.find('\\') == absl::string_view::npos && unescaped != input) std::abort();

  for (const std::string& piece : gpulet::health::SplitKmsgRecords(input)) {
    if (piece.empty() || piece.back() != '\n' || piece[0] == ' ' || piece[0] == '#') {
      std::abort();
    }
    (void)gpulet::health::ParseKmsgRecord(piece);
  }
  return 0;
}
