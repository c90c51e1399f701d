// XidPolicy's rules, with explicit times: which XIDs take a GPU out, which are only counted,
// de-duplication of the two sources, and the quiet period.
#include "health/xid_policy.h"

#include <set>
#include <string>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "health/xid_catalog.h"

namespace gpulet {
namespace {

using ::testing::HasSubstr;

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);
constexpr absl::Duration kQuiet = absl::Minutes(5);

// The catalogue facts these tests rely on, checked so that a catalogue change shows here as
// what it is rather than as a policy failure.
constexpr int kFatalXid = 79;        // fallen off the bus
constexpr int kWarningXid = 8;       // idle timeout
constexpr int kApplicationXid = 13;  // graphics engine exception

class XidPolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(DescribeXid(kFatalXid).severity, XidSeverity::kFatal);
    ASSERT_EQ(DescribeXid(kWarningXid).severity, XidSeverity::kWarning);
    ASSERT_EQ(DescribeXid(kApplicationXid).severity, XidSeverity::kApplication);
    Inventory inv;
    for (unsigned i = 0; i < 2; ++i) {
      Gpu g;
      g.index = i;
      g.uuid = i == 0 ? "GPU-a" : "GPU-b";
      g.bus_id = i == 0 ? "0000:01:00.0" : "0000:02:00.0";
      g.in_nvml = g.on_pci = true;
      inv.gpus.push_back(g);
    }
    store_.SetInventory(inv, kT0);
  }

  const GpuHealth& Health(size_t i) {
    snap_ = store_.Get();
    return snap_->devices[i].health;
  }
  uint64_t Count(size_t i, int xid) {
    const GpuHealth& h = Health(i);
    auto it = h.xid_counts.find(xid);
    return it == h.xid_counts.end() ? 0 : it->second;
  }

  DeviceStore store_;
  XidPolicy policy_{&store_, {13, 31, 43, 45, 68, 94}, kQuiet};
  std::shared_ptr<const Snapshot> snap_;
};

TEST_F(XidPolicyTest, FatalXidTakesOutTheNamedGpuOnly) {
  // Every way the sources name a GPU reaches the same one.
  for (const char* name :
       {"GPU-b", "index:1", "0000:02:00.0", "00000000:02:00.0", "02:00.0", "PCI:0000:02:00"}) {
    DeviceStore store;
    store.SetInventory(
        [&] {
          Inventory inv;
          for (unsigned i = 0; i < 2; ++i) {
            Gpu g;
            g.index = i;
            g.uuid = i == 0 ? "GPU-a" : "GPU-b";
            g.bus_id = i == 0 ? "0000:01:00.0" : "0000:02:00.0";
            g.in_nvml = g.on_pci = true;
            inv.gpus.push_back(g);
          }
          return inv;
        }(),
        kT0);
    XidPolicy policy(&store, {13}, kQuiet);
    ASSERT_TRUE(policy.OnXid(name, kFatalXid, "GPU has fallen off the bus.", "kmsg", kT0)) << name;
    std::shared_ptr<const Snapshot> s = store.Get();
    EXPECT_EQ(s->devices[0].health.state, HealthState::kHealthy) << name;
    const GpuHealth& b = s->devices[1].health;
    EXPECT_EQ(b.state, HealthState::kUnhealthy) << name;
    EXPECT_TRUE(b.Has("xid")) << name;
    EXPECT_THAT(b.reason, HasSubstr("XID 79")) << name;
    EXPECT_THAT(b.reason, HasSubstr("[GPU has fallen off the bus.]")) << name;
    EXPECT_FALSE(b.action.empty()) << name;
    EXPECT_EQ(b.last_xid, kFatalXid) << name;
    EXPECT_EQ(b.xid_counts.at(kFatalXid), 1u) << name;
  }
}

TEST_F(XidPolicyTest, SeverityTable) {
  struct Case {
    std::set<int> application;
    int xid;
    HealthState want;
  };
  const Case kCases[] = {
      {{13}, kFatalXid, HealthState::kUnhealthy},
      {{13}, kWarningXid, HealthState::kDegraded},
      {{13}, kApplicationXid, HealthState::kHealthy},
      // health.applicationXids decides: a listed XID is only counted, even a fatal one...
      {{kFatalXid}, kFatalXid, HealthState::kHealthy},
      {{kWarningXid}, kWarningXid, HealthState::kHealthy},
      // ...and one the catalogue calls the application's never takes a GPU out.
      {{}, kApplicationXid, HealthState::kHealthy},
  };
  for (const Case& c : kCases) {
    DeviceStore store;
    Inventory inv;
    Gpu g;
    g.index = 0;
    g.uuid = "GPU-a";
    g.bus_id = "0000:01:00.0";
    g.in_nvml = g.on_pci = true;
    inv.gpus = {g};
    store.SetInventory(inv, kT0);
    XidPolicy policy(&store, c.application, kQuiet);
    EXPECT_TRUE(policy.OnXid("GPU-a", c.xid, "", "nvml", kT0)) << c.xid;
    const GpuHealth& h = store.Get()->devices[0].health;
    EXPECT_EQ(h.state, c.want) << "XID " << c.xid;
    EXPECT_EQ(h.xid_counts.at(c.xid), 1u) << "XID " << c.xid << " is always counted";
    EXPECT_EQ(h.last_xid, c.xid);
  }
}

