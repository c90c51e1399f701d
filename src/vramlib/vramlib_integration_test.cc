// The VRAM enforcement library (libgpulet-vram.so) loaded by the real dynamic loader into
// test applications built like real frameworks (tests/vram/vram_app.c), against the CUDA
// driver stand-in (tests/vram/standin_cuda.c): every way of reaching the driver is held to
// the quota, the quota is shared by a slice's processes and survives their deaths, and a
// bad slice file fails closed. The same applications run against the real driver in
// tests/vram/device_check.sh.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nvml/elf_check.h"
#include "testing/files.h"
#include "testing/subprocess.h"
#include "testing/wait_for.h"
#include "vram/compute_share.h"
#include "vram/slice_file.h"
#include "vram/slice_format.h"

extern char** environ;

namespace gpulet::vramlib {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kMiB = 1ull << 20;

std::map<std::string, std::string> Fields(const std::string& out) {
  std::map<std::string, std::string> f;
  for (absl::string_view token : absl::StrSplit(out, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
    std::vector<std::string> kv = absl::StrSplit(token, absl::MaxSplits('=', 1));
    if (kv.size() == 2) f[kv[0]] = kv[1];
  }
  return f;
}

int64_t Num(const std::map<std::string, std::string>& f, const std::string& key) {
  auto it = f.find(key);
  int64_t v = -1;
  if (it == f.end() || !absl::SimpleAtoi(it->second, &v)) return -1;
  return v;
}

// A process started in the background, its stdout read line by line.
class Background {
 public:
  Background(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
    std::vector<std::string> envs;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string kv = *e;
      if (!env.count(kv.substr(0, kv.find('=')))) envs.push_back(kv);
    }
    for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
    std::vector<char*> args, envp;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    for (const std::string& e : envs) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    int fds[2];
    EXPECT_EQ(pipe2(fds, O_CLOEXEC), 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    EXPECT_EQ(posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), envp.data()), 0);
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    fd_ = fds[0];
  }
  ~Background() {
    Kill();
    close(fd_);
  }
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;

  // The first line of output (waits up to 20 s for it).
  std::string Line() {
    std::string line;
    char c;
    testing::WaitFor([&] {
      fd_set set;
      FD_ZERO(&set);
      FD_SET(fd_, &set);
      timeval tv{0, 10000};
      while (select(fd_ + 1, &set, nullptr, nullptr, &tv) > 0 && read(fd_, &c, 1) == 1) {
        if (c == '\n') return true;
        line += c;
        tv = {0, 0};
      }
      return false;
    });
    return line;
  }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
};

class VramLibTest : public ::testing::Test {
 protected:
  // A 16 GiB card.
  void SetUp() override { card_ = dir_.path() + "/card"; }

  // A slice of `quota_mib` in its own allocation directory; returns the slice file's path.
  std::string Slice(uint64_t quota_mib, const std::string& name = "GPU-standin--mem0") {
    EXPECT_TRUE(
        vram::WriteSliceFile(dir_.path(), name, quota_mib * kMiB, "GPU-standin", "pod-uid/ctr")
            .ok());
    return absl::StrCat(dir_.path(), "/", name, "/", vram::kSliceFileName);
  }

  std::map<std::string, std::string> Env(const std::string& slice, bool with_library = true,
                                         const std::string& lib_dir = GPULET_VRAM_TEST_DIR) {
    std::map<std::string, std::string> env = {
        {"LD_LIBRARY_PATH", lib_dir},
        {"GPULET_CUDA_STANDIN_STATE", card_},
        {"GPULET_CUDA_STANDIN_TOTAL_MIB", absl::StrCat(card_mib_)},
    };
    if (with_library) {
      env["LD_AUDIT"] = GPULET_VRAM_LIB;
      env[vram::kSliceEnv] = slice;
    }
    return env;
  }

  testing::RunResult App(const std::vector<std::string>& args,
                         const std::map<std::string, std::string>& env,
                         const std::string& binary = "vram_app") {
    std::vector<std::string> argv = {absl::StrCat(GPULET_VRAM_TEST_DIR, "/", binary)};
    argv.insert(argv.end(), args.begin(), args.end());
    return testing::RunProgram(argv, env);
  }

