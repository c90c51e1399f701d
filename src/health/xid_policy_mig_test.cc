// XidPolicy on MIG GPUs: an XID naming a GPU instance takes out that MIG device alone and
// brings it back after the quiet period; an XID naming no instance (or one that does not
// exist) is the GPU's, and takes every MIG device of it out. Explicit times, no threads.
#include "gtest/gtest.h"
#include "health/xid_policy.h"
#include "state/device_store.h"

namespace gpulet::health {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);
constexpr absl::Duration kQuiet = absl::Minutes(5);
constexpr int kFatalXid = 79;

// GPU-m at 0000:18:00.0 with MIG devices in GPU instances 1 and 2.
gpu::Inventory MigGpu() {
  gpu::Inventory inv;
  gpu::Gpu g;
  g.index = 0;
  g.uuid = "GPU-m";
  g.bus_id = "0000:18:00.0";
  g.in_nvml = g.on_pci = true;
  g.mig_capable = true;
  g.mig_enabled = true;
  for (unsigned gi : {1u, 2u}) {
    gpu::MigDeviceInfo m;
    m.index = gi - 1;
    m.gpu_instance_id = gi;
    m.uuid = "MIG-" + std::to_string(gi);
    m.profile = "3g.71gb";
    g.mig_devices.push_back(m);
  }
  inv.gpus.push_back(g);
  return inv;
}

class XidPolicyMigTest : public ::testing::Test {
 protected:
  void SetUp() override { store_.SetInventory(MigGpu(), kT0); }
  std::shared_ptr<const state::Snapshot> Snap() { return store_.Get(); }

  state::DeviceStore store_;
  XidPolicy policy_{&store_, {13, 31, 43, 45, 68, 94}, kQuiet};
};

TEST_F(XidPolicyMigTest, AnXidNamingAGpuInstanceTakesOutThatMigDeviceAlone) {
  ASSERT_TRUE(policy_.OnXid("0000:18:00.0", kFatalXid, "", "kmsg", kT0, 2u));
  const state::DeviceRecord& d = Snap()->devices[0];
  EXPECT_EQ(d.health.state, state::HealthState::kHealthy);  // the GPU and instance 1 keep working
  EXPECT_EQ(d.health.xid_counts.at(kFatalXid), 1u);         // counted on the GPU
  EXPECT_TRUE(d.MigHealthy(1));
  EXPECT_FALSE(d.MigHealthy(2));
  EXPECT_EQ(d.MigUnhealthyReason(2).rfind("MIG GPU instance 2: XID 79", 0), 0u)
      << d.MigUnhealthyReason(2);
  // Back after the quiet period, not before.
  policy_.Tick(kT0 + kQuiet - absl::Seconds(1));
  EXPECT_FALSE(Snap()->devices[0].MigHealthy(2));
  policy_.Tick(kT0 + kQuiet);
  EXPECT_TRUE(Snap()->devices[0].MigHealthy(2));
}

TEST_F(XidPolicyMigTest, AnXidNamingNoInstanceOrAnUnknownOneIsTheWholeGpus) {
  ASSERT_TRUE(policy_.OnXid("index:0", kFatalXid, "", "nvml", kT0, 9u));  // no instance 9
  const state::DeviceRecord& d = Snap()->devices[0];
  EXPECT_EQ(d.health.state, state::HealthState::kUnhealthy);
  EXPECT_FALSE(d.MigHealthy(1));
  EXPECT_FALSE(d.MigHealthy(2));
  policy_.Tick(kT0 + kQuiet);
  EXPECT_TRUE(Snap()->devices[0].MigHealthy(1));
}

TEST_F(XidPolicyMigTest, ApplicationXidsInAnInstanceAreOnlyCounted) {
  ASSERT_TRUE(policy_.OnXid("GPU-m", 43, "", "nvml", kT0, 1u));
  const state::DeviceRecord& d = Snap()->devices[0];
  EXPECT_TRUE(d.MigHealthy(1));
  EXPECT_EQ(d.health.xid_counts.at(43), 1u);
}

TEST_F(XidPolicyMigTest, ALayoutChangeDropsTheHealthOfInstancesThatAreGone) {
  ASSERT_TRUE(policy_.OnXid("GPU-m", kFatalXid, "", "nvml", kT0, 2u));
  gpu::MigLayout layout;
  layout.enabled = true;
  layout.devices = {MigGpu().gpus[0].mig_devices[0]};  // instance 2 destroyed
  EXPECT_TRUE(store_.SetMigLayout("GPU-m", layout));
  EXPECT_FALSE(store_.SetMigLayout("GPU-m", layout));  // no change, no new snapshot
  EXPECT_TRUE(Snap()->devices[0].mig_health.empty());
  EXPECT_EQ(Snap()->devices[0].gpu.mig_devices.size(), 1u);
  // An instance re-created under the old id starts healthy.
  EXPECT_TRUE(
      store_.SetMigLayout("GPU-m", gpu::MigLayout{true, true, MigGpu().gpus[0].mig_devices}));
  EXPECT_TRUE(Snap()->devices[0].MigHealthy(2));
  EXPECT_FALSE(store_.SetMigLayout("GPU-x", layout));
}

}  // namespace
}  // namespace gpulet::health
