// The NVML side of the value table (gpu/sample_values.h): the worker protocol carries every
// row the sample stores, and the simulator's GPUs, sampled through the real NVML reads,
// report every row some GPU has, so a row added without its read or its simulated answer
// fails here.
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <variant>

#include "absl/strings/str_cat.h"
#include "gpu/sample_values.h"
#include "gtest/gtest.h"
#include "nvml/nvml_gpu_library.h"
#include "nvml/nvml_library.h"
#include "nvml/nvml_worker_protocol.h"
#include "sim/state.h"
#include "testing/fake_gpu_library.h"
#include "testing/files.h"

namespace gpulet::nvml {
namespace {

// Every row the sample stores crosses the worker protocol with its value.
TEST(SampleReadsTest, EveryStoredRowCrossesTheWorkerProtocol) {
  gpu::DeviceSample s = testing::SampleWithEveryValue();
  absl::StatusOr<gpu::DeviceSample> back =
      nvml::SampleFromJson(nlohmann::json::parse(nvml::ToJson(s).dump()));
  ASSERT_TRUE(back.ok()) << back.status();
  int stored = 0;
  for (const gpu::SampleValue& row : gpu::SampleValues()) {
    if (!gpu::IsStored(row)) continue;
    ++stored;
    std::optional<double> want = gpu::ReadValue(row, s);
    ASSERT_TRUE(want.has_value()) << row.key;
    EXPECT_EQ(gpu::ReadValue(row, *back), want) << row.key;
  }
  EXPECT_GE(stored, 30);
}

// The simulator's fixtures, sampled through the real NVML reads (NvmlGpuLibrary on the
// simulated libnvidia-ml), report every row the table reads from NVML on some GPU, so a row
// added without its NVML read, or without the simulator's answer, fails here.
// The ECC rows are the volatile counts (since the driver loaded) of each error type: an H200
// whose state gives all four counters different values reads back corrected 3 and
// uncorrected 5, not its lifetime (aggregate) 7 and 11. GeForce boards have no ECC.
TEST(SampleReadsTest, EccCountsAreTheVolatileOnesOfEachType) {
  gpulet::testing::ScratchDir dir;
  sim::SimState state;
  ASSERT_TRUE(sim::SetEccErrors(&state, "0", {3, 5, 7, 11}));
  std::string error;
  ASSERT_TRUE(sim::SaveStateAtomic(dir.path() + "/state.json", state, &error)) << error;
  for (const char* fixture : {"h200", "homelab"}) {
    SCOPED_TRACE(fixture);
    setenv("GPULET_SIM_FIXTURE",
           absl::StrCat(GPULET_SOURCE_DIR, "/sim/fixtures/", fixture, ".yaml").c_str(), 1);
    setenv("GPULET_SIM_STATE", (dir.path() + "/state.json").c_str(), 1);
    absl::StatusOr<std::unique_ptr<NvmlLibrary>> lib = NvmlLibrary::Open(GPULET_SIM_LIB);
    ASSERT_TRUE(lib.ok()) << lib.status();
    NvmlGpuLibrary gpus(std::shared_ptr<NvmlLibrary>(std::move(*lib)), {});
    absl::StatusOr<gpu::DeviceSample> s = gpus.Sample(0, absl::Seconds(10));
    ASSERT_TRUE(s.ok()) << s.status();
    if (std::string(fixture) == "h200") {
      EXPECT_EQ(s->ecc_sbe_volatile, 3u);
      EXPECT_EQ(s->ecc_dbe_volatile, 5u);
    } else {
      EXPECT_FALSE(s->ecc_sbe_volatile.has_value());
      EXPECT_FALSE(s->ecc_dbe_volatile.has_value());
    }
  }
  unsetenv("GPULET_SIM_FIXTURE");
  unsetenv("GPULET_SIM_STATE");
}

TEST(SampleReadsTest, SimulatedGpusReportEveryRow) {
  std::map<gpu::ValueId, std::set<std::string>> seen;  // row → fixture/GPU that reported it
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
      absl::StatusOr<gpu::DeviceSample> s = gpus.Sample(i, absl::Seconds(10));
      ASSERT_TRUE(s.ok()) << s.status();
      for (const gpu::SampleValue& row : gpu::SampleValues()) {
        if (gpu::ReadValue(row, *s)) seen[row.id].insert(absl::StrCat(fixture, "/", i));
      }
    }
  }
  unsetenv("GPULET_SIM_FIXTURE");
  // The passively cooled datacenter boards (h200, dgx8: NVML answers NOT_SUPPORTED) have no
  // fan reading; the homelab's fanned cards have one each (docs/metrics.md).
  EXPECT_EQ(seen[gpu::ValueId::kFanSpeed], (std::set<std::string>{"homelab/0", "homelab/1"}));
  for (const gpu::SampleValue& row : gpu::SampleValues()) {
    if (row.id == gpu::ValueId::kXid) continue;  // the event thread's, not NVML sampling's
    EXPECT_FALSE(seen[row.id].empty())
        << row.key << " (" << (row.metric ? row.metric : "") << ") is reported by no simulated GPU";
  }
}

