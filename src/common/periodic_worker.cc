#include "common/periodic_worker.h"

#include <algorithm>

namespace gpulet {

PeriodicWorker::PeriodicWorker(Options options, std::function<void()> tick)
    : options_(std::move(options)), tick_(std::move(tick)) {}

PeriodicWorker::~PeriodicWorker() { Stop(); }

void PeriodicWorker::Start() {
  if (thread_.joinable()) return;
  thread_ = StartNamedThread(options_.name, [this] { Run(); });
}

void PeriodicWorker::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void PeriodicWorker::Wake() {
  absl::MutexLock lock(&mu_);
  woken_ = true;
}

uint64_t PeriodicWorker::ticks() const {
  absl::MutexLock lock(&mu_);
  return ticks_;
}

void PeriodicWorker::Run() {
  const Clock* clock = options_.clock;
  MonoTime next =
      options_.tick_at_start ? clock->Monotonic() : clock->Monotonic() + options_.interval;
  mu_.Lock();
  auto interrupted = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || woken_; };
  for (;;) {
    clock->AwaitWithDeadline(&mu_, absl::Condition(&interrupted), next);
    if (stop_) break;
    woken_ = false;
    MonoTime start = clock->Monotonic();
    mu_.Unlock();
    tick_();
    mu_.Lock();
    ++ticks_;
    // From the start of this tick; an overrun starts the next one now, without catching up.
    next = std::max(start + options_.interval, clock->Monotonic());
  }
  mu_.Unlock();
}

}  // namespace gpulet
