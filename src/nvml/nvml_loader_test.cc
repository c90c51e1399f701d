// The loader against real misbehaving libraries (tests/testlibs) and the simulator.
#include "nvml/nvml_loader.h"

#include <elf.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "gpu/nvml_api.h"
#include "gpu/nvml_errors.h"
#include "gtest/gtest.h"
#include "nvml/elf_check.h"
#include "nvml/nvml_gpu_library.h"
#include "testing/homelab.h"

namespace gpulet::nvml {
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
  EXPECT_EQ(r.attempts[0].result, gpu::NvmlLoadAttempt::Result::kProbeFailed);
  EXPECT_EQ(r.attempts[0].reason, gpu::NvmlLoadAttempt::Reason::kCrashed);
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
  EXPECT_EQ(r.attempts[0].reason, gpu::NvmlLoadAttempt::Reason::kHung);
}

// The parent pid and state of `pid` from /proc/<pid>/stat; nullopt when it is gone.
struct ProcStat {
  pid_t ppid = 0;
  char state = '?';
};
std::optional<ProcStat> ReadProcStat(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  size_t name_end = line.rfind(')');  // the command name may hold spaces and parentheses
  if (name_end == std::string::npos) return std::nullopt;
  ProcStat st;
  std::istringstream rest(line.substr(name_end + 1));
  rest >> st.state >> st.ppid;
  return st;
}

// The pids whose parent is `parent`.
std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    std::optional<ProcStat> st = ReadProcStat(pid);
    if (st && st->ppid == parent) out.push_back(pid);
  }
  return out;
}

