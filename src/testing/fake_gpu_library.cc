#include "testing/fake_gpu_library.h"

#include <type_traits>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "gpu/nvml_api.h"
#include "gpu/nvml_errors.h"
#include "gpu/sample_values.h"

namespace gpulet::testing {

FakeGpuLibrary::FakeGpuLibrary(const Clock* clock) : clock_(clock) {
  absl::MutexLock lock(&mu_);
  system_.driver_version = "570.133.20";
  system_.nvml_version = "12.570.133.20";
  system_.cuda_driver_version = 12080;
  system_.library_path = "fake libnvidia-ml";
}

FakeGpuLibrary::~FakeGpuLibrary() {
  absl::MutexLock lock(&mu_);
  destroying_ = true;
  // Blocked calls see destroying_ when mu_ is released here and leave.
  mu_.Await(absl::Condition(
      +[](FakeGpuLibrary* f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(f->mu_) { return f->blocked_ == 0; },
      this));
}

void FakeGpuLibrary::SetSystemInfo(gpu::SystemInfo info) {
  absl::MutexLock lock(&mu_);
  system_ = std::move(info);
}

void FakeGpuLibrary::AddDevice(gpu::DeviceIdentity identity, gpu::DeviceSample sample) {
  absl::MutexLock lock(&mu_);
  Device& d = devices_[identity.index];
  d = Device{};
  d.identity = std::move(identity);
  d.sample = std::move(sample);
}

void FakeGpuLibrary::SetSample(unsigned index, gpu::DeviceSample sample) {
  absl::MutexLock lock(&mu_);
  devices_[index].sample = std::move(sample);
}

void FakeGpuLibrary::SetRowRemap(unsigned index, std::optional<bool> pending,
                                 std::optional<bool> failure) {
  absl::MutexLock lock(&mu_);
  devices_[index].probe.remap_pending = pending;
  devices_[index].probe.remap_failure = failure;
}

void FakeGpuLibrary::SetRecoveryAction(unsigned index, std::optional<unsigned> action) {
  absl::MutexLock lock(&mu_);
  devices_[index].probe.recovery_action = action;
}

void FakeGpuLibrary::Fail(unsigned index, absl::Status status) {
  absl::MutexLock lock(&mu_);
  devices_[index].failure = std::move(status);
}

void FakeGpuLibrary::FailNvml(unsigned index, int nvml_code) {
  Fail(index,
       gpu::NvmlError(nvml_code, "nvmlDeviceGetHandleByIndex_v2", absl::StrCat("GPU ", index)));
}

void FakeGpuLibrary::AnswerWithUuid(unsigned index, std::string uuid) {
  absl::MutexLock lock(&mu_);
  devices_[index].uuid_override = std::move(uuid);
}

void FakeGpuLibrary::Heal(unsigned index) {
  absl::MutexLock lock(&mu_);
  Device& d = devices_[index];
  d.failure = absl::OkStatus();
  d.uuid_override.reset();
}

void FakeGpuLibrary::Hang(unsigned index, bool honor_timeout) {
  absl::MutexLock lock(&mu_);
  devices_[index].hung = true;
  devices_[index].honor_timeout = honor_timeout;
}

void FakeGpuLibrary::Release(unsigned index) {
  absl::MutexLock lock(&mu_);
  devices_[index].hung = false;
}

bool FakeGpuLibrary::AwaitBlockedCalls(int n, absl::Duration limit) const {
  absl::MutexLock lock(&mu_);
  struct Ctx {
    const FakeGpuLibrary* f;
    int n;
  } ctx{this, n};
  return mu_.AwaitWithTimeout(
      absl::Condition(
          +[](Ctx* c) ABSL_NO_THREAD_SAFETY_ANALYSIS { return c->f->blocked_on_hang_ >= c->n; },
          &ctx),
      limit);
}

void FakeGpuLibrary::InjectXid(unsigned index, unsigned long long xid) {
  InjectEvent({index, nvmlEventTypeXidCriticalError, xid, std::nullopt, std::nullopt});
}

void FakeGpuLibrary::InjectDoubleBitEcc(unsigned index) {
  InjectEvent({index, nvmlEventTypeDoubleBitEccError, 0, std::nullopt, std::nullopt});
}

void FakeGpuLibrary::InjectEvent(gpu::GpuEvent event) {
  absl::MutexLock lock(&mu_);
  events_.push_back(event);
}

void FakeGpuLibrary::FailNextEventWait(absl::Status status) {
  absl::MutexLock lock(&mu_);
  next_wait_error_ = std::move(status);
}

bool FakeGpuLibrary::AwaitEventsDelivered(absl::Duration limit) const {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(
                                  +[](const FakeGpuLibrary* f) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                                    return f->events_.empty();
                                  },
                                  this),
                              limit);
}

