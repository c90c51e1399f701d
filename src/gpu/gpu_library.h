// GpuLibrary: the questions gpulet asks about the GPUs, independent of how they are answered.
//
// NvmlGpuLibrary (nvml_gpu_library.h) answers them through the dlopen()ed NVML (a real
// driver or the simulator), each call under a deadline on a per-GPU lane;
// NvmlWorkerGpuLibrary (nvml_worker_library.h) forwards them to gpulet-nvml-worker, which
// runs NVML under the driver's own glibc. For unit tests of the layers above,
// testing::FakeGpuLibrary (src/testing/fake_gpu_library.h) answers from memory: a test adds
// GPUs and their samples and scripts per-GPU failures (NVML codes such as GPU_IS_LOST),
// another UUID at an index, row remapping, hangs (timed on an injected Clock) and XID/ECC
// events. Values are plain structs in base units; "not supported" is an absent optional,
// never a sentinel.
//
// Thread-safety: implementations must allow concurrent calls for different GPUs.
#ifndef GPULET_GPU_GPU_LIBRARY_H_
#define GPULET_GPU_GPU_LIBRARY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace gpulet::gpu {

struct SystemInfo {
  std::string driver_version;   // "570.133.20"
  std::string nvml_version;     // "12.570.133.20"
  int cuda_driver_version = 0;  // 12080 means CUDA 12.8
  std::string library_path;     // the libnvidia-ml file in use

  // "12.8", or "" when unknown.
  std::string CudaVersionString() const;
};

// What identifies a GPU and does not change while the driver is loaded.
struct DeviceIdentity {
  unsigned index = 0;
  std::string uuid;               // "GPU-…"
  std::string name;               // "NVIDIA GeForce RTX 3080"
  std::string bus_id;             // as NVML prints it: "00000000:01:00.0"
  uint32_t pci_device_id = 0;     // (device << 16) | vendor
  uint32_t pci_subsystem_id = 0;  // (subsystem << 16) | subsystem vendor
  std::optional<unsigned> minor;  // /dev/nvidia<minor>
  std::optional<uint64_t> memory_total_bytes;
  std::optional<uint64_t> memory_reserved_bytes;
  std::optional<int> cc_major, cc_minor;      // CUDA compute capability
  std::optional<unsigned> nvml_architecture;  // NVML_DEVICE_ARCH_*
  std::optional<int> brand;                   // NVML_BRAND_*
  std::optional<std::string> serial;
  std::optional<std::string> vbios_version;
  std::optional<bool> persistence_mode;
  // Whether the GPU supports MIG (nvmlDeviceGetMigMode answers); absent when NVML cannot say.
  std::optional<bool> mig_capable;
  // NVML_GPU_VIRTUALIZATION_MODE_*: VGPU means this machine is a vGPU guest.
  std::optional<int> virtualization_mode;
};

// A process holding memory on a GPU.
struct GpuProcess {
  unsigned pid = 0;
  std::optional<uint64_t> used_bytes;  // absent when the driver does not say
  // The MIG instance the process runs in; absent on GPUs without MIG enabled.
  std::optional<unsigned> gpu_instance_id, compute_instance_id;
  // Percent of the time since the GPU's previous sample that one of the process's kernels ran
  // (NVML's nvmlDeviceGetProcessUtilization smUtil; the mean of its samples in that time).
  // Absent when the driver gave no sample for the process; 0 when it gave samples before and
  // none for the process since (NVML samples only processes that ran).
  std::optional<unsigned> sm_percent;
};

// GPU Performance Monitoring values (Hopper and newer), averaged over the time since the
// GPU's previous sample. Ratios are 0..1 as DCGM's DCGM_FI_PROF_* fields are; rates are bytes
// per second. Absent: the GPU or driver does not report that metric.
struct ProfilingSample {
  std::optional<double> gr_engine_active, sm_active, sm_occupancy, tensor_active, dram_active;
  std::optional<double> fp64_active, fp32_active, fp16_active;
  std::optional<double> pcie_tx_bytes_per_second, pcie_rx_bytes_per_second;
  std::optional<double> nvlink_tx_bytes_per_second, nvlink_rx_bytes_per_second;
};

