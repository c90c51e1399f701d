// XidPolicy's rules, with explicit times: which XIDs take a GPU out, which are only counted,
// de-duplication of the two sources, and the quiet period.
#include "health/xid_policy.h"

#include <filesystem>
#include <memory>
#include <set>
#include <string>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "health/xid_catalog.h"
#include "health/xid_history.h"
#include "testing/fake_xid_history_store.h"
#include "testing/files.h"
#include "testing/simulated_clock.h"

namespace gpulet::health {
namespace {

using ::testing::HasSubstr;

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);
constexpr absl::Duration kQuiet = absl::Minutes(5);

// The catalogue facts these tests rely on, checked so that a catalogue change shows here as
// what it is rather than as a policy failure.
constexpr int kFatalXid = 79;        // fallen off the bus
constexpr int kWarningXid = 8;       // idle timeout
constexpr int kApplicationXid = 13;  // graphics engine exception

// The first `count` of two GPUs, "GPU-a" at 0000:01:00.0 and "GPU-b" at 0000:02:00.0, both
// seen by NVML and on the PCI bus.
gpu::Inventory Gpus(unsigned count) {
  gpu::Inventory inv;
  for (unsigned i = 0; i < count; ++i) {
    gpu::Gpu g;
    g.index = i;
    g.uuid = i == 0 ? "GPU-a" : "GPU-b";
    g.bus_id = i == 0 ? "0000:01:00.0" : "0000:02:00.0";
    g.in_nvml = g.on_pci = true;
    inv.gpus.push_back(g);
  }
  return inv;
}
gpu::Inventory OneGpu() { return Gpus(1); }
gpu::Inventory TwoGpus() { return Gpus(2); }

class XidPolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(DescribeXid(kFatalXid).severity, XidSeverity::kFatal);
    ASSERT_EQ(DescribeXid(kWarningXid).severity, XidSeverity::kWarning);
    ASSERT_EQ(DescribeXid(kApplicationXid).severity, XidSeverity::kApplication);
    store_.SetInventory(TwoGpus(), kT0);
  }

  const state::GpuHealth& Health(size_t i) {
    snap_ = store_.Get();
    return snap_->devices[i].health;
  }
  uint64_t Count(size_t i, int xid) {
    const state::GpuHealth& h = Health(i);
    auto it = h.xid_counts.find(xid);
    return it == h.xid_counts.end() ? 0 : it->second;
  }

  state::DeviceStore store_;
  XidPolicy policy_{&store_, {13, 31, 43, 45, 68, 94}, kQuiet};
  std::shared_ptr<const state::Snapshot> snap_;
};

TEST_F(XidPolicyTest, FatalXidTakesOutTheNamedGpuOnly) {
  // Every way the sources name a GPU reaches the same one.
  for (const char* name :
       {"GPU-b", "index:1", "0000:02:00.0", "00000000:02:00.0", "02:00.0", "PCI:0000:02:00"}) {
    state::DeviceStore store;
    store.SetInventory(TwoGpus(), kT0);
    XidPolicy policy(&store, {13}, kQuiet);
    ASSERT_TRUE(policy.OnXid(name, kFatalXid, "GPU has fallen off the bus.", "kmsg", kT0)) << name;
    std::shared_ptr<const state::Snapshot> s = store.Get();
    EXPECT_EQ(s->devices[0].health.state, state::HealthState::kHealthy) << name;
    const state::GpuHealth& b = s->devices[1].health;
    EXPECT_EQ(b.state, state::HealthState::kUnhealthy) << name;
    EXPECT_TRUE(b.Has("xid")) << name;
    EXPECT_THAT(b.reason, HasSubstr("XID 79")) << name;
    EXPECT_THAT(b.reason, HasSubstr("[GPU has fallen off the bus.]")) << name;
    EXPECT_FALSE(b.action.empty()) << name;
    EXPECT_EQ(b.last_xid, kFatalXid) << name;
    EXPECT_EQ(b.xid_counts.at(kFatalXid), 1u) << name;
  }
}

