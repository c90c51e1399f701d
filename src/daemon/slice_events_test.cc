// The Node events for VRAM slices at their quota: one per rise of a slice's refusal count,
// naming its container; none for what a restarted gpulet finds already counted. And the
// wiring through `gpulet serve` to the API server (DaemonSliceEventsTest).
#include "daemon/slice_events.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/daemon_process.h"
#include "testing/fake_apiserver.h"
#include "testing/files.h"
#include "testing/free_port.h"
#include "testing/homelab.h"
#include "testing/http_clients.h"
#include "testing/slices.h"
#include "testing/subprocess.h"
#include "testing/wait_for.h"
#include "vram/slice_file.h"
#include "vram/slice_table.h"

namespace gpulet::daemon {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

using gpulet::testing::OneGpu;

metrics::SliceSample Slice(const std::string& name, uint64_t refused) {
  metrics::SliceSample s = gpulet::testing::FourGiBSlice(name);
  s.usage.refused = refused;
  return s;
}

TEST(SliceQuotaEventsTest, ARiseInRefusalsIsAWarningNamingTheContainer) {
  SliceQuotaEvents events;
  metrics::PodMap pods;
  pods.ok = true;
  pods.by_gpu["GPU-b"].push_back(
      {{"ml", "anpr-0", "anpr"}, "nvidia.com/gpu-memory", "GPU-b::mem0", ""});
  // Found at gpulet's first round with 5 refusals: reported before it restarted.
  EXPECT_THAT(events.Next({Slice("GPU-b--mem0", 5)}, OneGpu(), &pods), IsEmpty());
  EXPECT_THAT(events.Next({Slice("GPU-b--mem0", 5)}, OneGpu(), &pods), IsEmpty());
  std::vector<cluster::NodeEvent> e = events.Next({Slice("GPU-b--mem0", 8)}, OneGpu(), &pods);
  ASSERT_THAT(e, SizeIs(1));
  EXPECT_EQ(e[0].type, "Warning");
  EXPECT_EQ(e[0].reason, "GpuVramQuotaReached");
  EXPECT_EQ(e[0].count, 3u);
  EXPECT_THAT(e[0].note, HasSubstr("ml/anpr-0/anpr reached its 4.0 GiB VRAM quota on GPU 1 "
                                   "(GPU-b)"));
  // The same words every time, so that the reporter folds repeats into a series.
  EXPECT_EQ(events.Next({Slice("GPU-b--mem0", 9)}, OneGpu(), &pods)[0].note, e[0].note);
}

TEST(SliceQuotaEventsTest, ASliceThatAppearsLaterReportsAllItsRefusals) {
  SliceQuotaEvents events;
  EXPECT_THAT(events.Next({}, OneGpu(), nullptr), IsEmpty());
  std::vector<cluster::NodeEvent> e = events.Next({Slice("claim-u1", 2)}, OneGpu(), nullptr);
  ASSERT_THAT(e, SizeIs(1));
  EXPECT_EQ(e[0].count, 2u);
  EXPECT_THAT(e[0].note, HasSubstr("nvidia.com/gpu-memory GPU-b::mem0 reached"));  // no pod
  // Gone, then allocated again under the same name: counted from its new file's zero.
  EXPECT_THAT(events.Next({}, OneGpu(), nullptr), IsEmpty());
  EXPECT_THAT(events.Next({Slice("claim-u1", 1)}, OneGpu(), nullptr), SizeIs(1));
}

// Starts `server` holding Node talos-08; returns a kubeconfig for it ("" when it cannot start).
std::string ServeNode(gpulet::testing::FakeApiServer& server,
                      const gpulet::testing::ScratchDir& dir) {
  if (!server.Start("serve-token").ok()) return "";
  server.AddNode({{"metadata", {{"name", "talos-08"}, {"uid", "uid-talos-08"}}},
                  {"status", {{"conditions", nlohmann::json::array()}}}});
  return dir.Write("kubeconfig", server.Kubeconfig("serve-token"));
}

// The wiring in `gpulet serve`: a container's allocations refused at its VRAM quota (a slice
// file with refusals, as the enforcement library leaves it) reach the API server as a
// GpuVramQuotaReached Event on the Node, and /metrics counts them.
TEST(DaemonSliceEventsTest, AVramSliceAtItsQuotaMakesAnEventOnTheNode) {
  gpulet::testing::ScratchDir dir;
  gpulet::testing::FakeApiServer server;
  const std::string kubeconfig = ServeNode(server, dir);
  ASSERT_FALSE(kubeconfig.empty());
  const std::string config = dir.Write(
      "config.yaml", absl::StrCat("version: v1\ncluster: {enabled: true, kubeconfig: ", kubeconfig,
                                  "}\nsharing:\n  memorySlices: {enabled: true}\n"));
  const int port = gpulet::testing::FreeLoopbackPort();
  gpulet::testing::DaemonProcess daemon;
  ASSERT_TRUE(
      daemon.Start({gpulet::testing::GpuletBinary(), "--simulate", "homelab", "--sim-state",
                    dir.path() + "/state.json", "serve", "--config", config, "--kubelet-dir",
                    dir.path() + "/kubelet", "--metrics-address", absl::StrCat("127.0.0.1:", port)},
                   {{"NODE_NAME", "talos-08"}, {"TMPDIR", dir.path()}}, dir.path() + "/log"));
  // A simulation keeps slice files under $TMPDIR, in a directory named after its PID.
  ASSERT_NE(gpulet::testing::WaitFor([&] {
              return gpulet::testing::Get(port, "/metrics", absl::Seconds(1)).has_value();
            }),
            absl::InfiniteDuration())
      << daemon.Log();
  const std::string root = absl::StrCat(dir.path(), "/gpulet-sim-slices-", daemon.pid());
  const std::string slices = root + "/var/lib/gpulet/vram";
  ASSERT_TRUE(vram::WriteSliceFile(slices, "GPU-test--mem0", uint64_t{4} << 30,
                                   gpulet::testing::kRtx5090, "nvidia.com/gpu-memory test")
                  .ok());
  vram::SliceMap map;
  char msg[512];
  const std::string slice = slices + "/GPU-test--mem0/slice";
  ASSERT_EQ(vram::OpenSlice(slice.c_str(), true, &map, msg, sizeof(msg)), vram::SliceError::kOk)
      << msg;
  uint32_t slot = 0;
  ASSERT_EQ(vram::ClaimSlot(&map, 1, &slot), vram::SliceError::kOk);
  EXPECT_FALSE(vram::Reserve(&map, slot, uint64_t{8} << 30).granted);
  vram::CloseSlice(&map);
  ASSERT_NE(gpulet::testing::WaitFor(
                [&] { return !server.EventsWithReason("GpuVramQuotaReached").empty(); }),
            absl::InfiniteDuration())
      << daemon.Log();
  nlohmann::json e = server.EventsWithReason("GpuVramQuotaReached")[0];
  EXPECT_EQ(e["type"], "Warning");
  EXPECT_THAT(e["note"].get<std::string>(), HasSubstr("reached its 4.0 GiB VRAM quota on GPU 1"));
  std::optional<gpulet::testing::HttpResponse> metrics =
      gpulet::testing::Get(port, "/metrics", absl::Seconds(2));
  ASSERT_TRUE(metrics.has_value());
  EXPECT_THAT(metrics->body, HasSubstr("gpulet_vram_refused_total{gpu=\"1\""));
  // Both GPUs serve slices, held by the library gpulet found beside itself.
  EXPECT_THAT(
      metrics->body,
      HasSubstr(absl::StrCat("gpulet_vram_enforcement{gpu=\"1\",uuid=\"", gpulet::testing::kRtx5090,
                             "\",hostname=\"talos-08\",holder=\"library\"} 1\n")));
  daemon.Stop(SIGTERM, absl::Seconds(10));
  server.Stop();
}

// The driver's count through `gpulet serve`, with this machine's /proc as the host's and the
// simulator's GPUs: a process held by a 4 GiB slice that NVML shows at 6 GiB on the card (its
// context and more, none of which the library saw) is killed under overQuota.action kill,
// and the Events and the kill count reach the API server and /metrics.
TEST(DaemonSliceEventsTest, AProcessOverItsQuotaByTheDriversCountIsKilled) {
  gpulet::testing::ScratchDir dir;
  gpulet::testing::FakeApiServer server;
  const std::string kubeconfig = ServeNode(server, dir);
  ASSERT_FALSE(kubeconfig.empty());
  const std::string vram_dir = dir.path() + "/vram";
  // Nothing written to this machine's own paths: no CDI spec, labels or XID history.
  const std::string config = dir.Write(
      "config.yaml",
      absl::StrCat("version: v1\ncluster: {enabled: true, kubeconfig: ", kubeconfig,
                   "}\ncdi: {specDir: ''}\nlabels: {featuresFile: ''}\n"
                   "health: {kmsg: false, xidHistoryFile: ''}\nsharing:\n  memorySlices:\n"
                   "    enabled: true\n    hostDir: ",
                   vram_dir, "\n    overQuota: {action: kill, marginMiB: 512, grace: 0s}\n"));
  ASSERT_TRUE(vram::WriteSliceFile(vram_dir, "GPU-test--mem0", uint64_t{4} << 30,
                                   gpulet::testing::kRtx5090, "nvidia.com/gpu-memory test")
                  .ok());
  // A process of the slice: it holds its slot (and 1 GiB by the library's count) until killed.
  const std::string slice = vram_dir + "/GPU-test--mem0/slice";
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(ready[0]);
    vram::SliceMap map;
    char msg[256];
    uint32_t slot = 0;
    if (vram::OpenSlice(slice.c_str(), true, &map, msg, sizeof(msg)) != vram::SliceError::kOk ||
        vram::ClaimSlot(&map, getpid(), &slot) != vram::SliceError::kOk ||
        !vram::Reserve(&map, slot, uint64_t{1} << 30).granted) {
      _exit(1);
    }
    vram::Settle(&map, slot, uint64_t{1} << 30, uint64_t{1} << 30);
    char c = 'r';
    if (write(ready[1], &c, 1) != 1) _exit(2);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1) << "the slice's process did not start";
  close(ready[0]);
  // NVML shows it holding 6 GiB of the RTX 5090 (GPU 1).
  const std::string state = dir.path() + "/state.json";
  gpulet::testing::RunResult r = gpulet::testing::RunProgram(
      {gpulet::testing::GpuletBinary(), "--simulate", "homelab", "--sim-state", state, "sim",
       "process", "1", absl::StrCat(child), "anpr", "6144"});
  ASSERT_EQ(r.exit_code, 0) << r.err;

