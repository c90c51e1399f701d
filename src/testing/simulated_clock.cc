#include "testing/simulated_clock.h"

#include <vector>

namespace gpulet::testing {

SimulatedClock::SimulatedClock(absl::Time start)
    : wall_(start), mono_(MonoTime::FromOrigin(absl::Hours(1))) {
  mono_ns_.store(absl::ToInt64Nanoseconds(absl::Hours(1)));
}

SimulatedClock::~SimulatedClock() = default;

absl::Time SimulatedClock::Now() const {
  absl::MutexLock lock(&mu_);
  return wall_;
}

MonoTime SimulatedClock::Monotonic() const {
  return MonoTime::FromOrigin(absl::Nanoseconds(mono_ns_.load()));
}

bool SimulatedClock::AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                                       MonoTime deadline) const {
  if (cond.Eval()) return true;
  if (!deadline.IsInfinite() && Monotonic() >= deadline) return false;
  Waiter w{mu, deadline};
  {
    absl::MutexLock lock(&mu_);
    waiters_.push_back(&w);
  }
  struct Ctx {
    const absl::Condition* cond;
    const SimulatedClock* clock;
    MonoTime deadline;
  } ctx{&cond, this, deadline};
  // Evaluated by `mu` whenever it is released: by whoever changes the caller's state, or by
  // Advance poking it after moving the time.
  mu->Await(absl::Condition(
      +[](Ctx* c) {
        return c->cond->Eval() ||
               (!c->deadline.IsInfinite() && c->clock->Monotonic() >= c->deadline);
      },
      &ctx));
  // Leave the list once Advance no longer pokes our mutex; it needs `mu` to finish a poke,
  // so wait for that with `mu` released.
  mu->Unlock();
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](Waiter* x) { return x->pins == 0; }, &w));
    waiters_.remove(&w);
  }
  mu->Lock();
  return cond.Eval();
}

void SimulatedClock::Advance(absl::Duration d) {
  std::vector<Waiter*> due;
  {
    absl::MutexLock lock(&mu_);
    if (d > absl::ZeroDuration()) {
      wall_ += d;
      mono_ += d;
      mono_ns_.store(absl::ToInt64Nanoseconds(mono_.SinceOrigin()));
    }
    for (Waiter* w : waiters_) {
      if (DueLocked(*w)) {
        ++w->pins;
        due.push_back(w);
      }
    }
  }
  // Releasing a waiter's mutex makes absl re-evaluate its condition, which now sees the
  // new time. The pin keeps the waiter (and so its mutex) in place meanwhile.
  for (Waiter* w : due) {
    w->mu->Lock();
    w->mu->Unlock();
  }
  absl::MutexLock lock(&mu_);
  for (Waiter* w : due) --w->pins;
}

void SimulatedClock::SetTime(absl::Time t) {
  absl::MutexLock lock(&mu_);
  wall_ = t;
}

int SimulatedClock::SleepersLocked() const {
  int n = 0;
  for (const Waiter* w : waiters_) {
    if (!DueLocked(*w)) ++n;
  }
  return n;
}

int SimulatedClock::sleepers() const {
  absl::MutexLock lock(&mu_);
  return SleepersLocked();
}

bool SimulatedClock::AwaitSleepers(int n, absl::Duration limit) const {
  absl::MutexLock lock(&mu_);
  struct Ctx {
    const SimulatedClock* clock;
    int n;
  } ctx{this, n};
  return mu_.AwaitWithTimeout(
      absl::Condition(
          +[](Ctx* c) ABSL_NO_THREAD_SAFETY_ANALYSIS { return c->clock->SleepersLocked() >= c->n; },
          &ctx),
      limit);
}

}  // namespace gpulet::testing
