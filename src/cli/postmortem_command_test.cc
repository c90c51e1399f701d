// `gpulet postmortem` as a user runs it: against a host root holding the recorder's files.
#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "recorder/recorder_files.h"
#include "recorder/retirement.h"
#include "testing/files.h"
#include "testing/homelab.h"
#include "testing/subprocess.h"

namespace gpulet::cli {
namespace {

namespace fs = std::filesystem;
using ::gpulet::testing::RunProgram;
using ::testing::HasSubstr;

recorder::RecorderDump Fault(const std::string& uuid, unsigned index, int64_t fault_ms,
                             bool pcie_errors) {
  recorder::RecorderDump d;
  d.uuid = uuid;
  d.index = index;
  d.name = "NVIDIA GeForce RTX 5090";
  d.pci_bus_id = "0000:02:00.0";
  d.boot_id = "b";
  d.fault_ms = fault_ms;
  d.fault = "Unhealthy: XID 79: GPU has fallen off the bus";
  d.health = "Unhealthy";
  d.interval_ms = 1000;
  for (int i = 0; i < 5; ++i) {
    recorder::RecordedSample s;
    s.at_ms = fault_ms - 4000 + i * 1000;
    s.Set(recorder::Column::kAnswering, i < 4 ? 1 : 0);
    s.Set(recorder::Column::kGpuTempC, 70);
    s.Set(recorder::Column::kAerFatal, pcie_errors ? i : 0);
    d.samples.push_back(s);
  }
  d.events.push_back({.at_ms = fault_ms - 100,
                      .kind = recorder::EventKind::kXid,
                      .xid = 79,
                      .text = "NVRM: Xid (PCI:0000:02:00): 79, GPU has fallen off the bus."});
  return d;
}

class PostmortemCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(root_.path()) / "var/lib/gpulet/recorder";
    recorder::RecorderFiles files(dir_.string(), "/var/lib/gpulet/recorder");
    ASSERT_TRUE(files.Write(Fault("GPU-aaaa", 0, 1780000000000, false)).ok());
    ASSERT_TRUE(files.Write(Fault("GPU-bbbb", 1, 1780000100000, true)).ok());
  }
  testing::RunResult Run(std::vector<std::string> args) {
    std::vector<std::string> argv = {gpulet::testing::GpuletBinary(), "--host-root", root_.path(),
                                     "postmortem"};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProgram(argv);
  }
  testing::ScratchDir root_;
  fs::path dir_;
};

TEST_F(PostmortemCliTest, ShowsEachGpusLatestFaultWithItsVerdict) {
  auto r = Run({});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("GPU-aaaa"));
  EXPECT_THAT(r.out, HasSubstr("verdict  hardware"));      // GPU-bbbb: fell off with AER errors
  EXPECT_THAT(r.out, HasSubstr("verdict  undetermined"));  // GPU-aaaa: nothing else recorded
  EXPECT_THAT(r.out, HasSubstr("4 fatal PCIe (AER) errors"));

  auto json = Run({"--json", "--gpu", "1"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  nlohmann::json doc = nlohmann::json::parse(json.out);
  ASSERT_EQ(doc.size(), 1u);
  EXPECT_EQ(doc[0]["uuid"], "GPU-bbbb");
  EXPECT_EQ(doc[0]["verdict"], "hardware");
}

TEST_F(PostmortemCliTest, DrawsOneFaultAsSvg) {
  const std::string svg = root_.path() + "/fault.svg";
  auto r = Run({"--gpu", "GPU-bb", "--svg", svg});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(testing::ReadTextFile(svg), HasSubstr("<svg xmlns"));
  auto out = Run({"--gpu", "1", "--svg", "-"});
  EXPECT_EQ(out.exit_code, 0) << out.err;
  EXPECT_EQ(out.out.rfind("<svg xmlns", 0), 0u);  // the image alone, no timeline
  EXPECT_THAT(out.out, HasSubstr("</svg>"));
  auto two = Run({"--svg", svg});
  EXPECT_EQ(two.exit_code, 2);
  EXPECT_THAT(two.err, HasSubstr("choose one with --gpu"));
}

TEST_F(PostmortemCliTest, ACorruptFileIsNamedAndTheRestIsShown) {
  std::ofstream(dir_ / "GPU-cccc-1780000200000.json") << "{\"version\": 1,";
  auto r = Run({});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("/var/lib/gpulet/recorder/GPU-cccc-1780000200000.json"));
  EXPECT_THAT(r.err, HasSubstr("not valid JSON"));
  EXPECT_THAT(r.out, HasSubstr("GPU-bbbb"));
}

TEST_F(PostmortemCliTest, UnknownGpusAndEmptyDirectoriesSaySo) {
  auto unknown = Run({"--gpu", "GPU-zzzz"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("no recorded fault names GPU GPU-zzzz"));
  fs::remove_all(dir_);
  auto none = Run({});
  EXPECT_EQ(none.exit_code, 0) << none.err;
  EXPECT_THAT(none.out, HasSubstr("No GPU faults recorded"));
  // A file named on the command line is read as it is.
  recorder::RecorderDump d = Fault("GPU-dddd", 3, 1780000300000, true);
  const std::string file = root_.path() + "/copied.json";
  std::ofstream(file) << recorder::DumpToJson(d);
  auto named = RunProgram({gpulet::testing::GpuletBinary(), "postmortem", file});
  EXPECT_EQ(named.exit_code, 0) << named.err;
  EXPECT_THAT(named.out, HasSubstr("GPU-dddd"));
}

// `gpulet retired`: lists what the file holds and returns a GPU to service.
TEST(RetiredCliTest, ListsAndClears) {
  testing::ScratchDir root;
  recorder::RetiredFile file(root.path() + "/var/lib/gpulet/retired.json",
                             "/var/lib/gpulet/retired.json");
  auto run = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {gpulet::testing::GpuletBinary(), "--host-root", root.path(),
                                     "retired"};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProgram(argv);
  };
  auto none = run({});
  EXPECT_EQ(none.exit_code, 0) << none.err;
  EXPECT_THAT(none.out, HasSubstr("No GPU is retired"));
  ASSERT_TRUE(file.Save({{"GPU-8a41", {"0000:02:00.0", 1780000000, "3 faults within 168h"}}}).ok());
  auto listed = run({});
  EXPECT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_THAT(listed.out, HasSubstr("GPU-8a41  0000:02:00.0  since 2026-05-28T"));
  EXPECT_THAT(listed.out, HasSubstr("3 faults within 168h"));
  auto unknown = run({"--clear", "GPU-0000"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("does not list GPU GPU-0000"));
  auto cleared = run({"--clear", "GPU-8a41"});
  EXPECT_EQ(cleared.exit_code, 0) << cleared.err;
  EXPECT_TRUE(file.Load()->empty());
  std::ofstream(root.path() + "/var/lib/gpulet/retired.json") << "[";
  auto bad = run({});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.err, HasSubstr("/var/lib/gpulet/retired.json"));
}

}  // namespace
}  // namespace gpulet::cli
