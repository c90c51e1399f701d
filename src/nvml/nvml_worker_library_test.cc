// NVML through gpulet-nvml-worker on the talos-glibc test root (tests/CMakeLists.txt): a
// simulator that needs GLIBC_9.99 and the root's own loader and libc.so.6 that provide it.
#include "nvml/nvml_worker_library.h"

#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "gpu/nvml_api.h"
#include "gpu/nvml_errors.h"
#include "gtest/gtest.h"
#include "nvml/elf_check.h"
#include "nvml/nvml_loader.h"

namespace gpulet::nvml {
namespace {

namespace fs = std::filesystem;

const std::string kRoot = GPULET_WORKER_ROOT;
const std::string kGlibcDir = kRoot + "/usr/local/glibc/lib";

class NvmlWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (GPULET_SANITIZED) {
      // The simulator is sanitized in this build and cannot load without ASan's runtime,
      // which a process started by another loader does not have.
      GTEST_SKIP() << "the NVML worker path is tested in the plain build";
    }
    state_ = fs::temp_directory_path() / ("gpulet-worker-" + std::to_string(getpid()) + ".json");
    fs::remove(state_);
    setenv("GPULET_SIM_FIXTURE", GPULET_SOURCE_DIR "/sim/fixtures/homelab.yaml", 1);
    setenv("GPULET_SIM_STATE", state_.c_str(), 1);
  }
  void TearDown() override {
    unsetenv("GPULET_SIM_FIXTURE");
    unsetenv("GPULET_SIM_STATE");
    fs::remove(state_);
  }

  NvmlLoadResult Load(bool allow_worker = true) {
    HostFs host(kRoot);
    NvmlLoadOptions options;
    options.worker_path = GPULET_NVML_WORKER;
    options.allow_worker = allow_worker;
    options.worker.hang_timeout = absl::Seconds(1);
    options.worker.ping_interval = absl::Milliseconds(200);
    options.worker.backoff_initial = absl::Milliseconds(100);
    return LoadNvml(host, options);
  }

  // Calls Probe until it succeeds or `limit` passes.
  static absl::StatusOr<gpu::ProbeAnswer> ProbeUntilOk(gpu::GpuLibrary& lib, unsigned index,
                                                       absl::Duration limit) {
    absl::Time end = absl::Now() + limit;
    absl::StatusOr<gpu::ProbeAnswer> r = lib.Probe(index, absl::Milliseconds(500));
    while (!r.ok() && absl::Now() < end) {
      absl::SleepFor(absl::Milliseconds(50));
      r = lib.Probe(index, absl::Milliseconds(500));
    }
    return r;
  }

  fs::path state_;
};

TEST_F(NvmlWorkerTest, RootProvidesGlibcTheLibraryNeedsAndThisProcessLacks) {
  auto lib = ReadElfInfo(kGlibcDir + "/libnvidia-ml.so.1");
  ASSERT_TRUE(lib.ok()) << lib.status();
  ASSERT_TRUE(MaxGlibcNeeded(*lib).has_value());
  EXPECT_EQ(MaxGlibcNeeded(*lib)->ToString(), "9.99");
  EXPECT_TRUE(absl::IsFailedPrecondition(CheckLoadable(kGlibcDir + "/libnvidia-ml.so.1")));
  // The dynamic loader agrees with the ELF check: this process cannot load it.
  void* handle = dlopen((kGlibcDir + "/libnvidia-ml.so.1").c_str(), RTLD_NOW | RTLD_LOCAL);
  EXPECT_EQ(handle, nullptr);
  if (handle != nullptr) dlclose(handle);

  auto libc = ReadElfInfo(kGlibcDir + "/libc.so.6");
  ASSERT_TRUE(libc.ok()) << libc.status();
  ASSERT_TRUE(MaxGlibcProvided(*libc).has_value());
  EXPECT_EQ(MaxGlibcProvided(*libc)->ToString(), "9.99");
  EXPECT_NE(std::find(libc->version_definitions.begin(), libc->version_definitions.end(),
                      "GLIBC_PRIVATE"),
            libc->version_definitions.end());
}

