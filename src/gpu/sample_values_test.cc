// The value table's rules, and that each consumer it drives sees every row: the worker
// protocol carries each stored row, the simulated GPUs report each row some GPU has, and
// docs/metrics.md's table is the table. (The exposition's side: ExpositionTest.EveryValueRow*
// in src/metrics/metrics_test.cc; /status: StatusJsonTest.)
#include "gpu/sample_values.h"

#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gpu/nvml_gpu_library.h"
#include "gpu/nvml_library.h"
#include "gpu/nvml_worker_protocol.h"
#include "gtest/gtest.h"
#include "testing/fake_gpu_library.h"

namespace gpulet {
namespace {

bool Stored(const SampleValue& row) {
  return std::visit([](auto m) { return StoredMember<decltype(m)>; }, row.member);
}

TEST(SampleValuesTest, RowsAreWellFormed) {
  std::set<std::string> keys, metrics, status_keys;
  std::set<int> dcgm_ids;
  for (const SampleValue& row : SampleValues()) {
    SCOPED_TRACE(row.metric != nullptr ? row.metric : row.key);
    EXPECT_EQ(&Value(row.id), &row);
    if (Stored(row)) {
      EXPECT_TRUE(keys.insert(row.key).second) << "a wire key twice";
    }
    EXPECT_NE(std::string(row.unit), "");
    EXPECT_NE(std::string(row.source), "");
    EXPECT_NE(std::string(row.hardware), "");
    EXPECT_TRUE(std::string(row.type) == "gauge" || std::string(row.type) == "counter");
    if (row.status_key != nullptr) {
      EXPECT_TRUE(status_keys.insert(row.status_key).second);
      EXPECT_TRUE(Stored(row)) << "/status carries only sampled values";
    }
    if (row.metric == nullptr) continue;
    EXPECT_TRUE(metrics.insert(row.metric).second) << "a family twice";
    EXPECT_NE(std::string(row.help), "");
    // A DCGM family is named by DCGM, has its field id and prints as its DCGM type; gpulet's
    // own follow Prometheus' conventions.
    if (absl::StartsWith(row.metric, "DCGM_FI_")) {
      EXPECT_GT(row.dcgm_field, 0);
      EXPECT_TRUE(dcgm_ids.insert(row.dcgm_field).second);
      EXPECT_NE(row.dcgm_type, DcgmType::kNone);
    } else {
      EXPECT_TRUE(absl::StartsWith(row.metric, "gpulet_"));
      EXPECT_EQ(row.dcgm_field, 0);
      EXPECT_EQ(row.dcgm_type, DcgmType::kNone);
      if (std::string(row.type) == "counter") {
        EXPECT_TRUE(absl::EndsWith(row.metric, "_total"));
      }
    }
  }
}

TEST(SampleValuesTest, ReadValueConvertsEachKindAndTellsAbsentFromZero) {
  DeviceSample s;
  EXPECT_EQ(ReadValue(Value(ValueId::kGpuTemp), s), std::nullopt);
  s.gpu_temp_c = 0;
  EXPECT_EQ(ReadValue(Value(ValueId::kGpuTemp), s), 0.0);
  s.remap_failure = true;
  EXPECT_EQ(ReadValue(Value(ValueId::kRemapFailure), s), 1.0);
  // A derived row needs both of its inputs.
  s.nvlink_data_tx_kib = 5;
  EXPECT_EQ(ReadValue(Value(ValueId::kNvLinkBandwidthTotal), s), std::nullopt);
  s.nvlink_data_rx_kib = 7;
  EXPECT_EQ(ReadValue(Value(ValueId::kNvLinkBandwidthTotal), s), 12.0);
  // A GPM row is absent without a GPM sample.
  EXPECT_EQ(ReadValue(Value(ValueId::kSmActive), s), std::nullopt);
  s.profiling.emplace().sm_active = 0.25;
  EXPECT_EQ(ReadValue(Value(ValueId::kSmActive), s), 0.25);
  // The XID is not the sample's.
  EXPECT_EQ(ReadValue(Value(ValueId::kXid), s), std::nullopt);
  // DCGM counts memory in whole MiB.
  EXPECT_EQ(ExportedValue(Value(ValueId::kFbUsed), (3 << 20) + 5), 3.0);
  EXPECT_EQ(ExportedValue(Value(ValueId::kPower), 486.25), 486.25);
  MigInstanceSample m;
  m.fb_free_bytes = 1 << 20;
  EXPECT_EQ(ReadMigValue(Value(ValueId::kFbFree), m), double{1 << 20});
  EXPECT_EQ(ReadMigValue(Value(ValueId::kGpuTemp), m), std::nullopt);
  EXPECT_TRUE(IsIntegerValue(Value(ValueId::kGpuUtil)));
  EXPECT_FALSE(IsIntegerValue(Value(ValueId::kPower)));
}

// Every row the sample stores crosses the worker protocol with its value.
TEST(SampleValuesTest, EveryStoredRowCrossesTheWorkerProtocol) {
  DeviceSample s = testing::SampleWithEveryValue();
  absl::StatusOr<DeviceSample> back =
      nvml_worker::SampleFromJson(nlohmann::json::parse(nvml_worker::ToJson(s).dump()));
  ASSERT_TRUE(back.ok()) << back.status();
  int stored = 0;
  for (const SampleValue& row : SampleValues()) {
    if (!Stored(row)) continue;
    ++stored;
    std::optional<double> want = ReadValue(row, s);
    ASSERT_TRUE(want.has_value()) << row.key;
    EXPECT_EQ(ReadValue(row, *back), want) << row.key;
  }
  EXPECT_GE(stored, 30);
}

// The rows docs/metrics.md's "## GPU values" section lists, verbatim.
std::string DocValueTable() {
  std::ifstream in(std::string(GPULET_SOURCE_DIR) + "/docs/metrics.md");
  std::string line, out;
  bool in_section = false;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "## ")) in_section = line == "## GPU values";
    if (in_section && absl::StartsWith(line, "|")) absl::StrAppend(&out, line, "\n");
  }
  return out;
}

