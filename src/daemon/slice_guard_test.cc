// The over-quota guard's rules, on the injected time with a fake killer (SliceGuardTest):
// when a slice holder over its quota by the driver's count is reported, when its largest
// process is killed, the grace period and the node's hourly budget. And the real killer
// against a child process (ProcessKillerTest), which kills only the process it was told of.
#include "daemon/slice_guard.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/read_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "metrics/sampler.h"
#include "testing/slices.h"

namespace gpulet::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

constexpr uint64_t kMiB = uint64_t{1} << 20;

class FakeKiller : public ProcessKiller {
 public:
  absl::Status Kill(unsigned pid, std::optional<uint64_t> start_ticks) override {
    killed.push_back(pid);
    starts.push_back(start_ticks);
    return result;
  }
  std::vector<unsigned> killed;
  std::vector<std::optional<uint64_t>> starts;
  absl::Status result = absl::OkStatus();
};

using gpulet::testing::OneGpu;

// A 4 GiB slice whose processes hold `driver_mib` each by NVML's count.
metrics::SliceSample Slice(const std::string& name, std::vector<uint64_t> driver_mib) {
  metrics::SliceSample s = gpulet::testing::FourGiBSlice(name);
  s.device.emplace();
  unsigned pid = 100;
  for (uint64_t mib : driver_mib) {
    metrics::SliceDeviceUse::Process p;
    p.pid = ++pid;
    p.name = absl::StrCat("worker", pid);
    p.start_ticks = 1000 + pid;
    p.driver_bytes = mib * kMiB;
    p.library_bytes = mib * kMiB / 2;
    p.in_slice = true;
    s.device->used_bytes += mib * kMiB;
    s.device->processes.push_back(p);
  }
  return s;
}

config::Config::MemorySlices::OverQuota Policy(config::OverQuotaAction action,
                                               int kills_per_hour = 4) {
  config::Config::MemorySlices::OverQuota p;
  p.action = action;
  p.margin_mib = 512;
  p.grace = absl::Seconds(30);
  p.max_kills_per_hour = kills_per_hour;
  return p;
}

std::vector<std::string> Reasons(const std::vector<cluster::NodeEvent>& events) {
  std::vector<std::string> out;
  for (const cluster::NodeEvent& e : events) out.push_back(e.reason);
  return out;
}

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

TEST(SliceGuardTest, EventModeNamesTheLargestProcessOncePerEpisodeAndKillsNothing) {
  FakeKiller killer;
  SliceGuard guard(&killer);
  const config::Config::MemorySlices::OverQuota policy = Policy(config::OverQuotaAction::kEvent);
  // At quota + margin exactly: within bounds.
  EXPECT_THAT(guard.Next({Slice("s", {3000, 1608})}, OneGpu(), nullptr, policy, kT0), IsEmpty());
  std::vector<cluster::NodeEvent> e =
      guard.Next({Slice("s", {3000, 1609})}, OneGpu(), nullptr, policy, kT0);
  ASSERT_THAT(e, SizeIs(1));
  EXPECT_EQ(e[0].type, "Warning");
  EXPECT_EQ(e[0].reason, "GpuVramOverQuota");
  EXPECT_THAT(e[0].note,
              HasSubstr("nvidia.com/gpu-memory GPU-b::mem0 holds 4.50 GiB of GPU 1 (GPU-b) by "
                        "the driver's count (CUDA contexts included), over its 4.00 GiB VRAM "
                        "quota by more than the 512 MiB margin"));
  EXPECT_THAT(e[0].note, HasSubstr("would kill PID 101 (worker101), its largest"));
  // Still over an hour later: the episode was told once, and nothing is killed.
  EXPECT_THAT(
      guard.Next({Slice("s", {3000, 1609})}, OneGpu(), nullptr, policy, kT0 + absl::Hours(1)),
      IsEmpty());
  EXPECT_THAT(killer.killed, IsEmpty());
  // Back within bounds, then over again: a new episode.
  EXPECT_THAT(guard.Next({Slice("s", {3000})}, OneGpu(), nullptr, policy, kT0 + absl::Hours(2)),
              IsEmpty());
  EXPECT_THAT(
      Reasons(guard.Next({Slice("s", {5000})}, OneGpu(), nullptr, policy, kT0 + absl::Hours(3))),
      ElementsAre("GpuVramOverQuota"));
}

