#include "recorder/flight_recorder.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpulet::recorder {
namespace {

using ::testing::HasSubstr;

constexpr char kUuid[] = "GPU-5090";
const absl::Time kT0 = absl::FromUnixSeconds(1780000000);

// One GPU, as the store and the sampler would have it in a round.
struct Round {
  metrics::SampleSet set;
  state::Snapshot snap;

  Round() {
    state::DeviceRecord d;
    d.gpu.uuid = kUuid;
    d.gpu.name = "NVIDIA GeForce RTX 5090";
    d.gpu.bus_id = "0000:02:00.0";
    d.gpu.index = 1;
    d.gpu.in_nvml = true;
    snap.devices.push_back(d);
    metrics::GpuSampleState& st = set.by_uuid[kUuid];
    st.answering = true;
    st.last_attempt = kT0;
    st.call_seconds = 0.002;
    st.last.emplace();
    st.last->gpu_temp_c = 60;
    st.last->power_w = 300.4;
    st.last->power_limit_w = 575;
    st.last->clocks_event_reasons = 0;
  }
  metrics::GpuSampleState& gpu() { return set.by_uuid[kUuid]; }
  state::GpuHealth& health() { return snap.devices[0].health; }
};

const absl::Duration kWindow = absl::Minutes(30);
const absl::Duration kEvery = absl::Seconds(1);

TEST(FlightRecorderTest, KeepsTheWindowInAFixedRingOldestFirst) {
  FlightRecorder r({.node = "n", .boot_id = "b", .driver_version = "575.51"});
  Round round;
  for (int i = 0; i < 5; ++i) {
    round.gpu().last->gpu_temp_c = 60 + i;
    EXPECT_TRUE(
        r.Record(round.set, round.snap, {}, absl::Seconds(3), kEvery, kT0 + absl::Seconds(i))
            .empty());
  }
  std::optional<RecorderDump> d = r.Dump(kUuid, "asked", kT0 + absl::Seconds(5));
  ASSERT_TRUE(d.has_value());
  ASSERT_EQ(d->samples.size(), 3u);
  EXPECT_EQ(d->samples[0].Get(Column::kGpuTempC), 62);
  EXPECT_EQ(d->samples[2].Get(Column::kGpuTempC), 64);
  EXPECT_EQ(d->samples[2].Get(Column::kPowerMw), 300400);
  EXPECT_EQ(d->samples[2].Get(Column::kNvmlMs), 2);
  EXPECT_EQ(d->samples[2].Get(Column::kAnswering), 1);
  EXPECT_FALSE(d->samples[2].Get(Column::kPcieLinkWidth).has_value());
  EXPECT_EQ(d->node, "n");
  EXPECT_EQ(d->driver_version, "575.51");
  EXPECT_EQ(d->interval_ms, 1000);
  ASSERT_FALSE(d->events.empty());
  EXPECT_EQ(d->events[0].kind, EventKind::kRecorderStart);
  EXPECT_THAT(d->events[0].text, HasSubstr("575.51"));
  // The memory is two rings of fixed capacity: 30 minutes at 1 s is 300 rounds and 50 folded
  // samples, about 33 KiB.
  r.Record(round.set, round.snap, {}, kWindow, kEvery, kT0 + absl::Seconds(6));
  EXPECT_EQ(r.Dump(kUuid, "", kT0)->samples.size(), 4u);  // the 3 kept and this one
  EXPECT_GE(r.MemoryBytes(), 350 * sizeof(RecordedSample));
  EXPECT_LT(r.MemoryBytes(), 40u << 10);
}

TEST(FlightRecorderTest, OlderRoundsAreFoldedKeepingTheirWorst) {
  FlightRecorder r({});
  Round round;
  const absl::Duration window = absl::Minutes(10);  // 5 minutes of rounds, 10 folded samples
  for (int i = 0; i < 600; ++i) {
    metrics::GpuSampleState& st = round.gpu();
    st.last->gpu_temp_c = i == 100 ? 95 : 60;
    st.last->clocks_event_reasons = i == 110 ? kThrottleHwThermal : (i == 111 ? 0x4 : 0);
    st.last->sm_clock_mhz = i == 120 ? 300 : 1900;
    r.Record(round.set, round.snap, {}, window, kEvery, kT0 + absl::Seconds(i));
  }
  RecorderDump d = *r.Dump(kUuid, "", kT0);
  // The last 300 rounds as they were, before them one sample per 30 s.
  ASSERT_GE(d.samples.size(), 300u + 9);
  ASSERT_LE(d.samples.size(), 300u + 11);
  for (size_t i = 1; i < d.samples.size(); ++i) {
    EXPECT_LT(d.samples[i - 1].at_ms, d.samples[i].at_ms) << i;
  }
  EXPECT_EQ(d.samples[d.samples.size() - 300].at_ms, UnixMillis(kT0 + absl::Seconds(300)));
  std::optional<int64_t> hottest, slowest;
  int64_t reasons = 0;
  for (size_t i = 0; i + 300 < d.samples.size(); ++i) {
    hottest = std::max(hottest.value_or(0), *d.samples[i].Get(Column::kGpuTempC));
    slowest = std::min(slowest.value_or(100000), *d.samples[i].Get(Column::kSmClockMhz));
    reasons |= *d.samples[i].Get(Column::kThrottleReasons);
  }
  EXPECT_EQ(hottest, 95);
  EXPECT_EQ(slowest, 300);
  EXPECT_EQ(reasons, kThrottleHwThermal | 0x4);
}

TEST(FlightRecorderTest, AZeroWindowDropsEverything) {
  FlightRecorder r({});
  Round round;
  r.Record(round.set, round.snap, {}, kWindow, kEvery, kT0);
  EXPECT_GT(r.MemoryBytes(), 0u);
  r.Record(round.set, round.snap, {}, absl::ZeroDuration(), kEvery, kT0);
  EXPECT_EQ(r.MemoryBytes(), 0u);
  EXPECT_FALSE(r.Dump(kUuid, "", kT0).has_value());
}

TEST(FlightRecorderTest, AGpuGoingUnhealthyIsDumpedAtOnceWithItsXid) {
  FlightRecorder r({});
  Round round;
  r.Record(round.set, round.snap, {}, kWindow, kEvery, kT0);
  r.AddXid(kUuid, 79, "NVRM: Xid (PCI:0000:02:00): 79, GPU has fallen off the bus.",
           kT0 + absl::Milliseconds(1500));
  round.health().state = state::HealthState::kUnhealthy;
  round.health().reason = "XID 79: GPU has fallen off the bus";
  round.health().action = "reboot the node";
  round.gpu().answering = false;
  round.gpu().error = "NVML_ERROR_GPU_IS_LOST";
  round.gpu().nvml_code = 15;
  std::vector<RecorderDump> dumps =
      r.Record(round.set, round.snap, {}, kWindow, kEvery, kT0 + absl::Seconds(2));
  ASSERT_EQ(dumps.size(), 1u);
  EXPECT_EQ(dumps[0].fault, "Unhealthy: XID 79: GPU has fallen off the bus (reboot the node)");
  EXPECT_EQ(dumps[0].fault_ms, UnixMillis(kT0 + absl::Seconds(2)));
  EXPECT_EQ(dumps[0].health, "Unhealthy");
  std::vector<EventKind> kinds;
  for (const RecordedEvent& e : dumps[0].events) kinds.push_back(e.kind);
  EXPECT_THAT(kinds, ::testing::ElementsAre(EventKind::kRecorderStart, EventKind::kXid,
                                            EventKind::kNvmlError, EventKind::kHealth));
  EXPECT_EQ(dumps[0].events[1].xid, 79);
  EXPECT_EQ(dumps[0].events[2].nvml_code, 15);  // kept, for what reads the recording
  EXPECT_EQ(dumps[0].samples.back().Get(Column::kAnswering), 0);
  // Still out next round: no second dump.
  EXPECT_TRUE(r.Record(round.set, round.snap, {}, kWindow, kEvery, kT0 + absl::Seconds(3)).empty());
}

// The XID policy marks the GPU Unhealthy just after it reports the XID; a round can fall
// between the two. The incident is still one dump, the Unhealthy one, carrying the XID.
TEST(FlightRecorderTest, AnXidFollowedByUnhealthyIsOneDump) {
  FlightRecorder r({});
  Round round;
  r.Record(round.set, round.snap, {}, kWindow, kEvery, kT0);
  r.AddXid(kUuid, 79, "GPU has fallen off the bus.", kT0 + absl::Milliseconds(900));
  EXPECT_TRUE(r.Record(round.set, round.snap, {}, kWindow, kEvery, kT0 + absl::Seconds(1)).empty());
  round.health().state = state::HealthState::kUnhealthy;
  round.health().reason = "XID 79: GPU has fallen off the bus";
  std::vector<RecorderDump> dumps =
      r.Record(round.set, round.snap, {}, kWindow, kEvery, kT0 + absl::Seconds(2));
  ASSERT_EQ(dumps.size(), 1u);
  EXPECT_THAT(dumps[0].fault, ::testing::StartsWith("Unhealthy: XID 79"));
  bool has_xid = false;
  for (const RecordedEvent& e : dumps[0].events) has_xid = has_xid || e.xid == 79;
  EXPECT_TRUE(has_xid);
  for (int i = 3; i < 10; ++i) {
    EXPECT_TRUE(
        r.Record(round.set, round.snap, {}, kWindow, kEvery, kT0 + absl::Seconds(i)).empty());
  }
}

TEST(FlightRecorderTest, AGpuAlreadyOutWhenRecordingStartsIsNotDumpedAgain) {
  FlightRecorder r({});
  Round round;
  round.health().state = state::HealthState::kUnhealthy;
  EXPECT_TRUE(r.Record(round.set, round.snap, {}, kWindow, kEvery, kT0).empty());
}

TEST(FlightRecorderTest, XidOnlyFaultsAreDumpedAtMostOncePerGap) {
  FlightRecorder r({});
  Round round;
  r.Record(round.set, round.snap, {}, kWindow, kEvery, kT0);
  r.AddXid(kUuid, 13, "Graphics SM Warp Exception", kT0 + absl::Seconds(1));
  // Dumped once it has settled (kXidSettle), not in the round that saw it.
  EXPECT_TRUE(r.Record(round.set, round.snap, {}, kWindow, kEvery, kT0 + absl::Seconds(2)).empty());
  EXPECT_EQ(r.Record(round.set, round.snap, {}, kWindow, kEvery, kT0 + absl::Seconds(3)).size(),
            1u);
  r.AddXid(kUuid, 13, "Graphics SM Warp Exception", kT0 + absl::Seconds(4));
  EXPECT_TRUE(r.Record(round.set, round.snap, {}, kWindow, kEvery, kT0 + absl::Seconds(7)).empty());
  std::vector<RecorderDump> later =
      r.Record(round.set, round.snap, {}, kWindow, kEvery, kT0 + absl::Seconds(3) + kXidDumpGap);
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].fault, "XID 13: Graphics SM Warp Exception");
  // An XID for a GPU no round has seen is dropped, not kept forever.
  r.AddXid("GPU-unknown", 79, "x", kT0);
  EXPECT_FALSE(r.Dump("GPU-unknown", "", kT0).has_value());
}