  std::vector<std::string> Argv(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {absl::StrCat(GPULET_VRAM_TEST_DIR, "/vram_app")};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }

  // The card's use as the stand-in driver counts it (NVML without the library).
  int64_t CardUsedMib() {
    testing::RunResult r = App({"nvml"}, Env("", false));
    return Num(Fields(r.out), "nvml_used_mib");
  }

  testing::ScratchDir dir_;
  std::string card_;
  uint64_t card_mib_ = 16384;
};

TEST_F(VramLibTest, TheStaticRuntimeSeesItsQuotaAndIsRefusedPastIt) {
  std::string slice = Slice(8192);
  // Control: without the library the application takes the whole card.
  testing::RunResult r = App({"fill", "proc", "1024"}, Env(slice, false));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Num(Fields(r.out), "allocated_mib"), 16384) << r.out;

  r = App({"fill", "proc", "1024"}, Env(slice));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto f = Fields(r.out);
  EXPECT_EQ(Num(f, "total_mib"), 8192) << r.out;
  EXPECT_EQ(Num(f, "free_mib"), 8192);
  EXPECT_EQ(Num(f, "device_total_mib"), 8192);
  EXPECT_EQ(Num(f, "allocated_mib"), 8192);
  EXPECT_EQ(Num(f, "last_rc"), 2);  // CUDA_ERROR_OUT_OF_MEMORY
  EXPECT_EQ(Num(f, "free_errors"), 0);
  EXPECT_EQ(Num(f, "free_after_mib"), 8192);  // every free gave its memory back
  EXPECT_THAT(r.err, HasSubstr("refused with CUDA_ERROR_OUT_OF_MEMORY: the slice uses 8.00 GiB "
                               "of its 8.00 GiB quota"));
  EXPECT_THAT(r.err, HasSubstr(slice));
}

TEST_F(VramLibTest, EveryWayOfReachingTheDriverIsHeld) {
  std::string slice = Slice(8192);
  struct Case {
    std::string how, binary, lib_dir;
  };
  for (const Case& c : std::vector<Case>{
           {"dlsym", "vram_app", GPULET_VRAM_TEST_DIR},
           {"next", "vram_app", GPULET_VRAM_TEST_DIR},
           {"ptds", "vram_app", GPULET_VRAM_TEST_DIR},
           {"dlvsym", "vram_app", absl::StrCat(GPULET_VRAM_TEST_DIR, "/versioned")},
           {"direct", "vram_app_direct", GPULET_VRAM_TEST_DIR},
           {"direct", "vram_app_direct_now", GPULET_VRAM_TEST_DIR},
       }) {
    SCOPED_TRACE(c.how + " " + c.binary);
    testing::RunResult r = App({"fill", c.how, "1024"}, Env(slice, true, c.lib_dir), c.binary);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto f = Fields(r.out);
    EXPECT_EQ(Num(f, "total_mib"), 8192) << r.out;
    EXPECT_EQ(Num(f, "allocated_mib"), 8192);
    EXPECT_EQ(Num(f, "last_rc"), 2);
    EXPECT_EQ(Num(f, "free_after_mib"), 8192);
  }
}

TEST_F(VramLibTest, TheThirtyTwoBitAbiIsHeld) {
  std::string slice = Slice(512);
  testing::RunResult r = App({"fill", "v1", "64"}, Env(slice));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto f = Fields(r.out);
  EXPECT_EQ(Num(f, "allocated_mib"), 512) << r.out;
  EXPECT_EQ(Num(f, "free_errors"), 0);
  EXPECT_EQ(Num(f, "free_after_mib"), 512);
}

TEST_F(VramLibTest, AnEntryPointTheLibraryDoesNotKnowIsForwardedUntouched) {
  // A driver returns a variant newer than the library for cudaVersion 13000: it works (the
  // whole card), is not counted, and GPULET_VRAM_LOG=2 says so.
  std::string slice = Slice(8192);
  auto env = Env(slice);
  env["GPULET_VRAM_LOG"] = "2";
  testing::RunResult r = App({"fill", "future", "1024"}, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Num(Fields(r.out), "allocated_mib"), 16384) << r.out;
  EXPECT_THAT(r.err, HasSubstr("cuGetProcAddress(\"cuMemAlloc\") returned an ABI variant this "
                               "library does not know; it is forwarded untouched"));
}

