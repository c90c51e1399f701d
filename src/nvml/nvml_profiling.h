// The NVML reads that take more than one call per value: GPU Performance Monitoring (a pair
// of samples per reading) and NVLink (one query per link and counter).
//
// GpmReader keeps one GPU's previous GPM sample, so each Read() returns the averages over the
// time since the previous Read() (the first returns nothing: GPM needs two samples). The
// NVML sample buffers are allocated on first use and freed by the destructor, unless the
// library was marked stuck (a thread may still be inside NVML with them).
//
// Thread-safety: a GpmReader is not thread-safe; NvmlGpuLibrary calls it only on its GPU's
// lane, which runs one job at a time. ReadNvLinks keeps no state.
#ifndef GPULET_NVML_NVML_PROFILING_H_
#define GPULET_NVML_NVML_PROFILING_H_

#include <memory>
#include <optional>

#include "gpu/gpu_library.h"
#include "nvml/nvml_library.h"

namespace gpulet::nvml {

class GpmReader {
 public:
  // `gpu_instance`: sample that MIG GPU instance of the device (nvmlGpmMigSampleGet) rather
  // than the whole GPU.
  explicit GpmReader(std::shared_ptr<NvmlLibrary> library,
                     std::optional<unsigned> gpu_instance = std::nullopt)
      : library_(std::move(library)), gpu_instance_(gpu_instance) {}
  ~GpmReader();
  GpmReader(const GpmReader&) = delete;
  GpmReader& operator=(const GpmReader&) = delete;

  // Takes a GPM sample of `device` and returns the metrics between it and the previous one.
  // nullopt when the GPU or driver has no GPM, on the first call, and after a failed sample
  // (the next call starts a new pair).
  std::optional<gpu::ProfilingSample> Read(nvmlDevice_t device);

 private:
  enum class Support { kUnknown, kYes, kNo };

  std::shared_ptr<NvmlLibrary> library_;
  std::optional<unsigned> gpu_instance_;
  Support support_ = Support::kUnknown;
  nvmlGpmSample_t previous_ = nullptr;  // holds the last good sample when have_previous_
  nvmlGpmSample_t current_ = nullptr;
  bool have_previous_ = false;
};

// Reads the GPU's NVLinks (state, remote end, error counters) and its total NVLink data
// counters into `sample`. Leaves them empty on GPUs without NVLink.
void ReadNvLinks(const NvmlFunctions& f, nvmlDevice_t device, gpu::DeviceSample* sample);

// Whether the GPU supports MIG; nullopt when this NVML has no nvmlDeviceGetMigMode.
std::optional<bool> ReadMigCapable(const NvmlFunctions& f, nvmlDevice_t device);

// Reads the GPU's MIG mode and MIG devices. Returns the NVML code of the first call that
// failed in a way that says the GPU is gone (GPU_IS_LOST, RESET_REQUIRED), else SUCCESS; a
// GPU without MIG gives a disabled layout.
nvmlReturn_t ReadMigLayout(const NvmlFunctions& f, nvmlDevice_t device, gpu::MigLayout* layout);

// Reads each MIG device's memory into `sample->mig` (GPM is read by the caller, which owns
// the per-instance GpmReaders).
void ReadMigMemory(const NvmlFunctions& f, nvmlDevice_t device, gpu::DeviceSample* sample);

}  // namespace gpulet::nvml

#endif  // GPULET_NVML_NVML_PROFILING_H_
