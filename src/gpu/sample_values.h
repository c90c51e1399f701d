// The GPU value table: one row per value gpulet reads from a GPU each sampling round, with
// everything each consumer needs, so that adding a value is one row (and its NVML read and
// its test), not an edit in ten files.
//
// A row names where DeviceSample keeps the value (and MigInstanceSample, where NVML reports
// it per MIG device), its unit, its NVML source, which GPUs have it, its Prometheus family
// (name, type, help, DCGM field type and id), its /status key and its line in
// docs/metrics.md. Driven from it: the worker protocol's sample encoding
// (nvml_worker_protocol.cc), the exposition's value families (metrics/exposition.cc), the
// /status values (state/status_report.cc), the flight recorder's sampled columns
// (recorder/flight_recorder.cc names the rows it keeps and their cells) and the docs table
// (ValueTableMarkdown, checked against docs/metrics.md by SampleValuesTest). The NVML reads stay
// hand-written in nvml_gpu_library.cc because NVML's calls do not share a shape (one call fills
// several rows), and SampleValuesTest checks that the simulated GPUs yield every row the table says
// they have, so a row without a read fails a test.
//
// Values sampled but used by nothing are not in DeviceSample at all.
//
// Thread-safety: constant data and pure functions.
#ifndef GPULET_GPU_SAMPLE_VALUES_H_
#define GPULET_GPU_SAMPLE_VALUES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <variant>

#include "absl/types/span.h"
#include "gpu/gpu_library.h"

namespace gpulet::gpu {

// Every row of the table, in the order the exposition prints them (dcgm-exporter's default
// order for its default fields, then the rest).
enum class ValueId : uint8_t {
  kSmClock,
  kMemClock,
  kMemTemp,
  kGpuTemp,
  kPower,
  kEnergy,
  kPcieReplays,
  kGpuUtil,
  kMemCopyUtil,
  kEncUtil,
  kDecUtil,
  kXid,
  kFbFree,
  kFbUsed,
  kFbReserved,
  kNvLinkBandwidthTotal,
  kRemappedUncorrectable,
  kRemappedCorrectable,
  kRemapFailure,
  kGrEngineActive,
  kSmActive,
  kSmOccupancy,
  kTensorActive,
  kDramActive,
  kFp64Active,
  kFp32Active,
  kFp16Active,
  kPcieTxBytes,
  kPcieRxBytes,
  kNvLinkTxBytes,
  kNvLinkRxBytes,
  kPstate,
  kFanSpeed,
  kPowerLimit,
  kClocksEventReasons,
  kNvLinkDataTx,
  kNvLinkDataRx,
  kEccSbeVolatile,
  kEccDbeVolatile,
};
inline constexpr size_t kValueCount = static_cast<size_t>(ValueId::kEccDbeVolatile) + 1;

// Where DeviceSample keeps a row's value. A ProfilingSample member is read from
// DeviceSample::profiling. A function derives the value from other fields. monostate: the
// value does not come from the sample (the last XID comes from the event thread).
using SampleMember =
    std::variant<std::monostate, std::optional<unsigned> DeviceSample::*,
                 std::optional<uint64_t> DeviceSample::*, std::optional<double> DeviceSample::*,
                 std::optional<bool> DeviceSample::*, std::optional<int> DeviceSample::*,
                 std::optional<double> ProfilingSample::*,
                 std::optional<double> (*)(const DeviceSample&)>;

// Where MigInstanceSample keeps it, for a value NVML also reports per MIG device.
using MigMember = std::variant<std::monostate, std::optional<uint64_t> MigInstanceSample::*,
                               std::optional<double> ProfilingSample::*>;

// How the exposition prints the value: as dcgm-exporter prints a DCGM field of that type, or
// as gpulet prints its own series.
enum class DcgmType : uint8_t { kNone, kInt64, kDouble };

// What the exposition does to the sampled value: DCGM counts memory in MiB.
enum class ExportScale : uint8_t { kAsIs, kBytesToMiB };

// For a stored row's member pointer `std::optional<X> C::*`: X, the value's C++ type, and C,
// the struct that stores it. Not defined for the monostate or a derivation.
template <typename T>
struct MemberValue;
template <typename X, typename C>
struct MemberValue<std::optional<X> C::*> {
  using type = X;
  using owner = C;
};
template <typename T>
concept StoredMember = requires {
  typename MemberValue<T>::type;
};

struct SampleValue {
  ValueId id;
  const char* key;  // the worker protocol's key: "gpu_temp_c"
  SampleMember member;
  MigMember mig_member;
  const char* unit;      // "°C", for the docs
  const char* source;    // the NVML call or field, for the docs
  const char* hardware;  // which GPUs report it, for the docs
  // The Prometheus family; nullptr when the value has no family of its own (the clock-event
  // reasons and NVLink counters are printed by the exposition's own code, by label).
  const char* metric;
  const char* type;  // "gauge" or "counter"
  const char* help;
  DcgmType dcgm_type;
  int dcgm_field;  // DCGM's field id (dcgm_fields.h); 0 for gpulet's own series
  ExportScale scale;
  const char* status_key;  // the /status document's key for the GPU; nullptr: not there
};

// The whole table, in ValueId order.
absl::Span<const SampleValue> SampleValues();
const SampleValue& Value(ValueId id);

// The row's value in `s`, in the row's base unit; nullopt when the GPU did not report it.
std::optional<double> ReadValue(const SampleValue& row, const DeviceSample& s);
// The row's value for one MIG device; nullopt when NVML has no per-MIG value for the row.
std::optional<double> ReadMigValue(const SampleValue& row, const MigInstanceSample& m);
// A sampled value as the row's family prints it (DCGM's MiB for memory).
double ExportedValue(const SampleValue& row, double value);

// Whether the sample stores the row's value (in DeviceSample or its ProfilingSample); false
// for a derived row and for one that is not the sample's (the last XID).
bool IsStored(const SampleValue& row);

// Whether the row holds an integer (the /status document and the worker protocol write it
// without a decimal point).
bool IsIntegerValue(const SampleValue& row);

// The rows with a Prometheus family as the Markdown table docs/metrics.md carries under
// "## GPU values": series, type, unit, DCGM field id, source, GPUs.
std::string ValueTableMarkdown();

}  // namespace gpulet::gpu

#endif  // GPULET_GPU_SAMPLE_VALUES_H_