// A policy rebuilt by a reload while a GPU is out takes over the old one's timer: the GPU
// comes back after the new quiet period, not before; a duplicate from the other
// source is still recognised; and the XID reaches the recorder's hook with its GPU's UUID.
TEST_F(XidPolicyTest, APolicyThatAdoptsItsPredecessorBringsTheGpuBackAndTellsTheHook) {
  std::vector<std::pair<std::string, int>> told;
  XidPolicyOptions o;
  o.on_xid = [&](const std::string& gpu, int xid, const std::string&, absl::Time) {
    told.push_back({gpu, xid});
  };
  XidPolicy first(&store_, {13}, kQuiet, o);
  ASSERT_TRUE(first.OnXid("0000:02:00.0", kFatalXid, "GPU has fallen off the bus.", "kmsg", kT0));
  EXPECT_THAT(told, ::testing::ElementsAre(std::pair<std::string, int>{"GPU-b", kFatalXid}));
  XidPolicy second(&store_, {13}, kQuiet / 2);
  second.AdoptFrom(first);
  EXPECT_FALSE(second.OnXid("index:1", kFatalXid, "", "nvml", kT0 + absl::Seconds(1)))
      << "the NVML copy of the kernel log's XID is a duplicate";
  second.Tick(kT0 + kQuiet / 2 - absl::Seconds(1));
  EXPECT_TRUE(Health(1).Has("xid"));
  second.Tick(kT0 + kQuiet / 2 + absl::Seconds(1));
  EXPECT_FALSE(Health(1).Has("xid"));
  // Without adopting, a new policy knows no timer and lets the GPU back at once.
  ASSERT_TRUE(first.OnXid("GPU-a", kFatalXid, "", "kmsg", kT0));
  XidPolicy blind(&store_, {13}, kQuiet / 2);
  blind.Tick(kT0 + absl::Seconds(1));
  EXPECT_FALSE(Health(0).Has("xid"));
}

TEST_F(XidPolicyTest, SeverityTable) {
  struct Case {
    std::set<int> application;
    int xid;
    state::HealthState want;
  };
  const Case kCases[] = {
      {{13}, kFatalXid, state::HealthState::kUnhealthy},
      {{13}, kWarningXid, state::HealthState::kDegraded},
      {{13}, kApplicationXid, state::HealthState::kHealthy},
      // health.applicationXids decides: a listed XID is only counted, even a fatal one...
      {{kFatalXid}, kFatalXid, state::HealthState::kHealthy},
      {{kWarningXid}, kWarningXid, state::HealthState::kHealthy},
      // ...and one the catalogue calls the application's never takes a GPU out.
      {{}, kApplicationXid, state::HealthState::kHealthy},
  };
  for (const Case& c : kCases) {
    state::DeviceStore store;
    store.SetInventory(OneGpu(), kT0);
    XidPolicy policy(&store, c.application, kQuiet);
    EXPECT_TRUE(policy.OnXid("GPU-a", c.xid, "", "nvml", kT0)) << c.xid;
    const state::GpuHealth& h = store.Get()->devices[0].health;
    EXPECT_EQ(h.state, c.want) << "XID " << c.xid;
    EXPECT_EQ(h.xid_counts.at(c.xid), 1u) << "XID " << c.xid << " is always counted";
    EXPECT_EQ(h.last_xid, c.xid);
    // The description metrics/ prints as dcgm-exporter's err_msg, from the catalogue.
    ASSERT_NE(FindXid(c.xid), nullptr);
    EXPECT_EQ(h.last_xid_message, FindXid(c.xid)->meaning) << "XID " << c.xid;
  }
}

// A code the catalogue does not list is described as dcgm-exporter describes one it lacks.
TEST_F(XidPolicyTest, AnUnlistedXidIsAnUnknownError) {
  state::DeviceStore store;
  gpu::Inventory inv;
  gpu::Gpu g;
  g.index = 0;
  g.uuid = "GPU-a";
  g.bus_id = "0000:01:00.0";
  g.in_nvml = g.on_pci = true;
  inv.gpus = {g};
  store.SetInventory(inv, kT0);
  XidPolicy policy(&store, {}, kQuiet);
  ASSERT_EQ(FindXid(999), nullptr);
  EXPECT_TRUE(policy.OnXid("GPU-a", 999, "", "nvml", kT0));
  EXPECT_EQ(store.Get()->devices[0].health.last_xid, 999);
  EXPECT_EQ(store.Get()->devices[0].health.last_xid_message, "Unknown Error");
}

