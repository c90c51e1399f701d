// Postmortem: what a flight recorder file (flight_recorder.h) says about a fault, as a
// verdict with its evidence, a timeline a person reads, and an SVG picture of it.
//
// The verdict weighs the recorded facts, never gpulet's own prose:
//  - hardware: the GPU fell off the bus (XID 79, or NVML stopped answering) with PCIe errors
//    (AER counters rising, replays, the link trained down) in the window before; a thermal or
//    power excursion before the fault (temperature at or above kHotC, thermal or power-brake
//    slowdown, power above its limit); a fault that repeats across node reboots (another
//    boot id) or across workloads (other pods, or none at all);
//  - driver or configuration: XIDs NVIDIA's catalogue sends to a driver or firmware update
//    or a software investigation (the GSP's 119 and 120, for example), NVML reporting the
//    user-space library and the kernel module as mismatched, a driver that changed since the
//    previous fault;
//  - application: only application XIDs (the catalogue's own class: 13, 31, 43, ...), all
//    while one pod held the GPU;
//  - undetermined: none of these; the verdict says what would tell.
// Hardware evidence wins over driver evidence, which wins over an application's: a card
// that fell off the bus while one pod ran is still a card that fell off the bus.
//
// Thread-safety: pure functions.
#ifndef GPULET_RECORDER_POSTMORTEM_H_
#define GPULET_RECORDER_POSTMORTEM_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "recorder/recording.h"

namespace gpulet::recorder {

enum class Cause { kHardware, kDriver, kApplication, kUndetermined };
// "hardware", "driver-or-configuration", "application", "undetermined".
const char* CauseName(Cause cause);

inline constexpr int64_t kHotC = 90;  // a GPU core at or above this is in a thermal excursion

struct Evidence {
  int64_t at_ms = 0;  // 0: not tied to one moment
  std::string text;
};

struct Verdict {
  Cause cause = Cause::kUndetermined;
  std::string headline;            // one line
  std::string next;                // what to do
  std::vector<Evidence> evidence;  // oldest first
};

// The verdict on `fault`; `earlier` are older dumps of the same GPU (any order), for repeats
// across reboots and workloads and for driver changes.
Verdict Assess(const RecorderDump& fault, std::span<const RecorderDump> earlier);

// The timeline as text: the GPU, the fault, the verdict and its evidence, every event, and
// the samples (all of the last minute before the fault, one a minute before that).
std::string TimelineText(const RecorderDump& dump, const Verdict& verdict);

// The same as a self-contained SVG image: temperature, power and its limit, SM clock and
// PCIe errors against time, with the events and the fault marked.
std::string TimelineSvg(const RecorderDump& dump, const Verdict& verdict);

// "2026-12-05T10:00:01.250Z"
std::string FormatMillis(int64_t unix_ms);

}  // namespace gpulet::recorder

#endif  // GPULET_RECORDER_POSTMORTEM_H_