int FakeGpuLibrary::probe_calls(unsigned index) const {
  absl::MutexLock lock(&mu_);
  auto it = devices_.find(index);
  return it == devices_.end() ? 0 : it->second.probe_calls;
}

int FakeGpuLibrary::sample_calls(unsigned index) const {
  absl::MutexLock lock(&mu_);
  auto it = devices_.find(index);
  return it == devices_.end() ? 0 : it->second.sample_calls;
}

std::optional<unsigned> FakeGpuLibrary::registered_count() const {
  absl::MutexLock lock(&mu_);
  return registered_;
}

absl::StatusOr<FakeGpuLibrary::Device*> FakeGpuLibrary::FindLocked(unsigned index) {
  auto it = devices_.find(index);
  if (it == devices_.end()) {
    return gpu::NvmlError(NVML_ERROR_INVALID_ARGUMENT, "nvmlDeviceGetHandleByIndex_v2",
                          absl::StrCat("index ", index));
  }
  return &it->second;
}

absl::Status FakeGpuLibrary::WaitWhileHungLocked(unsigned index, absl::Duration timeout,
                                                 const char* call) {
  Device& d = devices_[index];
  if (!d.hung) return absl::OkStatus();
  struct Ctx {
    FakeGpuLibrary* f;
    Device* d;
  } ctx{this, &d};
  absl::Condition released(
      +[](Ctx* c) ABSL_NO_THREAD_SAFETY_ANALYSIS { return c->f->destroying_ || !c->d->hung; },
      &ctx);
  const MonoTime deadline = d.honor_timeout ? clock_->DeadlineIn(timeout) : MonoTime::Infinite();
  ++blocked_;
  ++blocked_on_hang_;
  bool done = clock_->AwaitWithDeadline(&mu_, released, deadline);
  --blocked_on_hang_;
  --blocked_;
  if (destroying_) return absl::CancelledError("fake GPU library destroyed during a hung call");
  if (!done) {
    return absl::DeadlineExceededError(absl::StrCat(
        call, " on GPU ", index, " did not return within ", absl::FormatDuration(timeout)));
  }
  return absl::OkStatus();
}

absl::StatusOr<gpu::SystemInfo> FakeGpuLibrary::GetSystemInfo() {
  absl::MutexLock lock(&mu_);
  return system_;
}

absl::StatusOr<unsigned> FakeGpuLibrary::GetDeviceCount() {
  absl::MutexLock lock(&mu_);
  return static_cast<unsigned>(devices_.size());
}

absl::StatusOr<gpu::DeviceIdentity> FakeGpuLibrary::GetDeviceIdentity(unsigned index) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Device*> d = FindLocked(index);
  if (!d.ok()) return d.status();
  if (!(*d)->failure.ok()) return (*d)->failure;
  gpu::DeviceIdentity id = (*d)->identity;
  if ((*d)->uuid_override) id.uuid = *(*d)->uuid_override;
  return id;
}

absl::StatusOr<gpu::ProbeAnswer> FakeGpuLibrary::Probe(unsigned index, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Device*> d = FindLocked(index);
  if (!d.ok()) return d.status();
  ++(*d)->probe_calls;
  absl::Status hang = WaitWhileHungLocked(index, timeout, "nvmlDeviceGetUUID");
  if (!hang.ok()) return hang;
  // Re-read after the wait: the test may have changed the script meanwhile.
  Device& dev = devices_[index];
  if (!dev.failure.ok()) return dev.failure;
  gpu::ProbeAnswer answer = dev.probe;
  answer.uuid = dev.uuid_override.value_or(dev.identity.uuid);
  return answer;
}