TEST_F(NvmlWorkerTest, SystemLibcProvidesTheRunningGlibc) {
  auto libc = ReadElfInfo("/lib/" GPULET_LIBRARY_ARCH "/libc.so.6");
  if (!libc.ok()) GTEST_SKIP() << libc.status();
  ASSERT_TRUE(MaxGlibcProvided(*libc).has_value());
  EXPECT_EQ(*MaxGlibcProvided(*libc), RunningGlibcVersion());
  // A library defines no GLIBC versions.
  auto sim = ReadElfInfo(GPULET_SIM_LIB);
  ASSERT_TRUE(sim.ok());
  EXPECT_FALSE(MaxGlibcProvided(*sim).has_value());
}

TEST_F(NvmlWorkerTest, FindDriverGlibcNamesEachDirectoryAndWhy) {
  auto found = FindDriverGlibc({{kRoot + "/usr/lib", "/usr/lib", "/usr/lib"},
                                {kGlibcDir, "/usr/local/glibc/lib", "/usr/local/glibc/lib"}},
                               GlibcVersion{9, 99});
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->dir, kGlibcDir);
  EXPECT_EQ(found->loader, kGlibcDir + "/" + HostLoaderName());
  EXPECT_EQ(found->version.ToString(), "9.99");

  auto too_new = FindDriverGlibc({{kGlibcDir, "/usr/local/glibc/lib", "/usr/local/glibc/lib"}},
                                 GlibcVersion{10, 1});
  ASSERT_TRUE(absl::IsNotFound(too_new.status()));
  EXPECT_NE(too_new.status().message().find("/usr/local/glibc/lib: libc.so.6 provides glibc 9.99"),
            std::string::npos)
      << too_new.status();
  auto none = FindDriverGlibc({{kRoot + "/dev", "/dev", "/dev"}}, GlibcVersion{9, 99});
  ASSERT_TRUE(absl::IsNotFound(none.status()));
  EXPECT_NE(none.status().message().find("/dev: no libc.so.6"), std::string::npos) << none.status();
}

TEST_F(NvmlWorkerTest, GlibcFilesAreResolvedInsideTheHostRoot) {
  // Absolute symlinks in a host root name host paths: followed from this machine's root
  // they would pick up this machine's own libc and loader.
  fs::path root = fs::temp_directory_path() / ("gpulet-glibc-root-" + std::to_string(getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "usr/local/glibc/lib");
  fs::create_symlink(kGlibcDir + "/libc.so.6", root / "usr/local/glibc/lib/libc.so.6");
  fs::create_symlink(kGlibcDir + "/" + HostLoaderName(),
                     root / "usr/local/glibc/lib" / HostLoaderName());
  HostFs host(root.string());
  const GlibcDirCandidate dir{(root / "usr/local/glibc/lib").string(), "/usr/local/glibc/lib",
                              "/usr/local/glibc/lib"};
  auto inside = FindDriverGlibc({dir}, GlibcVersion{9, 99}, &host);
  EXPECT_TRUE(absl::IsNotFound(inside.status())) << inside.status();
  auto outside = FindDriverGlibc({dir}, GlibcVersion{9, 99}, /*host=*/nullptr);
  EXPECT_TRUE(outside.ok()) << outside.status();
  fs::remove_all(root);
}

TEST_F(NvmlWorkerTest, LoaderRefusesInProcessAndReadsBothGpusThroughTheWorker) {
  NvmlLoadResult r = Load();
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.library, nullptr);
  ASSERT_NE(r.worker, nullptr);
  bool rejected = false, loaded = false;
  for (const gpu::NvmlLoadAttempt& a : r.attempts) {
    if (a.result == gpu::NvmlLoadAttempt::Result::kRejected &&
        absl::StrContains(a.status.message(), "GLIBC_9.99")) {
      rejected = true;
    }
    if (a.result == gpu::NvmlLoadAttempt::Result::kLoaded) {
      loaded = true;
      EXPECT_NE(a.note.find("gpulet-nvml-worker"), std::string::npos) << a.note;
      EXPECT_NE(a.note.find("9.99"), std::string::npos) << a.note;
    }
  }
  EXPECT_TRUE(rejected) << gpu::FormatAttempts(r.attempts);
  EXPECT_TRUE(loaded) << gpu::FormatAttempts(r.attempts);

  gpu::GpuLibrary& lib = *r.worker;
  auto count = lib.GetDeviceCount();
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(*count, 2u);
  auto gpu0 = lib.GetDeviceIdentity(0);
  auto gpu1 = lib.GetDeviceIdentity(1);
  ASSERT_TRUE(gpu0.ok()) << gpu0.status();
  ASSERT_TRUE(gpu1.ok()) << gpu1.status();
  EXPECT_EQ(gpu0->name, "NVIDIA GeForce RTX 3080");
  EXPECT_EQ(gpu1->name, "NVIDIA GeForce RTX 5090");
  EXPECT_EQ(gpu1->uuid, "GPU-8a41d7b9-52c6-4f13-b0e8-7d2c9e155090");
  auto info = lib.GetSystemInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->driver_version, "570.133.20");
  EXPECT_NE(info->library_path.find("gpulet-nvml-worker"), std::string::npos) << info->library_path;
  auto sample = lib.Sample(0, absl::Seconds(2));
  ASSERT_TRUE(sample.ok()) << sample.status();
  EXPECT_TRUE(sample->gpu_util.has_value());
  auto probe = lib.Probe(1, absl::Seconds(2));
  ASSERT_TRUE(probe.ok()) << probe.status();
  EXPECT_EQ(probe->uuid, gpu1->uuid);
  // An NVML error keeps its code across the process boundary.
  auto missing = lib.GetDeviceIdentity(7);
  EXPECT_FALSE(missing.ok());
  EXPECT_GE(gpu::NvmlCodeOf(missing.status()), 0) << missing.status();
}