// One NVLink of a GPU: its state and its data-link error counters (since the driver loaded).
struct NvLinkSample {
  unsigned link = 0;
  bool active = false;
  std::optional<int> remote_type;  // NVML_NVLINK_DEVICE_TYPE_*: GPU, SWITCH, ...
  std::optional<uint64_t> replay_errors, recovery_errors, crc_flit_errors, crc_data_errors;
};

// One MIG device (a compute instance inside a GPU instance) as NVML describes it. Its
// profile name is NVIDIA's ("1g.18gb", "1c.3g.71gb"), derived from the slice counts and the
// memory by MigProfileName (gpu/mig.h), as NVIDIA's device plugin names its resources.
struct MigDeviceInfo {
  unsigned index = 0;  // nvmlDeviceGetMigDeviceHandleByIndex's index on its GPU
  std::string uuid;    // "MIG-…"
  unsigned gpu_instance_id = 0, compute_instance_id = 0;
  unsigned gpu_instance_slices = 0, compute_instance_slices = 0;
  uint64_t memory_bytes = 0;
  unsigned sm_count = 0;
  unsigned copy_engines = 0, decoders = 0, encoders = 0, jpeg_engines = 0, ofa_engines = 0;
  std::string profile;  // "1g.18gb"

  bool operator==(const MigDeviceInfo&) const = default;
};

// A GPU's MIG mode and the MIG devices it has now. An operator (nvidia-smi, mig-parted)
// changes it while gpulet runs; gpulet reads it again every second.
struct MigLayout {
  bool enabled = false;                // the current mode
  bool pending_enabled = false;        // the mode after the next GPU reset
  std::vector<MigDeviceInfo> devices;  // by GPU instance id, then compute instance id

  bool operator==(const MigLayout&) const = default;
};

// Live values of one MIG device. Absent: NVML does not report it for MIG devices.
struct MigInstanceSample {
  unsigned gpu_instance_id = 0, compute_instance_id = 0;
  std::optional<uint64_t> fb_used_bytes, fb_free_bytes;
  std::optional<ProfilingSample> profiling;  // GPM of the GPU instance (Hopper and newer)
};

// Live values of one GPU at one moment. Absent means the GPU or driver does not provide it.
// Each scalar here is a row of the value table (gpu/sample_values.h), which says who reads it;
// a value nothing uses is not sampled.
struct DeviceSample {
  absl::Time taken = absl::InfinitePast();
  std::optional<unsigned> sm_clock_mhz, mem_clock_mhz;
  std::optional<unsigned> gpu_temp_c, mem_temp_c;
  std::optional<double> power_w, power_limit_w;
  std::optional<uint64_t> energy_mj;  // since the driver loaded
  std::optional<unsigned> pcie_replays;
  std::optional<unsigned> gpu_util, mem_util, enc_util, dec_util;  // percent
  std::optional<uint64_t> fb_used_bytes, fb_free_bytes, fb_reserved_bytes;
  std::optional<unsigned> remapped_correctable, remapped_uncorrectable;
  std::optional<bool> remap_failure;  // a pending remap is the liveness probe's (ProbeAnswer)
  // ECC errors since the driver loaded (volatile), corrected and uncorrected; absent on
  // boards without ECC or with it off.
  std::optional<uint64_t> ecc_sbe_volatile, ecc_dbe_volatile;
  std::optional<uint64_t> clocks_event_reasons;  // throttle reason bits
  std::optional<unsigned> fan_percent;
  std::optional<int> pstate;
  std::vector<GpuProcess> processes;  // compute and graphics, merged by pid
  // Absent on GPUs without GPM and on the first sample (GPM needs two).
  std::optional<ProfilingSample> profiling;
  // One entry per NVLink the GPU has (none on PCIe-only GPUs).
  std::vector<NvLinkSample> nvlinks;
  // NVLink data payload sent and received over all links, KiB since the driver loaded.
  std::optional<uint64_t> nvlink_data_tx_kib, nvlink_data_rx_kib;
  // One entry per MIG device, on GPUs with MIG enabled.
  std::vector<MigInstanceSample> mig;
};

