#include "recorder/retirement.h"

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/files.h"

namespace gpulet::recorder {
namespace {

using ::testing::HasSubstr;

const absl::Time kNow = absl::FromUnixSeconds(1780000000);

RecorderDump Fault(absl::Duration ago, const std::string& health = "Unhealthy") {
  RecorderDump d;
  d.uuid = "GPU-5090";
  d.pci_bus_id = "0000:02:00.0";
  d.fault_ms = absl::ToUnixMillis(kNow - ago);
  d.fault = "Unhealthy: XID 79";
  d.health = health;
  return d;
}

TEST(RetirementTest, RetiresAtTheCountWithinTheWindow) {
  const absl::Duration week = absl::Hours(24 * 7);
  std::vector<RecorderDump> faults = {Fault(absl::Hours(100)), Fault(absl::Hours(10))};
  EXPECT_EQ(RetireReason(faults, 3, week, kNow), std::nullopt);
  faults.push_back(Fault(absl::Hours(1)));
  std::optional<std::string> why = RetireReason(faults, 3, week, kNow);
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(*why, "3 faults within 168h, the last: Unhealthy: XID 79");
  // Outside the window, or XID-only dumps (the GPU never went out), do not count.
  faults[0] = Fault(week + absl::Hours(1));
  EXPECT_EQ(RetireReason(faults, 3, week, kNow), std::nullopt);
  faults[0] = Fault(absl::Hours(2), "Healthy");
  EXPECT_EQ(RetireReason(faults, 3, week, kNow), std::nullopt);
  EXPECT_TRUE(RetireReason(faults, 2, week, kNow).has_value());
}

TEST(RetirementTest, NeverForAGpuItCannotIdentify) {
  std::vector<RecorderDump> faults = {Fault(absl::Hours(3)), Fault(absl::Hours(2)),
                                      Fault(absl::Hours(1))};
  faults[1].pci_bus_id.clear();
  EXPECT_EQ(RetireReason(faults, 3, absl::Hours(24), kNow), std::nullopt);
  faults[1].pci_bus_id = "0000:02:00.0";
  faults[2].uuid.clear();
  EXPECT_EQ(RetireReason(faults, 3, absl::Hours(24), kNow), std::nullopt);
}

TEST(RetirementTest, TheFileRoundTripsAndBadOnesSayWhatIsWrong) {
  RetiredGpus gpus = {{"GPU-5090", {"0000:02:00.0", 1780000000, "3 faults within 168h"}}};
  absl::StatusOr<RetiredGpus> back = RetiredFromJson(RetiredToJson(gpus));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, gpus);
  for (
      auto [text, says] : std::vector<std::pair<std::string, std::string>>{
          {"", "not valid JSON"},
          {R"({"version": 2, "gpus": {}})", "version 2 is not 1"},
          {R"({"version": 1, "gpus": {"../x": {}}})", "not a GPU UUID"},
          {R"({"version": 1, "gpus": {"GPU-1": {"since_unix": 1, "reason": ""}}})",
           "pci_bus_id is missing"},
          {R"({"version": 1, "gpus": {"GPU-1": {"pci_bus_id": "0000:01:00.0", "reason": ""}}})",
           "since_unix"},
          {R"({"version": 1, "gpus": {}, "gpu": {}})", "gpu is not a field gpulet knows here"},
          {R"({"version": 1, "gpus": {"GPU-1": {"pci_bus_id": "0000:01:00.0", "since_unix": 1, "reason": "", "reson": ""}}})",
           "gpus.GPU-1.reson is not a field"},
          {R"({"version": 1, "gpus": {"GPU-1": {"pci_bus_id": "a", "pci_bus_id": "b", "since_unix": 1, "reason": ""}}})",
           "appears twice"},
      }) {
    absl::StatusOr<RetiredGpus> bad = RetiredFromJson(text);
    ASSERT_FALSE(bad.ok()) << text;
    EXPECT_THAT(bad.status().message(), HasSubstr(says)) << text;
  }
}

TEST(RetirementTest, AMissingFileIsNoneAndABadOneNamesItselfAndTheWayOut) {
  testing::ScratchDir dir;
  RetiredFile file(dir.path() + "/sub/retired.json", "/var/lib/gpulet/retired.json");
  absl::StatusOr<RetiredGpus> none = file.Load();
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
  ASSERT_TRUE(file.Save({{"GPU-1", {"0000:01:00.0", 5, "why"}}}).ok());
  EXPECT_EQ(file.Load()->size(), 1u);
  std::ofstream(dir.path() + "/sub/retired.json") << "{\"version\": 1";
  absl::StatusOr<RetiredGpus> bad = file.Load();
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("/var/lib/gpulet/retired.json"));
  EXPECT_THAT(bad.status().message(), HasSubstr("until it is fixed"));
}

}  // namespace
}  // namespace gpulet::recorder