TEST_F(VramLibTest, GgmlsVirtualMemoryPoolIsHeldAndHostMemoryIsNot) {
  std::string slice = Slice(8192);
  testing::RunResult r = App({"ggml", "512"}, Env(slice));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto f = Fields(r.out);
  EXPECT_EQ(Num(f, "allocated_mib"), 8192) << r.out;
  EXPECT_EQ(Num(f, "last_rc"), 2);
  EXPECT_EQ(Num(f, "host_rc"), 0);  // a host-located cuMemCreate is not VRAM
  EXPECT_EQ(Num(f, "free_after_mib"), 8192);
}

TEST_F(VramLibTest, ACachingAllocatorSizesItselfToTheQuota) {
  std::string slice = Slice(8192);
  testing::RunResult r = App({"torch"}, Env(slice));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto f = Fields(r.out);
  EXPECT_EQ(Num(f, "total_mib"), 8192) << r.out;
  EXPECT_EQ(Num(f, "free_mib"), 8192);
  EXPECT_GE(Num(f, "held_mib"), 8190);
  EXPECT_LE(Num(f, "held_mib"), 8192);
  EXPECT_EQ(Num(f, "free_after_mib"), 8192);
}

TEST_F(VramLibTest, EveryAllocationPathIsRefusedPastTheQuotaCountedAndGivenBack) {
  std::string slice = Slice(4096);
  testing::RunResult r = App({"paths", "4096"}, Env(slice));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto f = Fields(r.out);
  for (const char* path : {"cuMemAlloc", "cuMemAllocManaged", "cuMemAllocPitch", "cuMemAllocAsync",
                           "cuMemAllocFromPoolAsync", "cuMemCreate", "cuArrayCreate",
                           "cuArray3DCreate", "cuMipmappedArrayCreate", "cuImportExternalMemory"}) {
    // refused (2) / allocated (0) / MiB counted / given back
    EXPECT_EQ(f[path], "2/0/64/1") << path << " in " << r.out;
  }
}

TEST_F(VramLibTest, ForkedWorkersShareTheQuotaAndGiveTheirMemoryBack) {
  std::string slice = Slice(8192);
  // Twelve workers in turn take 1 GiB each of an 8 GiB slice: each exits, and its memory
  // comes back.
  testing::RunResult r = App({"fork", "12", "1024"}, Env(slice));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto f = Fields(r.out);
  EXPECT_EQ(Num(f, "ok"), 12) << r.out;
  EXPECT_EQ(Num(f, "oom"), 0);
  EXPECT_EQ(Num(f, "parent_rc"), 0);
  // Workers that take more than the slice has left are refused.
  r = App({"fork", "2", "6144"}, Env(slice));
  EXPECT_EQ(Num(Fields(r.out), "ok"), 2) << r.out;  // one after the other: each fits alone
}

TEST_F(VramLibTest, TwoContainersOnOneCardEachReachTheirLimitAndNoFurther) {
  std::string a = Slice(8192, "GPU-standin--mem0");
  std::string b = Slice(4096, "GPU-standin--mem8");
  Background first(Argv({"hold", "100000", "512"}), Env(a));
  Background second(Argv({"hold", "100000", "512"}), Env(b));
  EXPECT_EQ(first.Line(), "ready allocated_mib=8192");
  EXPECT_EQ(second.Line(), "ready allocated_mib=4096");
  EXPECT_EQ(CardUsedMib(), 12288);
  // A second process in the first container finds its slice full.
  testing::RunResult r = App({"fill", "proc", "512"}, Env(a));
  EXPECT_EQ(Num(Fields(r.out), "allocated_mib"), 0) << r.out;
  EXPECT_EQ(Num(Fields(r.out), "free_mib"), 0);
}

