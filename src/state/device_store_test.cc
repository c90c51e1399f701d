// The rules the DeviceStore decides scheduling with: inventory and retained health,
// conditions per source (the worst wins; a warning never lowers a fatal verdict),
// copy-on-write versioned snapshots, and waiters.
#include "state/device_store.h"

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace gpulet::state {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

gpu::Gpu MakeGpu(unsigned index, std::string uuid, std::string bus_id) {
  gpu::Gpu g;
  g.index = index;
  g.uuid = std::move(uuid);
  g.bus_id = std::move(bus_id);
  g.in_nvml = g.on_pci = true;
  return g;
}

gpu::Inventory TwoGpus() {
  gpu::Inventory inv;
  inv.gpus = {MakeGpu(0, "GPU-a", "0000:01:00.0"), MakeGpu(1, "GPU-b", "0000:02:00.0")};
  return inv;
}

HealthCondition Cond(HealthState severity, std::string reason,
                     absl::Time since = absl::InfinitePast()) {
  return {severity, std::move(reason), "do something", since};
}

// --- GpuHealth: conditions per source ----------------------------------------------------

// A fatal (Unhealthy) verdict stays, whatever order the sources raise a warning (Degraded)
// and the fatal condition in, and whatever else comes and goes, until the fatal one clears.
TEST(GpuHealthTest, WarningNeverLowersFatalInAnyOrder) {
  struct Step {
    const char* source;
    HealthState severity;
  };
  const std::vector<std::vector<Step>> kOrders = {
      {{"xid", HealthState::kUnhealthy}, {"liveness", HealthState::kDegraded}},
      {{"liveness", HealthState::kDegraded}, {"xid", HealthState::kUnhealthy}},
      {{"liveness", HealthState::kUnhealthy}, {"xid", HealthState::kDegraded}},
      {{"xid", HealthState::kDegraded}, {"liveness", HealthState::kUnhealthy}},
      {{"a", HealthState::kDegraded},
       {"b", HealthState::kUnhealthy},
       {"c", HealthState::kDegraded},
       {"d", HealthState::kDegraded}},
      {{"b", HealthState::kUnhealthy},
       {"a", HealthState::kDegraded},
       {"a", HealthState::kDegraded},  // raised again
       {"c", HealthState::kDegraded}},
  };
  for (size_t o = 0; o < kOrders.size(); ++o) {
    GpuHealth h;
    absl::Time now = kT0;
    std::string fatal_source;
    for (const Step& step : kOrders[o]) {
      now += absl::Seconds(1);
      h.Raise(step.source, Cond(step.severity, std::string("from ") + step.source), now);
      if (step.severity == HealthState::kUnhealthy) fatal_source = step.source;
      if (!fatal_source.empty()) {
        EXPECT_EQ(h.state, HealthState::kUnhealthy) << "order " << o << " after " << step.source;
        EXPECT_EQ(h.reason, "from " + fatal_source) << "order " << o;
      }
    }
    EXPECT_EQ(h.state, HealthState::kUnhealthy) << "order " << o;
    // Clearing every warning leaves the fatal verdict; clearing the fatal one leaves the
    // worst remaining warning.
    std::vector<std::string> warnings;
    for (const Step& step : kOrders[o]) {
      if (step.source != fatal_source) warnings.push_back(step.source);
    }
    for (const std::string& w : warnings) {
      h.Clear(w, now);
      EXPECT_EQ(h.state, HealthState::kUnhealthy) << "order " << o << " cleared " << w;
    }
    h.Clear(fatal_source, now);
    EXPECT_EQ(h.state, HealthState::kHealthy) << "order " << o;
    EXPECT_EQ(h.reason, "");
    EXPECT_EQ(h.action, "");
  }
}

TEST(GpuHealthTest, ClearingTheFatalConditionLeavesTheWarning) {
  GpuHealth h;
  h.Raise("xid", Cond(HealthState::kUnhealthy, "fatal"), kT0);
  h.Raise("remap", Cond(HealthState::kDegraded, "pending"), kT0 + absl::Seconds(1));
  h.Clear("xid", kT0 + absl::Seconds(2));
  EXPECT_EQ(h.state, HealthState::kDegraded);
  EXPECT_EQ(h.reason, "pending");
  EXPECT_EQ(h.since, kT0 + absl::Seconds(2));  // the state changed then
}

TEST(GpuHealthTest, EachSourceOwnsItsCondition) {
  GpuHealth h;
  h.Raise("liveness", Cond(HealthState::kUnhealthy, "lost"), kT0);
  EXPECT_TRUE(h.Has("liveness"));
  EXPECT_FALSE(h.Has("xid"));
  // Another source clearing does not clear liveness's condition.
  h.Clear("xid", kT0 + absl::Seconds(1));
  EXPECT_EQ(h.state, HealthState::kUnhealthy);
  // A source replaces its own condition, including with a milder one.
  h.Raise("liveness", Cond(HealthState::kDegraded, "slow"), kT0 + absl::Seconds(2));
  EXPECT_EQ(h.state, HealthState::kDegraded);
  EXPECT_EQ(h.reason, "slow");
  EXPECT_EQ(h.conditions.size(), 1u);
}

TEST(GpuHealthTest, SinceIsKeptWhileTheSeverityIsUnchanged) {
  GpuHealth h;
  h.Raise("xid", Cond(HealthState::kUnhealthy, "first"), kT0);
  h.Raise("xid", Cond(HealthState::kUnhealthy, "second"), kT0 + absl::Minutes(1));
  EXPECT_EQ(h.conditions["xid"].since, kT0);
  EXPECT_EQ(h.since, kT0);
  EXPECT_EQ(h.reason, "second");  // the newest words, the oldest time
  // A severity change restarts the condition's clock.
  h.Raise("xid", Cond(HealthState::kDegraded, "third"), kT0 + absl::Minutes(2));
  EXPECT_EQ(h.conditions["xid"].since, kT0 + absl::Minutes(2));
  // An explicit `since` is kept when the condition is new.
  h.Raise("remap", Cond(HealthState::kDegraded, "x", kT0 - absl::Hours(1)), kT0);
  EXPECT_EQ(h.conditions["remap"].since, kT0 - absl::Hours(1));
}

TEST(GpuHealthTest, AmongEquallyBadConditionsTheOldestExplains) {
  GpuHealth h;
  h.Raise("b", Cond(HealthState::kUnhealthy, "newer", kT0 + absl::Seconds(5)), kT0);
  h.Raise("a", Cond(HealthState::kUnhealthy, "older", kT0), kT0);
  EXPECT_EQ(h.reason, "older");
  h.Clear("a", kT0 + absl::Seconds(6));
  EXPECT_EQ(h.reason, "newer");
  EXPECT_EQ(h.state, HealthState::kUnhealthy);
}

TEST(GpuHealthTest, StateNames) {
  EXPECT_STREQ(HealthStateName(HealthState::kHealthy), "Healthy");
  EXPECT_STREQ(HealthStateName(HealthState::kDegraded), "Degraded");
  EXPECT_STREQ(HealthStateName(HealthState::kUnhealthy), "Unhealthy");
}

// --- DeviceStore: inventory ---------------------------------------------------------------

TEST(DeviceStoreTest, StartsEmptyAtVersionZero) {
  DeviceStore store;
  std::shared_ptr<const Snapshot> s = store.Get();
  EXPECT_EQ(s->version, 0u);
  EXPECT_TRUE(s->devices.empty());
  EXPECT_FALSE(s->nvml_ok);
  EXPECT_FALSE(store.shut_down());
}

TEST(DeviceStoreTest, SetInventoryTable) {
  struct Case {
    const char* name;
    absl::Status nvml;
    bool in_nvml;
    std::string nvml_error;
    std::string kernel_driver;
    HealthState want;
    std::string want_reason;
  };
  const Case kCases[] = {
      {"healthy", absl::OkStatus(), true, "", "nvidia", HealthState::kHealthy, ""},
      {"nvml down", absl::UnavailableError("driver not loaded"), true, "", "nvidia",
       HealthState::kUnhealthy, "NVML unavailable: driver not loaded"},
      {"pci only", absl::OkStatus(), false, "", "vfio-pci", HealthState::kUnhealthy,
       "on the PCI bus but not visible to NVML (kernel driver: vfio-pci)"},
      {"pci only, no driver", absl::OkStatus(), false, "", "", HealthState::kUnhealthy,
       "on the PCI bus but not visible to NVML (kernel driver: none)"},
      {"nvml error", absl::OkStatus(), false, "GPU is lost", "nvidia", HealthState::kUnhealthy,
       "GPU is lost"},
  };
  for (const Case& c : kCases) {
    DeviceStore store;
    gpu::Inventory inv;
    gpu::Gpu g = MakeGpu(0, c.in_nvml ? "GPU-a" : "", "0000:01:00.0");
    g.in_nvml = c.in_nvml;
    g.nvml_error = c.nvml_error;
    g.kernel_driver = c.kernel_driver;
    inv.gpus = {g};
    inv.nvml_status = c.nvml;
    store.SetInventory(inv, kT0);
    std::shared_ptr<const Snapshot> s = store.Get();
    EXPECT_EQ(s->version, 1u) << c.name;
    EXPECT_EQ(s->nvml_ok, c.nvml.ok()) << c.name;
    EXPECT_EQ(s->nvml_error, std::string(c.nvml.message())) << c.name;
    ASSERT_EQ(s->devices.size(), 1u) << c.name;
    const GpuHealth& h = s->devices[0].health;
    EXPECT_EQ(h.state, c.want) << c.name;
    EXPECT_EQ(h.reason, c.want_reason) << c.name;
    EXPECT_EQ(h.since, kT0) << c.name;
    if (c.want == HealthState::kUnhealthy) {
      EXPECT_TRUE(h.Has("nvml")) << c.name;
      EXPECT_EQ(h.action, "run `gpulet doctor` on the node") << c.name;
    }
  }
}

TEST(DeviceStoreTest, InventoryOrderAndLookups) {
  DeviceStore store;
  gpu::Inventory inv = TwoGpus();
  inv.gpus.push_back(MakeGpu(2, "", "0000:03:00.0"));
  inv.gpus.back().in_nvml = false;
  store.SetInventory(inv, kT0);
  std::shared_ptr<const Snapshot> s = store.Get();
  ASSERT_EQ(s->devices.size(), 3u);
  EXPECT_EQ(s->devices[0].gpu.uuid, "GPU-a");
  EXPECT_EQ(s->devices[1].gpu.uuid, "GPU-b");
  EXPECT_EQ(s->devices[2].gpu.bus_id, "0000:03:00.0");
  ASSERT_NE(s->FindByUuid("GPU-b"), nullptr);
  EXPECT_EQ(s->FindByUuid("GPU-b")->gpu.index, 1u);
  EXPECT_EQ(s->FindByUuid("GPU-zzz"), nullptr);
  // The store's own lookup takes a UUID or any spelling of the bus id.
  for (const char* key : {"GPU-a", "0000:01:00.0", "00000000:01:00.0", "01:00.0", "0000:01:00"}) {
    EXPECT_TRUE(store.UpdateHealth(key, [](GpuHealth& h) { h.last_xid = 13; })) << key;
  }
  EXPECT_TRUE(store.UpdateHealth("0000:03:00.0", [](GpuHealth&) {}));
  for (const char* key : {"GPU-zzz", "0000:09:00.0", "", "not a bus id"}) {
    uint64_t before = store.Get()->version;
    EXPECT_FALSE(store.UpdateHealth(key, [](GpuHealth& h) { h.last_xid = 1; })) << key;
    EXPECT_EQ(store.Get()->version, before) << key << ": an unknown GPU publishes nothing";
  }
  EXPECT_EQ(store.Get()->devices[0].health.last_xid, 13);
  EXPECT_EQ(store.Get()->devices[1].health.last_xid, 0);
}

TEST(DeviceStoreTest, HealthSurvivesANewInventoryByUuidOrBusId) {
  DeviceStore store;
  gpu::Inventory inv = TwoGpus();
  inv.gpus.push_back(MakeGpu(2, "", "0000:03:00.0"));
  store.SetInventory(inv, kT0);
  ASSERT_TRUE(store.UpdateHealth("GPU-a", [](GpuHealth& h) {
    h.Raise("xid", Cond(HealthState::kUnhealthy, "XID 79"), kT0);
    h.xid_counts[79] = 1;
  }));
  ASSERT_TRUE(store.UpdateHealth("0000:03:00.0", [](GpuHealth& h) {
    h.Raise("remap", Cond(HealthState::kDegraded, "pending"), kT0);
  }));
  // Rediscovery (SIGHUP): GPU-a moved to another index, GPU-b is gone, a new GPU-c came.
  gpu::Inventory next;
  next.gpus = {MakeGpu(0, "GPU-c", "0000:04:00.0"), MakeGpu(1, "GPU-a", "0000:01:00.0"),
               MakeGpu(2, "", "0000:03:00.0")};
  store.SetInventory(next, kT0 + absl::Minutes(1));
  std::shared_ptr<const Snapshot> s = store.Get();
  ASSERT_EQ(s->devices.size(), 3u);
  EXPECT_EQ(s->devices[0].health.state, HealthState::kHealthy);
  EXPECT_EQ(s->devices[0].health.since, kT0 + absl::Minutes(1));
  EXPECT_EQ(s->devices[1].health.state, HealthState::kUnhealthy);
  EXPECT_EQ(s->devices[1].health.reason, "XID 79");
  EXPECT_EQ(s->devices[1].health.xid_counts.at(79), 1u);
  EXPECT_EQ(s->devices[1].gpu.index, 1u);  // identity from the new inventory
  EXPECT_EQ(s->devices[2].health.state, HealthState::kDegraded);
  EXPECT_EQ(s->FindByUuid("GPU-b"), nullptr);
}

TEST(DeviceStoreTest, NvmlConditionFollowsEachInventory) {
  DeviceStore store;
  gpu::Inventory down = TwoGpus();
  down.nvml_status = absl::UnavailableError("driver not loaded");
  store.SetInventory(down, kT0);
  for (const DeviceRecord& d : store.Get()->devices) {
    EXPECT_EQ(d.health.state, HealthState::kUnhealthy);
  }
  // NVML comes back: the "nvml" condition clears, others stay.
  ASSERT_TRUE(store.UpdateHealth(
      "GPU-b", [](GpuHealth& h) { h.Raise("xid", Cond(HealthState::kDegraded, "XID 63"), kT0); }));
  store.SetInventory(TwoGpus(), kT0 + absl::Seconds(10));
  std::shared_ptr<const Snapshot> s = store.Get();
  EXPECT_TRUE(s->nvml_ok);
  EXPECT_EQ(s->devices[0].health.state, HealthState::kHealthy);
  EXPECT_FALSE(s->devices[0].health.Has("nvml"));
  EXPECT_EQ(s->devices[1].health.state, HealthState::kDegraded);
  EXPECT_EQ(s->devices[1].health.reason, "XID 63");
}

TEST(DeviceStoreTest, SetHealthReplacesTheWholeVerdict) {
  DeviceStore store;
  store.SetInventory(TwoGpus(), kT0);
  GpuHealth h;
  h.Raise("liveness", Cond(HealthState::kUnhealthy, "hung"), kT0);
  EXPECT_TRUE(store.SetHealth("0000:02:00.0", h));
  EXPECT_FALSE(store.SetHealth("GPU-zzz", h));
  std::shared_ptr<const Snapshot> s = store.Get();
  EXPECT_EQ(s->devices[0].health.state, HealthState::kHealthy);
  EXPECT_EQ(s->devices[1].health.state, HealthState::kUnhealthy);
  EXPECT_EQ(s->devices[1].health.reason, "hung");
}

// --- DeviceStore: snapshots and waiters ---------------------------------------------------

TEST(DeviceStoreTest, EveryChangePublishesANewImmutableSnapshot) {
  DeviceStore store;
  store.SetInventory(TwoGpus(), kT0);
  std::shared_ptr<const Snapshot> before = store.Get();
  EXPECT_EQ(before, store.Get()) << "no change, same snapshot";
  ASSERT_TRUE(store.UpdateHealth(
      "GPU-a", [](GpuHealth& h) { h.Raise("xid", Cond(HealthState::kUnhealthy, "XID 48"), kT0); }));
  std::shared_ptr<const Snapshot> after = store.Get();
  EXPECT_EQ(after->version, before->version + 1);
  // A reader holding the old snapshot still sees the old world.
  EXPECT_EQ(before->devices[0].health.state, HealthState::kHealthy);
  EXPECT_EQ(after->devices[0].health.state, HealthState::kUnhealthy);
  store.SetInventory(TwoGpus(), kT0);
  EXPECT_EQ(store.Get()->version, after->version + 1);
}

TEST(DeviceStoreTest, WaitForChangeReturnsNewerSnapshotsAtOnce) {
  DeviceStore store;
  store.SetInventory(TwoGpus(), kT0);
  // Already newer than what the caller saw: no wait, whatever the timeout.
  EXPECT_EQ(store.WaitForChange(0, absl::InfiniteDuration())->version, 1u);
  // Nothing newer: the timeout passes (zero here) and the current snapshot comes back.
  EXPECT_EQ(store.WaitForChange(1, absl::ZeroDuration())->version, 1u);
}

TEST(DeviceStoreTest, AWaiterWakesOnTheNextChange) {
  DeviceStore store;
  store.SetInventory(TwoGpus(), kT0);
  uint64_t seen = store.Get()->version;
  std::shared_ptr<const Snapshot> got;
  std::thread waiter([&] { got = store.WaitForChange(seen, absl::InfiniteDuration()); });
  ASSERT_TRUE(store.UpdateHealth("GPU-b", [](GpuHealth& h) { h.last_xid = 31; }));
  waiter.join();
  ASSERT_NE(got, nullptr);
  EXPECT_GT(got->version, seen);
  EXPECT_EQ(got->devices[1].health.last_xid, 31);
}

TEST(DeviceStoreTest, ShutdownWakesEveryWaiterAndLaterWaitsReturnAtOnce) {
  DeviceStore store;
  store.SetInventory(TwoGpus(), kT0);
  uint64_t seen = store.Get()->version;
  std::vector<std::thread> waiters;
  std::vector<uint64_t> versions(4, 0);
  for (size_t i = 0; i < versions.size(); ++i) {
    waiters.emplace_back(
        [&, i] { versions[i] = store.WaitForChange(seen, absl::InfiniteDuration())->version; });
  }
  store.Shutdown();
  for (std::thread& t : waiters) t.join();         // would hang forever without the wake-up
  for (uint64_t v : versions) EXPECT_EQ(v, seen);  // no new version, just awake
  EXPECT_TRUE(store.shut_down());
  EXPECT_EQ(store.WaitForChange(seen, absl::InfiniteDuration())->version, seen);
}

}  // namespace
}  // namespace gpulet::state
