// The driver's own per-cgroup VRAM limits through NVML (nvmlDeviceSetMemoryLimits_v1): the
// binding, as NvmlGpuLibrary makes the call on the simulated libnvidia-ml, which holds the
// limits as the kernel's dmem controller does (sim/nvml_sim.cc); and the call's crossing of
// the worker protocol.
#include <sys/stat.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nvml/nvml_gpu_library.h"
#include "nvml/nvml_library.h"
#include "nvml/nvml_worker_protocol.h"
#include "testing/files.h"

namespace gpulet::nvml {
namespace {

using ::testing::HasSubstr;

// NvmlGpuLibrary on the simulator with the h200 fixture's GPU (bus 0000:18:00.0) behind a
// driver of version `driver`.
class MemoryLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"GPULET_SIM_FIXTURE", "GPULET_SIM_STATE"}) {
      const char* v = std::getenv(name);
      saved_.emplace_back(name, v != nullptr ? std::optional<std::string>(v) : std::nullopt);
    }
  }
  // The simulator is one per process: the next test finds the environment it had.
  void TearDown() override {
    gpus_.reset();
    nvml_.reset();
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }

  void Open(const std::string& driver) {
    std::string fixture =
        gpulet::testing::ReadTextFile(absl::StrCat(GPULET_SOURCE_DIR, "/sim/fixtures/h200.yaml"));
    fixture = absl::StrReplaceAll(
        fixture, {{"version: \"570.133.20\"", absl::StrCat("version: \"", driver, "\"")}});
    setenv("GPULET_SIM_FIXTURE", dir_.Write("h200.yaml", fixture).c_str(), 1);
    unsetenv("GPULET_SIM_STATE");
    absl::StatusOr<std::unique_ptr<NvmlLibrary>> lib = NvmlLibrary::Open(GPULET_SIM_LIB);
    ASSERT_TRUE(lib.ok()) << lib.status();
    nvml_ = std::shared_ptr<NvmlLibrary>(*std::move(lib));
    gpus_ = std::make_unique<NvmlGpuLibrary>(nvml_, NvmlGpuLibrary::Options{});
  }

  std::string Cgroup(const std::string& name) {
    const std::string path = dir_.path() + "/sys/fs/cgroup/kubepods/" + name;
    dir_.Write("sys/fs/cgroup/kubepods/" + name + "/cgroup.procs", "");
    return path;
  }

  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
  gpulet::testing::ScratchDir dir_;
  std::shared_ptr<NvmlLibrary> nvml_;
  std::unique_ptr<NvmlGpuLibrary> gpus_;
};

TEST_F(MemoryLimitsTest, AnR615DriverHoldsACgroupsLimitAsTheDmemControllerDoes) {
  Open("615.20.01");
  const std::string cg = Cgroup("pod1/ctr-a");
  // Another device's region already limited there stays as it was.
  dir_.Write("sys/fs/cgroup/kubepods/pod1/ctr-a/dmem.max", "drm/0000:03:00.0/vram0 1048576\n");
  ASSERT_TRUE(gpus_->SetMemoryLimit(0, cg, uint64_t{4} << 30, absl::Seconds(5)).ok());
  EXPECT_EQ(gpulet::testing::ReadTextFile(cg + "/dmem.max"),
            "drm/0000:03:00.0/vram0 1048576\nnvidia/0000:18:00.0/vidmem 4294967296\n");
  EXPECT_EQ(gpulet::testing::ReadTextFile(cg + "/dmem.min"), "nvidia/0000:18:00.0/vidmem 0\n");
  // Set again: one line per region.
  ASSERT_TRUE(gpus_->SetMemoryLimit(0, cg, uint64_t{8} << 30, absl::Seconds(5)).ok());
  EXPECT_EQ(gpulet::testing::ReadTextFile(cg + "/dmem.max"),
            "drm/0000:03:00.0/vram0 1048576\nnvidia/0000:18:00.0/vidmem 8589934592\n");
  // And NVML reads it back.
  ASSERT_NE(nvml_->fn().device_get_memory_limits, nullptr);
  nvmlDevice_t dev = nullptr;
  ASSERT_EQ(nvml_->fn().device_get_handle_by_index(0, &dev), NVML_SUCCESS);
  nvmlGetMemoryLimits_v1_t got = {cg.c_str(), 1, 1, 1};
  ASSERT_EQ(nvml_->fn().device_get_memory_limits(dev, &got), NVML_SUCCESS);
  EXPECT_EQ(got.hardLimit, uint64_t{8} << 30);
  EXPECT_EQ(got.softLimit, 0u);
  EXPECT_EQ(got.currentUsed, 0u);
}

TEST_F(MemoryLimitsTest, ACgroupThatIsGoneIsNotFound) {
  Open("615.20.01");
  absl::Status s =
      gpus_->SetMemoryLimit(0, dir_.path() + "/sys/fs/cgroup/gone", 1 << 30, absl::Seconds(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(s.message(), HasSubstr("nvmlDeviceSetMemoryLimits_v1"));
  EXPECT_THAT(s.message(), HasSubstr("/sys/fs/cgroup/gone"));
}

TEST_F(MemoryLimitsTest, TheReportsDriverHasNoSuchCall) {
  Open("570.133.20");
  const std::string cg = Cgroup("pod1/ctr-a");
  absl::Status s = gpus_->SetMemoryLimit(0, cg, 1 << 30, absl::Seconds(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  struct stat st;
  EXPECT_NE(stat((cg + "/dmem.max").c_str(), &st), 0);
}

TEST(MemoryLimitsProtocolTest, TheCallCrossesTheWorkerProtocol) {
  Request r;
  r.id = 7;
  r.op = Op::kSetMemoryLimit;
  r.index = 1;
  r.timeout = absl::Seconds(5);
  r.cgroup = "/sys/fs/cgroup/kubepods/pod1/ctr-a";
  r.bytes = uint64_t{4} << 30;
  absl::StatusOr<Request> back = DecodeRequest(nlohmann::json::parse(EncodeRequest(r).dump()));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->op, Op::kSetMemoryLimit);
  EXPECT_EQ(back->index, 1u);
  EXPECT_EQ(back->cgroup, r.cgroup);
  EXPECT_EQ(back->bytes, r.bytes);
  EXPECT_EQ(back->timeout, absl::Seconds(5));
  // A request without its cgroup, or with an empty one, is refused.
  nlohmann::json bad = EncodeRequest(r);
  bad.erase("cgroup");
  EXPECT_FALSE(DecodeRequest(bad).ok());
  bad["cgroup"] = "";
  EXPECT_FALSE(DecodeRequest(bad).ok());
  bad["cgroup"] = "/x";
  bad.erase("bytes");
  EXPECT_FALSE(DecodeRequest(bad).ok());
}

}  // namespace
}  // namespace gpulet::nvml
