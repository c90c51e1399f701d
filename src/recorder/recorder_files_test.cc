#include "recorder/recorder_files.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/files.h"

namespace gpulet::recorder {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

RecorderDump Sample(const std::string& uuid, int64_t fault_ms) {
  RecorderDump d;
  d.uuid = uuid;
  d.name = "NVIDIA GeForce RTX 5090";
  d.pci_bus_id = "0000:02:00.0";
  d.index = 1;
  d.node = "node-a";
  d.boot_id = "boot-1";
  d.driver_version = "575.51.02";
  d.gpulet_version = "0.1.0";
  d.fault_ms = fault_ms;
  d.fault = "Unhealthy: XID 79: GPU has fallen off the bus";
  d.health = "Unhealthy";
  d.interval_ms = 1000;
  for (int i = 0; i < 3; ++i) {
    RecordedSample s;
    s.at_ms = fault_ms - 3000 + i * 1000;
    s.Set(Column::kGpuTempC, 70 + i);
    s.Set(Column::kAnswering, i < 2 ? 1 : 0);
    d.samples.push_back(s);
  }
  d.events.push_back({.at_ms = fault_ms - 500,
                      .kind = EventKind::kXid,
                      .xid = 79,
                      .text = "NVRM: Xid (PCI:0000:02:00): 79, GPU has fallen off the bus."});
  d.events.push_back({.at_ms = fault_ms - 2000,
                      .kind = EventKind::kProcessStart,
                      .pid = 4242,
                      .pod = "ai/ollama-0/ollama",
                      .text = "pid 4242 ollama started"});
  d.events.push_back({.at_ms = fault_ms - 100,
                      .kind = EventKind::kNvmlError,
                      .text = "NVML stopped answering: NVML_ERROR_GPU_IS_LOST",
                      .nvml_code = 15});
  return d;
}

TEST(RecorderFilesTest, AJsonRoundTripKeepsEverything) {
  RecorderDump d = Sample("GPU-8a41", 1780000000000);
  absl::StatusOr<RecorderDump> back = DumpFromJson(DumpToJson(d));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, d);
}

TEST(RecorderFilesTest, ColumnsItDoesNotKnowAreSkippedAndMissingOnesAbsent) {
  const std::string text = R"({"version": 1, "gpu": {"uuid": "GPU-1", "name": "", "pci_bus_id": ""},
    "node": "", "boot_id": "", "driver_version": "", "gpulet_version": "",
    "fault": {"at_ms": 5, "what": "x", "health": "Unhealthy"}, "interval_ms": 1000,
    "columns": ["at_ms", "future_column", "gpu_temp_c"], "samples": [[1, 7, 88]], "events": []})";
  absl::StatusOr<RecorderDump> d = DumpFromJson(text);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->samples.size(), 1u);
  EXPECT_EQ(d->samples[0].Get(Column::kGpuTempC), 88);
  EXPECT_FALSE(d->samples[0].Get(Column::kPowerMw).has_value());
}

