// NvmlLibrary: the one owner of a dlopen()ed libnvidia-ml, its resolved function table and
// its nvmlInit/nvmlShutdown reference.
//
// gpulet never links NVML. Open() loads a library file, resolves every symbol it knows by
// its exact versioned name (nvmlInit_v2, nvmlDeviceGetCount_v2, ...) with a per-symbol
// fallback to the older name where the ABI allows it, refuses a library that lacks the
// required core, and calls nvmlInit. The destructor calls nvmlShutdown and dlclose()s,
// unless a call into the library is still stuck (see TimedLane), in which case the library is
// deliberately left loaded: unloading code a thread is executing would crash the process.
//
// Open() runs nvmlInit in the calling process; callers that cannot trust the library yet use
// ProbeNvmlLibrary (nvml_probe.h) in a child process first.
//
// Thread-safety: the function table is immutable after Open(); NVML itself is thread-safe,
// so fn() may be used from any thread. MarkStuck() may be called from any thread.
#ifndef GPULET_NVML_NVML_LIBRARY_H_
#define GPULET_NVML_NVML_LIBRARY_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gpu/nvml_api.h"

namespace gpulet::nvml {

// Resolved entry points. Required ones are never null after Open(); optional ones are null
// when the library lacks them (older drivers), and callers treat that as NOT_SUPPORTED.
struct NvmlFunctions {
  // Required.
  gpu::InitFn init = nullptr;  // nvmlInit_v2, falling back to nvmlInit
  gpu::ShutdownFn shutdown = nullptr;
  gpu::GetCountFn device_get_count = nullptr;                    // _v2, else unversioned
  gpu::GetHandleByIndexFn device_get_handle_by_index = nullptr;  // _v2, else unversioned
  // Optional.
  gpu::ErrorStringFn error_string = nullptr;
  gpu::SystemGetStringFn system_get_driver_version = nullptr;
  gpu::SystemGetStringFn system_get_nvml_version = nullptr;
  gpu::SystemGetIntFn system_get_cuda_driver_version = nullptr;  // _v2, else unversioned
  gpu::GetHandleByStringFn device_get_handle_by_uuid = nullptr;
  gpu::GetHandleByStringFn device_get_handle_by_pci_bus_id = nullptr;
  gpu::DeviceGetStringFn device_get_name = nullptr;
  gpu::DeviceGetStringFn device_get_uuid = nullptr;
  gpu::DeviceGetStringFn device_get_serial = nullptr;
  gpu::DeviceGetStringFn device_get_vbios_version = nullptr;
  gpu::DeviceGetUintFn device_get_index = nullptr;
  gpu::DeviceGetUintFn device_get_minor_number = nullptr;
  gpu::DeviceGetPciInfoFn device_get_pci_info = nullptr;  // _v3, else _v2
  gpu::DeviceGetMemoryInfoFn device_get_memory_info = nullptr;
  gpu::DeviceGetMemoryInfoV2Fn device_get_memory_info_v2 = nullptr;
  gpu::DeviceGetUtilizationFn device_get_utilization_rates = nullptr;
  gpu::DeviceGetTemperatureFn device_get_temperature = nullptr;
  gpu::DeviceGetUintFn device_get_power_usage = nullptr;
  gpu::DeviceGetUintFn device_get_enforced_power_limit = nullptr;
  gpu::DeviceGetUllFn device_get_total_energy_consumption = nullptr;
  gpu::DeviceGetClockInfoFn device_get_clock_info = nullptr;
  gpu::DeviceGetClockInfoFn device_get_max_clock_info = nullptr;
  gpu::DeviceGetUintFn device_get_fan_speed = nullptr;
  gpu::DeviceGetIntFn device_get_performance_state = nullptr;
  gpu::DeviceGetUllFn device_get_clocks_event_reasons = nullptr;  // else ThrottleReasons
  gpu::DeviceGetCudaCapFn device_get_cuda_compute_capability = nullptr;
  gpu::DeviceGetUintFn device_get_architecture = nullptr;
  gpu::DeviceGetIntFn device_get_brand = nullptr;
  gpu::DeviceGetIntFn device_get_persistence_mode = nullptr;
  gpu::DeviceGetProcessesFn device_get_compute_processes = nullptr;   // _v3 only
  gpu::DeviceGetProcessesFn device_get_graphics_processes = nullptr;  // _v3 only
  gpu::DeviceGetProcessUtilizationFn device_get_process_utilization = nullptr;
  gpu::DeviceGetRemappedRowsFn device_get_remapped_rows = nullptr;
  gpu::DeviceGetEccErrorsFn device_get_total_ecc_errors = nullptr;
  gpu::DeviceGetUintFn device_get_pcie_replay_counter = nullptr;
  gpu::DeviceGetCodecUtilFn device_get_encoder_utilization = nullptr;
  gpu::DeviceGetCodecUtilFn device_get_decoder_utilization = nullptr;
  gpu::DeviceGetFieldValuesFn device_get_field_values = nullptr;
  gpu::DeviceGetUllFn device_get_supported_event_types = nullptr;
  gpu::EventSetCreateFn event_set_create = nullptr;
  gpu::EventSetFreeFn event_set_free = nullptr;
  gpu::DeviceRegisterEventsFn device_register_events = nullptr;
  gpu::EventSetWaitFn event_set_wait = nullptr;               // _v2 only
  gpu::DeviceGetLinkIntFn device_get_nvlink_state = nullptr;  // nvmlEnableState_t out
  gpu::DeviceGetLinkErrorFn device_get_nvlink_error_counter = nullptr;
  gpu::DeviceGetLinkIntFn device_get_nvlink_remote_device_type = nullptr;
  gpu::DeviceGetMigModeFn device_get_mig_mode = nullptr;
  gpu::DeviceGetUintFn device_get_max_mig_device_count = nullptr;
  gpu::DeviceGetMigDeviceHandleByIndexFn device_get_mig_device_handle_by_index = nullptr;
  gpu::DeviceGetUintFn device_get_gpu_instance_id = nullptr;
  gpu::DeviceGetUintFn device_get_compute_instance_id = nullptr;
  gpu::DeviceGetAttributesFn device_get_attributes = nullptr;  // _v2
  gpu::GpmMigSampleGetFn gpm_mig_sample_get = nullptr;
  gpu::DeviceGetIntFn device_get_virtualization_mode = nullptr;
  // The driver's own per-cgroup VRAM limits (drivers from r615).
  gpu::DeviceSetMemoryLimitsFn device_set_memory_limits = nullptr;  // _v1
  gpu::DeviceGetMemoryLimitsFn device_get_memory_limits = nullptr;  // _v1
  // GPU Performance Monitoring (drivers from R520; GPUs from Hopper).
  gpu::GpmQueryDeviceSupportFn gpm_query_device_support = nullptr;
  gpu::GpmSampleAllocFn gpm_sample_alloc = nullptr;
  gpu::GpmSampleFreeFn gpm_sample_free = nullptr;
  gpu::GpmSampleGetFn gpm_sample_get = nullptr;
  gpu::GpmMetricsGetFn gpm_metrics_get = nullptr;
};

class NvmlLibrary {
 public:
  // Loads `path` (a file path, or a bare soname for the loader's own search), resolves the
  // symbols and calls nvmlInit. Failures name the path and say what to do:
  //   NotFound            dlopen failed (the dlerror text is included);
  //   FailedPrecondition  required symbols missing (listed), or nvmlInit failed (with the
  //                       NVML return-code cause and fix; NvmlCodeOf() gives the code).
  static absl::StatusOr<std::unique_ptr<NvmlLibrary>> Open(const std::string& path);

  // Only resolves the symbols, without nvmlInit (used by the probe child and the tests).
  // Returns the names of missing required symbols through `missing_required`.
  static NvmlFunctions Resolve(void* handle, std::vector<std::string>* missing_required,
                               std::vector<std::string>* missing_optional);

  ~NvmlLibrary();
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  const NvmlFunctions& fn() const { return fn_; }
  // The file actually loaded (resolved through the link map, so a soname becomes a path).
  const std::string& path() const { return path_; }
  // Optional symbols this library lacks (for `gpulet doctor` and debug logs).
  const std::vector<std::string>& missing_optional() const { return missing_optional_; }

  // Called when a call into the library is stuck: the destructor then neither shuts NVML
  // down nor unloads it.
  void MarkStuck() { stuck_.store(true); }
  bool stuck() const { return stuck_.load(); }

 private:
  NvmlLibrary() = default;

  void* handle_ = nullptr;
  std::string path_;
  NvmlFunctions fn_;
  std::vector<std::string> missing_optional_;
  bool initialized_ = false;  // nvmlInit succeeded; the destructor owes an nvmlShutdown
  std::atomic<bool> stuck_{false};
};

}  // namespace gpulet::nvml

#endif  // GPULET_NVML_NVML_LIBRARY_H_
