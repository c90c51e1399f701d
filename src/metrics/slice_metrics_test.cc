// The VRAM slices' series: read from slice files as the enforcement library leaves them, and
// labelled with the container holding them when pod attribution knows it.
#include "metrics/slice_metrics.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "metrics/http_server.h"
#include "metrics/sampler.h"
#include "state/status_report.h"
#include "testing/files.h"
#include "vram/slice_table.h"

namespace gpulet {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kMiB = 1ull << 20;

// A slice file with `used` MiB held and `refusals` refused allocations.
void Fill(const std::string& dir, const std::string& name, uint64_t quota_mib, uint64_t used_mib,
          int refusals, const std::string& owner) {
  ASSERT_TRUE(vram::WriteSliceFile(dir, name, quota_mib * kMiB, "GPU-b", owner).ok());
  vram::SliceMap map;
  char msg[512];
  std::string path = dir + "/" + name + "/slice";
  ASSERT_EQ(vram::OpenSlice(path.c_str(), true, &map, msg, sizeof(msg)), vram::SliceError::kOk);
  uint32_t slot = 0;
  ASSERT_EQ(vram::ClaimSlot(&map, 7, &slot), vram::SliceError::kOk);
  ASSERT_TRUE(vram::Reserve(&map, slot, used_mib * kMiB).granted);
  vram::Settle(&map, slot, used_mib * kMiB, used_mib * kMiB);
  for (int i = 0; i < refusals; ++i)
    EXPECT_FALSE(vram::Reserve(&map, slot, quota_mib * kMiB).granted);
  vram::CloseSlice(&map);
}

Snapshot TwoGpus() {
  Snapshot s;
  for (int i = 0; i < 2; ++i) {
    DeviceRecord d;
    d.gpu.index = i;
    d.gpu.uuid = i == 0 ? "GPU-a" : "GPU-b";
    s.devices.push_back(d);
  }
  return s;
}

TEST(SliceMetricsTest, EverySliceIsASeriesWithItsHolder) {
  testing::ScratchDir dir;
  Fill(dir.path(), "GPU-b--mem0", 4096, 3072, 2, "nvidia.com/gpu-memory GPU-b::mem0,GPU-b::mem1");
  Fill(dir.path(), "claim-uid-7", 8192, 1024, 0, "claim ml/ollama");
  dir.Write("lib/libgpulet-vram.so", "not a slice");
  dir.Write("GPU-b--mem9/slice", "torn");  // unreadable: left out
  std::vector<SliceSample> slices = ReadSlices(dir.path());
  ASSERT_EQ(slices.size(), 2u);
  EXPECT_EQ(slices[0].name, "GPU-b--mem0");
  EXPECT_EQ(slices[1].name, "claim-uid-7");

  PodMap pods;
  pods.ok = true;
  for (const char* id : {"GPU-b::mem1", "GPU-b::mem0"}) {
    pods.by_gpu["GPU-b"].push_back({{"ml", "anpr-0", "anpr"}, "nvidia.com/gpu-memory", id, ""});
  }
  std::string out;
  AppendSliceMetrics(slices, TwoGpus(), &pods, "node-a", false, &out);
  const std::string anpr =
      "{gpu=\"1\",uuid=\"GPU-b\",slice=\"GPU-b--mem0\",owner=\"nvidia.com/gpu-memory "
      "GPU-b::mem0,GPU-b::mem1\",hostname=\"node-a\",pod=\"anpr-0\",namespace=\"ml\","
      "container=\"anpr\"}";
  EXPECT_THAT(out, HasSubstr("gpulet_vram_quota_bytes" + anpr + " 4294967296\n"));
  EXPECT_THAT(out, HasSubstr("gpulet_vram_used_bytes" + anpr + " 3221225472\n"));
  EXPECT_THAT(out, HasSubstr("gpulet_vram_peak_bytes" + anpr + " 3221225472\n"));
  EXPECT_THAT(out, HasSubstr("gpulet_vram_refused_total" + anpr + " 2\n"));
  // This test's own process holds the slot: it does not see its own lock, so no process.
  EXPECT_THAT(out, HasSubstr("gpulet_vram_processes" + anpr + " 0\n"));
  EXPECT_THAT(out,
              HasSubstr("gpulet_vram_quota_bytes{gpu=\"1\",uuid=\"GPU-b\",slice=\"claim-uid-7\","
                        "owner=\"claim ml/ollama\",hostname=\"node-a\"} 8589934592\n"));
  EXPECT_THAT(out, HasSubstr("# TYPE gpulet_vram_refused_total counter\n"));

  std::string om;
  AppendSliceMetrics(slices, TwoGpus(), nullptr, "node-a", true, &om);
  EXPECT_THAT(om, HasSubstr("# TYPE gpulet_vram_refused counter\n"));
  EXPECT_THAT(om, Not(HasSubstr("pod=")));  // attribution off
}

TEST(SliceMetricsTest, StatusListsEachGpusSlicesWithTheirHolders) {
  testing::ScratchDir dir;
  Fill(dir.path(), "GPU-b--mem0", 4096, 3072, 2, "nvidia.com/gpu-memory GPU-b::mem0");
  SampleSet set;
  set.slices = ReadSlices(dir.path());
  auto pods = std::make_shared<PodMap>();
  pods->ok = true;
  pods->by_gpu["GPU-b"].push_back(
      {{"ml", "anpr-0", "anpr"}, "nvidia.com/gpu-memory", "GPU-b::mem0", ""});
  set.pods = pods;
  absl::StatusOr<StatusReport> report =
      StatusReport::FromJsonText(MetricsServer::StatusJson(TwoGpus(), set, absl::Now()));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_FALSE(report->gpus[0].vram_slices.has_value());
  ASSERT_TRUE(report->gpus[1].vram_slices.has_value());
  ASSERT_EQ(report->gpus[1].vram_slices->size(), 1u);
  const SliceStatus& s = report->gpus[1].vram_slices->front();
  EXPECT_EQ(s.slice, "GPU-b--mem0");
  EXPECT_EQ(s.quota_bytes, 4096 * kMiB);
  EXPECT_EQ(s.used_bytes, 3072 * kMiB);
  EXPECT_EQ(s.refused, 2u);
  EXPECT_EQ(s.pod, "anpr-0");
  EXPECT_EQ(s.container, "anpr");
}

TEST(SliceMetricsTest, NoDirectoryNoSeries) {
  EXPECT_TRUE(ReadSlices("").empty());
  EXPECT_TRUE(ReadSlices("/nonexistent/gpulet").empty());
  std::string out;
  AppendSliceMetrics({}, TwoGpus(), nullptr, "n", false, &out);
  EXPECT_EQ(out, "");
}

}  // namespace
}  // namespace gpulet
