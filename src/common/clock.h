// Clock: where gpulet reads the time and waits for it, so that tests can drive time.
//
// Two readings, for two purposes:
//   - Now(): wall time (absl::Time), for timestamps users and metrics see ("since", "taken").
//     It may jump (NTP, an operator setting the date), so it never measures intervals.
//   - Monotonic(): a MonoTime that only moves forward, for intervals, timeouts, deadlines,
//     rate limits and flap windows.
// AwaitWithDeadline waits on the caller's own absl::Mutex and Condition until the condition
// holds or a monotonic deadline passes, so a periodic worker sleeps until its next tick and
// still wakes at once when told to stop. RealClock() is the process's clock; tests use
// SimulatedClock (testing/simulated_clock.h), whose time moves only when the test says.
//
// Header-only on purpose: gpulet-nvml-worker is linked from an explicit list of sources
// (CMakeLists.txt) and its timed lanes and NVML library read this clock too.
//
// Thread-safety: every method of every Clock is thread-safe; RealClock() lives forever.
#ifndef GPULET_COMMON_CLOCK_H_
#define GPULET_COMMON_CLOCK_H_

#include <time.h>

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace gpulet {

// A reading of a monotonic clock. Only differences between readings of the same clock mean
// anything; a distinct type so that it cannot be mixed up with wall time.
class MonoTime {
 public:
  constexpr MonoTime() = default;
  // The reading `since_origin` after the clock's (arbitrary) origin.
  static constexpr MonoTime FromOrigin(absl::Duration since_origin) {
    return MonoTime(since_origin);
  }
  // Later than every reading: a deadline that never passes.
  static constexpr MonoTime Infinite() { return MonoTime(absl::InfiniteDuration()); }

  constexpr absl::Duration SinceOrigin() const { return d_; }
  constexpr bool IsInfinite() const { return d_ == absl::InfiniteDuration(); }

  friend MonoTime operator+(MonoTime t, absl::Duration d) { return MonoTime(t.d_ + d); }
  friend MonoTime operator-(MonoTime t, absl::Duration d) { return MonoTime(t.d_ - d); }
  friend absl::Duration operator-(MonoTime a, MonoTime b) { return a.d_ - b.d_; }
  MonoTime& operator+=(absl::Duration d) {
    d_ += d;
    return *this;
  }
  friend bool operator==(MonoTime a, MonoTime b) { return a.d_ == b.d_; }
  friend bool operator!=(MonoTime a, MonoTime b) { return a.d_ != b.d_; }
  friend bool operator<(MonoTime a, MonoTime b) { return a.d_ < b.d_; }
  friend bool operator<=(MonoTime a, MonoTime b) { return a.d_ <= b.d_; }
  friend bool operator>(MonoTime a, MonoTime b) { return a.d_ > b.d_; }
  friend bool operator>=(MonoTime a, MonoTime b) { return a.d_ >= b.d_; }

 private:
  explicit constexpr MonoTime(absl::Duration d) : d_(d) {}
  absl::Duration d_;
};

class Clock {
 public:
  virtual ~Clock() = default;

  // Wall time, for timestamps.
  virtual absl::Time Now() const = 0;
  // Monotonic time, for intervals and deadlines.
  virtual MonoTime Monotonic() const = 0;

  // Waits until `cond` holds or Monotonic() reaches `deadline` (MonoTime::Infinite(): no
  // deadline). `mu` must be held; it is released while waiting and held again on return.
  // Returns whether `cond` holds on return. Whoever makes `cond` true must do so under `mu`
  // (as with absl::Mutex::Await), which is what wakes the waiter.
  virtual bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                                 MonoTime deadline) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;

  // AwaitWithDeadline with a deadline `timeout` from now.
  bool AwaitWithTimeout(absl::Mutex* mu, const absl::Condition& cond, absl::Duration timeout) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // A deadline `timeout` from now; an infinite timeout gives MonoTime::Infinite().
  MonoTime DeadlineIn(absl::Duration timeout) const;
};

inline bool Clock::AwaitWithTimeout(absl::Mutex* mu, const absl::Condition& cond,
                                    absl::Duration timeout) const {
  return AwaitWithDeadline(mu, cond, DeadlineIn(timeout));
}

inline MonoTime Clock::DeadlineIn(absl::Duration timeout) const {
  if (timeout == absl::InfiniteDuration()) return MonoTime::Infinite();
  return Monotonic() + timeout;
}

namespace clock_internal {

class RealClockImpl final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }

  MonoTime Monotonic() const override {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return MonoTime::FromOrigin(absl::DurationFromTimespec(ts));
  }

  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                         MonoTime deadline) const override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (deadline.IsInfinite()) {
      mu->Await(cond);
      return true;
    }
    // The deadline is re-checked on the monotonic clock after every wake-up, so an early
    // return (a timeout rounded down, or a wall-clock jump forwards: Abseil 20220623 turns
    // the timeout into a wall-clock deadline) becomes another wait, never an early expiry.
    for (;;) {
      absl::Duration left = deadline - Monotonic();
      if (left <= absl::ZeroDuration()) return cond.Eval();
      if (mu->AwaitWithTimeout(cond, left)) return true;
    }
  }
};

}  // namespace clock_internal

// The process's real clock: absl::Now() and CLOCK_MONOTONIC.
inline const Clock* RealClock() {
  static const clock_internal::RealClockImpl* const clock = new clock_internal::RealClockImpl();
  return clock;
}

}  // namespace gpulet

#endif  // GPULET_COMMON_CLOCK_H_
