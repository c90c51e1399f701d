#include "gpu/sample_values.h"

#include <array>
#include <type_traits>

#include "absl/strings/str_cat.h"

namespace gpulet::gpu {
namespace {

// DCGM's NVLink total counts both directions over every link, in KiB as NVML does.
std::optional<double> NvLinkTotalKib(const DeviceSample& s) {
  if (!s.nvlink_data_tx_kib || !s.nvlink_data_rx_kib) return std::nullopt;
  return static_cast<double>(*s.nvlink_data_tx_kib + *s.nvlink_data_rx_kib);
}

using D = DeviceSample;
using P = ProfilingSample;
using M = MigInstanceSample;
constexpr std::monostate kNone{};

// DCGM field ids and types: NVIDIA/DCGM dcgmlib/dcgm_fields.h (DCGM_FI_*). The help texts of
// the fields dcgm-exporter exports by default are its own (etc/default-counters.csv), so
// dashboards show the same words; the fan speed's and P-state's are gpulet's.
constexpr std::array<SampleValue, kValueCount> kValueRows = {{
    {ValueId::kSmClock, "sm_clock_mhz", &D::sm_clock_mhz, kNone, "MHz",
     "`nvmlDeviceGetClockInfo(SM)`", "all", "DCGM_FI_DEV_SM_CLOCK", "gauge",
     "SM clock frequency (in MHz).", DcgmType::kInt64, 100, ExportScale::kAsIs, nullptr},
    {ValueId::kMemClock, "mem_clock_mhz", &D::mem_clock_mhz, kNone, "MHz",
     "`nvmlDeviceGetClockInfo(MEM)`", "all", "DCGM_FI_DEV_MEM_CLOCK", "gauge",
     "Memory clock frequency (in MHz).", DcgmType::kInt64, 101, ExportScale::kAsIs, nullptr},
    {ValueId::kMemTemp, "mem_temp_c", &D::mem_temp_c, kNone, "°C",
     "`nvmlDeviceGetFieldValues(MEMORY_TEMP)`", "HBM datacenter GPUs", "DCGM_FI_DEV_MEMORY_TEMP",
     "gauge", "Memory temperature (in C).", DcgmType::kInt64, 140, ExportScale::kAsIs, nullptr},
    {ValueId::kGpuTemp, "gpu_temp_c", &D::gpu_temp_c, kNone, "°C",
     "`nvmlDeviceGetTemperature(GPU)`", "all", "DCGM_FI_DEV_GPU_TEMP", "gauge",
     "GPU temperature (in C).", DcgmType::kInt64, 150, ExportScale::kAsIs, "temperature_c"},
    {ValueId::kPower, "power_w", &D::power_w, kNone, "W", "`nvmlDeviceGetPowerUsage`", "all",
     "DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", DcgmType::kDouble, 155,
     ExportScale::kAsIs, "power_w"},
    {ValueId::kEnergy, "energy_mj", &D::energy_mj, kNone, "mJ",
     "`nvmlDeviceGetTotalEnergyConsumption`", "Volta and newer",
     "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
     "Total energy consumption since boot (in mJ).", DcgmType::kInt64, 156, ExportScale::kAsIs,
     nullptr},
    {ValueId::kPcieReplays, "pcie_replays", &D::pcie_replays, kNone, "replays",
     "`nvmlDeviceGetPcieReplayCounter`", "all", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter",
     "Total number of PCIe retries.", DcgmType::kInt64, 202, ExportScale::kAsIs, nullptr},
    {ValueId::kGpuUtil, "gpu_util", &D::gpu_util, kNone, "%",
     "`nvmlDeviceGetUtilizationRates().gpu`", "all, not under MIG", "DCGM_FI_DEV_GPU_UTIL", "gauge",
     "GPU utilization (in %).", DcgmType::kInt64, 203, ExportScale::kAsIs, "utilization_percent"},
    {ValueId::kMemCopyUtil, "mem_util", &D::mem_util, kNone, "%",
     "`nvmlDeviceGetUtilizationRates().memory`", "all, not under MIG", "DCGM_FI_DEV_MEM_COPY_UTIL",
     "gauge", "Memory utilization (in %).", DcgmType::kInt64, 204, ExportScale::kAsIs, nullptr},
    {ValueId::kEncUtil, "enc_util", &D::enc_util, kNone, "%", "`nvmlDeviceGetEncoderUtilization`",
     "GPUs with NVENC", "DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).",
     DcgmType::kInt64, 206, ExportScale::kAsIs, nullptr},
    {ValueId::kDecUtil, "dec_util", &D::dec_util, kNone, "%", "`nvmlDeviceGetDecoderUtilization`",
     "GPUs with NVDEC", "DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).",
     DcgmType::kInt64, 207, ExportScale::kAsIs, nullptr},
    {ValueId::kXid, "", kNone, kNone, "XID code", "the last XID the event thread saw (0 = none)",
     "all", "DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.",
     DcgmType::kInt64, 230, ExportScale::kAsIs, nullptr},
    {ValueId::kFbFree, "fb_free_bytes", &D::fb_free_bytes, &M::fb_free_bytes, "MiB",
     "`nvmlDeviceGetMemoryInfo_v2().free`", "all; per MIG device too", "DCGM_FI_DEV_FB_FREE",
     "gauge", "Framebuffer memory free (in MiB).", DcgmType::kInt64, 251, ExportScale::kBytesToMiB,
     nullptr},
    {ValueId::kFbUsed, "fb_used_bytes", &D::fb_used_bytes, &M::fb_used_bytes, "MiB",
     "`nvmlDeviceGetMemoryInfo_v2().used`", "all; per MIG device too", "DCGM_FI_DEV_FB_USED",
     "gauge", "Framebuffer memory used (in MiB).", DcgmType::kInt64, 252, ExportScale::kBytesToMiB,
     "memory_used_bytes"},
    {ValueId::kFbReserved, "fb_reserved_bytes", &D::fb_reserved_bytes, kNone, "MiB",
     "`nvmlDeviceGetMemoryInfo_v2().reserved`", "drivers with `nvmlDeviceGetMemoryInfo_v2`",
     "DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).", DcgmType::kInt64,
     253, ExportScale::kBytesToMiB, nullptr},
    {ValueId::kNvLinkBandwidthTotal, "", &NvLinkTotalKib, kNone, "KiB",
     "`NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX` + `_RX`, all links", "GPUs with NVLink",
     "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter",
     "Total number of NVLink bandwidth counters for all lanes.", DcgmType::kInt64, 449,
     ExportScale::kAsIs, nullptr},
    {ValueId::kRemappedUncorrectable, "remapped_uncorrectable", &D::remapped_uncorrectable, kNone,
     "rows", "`nvmlDeviceGetRemappedRows`", "Ampere and newer datacenter GPUs",
     "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter",
     "Number of remapped rows for uncorrectable errors", DcgmType::kInt64, 393, ExportScale::kAsIs,
     nullptr},
    {ValueId::kRemappedCorrectable, "remapped_correctable", &D::remapped_correctable, kNone, "rows",
     "`nvmlDeviceGetRemappedRows`", "Ampere and newer datacenter GPUs",
     "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter",
     "Number of remapped rows for correctable errors", DcgmType::kInt64, 394, ExportScale::kAsIs,
     nullptr},
    {ValueId::kRemapFailure, "remap_failure", &D::remap_failure, kNone, "0/1",
     "`nvmlDeviceGetRemappedRows`", "Ampere and newer datacenter GPUs",
     "DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed",
     DcgmType::kInt64, 395, ExportScale::kAsIs, nullptr},
    {ValueId::kGrEngineActive, "gr_engine_active", &P::gr_engine_active, &P::gr_engine_active,
     "ratio", "GPM `GRAPHICS_UTIL` / 100", "Hopper and newer; per MIG device too",
     "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active.",
     DcgmType::kDouble, 1001, ExportScale::kAsIs, nullptr},
    {ValueId::kSmActive, "sm_active", &P::sm_active, &P::sm_active, "ratio", "GPM `SM_UTIL` / 100",
     "Hopper and newer; per MIG device too", "DCGM_FI_PROF_SM_ACTIVE", "gauge",
     "The ratio of cycles an SM has at least 1 warp assigned.", DcgmType::kDouble, 1002,
     ExportScale::kAsIs, nullptr},
    {ValueId::kSmOccupancy, "sm_occupancy", &P::sm_occupancy, &P::sm_occupancy, "ratio",
     "GPM `SM_OCCUPANCY` / 100", "Hopper and newer; per MIG device too",
     "DCGM_FI_PROF_SM_OCCUPANCY", "gauge", "The ratio of number of warps resident on an SM.",
     DcgmType::kDouble, 1003, ExportScale::kAsIs, nullptr},
    {ValueId::kTensorActive, "tensor_active", &P::tensor_active, &P::tensor_active, "ratio",
     "GPM `ANY_TENSOR_UTIL` / 100", "Hopper and newer; per MIG device too",
     "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge",
     "Ratio of cycles the tensor (HMMA) pipe is active.", DcgmType::kDouble, 1004,
     ExportScale::kAsIs, nullptr},
    {ValueId::kDramActive, "dram_active", &P::dram_active, &P::dram_active, "ratio",
     "GPM `DRAM_BW_UTIL` / 100", "Hopper and newer; per MIG device too", "DCGM_FI_PROF_DRAM_ACTIVE",
     "gauge", "Ratio of cycles the device memory interface is active sending or receiving data.",
     DcgmType::kDouble, 1005, ExportScale::kAsIs, nullptr},
    {ValueId::kFp64Active, "fp64_active", &P::fp64_active, &P::fp64_active, "ratio",
     "GPM `FP64_UTIL` / 100", "Hopper and newer; per MIG device too",
     "DCGM_FI_PROF_PIPE_FP64_ACTIVE", "gauge", "Ratio of cycles the fp64 pipes are active.",
     DcgmType::kDouble, 1006, ExportScale::kAsIs, nullptr},
    {ValueId::kFp32Active, "fp32_active", &P::fp32_active, &P::fp32_active, "ratio",
     "GPM `FP32_UTIL` / 100", "Hopper and newer; per MIG device too",
     "DCGM_FI_PROF_PIPE_FP32_ACTIVE", "gauge", "Ratio of cycles the fp32 pipes are active.",
     DcgmType::kDouble, 1007, ExportScale::kAsIs, nullptr},
    {ValueId::kFp16Active, "fp16_active", &P::fp16_active, &P::fp16_active, "ratio",
     "GPM `FP16_UTIL` / 100", "Hopper and newer; per MIG device too",
     "DCGM_FI_PROF_PIPE_FP16_ACTIVE", "gauge", "Ratio of cycles the fp16 pipes are active.",
     DcgmType::kDouble, 1008, ExportScale::kAsIs, nullptr},
    {ValueId::kPcieTxBytes, "pcie_tx_bytes_per_second", &P::pcie_tx_bytes_per_second, kNone, "B/s",
     "GPM `PCIE_TX_PER_SEC` × 2^20", "Hopper and newer", "DCGM_FI_PROF_PCIE_TX_BYTES", "gauge",
     "The rate of data transmitted over the PCIe bus - including both protocol headers and data "
     "payloads - in bytes per second.",
     DcgmType::kInt64, 1009, ExportScale::kAsIs, nullptr},
    {ValueId::kPcieRxBytes, "pcie_rx_bytes_per_second", &P::pcie_rx_bytes_per_second, kNone, "B/s",
     "GPM `PCIE_RX_PER_SEC` × 2^20", "Hopper and newer", "DCGM_FI_PROF_PCIE_RX_BYTES", "gauge",
     "The rate of data received over the PCIe bus - including both protocol headers and data "
     "payloads - in bytes per second.",
     DcgmType::kInt64, 1010, ExportScale::kAsIs, nullptr},
    {ValueId::kNvLinkTxBytes, "nvlink_tx_bytes_per_second", &P::nvlink_tx_bytes_per_second, kNone,
     "B/s", "GPM `NVLINK_TOTAL_TX_PER_SEC` × 2^20", "Hopper and newer with NVLink",
     "DCGM_FI_PROF_NVLINK_TX_BYTES", "gauge",
     "The rate of data transmitted over NVLink, not including protocol headers, in bytes per "
     "second.",
     DcgmType::kInt64, 1011, ExportScale::kAsIs, nullptr},
    {ValueId::kNvLinkRxBytes, "nvlink_rx_bytes_per_second", &P::nvlink_rx_bytes_per_second, kNone,
     "B/s", "GPM `NVLINK_TOTAL_RX_PER_SEC` × 2^20", "Hopper and newer with NVLink",
     "DCGM_FI_PROF_NVLINK_RX_BYTES", "gauge",
     "The rate of data received over NVLink, not including protocol headers, in bytes per "
     "second.",
     DcgmType::kInt64, 1012, ExportScale::kAsIs, nullptr},
    {ValueId::kPstate, "pstate", &D::pstate, kNone, "P-state", "`nvmlDeviceGetPerformanceState`",
     "all", "DCGM_FI_DEV_PSTATE", "gauge",
     "Performance state, 0 (P0, the fastest) to 15 (P15, the slowest).", DcgmType::kInt64, 190,
     ExportScale::kAsIs, nullptr},
    {ValueId::kFanSpeed, "fan_percent", &D::fan_percent, kNone, "%", "`nvmlDeviceGetFanSpeed`",
     "GPUs with a fan of their own (not passively cooled boards)", "DCGM_FI_DEV_FAN_SPEED", "gauge",
     "Fan speed, as a percentage of its maximum.", DcgmType::kInt64, 191, ExportScale::kAsIs,
     nullptr},
    {ValueId::kPowerLimit, "power_limit_w", &D::power_limit_w, kNone, "W",
     "`nvmlDeviceGetEnforcedPowerLimit`", "all", "gpulet_gpu_power_limit_watts", "gauge",
     "Enforced power limit.", DcgmType::kNone, 0, ExportScale::kAsIs, nullptr},
    // Printed by the exposition's own code: one series per active reason, by label.
    {ValueId::kClocksEventReasons, "clocks_event_reasons", &D::clocks_event_reasons, kNone,
     "bitmask", "`nvmlDeviceGetCurrentClocksEventReasons`", "all", nullptr, "gauge", "",
     DcgmType::kNone, 0, ExportScale::kAsIs, nullptr},
    // Printed as gpulet_nvlink_data_bytes_total by direction, and summed into the DCGM total.
    {ValueId::kNvLinkDataTx, "nvlink_data_tx_kib", &D::nvlink_data_tx_kib, kNone, "KiB",
     "`NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX`", "GPUs with NVLink", nullptr, "counter", "",
     DcgmType::kNone, 0, ExportScale::kAsIs, nullptr},
    {ValueId::kNvLinkDataRx, "nvlink_data_rx_kib", &D::nvlink_data_rx_kib, kNone, "KiB",
     "`NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX`", "GPUs with NVLink", nullptr, "counter", "",
     DcgmType::kNone, 0, ExportScale::kAsIs, nullptr},
    {ValueId::kEccSbeVolatile, "ecc_sbe_volatile", &D::ecc_sbe_volatile, kNone, "errors",
     "`nvmlDeviceGetTotalEccErrors` (corrected, volatile)",
     "boards with ECC memory, ECC on (datacenter and workstation; not GeForce)",
     "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Total number of single-bit volatile ECC errors.",
     DcgmType::kInt64, 310, ExportScale::kAsIs, "ecc_sbe_volatile"},
    {ValueId::kEccDbeVolatile, "ecc_dbe_volatile", &D::ecc_dbe_volatile, kNone, "errors",
     "`nvmlDeviceGetTotalEccErrors` (uncorrected, volatile)",
     "boards with ECC memory, ECC on (datacenter and workstation; not GeForce)",
     "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors.",
     DcgmType::kInt64, 311, ExportScale::kAsIs, "ecc_dbe_volatile"},
}};

constexpr bool RowsInIdOrder() {
  for (size_t i = 0; i < kValueRows.size(); ++i) {
    if (static_cast<size_t>(kValueRows[i].id) != i) return false;
  }
  return true;
}
static_assert(RowsInIdOrder(), "kValueRows's rows must be in ValueId order, one per id");

template <typename T>
std::optional<double> AsDouble(const std::optional<T>& v) {
  if (!v) return std::nullopt;
  if constexpr (std::is_same_v<T, bool>) {
    return *v ? 1.0 : 0.0;
  } else {
    return static_cast<double>(*v);
  }
}

// The value `member` (one of SampleMember's or MigMember's kinds) picks out of `s`: a member
// of `s` itself, a GPM ratio from `s.profiling`, or a derivation from `s`.
template <typename Member, typename S>
std::optional<double> ReadFrom(const Member& member, const S& s) {
  return std::visit(
      [&s](auto m) -> std::optional<double> {
        using T = decltype(m);
        if constexpr (std::is_same_v<T, std::monostate>) {
          return std::nullopt;
        } else if constexpr (std::is_same_v<T, std::optional<double> ProfilingSample::*>) {
          if (!s.profiling) return std::nullopt;
          return (*s.profiling).*m;
        } else if constexpr (std::is_function_v<std::remove_pointer_t<T>>) {
          return m(s);
        } else {
          return AsDouble(s.*m);
        }
      },
      member);
}

}  // namespace

absl::Span<const SampleValue> SampleValues() { return kValueRows; }

const SampleValue& Value(ValueId id) { return kValueRows[static_cast<size_t>(id)]; }

std::optional<double> ReadValue(const SampleValue& row, const DeviceSample& s) {
  return ReadFrom(row.member, s);
}

std::optional<double> ReadMigValue(const SampleValue& row, const MigInstanceSample& ms) {
  return ReadFrom(row.mig_member, ms);
}

bool IsStored(const SampleValue& row) {
  return std::visit([](auto m) { return StoredMember<decltype(m)>; }, row.member);
}

double ExportedValue(const SampleValue& row, double value) {
  switch (row.scale) {
    case ExportScale::kBytesToMiB:
      // Whole MiB, rounded down, as DCGM reports framebuffer sizes.
      return static_cast<double>(static_cast<uint64_t>(value) >> 20);
    case ExportScale::kAsIs:
      break;
  }
  return value;
}

bool IsIntegerValue(const SampleValue& row) {
  return std::visit(
      [](auto m) {
        using T = decltype(m);
        return !std::is_same_v<T, std::optional<double> DeviceSample::*> &&
               !std::is_same_v<T, std::optional<double> ProfilingSample::*>;
      },
      row.member);
}

std::string ValueTableMarkdown() {
  std::string out =
      "| Series | Type | Unit | DCGM field | Source | GPUs |\n"
      "|---|---|---|---|---|---|\n";
  for (const SampleValue& row : kValueRows) {
    if (row.metric == nullptr) continue;
    absl::StrAppend(&out, "| `", row.metric, "` | ", row.type, " | ", row.unit, " | ",
                    row.dcgm_field == 0 ? "gpulet's own" : absl::StrCat(row.dcgm_field), " | ",
                    row.source, " | ", row.hardware, " |\n");
  }
  return out;
}

}  // namespace gpulet::gpu
