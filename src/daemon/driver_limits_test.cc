// The driver's own VRAM limit per slice holder (DriverLimits): which cgroup gets it, when it
// is set again, and when the library alone holds a GPU's quotas. The driver is a fake; the
// host is a scratch tree with the files the kernel would show.
#include "daemon/driver_limits.h"

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/fake_gpu_library.h"
#include "testing/files.h"
#include "testing/free_port.h"
#include "testing/homelab.h"
#include "testing/http_clients.h"
#include "testing/slices.h"
#include "testing/wait_for.h"
#include "vram/slice_file.h"
#include "vram/slice_table.h"

namespace gpulet::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Call = gpulet::testing::FakeGpuLibrary::MemoryLimitCall;

constexpr char kPod[] = "/kubepods/burstable/pod0f1e";
constexpr uint64_t kFourGiB = uint64_t{4} << 30;

class DriverLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    host_ = std::make_unique<HostFs>(dir_.path());
    gpu::DeviceIdentity id;
    id.index = 1;
    id.uuid = "GPU-b";
    gpus_.AddDevice(id);
    gpus_.SetMemoryLimitAnswer(1, absl::OkStatus());
    Capacity("nvidia/0000:02:00.0/vidmem 34359738368\n");
  }

  void Capacity(const std::string& text) { dir_.Write("sys/fs/cgroup/dmem.capacity", text); }

  // Process `pid` in cgroup `path` (its /proc/<pid>/cgroup and the cgroup's directory).
  void Process(int pid, const std::string& path) {
    dir_.Write(absl::StrCat("proc/", pid, "/cgroup"), absl::StrCat("0::", path, "\n"));
    dir_.Write(absl::StrCat("sys/fs/cgroup", path, "/cgroup.procs"), absl::StrCat(pid, "\n"));
  }

  std::string CgroupDir(const std::string& path) const {
    return absl::StrCat(dir_.path(), "/sys/fs/cgroup", path);
  }

  // A 4 GiB slice on GPU-b held by `pids`.
  static metrics::SliceSample Slice(const std::string& name, std::vector<int> pids,
                                    uint64_t quota = kFourGiB) {
    metrics::SliceSample s = gpulet::testing::FourGiBSlice(name);
    s.usage.quota_bytes = quota;
    for (int pid : pids) {
      vram::SliceUsage::Process p;
      p.pid = pid;
      s.usage.processes.push_back(p);
    }
    return s;
  }

  static state::Snapshot Gpu(bool mig = false) {
    state::Snapshot snap = gpulet::testing::OneGpu();
    snap.devices[0].gpu.bus_id = "00000000:02:00.0";
    snap.devices[0].gpu.mig_enabled = mig;
    return snap;
  }

  absl::Time Round(int n) const { return absl::FromUnixSeconds(1'800'000'000) + absl::Seconds(n); }

  gpulet::testing::ScratchDir dir_;
  std::unique_ptr<HostFs> host_;
  gpulet::testing::FakeGpuLibrary gpus_;
};

TEST_F(DriverLimitsTest, AContainersCgroupGetsItsQuotaOnceAndAgainWhenTheQuotaChanges) {
  Process(4242, absl::StrCat(kPod, "/ctr-a"));
  DriverLimits limits(&gpus_, host_.get());
  limits.Next({Slice("GPU-b--mem0", {4242})}, Gpu(), Round(0));
  limits.Next({Slice("GPU-b--mem0", {4242})}, Gpu(), Round(1));
  EXPECT_THAT(gpus_.memory_limit_calls(),
              ElementsAre(Call{1, CgroupDir(absl::StrCat(kPod, "/ctr-a")), kFourGiB}));
  EXPECT_TRUE(limits.DriverHolds("GPU-b"));
  EXPECT_EQ(limits.limits().size(), 1u);
  // The slices allocated again with 8 GiB: the same cgroup gets the new quota.
  limits.Next({Slice("GPU-b--mem0", {4242}, 2 * kFourGiB)}, Gpu(), Round(2));
  EXPECT_EQ(gpus_.memory_limit_calls().size(), 2u);
  EXPECT_EQ(gpus_.memory_limit_calls().back().bytes, 2 * kFourGiB);
  // The container gone: nothing is kept for it, and a new one is set anew.
  limits.Next({}, Gpu(), Round(3));
  EXPECT_THAT(limits.limits(), IsEmpty());
  EXPECT_TRUE(limits.DriverHolds("GPU-b"));  // the node still can
}

TEST_F(DriverLimitsTest, AClaimSharedByAPodsContainersIsLimitedAtThePod) {
  Process(10, absl::StrCat(kPod, "/ctr-a"));
  Process(11, absl::StrCat(kPod, "/ctr-b"));
  DriverLimits limits(&gpus_, host_.get());
  limits.Next({Slice("claim-u1", {10, 11})}, Gpu(), Round(0));
  EXPECT_THAT(gpus_.memory_limit_calls(), ElementsAre(Call{1, CgroupDir(kPod), kFourGiB}));
}

TEST_F(DriverLimitsTest, ASliceWithoutRunningProcessesWaits) {
  DriverLimits limits(&gpus_, host_.get());
  limits.Next({Slice("GPU-b--mem0", {})}, Gpu(), Round(0));
  limits.Next({Slice("GPU-b--mem0", {999})}, Gpu(), Round(1));  // exited: no /proc entry
  EXPECT_THAT(gpus_.memory_limit_calls(), IsEmpty());
  EXPECT_TRUE(limits.DriverHolds("GPU-b"));
}

TEST_F(DriverLimitsTest, WithoutTheDmemControllerOrOnAMigGpuTheLibraryHolds) {
  Process(4242, absl::StrCat(kPod, "/ctr-a"));
  {
    DriverLimits limits(&gpus_, host_.get());
    limits.Next({Slice("GPU-b--mem0", {4242})}, Gpu(/*mig=*/true), Round(0));
    EXPECT_FALSE(limits.DriverHolds("GPU-b"));
  }
  Capacity("drm/0000:03:00.0/vram0 12550144\n");  // another card's region only
  {
    DriverLimits limits(&gpus_, host_.get());
    limits.Next({Slice("GPU-b--mem0", {4242})}, Gpu(), Round(0));
    EXPECT_FALSE(limits.DriverHolds("GPU-b"));
  }
  EXPECT_THAT(gpus_.memory_limit_calls(), IsEmpty());
}

TEST_F(DriverLimitsTest, ADriverWithoutTheCallIsAskedOnce) {
  Process(4242, absl::StrCat(kPod, "/ctr-a"));
  Process(4243, absl::StrCat(kPod, "/ctr-b"));
  gpus_.SetMemoryLimitAnswer(1, absl::UnimplementedError("NVML_ERROR_FUNCTION_NOT_FOUND"));
  DriverLimits limits(&gpus_, host_.get());
  limits.Next({Slice("GPU-b--mem0", {4242})}, Gpu(), Round(0));
  limits.Next({Slice("GPU-b--mem0", {4242}), Slice("GPU-b--mem1", {4243})}, Gpu(), Round(1));
  EXPECT_EQ(gpus_.memory_limit_calls().size(), 1u);
  EXPECT_FALSE(limits.DriverHolds("GPU-b"));
}

TEST_F(DriverLimitsTest, AFailedLimitIsNotRetriedUntilItsQuotaChanges) {
  Process(4242, absl::StrCat(kPod, "/ctr-a"));
  gpus_.SetMemoryLimitAnswer(1, absl::PermissionDeniedError("NVML_ERROR_NO_PERMISSION"));
  DriverLimits limits(&gpus_, host_.get());
  limits.Next({Slice("GPU-b--mem0", {4242})}, Gpu(), Round(0));
  limits.Next({Slice("GPU-b--mem0", {4242})}, Gpu(), Round(1));
  EXPECT_EQ(gpus_.memory_limit_calls().size(), 1u);
  EXPECT_FALSE(limits.DriverHolds("GPU-b"));
  gpus_.SetMemoryLimitAnswer(1, absl::OkStatus());
  limits.Next({Slice("GPU-b--mem0", {4242}, 2 * kFourGiB)}, Gpu(), Round(2));
  EXPECT_EQ(gpus_.memory_limit_calls().size(), 2u);
  EXPECT_TRUE(limits.DriverHolds("GPU-b"));
}

TEST_F(DriverLimitsTest, HoldersThatShareACgroupGetNoLimitForTheLimitWouldCapBoth) {
  // Two device-plugin slices of one GPU in two containers of a pod, and a process of one of
  // them in the pod's own cgroup: the first holder's cgroup is the pod's, which holds the other.
  Process(10, absl::StrCat(kPod, "/ctr-a"));
  Process(11, kPod);
  Process(12, absl::StrCat(kPod, "/ctr-b"));
  DriverLimits limits(&gpus_, host_.get());
  limits.Next({Slice("GPU-b--mem0", {10, 11}), Slice("GPU-b--mem1", {12})}, Gpu(), Round(0));
  EXPECT_THAT(gpus_.memory_limit_calls(), IsEmpty());
  EXPECT_FALSE(limits.DriverHolds("GPU-b"));
}

TEST_F(DriverLimitsTest, ACgroupGpuletCannotNameGetsNoLimit) {
  // Outside gpulet's cgroup namespace; a cgroup v1 host; a PID namespace gpulet cannot see;
  // the root cgroup.
  dir_.Write("proc/20/cgroup", "0::/../../kubepods/pod1/c\n");
  dir_.Write("proc/21/cgroup", "4:memory:/kubepods/pod1/c\n");
  dir_.Write("proc/22/cgroup", "0::/\n");
  for (const metrics::SliceSample& s : {Slice("GPU-b--mem0", {20}), Slice("GPU-b--mem0", {21}),
                                        Slice("GPU-b--mem0", {0}), Slice("GPU-b--mem0", {22})}) {
    DriverLimits limits(&gpus_, host_.get());
    limits.Next({s}, Gpu(), Round(0));
    EXPECT_FALSE(limits.DriverHolds("GPU-b")) << s.usage.processes[0].pid;
  }
  EXPECT_THAT(gpus_.memory_limit_calls(), IsEmpty());
}

TEST_F(DriverLimitsTest, TheCapacityFileIsReadAgainAfterItsTtl) {
  Capacity("");
  DriverLimits limits(&gpus_, host_.get());
  limits.Next({}, Gpu(), Round(0));
  EXPECT_FALSE(limits.DriverHolds("GPU-b"));
  Capacity("nvidia/0000:02:00.0/vidmem 34359738368\n");  // the driver loaded
  limits.Next({}, Gpu(), Round(1));
  EXPECT_FALSE(limits.DriverHolds("GPU-b"));
  limits.Next({}, Gpu(), Round(1) + DriverLimits::kCapacityTtl);
  EXPECT_TRUE(limits.DriverHolds("GPU-b"));
}

// The wiring through `gpulet serve`: the simulated H200 behind an r615 driver, on a host
// whose dmem controller accounts it, with this test process holding a 4 GiB slice from a
// container's cgroup. gpulet sets the driver's limit of that cgroup (the simulator writes it
// to the cgroup's dmem.max, as the controller shows it) and says the driver holds the GPU's
// quotas.
TEST(DaemonDriverLimitsTest, AnR615NodeHasTheDriverHoldTheSliceHoldersCgroup) {
  gpulet::testing::ScratchDir dir;
  // A fixture file's host root is the directory beside it named after it.
  const std::string root = dir.path() + "/h200-r615/root";
  std::filesystem::create_directories(root);
  std::filesystem::copy(gpulet::testing::SimRoot("h200"), root,
                        std::filesystem::copy_options::recursive);
  const std::string fixture = dir.Write(
      "h200-r615.yaml",
      absl::StrReplaceAll(
          gpulet::testing::ReadTextFile(std::string(GPULET_SOURCE_DIR) + "/sim/fixtures/h200.yaml"),
          {{"version: \"570.133.20\"", "version: \"615.20.01\""}}));
  const std::string cgroup = "/kubepods/besteffort/pod7c1d/ctr-a";
  dir.Write("h200-r615/root/sys/fs/cgroup/dmem.capacity",
            "nvidia/0000:18:00.0/vidmem 150754820096\n");
  dir.Write(absl::StrCat("h200-r615/root/sys/fs/cgroup", cgroup, "/cgroup.procs"), "");
  dir.Write(absl::StrCat("h200-r615/root/proc/", getpid(), "/cgroup"),
            absl::StrCat("0::", cgroup, "\n"));
  const std::string vram_dir = root + "/var/lib/gpulet/vram";
  ASSERT_TRUE(vram::WriteSliceFile(vram_dir, "GPU-test--mem0", uint64_t{4} << 30,
                                   "GPU-c1a7e0f2-9b34-4d58-8e61-2f0b7a3d0200",
                                   "nvidia.com/gpu-memory test")
                  .ok());
  vram::SliceMap map;
  char msg[256];
  ASSERT_EQ(
      vram::OpenSlice((vram_dir + "/GPU-test--mem0/slice").c_str(), true, &map, msg, sizeof(msg)),
      vram::SliceError::kOk)
      << msg;
  uint32_t slot = 0;
  ASSERT_EQ(vram::ClaimSlot(&map, getpid(), &slot), vram::SliceError::kOk);
  ASSERT_TRUE(vram::Reserve(&map, slot, uint64_t{1} << 30).granted);

  const std::string config =
      dir.Write("config.yaml",
                "version: v1\ncdi: {specDir: ''}\nlabels: {featuresFile: ''}\n"
                "health: {kmsg: false, xidHistoryFile: ''}\n"
                "sharing:\n  memorySlices: {enabled: true, hostDir: /var/lib/gpulet/vram}\n");
  const int port = gpulet::testing::FreeLoopbackPort();
  gpulet::testing::DaemonProcess daemon;
  ASSERT_TRUE(daemon.Start(
      {gpulet::testing::GpuletBinary(), "--simulate", fixture, "--host-root", root, "--sim-state",
       dir.path() + "/state.json", "serve", "--config", config, "--kubelet-dir",
       dir.path() + "/kubelet", "--metrics-address", absl::StrCat("127.0.0.1:", port)},
      {{"NODE_NAME", "node-a"}, {"TMPDIR", dir.path()}}, dir.path() + "/log"));
  const std::string dmem_max = absl::StrCat(root, "/sys/fs/cgroup", cgroup, "/dmem.max");
  EXPECT_NE(gpulet::testing::WaitFor([&] {
              return gpulet::testing::ReadTextFile(dmem_max) ==
                     "nvidia/0000:18:00.0/vidmem 4294967296\n";
            }),
            absl::InfiniteDuration())
      << gpulet::testing::ReadTextFile(dmem_max) << daemon.Log();
  EXPECT_NE(gpulet::testing::WaitFor([&] {
              std::optional<gpulet::testing::HttpResponse> m =
                  gpulet::testing::Get(port, "/metrics", absl::Seconds(1));
              return m.has_value() && absl::StrContains(m->body, "holder=\"driver\"} 1");
            }),
            absl::InfiniteDuration())
      << daemon.Log();
  EXPECT_THAT(daemon.Log(), HasSubstr("the driver holds VRAM slice GPU-test--mem0 on GPU 0 to its "
                                      "4.0 GiB quota (cgroup /kubepods/besteffort/pod7c1d/ctr-a)"));
  vram::CloseSlice(&map);
  daemon.Stop(SIGTERM, absl::Seconds(10));
}

}  // namespace
}  // namespace gpulet::daemon