TEST_F(XidPolicyTest, ApplicationXidsAreOnlyCounted) {
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(policy_.OnXid("GPU-a", kApplicationXid, "", "nvml", kT0 + absl::Seconds(i)));
  }
  EXPECT_EQ(Health(0).state, state::HealthState::kHealthy);
  EXPECT_FALSE(Health(0).Has("xid"));
  EXPECT_EQ(Count(0, kApplicationXid), 3u);
  // Nor do they hold a GPU out longer: the quiet period runs from the last fatal one.
  ASSERT_TRUE(policy_.OnXid("GPU-a", kFatalXid, "", "nvml", kT0 + absl::Seconds(10)));
  ASSERT_TRUE(policy_.OnXid("GPU-a", kApplicationXid, "", "nvml", kT0 + absl::Minutes(4)));
  policy_.Tick(kT0 + absl::Seconds(10) + kQuiet);
  EXPECT_EQ(Health(0).state, state::HealthState::kHealthy);
}

TEST_F(XidPolicyTest, TheTwoSourcesWithinTwoSecondsCountOnce) {
  struct Case {
    const char* first_source;
    const char* first_name;
    const char* second_source;
    const char* second_name;
    absl::Duration gap;
    bool second_counts;
  };
  const Case kCases[] = {
      // NVML names GPUs by index, the kernel log by bus id: the same GPU either way.
      {"nvml", "index:0", "kmsg", "0000:01:00.0", absl::ZeroDuration(), false},
      {"nvml", "index:0", "kmsg", "0000:01:00.0", absl::Milliseconds(1999), false},
      {"kmsg", "0000:01:00.0", "nvml", "index:0", absl::Seconds(1), false},
      {"nvml", "index:0", "kmsg", "0000:01:00.0", absl::Seconds(2), true},
      {"nvml", "index:0", "kmsg", "0000:01:00.0", absl::Seconds(3), true},
      // One source repeating itself is a real repeat.
      {"kmsg", "0000:01:00.0", "kmsg", "0000:01:00.0", absl::ZeroDuration(), true},
      {"nvml", "index:0", "nvml", "GPU-a", absl::Milliseconds(10), true},
  };
  for (const Case& c : kCases) {
    state::DeviceStore store;
    store.SetInventory(OneGpu(), kT0);
    XidPolicy policy(&store, {13}, kQuiet);
    std::string what = std::string(c.first_source) + " then " + c.second_source + " after " +
                       absl::FormatDuration(c.gap);
    EXPECT_TRUE(policy.OnXid(c.first_name, kFatalXid, "", c.first_source, kT0)) << what;
    EXPECT_EQ(policy.OnXid(c.second_name, kFatalXid, "", c.second_source, kT0 + c.gap),
              c.second_counts)
        << what;
    EXPECT_EQ(store.Get()->devices[0].health.xid_counts.at(kFatalXid), c.second_counts ? 2u : 1u)
        << what;
  }
}

TEST_F(XidPolicyTest, DeduplicationIsPerGpuAndPerXid) {
  EXPECT_TRUE(policy_.OnXid("index:0", kFatalXid, "", "nvml", kT0));
  EXPECT_TRUE(policy_.OnXid("0000:02:00.0", kFatalXid, "", "kmsg", kT0));    // another GPU
  EXPECT_TRUE(policy_.OnXid("0000:01:00.0", kWarningXid, "", "kmsg", kT0));  // another XID
  EXPECT_EQ(Count(0, kFatalXid), 1u);
  EXPECT_EQ(Count(1, kFatalXid), 1u);
  EXPECT_EQ(Count(0, kWarningXid), 1u);
  // The window runs from the counted report, not from the dropped duplicate.
  EXPECT_FALSE(policy_.OnXid("0000:01:00.0", kFatalXid, "", "kmsg", kT0 + absl::Seconds(1)));
  EXPECT_TRUE(policy_.OnXid("0000:01:00.0", kFatalXid, "", "kmsg", kT0 + absl::Seconds(2)));
  EXPECT_EQ(Count(0, kFatalXid), 2u);
}

