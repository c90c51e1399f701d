#include "common/timed_call.h"

#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/periodic_worker.h"

namespace gpulet {

// Shared by the lane object and its worker thread, so that a worker stuck in a call can
// outlive the lane.
struct TimedLane::State {
  absl::Mutex mu;
  std::function<void()> pending ABSL_GUARDED_BY(mu);  // work handed to the worker
  uint64_t submitted ABSL_GUARDED_BY(mu) = 0;         // sequence of the last submitted work
  uint64_t finished ABSL_GUARDED_BY(mu) = 0;          // sequence of the last finished work
  bool running ABSL_GUARDED_BY(mu) = false;           // worker is inside a call
  bool wedged ABSL_GUARDED_BY(mu) = false;            // a call overran and has not returned
  bool stop ABSL_GUARDED_BY(mu) = false;
  std::string current_what ABSL_GUARDED_BY(mu);
  MonoTime current_start ABSL_GUARDED_BY(mu);
  absl::Mutex run_mu;  // serialises callers of Run()

  void WorkerLoop() {
    absl::MutexLock lock(&mu);
    while (true) {
      mu.Await(absl::Condition(
          +[](State* s)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) { return s->stop || s->pending != nullptr; },
          this));
      if (pending == nullptr) return;  // stop requested and nothing left to do
      std::function<void()> work = std::move(pending);
      pending = nullptr;
      running = true;
      mu.Unlock();
      work();
      mu.Lock();
      running = false;
      wedged = false;
      finished = submitted;
      if (stop) return;
    }
  }
};

TimedLane::TimedLane(std::string name, const Clock* clock)
    : name_(std::move(name)), clock_(clock), state_(std::make_shared<State>()) {
  std::shared_ptr<State> state = state_;
  // "lane " and the end of the name, which is where a bus id sits ("GPU 0000:01:00.0").
  std::string thread_name =
      absl::StrCat("lane ", name_.size() > 10 ? name_.substr(name_.size() - 10) : name_);
  StartNamedThread(std::move(thread_name), [state] { state->WorkerLoop(); }).detach();
}

TimedLane::~TimedLane() {
  // The worker holds its own reference to the state; it exits after its current call (if
  // any) returns. Detached rather than joined: joining a wedged worker would hang shutdown.
  absl::MutexLock lock(&state_->mu);
  state_->stop = true;
}

absl::Status TimedLane::Run(std::function<void()> work, absl::Duration timeout,
                            absl::string_view what) {
  State& s = *state_;
  absl::MutexLock serial(&s.run_mu);
  absl::MutexLock lock(&s.mu);
  if (s.wedged) {
    return absl::DeadlineExceededError(absl::StrCat(
        what, " on ", name_, " not attempted: an earlier call (", s.current_what,
        ") has been stuck for ", absl::FormatDuration(clock_->Monotonic() - s.current_start),
        "; the driver is not answering for this GPU"));
  }
  s.pending = std::move(work);
  s.current_what = std::string(what);
  s.current_start = clock_->Monotonic();
  uint64_t seq = ++s.submitted;
  auto done = [&s, seq]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) { return s.finished >= seq; };
  if (clock_->AwaitWithTimeout(&s.mu, absl::Condition(&done), timeout)) return absl::OkStatus();
  s.wedged = true;
  return absl::DeadlineExceededError(absl::StrCat(what, " on ", name_, " did not return within ",
                                                  absl::FormatDuration(timeout),
                                                  "; the GPU or its driver is hung"));
}

bool TimedLane::wedged() const {
  absl::MutexLock lock(&state_->mu);
  return state_->wedged;
}

std::string TimedLane::WedgedDescription() const {
  absl::MutexLock lock(&state_->mu);
  if (!state_->wedged) return "";
  return absl::StrCat(state_->current_what, " stuck for ",
                      absl::FormatDuration(clock_->Monotonic() - state_->current_start));
}

}  // namespace gpulet
