// SimulatedClock: a Clock whose time moves only when the test says (Advance, SetTime), so
// periodic workers, timeouts, quiet periods and flap windows run deterministically and in
// microseconds.
//
// Advance(d) moves wall and monotonic time together and wakes every thread waiting in
// AwaitWithDeadline whose deadline has now passed; SetTime(t) moves only wall time (like an
// NTP step), which no deadline notices. A test drives a worker like this:
//
//   clock.Advance(interval);          // the worker's deadline passes: it wakes and ticks
//   ASSERT_TRUE(clock.AwaitSleepers(1));  // it has finished the tick and sleeps again
//   EXPECT_EQ(ticks, 2);
//
// AwaitSleepers counts threads waiting for a deadline that has not passed yet, so it returns
// only once the woken worker has gone back to sleep. Its limit is real time, a guard
// against a broken test hanging forever, never a wait a passing test relies on.
//
// Thread-safety: all methods are thread-safe. A waiter's mutex must stay alive while it
// waits (it does: the waiter holds it). Advance takes each due waiter's mutex briefly, so it
// must not be called with such a mutex held.
#ifndef GPULET_TESTING_SIMULATED_CLOCK_H_
#define GPULET_TESTING_SIMULATED_CLOCK_H_

#include <atomic>
#include <list>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace gpulet::testing {

class SimulatedClock final : public Clock {
 public:
  // Starts at wall time `start` and monotonic time one hour past the origin (so that
  // "an hour ago" is a valid reading).
  explicit SimulatedClock(absl::Time start = absl::FromUnixSeconds(1'780'000'000));
  ~SimulatedClock() override;
  SimulatedClock(const SimulatedClock&) = delete;
  SimulatedClock& operator=(const SimulatedClock&) = delete;

  absl::Time Now() const override;
  MonoTime Monotonic() const override;
  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                         MonoTime deadline) const override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // Moves both clocks forward by `d` (>= 0) and wakes the waiters whose deadline passed.
  // Returns once each of them has been woken (it may not have run yet).
  void Advance(absl::Duration d);
  // Sets wall time only; monotonic time and deadlines are unaffected.
  void SetTime(absl::Time t);

  // Waits (real time, at most `limit`) until at least `n` threads wait in AwaitWithDeadline
  // for a deadline still in the future (or for none). False on the limit: the test failed.
  bool AwaitSleepers(int n, absl::Duration limit = absl::Seconds(10)) const;
  // Threads waiting for a deadline still in the future (or for none), now.
  int sleepers() const;

 private:
  struct Waiter {
    absl::Mutex* mu;
    MonoTime deadline;
    int pins = 0;  // Advance is poking `mu`: the waiter must not leave yet
  };

  bool DueLocked(const Waiter& w) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !w.deadline.IsInfinite() && w.deadline <= mono_;
  }
  int SleepersLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Lock order: a waiter's mutex before mu_; Advance never holds mu_ while taking a waiter's.
  mutable absl::Mutex mu_;
  absl::Time wall_ ABSL_GUARDED_BY(mu_);
  MonoTime mono_ ABSL_GUARDED_BY(mu_);
  // The monotonic reading in nanoseconds, readable inside a waiter's absl::Condition (which
  // runs under the waiter's mutex, where taking mu_ would invert the lock order).
  std::atomic<int64_t> mono_ns_;
  mutable std::list<Waiter*> waiters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpulet::testing

#endif  // GPULET_TESTING_SIMULATED_CLOCK_H_
