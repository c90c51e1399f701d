// NvmlGpuLibrary: GpuLibrary answered by a loaded NVML (real driver or simulator).
//
// Every NVML call runs on a TimedLane: one lane for system-wide calls and one per GPU
// index, so a GPU whose calls hang only stalls its own lane, and the caller gets
// DeadlineExceeded after `call_timeout` instead of freezing. When a call is stuck the
// library is marked so it is never unloaded under the stuck thread.
//
// Thread-safety: all methods may be called concurrently; lanes serialise calls per GPU.
#ifndef GPULET_NVML_NVML_GPU_LIBRARY_H_
#define GPULET_NVML_NVML_GPU_LIBRARY_H_

#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/timed_call.h"
#include "gpu/gpu_library.h"
#include "nvml/nvml_library.h"
#include "nvml/nvml_profiling.h"

namespace gpulet::nvml {

class NvmlGpuLibrary final : public gpu::GpuLibrary {
 public:
  struct Options {
    // Deadline for one batch of NVML calls about one GPU. Opening a GPU's handle the first
    // time can take seconds without persistence mode, hence the generous default.
    absl::Duration call_timeout = absl::Seconds(10);
  };

  NvmlGpuLibrary(std::shared_ptr<NvmlLibrary> library, Options options);
  ~NvmlGpuLibrary() override;

  absl::StatusOr<gpu::SystemInfo> GetSystemInfo() override;
  absl::StatusOr<unsigned> GetDeviceCount() override;
  absl::StatusOr<gpu::DeviceIdentity> GetDeviceIdentity(unsigned index) override;
  absl::StatusOr<gpu::ProbeAnswer> Probe(unsigned index, absl::Duration timeout) override;
  absl::StatusOr<gpu::DeviceSample> Sample(unsigned index, absl::Duration timeout) override;
  absl::StatusOr<gpu::MigLayout> GetMigLayout(unsigned index, absl::Duration timeout) override;
  absl::Status SetMemoryLimit(unsigned index, const std::string& cgroup, uint64_t hard_bytes,
                              absl::Duration timeout) override;
  absl::Status RegisterEvents(unsigned count) override;
  absl::StatusOr<std::optional<gpu::GpuEvent>> WaitEvent(absl::Duration timeout) override;

  const NvmlLibrary& library() const { return *library_; }

 private:
  // The lane for GPU `index`, or the system lane for index < 0.
  TimedLane& Lane(int index);
  // GPU `index`'s GPM sample pair, used only on that GPU's lane.
  std::shared_ptr<GpmReader> Gpm(unsigned index);
  // GPU `index`'s GPM readers of its MIG GPU instances, by instance id; used only on that
  // GPU's lane.
  using MigGpmReaders = std::map<unsigned, std::unique_ptr<GpmReader>>;
  std::shared_ptr<MigGpmReaders> MigGpm(unsigned index);
  // GPU `index`'s newest nvmlDeviceGetProcessUtilization sample time (microseconds; 0 before
  // any), the lastSeenTimeStamp of its next call; used only on that GPU's lane.
  std::shared_ptr<unsigned long long> ProcessUtilSeen(unsigned index);
  // Runs `work` on a lane; on a deadline overrun marks the library stuck.
  absl::Status RunOnLane(int index, std::function<void()> work, absl::string_view what,
                         absl::Duration timeout);

  std::shared_ptr<NvmlLibrary> library_;
  Options options_;
  absl::Mutex mu_;
  std::map<int, std::unique_ptr<TimedLane>> lanes_ ABSL_GUARDED_BY(mu_);
  std::map<unsigned, std::shared_ptr<GpmReader>> gpm_ ABSL_GUARDED_BY(mu_);
  std::map<unsigned, std::shared_ptr<MigGpmReaders>> mig_gpm_ ABSL_GUARDED_BY(mu_);
  std::map<unsigned, std::shared_ptr<unsigned long long>> process_util_seen_ ABSL_GUARDED_BY(mu_);
  // Event set and the handle → index map; used by the event thread only.
  nvmlEventSet_t event_set_ = nullptr;
  std::map<nvmlDevice_t, unsigned> event_devices_;
};

}  // namespace gpulet::nvml

#endif  // GPULET_NVML_NVML_GPU_LIBRARY_H_
