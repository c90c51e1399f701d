// The VRAM slices' series: read from slice files as the enforcement library leaves them, and
// labelled with the container holding them when pod attribution knows it.
#include "metrics/slice_metrics.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "metrics/metrics_server.h"
#include "metrics/sampler.h"
#include "state/status_report.h"
#include "testing/files.h"
#include "vram/launch_pacing.h"
#include "vram/slice_file.h"
#include "vram/slice_table.h"

namespace gpulet::metrics {
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

state::Snapshot TwoGpus() {
  state::Snapshot s;
  for (int i = 0; i < 2; ++i) {
    state::DeviceRecord d;
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

// A slice with a compute share has its share, launch rate and launch waits; one without has
// none of the three.
TEST(SliceMetricsTest, ASliceWithAComputeShareHasItsPacing) {
  testing::ScratchDir dir;
  ASSERT_TRUE(vram::WriteSliceFile(dir.path(), "GPU-b--mem0", 4096 * kMiB, "GPU-b", "o", 250).ok());
  Fill(dir.path(), "GPU-b--mem8", 4096, 0, 0, "p");
  const std::string path = dir.path() + "/GPU-b--mem0/slice";
  ASSERT_TRUE(vram::SetSliceLaunchRate(path, 1000).ok());
  vram::SliceMap map;
  char msg[512];
  ASSERT_EQ(vram::OpenSlice(path.c_str(), true, &map, msg, sizeof(msg)), vram::SliceError::kOk);
  for (int i = 0; i < 4; ++i)
    vram::PaceLaunch(map.header, 10, [] { return uint64_t{1'000'000'000}; });  // waits 10 ms
  vram::CloseSlice(&map);
  std::string out;
  AppendSliceMetrics(ReadSlices(dir.path()), TwoGpus(), nullptr, "node-a", false, &out);
  const std::string labels =
      "{gpu=\"1\",uuid=\"GPU-b\",slice=\"GPU-b--mem0\",owner=\"o\",hostname=\"node-a\"}";
  EXPECT_THAT(out, HasSubstr("gpulet_vram_compute_share_ratio" + labels + " 0.25\n"));
  EXPECT_THAT(out, HasSubstr("gpulet_vram_launch_rate" + labels + " 1000\n"));
  EXPECT_THAT(out, HasSubstr("gpulet_vram_launch_wait_seconds_total" + labels + " 0.01\n"));
  EXPECT_THAT(out, Not(HasSubstr("slice=\"GPU-b--mem8\",owner=\"p\",hostname=\"node-a\"} 0.")));
  EXPECT_THAT(
      out,
      Not(HasSubstr("gpulet_vram_launch_rate{gpu=\"1\",uuid=\"GPU-b\",slice=\"GPU-b--mem8\"")));
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
  absl::StatusOr<state::StatusReport> report =
      state::StatusReport::FromJsonText(MetricsServer::StatusJson(TwoGpus(), set, absl::Now()));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_FALSE(report->gpus[0].vram_slices.has_value());
  ASSERT_TRUE(report->gpus[1].vram_slices.has_value());
  ASSERT_EQ(report->gpus[1].vram_slices->size(), 1u);
  const state::SliceStatus& s = report->gpus[1].vram_slices->front();
  EXPECT_EQ(s.slice, "GPU-b--mem0");
  EXPECT_EQ(s.quota_bytes, 4096 * kMiB);
  EXPECT_EQ(s.used_bytes, 3072 * kMiB);
  EXPECT_EQ(s.refused, 2u);
  EXPECT_EQ(s.pod, "anpr-0");
  EXPECT_EQ(s.container, "anpr");
  EXPECT_FALSE(s.device_used_bytes.has_value());  // no NVML figures this round
}

TEST(SliceMetricsTest, NoDirectoryNoSeries) {
  EXPECT_TRUE(ReadSlices("").empty());
  EXPECT_TRUE(ReadSlices("/nonexistent/gpulet").empty());
  std::string out;
  AppendSliceMetrics({}, TwoGpus(), nullptr, "n", false, &out);
  EXPECT_EQ(out, "");
}

// What the driver counts for a slice: its processes' NVML figures (CUDA contexts included),
// the library's where higher, and the processes of its container that never loaded the
// library; nothing of another pod's, nor of a process no one can place.
TEST(SliceDeviceUseTest, TheDriversCountOfTheSlicesProcessesAndItsContainersOthers) {
  SampleSet set;
  SliceSample slice;
  slice.name = "GPU-b--mem0";
  slice.usage.gpu_uuid = "GPU-b";
  slice.usage.quota_bytes = 4096 * kMiB;
  slice.usage.processes = {{101, 3072 * kMiB, 3072 * kMiB, 0},
                           {102, 100 * kMiB, 100 * kMiB, 0},
                           {0, 50 * kMiB, 50 * kMiB, 0}};  // 0: in a namespace out of sight
  set.slices = {slice};
  GpuSampleState& st = set.by_uuid["GPU-b"];
  st.answering = true;
  st.last.emplace();
  st.last->taken = absl::Now();
  st.last->processes = {{101, 3584 * kMiB, {}, {}, {}},  // 512 MiB of context beyond its count
                        {102, std::nullopt, {}, {}, {}},
                        {103, 1024 * kMiB, {}, {}, {}},   // the same container, no library
                        {104, 2048 * kMiB, {}, {}, {}},   // another pod's
                        {105, 1024 * kMiB, {}, {}, {}}};  // no cgroup read
  st.processes[101] = {"ollama", CgroupPod{"uid-1", ""}, 77};
  st.processes[103] = {"python3", CgroupPod{"uid-1", ""}, 78};
  st.processes[104] = {"llm", CgroupPod{"uid-2", ""}, 79};
  auto pods = std::make_shared<PodMap>();
  pods->ok = true;
  pods->by_gpu["GPU-b"] = {{{"ml", "anpr-0", "anpr"}, "nvidia.com/gpu-memory", "GPU-b::mem0", ""},
                           {{"ml", "llm-0", "llm"}, "nvidia.com/gpu-memory", "GPU-b::mem4", ""}};
  pods->pods_by_uid["uid-1"] = {"ml", "anpr-0", {"anpr"}};
  pods->pods_by_uid["uid-2"] = {"ml", "llm-0", {"llm"}};
  set.pods = pods;

  AttachDeviceUse(&set);
  ASSERT_TRUE(set.slices[0].device.has_value());
  const SliceDeviceUse& use = *set.slices[0].device;
  EXPECT_EQ(use.used_bytes, (3584 + 100 + 1024) * kMiB);
  ASSERT_EQ(use.processes.size(), 3u);
  EXPECT_EQ(use.processes[0].pid, 101u);
  EXPECT_EQ(use.processes[0].name, "ollama");
  EXPECT_EQ(use.processes[0].start_ticks, 77u);
  EXPECT_EQ(use.processes[0].driver_bytes, 3584 * kMiB);
  EXPECT_EQ(use.processes[0].library_bytes, 3072 * kMiB);
  EXPECT_TRUE(use.processes[0].in_slice);
  EXPECT_EQ(use.processes[1].pid, 102u);
  EXPECT_EQ(use.processes[1].driver_bytes, 0u);  // NVML gave no figure: the library's stands
  EXPECT_EQ(use.processes[2].pid, 103u);
  EXPECT_FALSE(use.processes[2].in_slice);

  std::string out;
  AppendSliceMetrics(set.slices, TwoGpus(), pods.get(), "n", false, &out);
  EXPECT_THAT(out,
              HasSubstr("gpulet_vram_device_used_bytes{gpu=\"1\",uuid=\"GPU-b\",slice=\"GPU-b--"
                        "mem0\",owner=\"\",hostname=\"n\",pod=\"anpr-0\",namespace=\"ml\","
                        "container=\"anpr\"} 4936695808\n"));
  absl::StatusOr<state::StatusReport> report =
      state::StatusReport::FromJsonText(MetricsServer::StatusJson(TwoGpus(), set, absl::Now()));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->gpus[1].vram_slices->front().device_used_bytes, 4936695808u);

  // Without attribution only the slice's own processes count; a GPU that did not answer
  // this round leaves the figure out rather than guess.
  set.pods = nullptr;
  AttachDeviceUse(&set);
  EXPECT_EQ(set.slices[0].device->used_bytes, (3584 + 100) * kMiB);
  set.by_uuid["GPU-b"].answering = false;
  AttachDeviceUse(&set);
  EXPECT_FALSE(set.slices[0].device.has_value());
}

// Per GPU, what holds its containers' quotas: a series and a /status field for each GPU
// that has quotas, none for the others.
TEST(SliceMetricsTest, WhatHoldsEachGpusQuotasIsASeriesAndAStatusField) {
  std::string out;
  const std::map<std::string, std::string> holders = {{"GPU-b", "library"}};
  AppendVramEnforcement(holders, TwoGpus(), "n", false, &out);
  EXPECT_THAT(out, HasSubstr("gpulet_vram_enforcement{gpu=\"1\",uuid=\"GPU-b\",hostname=\"n\","
                             "holder=\"library\"} 1\n"));
  EXPECT_THAT(out, Not(HasSubstr("GPU-a")));
  SampleSet set;
  set.vram_holders = holders;
  absl::StatusOr<state::StatusReport> report =
      state::StatusReport::FromJsonText(MetricsServer::StatusJson(TwoGpus(), set, absl::Now()));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_FALSE(report->gpus[0].vram_enforcement.has_value());
  EXPECT_EQ(report->gpus[1].vram_enforcement, "library");
}

TEST(SliceDeviceUseTest, StartTicksAreField22CountedFromTheLastParenthesis) {
  EXPECT_EQ(ProcStartTicks("4242 (python3) S 1 4242 4242 0 -1 4194560 2290 0 0 0 12 3 0 0 20 0 "
                           "5 0 987654 123456789 1000 18446744073709551615"),
            987654u);
  // A name with spaces and parentheses cannot shift the fields.
  EXPECT_EQ(ProcStartTicks("7 (a) b (c) R 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 55 0 0"), 55u);
  EXPECT_EQ(ProcStartTicks("7 (short) R 1 2 3"), std::nullopt);
  EXPECT_EQ(ProcStartTicks("no parenthesis"), std::nullopt);
  EXPECT_EQ(ProcStartTicks("7 (x) R 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 soon 0"), std::nullopt);
}

}  // namespace
}  // namespace gpulet::metrics
