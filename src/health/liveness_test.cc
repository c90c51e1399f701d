#include "health/liveness.h"

#include <functional>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "gpu/nvml_api.h"
#include "gtest/gtest.h"
#include "health/xid_catalog.h"
#include "state/device_store.h"
#include "testing/fake_gpu_library.h"
#include "testing/simulated_clock.h"

namespace gpulet::health {
namespace {

using ::gpulet::testing::FakeGpuLibrary;
using ::gpulet::testing::kGpu0;
using ::gpulet::testing::kGpu1;
using ::gpulet::testing::NvmlGpu;
using ::gpulet::testing::SimulatedClock;

constexpr absl::Duration kInterval = absl::Seconds(1);
constexpr absl::Duration kProbeTimeout = absl::Milliseconds(750);
constexpr absl::Duration kQuiet = absl::Minutes(5);

gpu::DeviceIdentity Identity(unsigned index, const std::string& uuid, const std::string& bus) {
  gpu::DeviceIdentity id;
  id.index = index;
  id.uuid = uuid;
  id.bus_id = "0000" + bus;
  return id;
}

class LivenessTest : public ::testing::Test {
 protected:
  LivenessTest() : library_(&clock_) {
    library_.AddDevice(Identity(0, kGpu0, "0000:01:00.0"));
    library_.AddDevice(Identity(1, kGpu1, "0000:02:00.0"));
    inventory_.gpus = {NvmlGpu(0, kGpu0, "0000:01:00.0"), NvmlGpu(1, kGpu1, "0000:02:00.0")};
    store_.SetInventory(inventory_, clock_.Now());
  }

  LivenessMonitor::Options Options() {
    return {.interval = kInterval,
            .probe_timeout = kProbeTimeout,
            .quiet_period = kQuiet,
            .clock = &clock_};
  }

  const state::DeviceRecord& Record(const std::string& uuid) {
    snap_ = store_.Get();
    const state::DeviceRecord* r = snap_->FindByUuid(uuid);
    EXPECT_NE(r, nullptr);
    return *r;
  }
  state::HealthState State(const std::string& uuid) { return Record(uuid).health.state; }
  std::string Reason(const std::string& uuid) { return Record(uuid).health.reason; }

  // Time passes, then the monitor probes every GPU once.
  void Round(absl::Duration after = kInterval) {
    clock_.Advance(after);
    monitor_.ProbeOnce();
  }

  // GPU 0 fails one round (lost), then answers again until it is back.
  void FailAndRecover() {
    library_.FailNvml(0, NVML_ERROR_GPU_IS_LOST);
    Round();
    ASSERT_EQ(State(kGpu0), state::HealthState::kUnhealthy);
    library_.Heal(0);
    Round(kQuiet);
  }