TEST(RecorderFilesTest, BadFilesSayWhatIsWrong) {
  const std::string good = DumpToJson(Sample("GPU-1", 1780000000000));
  struct Case {
    std::string text;
    std::string says;
  } cases[] = {
      {"", "not valid JSON"},
      {"[]", "not a JSON object"},
      {R"({"version": 2})", "version 2 is not 1"},
      {R"({"version": 1})", "gpu is missing"},
      {absl::StrReplaceAll(good, {{R"("uuid":"GPU-1")", R"("uuid":"")"}}), "gpu.uuid is empty"},
      {absl::StrReplaceAll(good, {{R"("kind":"xid")", R"("kind":"bogus")"}}), "kind \"bogus\""},
      {absl::StrReplaceAll(good, {{R"("xid":79)", R"("xid":-1)"}}), "xid must be an XID number"},
      {absl::StrReplaceAll(good, {{R"("nvml_code":15)", R"("nvml_code":1000)"}}),
       "nvml_code must be an NVML code, not 1000"},
      {absl::StrReplaceAll(good, {{R"("nvml_code":15)", R"("nvml_code":"15")"}}), "nvml_code"},
      {absl::StrReplaceAll(good, {{R"("columns":["at_ms",)", R"("columns":[)"}}),
       "does not start with \"at_ms\""},
      {absl::StrReplaceAll(good, {{",70,", ",9999999999,"}}), "out of range"},
      {absl::StrReplaceAll(good, {{",70,", ",\"hot\","}}), "neither an integer nor null"},
      {absl::StrReplaceAll(good, {{"[1779999997000,", "[-5,"}}), "samples[0][0] is not a time"},
      {absl::StrReplaceAll(good, {{R"("at_ms":1780000000000)", R"("at_ms":99999999999999999)"}}),
       "fault.at_ms must be a time"},
      {absl::StrReplaceAll(good, {{R"("interval_ms":1000)", R"("interval_ms":-1)"}}),
       "interval_ms must be from 0 to a day"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<RecorderDump> d = DumpFromJson(c.text);
    ASSERT_FALSE(d.ok()) << c.text;
    EXPECT_THAT(d.status().message(), HasSubstr(c.says)) << c.text;
    EXPECT_THAT(d.status().message(), HasSubstr("not a flight recorder file"));
  }
}

TEST(RecorderFilesTest, WritesPrivatelyKeepsTheNewestPerGpuAndReadsThemBackInOrder) {
  testing::ScratchDir dir;
  RecorderFiles files(dir.path() + "/recorder", "/var/lib/gpulet/recorder");
  constexpr int64_t kAt = 1780000000000;
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(files.Write(Sample("GPU-a", kAt + i)).ok());
  ASSERT_TRUE(files.Write(Sample("GPU-a-b", kAt - 5)).ok());  // a name that extends GPU-a's
  struct stat st {};
  ASSERT_EQ(stat((dir.path() + "/recorder/GPU-a-1780000000009.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  std::vector<RecorderFiles::Loaded> all = files.LoadAll();
  ASSERT_EQ(all.size(), kRecorderFilesPerGpu + 1);
  EXPECT_EQ(all[0].path, "/var/lib/gpulet/recorder/GPU-a-b-1779999999995.json");
  EXPECT_EQ(all[1].path, "/var/lib/gpulet/recorder/GPU-a-1780000000002.json");
  ASSERT_TRUE(all.back().dump.ok()) << all.back().dump.status();
  EXPECT_EQ(all.back().dump->fault_ms, kAt + 9);
}

TEST(RecorderFilesTest, ACorruptFileIsNamedAndTheOthersStillLoad) {
  testing::ScratchDir dir;
  RecorderFiles files(dir.path(), "/var/lib/gpulet/recorder");
  ASSERT_TRUE(files.Write(Sample("GPU-a", 1780000002000)).ok());
  std::ofstream(dir.path() + "/GPU-a-1780000001000.json") << "{\"version\": 1, \"gpu\": {";  // cut
  fs::create_directories(dir.path() + "/GPU-b-1780000003000.json");  // not a file
  std::vector<RecorderFiles::Loaded> all = files.LoadAll();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_FALSE(all[0].dump.ok());
  EXPECT_THAT(all[0].dump.status().message(),
              HasSubstr("/var/lib/gpulet/recorder/GPU-a-1780000001000.json"));
  EXPECT_THAT(all[0].dump.status().message(), HasSubstr("move it away"));
  EXPECT_TRUE(all[1].dump.ok());
  EXPECT_FALSE(all[2].dump.ok());
}

TEST(RecorderFilesTest, AGpuNameCannotLeaveTheDirectory) {
  RecorderDump d = Sample("../../etc/passwd", 1780000000007);
  EXPECT_EQ(DumpFileName(d), "------etc-passwd-1780000000007.json");
  EXPECT_TRUE(RecorderFiles("/nonexistent/x", "/x").LoadAll().empty());
}

}  // namespace
}  // namespace gpulet::recorder
