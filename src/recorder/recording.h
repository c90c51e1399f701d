// A recording: the flight recorder's value types (flight_recorder.h keeps them, recorder_files.h
// writes and reads them, postmortem.h judges them). Plain values with no dependency beyond
// the standard library, so the file reader and its fuzz target stand alone.
//
// Thread-safety: plain values and pure functions.
#ifndef GPULET_RECORDER_RECORDING_H_
#define GPULET_RECORDER_RECORDING_H_

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpulet::recorder {

// The recorded columns, in one table: the JSON column names, the timeline's labels and the
// SVG's series all come from it.
enum class Column : uint8_t {
  kAnswering,  // 1: the sample call answered; 0: it failed (the GPU lost or hung)
  kNvmlMs,     // how long the sample call took
  kGpuTempC,
  kMemTempC,
  kPowerMw,
  kPowerLimitMw,
  kSmClockMhz,
  kMemClockMhz,
  kThrottleReasons,  // NVML clocks event reason bits
  kGpuUtilPercent,
  kFbUsedMib,
  kPcieReplays,
  kPcieLinkWidth,
  kPcieLinkMts,  // link speed, megatransfers per second
  kAerCorrectable,
  kAerNonFatal,
  kAerFatal,
  kRemappedUncorrectable,
  kProcesses,
  kEccSbe,  // corrected (single-bit) ECC errors since the driver loaded
  kEccDbe,  // uncorrected (double-bit) ones
  kCount
};
inline constexpr size_t kColumnCount = static_cast<size_t>(Column::kCount);

// How samples folded into one (the recorder's older, coarser part) keep a column: the worst
// of them, so that a peak, a dip or a slowdown bit survives the coarsening.
enum class Fold : uint8_t { kMax, kMin, kOr };

struct ColumnInfo {
  Column column;
  const char* name;  // JSON column name
  const char* unit;  // "" for a count or flag
  Fold fold;
};
inline constexpr std::array<ColumnInfo, kColumnCount> kColumns = {{
    {Column::kAnswering, "answering", "", Fold::kMin},
    {Column::kNvmlMs, "nvml_ms", "ms", Fold::kMax},
    {Column::kGpuTempC, "gpu_temp_c", "°C", Fold::kMax},
    {Column::kMemTempC, "mem_temp_c", "°C", Fold::kMax},
    {Column::kPowerMw, "power_mw", "mW", Fold::kMax},
    {Column::kPowerLimitMw, "power_limit_mw", "mW", Fold::kMin},
    {Column::kSmClockMhz, "sm_clock_mhz", "MHz", Fold::kMin},
    {Column::kMemClockMhz, "mem_clock_mhz", "MHz", Fold::kMin},
    {Column::kThrottleReasons, "throttle_reasons", "", Fold::kOr},
    {Column::kGpuUtilPercent, "gpu_util_percent", "%", Fold::kMax},
    {Column::kFbUsedMib, "fb_used_mib", "MiB", Fold::kMax},
    {Column::kPcieReplays, "pcie_replays", "", Fold::kMax},
    {Column::kPcieLinkWidth, "pcie_link_width", "lanes", Fold::kMin},
    {Column::kPcieLinkMts, "pcie_link_mts", "MT/s", Fold::kMin},
    {Column::kAerCorrectable, "aer_correctable", "", Fold::kMax},
    {Column::kAerNonFatal, "aer_nonfatal", "", Fold::kMax},
    {Column::kAerFatal, "aer_fatal", "", Fold::kMax},
    {Column::kRemappedUncorrectable, "remapped_uncorrectable", "", Fold::kMax},
    {Column::kProcesses, "processes", "", Fold::kMax},
    {Column::kEccSbe, "ecc_sbe", "", Fold::kMax},
    {Column::kEccDbe, "ecc_dbe", "", Fold::kMax},
}};
const ColumnInfo& InfoOf(Column column);

// NVML's clocks event reason bits (nvmlClocksEventReason*, nvml.h) that say the GPU slowed
// itself because of heat or power.
inline constexpr uint32_t kThrottleSwPowerCap = 0x4;
inline constexpr uint32_t kThrottleHwSlowdown = 0x8;
inline constexpr uint32_t kThrottleSwThermal = 0x20;
inline constexpr uint32_t kThrottleHwThermal = 0x40;
inline constexpr uint32_t kThrottleHwPowerBrake = 0x80;

struct RecordedSample {
  static constexpr int32_t kAbsent = std::numeric_limits<int32_t>::min();
  int64_t at_ms = 0;
  std::array<int32_t, kColumnCount> values = [] {
    std::array<int32_t, kColumnCount> v;
    v.fill(kAbsent);
    return v;
  }();

  std::optional<int64_t> Get(Column c) const {
    int32_t v = values[static_cast<size_t>(c)];
    return v == kAbsent ? std::nullopt : std::optional<int64_t>(v);
  }
  // Clamps to int32's range (kAbsent excluded); nullopt leaves the value absent.
  void Set(Column c, std::optional<int64_t> v);
  // Folds `later` into this one (each column by its Fold; a value absent in one is the
  // other's); the time becomes `later`'s.
  void FoldIn(const RecordedSample& later);

  friend bool operator==(const RecordedSample&, const RecordedSample&) = default;
};

enum class EventKind : uint8_t {
  kXid,           // an XID: `xid`, and the kernel log's or NVML's text
  kHealth,        // the GPU's health changed: the new state and its reason
  kNvmlError,     // the sample call failed: NVML's error
  kProcessStart,  // a process appeared on the GPU: `pid`, its name, `pod`
  kProcessStop,   // it left
  kRecorderStart  // gpulet began recording (its version, the driver's)
};
const char* EventKindName(EventKind kind);
std::optional<EventKind> ParseEventKind(std::string_view name);

struct RecordedEvent {
  int64_t at_ms = 0;
  EventKind kind = EventKind::kXid;
  int xid = 0;            // kXid only
  unsigned pid = 0;       // process events only
  std::string pod = "";   // "namespace/pod/container" when pod attribution knew; else ""
  std::string text = "";  // at most kMaxEventText bytes
  // kNvmlError only: NVML's return code for the failure, when it carried one; else -1. What
  // reads a recording decides by it, never by the text.
  int nvml_code = -1;

  friend bool operator==(const RecordedEvent&, const RecordedEvent&) = default;
};

// One GPU's recording, as written on a fault.
struct RecorderDump {
  // The GPU, as the store knew it.
  std::string uuid;
  std::string name;
  std::string pci_bus_id;
  std::optional<unsigned> index;
  // The node and software at the time: a driver that changed between two faults, or a fault
  // seen again after a reboot (another boot id), is evidence.
  std::string node;
  std::string boot_id;
  std::string driver_version;
  std::string gpulet_version;
  // The fault that caused the dump.
  int64_t fault_ms = 0;
  std::string fault;   // "Unhealthy: XID 79: GPU has fallen off the bus" or "XID 13: ..."
  std::string health;  // the GPU's state at the dump (HealthStateName)
  int64_t interval_ms = 0;
  std::vector<RecordedSample> samples;  // oldest first
  std::vector<RecordedEvent> events;    // oldest first

  friend bool operator==(const RecorderDump&, const RecorderDump&) = default;
};

inline constexpr size_t kMaxEvents = 512;
inline constexpr size_t kMaxEventText = 240;
// The latest time a recording, the retired-GPU file or the reboot record may hold: 2200-01-01
// in seconds since 1970. Later is a damaged file, and arithmetic on earlier times cannot overflow.
inline constexpr int64_t kLatestUnixSeconds = 7258118400;

}  // namespace gpulet::recorder

#endif  // GPULET_RECORDER_RECORDING_H_
