#include "health/event_monitor.h"

#include <memory>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gpu/nvml_api.h"
#include "gtest/gtest.h"
#include "health/kmsg_source.h"
#include "health/xid_policy.h"
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

constexpr absl::Duration kQuiet = absl::Minutes(5);

// A kernel log record reporting `xid` for the GPU at PCI 0000:<bus>:00.
std::string XidRecord(int seq, const std::string& bus, int xid) {
  return absl::StrCat("4,", seq, ",", 1000 + seq, ",-;NVRM: Xid (PCI:0000:", bus, ":00): ", xid,
                      ", pid='<unknown>', name=<unknown>, something happened");
}

class EventMonitorTest : public ::testing::Test {
 protected:
  EventMonitorTest() {
    gpu::DeviceIdentity a, b;
    a.index = 0;
    a.uuid = kGpu0;
    b.index = 1;
    b.uuid = kGpu1;
    library_.AddDevice(a);
    library_.AddDevice(b);
    gpu::Inventory inv;
    inv.gpus = {NvmlGpu(0, kGpu0, "0000:01:00.0"), NvmlGpu(1, kGpu1, "0000:02:00.0")};
    store_.SetInventory(inv, clock_.Now());
    auto kmsg = std::make_unique<FakeKernelLogSource>();
    kmsg_ = kmsg.get();
    monitor_ = std::make_unique<EventMonitor>(&library_, 2, std::move(kmsg), &policy_, Options());
  }

  EventMonitor::Options Options() {
    // The NVML slice is real time (nvmlEventSetWait's is); short so Stop is quick.
    return {.clock = &clock_, .event_wait = absl::Milliseconds(5)};
  }

  // Starts the monitor and waits until both sources are being watched.
  void Start() {
    monitor_->Start();
    ASSERT_TRUE(kmsg_->AwaitIdle());
    ASSERT_TRUE(clock_.AwaitSleepers(1));  // the policy's tick worker
  }

  // Runs `inject`, then waits until the store has published a change.
  template <typename F>
  void AndWaitForStore(F inject) {
    uint64_t seen = store_.Get()->version;
    inject();
    ASSERT_GT(store_.WaitForChange(seen, absl::Seconds(10))->version, seen);
  }

  const state::GpuHealth& Health(const std::string& uuid) {
    snap_ = store_.Get();
    return snap_->FindByUuid(uuid)->health;
  }
  uint64_t Count(const std::string& uuid, int xid) {
    const state::GpuHealth& h = Health(uuid);
    auto it = h.xid_counts.find(xid);
    return it == h.xid_counts.end() ? 0 : it->second;
  }

  SimulatedClock clock_;
  // Its event wait runs on the real clock: events arrive at once, and a wait with none
  // ends after Options().event_wait, as NVML's does.
  FakeGpuLibrary library_{RealClock()};
  state::DeviceStore store_;
  XidPolicy policy_{&store_, {13, 31, 43, 45, 68, 94}, kQuiet};
  FakeKernelLogSource* kmsg_ = nullptr;
  std::unique_ptr<EventMonitor> monitor_;
  std::shared_ptr<const state::Snapshot> snap_;
};

TEST_F(EventMonitorTest, NvmlXidReachesTheStore) {
  Start();
  AndWaitForStore([&] { library_.InjectXid(0, 79); });
  EXPECT_EQ(library_.registered_count(), 2u);  // registered before it waited for events
  EXPECT_EQ(Health(kGpu0).state, state::HealthState::kUnhealthy);
  EXPECT_EQ(Health(kGpu0).last_xid, 79);
  EXPECT_EQ(Count(kGpu0, 79), 1u);
  EXPECT_EQ(Health(kGpu0).conditions.at("xid").since, clock_.Now());
  EXPECT_EQ(Health(kGpu1).state, state::HealthState::kHealthy);
}

TEST_F(EventMonitorTest, DoubleBitEccCountsAsXid48) {
  Start();
  AndWaitForStore([&] { library_.InjectDoubleBitEcc(1); });
  EXPECT_EQ(Count(kGpu1, 48), 1u);
  EXPECT_NE(Health(kGpu1).state, state::HealthState::kHealthy);
}

TEST_F(EventMonitorTest, KernelLogXidReachesTheStore) {
  Start();
  AndWaitForStore([&] { kmsg_->Push(XidRecord(1, "02", 79)); });
  EXPECT_EQ(Count(kGpu1, 79), 1u);
  EXPECT_EQ(Health(kGpu1).state, state::HealthState::kUnhealthy);
}