// One NVML event (an XID, or an ECC error) on one GPU.
struct GpuEvent {
  unsigned index = 0;
  unsigned long long type = 0;  // nvmlEventType* bit
  unsigned long long data = 0;  // the XID for XidCriticalError
  // The MIG instance the event names; absent when it names none.
  std::optional<unsigned> gpu_instance_id, compute_instance_id;
};

// What a liveness probe learns: who answered, and the GPU's row-remapping state where the
// GPU has row remapping (HBM datacenter GPUs; absent elsewhere).
struct ProbeAnswer {
  std::string uuid;
  std::optional<bool> remap_pending;  // a remapped row waits for a GPU reset to take effect
  std::optional<bool> remap_failure;  // a row could not be remapped: the memory is failing
  // NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (nvml_api.h's NVML_GPU_RECOVERY_ACTION_*); absent on
  // drivers that do not report it.
  std::optional<unsigned> recovery_action;
};

class GpuLibrary {
 public:
  virtual ~GpuLibrary() = default;

  virtual absl::StatusOr<SystemInfo> GetSystemInfo() = 0;
  virtual absl::StatusOr<unsigned> GetDeviceCount() = 0;
  // Fails (with the NVML cause and fix, naming the index) when the GPU cannot be opened or
  // its UUID cannot be read; optional values that are unsupported are simply absent.
  virtual absl::StatusOr<DeviceIdentity> GetDeviceIdentity(unsigned index) = 0;

  // A cheap liveness check: opens the GPU's handle, reads its UUID, its row-remapping state
  // and the driver's recovery action within `timeout`. Unavailable (NVML GPU_IS_LOST /
  // RESET_REQUIRED) for a lost GPU, DeadlineExceeded for one that does not answer.
  virtual absl::StatusOr<ProbeAnswer> Probe(unsigned index, absl::Duration timeout) = 0;

  // Reads every live value within `timeout`. Fails like Probe for a lost or hung GPU.
  virtual absl::StatusOr<DeviceSample> Sample(unsigned index, absl::Duration timeout) = 0;

  // The GPU's MIG mode and devices within `timeout`. A GPU without MIG support answers a
  // disabled layout; fails like Probe for a lost or hung GPU.
  virtual absl::StatusOr<MigLayout> GetMigLayout(unsigned index, absl::Duration timeout) = 0;

  // Sets the driver's own VRAM limit of the processes of one cgroup on GPU `index` to
  // `hard_bytes` (nvmlDeviceSetMemoryLimits_v1, no soft limit: drivers from r615 with the
  // kernel's dmem cgroup controller). `cgroup` is the cgroup's directory under the cgroup2
  // mount as this process sees it. Unimplemented: the driver has no such call, or the GPU
  // cannot (a MIG-enabled GPU); NotFound: no such cgroup; other codes as NVML answers, and
  // as Probe's for a lost or hung GPU. The base class answers Unimplemented.
  virtual absl::Status SetMemoryLimit(unsigned index, const std::string& cgroup,
                                      uint64_t hard_bytes, absl::Duration timeout);

  // Registers for XID and ECC events on every GPU (only the types each GPU supports).
  // Returns the indexes that could not be registered, with why, for logging.
  virtual absl::Status RegisterEvents(unsigned count) = 0;
  // Waits up to `timeout` for the next event; nullopt on timeout. Blocks the calling thread
  // (the event thread owns this call). Unavailable when a registered GPU is lost.
  virtual absl::StatusOr<std::optional<GpuEvent>> WaitEvent(absl::Duration timeout) = 0;
};

}  // namespace gpulet::gpu

#endif  // GPULET_GPU_GPU_LIBRARY_H_
