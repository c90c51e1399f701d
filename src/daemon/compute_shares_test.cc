// gpulet's side of the compute share (ComputeShares): each round's SM time and launched
// units become the launch rate in the slice file; slices without a share, and rounds that
// teach nothing, are left alone. The slice files are real; the rounds are made by hand as the
// sampler would make them, with the injected times.
#include "daemon/compute_shares.h"

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/files.h"
#include "testing/free_port.h"
#include "testing/homelab.h"
#include "testing/http_clients.h"
#include "testing/wait_for.h"
#include "vram/launch_pacing.h"
#include "vram/slice_file.h"
#include "vram/slice_format.h"
#include "vram/slice_table.h"

namespace gpulet::daemon {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;
const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

class ComputeSharesTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) const {
    return absl::StrCat(dir_.path(), "/", name, "/", vram::kSliceFileName);
  }

  void Make(const std::string& name, uint32_t share_permille) {
    ASSERT_TRUE(
        vram::WriteSliceFile(dir_.path(), name, 4 * kGiB, "GPU-a", "pod/ctr", share_permille).ok());
  }

  // The library's side: `units` more launched by the holder.
  void Launch(const std::string& name, uint64_t units) {
    vram::SliceMap map;
    char msg[256];
    ASSERT_EQ(vram::OpenSlice(Path(name).c_str(), true, &map, msg, sizeof(msg)),
              vram::SliceError::kOk)
        << msg;
    vram::PaceLaunch(map.header, units, [] { return uint64_t{0}; });  // no rate: no wait
    vram::CloseSlice(&map);
  }

  // The sampler's slice as read now, with NVML's SM utilization of its one process
  // (nullopt: NVML gave none; no device at all: the GPU did not answer).
  metrics::SliceSample Sample(const std::string& name, std::optional<unsigned> sm_percent,
                              bool answered = true) {
    metrics::SliceSample s;
    s.name = name;
    absl::StatusOr<vram::SliceUsage> u = vram::ReadSliceUsage(Path(name));
    EXPECT_TRUE(u.ok()) << u.status();
    if (u.ok()) s.usage = *u;
    if (answered) {
      metrics::SliceDeviceUse use;
      metrics::SliceDeviceUse::Process p;
      p.pid = 42;
      p.sm_percent = sm_percent;
      use.processes.push_back(p);
      s.device = use;
    }
    return s;
  }

  uint64_t RateInFile(const std::string& name) {
    absl::StatusOr<vram::SliceUsage> u = vram::ReadSliceUsage(Path(name));
    return u.ok() ? u->compute.launch_rate : ~uint64_t{0};
  }

  // Round `second`: the holder of `name` launched `units` since the last, and NVML measured
  // `sm_percent` of its process (see Sample).
  void Round(const std::string& name, int second, uint64_t units,
             std::optional<unsigned> sm_percent, bool answered = true) {
    if (units > 0) Launch(name, units);
    shares_.Next({Sample(name, sm_percent, answered)}, kT0 + absl::Seconds(second));
  }

  testing::ScratchDir dir_;
  ComputeShares shares_{dir_.path()};
};

// A quarter share, launching 100000 units a second and measured at 100 % of the SM time:
// 25000 units a second is its share, and the file says so.
TEST_F(ComputeSharesTest, AHolderOverItsShareGetsTheRateOfItsShare) {
  Make("a", 250);
  Round("a", 0, 0, 100);  // the first round only takes the counter
  EXPECT_EQ(RateInFile("a"), 0u);
  Round("a", 1, 100000, 100);
  EXPECT_EQ(RateInFile("a"), 25000u);
  EXPECT_EQ(shares_.rates().at("a"), 25000u);
}

TEST_F(ComputeSharesTest, WithinItsShareOrUnmeasuredItIsNotPaced) {
  Make("a", 500);
  Round("a", 0, 0, 30);
  Round("a", 1, 1000, 30);  // 30 % of a 50 % share
  EXPECT_EQ(RateInFile("a"), 0u);
  Round("a", 2, 1000, std::nullopt);  // NVML gave none
  Round("a", 3, 1000, 90, false);     // the GPU did not answer
  EXPECT_EQ(RateInFile("a"), 0u);
}

TEST_F(ComputeSharesTest, ASliceWithoutAShareIsLeftAlone) {
  Make("b", 0);
  Round("b", 0, 0, 100);
  Round("b", 1, 100000, 100);
  EXPECT_EQ(RateInFile("b"), 0u);
  EXPECT_TRUE(shares_.rates().empty());
}

// A restarted gpulet (or a rebuilt sampler) goes on from the rate in the file rather than
// letting the holder run unpaced while it learns again.
TEST_F(ComputeSharesTest, ARestartGoesOnFromTheRateInTheFile) {
  Make("a", 250);
  ASSERT_TRUE(vram::SetSliceLaunchRate(Path("a"), 40000).ok());
  Round("a", 0, 0, 100);
  EXPECT_EQ(RateInFile("a"), 40000u);
  EXPECT_EQ(shares_.rates().at("a"), 40000u);
}

// A slice gone is forgotten; a new file under its name starts again.
TEST_F(ComputeSharesTest, ASliceGoneIsForgotten) {
  Make("a", 250);
  Round("a", 0, 0, 100);
  Round("a", 1, 100000, 100);
  shares_.Next({}, kT0 + absl::Seconds(2));
  EXPECT_TRUE(shares_.rates().empty());
  Make("a", 250);  // a new holder, its counter at 0
  Round("a", 3, 0, 100);
  EXPECT_EQ(RateInFile("a"), 0u);
}