TEST_F(XidPolicyTest, ConditionClearsAfterTheQuietPeriodAndNotBefore) {
  ASSERT_TRUE(policy_.OnXid("GPU-a", kFatalXid, "", "nvml", kT0));
  policy_.Tick(kT0 + kQuiet - absl::Nanoseconds(1));
  EXPECT_EQ(Health(0).state, state::HealthState::kUnhealthy);
  policy_.Tick(kT0 + kQuiet);
  EXPECT_EQ(Health(0).state, state::HealthState::kHealthy);
  EXPECT_FALSE(Health(0).Has("xid"));
  EXPECT_EQ(Count(0, kFatalXid), 1u) << "the count outlives the condition";
}

TEST_F(XidPolicyTest, ANewXidRestartsTheQuietPeriod) {
  ASSERT_TRUE(policy_.OnXid("GPU-a", kFatalXid, "", "nvml", kT0));
  ASSERT_TRUE(policy_.OnXid("GPU-a", kWarningXid, "", "nvml", kT0 + absl::Minutes(3)));
  policy_.Tick(kT0 + kQuiet);
  EXPECT_EQ(Health(0).state, state::HealthState::kUnhealthy);
  policy_.Tick(kT0 + absl::Minutes(3) + kQuiet);
  EXPECT_EQ(Health(0).state, state::HealthState::kHealthy);
}

TEST_F(XidPolicyTest, AWarningAfterAFatalXidKeepsTheGpuOut) {
  ASSERT_TRUE(policy_.OnXid("GPU-a", kFatalXid, "", "nvml", kT0));
  ASSERT_TRUE(policy_.OnXid("GPU-a", kWarningXid, "", "nvml", kT0 + absl::Seconds(1)));
  EXPECT_EQ(Health(0).state, state::HealthState::kUnhealthy);
  EXPECT_THAT(Health(0).reason, HasSubstr("XID 79"));
  // The other order: a fatal XID after a warning takes the GPU out.
  ASSERT_TRUE(policy_.OnXid("GPU-b", kWarningXid, "", "nvml", kT0));
  EXPECT_EQ(Health(1).state, state::HealthState::kDegraded);
  ASSERT_TRUE(policy_.OnXid("GPU-b", kFatalXid, "", "nvml", kT0 + absl::Seconds(1)));
  EXPECT_EQ(Health(1).state, state::HealthState::kUnhealthy);
}

TEST_F(XidPolicyTest, TickLeavesOtherSourcesAndQuietGpusAlone) {
  ASSERT_TRUE(store_.UpdateHealth("GPU-a", [](state::GpuHealth& h) {
    h.Raise("liveness", {state::HealthState::kUnhealthy, "hung", "reset", kT0}, kT0);
  }));
  uint64_t version = store_.Get()->version;
  policy_.Tick(kT0 + absl::Hours(1));
  EXPECT_EQ(store_.Get()->version, version) << "nothing to clear, nothing published";
  EXPECT_EQ(Health(0).state, state::HealthState::kUnhealthy);
}

TEST_F(XidPolicyTest, UnknownGpusAreIgnored) {
  uint64_t version = store_.Get()->version;
  for (const char* name : {"0000:99:00.0", "index:7", "GPU-zzz", "", "garbage"}) {
    EXPECT_FALSE(policy_.OnXid(name, kFatalXid, "", "kmsg", kT0)) << name;
  }
  EXPECT_EQ(store_.Get()->version, version);
  EXPECT_EQ(Health(0).state, state::HealthState::kHealthy);
  EXPECT_EQ(Health(1).state, state::HealthState::kHealthy);
}

// XID 154 and the repeat history, driven by a SimulatedClock and a fake history store.
class XidRecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(DescribeXid(79).action, GpuAction::kRebootNode);
    ASSERT_EQ(DescribeXid(48).action, GpuAction::kResetGpu);
    ASSERT_EQ(DescribeXid(63).action, GpuAction::kNone);
    store_.SetInventory(OneGpu(), clock_.Now());
  }

  std::unique_ptr<XidPolicy> Policy(const std::string& boot_id) {
    return std::make_unique<XidPolicy>(&store_, std::set<int>{13}, kQuiet,
                                       XidPolicyOptions{&history_, boot_id});
  }
  const state::GpuHealth& Health() {
    snap_ = store_.Get();
    return snap_->devices[0].health;
  }
  absl::Time Now() { return clock_.Now(); }

  testing::SimulatedClock clock_;
  testing::FakeXidHistoryStore history_;
  state::DeviceStore store_;
  std::shared_ptr<const state::Snapshot> snap_;
};