// Each container has its own PID namespace, in which its first process is PID 1: two
// processes of one slice, each in a namespace of its own, share the quota; the daemon (in the
// host's namespace) sees each one's host PID and use, never the 1 they see themselves; and
// one that dies gives its memory back to a third, in a third namespace. (The slice's slots
// are claimed by a lock, whose owner the kernel names in the reader's namespace.)
TEST_F(VramLibTest, ProcessesInTheirOwnPidNamespacesShareTheQuota) {
  if (geteuid() != 0) GTEST_SKIP() << "a new PID namespace needs root (CAP_SYS_ADMIN)";
  const std::string slice = Slice(8192);
  // unshare runs without the library; `env` puts it into the application only.
  auto in_namespace = [&](const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"/usr/bin/unshare",
                                     "--pid",
                                     "--fork",
                                     "--kill-child",
                                     "/usr/bin/env",
                                     absl::StrCat("LD_AUDIT=", GPULET_VRAM_LIB),
                                     absl::StrCat(vram::kSliceEnv, "=", slice)};
    std::vector<std::string> app = Argv(args);
    argv.insert(argv.end(), app.begin(), app.end());
    return argv;
  };
  Background first(in_namespace({"hold", "3072", "512"}), Env(slice, false));
  ASSERT_EQ(first.Line(), "ready allocated_mib=3072");
  Background second(in_namespace({"hold", "100000", "512"}), Env(slice, false));
  ASSERT_EQ(second.Line(), "ready allocated_mib=5120");  // the rest of the quota, no more

  absl::StatusOr<vram::SliceUsage> u = vram::ReadSliceUsage(slice);
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->in_use_bytes, 8192 * kMiB);
  ASSERT_EQ(u->processes.size(), 2u);
  std::map<uint64_t, int32_t> pid_by_use;
  for (const vram::SliceUsage::Process& p : u->processes) pid_by_use[p.used_bytes] = p.pid;
  ASSERT_TRUE(pid_by_use.count(3072 * kMiB) && pid_by_use.count(5120 * kMiB))
      << u->processes.size();
  for (auto [use, pid] : pid_by_use) {
    EXPECT_GT(pid, 1) << "a PID seen from inside the namespace";
    // The host PID of a process that is PID 1 in its own namespace: /proc says both.
    const std::string status = testing::ReadTextFile(absl::StrCat("/proc/", pid, "/status"));
    EXPECT_THAT(status, HasSubstr(absl::StrCat("NSpid:\t", pid, "\t1\n"))) << status;
  }

  // SIGKILL to unshare, whose child dies of it (--kill-child) after unshare has been reaped:
  // wait for the child itself, so that its slot's lock is gone before the third looks.
  const int32_t first_pid = pid_by_use[3072 * kMiB];
  const int first_fd = static_cast<int>(syscall(SYS_pidfd_open, first_pid, 0));
  ASSERT_GE(first_fd, 0) << "pidfd_open(" << first_pid << "): " << strerror(errno);
  first.Kill();
  pollfd exited{first_fd, POLLIN, 0};
  EXPECT_EQ(poll(&exited, 1, 20000), 1)
      << "PID " << first_pid << " still runs 20 s after unshare died";
  close(first_fd);
  Background third(in_namespace({"hold", "100000", "512"}), Env(slice, false));
  EXPECT_EQ(third.Line(), "ready allocated_mib=3072");
}

TEST_F(VramLibTest, NvmlInsideTheContainerReportsTheQuota) {
  std::string slice = Slice(8192);
  testing::RunResult r = App({"nvml"}, Env(slice));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto f = Fields(r.out);
  EXPECT_EQ(Num(f, "nvml_total_mib"), 8192) << r.out;
  EXPECT_EQ(Num(f, "nvml_free_mib"), 8192);
  EXPECT_EQ(Num(f, "nvml2_total_mib"), 8192);
  EXPECT_EQ(Num(f, "nvml2_free_mib"), 8192);
  Background holder(Argv({"hold", "2048", "1024"}), Env(slice));
  EXPECT_EQ(holder.Line(), "ready allocated_mib=2048");
  f = Fields(App({"nvml"}, Env(slice)).out);
  EXPECT_EQ(Num(f, "nvml_free_mib"), 6144);
  EXPECT_EQ(Num(f, "nvml_used_mib"), 2048);
  EXPECT_EQ(Num(f, "nvml2_free_mib"), 6144);
}

