#include "daemon/reset_rung.h"

#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/rung_pods.h"

namespace gpulet::daemon {
namespace {

using ::testing::HasSubstr;

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);
const absl::Duration kQuiet = absl::Minutes(5);
const absl::Duration kSettle = ResetRung::SettleFor(absl::Seconds(1));

// The seed's homelab: a 3080 and a 5090; the 5090 went out at `out_at` with an XID NVIDIA
// answers with a GPU reset (XID 48, a double-bit ECC error).
state::Snapshot Homelab(absl::Time out_at) {
  state::Snapshot s = testing::RungSnapshot();
  state::HealthCondition xid;
  xid.reason = "XID 48 (GPU_ECC_DBE): double-bit ECC error";
  xid.action = "reset the GPU";
  xid.reset_clears = true;
  s.devices[1].health.Raise("xid", xid, out_at);
  return s;
}

// Both GPUs answered NVML with nothing running on them.
std::map<std::string, metrics::GpuSampleState> Idle() {
  std::map<std::string, metrics::GpuSampleState> m;
  for (const char* uuid : {"GPU-3080", "GPU-5090"}) {
    m[uuid].answering = true;
    m[uuid].last = gpu::DeviceSample{};
  }
  return m;
}

// Pod attribution: nothing holds the 5090 any more (its pods were evicted).
metrics::PodMap NoPodOn5090() {
  metrics::PodMap pods = testing::RungPods();
  pods.by_gpu.erase("GPU-5090");
  return pods;
}

config::Config::Health::Reset Policy(config::RemediationMode mode, int max_per_day = 3) {
  config::Config::Health::Reset p;
  p.mode = mode;
  p.max_per_day = max_per_day;
  return p;
}

const auto kOn = Policy(config::RemediationMode::kOn);

// Applies what the Daemon's reset thread does with an order that went as `result`.
void Carry(ResetRung& rung, state::Snapshot& snap, const ResetRung::Order& order,
           const absl::Status& result, absl::Time now) {
  if (result.ok()) {
    snap.devices[1].health.Raise(ResetRung::kSource, ResetRung::ProbationFor(order, now), now);
  }
  rung.Finish(order, result, now);
}

TEST(ResetRungTest, AnIdleGpuOutForAResettableFaultIsResetOnceAndOnProbationAfter) {
  ResetRung rung;
  state::Snapshot snap = Homelab(kT0);
  metrics::PodMap pods = NoPodOn5090();
  // Within the settling time: the recorder writes first.
  ResetRung::Round r =
      rung.Next(snap, Idle(), &pods, {}, kOn, kQuiet, kSettle, kT0 + kSettle - absl::Seconds(1));
  EXPECT_TRUE(r.orders.empty());
  EXPECT_EQ(rung.ByGpu().at("GPU-5090").state, "waiting");
  const absl::Time at = kT0 + kSettle;
  r = rung.Next(snap, Idle(), &pods, {}, kOn, kQuiet, kSettle, at);
  ASSERT_EQ(r.orders.size(), 1u);
  EXPECT_EQ(r.orders[0].uuid, "GPU-5090");
  EXPECT_EQ(r.orders[0].bus_id, "0000:02:00.0");
  EXPECT_EQ(r.orders[0].gpu, "GPU-5090 (GPU 1)");
  EXPECT_THAT(r.orders[0].fault, HasSubstr("XID 48"));
  EXPECT_EQ(rung.ByGpu().at("GPU-5090").state, "resetting");
  EXPECT_FALSE(rung.ByGpu().contains("GPU-3080"));
  // Under way: not ordered twice.
  EXPECT_TRUE(rung.Next(snap, Idle(), &pods, {}, kOn, kQuiet, kSettle, at + absl::Seconds(1))
                  .orders.empty());

  const absl::Time done = at + absl::Seconds(2);
  snap.devices[1].health.Raise(ResetRung::kSource, ResetRung::ProbationFor(r.orders[0], done),
                               done);
  std::vector<cluster::NodeEvent> told = rung.Finish(r.orders[0], absl::OkStatus(), done);
  ASSERT_EQ(told.size(), 1u);
  EXPECT_EQ(told[0].reason, "GpuReset");
  EXPECT_EQ(told[0].type, "Normal");
  EXPECT_THAT(told[0].note, HasSubstr("returns to service after 5m"));
  EXPECT_EQ(rung.counts().at("reset"), 1u);
  // On probation for the quiet period, whatever the other conditions say.
  r = rung.Next(snap, Idle(), &pods, {}, kOn, kQuiet, kSettle, done + kQuiet - absl::Seconds(1));
  EXPECT_TRUE(r.orders.empty());
  EXPECT_TRUE(r.probation_over.empty());
  EXPECT_EQ(rung.ByGpu().at("GPU-5090").state, "reset");
  EXPECT_THAT(rung.ByGpu().at("GPU-5090").detail, HasSubstr("back in service at"));
  r = rung.Next(snap, Idle(), &pods, {}, kOn, kQuiet, kSettle, done + kQuiet);
  EXPECT_EQ(r.probation_over, (std::vector<std::string>{"GPU-5090"}));
  EXPECT_TRUE(r.orders.empty());
}

TEST(ResetRungTest, ProbationIsAnUnhealthyConditionNamingTheFault) {
  ResetRung::Order o{"GPU-5090", "0000:02:00.0", "GPU-5090 (GPU 1)", "XID 48", kQuiet};
  state::HealthCondition c = ResetRung::ProbationFor(o, kT0);
  EXPECT_EQ(c.severity, state::HealthState::kUnhealthy);
  EXPECT_THAT(c.reason, HasSubstr("reset by gpulet at 2027-01-15T08:00:00Z after: XID 48"));
  EXPECT_FALSE(c.reset_clears);  // a GPU on probation is not reset again for it
}

TEST(ResetRungTest, NothingIsResetWhileAnythingHoldsTheGpuAndTheStatusSaysWhat) {
  const absl::Time at = kT0 + absl::Minutes(1);
  struct Case {
    const char* what;
    std::function<void(state::Snapshot&, std::map<std::string, metrics::GpuSampleState>&,
                       metrics::PodMap&)>
        change;
    const char* said;
  };
  const Case cases[] = {
      {"a process",
       [](auto&, auto& samples, auto&) {
         samples["GPU-5090"].last->processes = {gpu::GpuProcess{4242, {}, {}, {}, {}}};
       },
       "1 process runs on it (pid 4242)"},
      {"a pod", [](auto&, auto&, auto& pods) { pods = testing::RungPods(); },
       "pods ai/ollama-0, anpr/reader-7 hold it"},
      {"stale pods",
       [](auto&, auto&, auto& pods) {
         pods.ok = false;
         pods.error = "kubelet socket gone";
       },
       "pod attribution's latest list failed (kubelet socket gone)"},
      {"no sample",
       [](auto&, auto& samples, auto&) {
         samples["GPU-5090"].answering = false;
         samples["GPU-5090"].error = "NVML: timeout";
       },
       "NVML did not list its processes (NVML: timeout); it is reset only when nothing is seen "
       "to run on it"},
      {"never sampled", [](auto&, auto& samples, auto&) { samples.erase("GPU-5090"); },
       "NVML did not list its processes"},
      {"MIG", [](auto& snap, auto&, auto&) { snap.devices[1].gpu.mig_enabled = true; },
       "in MIG mode"},
      {"NVML down", [](auto& snap, auto&, auto&) { snap.nvml_ok = false; }, "NVML is unavailable"},
  };
  for (const Case& c : cases) {
    ResetRung rung;
    state::Snapshot snap = Homelab(kT0);
    auto samples = Idle();
    metrics::PodMap pods = NoPodOn5090();
    c.change(snap, samples, pods);
    ResetRung::Round r = rung.Next(snap, samples, &pods, {}, kOn, kQuiet, kSettle, at);
    EXPECT_TRUE(r.orders.empty()) << c.what;
    EXPECT_TRUE(r.events.empty()) << c.what;
    ASSERT_TRUE(rung.ByGpu().contains("GPU-5090")) << c.what;
    EXPECT_EQ(rung.ByGpu().at("GPU-5090").state, "waiting") << c.what;
    EXPECT_THAT(rung.ByGpu().at("GPU-5090").detail, HasSubstr(c.said)) << c.what;
  }
  // Without pod attribution, NVML's process list alone decides.
  ResetRung rung;
  EXPECT_EQ(rung.Next(Homelab(kT0), Idle(), nullptr, {}, kOn, kQuiet, kSettle, at).orders.size(),
            1u);
}

// A GPU that requires a reset answers NVML nothing, its process list included: then who
// holds its device node open on the host decides, and "nobody" only on full evidence.
TEST(ResetRungTest, WhenNvmlCannotListProcessesTheHostsOpenFilesDecide) {
  const absl::Time at = kT0 + kSettle;
  state::Snapshot snap = Homelab(kT0);
  snap.devices[1].gpu.minor = 1;
  auto samples = Idle();
  samples["GPU-5090"].answering = false;
  samples["GPU-5090"].error = "NVML_ERROR_RESET_REQUIRED";
  metrics::PodMap pods = NoPodOn5090();
  std::vector<std::string> asked;
  absl::StatusOr<std::vector<node::DeviceHolder>> answer =
      std::vector<node::DeviceHolder>{{4242, "ollama", "ollama"}, {3117, "", "ffmpeg"}};
  const ResetRung::HolderLookup holders = [&](const gpu::Gpu& g) {
    asked.push_back(g.DeviceNode());
    return answer;
  };
  auto waiting = [&](ResetRung& rung) {
    EXPECT_TRUE(rung.Next(snap, samples, &pods, holders, kOn, kQuiet, kSettle, at).orders.empty());
    return rung.ByGpu().at("GPU-5090").detail;
  };
  ResetRung held;
  EXPECT_EQ(waiting(held), "2 processes hold /dev/nvidia1 open (pid 4242 ollama, 3117)");
  EXPECT_EQ(asked, std::vector<std::string>{"/dev/nvidia1"});  // the 5090 only
  answer = absl::PermissionDeniedError("cannot list the open files of pid 7");
  ResetRung unknown;
  EXPECT_EQ(waiting(unknown),
            "NVML did not list its processes (NVML_ERROR_RESET_REQUIRED), and which processes "
            "hold /dev/nvidia1 is not known: cannot list the open files of pid 7");
  // No device node known: nothing to look at.
  answer = std::vector<node::DeviceHolder>{};
  snap.devices[1].gpu.minor.reset();
  ResetRung no_node;
  EXPECT_THAT(waiting(no_node), HasSubstr("it is reset only when nothing is seen to run on it"));
  snap.devices[1].gpu.minor = 1;
  // Nobody holds it, and no pod: it is reset.
  ResetRung idle;
  EXPECT_EQ(idle.Next(snap, samples, &pods, holders, kOn, kQuiet, kSettle, at).orders.size(), 1u);
  // A pod still allocated the GPU holds it all the same.
  metrics::PodMap allocated = testing::RungPods();
  ResetRung pod;
  EXPECT_TRUE(
      pod.Next(snap, samples, &allocated, holders, kOn, kQuiet, kSettle, at).orders.empty());
  EXPECT_THAT(pod.ByGpu().at("GPU-5090").detail, HasSubstr("ai/ollama-0"));
  // NVML answering for the GPU: the host is not asked.
  asked.clear();
  ResetRung answered;
  answered.Next(snap, Idle(), &pods, holders, kOn, kQuiet, kSettle, at);
  EXPECT_TRUE(asked.empty());
}

TEST(ResetRungTest, AGpuOutForAnythingAResetDoesNotClearIsLeftAlone) {
  const absl::Time at = kT0 + absl::Minutes(1);
  metrics::PodMap pods = NoPodOn5090();
  auto with = [&](const char* source, state::HealthCondition c) {
    state::Snapshot snap = Homelab(kT0);
    snap.devices[1].health.Raise(source, c, kT0);
    return snap;
  };
  state::HealthCondition hung;
  hung.reason = "liveness probe took 12s";
  state::HealthCondition reboot;
  reboot.reason = "the driver reports recovery action 2";
  reboot.reset_clears = true;  // as if both were said: a reboot wins
  reboot.reboot_required = true;
  for (const state::Snapshot& snap : {with("liveness", hung), with("recovery-action", reboot)}) {
    ResetRung rung;
    EXPECT_TRUE(rung.Next(snap, Idle(), &pods, {}, kOn, kQuiet, kSettle, at).orders.empty());
    EXPECT_TRUE(rung.ByGpu().empty());
  }
  // A Degraded condition alongside does not stand in the way.
  state::HealthCondition warm;
  warm.severity = state::HealthState::kDegraded;
  warm.reason = "row remapping pending";
  ResetRung rung;
  EXPECT_EQ(
      rung.Next(with("row-remap", warm), Idle(), &pods, {}, kOn, kQuiet, kSettle, at).orders.size(),
      1u);
  // Nor does anything happen to a GPU without both names.
  for (int drop : {0, 1}) {
    state::Snapshot snap = Homelab(kT0);
    (drop == 0 ? snap.devices[1].gpu.uuid : snap.devices[1].gpu.bus_id).clear();
    ResetRung unnamed;
    EXPECT_TRUE(unnamed.Next(snap, Idle(), &pods, {}, kOn, kQuiet, kSettle, at).orders.empty());
    EXPECT_TRUE(unnamed.ByGpu().empty());
  }
}

TEST(ResetRungTest, DryRunSaysItOnceAndOffSaysNothing) {
  const absl::Time at = kT0 + absl::Minutes(1);
  metrics::PodMap pods = NoPodOn5090();
  ResetRung rung;
  const auto dry = Policy(config::RemediationMode::kDryRun);
  ResetRung::Round r = rung.Next(Homelab(kT0), Idle(), &pods, {}, dry, kQuiet, kSettle, at);
  EXPECT_TRUE(r.orders.empty());
  ASSERT_EQ(r.events.size(), 1u);
  EXPECT_EQ(r.events[0].reason, "GpuWouldReset");
  EXPECT_THAT(r.events[0].note, HasSubstr("GPU-5090 (GPU 1)"));
  EXPECT_THAT(r.events[0].note, HasSubstr("dry-run"));
  EXPECT_EQ(rung.ByGpu().at("GPU-5090").state, "would-reset");
  EXPECT_TRUE(
      rung.Next(Homelab(kT0), Idle(), &pods, {}, dry, kQuiet, kSettle, at + absl::Minutes(1))
          .events.empty());
  EXPECT_EQ(rung.counts().at("dry_run"), 1u);
  // Back in service, then out again: said again.
  state::Snapshot healthy = Homelab(kT0);
  healthy.devices[1].health.Clear("xid", at);
  rung.Next(healthy, Idle(), &pods, {}, dry, kQuiet, kSettle, at + absl::Minutes(2));
  EXPECT_TRUE(rung.ByGpu().empty());
  EXPECT_EQ(rung.Next(Homelab(kT0), Idle(), &pods, {}, dry, kQuiet, kSettle, at + absl::Minutes(3))
                .events.size(),
            1u);

  ResetRung off;
  r = off.Next(Homelab(kT0), Idle(), &pods, {}, Policy(config::RemediationMode::kOff), kQuiet,
               kSettle, at);
  EXPECT_TRUE(r.orders.empty());
  EXPECT_TRUE(r.events.empty());
  EXPECT_TRUE(off.ByGpu().empty());
}

// A failed reset is told, waits the quiet period before the next try, and the tries are
// budgeted per GPU over 24 hours; past the budget one Event says a person must act.
TEST(ResetRungTest, FailuresRetryAfterTheQuietPeriodWithinTheDailyBudget) {
  ResetRung rung;
  metrics::PodMap pods = NoPodOn5090();
  state::Snapshot snap = Homelab(kT0);
  const auto two = Policy(config::RemediationMode::kOn, 2);
  absl::Time t = kT0 + absl::Minutes(1);
  ResetRung::Round r = rung.Next(snap, Idle(), &pods, {}, two, kQuiet, kSettle, t);
  ASSERT_EQ(r.orders.size(), 1u);
  std::vector<cluster::NodeEvent> told =
      rung.Finish(r.orders[0], absl::UnavailableError("the device did not come back"), t);
  ASSERT_EQ(told.size(), 1u);
  EXPECT_EQ(told[0].reason, "GpuResetFailed");
  EXPECT_EQ(told[0].type, "Warning");
  EXPECT_THAT(told[0].note, HasSubstr("the device did not come back"));
  EXPECT_EQ(rung.ByGpu().at("GPU-5090").state, "failed");
  EXPECT_EQ(rung.counts().at("failed"), 1u);
  // Not again before the quiet period.
  r = rung.Next(snap, Idle(), &pods, {}, two, kQuiet, kSettle, t + kQuiet - absl::Seconds(1));
  EXPECT_TRUE(r.orders.empty());
  EXPECT_THAT(rung.ByGpu().at("GPU-5090").detail, HasSubstr("after the quiet period"));
  t += kQuiet;
  r = rung.Next(snap, Idle(), &pods, {}, two, kQuiet, kSettle, t);
  ASSERT_EQ(r.orders.size(), 1u);
  Carry(rung, snap, r.orders[0], absl::OkStatus(), t);
  // Probation over; the fault came back (a new XID): the budget of 2 is spent.
  t += kQuiet;
  r = rung.Next(snap, Idle(), &pods, {}, two, kQuiet, kSettle, t);
  EXPECT_EQ(r.probation_over.size(), 1u);
  snap.devices[1].health.Clear(ResetRung::kSource, t);
  t += absl::Minutes(10);
  r = rung.Next(snap, Idle(), &pods, {}, two, kQuiet, kSettle, t);
  EXPECT_TRUE(r.orders.empty());
  ASSERT_EQ(r.events.size(), 1u);
  EXPECT_EQ(r.events[0].reason, "GpuResetNotDone");
  EXPECT_THAT(r.events[0].note, HasSubstr("health.reset.maxPerDay"));
  EXPECT_EQ(rung.ByGpu().at("GPU-5090").state, "budget-spent");
  EXPECT_EQ(rung.ByGpu().at("GPU-5090").tries, 2);
  EXPECT_TRUE(
      rung.Next(snap, Idle(), &pods, {}, two, kQuiet, kSettle, t + absl::Hours(1)).events.empty());
  // A day after the first try, one is allowed again.
  r = rung.Next(snap, Idle(), &pods, {}, two, kQuiet, kSettle,
                kT0 + absl::Minutes(1) + absl::Hours(24));
  EXPECT_EQ(r.orders.size(), 1u);
}

}  // namespace
}  // namespace gpulet::daemon