TEST_F(XidRecoveryTest, Xid154AnnouncedActionOverridesTheCatalogue) {
  auto policy = Policy("boot-1");
  // XID 63 alone asks for nothing (Degraded); the driver then says a reset is required.
  ASSERT_TRUE(
      policy->OnXid("GPU-a", 63, "Row Remapper: New row marked for remapping", "kmsg", Now()));
  EXPECT_EQ(Health().state, state::HealthState::kDegraded);
  clock_.Advance(absl::Milliseconds(5));
  ASSERT_TRUE(policy->OnXid(
      "GPU-a", 154, "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
      "kmsg", Now()));
  EXPECT_EQ(Health().state, state::HealthState::kUnhealthy);
  EXPECT_EQ(Health().action, GpuActionDescription(GpuAction::kResetGpu));
  EXPECT_THAT(Health().reason, HasSubstr("the driver asks for reset-gpu after XID 63"));
  // Then a node reboot: the stronger announcement replaces the action.
  clock_.Advance(absl::Milliseconds(5));
  ASSERT_TRUE(policy->OnXid(
      "GPU-a", 154,
      "GPU recovery action changed from 0x1 (GPU Reset Required) to 0x2 (Node Reboot Required)",
      "kmsg", Now()));
  EXPECT_EQ(Health().action, GpuActionDescription(GpuAction::kRebootNode));
  // "Drain P2P" is lighter: the driver's word wins, the GPU stays scheduled (Degraded).
  clock_.Advance(absl::Milliseconds(5));
  ASSERT_TRUE(policy->OnXid(
      "GPU-a", 154,
      "GPU recovery action changed from 0x2 (Node Reboot Required) to 0x3 (Drain P2P)", "kmsg",
      Now()));
  EXPECT_EQ(Health().state, state::HealthState::kDegraded);
  EXPECT_EQ(Health().action, GpuActionDescription(GpuAction::kRestartApp));
  // "None" is the all-clear: the condition goes without waiting for the quiet period.
  clock_.Advance(absl::Milliseconds(5));
  ASSERT_TRUE(policy->OnXid("GPU-a", 154,
                            "GPU recovery action changed from 0x3 (Drain P2P) to 0x0 (None)",
                            "kmsg", Now()));
  EXPECT_EQ(Health().state, state::HealthState::kHealthy);
  EXPECT_FALSE(Health().Has("xid"));
  // An XID 154 line naming no action falls back to the catalogue's entry (a warning).
  clock_.Advance(absl::Milliseconds(5));
  ASSERT_TRUE(policy->OnXid("GPU-a", 154, "something unexpected", "kmsg", Now()));
  EXPECT_EQ(Health().state, state::HealthState::kDegraded);
}

