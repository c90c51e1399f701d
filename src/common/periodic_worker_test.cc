#include "common/periodic_worker.h"

#include <pthread.h>

#include <atomic>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "testing/simulated_clock.h"

namespace gpulet {
namespace {

using ::gpulet::testing::SimulatedClock;

TEST(SimulatedClockTest, AdvanceMovesBothClocksSetTimeOnlyWallTime) {
  SimulatedClock clock(absl::FromUnixSeconds(1000));
  MonoTime m0 = clock.Monotonic();
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(1000));
  clock.Advance(absl::Seconds(5));
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(1005));
  EXPECT_EQ(clock.Monotonic() - m0, absl::Seconds(5));
  clock.SetTime(absl::FromUnixSeconds(10));  // a wall-clock step backwards
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(10));
  EXPECT_EQ(clock.Monotonic() - m0, absl::Seconds(5));
}

TEST(SimulatedClockTest, AwaitReturnsWhenConditionIsMadeTrue) {
  SimulatedClock clock;
  absl::Mutex mu;
  bool flag = false;
  std::thread waker([&] {
    ASSERT_TRUE(clock.AwaitSleepers(1));
    absl::MutexLock lock(&mu);
    flag = true;
  });
  absl::MutexLock lock(&mu);
  EXPECT_TRUE(clock.AwaitWithDeadline(&mu, absl::Condition(&flag), MonoTime::Infinite()));
  waker.join();
  EXPECT_EQ(clock.sleepers(), 0);
}

TEST(SimulatedClockTest, AdvanceWakesOnlyWaitersWhoseDeadlinePassed) {
  SimulatedClock clock;
  const MonoTime start = clock.Monotonic();
  absl::Mutex mu;
  bool never = false;
  std::atomic<int> woke_early{0}, woke_late{0};
  auto wait_until = [&](absl::Duration d, std::atomic<int>* woke) {
    absl::MutexLock lock(&mu);
    EXPECT_FALSE(clock.AwaitWithDeadline(&mu, absl::Condition(&never), start + d));
    EXPECT_GE(clock.Monotonic(), start + d);
    ++*woke;
  };
  std::thread a([&] { wait_until(absl::Seconds(1), &woke_early); });
  std::thread b([&] { wait_until(absl::Seconds(10), &woke_late); });
  ASSERT_TRUE(clock.AwaitSleepers(2));
  clock.Advance(absl::Seconds(1));
  a.join();
  EXPECT_EQ(woke_early.load(), 1);
  EXPECT_EQ(woke_late.load(), 0);
  EXPECT_EQ(clock.sleepers(), 1);
  clock.Advance(absl::Seconds(9));
  b.join();
  EXPECT_EQ(woke_late.load(), 1);
}

TEST(SimulatedClockTest, PastDeadlineReturnsAtOnce) {
  SimulatedClock clock;
  absl::Mutex mu;
  bool never = false;
  absl::MutexLock lock(&mu);
  EXPECT_FALSE(clock.AwaitWithDeadline(&mu, absl::Condition(&never), clock.Monotonic()));
  bool yes = true;
  EXPECT_TRUE(clock.AwaitWithDeadline(&mu, absl::Condition(&yes), clock.Monotonic()));
}

TEST(RealClockTest, MonotonicAndDeadlines) {
  const Clock* clock = RealClock();
  MonoTime a = clock->Monotonic();
  MonoTime b = clock->Monotonic();
  EXPECT_GE(b, a);
  EXPECT_TRUE(clock->DeadlineIn(absl::InfiniteDuration()).IsInfinite());
  absl::Mutex mu;
  bool never = false, yes = true;
  absl::MutexLock lock(&mu);
  EXPECT_FALSE(clock->AwaitWithDeadline(&mu, absl::Condition(&never), a));  // already passed
  EXPECT_TRUE(clock->AwaitWithTimeout(&mu, absl::Condition(&yes), absl::Hours(1)));
}

std::string CurrentThreadName() {
  char name[16] = {};
  pthread_getname_np(pthread_self(), name, sizeof(name));
  return name;
}

TEST(PeriodicWorkerTest, TicksAtStartAndOncePerInterval) {
  SimulatedClock clock;
  std::atomic<int> ticks{0};
  std::string thread_name;
  PeriodicWorker worker({.name = "gpulet-test", .interval = absl::Seconds(10), .clock = &clock},
                        [&] {
                          if (ticks.fetch_add(1) == 0) thread_name = CurrentThreadName();
                        });
  worker.Start();
  ASSERT_TRUE(clock.AwaitSleepers(1));
  EXPECT_EQ(ticks.load(), 1);
  EXPECT_EQ(thread_name, "gpulet-test");

  clock.Advance(absl::Seconds(9));  // not yet
  ASSERT_TRUE(clock.AwaitSleepers(1));
  EXPECT_EQ(ticks.load(), 1);

  clock.Advance(absl::Seconds(1));
  ASSERT_TRUE(clock.AwaitSleepers(1));
  EXPECT_EQ(ticks.load(), 2);
  EXPECT_EQ(worker.ticks(), 2u);

  clock.Advance(absl::Seconds(10));
  ASSERT_TRUE(clock.AwaitSleepers(1));
  EXPECT_EQ(ticks.load(), 3);
  worker.Stop();
}