TEST(SliceGuardTest, KillModeKillsTheLargestAfterTheGraceAndTheGraceStartsAgain) {
  FakeKiller killer;
  SliceGuard guard(&killer);
  const config::Config::MemorySlices::OverQuota policy = Policy(config::OverQuotaAction::kKill);
  const metrics::SliceSample over = Slice("s", {900, 3900});
  std::vector<cluster::NodeEvent> e = guard.Next({over}, OneGpu(), nullptr, policy, kT0);
  ASSERT_THAT(Reasons(e), ElementsAre("GpuVramOverQuota"));
  EXPECT_THAT(e[0].note, HasSubstr("gpulet kills PID 102 (worker102), its largest, if it stays "
                                   "over for 30s"));
  EXPECT_THAT(guard.Next({over}, OneGpu(), nullptr, policy, kT0 + absl::Seconds(29)), IsEmpty());
  EXPECT_THAT(killer.killed, IsEmpty());
  e = guard.Next({over}, OneGpu(), nullptr, policy, kT0 + absl::Seconds(30));
  ASSERT_THAT(Reasons(e), ElementsAre("GpuVramOverQuotaKilled"));
  EXPECT_THAT(e[0].note, HasSubstr("gpulet killed PID 102 (worker102) of nvidia.com/gpu-memory "
                                   "GPU-b::mem0: it held 3.81 GiB of GPU 1 (GPU-b)"));
  EXPECT_THAT(killer.killed, ElementsAre(102u));
  EXPECT_THAT(killer.starts, ElementsAre(1102u));  // only the process that was sampled
  EXPECT_EQ(guard.kills()->load(), 1u);
  // Still over (the driver has not freed it yet): the grace starts again from the kill.
  EXPECT_THAT(guard.Next({over}, OneGpu(), nullptr, policy, kT0 + absl::Seconds(59)), IsEmpty());
  EXPECT_THAT(Reasons(guard.Next({over}, OneGpu(), nullptr, policy, kT0 + absl::Seconds(60))),
              ElementsAre("GpuVramOverQuotaKilled"));
  EXPECT_EQ(guard.kills()->load(), 2u);
}

TEST(SliceGuardTest, TheHourlyBudgetHoldsAcrossSlicesAndReloads) {
  FakeKiller killer;
  SliceGuard guard(&killer);
  const config::Config::MemorySlices::OverQuota policy = Policy(config::OverQuotaAction::kKill, 1);
  guard.Next({Slice("a", {5000})}, OneGpu(), nullptr, policy, kT0);
  EXPECT_THAT(
      Reasons(guard.Next({Slice("a", {5000})}, OneGpu(), nullptr, policy, kT0 + absl::Seconds(30))),
      ElementsAre("GpuVramOverQuotaKilled"));
  // A reload (a new sampler with its own policy, the same guard) keeps what was spent;
  // another slice over its quota waits for the budget.
  const config::Config::MemorySlices::OverQuota reloaded =
      Policy(config::OverQuotaAction::kKill, 1);
  const std::vector<metrics::SliceSample> both = {Slice("a", {3000}), Slice("b", {6000})};
  EXPECT_THAT(Reasons(guard.Next(both, OneGpu(), nullptr, reloaded, kT0 + absl::Seconds(40))),
              ElementsAre("GpuVramOverQuota"));
  std::vector<cluster::NodeEvent> e =
      guard.Next(both, OneGpu(), nullptr, reloaded, kT0 + absl::Seconds(70));
  ASSERT_THAT(Reasons(e), ElementsAre("GpuVramOverQuotaNotKilled"));
  EXPECT_THAT(e[0].note, HasSubstr("gpulet killed 1 processes in the last hour, which is "
                                   "sharing.memorySlices.overQuota.maxKillsPerHour"));
  EXPECT_THAT(guard.Next(both, OneGpu(), nullptr, reloaded, kT0 + absl::Minutes(30)),
              IsEmpty());  // once
  EXPECT_THAT(killer.killed, SizeIs(1));
  // An hour after the first kill (at 30s) the budget has room again, and not before.
  EXPECT_THAT(guard.Next(both, OneGpu(), nullptr, reloaded, kT0 + absl::Seconds(3629)), IsEmpty());
  EXPECT_THAT(Reasons(guard.Next(both, OneGpu(), nullptr, reloaded, kT0 + absl::Seconds(3630))),
              ElementsAre("GpuVramOverQuotaKilled"));
  EXPECT_THAT(killer.killed, SizeIs(2));
}

