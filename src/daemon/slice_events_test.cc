// The Node events for VRAM slices at their quota: one per rise of a slice's refusal count,
// naming its container; none for what a restarted gpulet finds already counted. And the
// wiring through `gpulet serve` to the API server (DaemonSliceEventsTest).
#include "daemon/slice_events.h"

#include <signal.h>

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
#include "testing/wait_for.h"
#include "vram/slice_file.h"
#include "vram/slice_table.h"

namespace gpulet {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

SliceSample Slice(const std::string& name, uint64_t refused) {
  SliceSample s;
  s.name = name;
  s.usage.gpu_uuid = "GPU-b";
  s.usage.owner = "nvidia.com/gpu-memory GPU-b::mem0";
  s.usage.quota_bytes = uint64_t{4} << 30;
  s.usage.refused = refused;
  return s;
}

Snapshot OneGpu() {
  Snapshot s;
  DeviceRecord d;
  d.gpu.index = 1;
  d.gpu.uuid = "GPU-b";
  s.devices.push_back(d);
  return s;
}

TEST(SliceQuotaEventsTest, ARiseInRefusalsIsAWarningNamingTheContainer) {
  SliceQuotaEvents events;
  PodMap pods;
  pods.ok = true;
  pods.by_gpu["GPU-b"].push_back(
      {{"ml", "anpr-0", "anpr"}, "nvidia.com/gpu-memory", "GPU-b::mem0", ""});
  // Found at gpulet's first round with 5 refusals: reported before it restarted.
  EXPECT_THAT(events.Next({Slice("GPU-b--mem0", 5)}, OneGpu(), &pods), IsEmpty());
  EXPECT_THAT(events.Next({Slice("GPU-b--mem0", 5)}, OneGpu(), &pods), IsEmpty());
  std::vector<NodeEvent> e = events.Next({Slice("GPU-b--mem0", 8)}, OneGpu(), &pods);
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
  std::vector<NodeEvent> e = events.Next({Slice("claim-u1", 2)}, OneGpu(), nullptr);
  ASSERT_THAT(e, SizeIs(1));
  EXPECT_EQ(e[0].count, 2u);
  EXPECT_THAT(e[0].note, HasSubstr("nvidia.com/gpu-memory GPU-b::mem0 reached"));  // no pod
  // Gone, then allocated again under the same name: counted from its new file's zero.
  EXPECT_THAT(events.Next({}, OneGpu(), nullptr), IsEmpty());
  EXPECT_THAT(events.Next({Slice("claim-u1", 1)}, OneGpu(), nullptr), SizeIs(1));
}

// The wiring in `gpulet serve`: a container's allocations refused at its VRAM quota (a slice
// file with refusals, as the enforcement library leaves it) reach the API server as a
// GpuVramQuotaReached Event on the Node, and /metrics counts them.
TEST(DaemonSliceEventsTest, AVramSliceAtItsQuotaMakesAnEventOnTheNode) {
  gpulet::testing::ScratchDir dir;
  gpulet::testing::FakeApiServer server;
  ASSERT_TRUE(server.Start("serve-token").ok());
  server.AddNode({{"metadata", {{"name", "talos-08"}, {"uid", "uid-talos-08"}}},
                  {"status", {{"conditions", nlohmann::json::array()}}}});
  const std::string kubeconfig = dir.Write("kubeconfig", server.Kubeconfig("serve-token"));
  const std::string config = dir.Write(
      "config.yaml", absl::StrCat("version: v1\ncluster: {enabled: true, kubeconfig: ", kubeconfig,
                                  "}\nsharing:\n  memorySlices: {enabled: true}\n"));
  const int port = gpulet::testing::FreeLoopbackPort();
  gpulet::testing::DaemonProcess daemon;
  ASSERT_TRUE(daemon.Start(
      {std::string(GPULET_BINARY_DIR) + "/gpulet", "--simulate", "homelab", "--sim-state",
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
  daemon.Stop(SIGTERM, absl::Seconds(10));
  server.Stop();
}

}  // namespace
}  // namespace gpulet