TEST_F(NvmlWorkerTest, WithoutTheWorkerTheGlibcGateStillRefuses) {
  NvmlLoadResult r = Load(/*allow_worker=*/false);
  EXPECT_FALSE(r.status.ok());
  EXPECT_EQ(r.worker, nullptr);
  EXPECT_EQ(r.library, nullptr);
  EXPECT_NE(r.status.message().find("GLIBC_9.99"), std::string::npos) << r.status;
}

TEST_F(NvmlWorkerTest, MissingWorkerExecutableIsAClearFailure) {
  HostFs host(kRoot);
  NvmlLoadOptions options;
  options.worker_path = "/nonexistent/gpulet-nvml-worker";
  NvmlLoadResult r = LoadNvml(host, options);
  EXPECT_FALSE(r.status.ok());
  EXPECT_NE(gpu::FormatAttempts(r.attempts).find("install gpulet-nvml-worker beside"),
            std::string::npos)
      << gpu::FormatAttempts(r.attempts);
}

TEST_F(NvmlWorkerTest, DriverNotLoadedInTheWorkerKeepsTheNvmlCode) {
  std::ofstream(state_) << R"({"version": 1, "driver_not_loaded": true})";
  NvmlLoadResult r = Load();
  EXPECT_FALSE(r.status.ok());
  EXPECT_EQ(r.worker, nullptr);
  EXPECT_EQ(r.nvml_code, NVML_ERROR_DRIVER_NOT_LOADED) << r.status;
}

// Events registered for one GPU of two: NVML's own answer, its code kept across the worker,
// which the worker library tells apart from a worker that never answered (that one is
// replayed on the next wait; this one is not).
TEST_F(NvmlWorkerTest, EventsRegisteredForSomeGpusCarryNvmlsCode) {
  NvmlLoadResult r = Load();
  ASSERT_NE(r.worker, nullptr) << r.status;
  std::ofstream(state_) << R"({"version": 1, "gpus": {"1": {"lost": true}}})";
  absl::Status s = r.worker->RegisterEvents(2);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_EQ(gpu::NvmlCodeOf(s), NVML_ERROR_GPU_IS_LOST) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "GPU 1: NVML_ERROR_GPU_IS_LOST")) << s;
}