  SimulatedClock clock_;
  FakeGpuLibrary library_;
  state::DeviceStore store_;
  gpu::Inventory inventory_;
  LivenessMonitor monitor_{&library_, &store_, Options()};
  std::shared_ptr<const state::Snapshot> snap_;
};

struct FailureCase {
  std::string name;
  std::function<void(FakeGpuLibrary&)> script;
  std::string reason;  // a part of the condition's reason
  // What clears it, for the cluster and the remediation rungs: NVIDIA sends a GPU that fell
  // off the bus to a reboot, and NVML's RESET_REQUIRED says a reset is enough.
  bool reboot_required = false;
  bool reset_clears = false;
};

TEST_F(LivenessTest, FailuresTakeTheGpuOutAtOnceAndItReturnsAfterTheQuietPeriod) {
  const std::vector<FailureCase> cases = {
      {"lost", [](FakeGpuLibrary& l) { l.FailNvml(0, NVML_ERROR_GPU_IS_LOST); },
       "fallen off the bus", true},
      {"reset required", [](FakeGpuLibrary& l) { l.FailNvml(0, NVML_ERROR_RESET_REQUIRED); },
       "requires a reset", false, true},
      {"renumbered", [](FakeGpuLibrary& l) { l.AnswerWithUuid(0, kGpu1); },
       "now belongs to " + std::string(kGpu1)},
      {"other error", [](FakeGpuLibrary& l) { l.Fail(0, absl::InternalError("boom")); },
       "failed its liveness probe: boom"},
  };
  for (const FailureCase& c : cases) {
    SCOPED_TRACE(c.name);
    // A fresh monitor per case: the flap limit must not carry over.
    LivenessMonitor monitor(&library_, &store_, Options());
    clock_.Advance(kInterval);
    monitor.ProbeOnce();
    ASSERT_EQ(State(kGpu0), state::HealthState::kHealthy);

    c.script(library_);
    clock_.Advance(kInterval);
    monitor.ProbeOnce();
    EXPECT_EQ(State(kGpu0), state::HealthState::kUnhealthy);
    EXPECT_TRUE(absl::StrContains(Reason(kGpu0), c.reason)) << Reason(kGpu0);
    ASSERT_TRUE(Record(kGpu0).health.Has("liveness"));
    EXPECT_EQ(Record(kGpu0).health.conditions.at("liveness").reboot_required, c.reboot_required);
    EXPECT_EQ(Record(kGpu0).health.conditions.at("liveness").reset_clears, c.reset_clears);
    EXPECT_EQ(State(kGpu1), state::HealthState::kHealthy);  // the other GPU is not affected

    library_.Heal(0);
    clock_.Advance(kInterval);
    monitor.ProbeOnce();
    EXPECT_EQ(State(kGpu0), state::HealthState::kUnhealthy) << "back before the quiet period";
    clock_.Advance(kQuiet - kInterval - absl::Milliseconds(1));
    monitor.ProbeOnce();
    EXPECT_EQ(State(kGpu0), state::HealthState::kUnhealthy) << "back before the quiet period";
    clock_.Advance(absl::Milliseconds(1));
    monitor.ProbeOnce();
    EXPECT_EQ(State(kGpu0), state::HealthState::kHealthy);
    EXPECT_FALSE(Record(kGpu0).health.Has("liveness"));
  }
}

TEST_F(LivenessTest, HungProbeMakesTheGpuUnhealthyAfterTheProbeTimeout) {
  library_.Hang(0);
  std::thread round([&] { monitor_.ProbeOnce(); });
  ASSERT_TRUE(library_.AwaitBlockedCalls(1));
  EXPECT_EQ(State(kGpu0), state::HealthState::kHealthy);  // not before the deadline
  clock_.Advance(kProbeTimeout);
  round.join();
  EXPECT_EQ(State(kGpu0), state::HealthState::kUnhealthy);
  EXPECT_TRUE(absl::StrContains(Reason(kGpu0), "not answering")) << Reason(kGpu0);
  EXPECT_EQ(State(kGpu1), state::HealthState::kHealthy);
  EXPECT_EQ(library_.probe_calls(1), 1);  // the other GPU was still probed
}

TEST_F(LivenessTest, AFailureDuringTheQuietPeriodRestartsIt) {
  library_.FailNvml(0, NVML_ERROR_GPU_IS_LOST);
  Round();
  library_.Heal(0);
  Round(absl::Minutes(3));
  library_.FailNvml(0, NVML_ERROR_GPU_IS_LOST);
  Round();
  library_.Heal(0);
  Round(absl::Minutes(4));
  EXPECT_EQ(State(kGpu0), state::HealthState::kUnhealthy);
  Round(absl::Minutes(1));
  EXPECT_EQ(State(kGpu0), state::HealthState::kHealthy);
}

TEST_F(LivenessTest, AWallClockStepDoesNotEndTheQuietPeriod) {
  library_.FailNvml(0, NVML_ERROR_GPU_IS_LOST);
  Round();
  library_.Heal(0);
  clock_.SetTime(clock_.Now() + absl::Hours(24));  // NTP jumps a day ahead
  Round();
  EXPECT_EQ(State(kGpu0), state::HealthState::kUnhealthy);
}

struct FlapCase {
  std::string name;
  absl::Duration gap;  // between the starts of consecutive failures
  bool kept_out;
};

TEST_F(LivenessTest, ThreeFailuresWithinAnHourKeepTheGpuOut) {
  const std::vector<FlapCase> cases = {
      {"every 10 minutes", absl::Minutes(10), true},
      {"every 29 minutes (58 in all)", absl::Minutes(29), true},
      {"every 31 minutes (62 in all)", absl::Minutes(31), false},
      {"every 45 minutes", absl::Minutes(45), false},
  };
  for (const FlapCase& c : cases) {
    SCOPED_TRACE(c.name);
    store_.SetInventory(inventory_, clock_.Now());
    LivenessMonitor monitor(&library_, &store_, Options());
    for (int i = 0; i < LivenessMonitor::kMaxFailures; ++i) {
      library_.FailNvml(0, NVML_ERROR_GPU_IS_LOST);
      clock_.Advance(kInterval);
      monitor.ProbeOnce();
      ASSERT_EQ(State(kGpu0), state::HealthState::kUnhealthy);
      library_.Heal(0);
      clock_.Advance(kQuiet);  // answering for the quiet period
      monitor.ProbeOnce();
      clock_.Advance(c.gap - kQuiet - kInterval);
      monitor.ProbeOnce();
    }
    // Long after, answering all along.
    for (int i = 0; i < 3; ++i) {
      clock_.Advance(absl::Hours(1));
      monitor.ProbeOnce();
    }
    if (c.kept_out) {
      EXPECT_EQ(State(kGpu0), state::HealthState::kUnhealthy);
      EXPECT_TRUE(absl::StrContains(Reason(kGpu0), "3 times in the last hour")) << Reason(kGpu0);
    } else {
      EXPECT_EQ(State(kGpu0), state::HealthState::kHealthy) << Reason(kGpu0);
    }
  }
}

TEST_F(LivenessTest, KeptOutPublishesOnlyOnce) {
  for (int i = 0; i < LivenessMonitor::kMaxFailures; ++i) FailAndRecover();
  ASSERT_TRUE(absl::StrContains(Reason(kGpu0), "kept out")) << Reason(kGpu0);
  uint64_t version = store_.Get()->version;
  Round();
  Round();
  EXPECT_EQ(store_.Get()->version, version);
}

struct RemapCase {
  std::string name;
  std::optional<bool> pending, failure;
  state::HealthState state;
  std::string reason;
};

TEST_F(LivenessTest, RowRemapping) {
  const std::vector<RemapCase> cases = {
      {"no row remapping", std::nullopt, std::nullopt, state::HealthState::kHealthy, ""},
      {"nothing remapped", false, false, state::HealthState::kHealthy, ""},
      {"pending", true, false, state::HealthState::kDegraded, "row remapping pending"},
      {"failed", false, true, state::HealthState::kUnhealthy, "row remapping failed"},
      {"failed and pending", true, true, state::HealthState::kUnhealthy, "row remapping failed"},
  };
  for (const RemapCase& c : cases) {
    SCOPED_TRACE(c.name);
    library_.SetRowRemap(0, c.pending, c.failure);
    Round();
    EXPECT_EQ(State(kGpu0), c.state);
    EXPECT_EQ(Record(kGpu0).health.Has("row-remap"), c.state != state::HealthState::kHealthy);
    EXPECT_TRUE(absl::StrContains(Reason(kGpu0), c.reason)) << Reason(kGpu0);
    EXPECT_FALSE(Record(kGpu0).health.Has("liveness"));
    // A reset applied it: the condition goes with the next probe.
    library_.SetRowRemap(0, false, false);
    Round();
    EXPECT_EQ(State(kGpu0), state::HealthState::kHealthy);
  }
}

TEST_F(LivenessTest, RowRemapStateIsPublishedOnlyWhenItChanges) {
  library_.SetRowRemap(0, true, false);
  Round();
  uint64_t version = store_.Get()->version;
  Round();
  Round();
  EXPECT_EQ(store_.Get()->version, version);
}

// The driver's recovery action (R570+) decides as the driver says; NONE clears it, and a
// driver that does not report it changes nothing.
TEST_F(LivenessTest, TheDriversRecoveryActionIsFollowed) {
  struct Case {
    unsigned action;
    state::HealthState state;
    const char* reason;
    std::string action_text;
  } cases[] = {
      {1, state::HealthState::kUnhealthy, "recovery action 1 (GPU reset required)",
       std::string(GpuActionDescription(GpuAction::kResetGpu))},
      {2, state::HealthState::kUnhealthy, "recovery action 2 (node reboot required)",
       std::string(GpuActionDescription(GpuAction::kRebootNode))},
      {3, state::HealthState::kDegraded, "recovery action 3 (drain peer-to-peer traffic)",
       "stop the GPU's peer-to-peer"},
      {4, state::HealthState::kDegraded, "recovery action 4 (drain and reset",
       std::string(GpuActionDescription(GpuAction::kResetGpu))},
      {9, state::HealthState::kUnhealthy, "recovery action 9 (a value this gpulet does not know)",
       std::string(GpuActionDescription(GpuAction::kContactSupport))},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.action);
    library_.SetRecoveryAction(0, c.action);
    Round();
    EXPECT_EQ(State(kGpu0), c.state);
    EXPECT_TRUE(Record(kGpu0).health.Has("recovery-action"));
    EXPECT_TRUE(absl::StrContains(Reason(kGpu0), c.reason)) << Reason(kGpu0);
    EXPECT_TRUE(absl::StrContains(Record(kGpu0).health.action, c.action_text))
        << Record(kGpu0).health.action;
    EXPECT_EQ(State(kGpu1), state::HealthState::kHealthy);
    library_.SetRecoveryAction(0, NVML_GPU_RECOVERY_ACTION_NONE);
    Round();
    EXPECT_EQ(State(kGpu0), state::HealthState::kHealthy);
    EXPECT_FALSE(Record(kGpu0).health.Has("recovery-action"));
  }
  library_.SetRecoveryAction(0, std::nullopt);
  uint64_t version = store_.Get()->version;
  Round();
  EXPECT_EQ(store_.Get()->version, version);
}

TEST_F(LivenessTest, PciOnlyGpuIsUnhealthyFromTheStartAndNeverProbed) {
  gpu::Gpu pci_only;
  pci_only.bus_id = "0000:03:00.0";
  pci_only.on_pci = true;
  pci_only.kernel_driver = "nouveau";
  inventory_.gpus.push_back(pci_only);
  store_.SetInventory(inventory_, clock_.Now());
  Round();
  Round(kQuiet);
  snap_ = store_.Get();
  ASSERT_EQ(snap_->devices.size(), 3u);
  const state::GpuHealth& h = snap_->devices[2].health;
  EXPECT_EQ(h.state, state::HealthState::kUnhealthy);
  EXPECT_TRUE(absl::StrContains(h.reason, "kernel driver: nouveau")) << h.reason;
  EXPECT_EQ(library_.probe_calls(0), 2);
  EXPECT_EQ(library_.probe_calls(1), 2);
  EXPECT_EQ(State(kGpu0), state::HealthState::kHealthy);
}

TEST_F(LivenessTest, ThreadProbesEveryIntervalOnTheClockAndStopsAtOnce) {
  LivenessMonitor monitor(&library_, &store_, Options());
  monitor.Start();
  ASSERT_TRUE(clock_.AwaitSleepers(1));
  EXPECT_EQ(library_.probe_calls(0), 1);
  clock_.Advance(kInterval - absl::Milliseconds(1));
  ASSERT_TRUE(clock_.AwaitSleepers(1));
  EXPECT_EQ(library_.probe_calls(0), 1);
  clock_.Advance(absl::Milliseconds(1));
  ASSERT_TRUE(clock_.AwaitSleepers(1));
  EXPECT_EQ(library_.probe_calls(0), 2);

  library_.FailNvml(0, NVML_ERROR_GPU_IS_LOST);
  clock_.Advance(kInterval);
  ASSERT_TRUE(clock_.AwaitSleepers(1));
  EXPECT_EQ(State(kGpu0), state::HealthState::kUnhealthy);

  monitor.Stop();  // the simulated clock never reaches the next tick: only Stop ends it
  EXPECT_EQ(clock_.sleepers(), 0);
}

TEST_F(LivenessTest, StopReleasesAThreadInAHungProbe) {
  // A probe stuck past its deadline is the library's to end (NvmlGpuLibrary's lanes give
  // up at the deadline); Stop waits for that, and only that.
  library_.Hang(0);
  LivenessMonitor monitor(&library_, &store_, Options());
  monitor.Start();
  ASSERT_TRUE(library_.AwaitBlockedCalls(1));
  std::thread stopper([&] { monitor.Stop(); });
  clock_.Advance(kProbeTimeout);
  stopper.join();
  EXPECT_EQ(State(kGpu0), state::HealthState::kUnhealthy);
}

// A monitor rebuilt by a reload while a GPU is out takes over the old one's timer: the GPU
// comes back after the new monitor's quiet period. A fresh monitor alone would never clear
// the condition it did not raise.
TEST_F(LivenessTest, AMonitorThatAdoptsItsPredecessorBringsTheGpuBack) {
  library_.FailNvml(0, NVML_ERROR_GPU_IS_LOST);
  Round();
  ASSERT_EQ(State(kGpu0), state::HealthState::kUnhealthy);
  library_.Heal(0);
  LivenessMonitor::Options shorter = Options();
  shorter.quiet_period = kQuiet / 2;
  LivenessMonitor fresh(&library_, &store_, shorter);
  LivenessMonitor adopted(&library_, &store_, shorter);
  adopted.AdoptFrom(monitor_);
  clock_.Advance(kQuiet / 2);
  fresh.ProbeOnce();
  EXPECT_EQ(State(kGpu0), state::HealthState::kUnhealthy) << "a fresh monitor knows no timer";
  adopted.ProbeOnce();
  EXPECT_EQ(State(kGpu0), state::HealthState::kHealthy);
}

}  // namespace
}  // namespace gpulet::health