TEST(SampleValuesTest, TheDocsTableIsTheTable) {
  EXPECT_EQ(DocValueTable(), ValueTableMarkdown())
      << "docs/metrics.md's \"## GPU values\" table differs from src/gpu/sample_values.cc; "
         "paste this table there:\n"
      << ValueTableMarkdown();
}

// The simulator's fixtures, sampled through the real NVML reads (NvmlGpuLibrary on the
// simulated libnvidia-ml), report every row the table reads from NVML on some GPU, so a row
// added without its NVML read, or without the simulator's answer, fails here.
TEST(SampleValuesTest, SimulatedGpusReportEveryRow) {
  std::map<ValueId, std::set<std::string>> seen;  // row → fixture/GPU that reported it
  for (const char* fixture : {"homelab", "h200", "dgx8"}) {
    SCOPED_TRACE(fixture);
    setenv("GPULET_SIM_FIXTURE",
           absl::StrCat(GPULET_SOURCE_DIR, "/sim/fixtures/", fixture, ".yaml").c_str(), 1);
    unsetenv("GPULET_SIM_STATE");
    absl::StatusOr<std::unique_ptr<NvmlLibrary>> lib = NvmlLibrary::Open(GPULET_SIM_LIB);
    ASSERT_TRUE(lib.ok()) << lib.status();
    NvmlGpuLibrary gpus(std::shared_ptr<NvmlLibrary>(std::move(*lib)), {});
    absl::StatusOr<unsigned> count = gpus.GetDeviceCount();
    ASSERT_TRUE(count.ok()) << count.status();
    for (unsigned i = 0; i < *count; ++i) {
      // GPM values are the difference of two samples.
      ASSERT_TRUE(gpus.Sample(i, absl::Seconds(10)).ok());
      absl::StatusOr<DeviceSample> s = gpus.Sample(i, absl::Seconds(10));
      ASSERT_TRUE(s.ok()) << s.status();
      for (const SampleValue& row : SampleValues()) {
        if (ReadValue(row, *s)) seen[row.id].insert(absl::StrCat(fixture, "/", i));
      }
    }
  }
  unsetenv("GPULET_SIM_FIXTURE");
  for (const SampleValue& row : SampleValues()) {
    if (row.id == ValueId::kXid) continue;  // the event thread's, not NVML sampling's
    EXPECT_FALSE(seen[row.id].empty())
        << row.key << " (" << (row.metric ? row.metric : "") << ") is reported by no simulated GPU";
  }
}

}  // namespace
}  // namespace gpulet