// Acceptance test for "no orphaned probe child": gpulet runs `list` against a library whose
// nvmlInit_v2 hangs; gpulet is SIGKILLed while its probe child hangs; the probe child must
// be gone (or a zombie waiting for its new parent to reap it) within 1 s, via
// PR_SET_PDEATHSIG.
TEST_F(NvmlLoaderTest, ProbeChildDiesWithGpulet) {
  const std::string gpulet = gpulet::testing::GpuletBinary();
  const std::string lib = TestLib("hang_init");
  const std::string host_root = tmp_.string();
  pid_t gpulet_pid = fork();
  ASSERT_GE(gpulet_pid, 0);
  if (gpulet_pid == 0) {
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
      dup2(devnull, 1);
      dup2(devnull, 2);
    }
    execl(gpulet.c_str(), gpulet.c_str(), "--host-root", host_root.c_str(), "--nvml-lib",
          lib.c_str(), "--probe-timeout", "60", "list", static_cast<char*>(nullptr));
    _exit(127);
  }
  // The probe child appears once gpulet has vetted the library and forked.
  pid_t probe = 0;
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (probe == 0 && std::chrono::steady_clock::now() < give_up) {
    std::vector<pid_t> children = ChildrenOf(gpulet_pid);
    if (!children.empty()) {
      probe = children.front();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  if (probe == 0) {
    kill(gpulet_pid, SIGKILL);
    waitpid(gpulet_pid, nullptr, 0);
    FAIL() << "gpulet (pid " << gpulet_pid << ") started no probe child within 20 s";
  }
  // Let the child reach the hanging nvmlInit_v2 (past PR_SET_PDEATHSIG) before the kill.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_EQ(kill(gpulet_pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(gpulet_pid, &status, 0), gpulet_pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  std::optional<ProcStat> st = ReadProcStat(probe);
  while (st && st->state != 'Z' && st->state != 'X' &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    st = ReadProcStat(probe);
  }
  const bool gone = !st || st->state == 'Z' || st->state == 'X';
  if (!gone) kill(probe, SIGKILL);  // do not leave it behind for the next test
  EXPECT_TRUE(gone) << "probe child " << probe << " still running (state " << st->state
                    << ", parent " << st->ppid << ") 1 s after gpulet was killed";
}

// Candidates that are no shared library are refused before the probe, at once, naming
// the path and what it is.
TEST_F(NvmlLoaderTest, NonLibraryFilesAreRefusedAtOnceAndNamed) {
  const fs::path fifo = tmp_ / "fifo.so";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const fs::path loop = tmp_ / "loop.so";
  fs::create_symlink(loop, loop);
  const fs::path script = tmp_ / "script.so";
  std::ofstream(script) << "/* GNU ld script */\nINPUT(libnvidia-ml.so.1)\n";
  struct Case {
    std::string path;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{{fifo.string(), "a FIFO"},
                                         {tmp_.string(), "a directory"},
                                         {"/dev/zero", "a character device"},
                                         {loop.string(), "symlink loop"},
                                         {script.string(), "linker script"}}) {
    absl::Time start = absl::Now();
    NvmlLoadResult r = LoadExplicit(c.path);
    EXPECT_LT(absl::Now() - start, absl::Milliseconds(500)) << c.path;
    EXPECT_EQ(r.library, nullptr);
    std::string msg(r.status.message());
    EXPECT_NE(msg.find(c.path), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.says), std::string::npos) << msg;
    EXPECT_EQ(msg.find("does not exist"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("too short"), std::string::npos) << msg;
    ASSERT_EQ(r.attempts.size(), 1u) << msg;
    EXPECT_EQ(r.attempts[0].result, gpu::NvmlLoadAttempt::Result::kRejected) << c.path;
    EXPECT_EQ(r.attempts[0].reason, gpu::NvmlLoadAttempt::Reason::kNotALibrary) << c.path;
  }
}

TEST_F(NvmlLoaderTest, SymlinkLoopAtASearchedPlaceIsNamed) {
  const fs::path dir = tmp_ / "usr/lib/x86_64-linux-gnu";
  fs::create_directories(dir);
  fs::create_symlink("libnvidia-ml.so.1", dir / "libnvidia-ml.so.1");
  NvmlLoadResult r = LoadNvml(HostFs(tmp_.string()), NvmlLoadOptions{});
  if (r.library) GTEST_SKIP() << "this machine has a real NVML reachable by the loader";
  bool seen = false;
  for (const gpu::NvmlLoadAttempt& a : r.attempts) {
    if (!absl::StartsWith(a.candidate, "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")) continue;
    seen = true;
    EXPECT_EQ(a.reason, gpu::NvmlLoadAttempt::Reason::kNotALibrary) << a.status;
    EXPECT_TRUE(absl::StrContains(a.status.message(), "symlink loop")) << a.status;
  }
  EXPECT_TRUE(seen) << r.status;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST_F(NvmlLoaderTest, TruncatedLibraryIsDamagedNotAGlibcMixUp) {
  const std::string whole = ReadBytes(TestLib("crash_init"));
  ASSERT_GT(whole.size(), 1000u);
  const fs::path half = tmp_ / "libnvidia-ml.so.1";
  std::ofstream(half, std::ios::binary) << whole.substr(0, whole.size() / 2);
  NvmlLoadResult r = LoadExplicit(half.string());
  EXPECT_EQ(r.library, nullptr);
  std::string msg(r.status.message());
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find(half.string()), std::string::npos) << msg;
  EXPECT_EQ(msg.find("glibc builds are mixed"), std::string::npos) << msg;
  ASSERT_EQ(r.attempts.size(), 1u);
  EXPECT_EQ(r.attempts[0].reason, gpu::NvmlLoadAttempt::Reason::kDamaged);
  EXPECT_STREQ(gpu::NvmlLoadReasonName(r.attempts[0].reason), "truncated or damaged");
}

TEST_F(NvmlLoaderTest, LibraryForAnotherArchitectureIsNamed) {
  std::string bytes = ReadBytes(TestLib("crash_init"));
  ASSERT_GT(bytes.size(), sizeof(Elf64_Ehdr));
  if (bytes[EI_CLASS] != ELFCLASS64 || bytes[offsetof(Elf64_Ehdr, e_machine)] != EM_X86_64) {
    GTEST_SKIP() << "the patch assumes an x86_64 library";
  }
  bytes[offsetof(Elf64_Ehdr, e_machine)] = static_cast<char>(EM_AARCH64);
  const fs::path foreign = tmp_ / "libnvidia-ml.so.1";
  std::ofstream(foreign, std::ios::binary) << bytes;
  NvmlLoadResult r = LoadExplicit(foreign.string());
  EXPECT_EQ(r.library, nullptr);
  std::string msg(r.status.message());
  EXPECT_NE(msg.find("aarch64"), std::string::npos) << msg;
  EXPECT_NE(msg.find("another architecture"), std::string::npos) << msg;
  ASSERT_GE(r.attempts.size(), 1u);
  EXPECT_EQ(r.attempts[0].reason, gpu::NvmlLoadAttempt::Reason::kIncompatible);
}

TEST_F(NvmlLoaderTest, MissingSymbolsAreNamed) {
  NvmlLoadResult r = LoadExplicit(TestLib("missing_symbols"));
  EXPECT_EQ(r.library, nullptr);
  std::string msg(r.status.message());
  EXPECT_NE(msg.find("not a usable NVML library"), std::string::npos) << msg;
  EXPECT_NE(msg.find("nvmlDeviceGetCount_v2"), std::string::npos) << msg;
  ASSERT_EQ(r.attempts.size(), 1u);
  EXPECT_EQ(r.attempts[0].reason, gpu::NvmlLoadAttempt::Reason::kUnusable);
}

TEST_F(NvmlLoaderTest, NewerGlibcIsRefusedBeforeLoading) {
  NvmlLoadResult r = LoadExplicit(TestLib("newer-glibc"));
  EXPECT_EQ(r.library, nullptr);
  EXPECT_EQ(r.worker, nullptr);
  // Refused in process, then no host glibc to run it in gpulet-nvml-worker either.
  ASSERT_EQ(r.attempts.size(), 2u) << gpu::FormatAttempts(r.attempts);
  EXPECT_EQ(r.attempts[0].result, gpu::NvmlLoadAttempt::Result::kRejected);
  EXPECT_EQ(r.attempts[1].result, gpu::NvmlLoadAttempt::Result::kRejected);
  EXPECT_EQ(r.attempts[0].reason, gpu::NvmlLoadAttempt::Reason::kNeedsNewerGlibc);
  EXPECT_EQ(r.attempts[1].reason, gpu::NvmlLoadAttempt::Reason::kNeedsNewerGlibc);
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
  absl::StatusOr<gpu::DeviceIdentity> id = gpus.GetDeviceIdentity(1);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->name, "NVIDIA GeForce RTX 5090");
  EXPECT_EQ(id->bus_id, "00000000:02:00.0");
  EXPECT_EQ(id->nvml_architecture, NVML_DEVICE_ARCH_BLACKWELL);
  // GeForce: no MIG, no GPM, no NVLink; bare metal.
  EXPECT_EQ(id->mig_capable, false);
  EXPECT_EQ(id->virtualization_mode, NVML_GPU_VIRTUALIZATION_MODE_NONE);
  absl::StatusOr<gpu::SystemInfo> sys = gpus.GetSystemInfo();
  ASSERT_TRUE(sys.ok());
  EXPECT_EQ(sys->driver_version, "570.133.20");
  EXPECT_EQ(sys->CudaVersionString(), "12.8");
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<gpu::DeviceSample> sample = gpus.Sample(1, absl::Seconds(5));
    ASSERT_TRUE(sample.ok()) << sample.status();
    EXPECT_FALSE(sample->profiling.has_value());
    EXPECT_TRUE(sample->nvlinks.empty());
    EXPECT_FALSE(sample->nvlink_data_tx_kib.has_value());
  }
}

