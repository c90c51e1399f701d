#include "gpu/nvml_profiling.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <utility>

namespace gpulet {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// Where each GPM metric goes, and the factor from NVML's unit (percent, MiB/s) to the
// exported one (DCGM's 0..1 ratio, bytes/s).
struct GpmField {
  unsigned metric;
  std::optional<double> ProfilingSample::*out;
  double scale;
};
constexpr GpmField kGpmFields[] = {
    {NVML_GPM_METRIC_GRAPHICS_UTIL, &ProfilingSample::gr_engine_active, 0.01},
    {NVML_GPM_METRIC_SM_UTIL, &ProfilingSample::sm_active, 0.01},
    {NVML_GPM_METRIC_SM_OCCUPANCY, &ProfilingSample::sm_occupancy, 0.01},
    {NVML_GPM_METRIC_ANY_TENSOR_UTIL, &ProfilingSample::tensor_active, 0.01},
    {NVML_GPM_METRIC_DRAM_BW_UTIL, &ProfilingSample::dram_active, 0.01},
    {NVML_GPM_METRIC_FP64_UTIL, &ProfilingSample::fp64_active, 0.01},
    {NVML_GPM_METRIC_FP32_UTIL, &ProfilingSample::fp32_active, 0.01},
    {NVML_GPM_METRIC_FP16_UTIL, &ProfilingSample::fp16_active, 0.01},
    {NVML_GPM_METRIC_PCIE_TX_PER_SEC, &ProfilingSample::pcie_tx_bytes_per_second, kMiB},
    {NVML_GPM_METRIC_PCIE_RX_PER_SEC, &ProfilingSample::pcie_rx_bytes_per_second, kMiB},
    {NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, &ProfilingSample::nvlink_tx_bytes_per_second, kMiB},
    {NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, &ProfilingSample::nvlink_rx_bytes_per_second, kMiB},
};
constexpr unsigned kGpmFieldCount = sizeof(kGpmFields) / sizeof(kGpmFields[0]);

// A counter field value as an unsigned number, whatever integer type NVML chose.
std::optional<uint64_t> FieldCount(const nvmlFieldValue_t& v) {
  if (v.nvmlReturn != NVML_SUCCESS) return std::nullopt;
  switch (v.valueType) {
    case NVML_VALUE_TYPE_UNSIGNED_INT:
      return v.value.uiVal;
    case NVML_VALUE_TYPE_UNSIGNED_LONG:
      return v.value.ulVal;
    case NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
      return v.value.ullVal;
    case NVML_VALUE_TYPE_SIGNED_LONG_LONG:
      if (v.value.sllVal >= 0) return static_cast<uint64_t>(v.value.sllVal);
      return std::nullopt;
    case NVML_VALUE_TYPE_SIGNED_INT:
      if (v.value.siVal >= 0) return static_cast<uint64_t>(v.value.siVal);
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

}  // namespace

GpmReader::~GpmReader() {
  const NvmlFunctions& f = library_->fn();
  if (library_->stuck() || f.gpm_sample_free == nullptr) return;
  if (previous_ != nullptr) f.gpm_sample_free(previous_);
  if (current_ != nullptr) f.gpm_sample_free(current_);
}

std::optional<ProfilingSample> GpmReader::Read(nvmlDevice_t device) {
  const NvmlFunctions& f = library_->fn();
  if (support_ == Support::kNo) return std::nullopt;
  if (support_ == Support::kUnknown) {
    support_ = Support::kNo;
    if (!f.gpm_query_device_support || !f.gpm_sample_alloc || !f.gpm_sample_free ||
        !f.gpm_sample_get || !f.gpm_metrics_get) {
      return std::nullopt;
    }
    nvmlGpmSupport_t support;
    std::memset(&support, 0, sizeof(support));
    support.version = NVML_GPM_SUPPORT_VERSION;
    if (f.gpm_query_device_support(device, &support) != NVML_SUCCESS ||
        support.isSupportedDevice == 0) {
      return std::nullopt;
    }
    if (f.gpm_sample_alloc(&previous_) != NVML_SUCCESS) previous_ = nullptr;
    if (f.gpm_sample_alloc(&current_) != NVML_SUCCESS) current_ = nullptr;
    if (previous_ == nullptr || current_ == nullptr) return std::nullopt;  // freed later
    support_ = Support::kYes;
  }
  if (f.gpm_sample_get(device, current_) != NVML_SUCCESS) {
    have_previous_ = false;
    return std::nullopt;
  }
  std::optional<ProfilingSample> out;
  if (have_previous_) {
    // Large (13 KiB): on the heap, not on the lane thread's stack.
    auto get = std::make_unique<nvmlGpmMetricsGet_t>();
    std::memset(get.get(), 0, sizeof(*get));
    get->version = NVML_GPM_METRICS_GET_VERSION;
    get->numMetrics = kGpmFieldCount;
    get->sample1 = previous_;
    get->sample2 = current_;
    for (unsigned i = 0; i < kGpmFieldCount; ++i) get->metrics[i].metricId = kGpmFields[i].metric;
    if (f.gpm_metrics_get(get.get()) == NVML_SUCCESS) {
      out.emplace();
      for (unsigned i = 0; i < kGpmFieldCount; ++i) {
        const nvmlGpmMetric_t& m = get->metrics[i];
        // NVML answers in the order asked; check the id anyway rather than trust the order.
        if (m.metricId != kGpmFields[i].metric || m.nvmlReturn != NVML_SUCCESS) continue;
        if (!(m.value >= 0)) continue;  // NaN or negative: no reading
        (*out).*(kGpmFields[i].out) = m.value * kGpmFields[i].scale;
      }
    }
  }
  std::swap(previous_, current_);
  have_previous_ = true;
  return out;
}

void ReadNvLinks(const NvmlFunctions& f, nvmlDevice_t device, DeviceSample* sample) {
  if (!f.device_get_field_values || !f.device_get_nvlink_state) return;
  nvmlFieldValue_t fv[3];
  std::memset(fv, 0, sizeof(fv));
  fv[0].fieldId = NVML_FI_DEV_NVLINK_LINK_COUNT;
  fv[1].fieldId = NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX;
  fv[1].scopeId = UINT_MAX;  // all links
  fv[2].fieldId = NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX;
  fv[2].scopeId = UINT_MAX;
  if (f.device_get_field_values(device, 3, fv) != NVML_SUCCESS) return;
  const std::optional<uint64_t> count = FieldCount(fv[0]);
  if (!count || *count == 0) return;
  sample->nvlink_data_tx_kib = FieldCount(fv[1]);
  sample->nvlink_data_rx_kib = FieldCount(fv[2]);
  const unsigned links = static_cast<unsigned>(std::min<uint64_t>(*count, NVML_NVLINK_MAX_LINKS));
  for (unsigned link = 0; link < links; ++link) {
    int active = 0;
    if (f.device_get_nvlink_state(device, link, &active) != NVML_SUCCESS) continue;
    NvLinkSample& l = sample->nvlinks.emplace_back();
    l.link = link;
    l.active = active == NVML_FEATURE_ENABLED;
    int remote = 0;
    if (f.device_get_nvlink_remote_device_type &&
        f.device_get_nvlink_remote_device_type(device, link, &remote) == NVML_SUCCESS) {
      l.remote_type = remote;
    }
    if (!f.device_get_nvlink_error_counter) continue;
    auto counter = [&](int which, std::optional<uint64_t>* out) {
      unsigned long long value = 0;
      if (f.device_get_nvlink_error_counter(device, link, which, &value) == NVML_SUCCESS) {
        *out = value;
      }
    };
    counter(NVML_NVLINK_ERROR_DL_REPLAY, &l.replay_errors);
    counter(NVML_NVLINK_ERROR_DL_RECOVERY, &l.recovery_errors);
    counter(NVML_NVLINK_ERROR_DL_CRC_FLIT, &l.crc_flit_errors);
    counter(NVML_NVLINK_ERROR_DL_CRC_DATA, &l.crc_data_errors);
  }
}

std::optional<bool> ReadMigCapable(const NvmlFunctions& f, nvmlDevice_t device) {
  if (!f.device_get_mig_mode) return std::nullopt;
  unsigned current = 0, pending = 0;
  const nvmlReturn_t ret = f.device_get_mig_mode(device, &current, &pending);
  if (ret == NVML_SUCCESS) return true;
  if (ret == NVML_ERROR_NOT_SUPPORTED) return false;
  return std::nullopt;
}

}  // namespace gpulet
