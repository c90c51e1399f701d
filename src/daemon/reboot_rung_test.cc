#include "daemon/reboot_rung.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "daemon/gpu_retirement.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/files.h"
#include "testing/rung_pods.h"

namespace gpulet::daemon {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

// Asks nothing of the node: counts, and fails when told to.
class FakeRebooter : public node::NodeRebooter {
 public:
  absl::Status Reboot(absl::string_view why, absl::string_view /*reason*/) override {
    asked.push_back(std::string(why));
    return result;
  }
  std::string Describe() const override { return "the test's rebooter"; }
  absl::Status TakeLateFailure() override { return std::exchange(late, absl::OkStatus()); }
  std::string Progress() const override { return progress; }

  std::vector<std::string> asked;
  absl::Status result = absl::OkStatus();
  absl::Status late = absl::OkStatus();  // what a drain that failed after the request says
  std::string progress;
};

// The seed's homelab: the 5090 fell off the bus at `out_at` (XID 79: a reboot clears it).
state::Snapshot Homelab(absl::Time out_at) {
  state::Snapshot s = testing::RungSnapshot();
  state::HealthCondition lost;
  lost.reason = "XID 79 (GPU_HAS_FALLEN_OFF_THE_BUS): the GPU has fallen off the bus";
  lost.reboot_required = true;
  s.devices[1].health.Raise("xid", lost, out_at);
  return s;
}

config::Config::Health::Reboot Policy(config::RemediationMode mode) {
  config::Config::Health::Reboot p;
  p.mode = mode;
  p.grace = absl::Minutes(10);
  p.max_per_window = 1;
  p.window = absl::Hours(24);
  return p;
}

std::vector<std::string> Reasons(const std::vector<cluster::NodeEvent>& events) {
  std::vector<std::string> out;
  for (const cluster::NodeEvent& e : events) out.push_back(e.reason);
  return out;
}

class RebootRungTest : public ::testing::Test {
 protected:
  std::string path() const { return (fs::path(dir_.path()) / "reboots.json").string(); }