// Each process's SM utilisation (nvmlDeviceGetProcessUtilization) reaches
// GpuProcess::sm_percent: a fixture process's sm_util from the first sample on. A process
// without a sample stays unknown until the GPU has given samples, then reads 0 (NVML samples
// only processes that ran); the second call asks only for samples newer than the first's.
TEST(SampleReadsTest, ProcessSmUtilizationFillsSmPercent) {
  gpulet::testing::ScratchDir dir;
  // The homelab's RTX 5090 (GPU 1) with three processes, two of them sampled.
  const std::string state =
      dir.Write("state.json",
                "{\"version\": 1, \"gpus\": {\"1\": {\"processes\": ["
                "{\"pid\": 4242, \"name\": \"ollama\", \"used_mib\": 9216, \"sm_util\": 62}, "
                "{\"pid\": 5120, \"used_mib\": 3850, \"type\": \"graphics\", \"sm_util\": 7}, "
                "{\"pid\": 6001, \"used_mib\": 100}]}}}");
  setenv("GPULET_SIM_FIXTURE",
         absl::StrCat(GPULET_SOURCE_DIR, "/sim/fixtures/homelab.yaml").c_str(), 1);
  setenv("GPULET_SIM_STATE", state.c_str(), 1);
  absl::StatusOr<std::unique_ptr<NvmlLibrary>> lib = NvmlLibrary::Open(GPULET_SIM_LIB);
  ASSERT_TRUE(lib.ok()) << lib.status();
  NvmlGpuLibrary gpus(std::shared_ptr<NvmlLibrary>(std::move(*lib)), {});
  using ByPid = std::map<unsigned, std::optional<unsigned>>;
  auto sm_percent = [](const gpu::DeviceSample& s) {
    ByPid by_pid;
    for (const gpu::GpuProcess& p : s.processes) by_pid[p.pid] = p.sm_percent;
    return by_pid;
  };
  absl::StatusOr<gpu::DeviceSample> first = gpus.Sample(1, absl::Seconds(10));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(sm_percent(*first), (ByPid{{4242, 62u}, {5120, 7u}, {6001, std::nullopt}}));
  // The sample times are microseconds: the second call's come well after the first's.
  absl::StatusOr<gpu::DeviceSample> second = gpus.Sample(1, absl::Seconds(10));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(sm_percent(*second), (ByPid{{4242, 62u}, {5120, 7u}, {6001, 0u}}));
  // The worker carries it.
  absl::StatusOr<gpu::DeviceSample> back =
      nvml::SampleFromJson(nlohmann::json::parse(nvml::ToJson(*second).dump()));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(sm_percent(*back), sm_percent(*second));
  unsetenv("GPULET_SIM_FIXTURE");
  unsetenv("GPULET_SIM_STATE");
}

}  // namespace
}  // namespace gpulet::nvml
