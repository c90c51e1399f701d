// libFuzzer target for the flight recorder's file reader (recorder/recorder_files.h) and the
// PCI sysfs parsers (recorder/pci_link.h). `gpulet serve` reads the recorder directory at start
// and `gpulet postmortem` reads files a person copied around: any bytes must give a dump or an
// error, never a crash or a hang. Properties checked for every input:
//  - a file that parses writes back to JSON that parses to the same dump;
//  - the postmortem (verdict, timeline, SVG) of any dump that parses completes;
//  - the AER and link-speed parsers accept or refuse any text;
//  - the retired-GPU file and the reboot record (recorder/retirement.h, reboot_record.h), the
//    other state files gpulet keeps on the host, parse or refuse any bytes, and what parses
//    writes back to the same.
//
// Built and run by scripts/fuzz.sh; seeds are a recording as gpulet writes it.
//
// Thread-safety: libFuzzer calls LLVMFuzzerTestOneInput from one thread.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "absl/strings/string_view.h"
#include "recorder/pci_link.h"
#include "recorder/postmortem.h"
#include "recorder/reboot_record.h"
#include "recorder/recorder_files.h"
#include "recorder/retirement.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view text(reinterpret_cast<const char*>(data), size);
  (void)gpulet::recorder::ParseAerTotal(text, "TOTAL_ERR_COR");
  (void)gpulet::recorder::ParseLinkSpeed(text);
  if (auto retired = gpulet::recorder::RetiredFromJson(text); retired.ok()) {
    auto again = gpulet::recorder::RetiredFromJson(gpulet::recorder::RetiredToJson(*retired));
    if (!again.ok() || *again != *retired) std::abort();
  }
  if (auto reboots = gpulet::recorder::RebootRecordFromJson(text); reboots.ok()) {
    auto again =
        gpulet::recorder::RebootRecordFromJson(gpulet::recorder::RebootRecordToJson(*reboots));
    if (!again.ok() || *again != *reboots) std::abort();
  }
  absl::StatusOr<gpulet::recorder::RecorderDump> dump = gpulet::recorder::DumpFromJson(text);
  if (!dump.ok()) return 0;
  absl::StatusOr<gpulet::recorder::RecorderDump> again =
      gpulet::recorder::DumpFromJson(gpulet::recorder::DumpToJson(*dump));
  if (!again.ok() || !(*again == *dump)) std::abort();
  gpulet::recorder::Verdict v = gpulet::recorder::Assess(*dump, {});
  if (gpulet::recorder::TimelineText(*dump, v).empty() ||
      gpulet::recorder::TimelineSvg(*dump, v).empty())
    std::abort();
  return 0;
}