  testing::ScratchDir dir_;
  recorder::RebootRecord record_{path(), "/var/lib/gpulet/reboots.json"};
  FakeRebooter rebooter_;
  const config::Config::Health::Reboot on_ = Policy(config::RemediationMode::kOn);
};

// After the grace, one request, recorded before it is made; the next boot reports the reboot
// done, and a fault that is still there then finds the budget spent.
TEST_F(RebootRungTest, AFaultOnlyARebootClearsAsksOnceAndTheNextBootSaysSo) {
  RebootRung rung("boot-1");
  const state::Snapshot snap = Homelab(kT0);
  EXPECT_TRUE(rung.Next(snap, on_, &record_, &rebooter_, kT0 + absl::Minutes(9)).empty());
  EXPECT_TRUE(rebooter_.asked.empty());
  const absl::Time at = kT0 + absl::Minutes(10);
  std::vector<cluster::NodeEvent> e = rung.Next(snap, on_, &record_, &rebooter_, at);
  EXPECT_EQ(Reasons(e), (std::vector<std::string>{"GpuRebootAsked"}));
  EXPECT_THAT(e[0].note, HasSubstr("GPU-5090 (GPU 1)"));
  ASSERT_EQ(rebooter_.asked.size(), 1u);
  EXPECT_THAT(rebooter_.asked[0], HasSubstr("XID 79"));
  absl::StatusOr<std::vector<recorder::RebootRequest>> kept = record_.Load();
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_EQ(kept->size(), 1u);
  EXPECT_EQ((*kept)[0].boot_id, "boot-1");
  EXPECT_EQ((*kept)[0].outcome, "asked");
  EXPECT_EQ((*kept)[0].gpus, (std::vector<std::string>{"GPU-5090"}));
  EXPECT_EQ(rung.ByGpu().at("GPU-5090").state, "asked");
  EXPECT_FALSE(rung.ByGpu().contains("GPU-3080"));
  EXPECT_EQ(rung.counts().at("asked"), 1u);
  // Outstanding: not asked twice in this boot.
  EXPECT_TRUE(rung.Next(snap, on_, &record_, &rebooter_, at + absl::Hours(2)).empty());
  EXPECT_EQ(rebooter_.asked.size(), 1u);

  // The next boot: the reboot is reported; the card fell off the bus again at once, and the
  // budget (1 a day) is spent: one Event says a person must act.
  RebootRung after("boot-2");
  const absl::Time later = at + absl::Minutes(30);
  e = after.Next(Homelab(later - absl::Minutes(20)), on_, &record_, &rebooter_, later);
  EXPECT_EQ(Reasons(e), (std::vector<std::string>{"GpuNodeRebooted", "GpuRebootNotDone"}));
  EXPECT_THAT(e[1].note, HasSubstr("health.reboot.maxPerWindow"));
  EXPECT_EQ(record_.Load()->at(0).outcome, "rebooted");
  EXPECT_EQ(after.ByGpu().at("GPU-5090").state, "budget-spent");
  EXPECT_TRUE(
      after.Next(Homelab(later), on_, &record_, &rebooter_, later + absl::Hours(1)).empty());
  // A day after the first request, one more may be asked for.
  e = after.Next(Homelab(later), on_, &record_, &rebooter_,
                 at + absl::Hours(24) + absl::Seconds(1));
  EXPECT_EQ(Reasons(e), (std::vector<std::string>{"GpuRebootAsked"}));
  EXPECT_EQ(rebooter_.asked.size(), 2u);
}

TEST_F(RebootRungTest, DryRunSaysItOnceAndAsksNothing) {
  RebootRung rung("boot-1");
  const auto dry = Policy(config::RemediationMode::kDryRun);
  const absl::Time at = kT0 + absl::Hours(1);
  std::vector<cluster::NodeEvent> e = rung.Next(Homelab(kT0), dry, &record_, &rebooter_, at);
  EXPECT_EQ(Reasons(e), (std::vector<std::string>{"GpuWouldReboot"}));
  EXPECT_THAT(e[0].note, HasSubstr("dry-run"));
  EXPECT_TRUE(rung.Next(Homelab(kT0), dry, &record_, &rebooter_, at + absl::Hours(1)).empty());
  EXPECT_TRUE(rebooter_.asked.empty());
  EXPECT_FALSE(fs::exists(path()));
  EXPECT_EQ(rung.ByGpu().at("GPU-5090").state, "would-reboot");
  // Back in service, then out again: said again.
  state::Snapshot healthy = Homelab(kT0);
  healthy.devices[1].health.Clear("xid", at);
  rung.Next(healthy, dry, &record_, &rebooter_, at + absl::Hours(2));
  EXPECT_EQ(Reasons(rung.Next(Homelab(kT0), dry, &record_, &rebooter_, at + absl::Hours(3))),
            (std::vector<std::string>{"GpuWouldReboot"}));
  // Off: nothing at all.
  RebootRung off("boot-1");
  EXPECT_TRUE(
      off.Next(Homelab(kT0), Policy(config::RemediationMode::kOff), &record_, &rebooter_, at)
          .empty());
  EXPECT_TRUE(off.ByGpu().empty());
}

// Only a condition that says a reboot clears it counts, and never on a retired card, a GPU
// without both names, or while NVML is down; an unknown boot or an unreadable record asks
// nothing.
TEST_F(RebootRungTest, NothingIsAskedOnDoubt) {
  const absl::Time at = kT0 + absl::Hours(1);
  auto asks = [&](const state::Snapshot& snap, const std::string& boot = "boot-1") {
    RebootRung rung(boot);
    rung.Next(snap, on_, &record_, &rebooter_, at);
    return !rebooter_.asked.empty();
  };
  state::Snapshot reset_only = Homelab(kT0);
  reset_only.devices[1].health.conditions["xid"].reboot_required = false;
  EXPECT_FALSE(asks(reset_only));
  state::Snapshot retired = Homelab(kT0);
  state::HealthCondition r;
  r.reason = "retired: 3 faults within 168h";
  retired.devices[1].health.Raise(kRetiredSource, r, kT0);
  EXPECT_FALSE(asks(retired));
  for (int drop : {0, 1}) {
    state::Snapshot unnamed = Homelab(kT0);
    (drop == 0 ? unnamed.devices[1].gpu.uuid : unnamed.devices[1].gpu.bus_id).clear();
    EXPECT_FALSE(asks(unnamed));
  }
  state::Snapshot no_nvml = Homelab(kT0);
  no_nvml.nvml_ok = false;
  EXPECT_FALSE(asks(no_nvml));
  EXPECT_FALSE(asks(Homelab(kT0), ""));
  std::ofstream(path()) << "{\"version\": 1, \"reboots\": [{\"at\": 5}]}";
  RebootRung rung("boot-1");
  rung.Next(Homelab(kT0), on_, &record_, &rebooter_, at);
  EXPECT_TRUE(rebooter_.asked.empty());
  EXPECT_EQ(rung.ByGpu().at("GPU-5090").state, "waiting");
  EXPECT_THAT(rung.ByGpu().at("GPU-5090").detail, HasSubstr("/var/lib/gpulet/reboots.json"));
  EXPECT_THAT(rung.ByGpu().at("GPU-5090").detail, HasSubstr("no reboot is asked for"));
}

// A request the rebooter refuses is recorded as failed, does not spend the budget, and is
// tried again an hour later, not every round; one the record cannot take is not made.
TEST_F(RebootRungTest, FailuresAreToldAndTriedAgainAnHourLater) {
  RebootRung rung("boot-1");
  rebooter_.result = absl::FailedPreconditionError("no /var/run in the pod (deploy/reboot)");
  const absl::Time at = kT0 + absl::Hours(1);
  std::vector<cluster::NodeEvent> e = rung.Next(Homelab(kT0), on_, &record_, &rebooter_, at);
  EXPECT_EQ(Reasons(e), (std::vector<std::string>{"GpuRebootFailed"}));
  EXPECT_THAT(e[0].note, HasSubstr("deploy/reboot"));
  EXPECT_THAT(record_.Load()->at(0).outcome, HasSubstr("failed: no /var/run"));
  EXPECT_TRUE(rung.Next(Homelab(kT0), on_, &record_, &rebooter_, at + absl::Minutes(59)).empty());
  EXPECT_EQ(rung.ByGpu().at("GPU-5090").state, "failed");
  EXPECT_EQ(rebooter_.asked.size(), 1u);
  rebooter_.result = absl::OkStatus();
  e = rung.Next(Homelab(kT0), on_, &record_, &rebooter_, at + absl::Hours(1));
  EXPECT_EQ(Reasons(e), (std::vector<std::string>{"GpuRebootAsked"}));
  EXPECT_EQ(rung.counts().at("failed"), 1u);

  // The record's directory is a file: nothing can be recorded, so nothing is asked.
  std::ofstream(fs::path(dir_.path()) / "blocked").flush();
  recorder::RebootRecord unwritable((fs::path(dir_.path()) / "blocked/reboots.json").string(),
                                    "blocked");
  FakeRebooter other;
  RebootRung second("boot-1");
  e = second.Next(Homelab(kT0), on_, &unwritable, &other, at);
  EXPECT_EQ(Reasons(e), (std::vector<std::string>{"GpuRebootFailed"}));
  EXPECT_TRUE(other.asked.empty());
  EXPECT_TRUE(second.Next(Homelab(kT0), on_, &unwritable, &other, at + absl::Minutes(1)).empty());
}

}  // namespace
}  // namespace gpulet::daemon

