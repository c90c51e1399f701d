// Pod attribution: cgroup and log-directory parsing, device-ID mapping, the attributor
// against a fake kubelet PodResources server on a real unix socket, and `gpulet serve`'s
// metrics labelled with the pod that holds a simulated GPU.
#include "metrics/pod_attribution.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "metrics/exposition.h"
#include "metrics/pod_identity.h"
#include "testing/daemon_process.h"
#include "testing/fake_pod_resources.h"
#include "testing/free_port.h"
#include "testing/homelab.h"
#include "testing/text_lines.h"

namespace gpulet::metrics {
namespace {

namespace fs = std::filesystem;
using testing::FakePodResources;

constexpr char kUid[] = "5b0e3c1a-9f7d-4d2e-8a61-0c3b7e9d4242";
constexpr char kCid[] = "7c1e0f3a9b8d2c4e6f1a3b5c7d9e0f2a4b6c8d0e1f3a5b7c9d1e3f5a7b9c0d2e";

TEST(CgroupPodTest, EveryKubeletLayout) {
  struct Case {
    std::string cgroup;
    std::string uid;  // "" = not in a pod
    std::string cid;
  } cases[] = {
      // cgroup v2, systemd driver, containerd.
      {absl::StrCat("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod",
                    "5b0e3c1a_9f7d_4d2e_8a61_0c3b7e9d4242.slice/cri-containerd-", kCid, ".scope\n"),
       kUid, kCid},
      // Guaranteed QoS has no QoS slice; CRI-O names its scope crio-<id>.
      {absl::StrCat("0::/kubepods.slice/kubepods-pod5b0e3c1a_9f7d_4d2e_8a61_0c3b7e9d4242.slice/"
                    "crio-",
                    kCid, ".scope"),
       kUid, kCid},
      // CRI-O's monitor process is in the pod but is not the container.
      {absl::StrCat("0::/kubepods.slice/kubepods-pod5b0e3c1a_9f7d_4d2e_8a61_0c3b7e9d4242.slice/"
                    "crio-conmon-",
                    kCid, ".scope"),
       kUid, ""},
      // cgroup v1, cgroupfs driver: every hierarchy on its own line.
      {absl::StrCat("12:pids:/kubepods/besteffort/pod", kUid, "/", kCid, "\n11:memory:/kubepods/",
                    "besteffort/pod", kUid, "/", kCid, "\n"),
       kUid, kCid},
      // Docker (cri-dockerd) scopes.
      {absl::StrCat("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod",
                    "5b0e3c1a_9f7d_4d2e_8a61_0c3b7e9d4242.slice/docker-", kCid, ".scope"),
       kUid, kCid},
      // Seen from inside gpulet's own cgroup namespace: a relative path.
      {absl::StrCat("0::/../../kubepods-besteffort-pod5b0e3c1a_9f7d_4d2e_8a61_0c3b7e9d4242.slice/"
                    "cri-containerd-",
                    kCid, ".scope"),
       kUid, kCid},
      // Static pods have a 32-hex hash as UID.
      {absl::StrCat("0::/kubepods/burstable/pod0123456789abcdef0123456789abcdef/", kCid),
       "0123456789abcdef0123456789abcdef", kCid},
      // Host processes and nonsense.
      {"0::/system.slice/ollama.service\n", "", ""},
      {"0::/\n", "", ""},
      {"", "", ""},
      {"garbage without colons", "", ""},
      {"0::/kubepods.slice/kubepods-podnot-a-uid.slice/x", "", ""},
      {"0::/kubepods/podZZZ/abc", "", ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.cgroup);
    std::optional<CgroupPod> got = ParseCgroupPod(c.cgroup);
    if (c.uid.empty()) {
      EXPECT_FALSE(got.has_value());
      continue;
    }
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->pod_uid, c.uid);
    EXPECT_EQ(got->container_id, c.cid);
  }
}

TEST(PodLogDirTest, NamespaceNameUid) {
  std::optional<PodLogDir> d = ParsePodLogDir(absl::StrCat("ai_ollama-0_", kUid));
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->namespace_name, "ai");
  EXPECT_EQ(d->pod, "ollama-0");
  EXPECT_EQ(d->uid, kUid);
  EXPECT_FALSE(ParsePodLogDir("ai_ollama-0").has_value());
  EXPECT_FALSE(ParsePodLogDir(absl::StrCat("_ollama_", kUid)).has_value());
  EXPECT_FALSE(ParsePodLogDir("a_b_c_d").has_value());
  EXPECT_FALSE(ParsePodLogDir("ai_ollama_not-a-uid").has_value());
}

