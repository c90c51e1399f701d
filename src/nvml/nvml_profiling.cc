#include "nvml/nvml_profiling.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <tuple>
#include <utility>
#include <vector>

#include "gpu/mig.h"

namespace gpulet::nvml {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// Where each GPM metric goes, and the factor from NVML's unit (percent, MiB/s) to the
// exported one (DCGM's 0..1 ratio, bytes/s).
struct GpmField {
  unsigned metric;
  std::optional<double> gpu::ProfilingSample::*out;
  double scale;
};
constexpr GpmField kGpmFields[] = {
    {NVML_GPM_METRIC_GRAPHICS_UTIL, &gpu::ProfilingSample::gr_engine_active, 0.01},
    {NVML_GPM_METRIC_SM_UTIL, &gpu::ProfilingSample::sm_active, 0.01},
    {NVML_GPM_METRIC_SM_OCCUPANCY, &gpu::ProfilingSample::sm_occupancy, 0.01},
    {NVML_GPM_METRIC_ANY_TENSOR_UTIL, &gpu::ProfilingSample::tensor_active, 0.01},
    {NVML_GPM_METRIC_DRAM_BW_UTIL, &gpu::ProfilingSample::dram_active, 0.01},
    {NVML_GPM_METRIC_FP64_UTIL, &gpu::ProfilingSample::fp64_active, 0.01},
    {NVML_GPM_METRIC_FP32_UTIL, &gpu::ProfilingSample::fp32_active, 0.01},
    {NVML_GPM_METRIC_FP16_UTIL, &gpu::ProfilingSample::fp16_active, 0.01},
    {NVML_GPM_METRIC_PCIE_TX_PER_SEC, &gpu::ProfilingSample::pcie_tx_bytes_per_second, kMiB},
    {NVML_GPM_METRIC_PCIE_RX_PER_SEC, &gpu::ProfilingSample::pcie_rx_bytes_per_second, kMiB},
    {NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, &gpu::ProfilingSample::nvlink_tx_bytes_per_second,
     kMiB},
    {NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, &gpu::ProfilingSample::nvlink_rx_bytes_per_second,
     kMiB},
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

std::optional<gpu::ProfilingSample> GpmReader::Read(nvmlDevice_t device) {
  const NvmlFunctions& f = library_->fn();
  if (support_ == Support::kNo) return std::nullopt;
  if (support_ == Support::kUnknown) {
    support_ = Support::kNo;
    if (!f.gpm_query_device_support || !f.gpm_sample_alloc || !f.gpm_sample_free ||
        !f.gpm_sample_get || !f.gpm_metrics_get || (gpu_instance_ && !f.gpm_mig_sample_get)) {
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
  const nvmlReturn_t got = gpu_instance_ ? f.gpm_mig_sample_get(device, *gpu_instance_, current_)
                                         : f.gpm_sample_get(device, current_);
  if (got != NVML_SUCCESS) {
    have_previous_ = false;
    return std::nullopt;
  }
  std::optional<gpu::ProfilingSample> out;
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

void ReadNvLinks(const NvmlFunctions& f, nvmlDevice_t device, gpu::DeviceSample* sample) {
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
    gpu::NvLinkSample& l = sample->nvlinks.emplace_back();
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

namespace {

// The GPU's MIG mode (into `layout`'s flags) and, while MIG is on, its MIG devices' handles by
// MIG index. Indexes past the existing devices answer NOT_FOUND; a hole (a device destroyed
// while we read) is skipped rather than ending the list. Returns GPU_IS_LOST or
// RESET_REQUIRED when NVML says the GPU is gone, else SUCCESS (a GPU without MIG: no handles).
nvmlReturn_t MigHandles(const NvmlFunctions& f, nvmlDevice_t device, gpu::MigLayout* layout,
                        std::vector<std::pair<unsigned, nvmlDevice_t>>* handles) {
  if (!f.device_get_mig_mode) return NVML_SUCCESS;
  unsigned current = 0, pending = 0;
  nvmlReturn_t ret = f.device_get_mig_mode(device, &current, &pending);
  if (ret == NVML_ERROR_GPU_IS_LOST || ret == NVML_ERROR_RESET_REQUIRED) return ret;
  if (ret != NVML_SUCCESS) return NVML_SUCCESS;  // not MIG-capable
  layout->enabled = current == NVML_DEVICE_MIG_ENABLE;
  layout->pending_enabled = pending == NVML_DEVICE_MIG_ENABLE;
  if (!layout->enabled || !f.device_get_max_mig_device_count ||
      !f.device_get_mig_device_handle_by_index) {
    return NVML_SUCCESS;
  }
  unsigned max = 0;
  ret = f.device_get_max_mig_device_count(device, &max);
  if (ret == NVML_ERROR_GPU_IS_LOST || ret == NVML_ERROR_RESET_REQUIRED) return ret;
  if (ret != NVML_SUCCESS) return NVML_SUCCESS;
  for (unsigned i = 0; i < std::min(max, 64u); ++i) {
    nvmlDevice_t mig = nullptr;
    if (f.device_get_mig_device_handle_by_index(device, i, &mig) == NVML_SUCCESS) {
      handles->emplace_back(i, mig);
    }
  }
  return NVML_SUCCESS;
}

}  // namespace

nvmlReturn_t ReadMigLayout(const NvmlFunctions& f, nvmlDevice_t device, gpu::MigLayout* layout) {
  *layout = gpu::MigLayout();
  std::vector<std::pair<unsigned, nvmlDevice_t>> handles;
  const nvmlReturn_t ret = MigHandles(f, device, layout, &handles);
  if (ret != NVML_SUCCESS || handles.empty()) return ret;
  // The profile name's memory part is relative to the whole GPU's memory.
  uint64_t gpu_total = 0;
  nvmlMemory_t mem;
  if (f.device_get_memory_info && f.device_get_memory_info(device, &mem) == NVML_SUCCESS) {
    gpu_total = mem.total;
  }
  for (const auto& [i, mig] : handles) {
    gpu::MigDeviceInfo d;
    d.index = i;
    char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    if (!f.device_get_uuid || f.device_get_uuid(mig, buf, sizeof(buf)) != NVML_SUCCESS) continue;
    d.uuid = std::string(buf, strnlen(buf, sizeof(buf)));
    if (f.device_get_gpu_instance_id) f.device_get_gpu_instance_id(mig, &d.gpu_instance_id);
    if (f.device_get_compute_instance_id) {
      f.device_get_compute_instance_id(mig, &d.compute_instance_id);
    }
    nvmlDeviceAttributes_t attr;
    std::memset(&attr, 0, sizeof(attr));
    if (f.device_get_attributes && f.device_get_attributes(mig, &attr) == NVML_SUCCESS) {
      d.sm_count = attr.multiprocessorCount;
      d.copy_engines = attr.sharedCopyEngineCount;
      d.decoders = attr.sharedDecoderCount;
      d.encoders = attr.sharedEncoderCount;
      d.jpeg_engines = attr.sharedJpegCount;
      d.ofa_engines = attr.sharedOfaCount;
      d.gpu_instance_slices = attr.gpuInstanceSliceCount;
      d.compute_instance_slices = attr.computeInstanceSliceCount;
      d.memory_bytes = attr.memorySizeMB << 20;
      d.profile = gpu::MigProfileName(attr.gpuInstanceSliceCount, attr.computeInstanceSliceCount,
                                      attr.memorySizeMB, gpu_total);
    }
    layout->devices.push_back(std::move(d));
  }
  std::sort(layout->devices.begin(), layout->devices.end(),
            [](const gpu::MigDeviceInfo& a, const gpu::MigDeviceInfo& b) {
              return std::tie(a.gpu_instance_id, a.compute_instance_id) <
                     std::tie(b.gpu_instance_id, b.compute_instance_id);
            });
  return NVML_SUCCESS;
}

void ReadMigMemory(const NvmlFunctions& f, nvmlDevice_t device, gpu::DeviceSample* sample) {
  gpu::MigLayout mode;
  std::vector<std::pair<unsigned, nvmlDevice_t>> handles;
  if (MigHandles(f, device, &mode, &handles) != NVML_SUCCESS) return;
  for (const auto& [i, mig] : handles) {
    gpu::MigInstanceSample m;
    if (!f.device_get_gpu_instance_id ||
        f.device_get_gpu_instance_id(mig, &m.gpu_instance_id) != NVML_SUCCESS) {
      continue;
    }
    if (f.device_get_compute_instance_id) {
      f.device_get_compute_instance_id(mig, &m.compute_instance_id);
    }
    nvmlMemory_t mem;
    if (f.device_get_memory_info && f.device_get_memory_info(mig, &mem) == NVML_SUCCESS) {
      m.fb_used_bytes = mem.used;
      m.fb_free_bytes = mem.free;
    }
    sample->mig.push_back(std::move(m));
  }
}

}  // namespace gpulet::nvml
