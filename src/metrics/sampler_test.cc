#include "metrics/sampler.h"

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gpu/nvml_api.h"
#include "gtest/gtest.h"
#include "state/device_store.h"
#include "testing/fake_gpu_library.h"
#include "testing/simulated_clock.h"

namespace gpulet::metrics {
namespace {

using ::gpulet::testing::FakeGpuLibrary;
using ::gpulet::testing::kGpu0;
using ::gpulet::testing::kGpu1;
using ::gpulet::testing::NvmlGpu;
using ::gpulet::testing::SimulatedClock;

constexpr absl::Duration kInterval = absl::Seconds(1);
constexpr absl::Duration kTimeout = absl::Milliseconds(500);

gpu::DeviceSample Temperature(unsigned celsius) {
  gpu::DeviceSample s;
  s.gpu_temp_c = celsius;
  s.power_w = 300;
  return s;
}

// The value of the first series of `family` whose labels contain `label`, or "" if none.
std::string Series(const std::string& text, const std::string& family, const std::string& label) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, family + "{") || !absl::StrContains(line, label)) continue;
    return std::string(line.substr(line.rfind(' ') + 1));
  }
  return "";
}

class SamplerTest : public ::testing::Test {
 protected:
  SamplerTest() : library_(&clock_) {
    gpu::DeviceIdentity a, b;
    a.index = 0;
    a.uuid = kGpu0;
    b.index = 1;
    b.uuid = kGpu1;
    library_.AddDevice(a, Temperature(40));
    library_.AddDevice(b, Temperature(50));
    gpu::Inventory inv;
    inv.gpus = {NvmlGpu(0, kGpu0, "0000:01:00.0"), NvmlGpu(1, kGpu1, "0000:02:00.0")};
    store_.SetInventory(inv, clock_.Now());
  }

  std::string Text() { return *sampler_.Exposition(false); }
  std::string Temp(const char* uuid) {
    return Series(Text(), "DCGM_FI_DEV_GPU_TEMP", absl::StrCat("UUID=\"", uuid, "\""));
  }
  std::string Up(const char* uuid) {
    return Series(Text(), "gpulet_gpu_up", absl::StrCat("uuid=\"", uuid, "\""));
  }
  uint64_t Rounds() { return sampler_.Samples()->rounds; }

  SimulatedClock clock_;
  FakeGpuLibrary library_;
  state::DeviceStore store_;
  Sampler sampler_{&library_, &store_, nullptr,
                   Sampler::Options{.interval = kInterval, .timeout = kTimeout, .clock = &clock_},
                   RenderInfo{"node-1", "570.133.20"}};
};

TEST_F(SamplerTest, RendersTheFakesSamplesOnEveryTick) {
  sampler_.Start();
  ASSERT_TRUE(clock_.AwaitSleepers(1));
  EXPECT_EQ(Rounds(), 1u);
  EXPECT_EQ(Temp(kGpu0), "40");
  EXPECT_EQ(Temp(kGpu1), "50");
  EXPECT_EQ(Up(kGpu0), "1");

  library_.SetSample(0, Temperature(77));
  clock_.Advance(kInterval - absl::Milliseconds(1));
  ASSERT_TRUE(clock_.AwaitSleepers(1));
  EXPECT_EQ(Temp(kGpu0), "40") << "no round before the interval";
  clock_.Advance(absl::Milliseconds(1));
  ASSERT_TRUE(clock_.AwaitSleepers(1));
  EXPECT_EQ(Rounds(), 2u);
  EXPECT_EQ(Temp(kGpu0), "77");
  // Samples carry the clock's wall time.
  EXPECT_EQ(sampler_.Samples()->by_uuid.at(kGpu0).last->taken, clock_.Now());
  EXPECT_EQ(library_.sample_calls(0), 2);
}

// The daemon samples once before it listens; starting the worker then does not
// sample again at once, but one interval later.
TEST_F(SamplerTest, StartAfterARoundWaitsAnInterval) {
  sampler_.SampleOnce();
  sampler_.Start();
  ASSERT_TRUE(clock_.AwaitSleepers(1));
  EXPECT_EQ(Rounds(), 1u);
  EXPECT_EQ(library_.sample_calls(0), 1);
  clock_.Advance(kInterval);
  ASSERT_TRUE(clock_.AwaitSleepers(1));
  EXPECT_EQ(Rounds(), 2u);
}