TEST(PeriodicWorkerTest, WithoutTickAtStartFirstTickIsOneIntervalLater) {
  SimulatedClock clock;
  std::atomic<int> ticks{0};
  PeriodicWorker worker({.name = "gpulet-test",
                         .interval = absl::Seconds(1),
                         .clock = &clock,
                         .tick_at_start = false},
                        [&] { ++ticks; });
  worker.Start();
  ASSERT_TRUE(clock.AwaitSleepers(1));
  EXPECT_EQ(ticks.load(), 0);
  clock.Advance(absl::Seconds(1));
  ASSERT_TRUE(clock.AwaitSleepers(1));
  EXPECT_EQ(ticks.load(), 1);
}

TEST(PeriodicWorkerTest, AnOverrunningTickIsFollowedAtOnceWithoutCatchUp) {
  SimulatedClock clock;
  std::atomic<int> ticks{0};
  PeriodicWorker worker({.name = "gpulet-test", .interval = absl::Seconds(1), .clock = &clock},
                        [&] {
                          // The first tick takes 3.5 intervals of simulated time.
                          if (ticks.fetch_add(1) == 0) clock.Advance(absl::Milliseconds(3500));
                        });
  worker.Start();
  ASSERT_TRUE(clock.AwaitSleepers(1));
  // Tick 1 overran, tick 2 followed at once, then it sleeps a whole interval: no burst.
  EXPECT_EQ(ticks.load(), 2);
  clock.Advance(absl::Milliseconds(999));
  ASSERT_TRUE(clock.AwaitSleepers(1));
  EXPECT_EQ(ticks.load(), 2);
  clock.Advance(absl::Milliseconds(1));
  ASSERT_TRUE(clock.AwaitSleepers(1));
  EXPECT_EQ(ticks.load(), 3);
}

TEST(PeriodicWorkerTest, WakeRunsTheNextTickNow) {
  SimulatedClock clock;
  std::atomic<int> ticks{0};
  PeriodicWorker worker({.name = "gpulet-test", .interval = absl::Hours(1), .clock = &clock},
                        [&] { ++ticks; });
  worker.Start();
  ASSERT_TRUE(clock.AwaitSleepers(1));
  ASSERT_EQ(ticks.load(), 1);
  worker.Wake();
  // The tick count moves without any simulated time passing.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (worker.ticks() < 2 && absl::Now() < give_up) ASSERT_TRUE(clock.AwaitSleepers(1));
  EXPECT_EQ(ticks.load(), 2);
}

TEST(PeriodicWorkerTest, StopIsImmediateAndIdempotent) {
  SimulatedClock clock;  // never advanced: only Stop can end the wait
  std::atomic<int> ticks{0};
  PeriodicWorker worker({.name = "gpulet-test", .interval = absl::Hours(24), .clock = &clock},
                        [&] { ++ticks; });
  worker.Start();
  ASSERT_TRUE(clock.AwaitSleepers(1));
  worker.Stop();  // returns at all only if it ends the wait itself: the clock never moves
  worker.Stop();
  EXPECT_EQ(ticks.load(), 1);
  EXPECT_EQ(clock.sleepers(), 0);
}

TEST(PeriodicWorkerTest, StopBeforeStartAndRealClock) {
  {
    PeriodicWorker never({.name = "gpulet-test"}, [] {});
    never.Stop();
  }
  absl::Notification ticked;
  PeriodicWorker worker({.name = "gpulet-test", .interval = absl::Hours(1)}, [&] {
    if (!ticked.HasBeenNotified()) ticked.Notify();
  });
  worker.Start();
  ticked.WaitForNotification();
  worker.Stop();  // the real clock's wait is cut short too
  EXPECT_EQ(worker.ticks(), 1u);
}

TEST(ThreadNameTest, LongNamesAreCut) {
  std::string seen;
  std::thread t = StartNamedThread("gpulet-a-very-long-name", [&] { seen = CurrentThreadName(); });
  t.join();
  EXPECT_EQ(seen, "gpulet-a-very-l");
}

}  // namespace
}  // namespace gpulet