TEST_F(VramLibTest, FreeIsNeverAboveTheCardsRealFreeMemory) {
  // A 12 GiB quota on a card where another (unsliced) process holds 10 GiB: 6 GiB free.
  std::string slice = Slice(12288);
  Background other(Argv({"hold", "10240", "1024"}), Env(slice, false));
  EXPECT_EQ(other.Line(), "ready allocated_mib=10240");
  auto f = Fields(App({"fill", "proc", "1024"}, Env(slice)).out);
  EXPECT_EQ(Num(f, "total_mib"), 12288);
  EXPECT_EQ(Num(f, "free_mib"), 6144);
  EXPECT_EQ(Num(f, "allocated_mib"), 6144);  // the driver's own OOM, passed through
}

TEST_F(VramLibTest, AProcessKilledInTheMiddleOfAnAllocationGivesItBack) {
  std::string slice = Slice(4096);
  auto slow = Env(slice);
  slow["GPULET_CUDA_STANDIN_ALLOC_DELAY_MS"] = "60000";
  Background victim(Argv({"hold", "4096", "4096"}), slow);
  // The grant is taken before the driver's call, which now sleeps.
  ASSERT_NE(testing::WaitFor([&] {
              absl::StatusOr<vram::SliceUsage> u = vram::ReadSliceUsage(slice);
              return u.ok() && u->in_use_bytes == 4096 * kMiB;
            }),
            absl::InfiniteDuration());
  victim.Kill();
  testing::RunResult r = App({"fill", "proc", "1024"}, Env(slice));
  EXPECT_EQ(Num(Fields(r.out), "allocated_mib"), 4096) << r.out << r.err;
  absl::StatusOr<vram::SliceUsage> u = vram::ReadSliceUsage(slice);
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->in_use_bytes, 0u);
}

TEST_F(VramLibTest, ThirtyTwoProcessesAllocatingAtOnceFillTheSliceExactly) {
  card_mib_ = 65536;
  std::string slice = Slice(8192);
  std::vector<std::unique_ptr<Background>> procs;
  for (int i = 0; i < 32; ++i) {
    procs.push_back(std::make_unique<Background>(Argv({"race", "64"}), Env(slice)));
  }
  int64_t sum = 0;
  for (auto& p : procs) {
    std::string line = p->Line();
    ASSERT_THAT(line, HasSubstr("ready")) << "process " << p->pid();
    sum += Num(Fields(line), "allocated_mib");
  }
  EXPECT_EQ(sum, 8192);  // nothing lost, nothing counted twice
  absl::StatusOr<vram::SliceUsage> u = vram::ReadSliceUsage(slice);
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->in_use_bytes, 8192 * kMiB);  // the library's sum
  EXPECT_EQ(u->processes.size(), 32u);
  EXPECT_EQ(CardUsedMib(), 8192);  // the driver's own count
  EXPECT_EQ(u->peak_bytes, 8192 * kMiB);
  EXPECT_GE(u->refused, 32u);
}

TEST_F(VramLibTest, ABadSliceFileFailsClosedNamingIt) {
  struct Case {
    std::string name, content, message;
  };
  std::string good = Slice(1024);
  std::string newer = testing::ReadTextFile(good);
  newer[8] = 2;  // major version 2
  std::string zero_quota = testing::ReadTextFile(good);
  std::memset(zero_quota.data() + 32, 0, 8);
  for (const Case& c : std::vector<Case>{
           {"garbage", std::string(vram::kSliceFileSize, 'x'), "is not a gpulet slice file"},
           {"truncated", testing::ReadTextFile(good).substr(0, 100), "is truncated"},
           {"newer", newer,
            absl::StrCat("newer than this library's ", vram::kSliceFormatMajor, ".",
                         vram::kSliceFormatMinor)},
           {"zero", zero_quota, "holds no quota"},
           {"missing", "", "cannot open slice file"},
       }) {
    SCOPED_TRACE(c.name);
    std::string path = dir_.path() + "/bad-" + c.name;
    if (c.name != "missing") dir_.Write("bad-" + c.name, c.content);
    testing::RunResult r = App({"fill", "proc", "64"}, Env(path));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto f = Fields(r.out);
    EXPECT_EQ(Num(f, "allocated_mib"), 0) << r.out;
    EXPECT_EQ(Num(f, "total_mib"), 0);
    EXPECT_THAT(r.err, HasSubstr(path));
    EXPECT_THAT(r.err, HasSubstr(c.message));
    EXPECT_THAT(r.err, HasSubstr("fail closed"));
  }
  // No variable at all.
  auto env = Env("");
  env.erase(vram::kSliceEnv);
  testing::RunResult r = App({"fill", "proc", "64"}, env);
  EXPECT_EQ(Num(Fields(r.out), "allocated_mib"), 0);
  EXPECT_THAT(r.err, HasSubstr("GPULET_VRAM_SLICE is not set"));
}