state::Snapshot TwoGpus() {
  state::Snapshot snap;
  for (unsigned i = 0; i < 2; ++i) {
    state::DeviceRecord d;
    d.gpu.index = i;
    d.gpu.uuid = absl::StrCat("GPU-", i);
    snap.devices.push_back(d);
  }
  return snap;
}

TEST(MapAssignmentsTest, EveryIdFormOfOurResourcesOnly) {
  v1::ListPodResourcesResponse list;
  FakePodResources::AddContainer(&list, "ai", "ollama-0", "ollama", "nvidia.com/gpu", {"GPU-1"});
  FakePodResources::AddContainer(&list, "cv", "anpr", "detector", "nvidia.com/gpu.shared",
                                 {"GPU-0::3"});
  FakePodResources::AddContainer(&list, "cv", "anpr", "ocr", "nvidia.com/gpu-memory",
                                 {"0::mem2", "0::mem3"});
  FakePodResources::AddContainer(&list, "x", "other", "c", "example.com/fpga", {"GPU-0"});
  FakePodResources::AddContainer(&list, "x", "gone", "c", "nvidia.com/gpu", {"GPU-9"});
  auto got = MapAssignments(list, TwoGpus(),
                            {"nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/gpu-memory"},
                            DraPool{});
  ASSERT_EQ(got.size(), 2u);
  ASSERT_EQ(got["GPU-1"].size(), 1u);
  EXPECT_EQ(got["GPU-1"][0].holder, (PodContainer{"ai", "ollama-0", "ollama"}));
  ASSERT_EQ(got["GPU-0"].size(), 3u);
  EXPECT_EQ(got["GPU-0"][0].device_id, "GPU-0::3");
  EXPECT_EQ(got["GPU-0"][1].holder.container, "ocr");
  EXPECT_EQ(got["GPU-0"][2].device_id, "0::mem3");
}

// GPUs 0 and 1 whole, GPU 2 with MIG devices 1/0 ("MIG-2a") and 2/0 ("MIG-2b").
state::Snapshot GpusAndMig() {
  state::Snapshot snap = TwoGpus();
  state::DeviceRecord d;
  d.gpu.index = 2;
  d.gpu.uuid = "GPU-2";
  d.gpu.mig_enabled = true;
  for (unsigned gi : {1u, 2u}) {
    gpu::MigDeviceInfo m;
    m.uuid = gi == 1 ? "MIG-2a" : "MIG-2b";
    m.gpu_instance_id = gi;
    m.compute_instance_id = 0;
    d.gpu.mig_devices.push_back(m);
  }
  snap.devices.push_back(d);
  return snap;
}

constexpr char kDriver[] = "gpu.gpulet.dev";
constexpr char kClaimUid[] = "0b6c2f4e-8d1a-4c3b-9e5f-7a2d1c0e9b84";
const DraPool kNodeA{kDriver, "node-a"};