TEST_F(XidRecoveryTest, SameXidAfterTheRecommendedRebootMeansInspectHardware) {
  {
    auto policy = Policy("boot-1");
    ASSERT_TRUE(policy->OnXid("GPU-a", 79, "GPU has fallen off the bus.", "kmsg", Now()));
    EXPECT_EQ(Health().action, GpuActionDescription(GpuAction::kRebootNode));
    // The same XID again in the same boot is not a repeat after recovery.
    clock_.Advance(absl::Seconds(3));
    ASSERT_TRUE(policy->OnXid("GPU-a", 79, "GPU has fallen off the bus.", "kmsg", Now()));
    EXPECT_EQ(Health().action, GpuActionDescription(GpuAction::kRebootNode));
    // Nor does the quiet period passing count as the reboot.
    clock_.Advance(kQuiet);
    policy->Tick(Now());
    EXPECT_EQ(Health().state, state::HealthState::kHealthy);
    clock_.Advance(absl::Milliseconds(1));
    ASSERT_TRUE(policy->OnXid("GPU-a", 79, "GPU has fallen off the bus.", "kmsg", Now()));
    EXPECT_EQ(Health().action, GpuActionDescription(GpuAction::kRebootNode));
    EXPECT_EQ(history_.saved.at("GPU-a").at(79).count, 3);
  }
  // gpulet restarts after the node rebooted (a new boot id), with a fresh store state.
  store_.UpdateHealth("GPU-a", [&](state::GpuHealth& h) { h.Clear("xid", Now()); });
  auto policy = Policy("boot-2");
  EXPECT_TRUE(policy->HistoryStatus().ok());
  clock_.Advance(absl::Minutes(10));
  ASSERT_TRUE(policy->OnXid("GPU-a", 79, "GPU has fallen off the bus.", "kmsg", Now()));
  EXPECT_EQ(Health().state, state::HealthState::kUnhealthy);
  EXPECT_EQ(Health().action, GpuActionDescription(GpuAction::kInspectHardware));
  EXPECT_THAT(Health().reason, HasSubstr("came back after the recommended node reboot"));
  EXPECT_THAT(Health().reason, HasSubstr("seen 4 times"));
  EXPECT_EQ(history_.saved.at("GPU-a").at(79).boot_id, "boot-2");
}

TEST_F(XidRecoveryTest, SameXidAfterTheRecommendedResetMeansInspectHardware) {
  auto policy = Policy("boot-1");
  ASSERT_TRUE(policy->OnXid("GPU-a", 48, "DBE (double bit error) ECC error", "kmsg", Now()));
  EXPECT_EQ(Health().action, GpuActionDescription(GpuAction::kResetGpu));
  // The GPU comes back into service after the quiet period: the reset counts as done.
  clock_.Advance(kQuiet);
  policy->Tick(Now());
  EXPECT_EQ(Health().state, state::HealthState::kHealthy);
  EXPECT_TRUE(history_.saved.at("GPU-a").at(48).recovered);
  // Another XID does not escalate; the same one does.
  clock_.Advance(absl::Milliseconds(1));
  ASSERT_TRUE(policy->OnXid("GPU-a", 46, "", "kmsg", Now()));
  EXPECT_EQ(Health().action, GpuActionDescription(GpuAction::kResetGpu));
  clock_.Advance(absl::Milliseconds(1));
  ASSERT_TRUE(policy->OnXid("GPU-a", 48, "DBE (double bit error) ECC error", "kmsg", Now()));
  EXPECT_EQ(Health().action, GpuActionDescription(GpuAction::kInspectHardware));
  EXPECT_THAT(Health().reason, HasSubstr("came back after the recommended GPU reset"));
}

// The reset rung's reset is the recovery itself: the same XID right after it, before any
// quiet period, is a repeat; the condition a reset clears says so, and the escalated one
// does not (so the rung does not reset a failing card again and again).
TEST_F(XidRecoveryTest, AResetByTheRungCountsAsTheRecommendedReset) {
  auto policy = Policy("boot-1");
  ASSERT_TRUE(policy->OnXid("GPU-a", 48, "DBE (double bit error) ECC error", "kmsg", Now()));
  EXPECT_TRUE(Health().conditions.at("xid").reset_clears);
  policy->NoteReset("GPU-a");
  EXPECT_TRUE(history_.saved.at("GPU-a").at(48).recovered);
  policy->NoteReset("GPU-unknown");  // nothing to do, no harm
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(policy->OnXid("GPU-a", 48, "DBE (double bit error) ECC error", "kmsg", Now()));
  EXPECT_EQ(Health().action, GpuActionDescription(GpuAction::kInspectHardware));
  EXPECT_FALSE(Health().conditions.at("xid").reset_clears);
}

TEST_F(XidRecoveryTest, TheDriversAllClearCountsAsTheRecovery) {
  auto policy = Policy("");  // boot id unknown: only the driver or a quiet period tells
  ASSERT_TRUE(policy->OnXid("GPU-a", 95, "", "kmsg", Now()));
  clock_.Advance(absl::Milliseconds(1));
  ASSERT_TRUE(policy->OnXid("GPU-a", 154,
                            "GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 "
                            "(None)",
                            "kmsg", Now()));
  EXPECT_EQ(Health().state, state::HealthState::kHealthy);
  clock_.Advance(absl::Milliseconds(1));
  ASSERT_TRUE(policy->OnXid("GPU-a", 95, "", "kmsg", Now()));
  EXPECT_EQ(Health().action, GpuActionDescription(GpuAction::kInspectHardware));
}