TEST(SliceGuardTest, AFailedKillIsToldOnceAndAVanishedProcessNotAtAll) {
  FakeKiller killer;
  SliceGuard guard(&killer);
  const config::Config::MemorySlices::OverQuota policy = Policy(config::OverQuotaAction::kKill);
  const metrics::SliceSample over = Slice("s", {6000});
  guard.Next({over}, OneGpu(), nullptr, policy, kT0);
  killer.result = absl::NotFoundError("PID 101 is gone");
  EXPECT_THAT(guard.Next({over}, OneGpu(), nullptr, policy, kT0 + absl::Seconds(30)), IsEmpty());
  killer.result = absl::PermissionDeniedError("cannot signal PID 101: hostPID");
  std::vector<cluster::NodeEvent> e =
      guard.Next({over}, OneGpu(), nullptr, policy, kT0 + absl::Seconds(31));
  ASSERT_THAT(Reasons(e), ElementsAre("GpuVramOverQuotaNotKilled"));
  EXPECT_THAT(e[0].note, HasSubstr("was not killed: cannot signal PID 101: hostPID"));
  EXPECT_THAT(guard.Next({over}, OneGpu(), nullptr, policy, kT0 + absl::Seconds(32)), IsEmpty());
  EXPECT_EQ(guard.kills()->load(), 0u);
  EXPECT_THAT(killer.killed, SizeIs(3));  // it keeps trying, quietly
}

TEST(SliceGuardTest, AGpuThatDidNotAnswerKeepsTheEpisodeAndAGoneSliceEndsIt) {
  FakeKiller killer;
  SliceGuard guard(&killer);
  const config::Config::MemorySlices::OverQuota policy = Policy(config::OverQuotaAction::kEvent);
  EXPECT_THAT(guard.Next({Slice("s", {6000})}, OneGpu(), nullptr, policy, kT0), SizeIs(1));
  metrics::SliceSample unknown = Slice("s", {});
  unknown.device.reset();
  EXPECT_THAT(guard.Next({unknown}, OneGpu(), nullptr, policy, kT0 + absl::Seconds(1)), IsEmpty());
  EXPECT_THAT(guard.Next({Slice("s", {6000})}, OneGpu(), nullptr, policy, kT0 + absl::Seconds(2)),
              IsEmpty());
  EXPECT_THAT(guard.Next({}, OneGpu(), nullptr, policy, kT0 + absl::Seconds(3)), IsEmpty());
  EXPECT_THAT(guard.Next({Slice("s", {6000})}, OneGpu(), nullptr, policy, kT0 + absl::Seconds(4)),
              SizeIs(1));
}

TEST(SliceGuardTest, OverWithNoProcessListedIsToldAndNothingIsKilled) {
  FakeKiller killer;
  SliceGuard guard(&killer);
  const config::Config::MemorySlices::OverQuota policy = Policy(config::OverQuotaAction::kKill);
  metrics::SliceSample s = Slice("s", {});
  s.device->used_bytes = 6000 * kMiB;  // the library's count alone, no NVML figure
  std::vector<cluster::NodeEvent> e = guard.Next({s}, OneGpu(), nullptr, policy, kT0);
  ASSERT_THAT(e, SizeIs(1));
  EXPECT_THAT(e[0].note, HasSubstr("NVML lists none of its processes with memory"));
  EXPECT_THAT(guard.Next({s}, OneGpu(), nullptr, policy, kT0 + absl::Minutes(5)), IsEmpty());
  EXPECT_THAT(killer.killed, IsEmpty());
}

// The real killer, against a child of this test.
std::optional<uint64_t> StartOf(pid_t pid) {
  absl::StatusOr<std::string> stat =
      ReadRegularFile(absl::StrCat("/proc/", pid, "/stat"), 4096, "stat");
  if (!stat.ok()) return std::nullopt;
  return metrics::ProcStartTicks(*stat);
}

TEST(ProcessKillerTest, KillsOnlyTheProcessThatStartedThen) {
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  std::optional<uint64_t> start = StartOf(child);
  ASSERT_TRUE(start.has_value());
  std::unique_ptr<ProcessKiller> killer = MakeProcessKiller("/");
  const unsigned pid = static_cast<unsigned>(child);
  // Another start time: the PID names another process now; it is left alone.
  EXPECT_EQ(killer->Kill(pid, *start + 1).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(killer->Kill(pid, std::nullopt).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(waitpid(child, nullptr, WNOHANG), 0);  // still running
  ASSERT_TRUE(killer->Kill(pid, start).ok());
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  // Reaped: gone.
  EXPECT_EQ(killer->Kill(pid, start).code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace gpulet::daemon