TEST(DraPodAttributionTest, WholeGpuClaimOfThisNodesPool) {
  v1::ListPodResourcesResponse list;
  FakePodResources::AddClaim(&list, "ai", "ollama-0", "ollama", "ollama-gpu",
                             {{kDriver, "node-a", "gpu-1", "", {}}});
  // The same driver's device in another node's pool is not this GPU.
  FakePodResources::AddClaim(&list, "ai", "stray", "c", "elsewhere",
                             {{kDriver, "node-b", "gpu-0", "", {}}});
  auto got = MapAssignments(list, GpusAndMig(), {"nvidia.com/gpu"}, kNodeA);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got["GPU-1"].size(), 1u);
  EXPECT_EQ(got["GPU-1"][0].holder, (PodContainer{"ai", "ollama-0", "ollama"}));
  EXPECT_EQ(got["GPU-1"][0].resource, kDriver);
  EXPECT_EQ(got["GPU-1"][0].device_id, "gpu-1");
  EXPECT_EQ(got["GPU-1"][0].mig_uuid, "");
  // Without the node name, any pool counts.
  got = MapAssignments(list, GpusAndMig(), {}, DraPool{});
  EXPECT_EQ(got.size(), 2u);
  EXPECT_EQ(got["GPU-0"].size(), 1u);
}

TEST(DraPodAttributionTest, MigClaimNamesItsMigDevice) {
  v1::ListPodResourcesResponse list;
  FakePodResources::AddClaim(&list, "cv", "anpr", "detector", "mig-claim",
                             {{kDriver, "node-a", "gpu-2-mig-2-0", "", {}}});
  // An instance the GPU does not have (any more) names nothing.
  FakePodResources::AddClaim(&list, "cv", "old", "c", "gone",
                             {{kDriver, "node-a", "gpu-2-mig-7-0", "", {}}});
  auto got = MapAssignments(list, GpusAndMig(), {}, kNodeA);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got["GPU-2"].size(), 1u);
  EXPECT_EQ(got["GPU-2"][0].holder, (PodContainer{"cv", "anpr", "detector"}));
  EXPECT_EQ(got["GPU-2"][0].device_id, "gpu-2-mig-2-0");
  EXPECT_EQ(got["GPU-2"][0].mig_uuid, "MIG-2b");
}

// Two memory-share claims on GPU 0 make it both pods', exactly as two time-slicing replicas
// of GPU 0 given to the same two pods do: the same DCGM series, one copy per pod.
TEST(DraPodAttributionTest, TwoShareClaimsOnOneGpuLabelItLikeReplicas) {
  v1::ListPodResourcesResponse dra;
  FakePodResources::AddClaim(&dra, "ai", "ollama-0", "ollama", "vram-24g",
                             {{kDriver, "node-a", "gpu-0", "3f1c9a2e-share-a", {}}});
  FakePodResources::AddClaim(&dra, "cv", "anpr", "detector", "vram-4g",
                             {{kDriver, "node-a", "gpu-0", "7d2b4c6f-share-b", {}}});
  v1::ListPodResourcesResponse replicas;
  FakePodResources::AddContainer(&replicas, "ai", "ollama-0", "ollama", "nvidia.com/gpu.shared",
                                 {"GPU-0::0"});
  FakePodResources::AddContainer(&replicas, "cv", "anpr", "detector", "nvidia.com/gpu.shared",
                                 {"GPU-0::1"});
  state::Snapshot snap = GpusAndMig();
  auto got = MapAssignments(dra, snap, {}, kNodeA);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got["GPU-0"].size(), 2u);
  EXPECT_EQ(got["GPU-0"][0].holder, (PodContainer{"ai", "ollama-0", "ollama"}));
  EXPECT_EQ(got["GPU-0"][0].device_id, "gpu-0/3f1c9a2e-share-a");
  EXPECT_EQ(got["GPU-0"][1].holder, (PodContainer{"cv", "anpr", "detector"}));
  EXPECT_EQ(got["GPU-0"][1].device_id, "gpu-0/7d2b4c6f-share-b");

  auto render = [&](const v1::ListPodResourcesResponse& list) {
    SampleSet set;
    GpuSampleState st;
    st.answering = true;
    gpu::DeviceSample s;
    s.taken = absl::Now();
    s.gpu_temp_c = 50;
    st.last = s;
    set.by_uuid["GPU-0"] = st;
    auto pods = std::make_shared<PodMap>();
    pods->ok = true;
    pods->by_gpu = MapAssignments(list, snap, {"nvidia.com/gpu.shared"}, kNodeA);
    set.pods = pods;
    std::string text = RenderMetrics(snap, set, {"node-a", "570.1"}, false, absl::Now());
    std::vector<std::string> temps;
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      if (absl::StartsWith(line, "DCGM_FI_DEV_GPU_TEMP{")) temps.emplace_back(line);
    }
    return temps;
  };
  std::vector<std::string> by_claims = render(dra);
  ASSERT_EQ(by_claims.size(), 2u);
  EXPECT_NE(by_claims[0].find("pod=\"ollama-0\",namespace=\"ai\",container=\"ollama\""),
            std::string::npos)
      << by_claims[0];
  EXPECT_NE(by_claims[1].find("pod=\"anpr\",namespace=\"cv\",container=\"detector\""),
            std::string::npos)
      << by_claims[1];
  EXPECT_EQ(by_claims, render(replicas));
}

