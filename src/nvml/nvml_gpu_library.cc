#include "nvml/nvml_gpu_library.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "gpu/nvml_errors.h"
#include "nvml/nvml_profiling.h"

namespace gpulet::nvml {
namespace {

// NVML string out-parameters are NUL-terminated on success; never trust that blindly.
std::string FromBuffer(const char* buf, size_t size) {
  return std::string(buf, strnlen(buf, size));
}

// Everything one identity query reads, owned jointly by the caller and the lane job so a
// job that overruns its deadline writes into memory that is still alive.
struct IdentityJob {
  unsigned index = 0;
  nvmlReturn_t handle_ret = NVML_ERROR_UNKNOWN;
  nvmlReturn_t uuid_ret = NVML_ERROR_UNKNOWN;
  gpu::DeviceIdentity id;
};

}  // namespace

NvmlGpuLibrary::NvmlGpuLibrary(std::shared_ptr<NvmlLibrary> library, Options options)
    : library_(std::move(library)), options_(options) {}

NvmlGpuLibrary::~NvmlGpuLibrary() {
  if (event_set_ != nullptr && library_->fn().event_set_free != nullptr) {
    library_->fn().event_set_free(event_set_);
  }
  absl::MutexLock lock(&mu_);
  for (auto& [index, lane] : lanes_) {
    if (lane->wedged()) library_->MarkStuck();
  }
}

TimedLane& NvmlGpuLibrary::Lane(int index) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<TimedLane>& lane = lanes_[index];
  if (!lane) {
    lane =
        std::make_unique<TimedLane>(index < 0 ? std::string("NVML") : absl::StrCat("GPU ", index));
  }
  return *lane;
}

std::shared_ptr<GpmReader> NvmlGpuLibrary::Gpm(unsigned index) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<GpmReader>& reader = gpm_[index];
  if (!reader) reader = std::make_shared<GpmReader>(library_);
  return reader;
}

std::shared_ptr<NvmlGpuLibrary::MigGpmReaders> NvmlGpuLibrary::MigGpm(unsigned index) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<MigGpmReaders>& readers = mig_gpm_[index];
  if (!readers) readers = std::make_shared<MigGpmReaders>();
  return readers;
}

std::shared_ptr<unsigned long long> NvmlGpuLibrary::ProcessUtilSeen(unsigned index) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<unsigned long long>& seen = process_util_seen_[index];
  if (!seen) seen = std::make_shared<unsigned long long>(0);
  return seen;
}

absl::Status NvmlGpuLibrary::RunOnLane(int index, std::function<void()> work,
                                       absl::string_view what, absl::Duration timeout) {
  absl::Status status = Lane(index).Run(std::move(work), timeout, what);
  if (absl::IsDeadlineExceeded(status)) library_->MarkStuck();
  return status;
}

