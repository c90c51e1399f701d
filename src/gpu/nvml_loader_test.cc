// The loader against real misbehaving libraries (tests/testlibs) and the simulator.
#include "gpu/nvml_loader.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "gpu/elf_check.h"
#include "gpu/nvml_api.h"
#include "gpu/nvml_errors.h"
#include "gpu/nvml_gpu_library.h"
#include "gtest/gtest.h"

namespace gpulet {
namespace {

namespace fs = std::filesystem;

std::string TestLib(const std::string& name) {
  return std::string(GPULET_TESTLIB_DIR) + "/libnvml-" + name + ".so";
}

class NvmlLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("GPULET_SIM_FIXTURE",
           (std::string(GPULET_SOURCE_DIR) + "/sim/fixtures/homelab.yaml").c_str(), 1);
    unsetenv("GPULET_SIM_STATE");
    tmp_ = fs::temp_directory_path() /
           ("gpulet-loader-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(tmp_);
    fs::create_directories(tmp_);
  }
  void TearDown() override { fs::remove_all(tmp_); }

  NvmlLoadResult LoadExplicit(const std::string& path, absl::Duration timeout = absl::Seconds(10)) {
    NvmlLoadOptions options;
    options.explicit_path = path;
    options.probe_timeout = timeout;
    return LoadNvml(HostFs(tmp_.string()), options);
  }