TEST(DraPodAttributionTest, OtherDriversAndMalformedNamesAreSkipped) {
  v1::ListPodResourcesResponse list;
  FakePodResources::AddClaim(&list, "x", "nvidia", "c", "theirs",
                             {{"gpu.nvidia.com", "node-a", "gpu-0", "", {}}});
  // A kubelet reporting only CDI names: other vendors' names are not ours.
  FakePodResources::AddClaim(
      &list, "x", "nvidia-cdi", "c", "theirs",
      {{"", "", "", "", {"nvidia.com/gpu=0", "k8s.gpu.nvidia.com/claim=1"}}});
  for (const char* name :
       {"", "gpu", "gpu-", "gpu-x", "gpu-01", "gpu-+1", "gpu--1", "gpu-1-", "gpu-1-mig-1",
        "gpu-1-mig-1-", "gpu-2-mig-1-0-0", "gpu-2-mig--1-0", "gpu-2-nig-1-0", "GPU-1", "MIG-2a",
        "gpu-99999999999999999999", "gpu-9", "gpu-1\n"}) {
    FakePodResources::AddClaim(&list, "x", "bad", "c", "malformed",
                               {{kDriver, "node-a", name, "", {}}});
  }
  for (const std::string& cdi :
       {std::string("gpulet.dev/claim=") + kClaimUid,
        std::string("gpulet.dev/claim=") + kClaimUid + "-",
        std::string("gpulet.dev/claim=short-uid-gpu-0"),
        std::string("gpulet.dev/claim=") + kClaimUid + "gpu-0",
        std::string("gpulet.dev/claim=0b6c2f4e_8d1a-4c3b-9e5f-7a2d1c0e9b84-gpu-0"),
        std::string("gpulet.dev/claim=") + kClaimUid + "-gpu-x"}) {
    FakePodResources::AddClaim(&list, "x", "bad-cdi", "c", "malformed", {{"", "", "", "", {cdi}}});
  }
  EXPECT_TRUE(MapAssignments(list, GpusAndMig(), {"nvidia.com/gpu"}, kNodeA).empty());
}

TEST(DraPodAttributionTest, CdiNamesWhenTheKubeletReportsNoDriver) {
  v1::ListPodResourcesResponse list;
  FakePodResources::AddClaim(
      &list, "ai", "ollama-0", "ollama", "whole",
      {{"", "", "", "", {std::string("gpulet.dev/claim=") + kClaimUid + "-gpu-1"}}});
  FakePodResources::AddClaim(
      &list, "cv", "anpr", "detector", "mig",
      {{"", "", "", "", {std::string("gpulet.dev/claim=") + kClaimUid + "-gpu-2-mig-1-0"}}});
  auto got = MapAssignments(list, GpusAndMig(), {}, kNodeA);
  ASSERT_EQ(got.size(), 2u);
  ASSERT_EQ(got["GPU-1"].size(), 1u);
  EXPECT_EQ(got["GPU-1"][0].holder, (PodContainer{"ai", "ollama-0", "ollama"}));
  EXPECT_EQ(got["GPU-1"][0].resource, kDriver);
  EXPECT_EQ(got["GPU-1"][0].device_id, "gpu-1");
  ASSERT_EQ(got["GPU-2"].size(), 1u);
  EXPECT_EQ(got["GPU-2"][0].mig_uuid, "MIG-2a");
}

