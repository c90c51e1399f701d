#include "gpu/nvml_gpu_library.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "gpu/nvml_errors.h"

namespace gpulet {
namespace {

// NVML string out-parameters are NUL-terminated on success; never trust that blindly.
std::string FromBuffer(const char* buf, size_t size) { return std::string(buf, strnlen(buf, size)); }

// Everything one identity query reads, owned jointly by the caller and the lane job so a
// job that overruns its deadline writes into memory that is still alive.
struct IdentityJob {
  unsigned index = 0;
  nvmlReturn_t handle_ret = NVML_ERROR_UNKNOWN;
  nvmlReturn_t uuid_ret = NVML_ERROR_UNKNOWN;
  DeviceIdentity id;
};

}  // namespace

NvmlGpuLibrary::NvmlGpuLibrary(std::shared_ptr<NvmlLibrary> library, Options options)
    : library_(std::move(library)), options_(options) {}

NvmlGpuLibrary::~NvmlGpuLibrary() {
  absl::MutexLock lock(&mu_);
  for (auto& [index, lane] : lanes_) {
    if (lane->wedged()) library_->MarkStuck();
  }
}

TimedLane& NvmlGpuLibrary::Lane(int index) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<TimedLane>& lane = lanes_[index];
  if (!lane) {
    lane = std::make_unique<TimedLane>(index < 0 ? std::string("NVML")
                                                 : absl::StrCat("GPU ", index));
  }
  return *lane;
}

absl::Status NvmlGpuLibrary::RunOnLane(int index, std::function<void()> work,
                                       absl::string_view what, absl::Duration timeout) {
  absl::Status status = Lane(index).Run(std::move(work), timeout, what);
  if (absl::IsDeadlineExceeded(status)) library_->MarkStuck();
  return status;
}

absl::StatusOr<SystemInfo> NvmlGpuLibrary::GetSystemInfo() {
  auto info = std::make_shared<SystemInfo>();
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
  if (out->first != NVML_SUCCESS) return NvmlError(out->first, "nvmlDeviceGetCount_v2");
  return out->second;
}

absl::StatusOr<DeviceIdentity> NvmlGpuLibrary::GetDeviceIdentity(unsigned index) {
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
        DeviceIdentity& id = job->id;
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
    return NvmlError(job->handle_ret, "nvmlDeviceGetHandleByIndex_v2", ctx);
  }
  if (job->uuid_ret != NVML_SUCCESS) return NvmlError(job->uuid_ret, "nvmlDeviceGetUUID", ctx);
  return job->id;
}

absl::StatusOr<std::string> NvmlGpuLibrary::Probe(unsigned index, absl::Duration timeout) {
  struct ProbeJob {
    nvmlReturn_t handle_ret = NVML_ERROR_UNKNOWN;
    nvmlReturn_t uuid_ret = NVML_ERROR_UNKNOWN;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
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
      },
      absl::StrCat("liveness probe of GPU ", index), timeout);
  if (!status.ok()) return status;
  std::string ctx = absl::StrCat("GPU index ", index);
  if (job->handle_ret != NVML_SUCCESS) {
    return NvmlError(job->handle_ret, "nvmlDeviceGetHandleByIndex_v2", ctx);
  }
  if (job->uuid_ret != NVML_SUCCESS) return NvmlError(job->uuid_ret, "nvmlDeviceGetUUID", ctx);
  return FromBuffer(job->uuid, sizeof(job->uuid));
}

}  // namespace gpulet
