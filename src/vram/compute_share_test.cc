#include "vram/compute_share.h"

#include <algorithm>
#include <cmath>

#include "gtest/gtest.h"

namespace gpulet::vram {
namespace {

// A holder that launches as fast as the card takes its kernels: each unit costs `unit_cost`
// SM-seconds (unknown to the rule); unpaced it has the card to itself (`alone` of its SM
// time, what competition leaves it).
struct Workload {
  double unit_cost = 2e-6;
  double alone = 1.0;

  // One round of one second at `rate` (0: unpaced).
  ComputeRound Run(uint64_t rate, double share) const {
    ComputeRound r;
    r.share = share;
    r.measured = true;
    r.seconds = 1;
    r.sm_busy = rate == 0 ? alone : std::min(alone, static_cast<double>(rate) * unit_cost);
    r.units = static_cast<uint64_t>(r.sm_busy / unit_cost);
    return r;
  }
};

TEST(ComputeShareRuleTest, AShareIsTheQuotaOverTheCardsMemory) {
  EXPECT_EQ(ComputeSharePermille(uint64_t{8} << 30, uint64_t{32} << 30), 250u);
  EXPECT_EQ(ComputeSharePermille(uint64_t{4096} << 20, uint64_t{32607} << 20), 125u);
  EXPECT_EQ(ComputeSharePermille(uint64_t{64} << 30, uint64_t{32} << 30), 1000u);  // at most all
  EXPECT_EQ(ComputeSharePermille(uint64_t{8} << 30, 0), 0u);  // memory unknown: no share
}

TEST(ComputeShareRuleTest, AHolderOverItsShareIsPacedToIt) {
  ComputeShareRule rule;
  Workload w;
  uint64_t rate = rule.Next(w.Run(0, 0.25));
  EXPECT_EQ(rate, 125000u);  // 0.25 / 2 µs
  EXPECT_NEAR(w.Run(rate, 0.25).sm_busy, 0.25, 1e-6);
}

// The holder's kernels get twice as heavy (a new phase, a bigger batch): the rate halves in a
// few rounds, each halving the error.
TEST(ComputeShareRuleTest, TheRateFollowsAChangeInTheKernels) {
  ComputeShareRule rule;
  Workload w;
  uint64_t rate = rule.Next(w.Run(0, 0.25));
  w.unit_cost *= 2;
  double error = 1;
  for (int i = 0; i < 8; ++i) {
    ComputeRound r = w.Run(rate, 0.25);
    error = std::abs(r.sm_busy - 0.25);
    rate = rule.Next(r);
  }
  EXPECT_LT(error, 0.002);
  EXPECT_NEAR(static_cast<double>(rate), 62500, 500);
}

TEST(ComputeShareRuleTest, AHolderWithinItsShareIsNotPaced) {
  ComputeShareRule rule;
  Workload w;
  w.alone = 0.2;  // a light workload, or a busy card
  EXPECT_EQ(rule.Next(w.Run(0, 0.25)), 0u);
}

TEST(ComputeShareRuleTest, ARoundThatTeachesNothingKeepsTheRate) {
  ComputeShareRule rule;
  Workload w;
  const uint64_t rate = rule.Next(w.Run(0, 0.25));
  ComputeRound idle = w.Run(rate, 0.25);
  idle.units = 0;  // launched nothing
  EXPECT_EQ(rule.Next(idle), rate);
  ComputeRound unmeasured = w.Run(rate, 0.25);
  unmeasured.measured = false;  // NVML did not answer for the GPU
  EXPECT_EQ(rule.Next(unmeasured), rate);
  ComputeRound no_time = w.Run(rate, 0.25);
  no_time.sm_busy = 0;  // launched, but NVML saw no SM time (not sampled yet)
  EXPECT_EQ(rule.Next(no_time), rate);
}

TEST(ComputeShareRuleTest, NoShareOrTheWholeCardIsNotPaced) {
  ComputeShareRule rule;
  Workload w;
  EXPECT_EQ(rule.Next(w.Run(0, 0)), 0u);
  EXPECT_EQ(rule.Next(w.Run(0, 1.0)), 0u);
}

TEST(ComputeShareRuleTest, TheRateNeverFallsBelowTheFloor) {
  ComputeShareRule rule;
  Workload w;
  w.unit_cost = 1;  // enormous kernels: one unit is a second of the card
  EXPECT_EQ(rule.Next(w.Run(0, 0.25)), ComputeShareRule::kMinRate);
}

}  // namespace
}  // namespace gpulet::vram