  fs::path tmp_;
};

TEST_F(NvmlLoaderTest, ExplicitPathMissing) {
  NvmlLoadResult r = LoadExplicit("/nonexistent/libnvidia-ml.so.1");
  EXPECT_EQ(r.library, nullptr);
  EXPECT_TRUE(absl::IsNotFound(r.status)) << r.status;
  EXPECT_NE(r.status.message().find("/nonexistent/libnvidia-ml.so.1"), absl::string_view::npos);
  EXPECT_NE(r.status.message().find("--nvml-lib"), absl::string_view::npos);
}

TEST_F(NvmlLoaderTest, EmptyHostRootListsEveryPathTriedAndTheFix) {
  NvmlLoadOptions options;
  NvmlLoadResult r = LoadNvml(HostFs(tmp_.string()), options);
  if (r.library) GTEST_SKIP() << "this machine has a real NVML reachable by the loader";
  std::string msg(r.status.message());
  for (const NvmlSearchLocation& loc : NvmlSearchLocations()) {
    if (loc.host_dir.empty()) continue;
    EXPECT_NE(msg.find(loc.host_dir + "/libnvidia-ml.so.1"), std::string::npos) << loc.host_dir;
  }
  EXPECT_NE(msg.find("via the dynamic loader"), std::string::npos);
  EXPECT_NE(msg.find("Fix:"), std::string::npos);
  EXPECT_NE(msg.find("nvidia-container-toolkit-production"), std::string::npos);
}

TEST_F(NvmlLoaderTest, CrashInInitIsDiagnosedNotFatal) {
  NvmlLoadResult r = LoadExplicit(TestLib("crash_init"));
  EXPECT_EQ(r.library, nullptr);
  std::string msg(r.status.message());
  EXPECT_NE(msg.find("SIGSEGV"), std::string::npos) << msg;
  EXPECT_NE(msg.find("during nvmlInit_v2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("glibc"), std::string::npos) << msg;
  ASSERT_EQ(r.attempts.size(), 1u);
  EXPECT_EQ(r.attempts[0].result, NvmlLoadAttempt::Result::kProbeFailed);
  EXPECT_EQ(r.attempts[0].reason, NvmlLoadAttempt::Reason::kCrashed);
}

TEST_F(NvmlLoaderTest, HangInInitTimesOut) {
  absl::Time start = absl::Now();
  NvmlLoadResult r = LoadExplicit(TestLib("hang_init"), absl::Milliseconds(700));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(r.library, nullptr);
  EXPECT_TRUE(absl::IsDeadlineExceeded(r.status)) << r.status;
  std::string msg(r.status.message());
  EXPECT_NE(msg.find("did not return from nvmlInit_v2 within 700ms"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did not hang"), std::string::npos);
  ASSERT_EQ(r.attempts.size(), 1u);
  EXPECT_EQ(r.attempts[0].reason, NvmlLoadAttempt::Reason::kHung);
}

TEST_F(NvmlLoaderTest, MissingSymbolsAreNamed) {
  NvmlLoadResult r = LoadExplicit(TestLib("missing_symbols"));
  EXPECT_EQ(r.library, nullptr);
  std::string msg(r.status.message());
  EXPECT_NE(msg.find("not a usable NVML library"), std::string::npos) << msg;
  EXPECT_NE(msg.find("nvmlDeviceGetCount_v2"), std::string::npos) << msg;
  ASSERT_EQ(r.attempts.size(), 1u);
  EXPECT_EQ(r.attempts[0].reason, NvmlLoadAttempt::Reason::kUnusable);
}

TEST_F(NvmlLoaderTest, NewerGlibcIsRefusedBeforeLoading) {
  NvmlLoadResult r = LoadExplicit(TestLib("newer-glibc"));
  EXPECT_EQ(r.library, nullptr);
  EXPECT_EQ(r.worker, nullptr);
  // Refused in process, then no host glibc to run it in gpulet-nvml-worker either.
  ASSERT_EQ(r.attempts.size(), 2u) << FormatAttempts(r.attempts);
  EXPECT_EQ(r.attempts[0].result, NvmlLoadAttempt::Result::kRejected);
  EXPECT_EQ(r.attempts[1].result, NvmlLoadAttempt::Result::kRejected);
  EXPECT_EQ(r.attempts[0].reason, NvmlLoadAttempt::Reason::kNeedsNewerGlibc);
  EXPECT_EQ(r.attempts[1].reason, NvmlLoadAttempt::Reason::kNeedsNewerGlibc);
  EXPECT_NE(r.attempts[1].status.message().find("no C library of glibc 9."), std::string::npos)
      << r.attempts[1].status;
  std::string msg(r.status.message());
  EXPECT_NE(msg.find("GLIBC_9"), std::string::npos) << msg;
  EXPECT_NE(msg.find(RunningGlibcVersion().ToString()), std::string::npos) << msg;
}

TEST_F(NvmlLoaderTest, InitFailureCarriesCauseAndCode) {
  NvmlLoadResult r = LoadExplicit(TestLib("init_fails"));
  EXPECT_EQ(r.library, nullptr);
  EXPECT_EQ(r.nvml_code, NVML_ERROR_DRIVER_NOT_LOADED);
  std::string msg(r.status.message());
  EXPECT_NE(msg.find("NVML_ERROR_DRIVER_NOT_LOADED"), std::string::npos) << msg;
  EXPECT_NE(msg.find("machine.kernel.modules"), std::string::npos) << msg;
}

TEST_F(NvmlLoaderTest, SimulatorLoadsThroughTheRealPath) {
  NvmlLoadResult r = LoadExplicit(GPULET_SIM_LIB);
  ASSERT_NE(r.library, nullptr) << r.status;
  EXPECT_TRUE(r.status.ok());
  NvmlGpuLibrary gpus(std::shared_ptr<NvmlLibrary>(std::move(r.library)), {});
  absl::StatusOr<unsigned> count = gpus.GetDeviceCount();
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(*count, 2u);
  absl::StatusOr<DeviceIdentity> id = gpus.GetDeviceIdentity(1);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->name, "NVIDIA GeForce RTX 5090");
  EXPECT_EQ(id->bus_id, "00000000:02:00.0");
  EXPECT_EQ(id->nvml_architecture, NVML_DEVICE_ARCH_BLACKWELL);
  absl::StatusOr<SystemInfo> sys = gpus.GetSystemInfo();
  ASSERT_TRUE(sys.ok());
  EXPECT_EQ(sys->driver_version, "570.133.20");
  EXPECT_EQ(sys->CudaVersionString(), "12.8");
}

TEST_F(NvmlLoaderTest, FindsLibraryInTalosLayoutUnderHostRoot) {
  fs::path dir = tmp_ / "usr/local/glibc/lib";
  fs::create_directories(dir);
  fs::copy_file(GPULET_SIM_LIB, dir / "libnvidia-ml.so.1");
  NvmlLoadResult r = LoadNvml(HostFs(tmp_.string()), NvmlLoadOptions{});
  ASSERT_NE(r.library, nullptr) << r.status;
  if (r.attempts.front().result == NvmlLoadAttempt::Result::kLoaded) {
    GTEST_SKIP() << "this machine has a real NVML reachable by the loader";
  }
  EXPECT_EQ(r.attempts.back().result, NvmlLoadAttempt::Result::kLoaded);
  EXPECT_NE(r.library->path().find("usr/local/glibc/lib/libnvidia-ml.so.1"), std::string::npos);
  // The Talos <=1.8 location comes first in the order and was looked at.
  bool looked_at_usr_local_lib = false;
  for (const auto& a : r.attempts) {
    if (a.candidate.find("/usr/local/lib/libnvidia-ml.so.1") != std::string::npos) {
      looked_at_usr_local_lib = true;
    }
  }
  EXPECT_TRUE(looked_at_usr_local_lib);
}

TEST_F(NvmlLoaderTest, SymlinkEscapingHostRootStaysInside) {
  // A hostile host tree: /nvidia-libs is an absolute symlink to "/" which must resolve to
  // the host root, not to this machine's root.
  fs::create_symlink("/", tmp_ / "nvidia-libs");
  NvmlLoadResult r = LoadNvml(HostFs(tmp_.string()), NvmlLoadOptions{});
  for (const auto& a : r.attempts) {
    if (a.candidate.find("/nvidia-libs/") != std::string::npos) {
      EXPECT_EQ(a.result, NvmlLoadAttempt::Result::kAbsent);
    }
  }
}

}  // namespace
}  // namespace gpulet