absl::StatusOr<gpu::DeviceSample> FakeGpuLibrary::Sample(unsigned index, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Device*> d = FindLocked(index);
  if (!d.ok()) return d.status();
  ++(*d)->sample_calls;
  absl::Status hang = WaitWhileHungLocked(index, timeout, "sample");
  if (!hang.ok()) return hang;
  Device& dev = devices_[index];
  if (!dev.failure.ok()) return dev.failure;
  gpu::DeviceSample s = dev.sample;
  s.taken = clock_->Now();
  return s;
}

void FakeGpuLibrary::SetMigLayout(unsigned index, gpu::MigLayout layout) {
  absl::MutexLock lock(&mu_);
  devices_[index].mig = std::move(layout);
}

absl::StatusOr<gpu::MigLayout> FakeGpuLibrary::GetMigLayout(unsigned index,
                                                            absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Device*> d = FindLocked(index);
  if (!d.ok()) return d.status();
  absl::Status hang = WaitWhileHungLocked(index, timeout, "nvmlDeviceGetMigMode");
  if (!hang.ok()) return hang;
  Device& dev = devices_[index];
  if (!dev.failure.ok()) return dev.failure;
  return dev.mig;
}

void FakeGpuLibrary::SetMemoryLimitAnswer(unsigned index, absl::Status answer) {
  absl::MutexLock lock(&mu_);
  devices_[index].memory_limit_answer = std::move(answer);
}

std::vector<FakeGpuLibrary::MemoryLimitCall> FakeGpuLibrary::memory_limit_calls() const {
  absl::MutexLock lock(&mu_);
  return memory_limit_calls_;
}

absl::Status FakeGpuLibrary::SetMemoryLimit(unsigned index, const std::string& cgroup,
                                            uint64_t hard_bytes, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  memory_limit_calls_.push_back({index, cgroup, hard_bytes});
  absl::StatusOr<Device*> d = FindLocked(index);
  if (!d.ok()) return d.status();
  absl::Status hang = WaitWhileHungLocked(index, timeout, "nvmlDeviceSetMemoryLimits_v1");
  if (!hang.ok()) return hang;
  Device& dev = devices_[index];
  if (!dev.failure.ok()) return dev.failure;
  return dev.memory_limit_answer;
}

absl::Status FakeGpuLibrary::RegisterEvents(unsigned count) {
  absl::MutexLock lock(&mu_);
  registered_ = count;
  return absl::OkStatus();
}

absl::StatusOr<std::optional<gpu::GpuEvent>> FakeGpuLibrary::WaitEvent(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  if (!next_wait_error_.ok()) return std::exchange(next_wait_error_, absl::OkStatus());
  auto ready = [this]()
                   ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return destroying_ || !events_.empty(); };
  ++blocked_;
  clock_->AwaitWithTimeout(&mu_, absl::Condition(&ready), timeout);
  --blocked_;
  if (destroying_ || events_.empty()) return std::optional<gpu::GpuEvent>();
  gpu::GpuEvent e = events_.front();
  events_.pop_front();
  return std::optional<gpu::GpuEvent>(e);
}

gpu::DeviceSample SampleWithEveryValue() {
  gpu::DeviceSample s;
  s.taken = absl::FromUnixSeconds(1'800'000'000);
  int n = 0;
  for (const gpu::SampleValue& row : gpu::SampleValues()) {
    ++n;
    std::visit(
        [&](auto m) {
          using T = decltype(m);
          if constexpr (gpu::StoredMember<T>) {
            using X = typename gpu::MemberValue<T>::type;
            X v{};
            if constexpr (std::is_same_v<X, bool>) {
              v = true;
            } else if constexpr (std::is_same_v<X, double>) {
              v = n / 100.0;
            } else if constexpr (std::is_same_v<X, uint64_t>) {
              v = static_cast<uint64_t>(n) << 20;
            } else {
              v = static_cast<X>(n);
            }
            if constexpr (std::is_same_v<typename gpu::MemberValue<T>::owner,
                                         gpu::ProfilingSample>) {
              if (!s.profiling) s.profiling.emplace();
              (*s.profiling).*m = v;
            } else {
              s.*m = v;
            }
          }
        },
        row.member);
  }
  return s;
}

}  // namespace gpulet::testing
