#include "sim/fault_scripts.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace gpulet::sim {
namespace {

// Each script is what its header says, step by step, on the GPU it is played on only.
TEST(FaultScriptsTest, EachScriptMakesItsFaultsStepByStep) {
  SimState s;
  const FaultScript* bus = FindFaultScript("off-the-bus");
  ASSERT_NE(bus, nullptr);
  ASSERT_EQ(bus->steps.size(), 2u);
  ASSERT_TRUE(bus->steps[0].apply(&s, "1"));
  EXPECT_EQ(s.gpus["1"].load.pcie_replay, 120u);
  EXPECT_FALSE(s.gpus["1"].lost);
  ASSERT_TRUE(bus->steps[1].apply(&s, "1"));
  EXPECT_TRUE(s.gpus["1"].lost);
  ASSERT_EQ(s.gpus["1"].xids.size(), 1u);
  EXPECT_EQ(s.gpus["1"].xids[0].xid, 79u);
  EXPECT_FALSE(s.gpus.contains("0"));

  SimState t;
  const FaultScript* hang = FindFaultScript("thermal-hang");
  ASSERT_NE(hang, nullptr);
  ASSERT_TRUE(hang->steps[0].apply(&t, "0"));
  EXPECT_EQ(t.gpus["0"].load.temperature_c, 94u);
  EXPECT_EQ(t.gpus["0"].load.clocks_event_reasons, 0x60u);
  EXPECT_EQ(t.gpus["0"].hang_seconds, 0);
  ASSERT_TRUE(hang->steps[1].apply(&t, "0"));
  EXPECT_EQ(t.gpus["0"].hang_seconds, 3600);

  for (const char* name : {"recovers-on-reset", "fails-after-reset"}) {
    SimState r;
    const FaultScript* reset = FindFaultScript(name);
    ASSERT_NE(reset, nullptr) << name;
    ASSERT_TRUE(reset->steps[0].apply(&r, "GPU-5090"));
    EXPECT_EQ(r.gpus["GPU-5090"].recovery_action, 1u) << name;  // GPU_RESET
    EXPECT_EQ(r.gpus["GPU-5090"].xids.back().xid, 48u) << name;
    EXPECT_FALSE(r.gpus["GPU-5090"].reset_required) << name;  // NVML still lists processes
    // What the kernel's reset does to each: the recovering card is clear, the failing one
    // raises its XID again.
    const size_t xids = r.gpus["GPU-5090"].xids.size();
    ASSERT_TRUE(ResetGpu(&r, "GPU-5090"));
    EXPECT_EQ(r.gpus["GPU-5090"].recovery_action, 0u) << name;
    EXPECT_EQ(r.gpus["GPU-5090"].xids.size(),
              std::string(name) == "fails-after-reset" ? xids + 1 : xids)
        << name;
  }

  // The failing card comes back after the reboot and falls off the bus again 30 s later,
  // with its XID due then; its neighbour stays back.
  SimState b;
  const FaultScript* reboot = FindFaultScript("fails-after-reboot");
  ASSERT_NE(reboot, nullptr);
  ASSERT_TRUE(reboot->steps[0].apply(&b, "1"));
  ASSERT_TRUE(SetLost(&b, "0", true));
  EXPECT_TRUE(b.gpus["1"].lost);
  const double before = WallSeconds();
  RebootNode(&b);
  const GpuState& failing = b.gpus["1"];
  EXPECT_FALSE(LostAt(failing, before));
  ASSERT_TRUE(failing.lost_at.has_value());
  EXPECT_NEAR(*failing.lost_at - before, 30, 1);
  EXPECT_TRUE(LostAt(failing, before + 31));
  ASSERT_EQ(failing.xids.size(), 2u);
  EXPECT_GE(failing.xids[1].seq, static_cast<uint64_t>((before + 29) * 1e6));
  EXPECT_FALSE(LostAt(b.gpus["0"], before + 31));

  SimState m;
  const FaultScript* elsewhere = FindFaultScript("returns-elsewhere");
  ASSERT_NE(elsewhere, nullptr);
  ASSERT_EQ(elsewhere->steps.size(), 2u);
  ASSERT_TRUE(elsewhere->steps[0].apply(&m, "1"));
  EXPECT_TRUE(m.gpus["1"].lost);
  EXPECT_FALSE(m.gpus["1"].minor.has_value());
  ASSERT_TRUE(elsewhere->steps[1].apply(&m, "1"));
  EXPECT_FALSE(m.gpus["1"].lost);
  EXPECT_EQ(m.gpus["1"].minor, 12u);
}

TEST(FaultScriptsTest, NamesAreUniqueAndBadInputChangesNothing) {
  std::set<std::string> names;
  for (const FaultScript& f : FaultScripts()) {
    EXPECT_TRUE(names.insert(f.name).second) << f.name;
    EXPECT_FALSE(f.steps.empty()) << f.name;
    SimState s;
    for (const FaultStep& step : f.steps) EXPECT_FALSE(step.apply(&s, "not a gpu")) << f.name;
    EXPECT_TRUE(s.gpus.empty()) << f.name;
  }
  EXPECT_EQ(FindFaultScript("off-the-bus "), nullptr);
  EXPECT_EQ(FaultScriptNames(),
            "off-the-bus, thermal-hang, recovers-on-reset, fails-after-reset, fails-after-reboot, "
            "returns-elsewhere");
}

}  // namespace
}  // namespace gpulet::sim
