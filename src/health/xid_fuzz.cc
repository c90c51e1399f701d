// libFuzzer target for the kernel-log XID parsers (health/xid.h). They run on every kernel
// log line of a GPU node, so any text must give an event, a mapping or nothing: no crash,
// hang or out-of-bounds read. Properties checked for every input:
//  - every bus id reported is non-empty and already normalised (NormalizeBusId is a no-op);
//  - fallen-off-the-bus reports are XID 79;
//  - scanning the text in one call and line by line gives the same findings (the scanner's
//    multi-line state must not depend on how records are split);
//  - every event can be assessed against the catalogue.
//
// Built and run by scripts/fuzz.sh (the _fuzz.cc suffix keeps it out of the normal build);
// seeds are the lines in tests/fixtures/kmsg.
//
// Thread-safety: libFuzzer calls LLVMFuzzerTestOneInput from one thread.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <variant>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "health/xid.h"
#include "health/xid_catalog.h"
#include "node/bus_id.h"

namespace {

void CheckBusId(const std::string& bus_id) {
  if (bus_id.empty() || gpulet::node::NormalizeBusId(bus_id) != bus_id) std::abort();
}

void CheckEvent(const gpulet::health::XidEvent& e) {
  CheckBusId(e.bus_id);
  if (e.xid < 0) std::abort();
  if (e.source == gpulet::health::XidSource::kFallenOffBusMessage && e.xid != 79) std::abort();
  gpulet::health::XidAssessment a = gpulet::health::AssessXid(e);
  if (a.info.code != e.xid || a.info.mnemonic.empty()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view input(reinterpret_cast<const char*>(data), size);

  if (std::optional<gpulet::health::XidEvent> e = gpulet::health::ParseXidLine(input))
    CheckEvent(*e);
  if (std::optional<gpulet::health::XidEvent> e = gpulet::health::ParseFallenOffBusLine(input))
    CheckEvent(*e);
  if (std::optional<gpulet::health::GpuUuidMapping> m = gpulet::health::ParseGpuUuidLine(input)) {
    CheckBusId(m->bus_id);
    if (m->uuid.rfind("GPU-", 0) != 0) std::abort();
  }

  std::vector<gpulet::health::KernelLogFinding> whole = gpulet::health::ScanKernelLog(input);
  gpulet::health::KernelLogScanner by_line;
  std::vector<gpulet::health::KernelLogFinding> pieces;
  for (absl::string_view line : absl::StrSplit(input, '\n')) {
    for (gpulet::health::KernelLogFinding& f : by_line.Scan(line)) pieces.push_back(std::move(f));
  }
  if (whole != pieces) std::abort();
  for (const gpulet::health::KernelLogFinding& f : whole) {
    if (const auto* e = std::get_if<gpulet::health::XidEvent>(&f)) CheckEvent(*e);
    if (const auto* m = std::get_if<gpulet::health::GpuUuidMapping>(&f)) CheckBusId(m->bus_id);
  }
  return 0;
}