// gpulet's GPM, NVLink and MIG readers (nvml_profiling.cc) against the simulator's DGX H100.
TEST_F(NvmlLoaderTest, SimulatorServesGpmNvLinksAndMigToTheReaders) {
  setenv("GPULET_SIM_FIXTURE", (std::string(GPULET_SOURCE_DIR) + "/sim/fixtures/dgx8.yaml").c_str(),
         1);
  NvmlLoadResult r = LoadExplicit(GPULET_SIM_LIB);
  ASSERT_NE(r.library, nullptr) << r.status;
  NvmlGpuLibrary gpus(std::shared_ptr<NvmlLibrary>(std::move(r.library)), {});
  absl::StatusOr<gpu::DeviceIdentity> id = gpus.GetDeviceIdentity(0);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->mig_capable, true);
  EXPECT_EQ(id->virtualization_mode, NVML_GPU_VIRTUALIZATION_MODE_NONE);

  absl::StatusOr<gpu::DeviceSample> first = gpus.Sample(0, absl::Seconds(5));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->profiling.has_value());  // GPM needs a pair
  ASSERT_EQ(first->nvlinks.size(), 18u);
  for (const gpu::NvLinkSample& link : first->nvlinks) {
    EXPECT_TRUE(link.active) << link.link;
    EXPECT_EQ(link.remote_type, NVML_NVLINK_DEVICE_TYPE_SWITCH);
    EXPECT_EQ(link.crc_flit_errors, 0u);
    EXPECT_EQ(link.replay_errors, 0u);
  }
  ASSERT_TRUE(first->nvlink_data_tx_kib.has_value());
  EXPECT_GE(*first->nvlink_data_tx_kib, 50009525452800u);

  absl::StatusOr<gpu::DeviceSample> second = gpus.Sample(0, absl::Seconds(5));
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_TRUE(second->profiling.has_value());
  const gpu::ProfilingSample& p = *second->profiling;
  ASSERT_TRUE(p.sm_active && p.tensor_active && p.fp64_active && p.nvlink_tx_bytes_per_second &&
              p.pcie_rx_bytes_per_second);
  EXPECT_NEAR(*p.sm_active, 0.918, 1e-9);
  EXPECT_NEAR(*p.tensor_active, 0.631, 1e-9);
  EXPECT_NEAR(*p.fp64_active, 0.0, 1e-9);
  EXPECT_NEAR(*p.nvlink_tx_bytes_per_second, 141312.0 * 1024 * 1024, 1);
  EXPECT_NEAR(*p.pcie_rx_bytes_per_second, 640.0 * 1024 * 1024, 1);
  EXPECT_GT(*second->nvlink_data_tx_kib, *first->nvlink_data_tx_kib);
}

TEST_F(NvmlLoaderTest, FindsLibraryInTalosLayoutUnderHostRoot) {
  fs::path dir = tmp_ / "usr/local/glibc/lib";
  fs::create_directories(dir);
  fs::copy_file(GPULET_SIM_LIB, dir / "libnvidia-ml.so.1");
  NvmlLoadResult r = LoadNvml(HostFs(tmp_.string()), NvmlLoadOptions{});
  ASSERT_NE(r.library, nullptr) << r.status;
  if (r.attempts.front().result == gpu::NvmlLoadAttempt::Result::kLoaded) {
    GTEST_SKIP() << "this machine has a real NVML reachable by the loader";
  }
  EXPECT_EQ(r.attempts.back().result, gpu::NvmlLoadAttempt::Result::kLoaded);
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
      EXPECT_EQ(a.result, gpu::NvmlLoadAttempt::Result::kAbsent);
    }
  }
}

}  // namespace
}  // namespace gpulet::nvml
