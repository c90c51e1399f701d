// FakeGpuLibrary: an in-memory GpuLibrary for unit tests of liveness, events and metrics.
//
// A test adds GPUs (identity and the sample they report), then scripts how each one
// answers: normally, failing with a status or an NVML return code (GPU_IS_LOST,
// RESET_REQUIRED ... carried as NvmlError does, so NvmlCodeOf finds it), answering at its
// index with another GPU's UUID (renumbering), reporting row remapping, or hanging. It
// also queues XID and ECC events for WaitEvent.
//
// A hung GPU's Probe/Sample calls block. By default they give up when their `timeout`
// passes on the fake's clock and return DeadlineExceeded, as NvmlGpuLibrary's per-GPU
// lanes do; with Hang(index, /*honor_timeout=*/false) they block until Release(index) or
// the fake's destruction, for callers that enforce their own deadline. AwaitBlockedCalls
// lets a test wait until a call is really stuck before it advances the clock.
// WaitEvent waits for an injected event until its timeout passes on the fake's clock.
//
// Thread-safety: every method is thread-safe; calls for different GPUs (and for the same
// one) may run concurrently. The destructor releases every blocked call and waits for it
// to leave.
#ifndef GPULET_TESTING_FAKE_GPU_LIBRARY_H_
#define GPULET_TESTING_FAKE_GPU_LIBRARY_H_

#include <deque>
#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "gpu/gpu_library.h"
#include "gpu/gpu_model.h"

namespace gpulet::testing {

class FakeGpuLibrary final : public gpu::GpuLibrary {
 public:
  // `clock` measures the timeouts of hung calls and of WaitEvent.
  explicit FakeGpuLibrary(const Clock* clock = RealClock());
  ~FakeGpuLibrary() override;
  FakeGpuLibrary(const FakeGpuLibrary&) = delete;
  FakeGpuLibrary& operator=(const FakeGpuLibrary&) = delete;

  // --- what the GPUs are -------------------------------------------------------------
  void SetSystemInfo(gpu::SystemInfo info);
  // Adds (or replaces) the GPU at identity.index; it answers normally.
  void AddDevice(gpu::DeviceIdentity identity, gpu::DeviceSample sample = {});
  // What Sample returns for the GPU from now on (`taken` is set from the clock).
  void SetSample(unsigned index, gpu::DeviceSample sample);
  // The row-remapping state Probe reports (absent: the GPU has no row remapping).
  void SetRowRemap(unsigned index, std::optional<bool> pending, std::optional<bool> failure);
  // The driver's recovery action Probe reports (absent: a driver that does not report it).
  void SetRecoveryAction(unsigned index, std::optional<unsigned> action);
  // The MIG layout GetMigLayout reports (default: MIG disabled, no devices).
  void SetMigLayout(unsigned index, gpu::MigLayout layout);

  // What SetMemoryLimit answers for the GPU (default: Unimplemented, a driver without the
  // call); OK makes it record each limit, which memory_limits() lists.
  void SetMemoryLimitAnswer(unsigned index, absl::Status answer);

  // --- how they answer ---------------------------------------------------------------
  // Every call about the GPU (identity, probe, sample) fails with `status`.
  void Fail(unsigned index, absl::Status status);
  // Fails like NVML returning `nvml_code` (NVML_ERROR_GPU_IS_LOST, ..._RESET_REQUIRED).
  void FailNvml(unsigned index, int nvml_code);
  // The GPU at `index` now answers with `uuid` (the driver renumbered the GPUs).
  void AnswerWithUuid(unsigned index, std::string uuid);
  // Back to answering normally with its own UUID (ends Fail, FailNvml, AnswerWithUuid).
  void Heal(unsigned index);
  // Probe and Sample block (see the header comment); Release ends it and lets blocked calls
  // return their normal answer.
  void Hang(unsigned index, bool honor_timeout = true);
  void Release(unsigned index);
  // Waits (real time, at most `limit`) until `n` calls are blocked on hung GPUs.
  bool AwaitBlockedCalls(int n, absl::Duration limit = absl::Seconds(10)) const;