// A slice whose directory went between the read and the write: nothing written, logged once,
// and the next rounds go on.
TEST_F(ComputeSharesTest, AFileThatCannotBeWrittenIsSkipped) {
  Make("a", 250);
  metrics::SliceSample s = Sample("a", 100);
  s.name = "gone";  // its directory is not there
  shares_.Next({s}, kT0);
  for (int i = 1; i <= 2; ++i) {
    s.usage.compute.launch_units = 100000 * i;
    shares_.Next({s}, kT0 + absl::Seconds(i));
  }
  EXPECT_EQ(shares_.rates().at("gone"), 0u);
}

std::string Metrics(int port) {
  std::optional<gpulet::testing::HttpResponse> m =
      gpulet::testing::Get(port, "/metrics", absl::Seconds(1));
  return m ? m->body : "(no answer from /metrics)";
}

// The wiring through `gpulet serve`: the simulated H200, whose NVML measures this test process
// at 100 % of the SM time, and a slice file with a quarter share in which this process holds
// a slot and launches. gpulet paces it: a launch rate appears in the file and in /metrics.
TEST(DaemonComputeSharesTest, GpuletServeSetsTheLaunchRateOfASliceOverItsShare) {
  gpulet::testing::ScratchDir dir;
  const std::string root = dir.path() + "/root";
  std::filesystem::create_directories(root);
  std::filesystem::copy(gpulet::testing::SimRoot("h200"), root,
                        std::filesystem::copy_options::recursive);
  const std::string uuid = "GPU-c1a7e0f2-9b34-4d58-8e61-2f0b7a3d0200";
  dir.Write("state.json",
            absl::StrCat("{\"version\": 1, \"gpus\": {\"", uuid,
                         "\": {\"processes\": [{\"pid\": ", getpid(),
                         ", \"name\": \"trainer\", \"used_mib\": 2048, \"sm_util\": 100}]}}}"));
  const std::string vram_dir = root + "/var/lib/gpulet/vram";
  ASSERT_TRUE(vram::WriteSliceFile(vram_dir, "GPU-test--mem0", 4 * kGiB, uuid,
                                   "nvidia.com/gpu-memory test", 250)
                  .ok());
  const std::string path = vram_dir + "/GPU-test--mem0/slice";
  vram::SliceMap map;
  char msg[256];
  ASSERT_EQ(vram::OpenSlice(path.c_str(), true, &map, msg, sizeof(msg)), vram::SliceError::kOk)
      << msg;
  uint32_t slot = 0;
  ASSERT_EQ(vram::ClaimSlot(&map, getpid(), &slot), vram::SliceError::kOk);

  const std::string config =
      dir.Write("config.yaml",
                "version: v1\ncdi: {specDir: ''}\nlabels: {featuresFile: ''}\n"
                "health: {kmsg: false, xidHistoryFile: ''}\n"
                "metrics: {sampleInterval: 200ms}\n"
                "sharing:\n  memorySlices: {enabled: true, computeShare: true, "
                "hostDir: /var/lib/gpulet/vram}\n");
  const int port = gpulet::testing::FreeLoopbackPort();
  gpulet::testing::DaemonProcess daemon;
  ASSERT_TRUE(daemon.Start(
      {gpulet::testing::GpuletBinary(), "--simulate",
       std::string(GPULET_SOURCE_DIR) + "/sim/fixtures/h200.yaml", "--host-root", root,
       "--sim-state", dir.path() + "/state.json", "serve", "--config", config, "--kubelet-dir",
       dir.path() + "/kubelet", "--metrics-address", absl::StrCat("127.0.0.1:", port)},
      {{"NODE_NAME", "node-a"}, {"TMPDIR", dir.path()}}, dir.path() + "/log"));
  // The library's side: a steady stream of launches, at 100 % of the card by NVML's count.
  EXPECT_NE(gpulet::testing::WaitFor([&] {
              vram::PaceLaunch(map.header, 10000, [] { return uint64_t{0}; });
              // (Read through the mapping: closing another descriptor of the file would drop
              // this process's slot lock, POSIX locks being per process and file.)
              return __atomic_load_n(&map.header->launch_rate, __ATOMIC_RELAXED) > 0;
            }),
            absl::InfiniteDuration())
      << daemon.Log();
  EXPECT_NE(
      gpulet::testing::WaitFor([&] {
        std::optional<gpulet::testing::HttpResponse> m =
            gpulet::testing::Get(port, "/metrics", absl::Seconds(1));
        return m.has_value() && absl::StrContains(m->body, "gpulet_vram_compute_share_ratio{") &&
               absl::StrContains(m->body, "slice=\"GPU-test--mem0\"") &&
               !absl::StrContains(m->body, "gpulet_vram_launch_rate{gpu=\"0\",uuid=\"" + uuid +
                                               "\",slice=\"GPU-test--mem0\",owner="
                                               "\"nvidia.com/gpu-memory test\",hostname=\""
                                               "node-a\"} 0\n");
      }),
      absl::InfiniteDuration())
      << daemon.Log() << Metrics(port);
  vram::CloseSlice(&map);
  daemon.Stop(SIGTERM, absl::Seconds(10));
}

}  // namespace
}  // namespace gpulet::daemon