TEST(FlightRecorderTest, ProcessesStartingAndStoppingAreEventsWithTheirNames) {
  FlightRecorder r({});
  Round round;
  gpu::GpuProcess ollama;
  ollama.pid = 4242;
  round.gpu().last->processes = {ollama};
  round.gpu().processes[4242].name = "ollama";
  r.Record(round.set, round.snap, {}, kWindow, kEvery, kT0);
  round.gpu().last->processes.clear();
  round.gpu().processes.clear();
  r.Record(round.set, round.snap, {}, kWindow, kEvery, kT0 + absl::Seconds(1));
  RecorderDump d = *r.Dump(kUuid, "", kT0);
  ASSERT_EQ(d.events.size(), 3u);
  EXPECT_EQ(d.events[1].kind, EventKind::kProcessStart);
  EXPECT_EQ(d.events[1].pid, 4242u);
  EXPECT_EQ(d.events[1].text, "pid 4242 ollama started");
  EXPECT_EQ(d.events[2].kind, EventKind::kProcessStop);
  EXPECT_EQ(d.samples[0].Get(Column::kProcesses), 1);
  EXPECT_EQ(d.samples[1].Get(Column::kProcesses), 0);
}

TEST(FlightRecorderTest, PciReadingsAndAShorterWindowKeepTheNewest) {
  FlightRecorder r({});
  Round round;
  PciLinkReading link{
      .width = 16, .mts = 32000, .aer_correctable = 3, .aer_nonfatal = 0, .aer_fatal = 0};
  for (int i = 0; i < 10; ++i) {
    link.aer_correctable = 3 + i;
    r.Record(round.set, round.snap, {{kUuid, link}}, kWindow, kEvery, kT0 + absl::Seconds(i));
  }
  r.Record(round.set, round.snap, {{kUuid, link}}, absl::Seconds(4), kEvery,
           kT0 + absl::Seconds(10));
  RecorderDump d = *r.Dump(kUuid, "", kT0);
  ASSERT_EQ(d.samples.size(), 4u);
  EXPECT_EQ(d.samples[0].at_ms, UnixMillis(kT0 + absl::Seconds(7)));
  EXPECT_EQ(d.samples[3].Get(Column::kPcieLinkWidth), 16);
  EXPECT_EQ(d.samples[3].Get(Column::kPcieLinkMts), 32000);
  EXPECT_EQ(d.samples[2].Get(Column::kAerCorrectable), 12);
}

