#include "daemon/eviction_rung.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/rung_pods.h"

namespace gpulet::daemon {
namespace {

using ::testing::HasSubstr;

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

// The seed's homelab: a 3080 serving a media server, a 5090 serving the LLM server and the
// plate reader; the 5090 goes out at `out_at` (never, when InfiniteFuture).
state::Snapshot Homelab(absl::Time out_at, absl::Time now) {
  state::Snapshot s = testing::RungSnapshot();
  if (out_at <= now) {
    s.devices[1].health.state = state::HealthState::kUnhealthy;
    s.devices[1].health.reason = "XID 79: GPU has fallen off the bus";
    s.devices[1].health.since = out_at;
  }
  return s;
}

config::Config::Health::Evict Policy(config::RemediationMode mode, int max_per_hour = 10) {
  config::Config::Health::Evict p;
  p.mode = mode;
  p.grace = absl::Minutes(2);
  p.max_per_hour = max_per_hour;
  return p;
}

std::vector<std::string> Names(const std::vector<cluster::EvictionOrder>& orders) {
  std::vector<std::string> out;
  for (const cluster::EvictionOrder& o : orders) {
    out.push_back(o.pod.namespace_name + "/" + o.pod.name);
  }
  return out;
}

// After the grace, each pod of the GPU that went out is ordered out once, with its UID;
// the pod on the good GPU never is. A GPU back in service withdraws what is left.
TEST(EvictionRungTest, ThePodsOfTheGpuThatStaysOutGoAfterTheGraceOnce) {
  EvictionRung rung;
  metrics::PodMap pods = testing::RungPods();
  const auto on = Policy(config::RemediationMode::kOn);
  EXPECT_TRUE(rung.Next(Homelab(absl::InfiniteFuture(), kT0), &pods, on, kT0).orders.empty());
  const absl::Time out = kT0 + absl::Seconds(10);
  EXPECT_TRUE(rung.Next(Homelab(out, out), &pods, on, out).orders.empty());
  // Within the grace: nothing (a fault that clears sooner costs no pod).
  const absl::Time in_grace = out + absl::Minutes(2) - absl::Seconds(1);
  EXPECT_TRUE(rung.Next(Homelab(out, in_grace), &pods, on, in_grace).orders.empty());
  const absl::Time after = out + absl::Minutes(2);
  EvictionRung::Round r = rung.Next(Homelab(out, after), &pods, on, after);
  EXPECT_EQ(Names(r.orders), (std::vector<std::string>{"ai/ollama-0", "anpr/reader-7"}));
  EXPECT_EQ(r.orders[0].pod.uid, "uid-ollama");
  EXPECT_EQ(r.orders[0].gpu, "GPU-5090");
  EXPECT_EQ(r.orders[0].gpu_text, "GPU-5090 (GPU 1)");
  EXPECT_EQ(r.orders[0].gpu_problem, "XID 79: GPU has fallen off the bus");
  EXPECT_TRUE(r.events.empty());
  // Still out: not ordered twice.
  EXPECT_TRUE(rung.Next(Homelab(out, after + absl::Minutes(1)), &pods, on, after + absl::Minutes(1))
                  .orders.empty());
  // Back: its orders are withdrawn, once.
  r = rung.Next(Homelab(absl::InfiniteFuture(), after), &pods, on, after + absl::Minutes(2));
  EXPECT_EQ(r.withdrawn, (std::vector<std::string>{"GPU-5090"}));
  EXPECT_TRUE(
      rung.Next(Homelab(absl::InfiniteFuture(), after), &pods, on, after).withdrawn.empty());
}

// The budget counts the node's orders in the last hour: past it, one Event on the Node per
// episode says why, and the pods wait for the budget rather than being skipped.
TEST(EvictionRungTest, TheBudgetHoldsAndSaysSoOnce) {
  EvictionRung rung;
  metrics::PodMap pods = testing::RungPods();
  const auto on = Policy(config::RemediationMode::kOn, /*max_per_hour=*/1);
  const absl::Time t = kT0 + absl::Minutes(5);
  EvictionRung::Round r = rung.Next(Homelab(kT0, t), &pods, on, t);
  EXPECT_EQ(Names(r.orders), (std::vector<std::string>{"ai/ollama-0"}));
  ASSERT_EQ(r.events.size(), 1u);
  EXPECT_EQ(r.events[0].reason, "GpuEvictionNotDone");
  EXPECT_FALSE(r.events[0].pod.has_value());
  EXPECT_THAT(r.events[0].note, HasSubstr("health.evict.maxPerHour"));
  r = rung.Next(Homelab(kT0, t + absl::Minutes(30)), &pods, on, t + absl::Minutes(30));
  EXPECT_TRUE(r.orders.empty());
  EXPECT_TRUE(r.events.empty());  // told once
  r = rung.Next(Homelab(kT0, t + absl::Hours(1)), &pods, on, t + absl::Hours(1));
  EXPECT_EQ(Names(r.orders), (std::vector<std::string>{"anpr/reader-7"}));
}

// A dry run names each pod in an Event about the pod and orders nothing; off does nothing.
TEST(EvictionRungTest, DryRunNamesThePodsAndOffDoesNothing) {
  EvictionRung rung;
  metrics::PodMap pods = testing::RungPods();
  const absl::Time t = kT0 + absl::Minutes(3);
  EvictionRung::Round r =
      rung.Next(Homelab(kT0, t), &pods, Policy(config::RemediationMode::kDryRun), t);
  EXPECT_TRUE(r.orders.empty());
  EXPECT_EQ(Names(r.would_evict), (std::vector<std::string>{"ai/ollama-0", "anpr/reader-7"}));
  ASSERT_EQ(r.events.size(), 2u);
  EXPECT_EQ(r.events[0].reason, "GpuWouldEvict");
  ASSERT_TRUE(r.events[0].pod.has_value());
  EXPECT_EQ(r.events[0].pod->name, "ollama-0");
  EXPECT_THAT(r.events[0].note, HasSubstr("has been out of service for 3m"));
  EXPECT_THAT(r.events[0].note, HasSubstr("health.evict.mode is dry-run"));
  EXPECT_TRUE(rung.Next(Homelab(kT0, t), &pods, Policy(config::RemediationMode::kDryRun), t)
                  .events.empty());  // once per episode

  EvictionRung off;
  r = off.Next(Homelab(kT0, t), &pods, Policy(config::RemediationMode::kOff), t);
  EXPECT_TRUE(r.orders.empty());
  EXPECT_TRUE(r.events.empty());
  EXPECT_TRUE(r.would_evict.empty());
}

// The rung waits rather than act on doubt: a GPU without a PCI address, a failed or absent
// list of holders, NVML unavailable (every GPU is then marked out), a name that is no
// Kubernetes name.
TEST(EvictionRungTest, NothingIsOrderedOnDoubt) {
  const auto on = Policy(config::RemediationMode::kOn);
  const absl::Time t = kT0 + absl::Minutes(5);
  metrics::PodMap pods = testing::RungPods();

  EvictionRung no_bus;
  state::Snapshot s = Homelab(kT0, t);
  s.devices[1].gpu.bus_id.clear();
  EXPECT_TRUE(no_bus.Next(s, &pods, on, t).orders.empty());

  EvictionRung stale;
  metrics::PodMap failed = testing::RungPods();
  failed.ok = false;
  EXPECT_TRUE(stale.Next(Homelab(kT0, t), &failed, on, t).orders.empty());
  EXPECT_TRUE(stale.Next(Homelab(kT0, t), nullptr, on, t).orders.empty());
  // The list is fresh again: the pods go.
  EXPECT_EQ(stale.Next(Homelab(kT0, t), &pods, on, t).orders.size(), 2u);

  EvictionRung blind;
  s = Homelab(kT0, t);
  s.nvml_ok = false;
  EXPECT_TRUE(blind.Next(s, &pods, on, t).orders.empty());

  EvictionRung odd;
  metrics::PodMap bad = testing::RungPods();
  bad.by_gpu["GPU-5090"][2].holder.pod = "../../nodes/n1";
  EXPECT_EQ(Names(odd.Next(Homelab(kT0, t), &bad, on, t).orders),
            (std::vector<std::string>{"ai/ollama-0"}));
}

// The grace runs from when the GPU went out, as the store says: a GPU out for an hour when
// gpulet (or a rebuilt sampler) starts is not given another grace.
TEST(EvictionRungTest, TheGraceCountsFromWhenTheGpuWentOut) {
  EvictionRung rung;
  metrics::PodMap pods = testing::RungPods();
  const absl::Time t = kT0 + absl::Hours(1);
  EXPECT_EQ(
      rung.Next(Homelab(kT0, t), &pods, Policy(config::RemediationMode::kOn), t).orders.size(), 2u);
}

}  // namespace
}  // namespace gpulet::daemon