  // --- events --------------------------------------------------------------------------
  void InjectXid(unsigned index, unsigned long long xid);
  void InjectDoubleBitEcc(unsigned index);
  void InjectEvent(gpu::GpuEvent event);
  // The next WaitEvent fails with `status` (then waits go on normally).
  void FailNextEventWait(absl::Status status);
  // Waits (real time, at most `limit`) until no injected event is left undelivered.
  bool AwaitEventsDelivered(absl::Duration limit = absl::Seconds(10)) const;

  // --- what was asked ------------------------------------------------------------------
  int probe_calls(unsigned index) const;
  int sample_calls(unsigned index) const;
  std::optional<unsigned> registered_count() const;
  struct MemoryLimitCall {
    unsigned index = 0;
    std::string cgroup;
    uint64_t bytes = 0;
    bool operator==(const MemoryLimitCall&) const = default;
  };
  // Every SetMemoryLimit call, answered or not, in order.
  std::vector<MemoryLimitCall> memory_limit_calls() const;

  // GpuLibrary
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

 private:
  struct Device {
    gpu::DeviceIdentity identity;
    gpu::DeviceSample sample;
    gpu::ProbeAnswer probe;  // remap fields only; the UUID comes from identity/uuid_override
    gpu::MigLayout mig;
    absl::Status memory_limit_answer = absl::UnimplementedError("no nvmlDeviceSetMemoryLimits_v1");
    absl::Status failure;
    std::optional<std::string> uuid_override;
    bool hung = false;
    bool honor_timeout = true;
    int probe_calls = 0, sample_calls = 0;
  };

  // Finds the GPU, or NotFound the way NVML reports an invalid index.
  absl::StatusOr<Device*> FindLocked(unsigned index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Blocks while the GPU hangs; DeadlineExceeded when the timeout passes first, Cancelled
  // when the fake is being destroyed.
  absl::Status WaitWhileHungLocked(unsigned index, absl::Duration timeout, const char* call)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock* const clock_;
  mutable absl::Mutex mu_;
  gpu::SystemInfo system_ ABSL_GUARDED_BY(mu_);
  std::map<unsigned, Device> devices_ ABSL_GUARDED_BY(mu_);
  std::deque<gpu::GpuEvent> events_ ABSL_GUARDED_BY(mu_);
  absl::Status next_wait_error_ ABSL_GUARDED_BY(mu_);
  std::optional<unsigned> registered_ ABSL_GUARDED_BY(mu_);
  std::vector<MemoryLimitCall> memory_limit_calls_ ABSL_GUARDED_BY(mu_);
  int blocked_ ABSL_GUARDED_BY(mu_) = 0;  // calls inside WaitWhileHungLocked or WaitEvent
  int blocked_on_hang_ ABSL_GUARDED_BY(mu_) = 0;
  bool destroying_ ABSL_GUARDED_BY(mu_) = false;
};

// UUIDs for the GPUs a test adds.
inline constexpr char kGpu0[] = "GPU-00000000-0000-0000-0000-000000000000";
inline constexpr char kGpu1[] = "GPU-11111111-1111-1111-1111-111111111111";

// The inventory entry for a GPU the fake answers for: seen by NVML and on the PCI bus,
// bound to the nvidia driver, named "NVIDIA H200".
inline gpu::Gpu NvmlGpu(unsigned index, const std::string& uuid, const std::string& bus) {
  gpu::Gpu g;
  g.index = index;
  g.uuid = uuid;
  g.bus_id = bus;
  g.name = "NVIDIA H200";
  g.in_nvml = true;
  g.on_pci = true;
  g.kernel_driver = "nvidia";
  return g;
}

// A sample in which every row of the value table (gpu/sample_values.h) that the sample stores
// has a value of its own: the n-th row (from 1) holds n (n MiB for byte counts, n/100 for
// the GPM ratios, true for flags), so a test can tell the rows apart wherever they end up.
gpu::DeviceSample SampleWithEveryValue();

}  // namespace gpulet::testing

#endif  // GPULET_TESTING_FAKE_GPU_LIBRARY_H_