TEST_F(EventMonitorTest, AnXidNamingAGpuInstanceReachesThatMigDeviceFromEitherSource) {
  gpu::MigLayout layout;
  layout.enabled = true;
  for (unsigned gi : {3u, 4u}) {
    gpu::MigDeviceInfo m;
    m.gpu_instance_id = gi;
    m.uuid = absl::StrCat("MIG-", gi);
    layout.devices.push_back(m);
  }
  ASSERT_TRUE(store_.SetMigLayout(kGpu1, layout));
  Start();
  AndWaitForStore([&] {
    kmsg_->Push(
        "4,1,1001,-;NVRM: Xid (PCI:0000:02:00 GPU-I:03): 79, pid='<unknown>', name=<unknown>, x");
  });
  snap_ = store_.Get();
  const state::DeviceRecord* d = snap_->FindByUuid(kGpu1);
  EXPECT_EQ(d->health.state, state::HealthState::kHealthy);
  EXPECT_FALSE(d->MigHealthy(3));
  EXPECT_TRUE(d->MigHealthy(4));
  AndWaitForStore([&] { library_.InjectEvent({1, nvmlEventTypeXidCriticalError, 48, 4u, 0u}); });
  snap_ = store_.Get();
  EXPECT_FALSE(snap_->FindByUuid(kGpu1)->MigHealthy(4));
  EXPECT_EQ(snap_->FindByUuid(kGpu1)->health.state, state::HealthState::kHealthy);
}

TEST_F(EventMonitorTest, SameXidFromBothSourcesWithinTwoSecondsCountsOnce) {
  Start();
  AndWaitForStore([&] { library_.InjectXid(0, 79); });
  clock_.Advance(absl::Milliseconds(1999));
  kmsg_->Push(XidRecord(1, "01", 79));
  ASSERT_TRUE(kmsg_->AwaitIdle());
  EXPECT_EQ(Count(kGpu0, 79), 1u) << "the kernel log's copy of the NVML event";

  // Two seconds after the last sighting it is a new XID.
  clock_.Advance(absl::Seconds(2));
  AndWaitForStore([&] { kmsg_->Push(XidRecord(2, "01", 79)); });
  EXPECT_EQ(Count(kGpu0, 79), 2u);
}

TEST_F(EventMonitorTest, ApplicationXidsAreCountedButNeverTakeTheGpuOut) {
  Start();
  for (int xid : {13, 31, 43, 45, 68, 94}) {
    SCOPED_TRACE(xid);
    clock_.Advance(absl::Seconds(5));
    AndWaitForStore([&] { library_.InjectXid(0, static_cast<unsigned long long>(xid)); });
    clock_.Advance(absl::Seconds(5));
    AndWaitForStore([&] { kmsg_->Push(XidRecord(xid, "01", xid)); });
    EXPECT_EQ(Count(kGpu0, xid), 2u);
    EXPECT_EQ(Health(kGpu0).state, state::HealthState::kHealthy);
  }
}

TEST_F(EventMonitorTest, TickWorkerClearsTheConditionAfterTheQuietPeriod) {
  Start();
  AndWaitForStore([&] { library_.InjectXid(0, 79); });
  clock_.Advance(kQuiet - absl::Seconds(1));
  ASSERT_TRUE(clock_.AwaitSleepers(1));
  EXPECT_EQ(Health(kGpu0).state, state::HealthState::kUnhealthy);
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(clock_.AwaitSleepers(1));
  EXPECT_EQ(Health(kGpu0).state, state::HealthState::kHealthy);
  EXPECT_EQ(Count(kGpu0, 79), 1u);
}

TEST_F(EventMonitorTest, AFailedNvmlWaitBacksOffOnTheClock) {
  library_.FailNextEventWait(absl::UnavailableError("GPU lost"));
  Start();
  ASSERT_TRUE(clock_.AwaitSleepers(2));  // the tick worker and the NVML back-off
  library_.InjectXid(0, 79);
  EXPECT_EQ(Count(kGpu0, 79), 0u) << "still backing off";
  clock_.Advance(absl::Milliseconds(500));
  ASSERT_TRUE(library_.AwaitEventsDelivered());
  snap_ = store_.WaitForChange(1, absl::Seconds(10));
  EXPECT_EQ(Count(kGpu0, 79), 1u);
}

TEST_F(EventMonitorTest, StopReturnsAtOnce) {
  Start();
  const absl::Time before = absl::Now();
  monitor_->Stop();
  // The kernel-log reader waits with no timeout and the tick is a simulated second away:
  // only Interrupt and the stop flag end them. The NVML slice is 5 ms here.
  EXPECT_LT(absl::Now() - before, absl::Seconds(1));
  EXPECT_EQ(clock_.sleepers(), 0);
  monitor_->Stop();  // idempotent
}

TEST_F(EventMonitorTest, WithoutSourcesTheTickStillRuns) {
  EventMonitor monitor(nullptr, 0, nullptr, &policy_, Options());
  monitor.Start();
  ASSERT_TRUE(clock_.AwaitSleepers(1));
  monitor.Stop();
  EXPECT_EQ(clock_.sleepers(), 0);
}

TEST_F(EventMonitorTest, AKernelLogThatCannotBeOpenedIsSkipped) {
  auto kmsg = std::make_unique<FakeKernelLogSource>();
  kmsg->SetOpenError(absl::PermissionDeniedError("no CAP_SYSLOG"));
  EventMonitor monitor(&library_, 2, std::move(kmsg), &policy_, Options());
  monitor.Start();
  AndWaitForStore([&] { library_.InjectXid(1, 79); });
  EXPECT_EQ(Count(kGpu1, 79), 1u);
  monitor.Stop();
}

}  // namespace
}  // namespace gpulet::health
