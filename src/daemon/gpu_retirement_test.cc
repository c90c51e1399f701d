#include "daemon/gpu_retirement.h"

#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/files.h"
#include "testing/simulated_clock.h"

namespace gpulet::daemon {
namespace {

using ::testing::HasSubstr;

constexpr char k3080[] = "GPU-3080";
constexpr char k5090[] = "GPU-5090";

class GpuRetirementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gpu::Inventory inv;
    for (auto [uuid, bus, index] :
         {std::tuple{k3080, "0000:01:00.0", 0u}, std::tuple{k5090, "0000:02:00.0", 1u}}) {
      gpu::Gpu g;
      g.uuid = uuid;
      g.bus_id = bus;
      g.index = index;
      g.in_nvml = true;
      inv.gpus.push_back(g);
    }
    store_.SetInventory(inv, clock_.Now());
  }
  std::unique_ptr<recorder::RetiredFile> File() {
    return std::make_unique<recorder::RetiredFile>(dir_.path() + "/retired.json",
                                                   "/var/lib/gpulet/retired.json");
  }
  config::Config::Health::Retire Mode(config::RemediationMode mode) {
    config::Config::Health::Retire r;
    r.mode = mode;
    r.faults = 2;
    return r;
  }
  std::vector<recorder::RecorderDump> TwoFaults() {
    std::vector<recorder::RecorderDump> out;
    for (int ago : {7200, 60}) {
      recorder::RecorderDump d;
      d.uuid = k5090;
      d.pci_bus_id = "0000:02:00.0";
      d.fault_ms = absl::ToUnixMillis(clock_.Now() - absl::Seconds(ago));
      d.fault = "Unhealthy: XID 79";
      d.health = "Unhealthy";
      out.push_back(d);
    }
    return out;
  }
  state::HealthState StateOf(const std::string& uuid) {
    return store_.Get()->FindByUuid(uuid)->health.state;
  }
  std::vector<std::string> Reasons() {
    std::vector<std::string> out;
    for (const cluster::NodeEvent& e : inbox_.Drain()) out.push_back(e.reason);
    return out;
  }

  testing::ScratchDir dir_;
  testing::SimulatedClock clock_;
  state::DeviceStore store_;
  cluster::EventInbox inbox_;
  GpuRetirement retirement_{&store_, &inbox_, &clock_};
};

TEST_F(GpuRetirementTest, TurnedOnItRetiresTheCardKeepsTheOtherAndWritesTheFile) {
  retirement_.Configure(Mode(config::RemediationMode::kOn), File());
  retirement_.Consider(k5090, {TwoFaults()[1]});  // one fault: nothing
  EXPECT_EQ(StateOf(k5090), state::HealthState::kHealthy);
  retirement_.Consider(k5090, TwoFaults());
  EXPECT_EQ(StateOf(k5090), state::HealthState::kUnhealthy);
  EXPECT_THAT(store_.Get()->FindByUuid(k5090)->health.reason, HasSubstr("retired: 2 faults"));
  EXPECT_THAT(store_.Get()->FindByUuid(k5090)->health.action,
              HasSubstr("gpulet retired --clear GPU-5090"));
  EXPECT_EQ(StateOf(k3080), state::HealthState::kHealthy);
  EXPECT_THAT(Reasons(), ::testing::ElementsAre("GpuRetired"));
  absl::StatusOr<recorder::RetiredGpus> file = File()->Load();
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->count(k5090), 1u);
  EXPECT_EQ(file->at(k5090).pci_bus_id, "0000:02:00.0");
  retirement_.Consider(k5090, TwoFaults());  // already out: nothing more
  EXPECT_TRUE(Reasons().empty());
}

TEST_F(GpuRetirementTest, ItSurvivesARestartAndClearingTheFileReturnsTheCard) {
  retirement_.Configure(Mode(config::RemediationMode::kOn), File());
  retirement_.Consider(k5090, TwoFaults());
  Reasons();
  // A new daemon (a reboot): the store starts healthy, the file puts the card out again.
  state::DeviceStore fresh;
  gpu::Inventory inv;
  inv.gpus = {store_.Get()->devices[0].gpu, store_.Get()->devices[1].gpu};
  fresh.SetInventory(inv, clock_.Now());
  cluster::EventInbox inbox;
  GpuRetirement again(&fresh, &inbox, &clock_);
  again.Configure(Mode(config::RemediationMode::kDryRun),
                  File());  // the file counts whatever the mode
  EXPECT_EQ(fresh.Get()->FindByUuid(k5090)->health.state, state::HealthState::kUnhealthy);
  ASSERT_TRUE(File()->Save({}).ok());  // `gpulet retired --clear GPU-5090`
  again.Sync();
  EXPECT_EQ(fresh.Get()->FindByUuid(k5090)->health.state, state::HealthState::kHealthy);
  ASSERT_EQ(inbox.Drain().back().reason, "GpuUnretired");
}

TEST_F(GpuRetirementTest, DryRunSaysSoOncePerFaultAndOffSaysNothing) {
  retirement_.Configure(Mode(config::RemediationMode::kDryRun), File());
  retirement_.Consider(k5090, TwoFaults());
  retirement_.Consider(k5090, TwoFaults());
  EXPECT_THAT(Reasons(), ::testing::ElementsAre("GpuWouldRetire"));
  EXPECT_EQ(StateOf(k5090), state::HealthState::kHealthy);
  EXPECT_TRUE(File()->Load()->empty());
  retirement_.Configure(Mode(config::RemediationMode::kOff), File());
  retirement_.Consider(k5090, TwoFaults());
  EXPECT_TRUE(Reasons().empty());
}

TEST_F(GpuRetirementTest, AFileThatCannotBeReadKeepsWhatIsOutAndRetiresNothingNew) {
  ASSERT_TRUE(File()->Save({{k5090, {"0000:02:00.0", 1, "earlier"}}}).ok());
  retirement_.Configure(Mode(config::RemediationMode::kOn), File());
  EXPECT_EQ(StateOf(k5090), state::HealthState::kUnhealthy);
  std::ofstream(dir_.path() + "/retired.json") << "garbage";
  retirement_.Sync();
  EXPECT_EQ(StateOf(k5090), state::HealthState::kUnhealthy);  // not returned by a broken file
  std::vector<recorder::RecorderDump> faults = TwoFaults();
  for (recorder::RecorderDump& d : faults) d.uuid = k3080, d.pci_bus_id = "0000:01:00.0";
  retirement_.Consider(k3080, faults);
  EXPECT_EQ(StateOf(k3080), state::HealthState::kHealthy);
}

TEST_F(GpuRetirementTest, ACardInAnotherSlotIsKeptOut) {
  ASSERT_TRUE(File()->Save({{k5090, {"0000:41:00.0", 1, "earlier"}}}).ok());
  retirement_.Configure(Mode(config::RemediationMode::kOff), File());
  EXPECT_EQ(StateOf(k5090), state::HealthState::kUnhealthy);
}

}  // namespace
}  // namespace gpulet::daemon