absl::StatusOr<gpu::SystemInfo> NvmlGpuLibrary::GetSystemInfo() {
  auto info = std::make_shared<gpu::SystemInfo>();
  auto lib = library_;
  absl::Status status = RunOnLane(
      -1,
      [info, lib] {
        const NvmlFunctions& f = lib->fn();
        char buf[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
        if (f.system_get_driver_version && f.system_get_driver_version(buf, sizeof(buf)) == 0) {
          info->driver_version = FromBuffer(buf, sizeof(buf));
        }
        char nbuf[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE] = {};
        if (f.system_get_nvml_version && f.system_get_nvml_version(nbuf, sizeof(nbuf)) == 0) {
          info->nvml_version = FromBuffer(nbuf, sizeof(nbuf));
        }
        int cuda = 0;
        if (f.system_get_cuda_driver_version && f.system_get_cuda_driver_version(&cuda) == 0) {
          info->cuda_driver_version = cuda;
        }
      },
      "nvmlSystemGetDriverVersion", options_.call_timeout);
  if (!status.ok()) return status;
  info->library_path = library_->path();
  return *info;
}

absl::StatusOr<unsigned> NvmlGpuLibrary::GetDeviceCount() {
  auto out = std::make_shared<std::pair<nvmlReturn_t, unsigned>>(NVML_ERROR_UNKNOWN, 0);
  auto lib = library_;
  absl::Status status = RunOnLane(
      -1, [out, lib] { out->first = lib->fn().device_get_count(&out->second); },
      "nvmlDeviceGetCount_v2", options_.call_timeout);
  if (!status.ok()) return status;
  if (out->first != NVML_SUCCESS) return gpu::NvmlError(out->first, "nvmlDeviceGetCount_v2");
  return out->second;
}

absl::StatusOr<gpu::DeviceIdentity> NvmlGpuLibrary::GetDeviceIdentity(unsigned index) {
  auto job = std::make_shared<IdentityJob>();
  job->index = index;
  job->id.index = index;
  auto lib = library_;
  absl::Status status = RunOnLane(
      static_cast<int>(index),
      [job, lib] {
        const NvmlFunctions& f = lib->fn();
        nvmlDevice_t dev = nullptr;
        job->handle_ret = f.device_get_handle_by_index(job->index, &dev);
        if (job->handle_ret != NVML_SUCCESS) return;
        gpu::DeviceIdentity& id = job->id;
        char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
        job->uuid_ret = f.device_get_uuid ? f.device_get_uuid(dev, buf, sizeof(buf))
                                          : NVML_ERROR_FUNCTION_NOT_FOUND;
        if (job->uuid_ret == NVML_SUCCESS) id.uuid = FromBuffer(buf, sizeof(buf));
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
        if (f.device_get_name && f.device_get_name(dev, name, sizeof(name)) == NVML_SUCCESS) {
          id.name = FromBuffer(name, sizeof(name));
        }
        nvmlPciInfo_t pci;
        std::memset(&pci, 0, sizeof(pci));
        if (f.device_get_pci_info && f.device_get_pci_info(dev, &pci) == NVML_SUCCESS) {
          id.bus_id = FromBuffer(pci.busId, sizeof(pci.busId));
          id.pci_device_id = pci.pciDeviceId;
          id.pci_subsystem_id = pci.pciSubSystemId;
        }
        unsigned u = 0;
        if (f.device_get_minor_number && f.device_get_minor_number(dev, &u) == NVML_SUCCESS) {
          id.minor = u;
        }
        // Prefer the v2 memory struct: it separates reserved from used memory.
        nvmlMemory_v2_t mem2;
        std::memset(&mem2, 0, sizeof(mem2));
        mem2.version = nvmlMemory_v2;
        nvmlMemory_t mem1;
        if (f.device_get_memory_info_v2 &&
            f.device_get_memory_info_v2(dev, &mem2) == NVML_SUCCESS) {
          id.memory_total_bytes = mem2.total;
          id.memory_reserved_bytes = mem2.reserved;
        } else if (f.device_get_memory_info &&
                   f.device_get_memory_info(dev, &mem1) == NVML_SUCCESS) {
          id.memory_total_bytes = mem1.total;
        }
        int major = 0, minor = 0;
        if (f.device_get_cuda_compute_capability &&
            f.device_get_cuda_compute_capability(dev, &major, &minor) == NVML_SUCCESS) {
          id.cc_major = major;
          id.cc_minor = minor;
        }
        if (f.device_get_architecture && f.device_get_architecture(dev, &u) == NVML_SUCCESS) {
          id.nvml_architecture = u;
        }
        int i = 0;
        if (f.device_get_brand && f.device_get_brand(dev, &i) == NVML_SUCCESS) id.brand = i;
        if (f.device_get_persistence_mode &&
            f.device_get_persistence_mode(dev, &i) == NVML_SUCCESS) {
          id.persistence_mode = i == NVML_FEATURE_ENABLED;
        }
        id.mig_capable = ReadMigCapable(f, dev);
        if (f.device_get_virtualization_mode &&
            f.device_get_virtualization_mode(dev, &i) == NVML_SUCCESS) {
          id.virtualization_mode = i;
        }
        char serial[NVML_DEVICE_SERIAL_BUFFER_SIZE] = {};
        if (f.device_get_serial &&
            f.device_get_serial(dev, serial, sizeof(serial)) == NVML_SUCCESS) {
          id.serial = FromBuffer(serial, sizeof(serial));
        }
        char vbios[NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE] = {};
        if (f.device_get_vbios_version &&
            f.device_get_vbios_version(dev, vbios, sizeof(vbios)) == NVML_SUCCESS) {
          id.vbios_version = FromBuffer(vbios, sizeof(vbios));
        }
      },
      absl::StrCat("identity queries for GPU ", index), options_.call_timeout);
  if (!status.ok()) return status;
  std::string ctx = absl::StrCat("GPU index ", index);
  if (job->handle_ret != NVML_SUCCESS) {
    return gpu::NvmlError(job->handle_ret, "nvmlDeviceGetHandleByIndex_v2", ctx);
  }
  if (job->uuid_ret != NVML_SUCCESS) return gpu::NvmlError(job->uuid_ret, "nvmlDeviceGetUUID", ctx);
  return job->id;
}

absl::StatusOr<gpu::ProbeAnswer> NvmlGpuLibrary::Probe(unsigned index, absl::Duration timeout) {
  struct ProbeJob {
    nvmlReturn_t handle_ret = NVML_ERROR_UNKNOWN;
    nvmlReturn_t uuid_ret = NVML_ERROR_UNKNOWN;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    nvmlReturn_t remap_ret = NVML_ERROR_NOT_SUPPORTED;
    unsigned remap_pending = 0, remap_failure = 0;
    nvmlFieldValue_t recovery = {};
  };
  auto job = std::make_shared<ProbeJob>();
  auto lib = library_;
  absl::Status status = RunOnLane(
      static_cast<int>(index),
      [job, lib, index] {
        const NvmlFunctions& f = lib->fn();
        nvmlDevice_t dev = nullptr;
        job->handle_ret = f.device_get_handle_by_index(index, &dev);
        if (job->handle_ret != NVML_SUCCESS) return;
        job->uuid_ret = f.device_get_uuid ? f.device_get_uuid(dev, job->uuid, sizeof(job->uuid))
                                          : NVML_ERROR_FUNCTION_NOT_FOUND;
        if (job->uuid_ret != NVML_SUCCESS) return;
        job->recovery.fieldId = NVML_FI_DEV_GET_GPU_RECOVERY_ACTION;
        job->recovery.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        if (f.device_get_field_values == nullptr ||
            f.device_get_field_values(dev, 1, &job->recovery) != NVML_SUCCESS) {
          job->recovery.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
        if (!f.device_get_remapped_rows) return;
        unsigned correctable = 0, uncorrectable = 0;
        job->remap_ret = f.device_get_remapped_rows(dev, &correctable, &uncorrectable,
                                                    &job->remap_pending, &job->remap_failure);
      },
      absl::StrCat("liveness probe of GPU ", index), timeout);
  if (!status.ok()) return status;
  std::string ctx = absl::StrCat("GPU index ", index);
  if (job->handle_ret != NVML_SUCCESS) {
    return gpu::NvmlError(job->handle_ret, "nvmlDeviceGetHandleByIndex_v2", ctx);
  }
  if (job->uuid_ret != NVML_SUCCESS) return gpu::NvmlError(job->uuid_ret, "nvmlDeviceGetUUID", ctx);
  gpu::ProbeAnswer answer;
  answer.uuid = FromBuffer(job->uuid, sizeof(job->uuid));
  // Not supported (no HBM) or not answering: unknown, which is not a fault.
  if (job->remap_ret == NVML_SUCCESS) {
    answer.remap_pending = job->remap_pending != 0;
    answer.remap_failure = job->remap_failure != 0;
  }
  // Older drivers do not know the field: absent, not a fault.
  if (job->recovery.nvmlReturn == NVML_SUCCESS) {
    const nvmlFieldValue_t& v = job->recovery;
    answer.recovery_action = v.valueType == NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
                                 ? static_cast<unsigned>(v.value.ullVal)
                                 : v.value.uiVal;
  }
  return answer;
}

namespace {

// Calls `fn(dev, &value)` and stores the value only on success.
template <typename T, typename Out>
void ReadInto(nvmlReturn_t (*fn)(nvmlDevice_t, T*), nvmlDevice_t dev, std::optional<Out>* out) {
  if (fn == nullptr) return;
  T value{};
  if (fn(dev, &value) == NVML_SUCCESS) *out = static_cast<Out>(value);
}

// Appends a process list (compute or graphics), merging by pid.
void ReadProcesses(gpu::DeviceGetProcessesFn fn, nvmlDevice_t dev,
                   std::vector<gpu::GpuProcess>* out) {
  if (fn == nullptr) return;
  // The list can grow between the size query and the read: retry a few times.
  for (int attempt = 0; attempt < 3; ++attempt) {
    unsigned count = 0;
    nvmlReturn_t ret = fn(dev, &count, nullptr);
    if (ret == NVML_SUCCESS) return;  // none
    if (ret != NVML_ERROR_INSUFFICIENT_SIZE) return;
    count += 4;
    std::vector<nvmlProcessInfo_t> infos(count);
    ret = fn(dev, &count, infos.data());
    if (ret == NVML_ERROR_INSUFFICIENT_SIZE) continue;
    if (ret != NVML_SUCCESS) return;
    for (unsigned i = 0; i < count && i < infos.size(); ++i) {
      const nvmlProcessInfo_t& p = infos[i];
      auto it = std::find_if(out->begin(), out->end(),
                             [&p](const gpu::GpuProcess& g) { return g.pid == p.pid; });
      gpu::GpuProcess& proc = it != out->end() ? *it : out->emplace_back();
      proc.pid = p.pid;
      // NVML_VALUE_NOT_AVAILABLE (all ones) means unknown (e.g. no permission).
      if (p.usedGpuMemory != ~0ULL) proc.used_bytes = p.usedGpuMemory;
      if (p.gpuInstanceId != NVML_INVALID_INSTANCE_ID) {
        proc.gpu_instance_id = p.gpuInstanceId;
        proc.compute_instance_id = p.computeInstanceId;
      }
    }
    return;
  }
}

// Merges nvmlDeviceGetProcessUtilization's SM utilisation since `*seen_us` (the newest
// sample time of the previous call, 0 before any) into `procs` by pid: a pid's samples are
// averaged, at most 100; a pid the process lists lack is left out (NVML keeps samples of
// processes that have ended, which hold no memory and no slice). Listed processes without a
// sample get 0 when an earlier call saw samples (NVML samples only processes that ran), and
// stay absent otherwise. Advances `*seen_us` to the newest sample's time. A driver without
// the call, a GPU that does not support it, or any other error leaves every sm_percent absent.
void ReadProcessUtilization(gpu::DeviceGetProcessUtilizationFn fn, nvmlDevice_t dev,
                            unsigned long long* seen_us, std::vector<gpu::GpuProcess>* procs) {
  if (fn == nullptr) return;
  const unsigned long long since = *seen_us;
  std::vector<nvmlProcessUtilizationSample_t> samples;
  bool read = false;
  // Processes can start between the size query and the read: retry a few times.
  for (int attempt = 0; attempt < 3 && !read; ++attempt) {
    unsigned count = 0;
    nvmlReturn_t ret = fn(dev, nullptr, &count, since);
    if (ret == NVML_ERROR_NOT_FOUND || (ret == NVML_SUCCESS && count == 0)) {
      read = true;  // no sample since `since`
      break;
    }
    if (ret != NVML_ERROR_INSUFFICIENT_SIZE && ret != NVML_SUCCESS) return;
    count += 4;
    samples.assign(count, nvmlProcessUtilizationSample_t{});
    ret = fn(dev, samples.data(), &count, since);
    if (ret == NVML_ERROR_INSUFFICIENT_SIZE) continue;
    if (ret != NVML_SUCCESS && ret != NVML_ERROR_NOT_FOUND) return;
    samples.resize(ret == NVML_SUCCESS ? std::min<size_t>(count, samples.size()) : 0);
    read = true;
  }
  if (!read) return;
  struct Sum {
    unsigned long long total = 0;
    unsigned n = 0;
  };
  std::map<unsigned, Sum> by_pid;
  unsigned long long newest = since;
  for (const nvmlProcessUtilizationSample_t& u : samples) {
    if (u.timeStamp <= since) continue;  // the driver's filter, trusted no further
    Sum& sum = by_pid[u.pid];
    sum.total += std::min(u.smUtil, 100u);
    ++sum.n;
    newest = std::max(newest, u.timeStamp);
  }
  for (gpu::GpuProcess& p : *procs) {
    auto it = by_pid.find(p.pid);
    if (it != by_pid.end()) {
      p.sm_percent = static_cast<unsigned>((it->second.total + it->second.n / 2) / it->second.n);
    } else if (since != 0) {
      p.sm_percent = 0;
    }
  }
  *seen_us = newest;
}

}  // namespace

absl::StatusOr<gpu::DeviceSample> NvmlGpuLibrary::Sample(unsigned index, absl::Duration timeout) {
  struct SampleJob {
    nvmlReturn_t handle_ret = NVML_ERROR_UNKNOWN;
    nvmlReturn_t probe_ret = NVML_ERROR_UNKNOWN;  // first call: tells lost from working
    gpu::DeviceSample s;
  };
  auto job = std::make_shared<SampleJob>();
  auto lib = library_;
  std::shared_ptr<GpmReader> gpm = Gpm(index);
  std::shared_ptr<MigGpmReaders> mig_gpm = MigGpm(index);
  std::shared_ptr<unsigned long long> util_seen = ProcessUtilSeen(index);
  absl::Status status = RunOnLane(
      static_cast<int>(index),
      [job, lib, gpm, mig_gpm, util_seen, index] {
        const NvmlFunctions& f = lib->fn();
        nvmlDevice_t dev = nullptr;
        job->handle_ret = f.device_get_handle_by_index(index, &dev);
        if (job->handle_ret != NVML_SUCCESS) return;
        gpu::DeviceSample& s = job->s;
        nvmlUtilization_t util;
        job->probe_ret = f.device_get_utilization_rates ? f.device_get_utilization_rates(dev, &util)
                                                        : NVML_ERROR_FUNCTION_NOT_FOUND;
        if (job->probe_ret == NVML_ERROR_GPU_IS_LOST ||
            job->probe_ret == NVML_ERROR_RESET_REQUIRED) {
          return;
        }
        if (job->probe_ret == NVML_SUCCESS) {
          s.gpu_util = util.gpu;
          s.mem_util = util.memory;
        }
        unsigned u = 0;
        if (f.device_get_clock_info && f.device_get_clock_info(dev, NVML_CLOCK_SM, &u) == 0) {
          s.sm_clock_mhz = u;
        }
        if (f.device_get_clock_info && f.device_get_clock_info(dev, NVML_CLOCK_MEM, &u) == 0) {
          s.mem_clock_mhz = u;
        }
        if (f.device_get_temperature &&
            f.device_get_temperature(dev, NVML_TEMPERATURE_GPU, &u) == 0) {
          s.gpu_temp_c = u;
        }
        if (f.device_get_power_usage && f.device_get_power_usage(dev, &u) == 0) {
          s.power_w = u / 1000.0;
        }
        if (f.device_get_enforced_power_limit && f.device_get_enforced_power_limit(dev, &u) == 0) {
          s.power_limit_w = u / 1000.0;
        }
        ReadInto(f.device_get_total_energy_consumption, dev, &s.energy_mj);
        ReadInto(f.device_get_pcie_replay_counter, dev, &s.pcie_replays);
        ReadInto(f.device_get_fan_speed, dev, &s.fan_percent);
        ReadInto(f.device_get_performance_state, dev, &s.pstate);
        ReadInto(f.device_get_clocks_event_reasons, dev, &s.clocks_event_reasons);
        unsigned period = 0;
        if (f.device_get_encoder_utilization &&
            f.device_get_encoder_utilization(dev, &u, &period) == 0) {
          s.enc_util = u;
        }
        if (f.device_get_decoder_utilization &&
            f.device_get_decoder_utilization(dev, &u, &period) == 0) {
          s.dec_util = u;
        }
        nvmlMemory_v2_t mem2;
        std::memset(&mem2, 0, sizeof(mem2));
        mem2.version = nvmlMemory_v2;
        nvmlMemory_t mem1;
        if (f.device_get_memory_info_v2 && f.device_get_memory_info_v2(dev, &mem2) == 0) {
          s.fb_used_bytes = mem2.used;
          s.fb_free_bytes = mem2.free;
          s.fb_reserved_bytes = mem2.reserved;
        } else if (f.device_get_memory_info && f.device_get_memory_info(dev, &mem1) == 0) {
          s.fb_used_bytes = mem1.used;
          s.fb_free_bytes = mem1.free;
        }
        unsigned cor = 0, unc = 0, pending = 0, failure = 0;
        if (f.device_get_remapped_rows &&
            f.device_get_remapped_rows(dev, &cor, &unc, &pending, &failure) == 0) {
          s.remapped_correctable = cor;
          s.remapped_uncorrectable = unc;
          s.remap_failure = failure != 0;
        }
        unsigned long long ecc = 0;
        if (f.device_get_total_ecc_errors &&
            f.device_get_total_ecc_errors(dev, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC,
                                          &ecc) == 0) {
          s.ecc_sbe_volatile = ecc;
        }
        if (f.device_get_total_ecc_errors &&
            f.device_get_total_ecc_errors(dev, NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                          NVML_VOLATILE_ECC, &ecc) == 0) {
          s.ecc_dbe_volatile = ecc;
        }
        if (f.device_get_field_values) {
          nvmlFieldValue_t fv;
          std::memset(&fv, 0, sizeof(fv));
          fv.fieldId = NVML_FI_DEV_MEMORY_TEMP;
          if (f.device_get_field_values(dev, 1, &fv) == 0 && fv.nvmlReturn == NVML_SUCCESS) {
            if (fv.valueType == NVML_VALUE_TYPE_UNSIGNED_INT) s.mem_temp_c = fv.value.uiVal;
            if (fv.valueType == NVML_VALUE_TYPE_SIGNED_INT && fv.value.siVal >= 0) {
              s.mem_temp_c = static_cast<unsigned>(fv.value.siVal);
            }
            if (fv.valueType == NVML_VALUE_TYPE_UNSIGNED_LONG_LONG) {
              s.mem_temp_c = static_cast<unsigned>(fv.value.ullVal);
            }
          }
        }
        ReadProcesses(f.device_get_compute_processes, dev, &s.processes);
        ReadProcesses(f.device_get_graphics_processes, dev, &s.processes);
        ReadProcessUtilization(f.device_get_process_utilization, dev, util_seen.get(),
                               &s.processes);
        ReadNvLinks(f, dev, &s);
        s.profiling = gpm->Read(dev);
        ReadMigMemory(f, dev, &s);
        // One GPM pair per GPU instance; an instance destroyed (and perhaps re-created with
        // the same id) starts a new pair.
        MigGpmReaders live;
        for (gpu::MigInstanceSample& m : s.mig) {
          if (live.count(m.gpu_instance_id) != 0) continue;  // its GPU instance's, below
          auto it = mig_gpm->find(m.gpu_instance_id);
          std::unique_ptr<GpmReader> reader =
              it != mig_gpm->end() ? std::move(it->second)
                                   : std::make_unique<GpmReader>(lib, m.gpu_instance_id);
          m.profiling = reader->Read(dev);
          live[m.gpu_instance_id] = std::move(reader);
        }
        for (gpu::MigInstanceSample& m : s.mig) {
          // Compute instances of one GPU instance share its GPM values.
          if (m.profiling) continue;
          for (const gpu::MigInstanceSample& o : s.mig) {
            if (o.gpu_instance_id == m.gpu_instance_id && o.profiling) m.profiling = o.profiling;
          }
        }
        *mig_gpm = std::move(live);
      },
      absl::StrCat("sampling GPU ", index), timeout);
  if (!status.ok()) return status;
  std::string ctx = absl::StrCat("GPU index ", index);
  if (job->handle_ret != NVML_SUCCESS) {
    return gpu::NvmlError(job->handle_ret, "nvmlDeviceGetHandleByIndex_v2", ctx);
  }
  if (job->probe_ret == NVML_ERROR_GPU_IS_LOST || job->probe_ret == NVML_ERROR_RESET_REQUIRED) {
    return gpu::NvmlError(job->probe_ret, "nvmlDeviceGetUtilizationRates", ctx);
  }
  // Wall time: the sample's age is shown to users. NvmlGpuLibrary talks to a real (or
  // simulated) driver, so its lanes and stamps use the real clock.
  job->s.taken = RealClock()->Now();
  return job->s;
}

absl::StatusOr<gpu::MigLayout> NvmlGpuLibrary::GetMigLayout(unsigned index,
                                                            absl::Duration timeout) {
  struct MigJob {
    nvmlReturn_t handle_ret = NVML_ERROR_UNKNOWN;
    nvmlReturn_t ret = NVML_SUCCESS;
    gpu::MigLayout layout;
  };
  auto job = std::make_shared<MigJob>();
  auto lib = library_;
  absl::Status status = RunOnLane(
      static_cast<int>(index),
      [job, lib, index] {
        const NvmlFunctions& f = lib->fn();
        nvmlDevice_t dev = nullptr;
        job->handle_ret = f.device_get_handle_by_index(index, &dev);
        if (job->handle_ret != NVML_SUCCESS) return;
        job->ret = ReadMigLayout(f, dev, &job->layout);
      },
      absl::StrCat("reading the MIG layout of GPU ", index), timeout);
  if (!status.ok()) return status;
  std::string ctx = absl::StrCat("GPU index ", index);
  if (job->handle_ret != NVML_SUCCESS) {
    return gpu::NvmlError(job->handle_ret, "nvmlDeviceGetHandleByIndex_v2", ctx);
  }
  if (job->ret != NVML_SUCCESS) return gpu::NvmlError(job->ret, "nvmlDeviceGetMigMode", ctx);
  return job->layout;
}

absl::Status NvmlGpuLibrary::SetMemoryLimit(unsigned index, const std::string& cgroup,
                                            uint64_t hard_bytes, absl::Duration timeout) {
  struct LimitJob {
    nvmlReturn_t handle_ret = NVML_ERROR_UNKNOWN;
    nvmlReturn_t ret = NVML_ERROR_FUNCTION_NOT_FOUND;
  };
  auto job = std::make_shared<LimitJob>();
  auto lib = library_;
  absl::Status status = RunOnLane(
      static_cast<int>(index),
      [job, lib, index, cgroup, hard_bytes] {
        const NvmlFunctions& f = lib->fn();
        nvmlDevice_t dev = nullptr;
        job->handle_ret = f.device_get_handle_by_index(index, &dev);
        if (job->handle_ret != NVML_SUCCESS || f.device_set_memory_limits == nullptr) return;
        nvmlSetMemoryLimits_v1_t limits = {cgroup.c_str(), 0, hard_bytes};
        job->ret = f.device_set_memory_limits(dev, &limits);
      },
      absl::StrCat("setting the VRAM limit of ", cgroup, " on GPU ", index), timeout);
  if (!status.ok()) return status;
  const std::string ctx = absl::StrCat("GPU index ", index, ", cgroup ", cgroup);
  if (job->handle_ret != NVML_SUCCESS) {
    return gpu::NvmlError(job->handle_ret, "nvmlDeviceGetHandleByIndex_v2", ctx);
  }
  if (job->ret != NVML_SUCCESS) {
    return gpu::NvmlError(job->ret, "nvmlDeviceSetMemoryLimits_v1", ctx);
  }
  return absl::OkStatus();
}

absl::Status NvmlGpuLibrary::RegisterEvents(unsigned count) {
  const NvmlFunctions& f = library_->fn();
  if (!f.event_set_create || !f.device_register_events || !f.event_set_wait) {
    return absl::UnimplementedError(absl::StrCat(
        library_->path(), " has no NVML event API; XIDs come from the kernel log only"));
  }
  if (event_set_ == nullptr) {
    nvmlReturn_t ret = f.event_set_create(&event_set_);
    if (ret != NVML_SUCCESS) return gpu::NvmlError(ret, "nvmlEventSetCreate");
  }
  constexpr unsigned long long kWanted = nvmlEventTypeXidCriticalError |
                                         nvmlEventTypeDoubleBitEccError |
                                         nvmlEventTypeSingleBitEccError;
  std::string problems;
  nvmlReturn_t first_failure = NVML_SUCCESS;
  auto failed = [&](unsigned i, nvmlReturn_t ret) {
    absl::StrAppend(&problems, " GPU ", i, ": ", gpu::DescribeNvmlReturn(ret).name, ";");
    if (first_failure == NVML_SUCCESS) first_failure = ret;
  };
  for (unsigned i = 0; i < count; ++i) {
    nvmlDevice_t dev = nullptr;
    nvmlReturn_t ret = f.device_get_handle_by_index(i, &dev);
    if (ret != NVML_SUCCESS) {
      failed(i, ret);
      continue;
    }
    unsigned long long supported = kWanted;
    if (f.device_get_supported_event_types) {
      f.device_get_supported_event_types(dev, &supported);
    }
    // Registering an unsupported bit fails the whole call, so only ask for supported ones.
    unsigned long long mask = kWanted & supported;
    if (mask == 0) continue;
    ret = f.device_register_events(dev, mask, event_set_);
    if (ret != NVML_SUCCESS) {
      failed(i, ret);
      continue;
    }
    event_devices_[dev] = i;
  }
  if (!problems.empty()) {
    // NVML's own answer (its first code attached): registered as far as NVML allows, which a
    // caller tells apart from a worker that never answered.
    return gpu::WithNvmlCode(
        absl::UnavailableError(absl::StrCat("NVML events not registered for", problems)),
        first_failure);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<gpu::GpuEvent>> NvmlGpuLibrary::WaitEvent(absl::Duration timeout) {
  if (event_set_ == nullptr) return absl::FailedPreconditionError("events not registered");
  nvmlEventData_t data;
  std::memset(&data, 0, sizeof(data));
  nvmlReturn_t ret = library_->fn().event_set_wait(
      event_set_, &data, static_cast<unsigned>(absl::ToInt64Milliseconds(timeout)));
  if (ret == NVML_ERROR_TIMEOUT) return std::optional<gpu::GpuEvent>();
  if (ret != NVML_SUCCESS) return gpu::NvmlError(ret, "nvmlEventSetWait_v2");
  auto it = event_devices_.find(data.device);
  if (it == event_devices_.end()) return std::optional<gpu::GpuEvent>();
  gpu::GpuEvent event;
  event.index = it->second;
  event.type = data.eventType;
  event.data = data.eventData;
  if (data.gpuInstanceId != NVML_INVALID_INSTANCE_ID) {
    event.gpu_instance_id = data.gpuInstanceId;
    if (data.computeInstanceId != NVML_INVALID_INSTANCE_ID) {
      event.compute_instance_id = data.computeInstanceId;
    }
  }
  return std::optional<gpu::GpuEvent>(event);
}

}  // namespace gpulet::nvml