TEST(DraPodAttributionTest, DevicePluginAndDraGpusInOnePod) {
  v1::ListPodResourcesResponse list;
  FakePodResources::AddContainer(&list, "ai", "trainer", "main", "nvidia.com/gpu", {"GPU-0"});
  FakePodResources::AddClaim(&list, "ai", "trainer", "main", "extra",
                             {{kDriver, "node-a", "gpu-1", "", {}}});
  // The same claim referenced twice by a container is still one device.
  FakePodResources::AddClaim(&list, "ai", "trainer", "main", "extra",
                             {{kDriver, "node-a", "gpu-1", "", {}}});
  FakePodResources::AddClaim(&list, "ai", "trainer", "sidecar", "mig",
                             {{kDriver, "node-a", "gpu-2-mig-1-0", "", {}}});
  auto got = MapAssignments(list, GpusAndMig(), {"nvidia.com/gpu"}, kNodeA);
  ASSERT_EQ(got.size(), 3u);
  ASSERT_EQ(got["GPU-0"].size(), 1u);
  EXPECT_EQ(got["GPU-0"][0].resource, "nvidia.com/gpu");
  EXPECT_EQ(got["GPU-0"][0].holder, (PodContainer{"ai", "trainer", "main"}));
  ASSERT_EQ(got["GPU-1"].size(), 1u);
  EXPECT_EQ(got["GPU-1"][0].resource, kDriver);
  EXPECT_EQ(got["GPU-1"][0].holder, (PodContainer{"ai", "trainer", "main"}));
  ASSERT_EQ(got["GPU-2"].size(), 1u);
  EXPECT_EQ(got["GPU-2"][0].holder, (PodContainer{"ai", "trainer", "sidecar"}));
  // A process of the pod on the DRA GPU is the container's that holds it.
  PodMap map;
  map.by_gpu = got;
  map.pods_by_uid[kUid] = {"ai", "trainer", {"main", "sidecar"}};
  EXPECT_EQ(AttributeProcess(map, "GPU-1", CgroupPod{kUid, kCid}),
            (PodContainer{"ai", "trainer", "main"}));
  EXPECT_EQ(AttributeProcess(map, "GPU-2", CgroupPod{kUid, kCid}),
            (PodContainer{"ai", "trainer", "sidecar"}));
}

TEST(AttributeProcessTest, ContainerWhenItCanBeToldApart) {
  PodMap map;
  map.pods_by_uid[kUid] = {"ai", "ollama-0", {"ollama", "sidecar"}};
  map.by_gpu["GPU-1"] = {{{"ai", "ollama-0", "ollama"}, "nvidia.com/gpu", "GPU-1", ""}};
  CgroupPod cg{kUid, kCid};
  EXPECT_EQ(AttributeProcess(map, "GPU-1", cg), (PodContainer{"ai", "ollama-0", "ollama"}));
  // On a GPU the pod does not hold (by the list), two containers: the container is unknown.
  EXPECT_EQ(AttributeProcess(map, "GPU-0", cg), (PodContainer{"ai", "ollama-0", ""}));
  // A one-container pod needs no list.
  map.pods_by_uid[kUid].containers = {"ollama"};
  EXPECT_EQ(AttributeProcess(map, "GPU-0", cg), (PodContainer{"ai", "ollama-0", "ollama"}));
  EXPECT_FALSE(AttributeProcess(map, "GPU-1", CgroupPod{"0123456789abcdef0123456789abcdef", ""}));
}