TEST_F(XidRecoveryTest, XidsThatNeedNoRecoveryNeverEscalate) {
  auto policy = Policy("boot-1");
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(policy->OnXid("GPU-a", 92, "", "kmsg", Now()));  // IGNORE bucket
    clock_.Advance(kQuiet);
    policy->Tick(Now());
  }
  auto restarted = Policy("boot-2");
  ASSERT_TRUE(restarted->OnXid("GPU-a", 92, "", "kmsg", Now()));
  EXPECT_EQ(Health().state, state::HealthState::kDegraded);
  EXPECT_EQ(history_.saved.at("GPU-a").at(92).count, 4);
  // Application XIDs are counted on the GPU but never enter the history.
  ASSERT_TRUE(restarted->OnXid("GPU-a", 13, "", "kmsg", Now()));
  EXPECT_EQ(history_.saved.at("GPU-a").count(13), 0u);
}

TEST_F(XidRecoveryTest, AnUnloadableHistoryIsReportedAndThePolicyGoesOn) {
  history_.load_error = absl::InvalidArgumentError("XID history /x: not valid JSON");
  auto policy = Policy("boot-1");
  EXPECT_EQ(policy->HistoryStatus().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(policy->History().empty());
  ASSERT_TRUE(policy->OnXid("GPU-a", 79, "", "kmsg", Now()));
  EXPECT_EQ(Health().state, state::HealthState::kUnhealthy);
  // The next save succeeds and replaces the bad file: the status says so.
  EXPECT_TRUE(policy->HistoryStatus().ok());
  EXPECT_EQ(history_.saved.at("GPU-a").at(79).count, 1);
}

TEST_F(XidRecoveryTest, AFailedSaveIsReportedAndThePolicyGoesOn) {
  history_.save_error = absl::PermissionDeniedError("saving the XID history: read-only");
  auto policy = Policy("boot-1");
  ASSERT_TRUE(policy->OnXid("GPU-a", 79, "", "kmsg", Now()));
  EXPECT_EQ(Health().state, state::HealthState::kUnhealthy);
  EXPECT_EQ(policy->HistoryStatus().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(policy->History().at("GPU-a").at(79).count, 1) << "kept in memory";
}

TEST(XidHistoryJsonTest, RoundTrips) {
  XidHistory h;
  h["GPU-a"][79] = {2, 1780000000, "boot-1", true, "reboot-node", false};
  h["0000:02:00.0"][48] = {1, 1780000100, "", true, "reset-gpu", true};
  h["GPU-b"][92] = {5, 1780000200, "boot-1", false, "", false};
  absl::StatusOr<XidHistory> back = XidHistoryFromJson(XidHistoryToJson(h));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, h);
  EXPECT_TRUE(XidHistoryFromJson(XidHistoryToJson({}))->empty());
}

TEST(XidHistoryJsonTest, BadDocumentsSayWhatIsWrong) {
  const std::string kEntry =
      R"({"count":1,"last_seen_unix":1,"boot_id":"b","awaiting_recovery":true,)"
      R"("recovery":"reset-gpu","recovered":false})";
  struct Case {
    std::string text;
    const char* want;
  } cases[] = {
      {"", "not valid JSON"},
      {"garbage{", "not valid JSON"},
      {"[]", "top level is not a JSON object"},
      {R"({"gpus":{}})", "\"version\" is missing"},
      {R"({"version":"1","gpus":{}})", "\"version\" is missing or not an integer"},
      {R"({"version":2,"gpus":{}})", "version 2 is not 1"},
      {R"({"version":1})", "gpus is missing (an object)"},
      {R"({"version":1,"gpus":[]})", "gpus must be an object, not a list"},
      {R"({"version":1,"gpus":{"GPU-a":[]}})", "gpus.GPU-a must be an object of XIDs"},
      {R"({"version":1,"gpus":{"GPU-a":{"x":)" + kEntry + "}}}", "not a positive XID number"},
      {R"({"version":1,"gpus":{"GPU-a":{"-3":)" + kEntry + "}}}", "not a positive XID number"},
      {R"({"version":1,"gpus":{"GPU-a":{"79":5}}})", "gpus.GPU-a.79 must be an object, not 5"},
      {R"({"version":1,"gpus":{"GPU-a":{"79":{"count":"2"}}}})",
       ".count must be a count (0 or more), not the string \"2\""},
      {R"({"version":1,"gpus":{"GPU-a":{"79":{"count":-1}}}})", "a count (0 or more), not -1"},
      {R"({"version":1,"gpus":{},"gpus":{}})", "the key \"gpus\" appears twice"},
      {R"({"version":1,"gpus":{"GPU-a":{"79":{"count":1,"last_seen_unix":1.5}}}})",
       ".last_seen_unix"},
      {R"({"version":1,"gpus":{"GPU-a":{"79":{"count":1,"last_seen_unix":1,"boot_id":3}}}})",
       ".boot_id"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<XidHistory> h = XidHistoryFromJson(c.text);
    ASSERT_FALSE(h.ok()) << c.text;
    EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(h.status().message(), HasSubstr(c.want)) << c.text;
  }
  std::string wrong_recovery = kEntry;
  wrong_recovery.replace(wrong_recovery.find("reset-gpu"), 9, "reboot");
  absl::StatusOr<XidHistory> h =
      XidHistoryFromJson(R"({"version":1,"gpus":{"GPU-a":{"79":)" + wrong_recovery + "}}}");
  ASSERT_FALSE(h.ok());
  EXPECT_THAT(h.status().message(), HasSubstr(".recovery"));
}

TEST(FileXidHistoryStoreTest, SavesLoadsAndRefusesBadFilesWithAFix) {
  testing::ScratchDir dir;
  std::string path = dir.path() + "/state/xid-history.json";
  FileXidHistoryStore store(path);
  // Missing: an empty history, no error.
  absl::StatusOr<XidHistory> h = store.Load();
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_TRUE(h->empty());
  // Saved (creating the directory) and loaded back.
  XidHistory want;
  want["GPU-a"][79] = {1, 1780000000, "boot-1", true, "reboot-node", false};
  ASSERT_TRUE(store.Save(want).ok());
  h = store.Load();
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(*h, want);
  // Garbage and wrong types: an error naming the file and what gpulet does about it.
  for (const char* text : {"garbage", R"({"version":1,"gpus":{"GPU-a":{"79":{"count":"x"}}}})"}) {
    dir.Write("state/xid-history.json", text);
    h = store.Load();
    ASSERT_FALSE(h.ok()) << text;
    EXPECT_THAT(h.status().message(), HasSubstr(path));
    EXPECT_THAT(h.status().message(), HasSubstr("starts with an empty XID history"));
  }
  // A directory where the file should be.
  std::string as_dir = dir.path() + "/dir.json";
  std::filesystem::create_directories(as_dir);
  FileXidHistoryStore dir_store(as_dir);
  h = dir_store.Load();
  ASSERT_FALSE(h.ok());
  EXPECT_THAT(h.status().message(), HasSubstr(as_dir));
  absl::Status saved = dir_store.Save(want);
  ASSERT_FALSE(saved.ok());
  EXPECT_THAT(saved.message(), HasSubstr("saving the XID history"));
  // A policy over the bad file keeps working with an empty history.
  dir.Write("state/xid-history.json", "garbage");
  state::DeviceStore devices;
  devices.SetInventory(OneGpu(), kT0);
  XidPolicy policy(&devices, {13}, kQuiet, XidPolicyOptions{&store, "boot-1"});
  EXPECT_THAT(policy.HistoryStatus().message(), HasSubstr(path));
  EXPECT_TRUE(policy.History().empty());
  ASSERT_TRUE(policy.OnXid("GPU-a", 79, "", "kmsg", kT0));
  EXPECT_EQ(devices.Get()->devices[0].health.state, state::HealthState::kUnhealthy);
  h = store.Load();
  ASSERT_TRUE(h.ok()) << "the next XID replaced the bad file: " << h.status();
  EXPECT_EQ(h->at("GPU-a").at(79).count, 1);
}

}  // namespace
}  // namespace gpulet::health
