#include "recorder/postmortem.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gpu/nvml_api.h"
#include "gtest/gtest.h"

namespace gpulet::recorder {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kFault = 1780000600000;  // ten minutes into the recording

// Ten minutes of a healthy GPU at 1 s, the fault at the end.
RecorderDump Quiet(const std::string& boot = "boot-1") {
  RecorderDump d;
  d.uuid = "GPU-5090";
  d.name = "NVIDIA GeForce RTX 5090";
  d.pci_bus_id = "0000:02:00.0";
  d.node = "node-a";
  d.boot_id = boot;
  d.driver_version = "575.51.02";
  d.fault_ms = kFault;
  d.fault = "Unhealthy: XID 79: GPU has fallen off the bus";
  d.health = "Unhealthy";
  d.interval_ms = 1000;
  for (int64_t t = kFault - 600'000; t <= kFault; t += 1000) {
    RecordedSample s;
    s.at_ms = t;
    s.Set(Column::kAnswering, 1);
    s.Set(Column::kGpuTempC, 65);
    s.Set(Column::kPowerMw, 400'000);
    s.Set(Column::kPowerLimitMw, 575'000);
    s.Set(Column::kThrottleReasons, 0);
    s.Set(Column::kPcieLinkWidth, 16);
    s.Set(Column::kPcieLinkMts, 32000);
    s.Set(Column::kAerCorrectable, 2);
    s.Set(Column::kAerNonFatal, 0);
    s.Set(Column::kAerFatal, 0);
    s.Set(Column::kPcieReplays, 0);
    d.samples.push_back(s);
  }
  return d;
}

void Start(RecorderDump* d, unsigned pid, const std::string& pod, int64_t at) {
  d->events.push_back({.at_ms = at,
                       .kind = EventKind::kProcessStart,
                       .pid = pid,
                       .pod = pod,
                       .text = absl::StrCat("pid ", pid, " started")});
}
void Xid(RecorderDump* d, int xid, int64_t at) {
  d->events.push_back({.at_ms = at, .kind = EventKind::kXid, .xid = xid, .text = "NVRM: Xid"});
}
// From `from_ms` on, `column` reads `value`.
void From(RecorderDump* d, int64_t from_ms, Column column, int64_t value) {
  for (RecordedSample& s : d->samples) {
    if (s.at_ms >= from_ms) s.Set(column, value);
  }
}

std::string Said(const Verdict& v) {
  std::string out;
  for (const Evidence& e : v.evidence) absl::StrAppend(&out, e.text, "\n");
  return out;
}

TEST(PostmortemTest, FellOffTheBusWithPcieErrorsIsTheCard) {
  RecorderDump d = Quiet();
  From(&d, kFault - 30'000, Column::kAerNonFatal, 3);
  From(&d, kFault - 20'000, Column::kPcieLinkWidth, 8);
  From(&d, kFault, Column::kAnswering, 0);
  Xid(&d, 79, kFault - 500);
  Verdict v = Assess(d, {});
  EXPECT_EQ(v.cause, Cause::kHardware);
  EXPECT_THAT(Said(v), HasSubstr("XID 79: the GPU fell off the bus"));
  EXPECT_THAT(Said(v), HasSubstr("3 non-fatal PCIe (AER) errors"));
  EXPECT_THAT(Said(v), HasSubstr("link width dropped from x16 to x8"));
  EXPECT_THAT(v.next, HasSubstr("reseat"));
}

// Memory errors the ECC counters show before the fault point at the card: any uncorrected
// one, or many corrected ones; a few corrected ones do not.
TEST(PostmortemTest, EccErrorsBeforeTheFaultAreTheCard) {
  RecorderDump d = Quiet();
  d.fault = "Unhealthy: XID 48: uncorrectable ECC error";
  From(&d, kFault - 600'000, Column::kEccSbe, 2);
  From(&d, kFault - 600'000, Column::kEccDbe, 0);
  From(&d, kFault - 300'000, Column::kEccSbe, 40);
  From(&d, kFault - 2'000, Column::kEccDbe, 1);
  Verdict v = Assess(d, {});
  EXPECT_EQ(v.cause, Cause::kHardware);
  EXPECT_THAT(Said(v), HasSubstr("1 uncorrectable (double-bit) ECC memory errors"));
  EXPECT_THAT(Said(v), HasSubstr("38 corrected (single-bit) ECC memory errors"));

  RecorderDump few = Quiet();
  few.fault = "Unhealthy: the GPU does not answer (hung)";
  From(&few, kFault - 600'000, Column::kEccSbe, 2);
  From(&few, kFault - 300'000, Column::kEccSbe, 5);
  EXPECT_EQ(Assess(few, {}).cause, Cause::kUndetermined);
}

TEST(PostmortemTest, AHangAfterAThermalExcursionIsTheCard) {
  RecorderDump d = Quiet();
  d.fault = "Unhealthy: the GPU does not answer (hung)";
  From(&d, kFault - 120'000, Column::kGpuTempC, 93);
  From(&d, kFault - 100'000, Column::kThrottleReasons, kThrottleHwThermal);
  Verdict v = Assess(d, {});
  EXPECT_EQ(v.cause, Cause::kHardware);
  EXPECT_THAT(Said(v), HasSubstr("thermal excursion: the GPU at 93 °C"));
  EXPECT_THAT(Said(v), HasSubstr("thermal slowdown"));
}

TEST(PostmortemTest, AnExcursionLongBeforeTheFaultIsNotItsCause) {
  RecorderDump d = Quiet();
  for (RecordedSample& s : d.samples) {
    if (s.at_ms < kFault - 11 * 60'000 + 120'000) s.Set(Column::kGpuTempC, 95);
  }
  // Those samples are more than ten minutes before the fault only when the recording
  // reaches back that far: extend it.
  RecorderDump longer = d;
  for (RecordedSample& s : longer.samples) s.at_ms -= 120'000;
  longer.fault_ms = kFault;
  EXPECT_NE(Assess(longer, {}).cause, Cause::kHardware) << Said(Assess(longer, {}));
}

TEST(PostmortemTest, PowerAboveItsLimitIsAnExcursion) {
  RecorderDump d = Quiet();
  From(&d, kFault - 5000, Column::kPowerMw, 640'000);
  Verdict v = Assess(d, {});
  EXPECT_EQ(v.cause, Cause::kHardware);
  EXPECT_THAT(Said(v), HasSubstr("power excursion: 640 W over its 575 W limit"));
}

TEST(PostmortemTest, AFaultThatComesBackAfterAReboot) {
  RecorderDump before = Quiet("boot-0");
  before.fault_ms = kFault - 86'400'000;
  RecorderDump now = Quiet("boot-1");
  Verdict v = Assess(now, std::vector<RecorderDump>{before});
  EXPECT_EQ(v.cause, Cause::kHardware);
  EXPECT_THAT(Said(v), HasSubstr("in 1 earlier boot of the node"));
  // The same fault twice in one boot is not a repeat across reboots.
  EXPECT_NE(Assess(now, std::vector<RecorderDump>{Quiet("boot-1")}).cause, Cause::kHardware);
}

TEST(PostmortemTest, AFaultUnderDifferentWorkloadsIsTheCard) {
  RecorderDump before = Quiet();
  before.fault_ms = kFault - 3'600'000;
  Start(&before, 11, "ai/ollama-0/ollama", before.fault_ms - 60'000);
  RecorderDump now = Quiet();
  Start(&now, 12, "anpr/plate-reader-7/infer", kFault - 60'000);
  Verdict v = Assess(now, std::vector<RecorderDump>{before});
  EXPECT_EQ(v.cause, Cause::kHardware);
  EXPECT_THAT(Said(v), HasSubstr("2 different workloads"));
  EXPECT_THAT(Said(v), HasSubstr("ai/ollama-0/ollama"));
}

TEST(PostmortemTest, GspXidsAndADriverChangePointAtTheDriver) {
  RecorderDump d = Quiet();
  d.fault = "Unhealthy: XID 119: GSP RPC timeout";
  Xid(&d, 119, kFault - 200);
  Verdict v = Assess(d, {});
  EXPECT_EQ(v.cause, Cause::kDriver) << Said(v);
  EXPECT_THAT(Said(v), HasSubstr("XID 119"));

  RecorderDump before = Quiet();
  before.driver_version = "570.133.20";
  before.fault_ms = kFault - 3'600'000;
  RecorderDump after = Quiet();
  Verdict changed = Assess(after, std::vector<RecorderDump>{before});
  EXPECT_EQ(changed.cause, Cause::kDriver) << Said(changed);
  EXPECT_THAT(Said(changed), HasSubstr("from 570.133.20 to 575.51.02"));
}

TEST(PostmortemTest, AMismatchedLibraryIsTheConfiguration) {
  RecorderDump d = Quiet();
  d.events.push_back({.at_ms = kFault,
                      .kind = EventKind::kNvmlError,
                      .text = "NVML stopped answering: NVML_ERROR_LIB_RM_VERSION_MISMATCH",
                      .nvml_code = NVML_ERROR_LIB_RM_VERSION_MISMATCH});
  EXPECT_EQ(Assess(d, {}).cause, Cause::kDriver);
  // Decided by the code the recording kept, never by the text: the same words from another
  // failure do not say it.
  RecorderDump words = Quiet();
  words.events.push_back({.at_ms = kFault,
                          .kind = EventKind::kNvmlError,
                          .text = "NVML stopped answering: see LIB_RM_VERSION_MISMATCH docs",
                          .nvml_code = NVML_ERROR_TIMEOUT});
  EXPECT_NE(Assess(words, {}).cause, Cause::kDriver);
}

TEST(PostmortemTest, ApplicationXidsFromOnePodAreThatWorkload) {
  RecorderDump d = Quiet();
  d.fault = "XID 13: Graphics SM Warp Exception";
  d.health = "Healthy";
  Start(&d, 4242, "ai/ollama-0/ollama", kFault - 300'000);
  Xid(&d, 13, kFault - 2000);
  Xid(&d, 13, kFault - 1000);
  Xid(&d, 43, kFault);
  Verdict v = Assess(d, {});
  EXPECT_EQ(v.cause, Cause::kApplication);
  EXPECT_THAT(v.headline, HasSubstr("ai/ollama-0/ollama"));
  EXPECT_THAT(Said(v), HasSubstr("XID 13 ×2, XID 43 ×1"));
  // Two pods on the GPU: the XIDs are not tied to one.
  Start(&d, 5120, "ai/comfyui-0/comfyui", kFault - 200'000);
  EXPECT_EQ(Assess(d, {}).cause, Cause::kUndetermined);
}

TEST(PostmortemTest, NothingRecordedIsUndeterminedAndSaysWhatWouldTell) {
  RecorderDump d = Quiet();
  d.fault = "Unhealthy: XID 48: double-bit ECC error";
  Xid(&d, 48, kFault);
  Verdict v = Assess(d, {});
  EXPECT_EQ(v.cause, Cause::kUndetermined);
  EXPECT_THAT(v.next, HasSubstr("after a reboot"));
}

TEST(PostmortemTest, TheTimelineShowsTheFaultVerdictEventsAndSamples) {
  RecorderDump d = Quiet();
  Xid(&d, 79, kFault - 500);
  From(&d, kFault, Column::kAnswering, 0);
  From(&d, kFault - 30'000, Column::kAerFatal, 1);
  Verdict v = Assess(d, {});
  std::string text = TimelineText(d, v);
  EXPECT_THAT(text, HasSubstr("fault    2026-05-28T"));
  EXPECT_THAT(text, HasSubstr("verdict  hardware"));
  EXPECT_THAT(text, HasSubstr("xid            NVRM: Xid"));
  EXPECT_THAT(text, HasSubstr("lost"));
  EXPECT_THAT(text, HasSubstr("x16@32.0GT"));
  // One line a minute, plus every sample of the last minute: about 70, not 601.
  size_t lines = std::count(text.begin(), text.end(), '\n');
  EXPECT_LT(lines, 90u);
  EXPECT_GT(lines, 65u);
}

TEST(PostmortemTest, TheSvgIsOneEscapedDocument) {
  RecorderDump d = Quiet();
  d.fault = "Unhealthy: <script>alert(1)</script> & \"quotes\"\x01";
  Xid(&d, 79, kFault - 500);
  std::string svg = TimelineSvg(d, Assess(d, {}));
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_THAT(svg, HasSubstr("</svg>\n"));
  EXPECT_THAT(svg, HasSubstr("&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;quotes&quot;"));
  EXPECT_THAT(svg, Not(HasSubstr("<script>")));
  EXPECT_THAT(svg, Not(HasSubstr("\x01")));
  EXPECT_THAT(svg, HasSubstr("<polyline"));
  // An empty recording still draws.
  RecorderDump empty;
  empty.uuid = "GPU-x";
  EXPECT_THAT(TimelineSvg(empty, Assess(empty, {})), HasSubstr("</svg>"));
}

}  // namespace
}  // namespace gpulet::recorder