TEST_F(VramLibTest, ANewerMinorVersionIsRead) {
  std::string slice = Slice(2048);
  std::string content = testing::ReadTextFile(slice);
  content[12] = 7;  // minor 7: fields appended that this library does not know
  dir_.Write("minor/slice", content);
  testing::RunResult r = App({"fill", "proc", "1024"}, Env(dir_.path() + "/minor/slice"));
  EXPECT_EQ(Num(Fields(r.out), "allocated_mib"), 2048) << r.out << r.err;
}

TEST_F(VramLibTest, AnImagesOwnPreloadStillLoads) {
  std::string slice = Slice(2048);
  auto env = Env(slice);
  env["LD_PRELOAD"] = absl::StrCat(GPULET_VRAM_TEST_DIR, "/libpreload-marker.so");
  testing::RunResult r = App({"fill", "proc", "1024"}, env);
  EXPECT_THAT(r.err, HasSubstr("preload-marker loaded"));
  EXPECT_EQ(Num(Fields(r.out), "allocated_mib"), 2048) << r.out;
}

// ---- the compute share ---------------------------------------------------------------------

TEST_F(VramLibTest, WithoutAComputeShareLaunchesGoStraightToTheDriver) {
  testing::RunResult r = App({"compute", "0.05", "1"}, Env(Slice(4096)));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Num(Fields(r.out), "wrapped"), 0) << r.out;
  EXPECT_GT(Num(Fields(r.out), "launches"), 0) << r.out;
}

// The stand-in card's per-process SM time (tests/vram/standin_card.h's layout), as NVML's
// per-process smUtil would report it to gpulet.
class CardBusy {
 public:
  explicit CardBusy(const std::string& path) {
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    void* p = mmap(nullptr, sizeof(Entry) * kProcs, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p != MAP_FAILED) entries_ = static_cast<const Entry*>(p);
  }
  ~CardBusy() {
    if (entries_ != nullptr) munmap(const_cast<Entry*>(entries_), sizeof(Entry) * kProcs);
  }
  CardBusy(const CardBusy&) = delete;
  CardBusy& operator=(const CardBusy&) = delete;

  uint64_t BusyNs(pid_t pid) const {
    for (int i = 0; entries_ != nullptr && i < kProcs; ++i) {
      if (entries_[i].pid == pid) return __atomic_load_n(&entries_[i].busy_ns, __ATOMIC_RELAXED);
    }
    return 0;
  }

 private:
  struct Entry {
    int32_t pid;
    uint32_t pad;
    uint64_t bytes, busy_ns;
  };
  static constexpr int kProcs = 4096;
  const Entry* entries_ = nullptr;
};