std::string ShortTempDir(const char* tag) {
  // Unix socket paths are limited to 107 bytes: keep them short.
  static int n = 0;
  fs::path dir = absl::StrCat("/tmp/", tag, "-", getpid(), "-", n++);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

TEST(PodAttributorTest, FollowsTheKubeletThroughARestart) {
  std::string dir = ShortTempDir("gpa");
  std::string sock = dir + "/kubelet.sock";
  FakePodResources kubelet(sock);
  v1::ListPodResourcesResponse list;
  FakePodResources::AddContainer(&list, "ai", "ollama-0", "ollama", "nvidia.com/gpu", {"GPU-1"});
  kubelet.SetResponse(list);
  ASSERT_TRUE(kubelet.Start().ok());

  state::DeviceStore store;
  gpu::Inventory inv;
  inv.nvml_status = absl::OkStatus();
  for (unsigned i = 0; i < 2; ++i) {
    gpu::Gpu g;
    g.index = i;
    g.uuid = absl::StrCat("GPU-", i);
    g.in_nvml = true;
    inv.gpus.push_back(g);
  }
  store.SetInventory(inv, absl::Now());
  PodAttributor::Options o;
  o.socket_dir = dir;
  o.interval = absl::Seconds(60);  // only the watch can explain a quick refresh
  o.resources = {"nvidia.com/gpu"};
  PodAttributor pods(MakeKubeletPodResourcesClient(sock), &store, nullptr, o);
  pods.RefreshOnce();
  std::shared_ptr<const PodMap> m = pods.Current();
  ASSERT_TRUE(m->ok) << m->error;
  ASSERT_EQ(m->by_gpu.count("GPU-1"), 1u);

  pods.Start();
  // The kubelet goes away: the last holders are kept, the error says where to look.
  kubelet.Stop();
  pods.RefreshOnce();
  m = pods.Current();
  EXPECT_FALSE(m->ok);
  EXPECT_NE(m->error.find(sock), std::string::npos) << m->error;
  EXPECT_EQ(m->by_gpu.count("GPU-1"), 1u);
  // It comes back with a different answer: the watch refreshes within about a second.
  v1::ListPodResourcesResponse moved;
  FakePodResources::AddContainer(&moved, "cv", "anpr", "detector", "nvidia.com/gpu", {"GPU-0"});
  kubelet.SetResponse(moved);
  ASSERT_TRUE(kubelet.Start().ok());
  absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (absl::Now() < deadline && !(pods.Current()->ok && pods.Current()->by_gpu.count("GPU-0"))) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  m = pods.Current();
  EXPECT_TRUE(m->ok) << m->error;
  EXPECT_EQ(m->by_gpu.count("GPU-0"), 1u);
  EXPECT_EQ(m->by_gpu.count("GPU-1"), 0u);
  pods.Stop();
  fs::remove_all(dir);
}

// A client that refuses its first calls, as a kubelet does between creating its
// socket and listening on it.
class RefusingThenAnswering final : public PodResourcesClient {
 public:
  explicit RefusingThenAnswering(int refusals) : refusals_(refusals) {}
  absl::StatusOr<v1::ListPodResourcesResponse> List(absl::Duration) override {
    if (calls_.fetch_add(1) < refusals_) return absl::UnavailableError("connection refused");
    return v1::ListPodResourcesResponse();
  }
  std::atomic<int>& calls() { return calls_; }

 private:
  const int refusals_;
  std::atomic<int> calls_{0};
};

TEST(PodAttributorTest, AFailedCallIsRetriedSoonerThanTheInterval) {
  std::string dir = ShortTempDir("gpr");
  auto client = std::make_unique<RefusingThenAnswering>(1);
  RefusingThenAnswering* calls = client.get();
  state::DeviceStore store;
  PodAttributor::Options o;
  o.socket_dir = dir;
  o.interval = absl::Seconds(60);
  PodAttributor pods(std::move(client), &store, nullptr, o);
  pods.Start();
  absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (absl::Now() < deadline && !pods.Current()->ok) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(pods.Current()->ok) << pods.Current()->error;
  EXPECT_EQ(calls->calls().load(), 2);
  // Once answered, the next call waits for the interval again.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(calls->calls().load(), 2);
  pods.Stop();
  fs::remove_all(dir);
}

// The homelab fixture's RTX 5090 runs ollama (pid 4242) whose cgroup names pod
// ai/ollama-0; the fake kubelet says that pod holds the GPU.
TEST(PodAttributionDaemonTest, AllocatedGpuSeriesCarryThePod) {
  std::string dir = ShortTempDir("gpd");
  fs::create_directories(dir + "/k/pod-resources");
  FakePodResources kubelet(dir + "/k/pod-resources/kubelet.sock");
  v1::ListPodResourcesResponse list;
  FakePodResources::AddContainer(&list, "ai", "ollama-0", "ollama", "nvidia.com/gpu",
                                 {"GPU-8a41d7b9-52c6-4f13-b0e8-7d2c9e155090"});
  kubelet.SetResponse(list);
  ASSERT_TRUE(kubelet.Start().ok());

  int port = testing::FreeLoopbackPort();
  std::string gpulet = gpulet::testing::GpuletBinary();
  testing::DaemonProcess daemon;
  ASSERT_TRUE(daemon.Start(
      {gpulet, "--simulate", "homelab", "--sim-state", dir + "/state.json", "serve",
       "--kubelet-dir", dir + "/k", "--metrics-address", absl::StrCat("127.0.0.1:", port)},
      {}, dir + "/log"));
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(1, 0);
  const std::string pod = "pod=\"ollama-0\",namespace=\"ai\",container=\"ollama\"";
  std::string body;
  for (int i = 0; i < 100; ++i) {
    auto r = c.Get("/metrics");
    if (r) body = r->body;
    if (body.find(pod) != std::string::npos &&
        body.find("DCGM_FI_DEV_GPU_TEMP{gpu=\"1\"") != std::string::npos) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::string temp1 = testing::LineStartingWith(body, "DCGM_FI_DEV_GPU_TEMP{gpu=\"1\"");
  EXPECT_NE(temp1.find(pod), std::string::npos) << temp1 << "\n" << daemon.Log();
  // The unallocated GPU carries no pod.
  std::string temp0 = testing::LineStartingWith(body, "DCGM_FI_DEV_GPU_TEMP{gpu=\"0\"");
  EXPECT_FALSE(temp0.empty()) << body;
  EXPECT_EQ(temp0.find("pod="), std::string::npos) << temp0;
  EXPECT_NE(testing::LineStartingWith(body, "gpulet_gpu_allocation_info{gpu=\"1\"").find(pod),
            std::string::npos)
      << body;
  // The ollama process is in the pod by its cgroup; ComfyUI (no cgroup file) is not.
  std::string ollama = testing::LineStartingWith(body, "gpulet_gpu_process_memory_bytes{gpu=\"1\"");
  EXPECT_NE(ollama.find("pid=\"4242\",process=\"ollama\"," + pod), std::string::npos) << body;
  EXPECT_NE(body.find("pid=\"5120\",process=\"python3\"} "), std::string::npos) << body;
  EXPECT_NE(body.find("gpulet_pod_resources_up 1"), std::string::npos) << body;
  // /status says the same.
  auto status = c.Get("/status");
  ASSERT_TRUE(status);
  EXPECT_NE(status->body.find("\"pod\": \"ollama-0\""), std::string::npos) << status->body;
  EXPECT_EQ(daemon.Stop(SIGTERM, absl::Seconds(5)), 0) << daemon.Log();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gpulet::metrics