TEST(FlightRecorderTest, EventsAreBoundedInNumberAndSize) {
  FlightRecorder r({});
  Round round;
  r.Record(round.set, round.snap, {}, kWindow, kEvery, kT0);
  // A long line with a multi-byte character across the cut.
  std::string text(kMaxEventText - 1, 'x');
  text += "°C and more";
  for (size_t i = 0; i < kMaxEvents + 10; ++i)
    r.AddXid(kUuid, 13, text, kT0 + absl::Milliseconds(i));
  RecorderDump d = *r.Dump(kUuid, "", kT0);
  EXPECT_EQ(d.events.size(), kMaxEvents);
  EXPECT_LE(d.events.back().text.size(), kMaxEventText);
  EXPECT_EQ(d.events.back().text, std::string(kMaxEventText - 1, 'x'));
}

TEST(FlightRecorderTest, ValuesOutsideInt32AreClampedNotWrapped) {
  RecordedSample s;
  s.Set(Column::kFbUsedMib, int64_t{1} << 40);
  s.Set(Column::kPowerMw, -(int64_t{1} << 40));
  EXPECT_EQ(s.Get(Column::kFbUsedMib), std::numeric_limits<int32_t>::max());
  EXPECT_EQ(s.Get(Column::kPowerMw), std::numeric_limits<int32_t>::min() + int64_t{1});
}

}  // namespace
}  // namespace gpulet::recorder