TEST_F(XidPolicyTest, ApplicationXidsAreOnlyCounted) {
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(policy_.OnXid("GPU-a", kApplicationXid, "", "nvml", kT0 + absl::Seconds(i)));
  }
  EXPECT_EQ(Health(0).state, HealthState::kHealthy);
  EXPECT_FALSE(Health(0).Has("xid"));
  EXPECT_EQ(Count(0, kApplicationXid), 3u);
  // Nor do they hold a GPU out longer: the quiet period runs from the last fatal one.
  ASSERT_TRUE(policy_.OnXid("GPU-a", kFatalXid, "", "nvml", kT0 + absl::Seconds(10)));
  ASSERT_TRUE(policy_.OnXid("GPU-a", kApplicationXid, "", "nvml", kT0 + absl::Minutes(4)));
  policy_.Tick(kT0 + absl::Seconds(10) + kQuiet);
  EXPECT_EQ(Health(0).state, HealthState::kHealthy);
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
    DeviceStore store;
    Inventory inv;
    Gpu g;
    g.index = 0;
    g.uuid = "GPU-a";
    g.bus_id = "0000:01:00.0";
    g.in_nvml = g.on_pci = true;
    inv.gpus = {g};
    store.SetInventory(inv, kT0);
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
  EXPECT_EQ(Health(0).state, HealthState::kUnhealthy);
  policy_.Tick(kT0 + kQuiet);
  EXPECT_EQ(Health(0).state, HealthState::kHealthy);
  EXPECT_FALSE(Health(0).Has("xid"));
  EXPECT_EQ(Count(0, kFatalXid), 1u) << "the count outlives the condition";
}

TEST_F(XidPolicyTest, ANewXidRestartsTheQuietPeriod) {
  ASSERT_TRUE(policy_.OnXid("GPU-a", kFatalXid, "", "nvml", kT0));
  ASSERT_TRUE(policy_.OnXid("GPU-a", kWarningXid, "", "nvml", kT0 + absl::Minutes(3)));
  policy_.Tick(kT0 + kQuiet);
  EXPECT_EQ(Health(0).state, HealthState::kUnhealthy);
  policy_.Tick(kT0 + absl::Minutes(3) + kQuiet);
  EXPECT_EQ(Health(0).state, HealthState::kHealthy);
}

TEST_F(XidPolicyTest, AWarningAfterAFatalXidKeepsTheGpuOut) {
  ASSERT_TRUE(policy_.OnXid("GPU-a", kFatalXid, "", "nvml", kT0));
  ASSERT_TRUE(policy_.OnXid("GPU-a", kWarningXid, "", "nvml", kT0 + absl::Seconds(1)));
  EXPECT_EQ(Health(0).state, HealthState::kUnhealthy);
  EXPECT_THAT(Health(0).reason, HasSubstr("XID 79"));
  // The other order: a fatal XID after a warning takes the GPU out.
  ASSERT_TRUE(policy_.OnXid("GPU-b", kWarningXid, "", "nvml", kT0));
  EXPECT_EQ(Health(1).state, HealthState::kDegraded);
  ASSERT_TRUE(policy_.OnXid("GPU-b", kFatalXid, "", "nvml", kT0 + absl::Seconds(1)));
  EXPECT_EQ(Health(1).state, HealthState::kUnhealthy);
}

TEST_F(XidPolicyTest, TickLeavesOtherSourcesAndQuietGpusAlone) {
  ASSERT_TRUE(store_.UpdateHealth("GPU-a", [](GpuHealth& h) {
    h.Raise("liveness", {HealthState::kUnhealthy, "hung", "reset", kT0}, kT0);
  }));
  uint64_t version = store_.Get()->version;
  policy_.Tick(kT0 + absl::Hours(1));
  EXPECT_EQ(store_.Get()->version, version) << "nothing to clear, nothing published";
  EXPECT_EQ(Health(0).state, HealthState::kUnhealthy);
}

TEST_F(XidPolicyTest, UnknownGpusAreIgnored) {
  uint64_t version = store_.Get()->version;
  for (const char* name : {"0000:99:00.0", "index:7", "GPU-zzz", "", "garbage"}) {
    EXPECT_FALSE(policy_.OnXid(name, kFatalXid, "", "kmsg", kT0)) << name;
  }
  EXPECT_EQ(store_.Get()->version, version);
  EXPECT_EQ(Health(0).state, HealthState::kHealthy);
  EXPECT_EQ(Health(1).state, HealthState::kHealthy);
}

}  // namespace
}  // namespace gpulet
