#include "vram/launch_pacing.h"

#include <algorithm>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace gpulet::vram {
namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kNow = 1'000 * kMs;
uint64_t Now() { return kNow; }
uint64_t Later() { return kNow + 100 * kMs; }

TEST(LaunchPacingTest, AKernelCostsItsBlocks) {
  EXPECT_EQ(KernelLaunchCost(4, 2, 3), 24u);
  EXPECT_EQ(KernelLaunchCost(0, 0, 0), 1u);  // a zero dimension counts as one
  EXPECT_EQ(KernelLaunchCost(UINT32_MAX, UINT32_MAX, UINT32_MAX), UINT32_MAX);
}

TEST(LaunchPacingTest, WithoutARateNothingWaitsAndUnitsAreCounted) {
  SliceHeader h{};
  EXPECT_EQ(PaceLaunch(&h, 100, Now), 0u);
  EXPECT_EQ(PaceLaunch(&h, 50, Now), 0u);
  EXPECT_EQ(h.launch_units, 150u);
  EXPECT_EQ(h.launch_waits, 0u);
}

// 1000 units a second: a 10-unit launch is 10 ms of the holder's time. After an idle spell
// 20 ms (the burst) go at once; each launch after that waits for its turn.
TEST(LaunchPacingTest, LaunchesWaitForTheirTurnAfterTheBurst) {
  SliceHeader h{};
  SetLaunchRate(&h, 1000);
  std::vector<uint64_t> waits;
  for (int i = 0; i < 6; ++i) waits.push_back(PaceLaunch(&h, 10, Now));
  EXPECT_EQ(waits, (std::vector<uint64_t>{0, 0, 0, 10 * kMs, 20 * kMs, 30 * kMs}));
  EXPECT_EQ(h.launch_waits, 3u);
  EXPECT_EQ(h.launch_wait_ns, 60 * kMs);
  // A launch after its turn has passed goes at once; the clock has moved on by then.
  EXPECT_EQ(PaceLaunch(&h, 10, Later), 0u);
}

TEST(LaunchPacingTest, NoLaunchWaitsMoreThanTheCap) {
  SliceHeader h{};
  SetLaunchRate(&h, 1);  // one unit a second: a 1000-unit launch would wait 1000 s
  for (int i = 0; i < 10; ++i) EXPECT_LE(PaceLaunch(&h, 1000, Now), kLaunchMaxWaitNs);
  EXPECT_LE(h.launch_paid_until_ns, kNow + 2 * kLaunchMaxWaitNs);
}

// A rate lowered mid-run applies from the next launch; raised, the queue is not replayed.
TEST(LaunchPacingTest, ARateChangeAppliesToTheNextLaunch) {
  SliceHeader h{};
  SetLaunchRate(&h, 1000);
  for (int i = 0; i < 3; ++i) PaceLaunch(&h, 10, Now);  // the burst, and 10 ms more
  SetLaunchRate(&h, 500);                               // a 10-unit launch is 20 ms now
  EXPECT_EQ(PaceLaunch(&h, 10, Now), 10 * kMs);         // after what was launched at 1000
  EXPECT_EQ(PaceLaunch(&h, 10, Now), 30 * kMs);         // and the 20 ms one before it
  SetLaunchRate(&h, 0);
  EXPECT_EQ(PaceLaunch(&h, 10, Now), 0u);
}

// Threads (processes, in a slice) share the clock: each launch gets a turn of its own, none
// lost, none twice.
TEST(LaunchPacingTest, ConcurrentLaunchesEachGetTheirOwnTurn) {
  SliceHeader h{};
  SetLaunchRate(&h, 2'000'000);  // a 1000-unit launch is 0.5 ms
  constexpr int kThreads = 4, kEach = 25;
  std::vector<std::vector<uint64_t>> waits(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) waits[t].push_back(PaceLaunch(&h, 1000, Now));
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<uint64_t> all;
  for (const auto& w : waits) all.insert(all.end(), w.begin(), w.end());
  std::sort(all.begin(), all.end());
  for (int k = 0; k < kThreads * kEach; ++k) {
    const uint64_t turn = k * kMs / 2;
    EXPECT_EQ(all[k], turn > kLaunchBurstNs ? turn - kLaunchBurstNs : 0) << k;
  }
  EXPECT_EQ(h.launch_units, uint64_t{kThreads * kEach * 1000});
}

}  // namespace
}  // namespace gpulet::vram