namespace gpulet::daemon {
namespace {

// A rebooter that drains first (Talos') takes the request, works on, and may fail later: the
// status shows its progress, and a late failure marks the request failed, is told, and the
// reboot is asked for again an hour later.
TEST_F(RebootRungTest, ALateFailureOfADrainingRebooterFailsTheRequest) {
  RebootRung rung("boot-1");
  const state::Snapshot snap = Homelab(kT0);
  const absl::Time at = kT0 + absl::Minutes(10);
  EXPECT_EQ(Reasons(rung.Next(snap, on_, &record_, &rebooter_, at)),
            (std::vector<std::string>{"GpuRebootAsked"}));
  rebooter_.progress = "draining node n1: 1 pod left";
  EXPECT_TRUE(rung.Next(snap, on_, &record_, &rebooter_, at + absl::Minutes(1)).empty());
  EXPECT_THAT(rung.ByGpu().at("GPU-5090").detail, HasSubstr("draining node n1: 1 pod left"));
  rebooter_.late = absl::DeadlineExceededError("the drain of node n1 did not finish within 15m");
  std::vector<cluster::NodeEvent> e =
      rung.Next(snap, on_, &record_, &rebooter_, at + absl::Minutes(16));
  EXPECT_EQ(Reasons(e), (std::vector<std::string>{"GpuRebootFailed"}));
  EXPECT_THAT(e[0].note, HasSubstr("did not finish within 15m"));
  EXPECT_EQ(rung.ByGpu().at("GPU-5090").state, "failed");
  EXPECT_THAT(record_.Load()->at(0).outcome, HasSubstr("failed: the drain"));
  EXPECT_EQ(rung.counts().at("failed"), 1u);
  // Not asked again within the hour, then asked again (the failure spent no budget).
  EXPECT_TRUE(rung.Next(snap, on_, &record_, &rebooter_, at + absl::Minutes(30)).empty());
  EXPECT_EQ(rebooter_.asked.size(), 1u);
  EXPECT_EQ(Reasons(rung.Next(snap, on_, &record_, &rebooter_, at + absl::Minutes(77))),
            (std::vector<std::string>{"GpuRebootAsked"}));
  EXPECT_EQ(rebooter_.asked.size(), 2u);
}

}  // namespace
}  // namespace gpulet::daemon
