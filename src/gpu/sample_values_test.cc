// The value table's rules, and that docs/metrics.md's table is the table. The NVML side (the
// worker protocol carries each stored row; the simulated GPUs report each row some GPU has)
// is tested in src/nvml/sample_reads_test.cc; the exposition's in src/metrics/metrics_test.cc
// (ExpositionTest.EveryValueRowIsExportedWithItsValue); /status's in StatusJsonTest.
#include "gpu/sample_values.h"

#include <fstream>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace gpulet::gpu {
namespace {

TEST(SampleValuesTest, RowsAreWellFormed) {
  std::set<std::string> keys, metrics, status_keys;
  std::set<int> dcgm_ids;
  for (const SampleValue& row : SampleValues()) {
    SCOPED_TRACE(row.metric != nullptr ? row.metric : row.key);
    EXPECT_EQ(&Value(row.id), &row);
    if (IsStored(row)) {
      EXPECT_TRUE(keys.insert(row.key).second) << "a wire key twice";
    }
    EXPECT_NE(std::string(row.unit), "");
    EXPECT_NE(std::string(row.source), "");
    EXPECT_NE(std::string(row.hardware), "");
    EXPECT_TRUE(std::string(row.type) == "gauge" || std::string(row.type) == "counter");
    if (row.status_key != nullptr) {
      EXPECT_TRUE(status_keys.insert(row.status_key).second);
      EXPECT_TRUE(IsStored(row)) << "/status carries only sampled values";
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

}  // namespace
}  // namespace gpulet::gpu