TEST_F(SamplerTest, AFailingGpuStaysListedAsNotAnswering) {
  library_.FailNvml(1, NVML_ERROR_GPU_IS_LOST);
  sampler_.SampleOnce();
  EXPECT_EQ(Up(kGpu0), "1");
  EXPECT_EQ(Up(kGpu1), "0");
  EXPECT_EQ(Temp(kGpu1), "") << "no values for a GPU that does not answer";
  std::shared_ptr<const SampleSet> set = sampler_.Samples();
  EXPECT_FALSE(set->by_uuid.at(kGpu1).answering);
  EXPECT_TRUE(absl::StrContains(set->by_uuid.at(kGpu1).error, "GPU_IS_LOST"))
      << set->by_uuid.at(kGpu1).error;
  EXPECT_EQ(set->by_uuid.at(kGpu1).nvml_code, NVML_ERROR_GPU_IS_LOST);
  EXPECT_EQ(set->nvml_errors, 1u);

  library_.Heal(1);
  clock_.Advance(kInterval);
  sampler_.SampleOnce();
  EXPECT_EQ(Up(kGpu1), "1");
  EXPECT_EQ(sampler_.Samples()->by_uuid.at(kGpu1).nvml_code, -1);
  EXPECT_EQ(Temp(kGpu1), "50");
}

TEST_F(SamplerTest, AGpuThatStopsAnsweringKeepsItsSampleAge) {
  sampler_.SampleOnce();
  library_.FailNvml(0, NVML_ERROR_GPU_IS_LOST);
  clock_.Advance(absl::Seconds(30));
  sampler_.SampleOnce();
  EXPECT_EQ(Up(kGpu0), "0");
  EXPECT_EQ(Series(Text(), "gpulet_gpu_sample_age_seconds", kGpu0), "30");
}

TEST_F(SamplerTest, AHungGpuTimesOutAndTheRoundGoesOn) {
  library_.Hang(1);
  sampler_.Start();
  ASSERT_TRUE(library_.AwaitBlockedCalls(1));  // round 1 is stuck on GPU 1
  EXPECT_EQ(Rounds(), 0u);
  clock_.Advance(kTimeout);
  ASSERT_TRUE(clock_.AwaitSleepers(1));  // the round ended; the worker sleeps again
  EXPECT_EQ(Rounds(), 1u);
  EXPECT_EQ(Up(kGpu0), "1");
  EXPECT_EQ(Up(kGpu1), "0") << "a hung GPU is still listed";
  EXPECT_TRUE(absl::StrContains(sampler_.Samples()->by_uuid.at(kGpu1).error, "did not return"));
  EXPECT_EQ(sampler_.Samples()->by_uuid.at(kGpu1).nvml_code, -1) << "a timeout is not NVML's";
  EXPECT_EQ(Series(Text(), "gpulet_sampler_duration_seconds", ""), "0.5");

  library_.Release(1);
  clock_.Advance(kInterval - kTimeout);
  ASSERT_TRUE(clock_.AwaitSleepers(1));
  EXPECT_EQ(Rounds(), 2u);
  EXPECT_EQ(Up(kGpu1), "1");
}

TEST_F(SamplerTest, StopIsImmediate) {
  sampler_.Start();
  ASSERT_TRUE(clock_.AwaitSleepers(1));
  sampler_.Stop();  // the next round is a simulated second away, which never comes
  EXPECT_EQ(clock_.sleepers(), 0);
  EXPECT_EQ(Rounds(), 1u);
}

TEST_F(SamplerTest, WithoutALibraryOnlyHealthIsRendered) {
  Sampler sampler(nullptr, &store_, nullptr, Sampler::Options{.clock = &clock_},
                  RenderInfo{"node-1", ""});
  sampler.SampleOnce();
  std::string text = *sampler.Exposition(false);
  EXPECT_TRUE(absl::StrContains(text, "gpulet_gpu_health_state")) << text;
  EXPECT_FALSE(absl::StrContains(text, "DCGM_FI_DEV_GPU_TEMP{"));
}

}  // namespace
}  // namespace gpulet::metrics