// gpulet's side of the loop, every 200 ms as a sampling round: the holder's SM time (here
// from the stand-in card, in gpulet from NVML) and the units its processes launched (the
// slice file) make the next launch rate (vram/compute_share.h). Two holders with a quarter
// and a half of the card, each launching as fast as the card takes its kernels, settle at
// their shares; the figures are printed for the note.
TEST_F(VramLibTest, AComputeShareHoldsEachHolderToItsShareOfSmTime) {
  struct Holder {
    double share;
    std::string slice;
    std::unique_ptr<Background> app;
    vram::ComputeShareRule rule;
    uint64_t units = 0, busy = 0, busy_at_settle = 0;
  };
  std::vector<Holder> holders(2);
  holders[0].share = 0.25;
  holders[1].share = 0.5;
  for (size_t i = 0; i < holders.size(); ++i) {
    Holder& h = holders[i];
    const std::string name = absl::StrCat("GPU-standin--mem", i * 8);
    ASSERT_TRUE(vram::WriteSliceFile(dir_.path(), name, 4096 * kMiB, "GPU-standin", "pod/ctr",
                                     static_cast<uint32_t>(h.share * 1000))
                    .ok());
    h.slice = absl::StrCat(dir_.path(), "/", name, "/", vram::kSliceFileName);
    std::map<std::string, std::string> env = Env(h.slice);
    env["GPULET_CUDA_STANDIN_NS_PER_BLOCK"] = "1000";  // 100 blocks: a 100 µs kernel
    h.app = std::make_unique<Background>(Argv({"compute", "4", "100"}), env);
  }
  for (Holder& h : holders) ASSERT_EQ(h.app->Line(), "ready");
  CardBusy card(card_);
  const auto round = std::chrono::milliseconds(200);
  auto last = std::chrono::steady_clock::now();
  for (int r = 0; r < 18; ++r) {
    std::this_thread::sleep_for(round);
    const auto now = std::chrono::steady_clock::now();
    const double seconds = std::chrono::duration<double>(now - last).count();
    last = now;
    for (Holder& h : holders) {
      absl::StatusOr<vram::SliceUsage> u = vram::ReadSliceUsage(h.slice);
      ASSERT_TRUE(u.ok()) << u.status();
      const uint64_t busy = card.BusyNs(h.app->pid());
      vram::ComputeRound cr;
      cr.share = h.share;
      cr.measured = true;
      cr.sm_busy = static_cast<double>(busy - h.busy) / 1e9 / seconds;
      cr.units = u->compute.launch_units - h.units;
      cr.seconds = seconds;
      h.busy = busy;
      h.units = u->compute.launch_units;
      ASSERT_TRUE(vram::SetSliceLaunchRate(h.slice, h.rule.Next(cr)).ok());
      if (r == 9) h.busy_at_settle = busy;
    }
  }
  // The last eight rounds (1.6 s), after ten to settle.
  for (Holder& h : holders) {
    const double achieved = static_cast<double>(h.busy - h.busy_at_settle) / 1.6e9;
    std::printf("compute share %.2f: SM time %.3f of the card, launch rate %llu blocks/s\n",
                h.share, achieved, static_cast<unsigned long long>(h.rule.rate()));
    EXPECT_NEAR(achieved, h.share, 0.05) << "share " << h.share;
    absl::StatusOr<vram::SliceUsage> u = vram::ReadSliceUsage(h.slice);
    ASSERT_TRUE(u.ok());
    EXPECT_EQ(u->compute.share_permille, static_cast<uint32_t>(h.share * 1000));
    EXPECT_GT(u->compute.launch_waits, 0u);
    EXPECT_EQ(Num(Fields(h.app->Line()), "wrapped"), 1);
  }
}

TEST(VramLibraryTest, NeedsOnlyLibcAndAnOldGlibc) {
  absl::StatusOr<nvml::ElfInfo> info = nvml::ReadElfInfo(GPULET_VRAM_LIB);
  ASSERT_TRUE(info.ok()) << info.status();
  for (const std::string& n : info->needed) {
    EXPECT_TRUE(n == "libc.so.6" || n == "libdl.so.2") << n;
  }
  for (const nvml::VersionNeed& need : info->version_needs) {
    for (const std::string& v : need.versions) {
      EXPECT_THAT(v, Not(HasSubstr("GLIBCXX"))) << need.file;
      // The oldest glibc CUDA supports is 2.17; x86_64's baseline is 2.2.5.
      int major = 0, minor = 0;
      ASSERT_EQ(sscanf(v.c_str(), "GLIBC_%d.%d", &major, &minor), 2) << v;
      EXPECT_TRUE(major == 2 && minor <= 17) << v << " from " << need.file;
    }
  }
}

}  // namespace
}  // namespace gpulet::vramlib