// The driver's own VRAM limit of a cgroup, through the worker: the report's 570 driver has
// no such call and its NVML code crosses the worker; an r615 driver (the homelab fixture
// with its version changed) holds the limit, which the simulator shows as the kernel's dmem
// controller would, in the cgroup's dmem.max.
TEST_F(NvmlWorkerTest, TheDriversOwnVramLimitCrossesTheWorker) {
  const fs::path dir = fs::path(state_).replace_extension(".limits");
  fs::create_directories(dir / "cgroup" / "pod1" / "ctr-a");
  const std::string cgroup = (dir / "cgroup" / "pod1" / "ctr-a").string();
  {
    NvmlLoadResult r = Load();
    ASSERT_NE(r.worker, nullptr) << r.status;
    absl::Status s = r.worker->SetMemoryLimit(1, cgroup, uint64_t{4} << 30, absl::Seconds(5));
    EXPECT_TRUE(absl::IsUnimplemented(s)) << s;
    EXPECT_EQ(gpu::NvmlCodeOf(s), NVML_ERROR_FUNCTION_NOT_FOUND) << s;
  }
  std::ifstream in(GPULET_SOURCE_DIR "/sim/fixtures/homelab.yaml");
  std::string fixture((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string old_version = "version: \"570.133.20\"";
  const size_t at = fixture.find(old_version);
  ASSERT_NE(at, std::string::npos);
  fixture.replace(at, old_version.size(), "version: \"615.20.01\"");
  std::ofstream(dir / "homelab-r615.yaml") << fixture;
  setenv("GPULET_SIM_FIXTURE", (dir / "homelab-r615.yaml").c_str(), 1);
  {
    NvmlLoadResult r = Load();
    ASSERT_NE(r.worker, nullptr) << r.status;
    absl::Status s = r.worker->SetMemoryLimit(1, cgroup, uint64_t{4} << 30, absl::Seconds(5));
    EXPECT_TRUE(s.ok()) << s;
    std::ifstream max(dir / "cgroup" / "pod1" / "ctr-a" / "dmem.max");
    std::string line;
    std::getline(max, line);
    EXPECT_EQ(line, "nvidia/0000:02:00.0/vidmem 4294967296");
  }
  fs::remove_all(dir);
}

TEST_F(NvmlWorkerTest, KilledWorkerFailsCallsThenComesBack) {
  NvmlLoadResult r = Load();
  ASSERT_NE(r.worker, nullptr) << r.status;
  NvmlWorkerGpuLibrary& lib = *r.worker;
  const pid_t first = lib.worker_pid();
  ASSERT_GT(first, 0);
  ASSERT_EQ(kill(first, SIGKILL), 0);
  // Calls fail at once with a status naming the worker, never hang or crash.
  absl::StatusOr<gpu::ProbeAnswer> during = lib.Probe(0, absl::Milliseconds(500));
  for (int i = 0; i < 100 && during.ok(); ++i) {
    absl::SleepFor(absl::Milliseconds(10));
    during = lib.Probe(0, absl::Milliseconds(500));
  }
  ASSERT_FALSE(during.ok());
  EXPECT_NE(during.status().message().find("NVML worker"), std::string::npos) << during.status();
  auto after = ProbeUntilOk(lib, 0, absl::Seconds(10));
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_NE(lib.worker_pid(), first);
  EXPECT_GE(lib.restarts(), 1);
}

TEST_F(NvmlWorkerTest, StoppedWorkerIsKilledAndReplaced) {
  NvmlLoadResult r = Load();
  ASSERT_NE(r.worker, nullptr) << r.status;
  NvmlWorkerGpuLibrary& lib = *r.worker;
  const pid_t first = lib.worker_pid();
  ASSERT_GT(first, 0);
  ASSERT_EQ(kill(first, SIGSTOP), 0);
  auto during = lib.Probe(1, absl::Milliseconds(300));
  EXPECT_FALSE(during.ok());
  auto after = ProbeUntilOk(lib, 1, absl::Seconds(10));
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_NE(lib.worker_pid(), first);
}

TEST_F(NvmlWorkerTest, HungGpuDelaysOnlyItsOwnCalls) {
  NvmlLoadResult r = Load();
  ASSERT_NE(r.worker, nullptr) << r.status;
  NvmlWorkerGpuLibrary& lib = *r.worker;
  std::ofstream(state_) << R"({"version": 1, "gpus": {"0": {"hang_seconds": 30}}})";
  auto hung = lib.Probe(0, absl::Milliseconds(300));
  ASSERT_FALSE(hung.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(hung.status())) << hung.status();
  // GPU 1 answers while the worker's GPU 0 thread is still stuck in the driver.
  auto other = lib.Probe(1, absl::Milliseconds(500));
  EXPECT_TRUE(other.ok()) << other.status();
  // The worker as a whole still answers its pings, so it is not replaced.
  const pid_t pid = lib.worker_pid();
  absl::SleepFor(absl::Milliseconds(1500));
  EXPECT_EQ(lib.worker_pid(), pid);
  fs::remove(state_);
  auto back = ProbeUntilOk(lib, 0, absl::Seconds(10));
  EXPECT_TRUE(back.ok()) << back.status();
}

}  // namespace
}  // namespace gpulet::nvml
