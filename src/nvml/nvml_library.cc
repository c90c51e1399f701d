#include "nvml/nvml_library.h"

#include <dlfcn.h>
#include <link.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gpu/nvml_errors.h"

namespace gpulet::nvml {
namespace {

// Looks `names` up in order and stores the first hit in `*slot` (nullptr if none). The
// first name is the one reported as missing.
template <typename Fn>
void Bind(void* handle, Fn* slot, std::initializer_list<const char*> names,
          std::vector<std::string>* missing) {
  *slot = nullptr;
  for (const char* name : names) {
    if (void* sym = dlsym(handle, name)) {
      *slot = reinterpret_cast<Fn>(sym);
      return;
    }
  }
  if (missing != nullptr) missing->push_back(*names.begin());
}

std::string LoadedPath(void* handle, const std::string& fallback) {
  struct link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr &&
      map->l_name[0] != '\0') {
    return map->l_name;
  }
  return fallback;
}

}  // namespace

NvmlFunctions NvmlLibrary::Resolve(void* handle, std::vector<std::string>* missing_required,
                                   std::vector<std::string>* missing_optional) {
  NvmlFunctions f;
  std::vector<std::string>* req = missing_required;
  std::vector<std::string>* opt = missing_optional;
  Bind(handle, &f.init, {"nvmlInit_v2", "nvmlInit"}, req);
  Bind(handle, &f.shutdown, {"nvmlShutdown"}, req);
  Bind(handle, &f.device_get_count, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"}, req);
  Bind(handle, &f.device_get_handle_by_index,
       {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"}, req);

  Bind(handle, &f.error_string, {"nvmlErrorString"}, opt);
  Bind(handle, &f.system_get_driver_version, {"nvmlSystemGetDriverVersion"}, opt);
  Bind(handle, &f.system_get_nvml_version, {"nvmlSystemGetNVMLVersion"}, opt);
  Bind(handle, &f.system_get_cuda_driver_version,
       {"nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"}, opt);
  Bind(handle, &f.device_get_handle_by_uuid, {"nvmlDeviceGetHandleByUUID"}, opt);
  Bind(handle, &f.device_get_handle_by_pci_bus_id,
       {"nvmlDeviceGetHandleByPciBusId_v2", "nvmlDeviceGetHandleByPciBusId"}, opt);
  Bind(handle, &f.device_get_name, {"nvmlDeviceGetName"}, opt);
  Bind(handle, &f.device_get_uuid, {"nvmlDeviceGetUUID"}, opt);
  Bind(handle, &f.device_get_serial, {"nvmlDeviceGetSerial"}, opt);
  Bind(handle, &f.device_get_vbios_version, {"nvmlDeviceGetVbiosVersion"}, opt);
  Bind(handle, &f.device_get_index, {"nvmlDeviceGetIndex"}, opt);
  Bind(handle, &f.device_get_minor_number, {"nvmlDeviceGetMinorNumber"}, opt);
  // _v2 has the same struct layout as _v3 (only the busId semantics changed); the
  // unversioned call used a shorter struct and is not used.
  Bind(handle, &f.device_get_pci_info, {"nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2"}, opt);
  Bind(handle, &f.device_get_memory_info, {"nvmlDeviceGetMemoryInfo"}, opt);
  Bind(handle, &f.device_get_memory_info_v2, {"nvmlDeviceGetMemoryInfo_v2"}, opt);
  Bind(handle, &f.device_get_utilization_rates, {"nvmlDeviceGetUtilizationRates"}, opt);
  Bind(handle, &f.device_get_temperature, {"nvmlDeviceGetTemperature"}, opt);
  Bind(handle, &f.device_get_power_usage, {"nvmlDeviceGetPowerUsage"}, opt);
  Bind(handle, &f.device_get_enforced_power_limit, {"nvmlDeviceGetEnforcedPowerLimit"}, opt);
  Bind(handle, &f.device_get_total_energy_consumption, {"nvmlDeviceGetTotalEnergyConsumption"},
       opt);
  Bind(handle, &f.device_get_clock_info, {"nvmlDeviceGetClockInfo"}, opt);
  Bind(handle, &f.device_get_max_clock_info, {"nvmlDeviceGetMaxClockInfo"}, opt);
  Bind(handle, &f.device_get_fan_speed, {"nvmlDeviceGetFanSpeed"}, opt);
  Bind(handle, &f.device_get_performance_state, {"nvmlDeviceGetPerformanceState"}, opt);
  Bind(handle, &f.device_get_clocks_event_reasons,
       {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"},
       opt);
  Bind(handle, &f.device_get_cuda_compute_capability, {"nvmlDeviceGetCudaComputeCapability"}, opt);
  Bind(handle, &f.device_get_architecture, {"nvmlDeviceGetArchitecture"}, opt);
  Bind(handle, &f.device_get_brand, {"nvmlDeviceGetBrand"}, opt);
  Bind(handle, &f.device_get_persistence_mode, {"nvmlDeviceGetPersistenceMode"}, opt);
  Bind(handle, &f.device_get_compute_processes, {"nvmlDeviceGetComputeRunningProcesses_v3"}, opt);
  Bind(handle, &f.device_get_graphics_processes, {"nvmlDeviceGetGraphicsRunningProcesses_v3"}, opt);
  Bind(handle, &f.device_get_process_utilization, {"nvmlDeviceGetProcessUtilization"}, opt);
  Bind(handle, &f.device_get_remapped_rows, {"nvmlDeviceGetRemappedRows"}, opt);
  Bind(handle, &f.device_get_total_ecc_errors, {"nvmlDeviceGetTotalEccErrors"}, opt);
  Bind(handle, &f.device_get_pcie_replay_counter, {"nvmlDeviceGetPcieReplayCounter"}, opt);
  Bind(handle, &f.device_get_encoder_utilization, {"nvmlDeviceGetEncoderUtilization"}, opt);
  Bind(handle, &f.device_get_decoder_utilization, {"nvmlDeviceGetDecoderUtilization"}, opt);
  Bind(handle, &f.device_get_field_values, {"nvmlDeviceGetFieldValues"}, opt);
  Bind(handle, &f.device_get_supported_event_types, {"nvmlDeviceGetSupportedEventTypes"}, opt);
  Bind(handle, &f.event_set_create, {"nvmlEventSetCreate"}, opt);
  Bind(handle, &f.event_set_free, {"nvmlEventSetFree"}, opt);
  Bind(handle, &f.device_register_events, {"nvmlDeviceRegisterEvents"}, opt);
  Bind(handle, &f.event_set_wait, {"nvmlEventSetWait_v2"}, opt);
  Bind(handle, &f.device_get_nvlink_state, {"nvmlDeviceGetNvLinkState"}, opt);
  Bind(handle, &f.device_get_nvlink_error_counter, {"nvmlDeviceGetNvLinkErrorCounter"}, opt);
  Bind(handle, &f.device_get_nvlink_remote_device_type, {"nvmlDeviceGetNvLinkRemoteDeviceType"},
       opt);
  Bind(handle, &f.device_get_mig_mode, {"nvmlDeviceGetMigMode"}, opt);
  Bind(handle, &f.device_get_max_mig_device_count, {"nvmlDeviceGetMaxMigDeviceCount"}, opt);
  Bind(handle, &f.device_get_mig_device_handle_by_index, {"nvmlDeviceGetMigDeviceHandleByIndex"},
       opt);
  Bind(handle, &f.device_get_gpu_instance_id, {"nvmlDeviceGetGpuInstanceId"}, opt);
  Bind(handle, &f.device_get_compute_instance_id, {"nvmlDeviceGetComputeInstanceId"}, opt);
  Bind(handle, &f.device_get_attributes, {"nvmlDeviceGetAttributes_v2"}, opt);
  Bind(handle, &f.gpm_mig_sample_get, {"nvmlGpmMigSampleGet"}, opt);
  Bind(handle, &f.device_get_virtualization_mode, {"nvmlDeviceGetVirtualizationMode"}, opt);
  Bind(handle, &f.device_set_memory_limits, {"nvmlDeviceSetMemoryLimits_v1"}, opt);
  Bind(handle, &f.device_get_memory_limits, {"nvmlDeviceGetMemoryLimits_v1"}, opt);
  Bind(handle, &f.gpm_query_device_support, {"nvmlGpmQueryDeviceSupport"}, opt);
  Bind(handle, &f.gpm_sample_alloc, {"nvmlGpmSampleAlloc"}, opt);
  Bind(handle, &f.gpm_sample_free, {"nvmlGpmSampleFree"}, opt);
  Bind(handle, &f.gpm_sample_get, {"nvmlGpmSampleGet"}, opt);
  Bind(handle, &f.gpm_metrics_get, {"nvmlGpmMetricsGet"}, opt);
  return f;
}

absl::StatusOr<std::unique_ptr<NvmlLibrary>> NvmlLibrary::Open(const std::string& path) {
  dlerror();
  // RTLD_LOCAL keeps NVML's symbols out of the global namespace (the simulator and a real
  // library must never resolve against each other); RTLD_NOW surfaces missing dependencies
  // here rather than at the first call.
  // RTLD_NODELETE: dlclose must never unmap NVML. Drivers start helper threads and keep
  // process-wide state that can outlive nvmlShutdown; unmapping the code under them would
  // turn a clean shutdown into a crash. It also keeps the library's own allocations
  // reachable, so leak checkers do not blame us for them.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (handle == nullptr) {
    const char* err = dlerror();
    return absl::NotFoundError(
        absl::StrCat("cannot load ", path, ": ", err != nullptr ? err : "unknown dlopen error"));
  }
  std::unique_ptr<NvmlLibrary> lib(new NvmlLibrary());
  lib->handle_ = handle;
  lib->path_ = LoadedPath(handle, path);
  std::vector<std::string> missing;
  lib->fn_ = Resolve(handle, &missing, &lib->missing_optional_);
  if (!missing.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        lib->path_, " is not a usable NVML library: it lacks ", absl::StrJoin(missing, ", "),
        ". It may be a stub or a library from a very old driver (before R450); point "
        "--nvml-lib at the libnvidia-ml.so.1 of the installed driver"));
  }
  nvmlReturn_t ret = lib->fn_.init();
  if (ret != NVML_SUCCESS) return gpu::NvmlError(ret, "nvmlInit_v2", lib->path_);
  lib->initialized_ = true;
  return lib;
}

NvmlLibrary::~NvmlLibrary() {
  if (handle_ == nullptr || stuck_.load()) return;  // see the class comment
  if (initialized_) fn_.shutdown();
  dlclose(handle_);
}

}  // namespace gpulet::nvml