  const int port = gpulet::testing::FreeLoopbackPort();
  gpulet::testing::DaemonProcess daemon;
  ASSERT_TRUE(
      daemon.Start({gpulet::testing::GpuletBinary(), "--simulate", "homelab", "--host-root", "/",
                    "--sim-state", state, "serve", "--config", config, "--kubelet-dir",
                    dir.path() + "/kubelet", "--metrics-address", absl::StrCat("127.0.0.1:", port)},
                   {{"NODE_NAME", "talos-08"}, {"TMPDIR", dir.path()}}, dir.path() + "/log"));
  int status = 0;
  const bool killed = gpulet::testing::WaitFor([&] {
                        return waitpid(child, &status, WNOHANG) == child;
                      }) != absl::InfiniteDuration();
  if (!killed) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
  }
  ASSERT_TRUE(killed) << daemon.Log();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  ASSERT_NE(gpulet::testing::WaitFor(
                [&] { return !server.EventsWithReason("GpuVramOverQuotaKilled").empty(); }),
            absl::InfiniteDuration())
      << daemon.Log();
  ASSERT_FALSE(server.EventsWithReason("GpuVramOverQuota").empty());
  EXPECT_THAT(server.EventsWithReason("GpuVramOverQuota")[0]["note"].get<std::string>(),
              HasSubstr("holds 6.00 GiB of GPU 1 (" + std::string(gpulet::testing::kRtx5090) +
                        ") by the driver's count"));
  EXPECT_THAT(server.EventsWithReason("GpuVramOverQuotaKilled")[0]["note"].get<std::string>(),
              HasSubstr(absl::StrCat("gpulet killed PID ", child)));
  std::optional<gpulet::testing::HttpResponse> metrics =
      gpulet::testing::Get(port, "/metrics", absl::Seconds(2));
  ASSERT_TRUE(metrics.has_value());
  EXPECT_THAT(metrics->body, HasSubstr("gpulet_vram_over_quota_kills_total{} 1\n"));
  daemon.Stop(SIGTERM, absl::Seconds(10));
  server.Stop();
}

}  // namespace
}  // namespace gpulet::daemon
