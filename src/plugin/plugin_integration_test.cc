// `gpulet serve --simulate homelab` driven by the kubelet emulator over real unix sockets.
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "plugin/resources.h"
#include "testing/daemon_process.h"
#include "testing/fake_kubelet.h"
#include "testing/free_port.h"
#include "testing/homelab.h"
#include "testing/plugin_rig.h"
#include "testing/subprocess.h"
#include "testing/text_lines.h"
#include "vram/slice_file.h"

namespace gpulet::plugin {
namespace {

namespace fs = std::filesystem;
using ::gpulet::testing::DaemonProcess;
using ::gpulet::testing::FakeKubelet;
using ::gpulet::testing::RunProgram;

using ::gpulet::testing::CountHealthy;
using ::gpulet::testing::kRtx3080;
using ::gpulet::testing::kRtx5090;

// Both homelab GPUs listed, the RTX 5090 alone Unhealthy.
bool OnlyRtx5090Unhealthy(const v1beta1::ListAndWatchResponse& r) {
  for (const auto& d : r.devices()) {
    if ((d.health() == "Unhealthy") != (d.id() == kRtx5090)) return false;
  }
  return r.devices_size() == 2;
}

class PluginIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Short: unix socket paths are limited to 107 bytes.
    static int counter = 0;
    dir_ = fs::temp_directory_path() /
           ("glt-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "kubelet/device-plugins");
    kubelet_ = std::make_unique<FakeKubelet>((dir_ / "kubelet/device-plugins").string());
    ASSERT_TRUE(kubelet_->Start().ok());
  }
  void TearDown() override {
    if (daemon_.Running()) daemon_.Stop(SIGTERM, absl::Seconds(5));
    kubelet_.reset();
    fs::remove_all(dir_);
  }

  std::string State() const { return (dir_ / "sim-state.json").string(); }

  // `gpulet --simulate <fixture> serve` against this test's kubelet directory, no metrics.
  std::vector<std::string> ServeArgv() const {
    return {gpulet::testing::GpuletBinary(),
            "--simulate",
            fixture_,
            "--sim-state",
            State(),
            "serve",
            "--kubelet-dir",
            (dir_ / "kubelet").string(),
            "--metrics-address",
            ""};
  }

  // Starts the daemon with fast health timings and extra flags, and waits for its
  // registration(s).
  void StartDaemon(const std::vector<std::string>& extra, int registrations = 1,
                   const std::map<std::string, std::string>& env = {}) {
    std::vector<std::string> argv = ServeArgv();
    for (const char* flag : {"--probe-interval", "200ms", "--quiet-period", "1s"}) {
      argv.push_back(flag);
    }
    argv.insert(argv.end(), extra.begin(), extra.end());
    ASSERT_TRUE(daemon_.Start(argv, env, (dir_ / "daemon.log").string()));
    ASSERT_TRUE(kubelet_->WaitForRegistrations(registrations, absl::Seconds(10))) << daemon_.Log();
  }

  void Sim(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {
        gpulet::testing::GpuletBinary(), "--simulate", fixture_, "--sim-state", State(), "sim"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = RunProgram(argv);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }

  std::string fixture_ = "homelab";
  fs::path dir_;
  std::unique_ptr<FakeKubelet> kubelet_;
  DaemonProcess daemon_;
};

// The plugin path alone, in process (testing/plugin_rig.h): a store change reaches the
// kubelet's ListAndWatch stream and Allocate at once, with no daemon, NVML or timer between.
TEST(PluginRigTest, StoreChangesReachTheKubelet) {
  testing::PluginRig rig("it");
  ASSERT_TRUE(rig.Start().ok());
  const std::string gpu = testing::PluginRig::Uuid(1);
  auto health_of = [&gpu](const char* want) {
    return [&gpu, want](const v1beta1::ListAndWatchResponse& r) {
      for (const auto& d : r.devices()) {
        if (d.id() == gpu) return d.health() == want;
      }
      return false;
    };
  };
  ASSERT_TRUE(rig.store().UpdateHealth(gpu, [](state::GpuHealth& h) {
    h.Raise("test", {state::HealthState::kUnhealthy, "XID 79: fallen off the bus", "reboot"},
            absl::Now());
  }));
  ASSERT_TRUE(rig.kubelet().WaitForDevices(testing::PluginRig::kResource, health_of("Unhealthy"),
                                           absl::Seconds(5)));
  auto refused = rig.kubelet().Allocate(testing::PluginRig::kResource, {gpu});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("XID 79"), absl::string_view::npos);
  ASSERT_TRUE(
      rig.store().UpdateHealth(gpu, [](state::GpuHealth& h) { h.Clear("test", absl::Now()); }));
  ASSERT_TRUE(rig.kubelet().WaitForDevices(testing::PluginRig::kResource, health_of("Healthy"),
                                           absl::Seconds(5)));
  auto allowed = rig.kubelet().Allocate(testing::PluginRig::kResource, {gpu});
  ASSERT_TRUE(allowed.ok()) << allowed.status();
  EXPECT_EQ(allowed->container_responses(0).envs().at("NVIDIA_VISIBLE_DEVICES"), gpu);
}

TEST_F(PluginIntegrationTest, RegistersAndListsBothHomelabGpus) {
  StartDaemon({});
  auto reqs = kubelet_->requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].version(), "v1beta1");
  EXPECT_EQ(reqs[0].resource_name(), "nvidia.com/gpu");
  EXPECT_EQ(reqs[0].endpoint(), "gpulet-gpu.sock");
  ASSERT_TRUE(kubelet_->WaitForDevices(
      "nvidia.com/gpu", [](const auto& r) { return r.devices_size() == 2 && CountHealthy(r) == 2; },
      absl::Seconds(5)))
      << daemon_.Log();
  auto options = kubelet_->GetOptions("nvidia.com/gpu");
  ASSERT_TRUE(options.ok());
  EXPECT_TRUE(options->get_preferred_allocation_available());
  struct stat st;
  ASSERT_EQ(stat((dir_ / "kubelet/device-plugins/gpulet-gpu.sock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(PluginIntegrationTest, AllocateEnvvarByUuid) {
  StartDaemon({});
  auto r = kubelet_->Allocate("nvidia.com/gpu", {kRtx5090});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->container_responses_size(), 1);
  const auto& c = r->container_responses(0);
  EXPECT_EQ(c.envs().at("NVIDIA_VISIBLE_DEVICES"), kRtx5090);
  EXPECT_EQ(c.envs_size(), 1);
  EXPECT_EQ(c.mounts_size(), 0);
  EXPECT_EQ(c.devices_size(), 0);
  EXPECT_EQ(c.cdi_devices_size(), 0);
}

TEST_F(PluginIntegrationTest, AllocateAllStrategiesByIndexWithDeviceSpecs) {
  StartDaemon({"--device-list-strategy", "envvar,volume-mounts,cdi-annotations,cdi-cri",
               "--device-id-strategy", "index", "--pass-device-specs", "true"});
  auto r = kubelet_->Allocate("nvidia.com/gpu", {kRtx3080, kRtx5090});
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& c = r->container_responses(0);
  // As NVIDIA's plugin: volume-mounts owns NVIDIA_VISIBLE_DEVICES whenever it is on, and its
  // mounts are not read-only.
  EXPECT_EQ(c.envs().at("NVIDIA_VISIBLE_DEVICES"), "/var/run/nvidia-container-devices");
  ASSERT_EQ(c.mounts_size(), 2);
  EXPECT_EQ(c.mounts(0).container_path(), "/var/run/nvidia-container-devices/0");
  EXPECT_EQ(c.mounts(0).host_path(), "/dev/null");
  EXPECT_FALSE(c.mounts(0).read_only());
  EXPECT_EQ(c.mounts(1).container_path(), "/var/run/nvidia-container-devices/1");
  ASSERT_EQ(c.annotations_size(), 1);
  EXPECT_EQ(c.annotations().begin()->first,
            CdiAnnotationKey("cdi.k8s.io/", "nvidia.com/gpu", {kRtx3080, kRtx5090}));
  EXPECT_EQ(c.annotations().begin()->second, "gpulet.dev/gpu=0,gpulet.dev/gpu=1");
  ASSERT_EQ(c.cdi_devices_size(), 2);
  EXPECT_EQ(c.cdi_devices(0).name(), "gpulet.dev/gpu=0");
  EXPECT_EQ(c.cdi_devices(1).name(), "gpulet.dev/gpu=1");
  std::vector<std::string> paths;
  for (const auto& d : c.devices()) {
    paths.push_back(d.container_path());
    EXPECT_EQ(d.host_path(), d.container_path());
    EXPECT_EQ(d.permissions(), "rw");
  }
  // As NVIDIA's plugin: the control nodes the host has first, then the GPUs' nodes.
  ASSERT_GE(paths.size(), 4u);
  EXPECT_EQ(paths[0], "/dev/nvidiactl");
  EXPECT_EQ(paths[1], "/dev/nvidia-uvm");
  EXPECT_EQ(paths[paths.size() - 2], "/dev/nvidia0");
  EXPECT_EQ(paths[paths.size() - 1], "/dev/nvidia1");
}

TEST_F(PluginIntegrationTest, AllocateCdiOnlyHasNoEnv) {
  StartDaemon({"--device-list-strategy", "cdi-cri"});
  auto r = kubelet_->Allocate("nvidia.com/gpu", {kRtx3080});
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& c = r->container_responses(0);
  EXPECT_EQ(c.envs_size(), 0);
  ASSERT_EQ(c.cdi_devices_size(), 1);
  EXPECT_EQ(c.cdi_devices(0).name(), std::string("gpulet.dev/gpu=") + kRtx3080);
}

TEST_F(PluginIntegrationTest, UnknownIdIsRefusedByName) {
  StartDaemon({});
  auto r = kubelet_->Allocate("nvidia.com/gpu", {"GPU-does-not-exist"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("GPU-does-not-exist"), absl::string_view::npos);
}

TEST_F(PluginIntegrationTest, TimeSlicingReplicas) {
  StartDaemon({"--replicas", "4"});
  ASSERT_TRUE(kubelet_->WaitForDevices(
      "nvidia.com/gpu", [](const auto& r) { return r.devices_size() == 8; }, absl::Seconds(5)));
  auto r = kubelet_->Allocate("nvidia.com/gpu",
                              {std::string(kRtx5090) + "::0", std::string(kRtx5090) + "::3"});
  ASSERT_TRUE(r.ok()) << r.status();
  // Two replicas of one GPU are one GPU for the runtime.
  EXPECT_EQ(r->container_responses(0).envs().at("NVIDIA_VISIBLE_DEVICES"), kRtx5090);
  // Preferred allocation spreads replicas over distinct GPUs.
  std::vector<std::string> all;
  for (int i = 0; i < 4; ++i) {
    all.push_back(std::string(kRtx3080) + "::" + std::to_string(i));
    all.push_back(std::string(kRtx5090) + "::" + std::to_string(i));
  }
  auto pref = kubelet_->GetPreferredAllocation("nvidia.com/gpu", all, {}, 2);
  ASSERT_TRUE(pref.ok());
  ASSERT_EQ(pref->container_responses(0).deviceids_size(), 2);
  EXPECT_NE(pref->container_responses(0).deviceids(0).substr(0, 40),
            pref->container_responses(0).deviceids(1).substr(0, 40));
}

TEST_F(PluginIntegrationTest, RenameByDefaultAndFailRequestsGreaterThanOne) {
  std::ofstream((dir_ / "config.yaml").string()) << "version: v1\n"
                                                    "sharing:\n"
                                                    "  timeSlicing:\n"
                                                    "    replicas: 2\n"
                                                    "    renameByDefault: true\n"
                                                    "    failRequestsGreaterThanOne: true\n";
  StartDaemon({"--config", (dir_ / "config.yaml").string()});
  EXPECT_EQ(kubelet_->requests()[0].resource_name(), "nvidia.com/gpu.shared");
  auto r = kubelet_->Allocate("nvidia.com/gpu.shared",
                              {std::string(kRtx3080) + "::0", std::string(kRtx5090) + "::0"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("failRequestsGreaterThanOne"), absl::string_view::npos);
}

TEST_F(PluginIntegrationTest, MemorySlices) {
  StartDaemon({"--memory-slices", "true"}, 2, {{"TMPDIR", dir_.string()}});
  // 10240 MiB → 10 slices, 32607 MiB → 31 slices of 1 GiB.
  ASSERT_TRUE(kubelet_->WaitForDevices(
      "nvidia.com/gpu-memory", [](const auto& r) { return r.devices_size() == 41; },
      absl::Seconds(5)));
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(std::string(kRtx5090) + "::mem" + std::to_string(i));
  auto r = kubelet_->Allocate("nvidia.com/gpu-memory", ids);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->container_responses(0).envs().at("NVIDIA_VISIBLE_DEVICES"), kRtx5090);
  EXPECT_EQ(r->container_responses(0).envs().at("GPULET_MEMORY_LIMIT_MIB"), "4096");
  // The enforcement library is loaded, and the slice file it counts against was written,
  // with the quota (a simulation writes under $TMPDIR, not into the fixture, and removes it
  // when it stops).
  EXPECT_EQ(r->container_responses(0).envs().at("LD_AUDIT"), "/run/gpulet/lib/libgpulet-vram.so");
  ASSERT_EQ(r->container_responses(0).mounts_size(), 2);
  const std::string dir = r->container_responses(0).mounts(1).host_path();
  EXPECT_EQ(dir, "/var/lib/gpulet/vram/" + std::string(kRtx5090) + "--mem0");
  std::string local;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    if (absl::StartsWith(entry.path().filename().string(), "gpulet-sim-slices-")) {
      local = entry.path().string();
    }
  }
  ASSERT_FALSE(local.empty());
  absl::StatusOr<vram::SliceUsage> slice = vram::ReadSliceUsage(local + dir + "/slice");
  ASSERT_TRUE(slice.ok()) << slice.status();
  EXPECT_EQ(slice->quota_bytes, 4096ull << 20);
  EXPECT_EQ(slice->gpu_uuid, kRtx5090);
  EXPECT_TRUE(std::filesystem::exists(local + "/var/lib/gpulet/vram/lib/libgpulet-vram.so"));
  // Slices from two GPUs are refused.
  auto bad = kubelet_->Allocate("nvidia.com/gpu-memory", {std::string(kRtx3080) + "::mem0",
                                                          std::string(kRtx5090) + "::mem0"});
  EXPECT_FALSE(bad.ok());
  // Preferred allocation packs a request onto the GPU that fits it most tightly.
  std::vector<std::string> available;
  for (int i = 0; i < 10; ++i)
    available.push_back(std::string(kRtx3080) + "::mem" + std::to_string(i));
  for (int i = 0; i < 31; ++i)
    available.push_back(std::string(kRtx5090) + "::mem" + std::to_string(i));
  auto pref = kubelet_->GetPreferredAllocation("nvidia.com/gpu-memory", available, {}, 8);
  ASSERT_TRUE(pref.ok());
  ASSERT_EQ(pref->container_responses(0).deviceids_size(), 8);
  for (const auto& id : pref->container_responses(0).deviceids()) {
    EXPECT_EQ(id.substr(0, 40), kRtx3080);
  }
  auto big = kubelet_->GetPreferredAllocation("nvidia.com/gpu-memory", available, {}, 24);
  ASSERT_TRUE(big.ok());
  for (const auto& id : big->container_responses(0).deviceids()) {
    EXPECT_EQ(id.substr(0, 40), kRtx5090);
  }
  daemon_.Stop(SIGTERM, absl::Seconds(5));
  EXPECT_FALSE(std::filesystem::exists(local));
}

TEST_F(PluginIntegrationTest, ASliceFileThatCannotBeWrittenRefusesTheContainer) {
  // Where the slice files go is a regular file: no directory can be made there.
  std::ofstream(dir_ / "not-a-dir") << "x";
  StartDaemon({"--memory-slices", "true"}, 2, {{"TMPDIR", (dir_ / "not-a-dir").string()}});
  ASSERT_TRUE(kubelet_->WaitForDevices(
      "nvidia.com/gpu-memory", [](const auto& r) { return r.devices_size() == 41; },
      absl::Seconds(5)));
  auto r = kubelet_->Allocate("nvidia.com/gpu-memory", {std::string(kRtx5090) + "::mem0"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()),
              ::testing::AllOf(::testing::HasSubstr("not-a-dir"),
                               ::testing::HasSubstr("sharing.memorySlices.enforce: false")));
}

TEST_F(PluginIntegrationTest, LostGpuGoesUnhealthyAndComesBack) {
  StartDaemon({});
  ASSERT_TRUE(kubelet_->WaitForDevices(
      "nvidia.com/gpu", [](const auto& r) { return CountHealthy(r) == 2; }, absl::Seconds(5)));
  Sim({"lose", "1"});
  auto OnlyRtx5090Unhealthy = [](const v1beta1::ListAndWatchResponse& r) {
    for (const auto& d : r.devices()) {
      bool want_unhealthy = d.id() == kRtx5090;
      if ((d.health() == "Unhealthy") != want_unhealthy) return false;
    }
    return r.devices_size() == 2;
  };
  ASSERT_TRUE(kubelet_->WaitForDevices("nvidia.com/gpu", OnlyRtx5090Unhealthy, absl::Seconds(5)))
      << daemon_.Log();
  auto refused = kubelet_->Allocate("nvidia.com/gpu", {kRtx5090});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("fallen off the bus"), absl::string_view::npos);
  Sim({"recover", "1"});
  ASSERT_TRUE(kubelet_->WaitForDevices(
      "nvidia.com/gpu", [](const auto& r) { return CountHealthy(r) == 2; }, absl::Seconds(10)))
      << daemon_.Log();
}

TEST_F(PluginIntegrationTest, NvmlInitFailureAdvertisesEveryGpuUnhealthy) {
  Sim({"driver", "unloaded"});
  StartDaemon({});
  ASSERT_TRUE(kubelet_->WaitForDevices(
      "nvidia.com/gpu", [](const auto& r) { return r.devices_size() == 2 && CountHealthy(r) == 0; },
      absl::Seconds(5)))
      << daemon_.Log();
}

TEST_F(PluginIntegrationTest, SurvivesTwentyKubeletRestartsWithoutLeaks) {
  StartDaemon({});
  ASSERT_TRUE(kubelet_->WaitForDevices(
      "nvidia.com/gpu", [](const auto& r) { return r.devices_size() == 2; }, absl::Seconds(5)));
  // Let start-up settle, then measure.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  int fds_before = daemon_.CountFds();
  int threads_before = daemon_.CountThreads();
  for (int i = 0; i < 20; ++i) {
    absl::Time start = absl::Now();
    ASSERT_TRUE(kubelet_->Restart().ok());
    ASSERT_TRUE(kubelet_->WaitForRegistrations(2 + i, absl::Seconds(5))) << "restart " << i << "\n"
                                                                         << daemon_.Log();
    // At once, not after the 5 s backoff ceiling; ASan+UBSan make every step slower.
    EXPECT_LT(absl::Now() - start, absl::Seconds(GPULET_SANITIZED ? 3 : 1))
        << "restart " << i << "\n"
        << daemon_.Log();
    ASSERT_TRUE(kubelet_->WaitForDevices(
        "nvidia.com/gpu", [](const auto& r) { return r.devices_size() == 2; }, absl::Seconds(5)));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_LE(daemon_.CountFds(), fds_before + 2);
  EXPECT_LE(daemon_.CountThreads(), threads_before + 2);
  // SIGTERM: clean exit, socket removed.
  EXPECT_EQ(daemon_.Stop(SIGTERM, absl::Seconds(5)), 0);
  EXPECT_FALSE(fs::exists(dir_ / "kubelet/device-plugins/gpulet-gpu.sock"));
}

TEST_F(PluginIntegrationTest, WaitsForKubeletThenRegisters) {
  kubelet_->Stop();
  fs::remove(dir_ / "kubelet/device-plugins/kubelet.sock");
  std::vector<std::string> argv = ServeArgv();
  ASSERT_TRUE(daemon_.Start(argv, {}, (dir_ / "daemon.log").string()));
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  EXPECT_TRUE(daemon_.Running()) << daemon_.Log();
  ASSERT_TRUE(kubelet_->Start().ok());
  EXPECT_TRUE(kubelet_->WaitForRegistrations(1, absl::Seconds(2))) << daemon_.Log();
}

// A kubelet that accepts the connection and never answers Register (hung, or a stale process
// holding the socket): SIGTERM still ends gpulet at once rather than after Register's 5 s
// deadline.
TEST_F(PluginIntegrationTest, SigtermDuringARegisterTheKubeletNeverAnswersExitsAtOnce) {
  kubelet_->Stop();
  const std::string sock = (dir_ / "kubelet/device-plugins/kubelet.sock").string();
  fs::remove(sock);
  int hung = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(hung, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(sock.size(), sizeof(addr.sun_path));
  memcpy(addr.sun_path, sock.c_str(), sock.size());
  ASSERT_EQ(bind(hung, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(hung, 16), 0);  // connections queue; none is ever accepted or answered
  ASSERT_TRUE(daemon_.Start(ServeArgv(), {}, (dir_ / "daemon.log").string()));
  // Start to Register takes milliseconds: by now the call is waiting on the silent socket.
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  ASSERT_TRUE(daemon_.Running()) << daemon_.Log();
  const absl::Time signalled = absl::Now();
  EXPECT_EQ(daemon_.Stop(SIGTERM, absl::Seconds(10)), 0) << daemon_.Log();
  EXPECT_LT(absl::Now() - signalled, absl::Seconds(2)) << daemon_.Log();
  EXPECT_EQ(daemon_.Log().find("retrying in"), std::string::npos) << daemon_.Log();
  close(hung);
}

TEST_F(PluginIntegrationTest, BadConfigNamesTheKey) {
  std::ofstream((dir_ / "bad.yaml").string())
      << "version: v1\nplugin:\n  deviceListStrateg: envvar\n";
  auto r = RunProgram({gpulet::testing::GpuletBinary(), "--simulate", "homelab", "serve",
                       "--config", (dir_ / "bad.yaml").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("plugin.deviceListStrateg"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("deviceListStrategy"), std::string::npos) << r.err;

  std::ofstream((dir_ / "bad2.yaml").string())
      << "version: v1\nplugin:\n  deviceIdStrategy: serial\n";
  r = RunProgram(
      {gpulet::testing::GpuletBinary(), "serve", "--config", (dir_ / "bad2.yaml").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("plugin.deviceIdStrategy (allowed: uuid or index)"), std::string::npos)
      << r.err;
}

TEST_F(PluginIntegrationTest, PrintConfigShowsPrecedenceFlagOverEnvOverFile) {
  std::ofstream((dir_ / "c.yaml").string())
      << "version: v1\nresourceName: example.com/file\nsharing:\n  timeSlicing:\n    replicas: 3\n";
  auto r =
      RunProgram({gpulet::testing::GpuletBinary(), "serve", "--config", (dir_ / "c.yaml").string(),
                  "--resource-name", "example.com/flag", "--print-config"},
                 {{"GPULET_RESOURCE_NAME", "example.com/env"}, {"GPULET_REPLICAS", "5"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("resourceName: example.com/flag"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("replicas: 5"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace gpulet::plugin

namespace gpulet::plugin {
namespace {

TEST_F(PluginIntegrationTest, FatalXidTakesGpuOutApplicationXidDoesNot) {
  StartDaemon({});
  ASSERT_TRUE(kubelet_->WaitForDevices(
      "nvidia.com/gpu", [](const auto& r) { return CountHealthy(r) == 2; }, absl::Seconds(5)));
  Sim({"xid", "0", "13"});  // application error: counted, GPU stays in
  Sim({"xid", "1", "79"});  // fallen off the bus: out
  ASSERT_TRUE(kubelet_->WaitForDevices("nvidia.com/gpu", OnlyRtx5090Unhealthy, absl::Seconds(5)))
      << daemon_.Log();
  auto refused = kubelet_->Allocate("nvidia.com/gpu", {kRtx5090});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("XID 79"), absl::string_view::npos) << refused.status();
  // After the quiet period with no new fatal XID, it comes back.
  ASSERT_TRUE(kubelet_->WaitForDevices(
      "nvidia.com/gpu", [](const auto& r) { return CountHealthy(r) == 2; }, absl::Seconds(10)))
      << daemon_.Log();
}

// For a node with one GPU: the kubelet's list holds it with health `want`.
std::function<bool(const v1beta1::ListAndWatchResponse&)> OnlyGpuHealthIs(const char* want) {
  return [want](const v1beta1::ListAndWatchResponse& r) {
    return r.devices_size() == 1 && r.devices(0).health() == want;
  };
}

// Row remapping on an H200: a failed remap takes the GPU out with the RMA action, a pending
// one keeps it schedulable (Degraded is advertised Healthy) until a reset.
TEST_F(PluginIntegrationTest, RowRemapFailureTakesGpuOutPendingDoesNot) {
  fixture_ = "h200";
  StartDaemon({});
  ASSERT_TRUE(
      kubelet_->WaitForDevices("nvidia.com/gpu", OnlyGpuHealthIs("Healthy"), absl::Seconds(5)));
  Sim({"remap", "0", "failed"});
  ASSERT_TRUE(
      kubelet_->WaitForDevices("nvidia.com/gpu", OnlyGpuHealthIs("Unhealthy"), absl::Seconds(5)))
      << daemon_.Log();
  EXPECT_NE(daemon_.Log().find("row remapping failed"), std::string::npos) << daemon_.Log();
  Sim({"remap", "0", "pending"});
  ASSERT_TRUE(
      kubelet_->WaitForDevices("nvidia.com/gpu", OnlyGpuHealthIs("Healthy"), absl::Seconds(5)))
      << daemon_.Log();
  EXPECT_NE(daemon_.Log().find("row remapping pending"), std::string::npos) << daemon_.Log();
}

// The driver's recovery action (`gpulet sim recovery-action`): node reboot takes the GPU
// out of the kubelet's list, drain-and-reset keeps it (Degraded), none clears it.
TEST_F(PluginIntegrationTest, TheDriversRecoveryActionReachesTheKubelet) {
  fixture_ = "h200";
  StartDaemon({});
  ASSERT_TRUE(
      kubelet_->WaitForDevices("nvidia.com/gpu", OnlyGpuHealthIs("Healthy"), absl::Seconds(5)));
  Sim({"recovery-action", "0", "reboot"});
  ASSERT_TRUE(
      kubelet_->WaitForDevices("nvidia.com/gpu", OnlyGpuHealthIs("Unhealthy"), absl::Seconds(5)))
      << daemon_.Log();
  EXPECT_NE(daemon_.Log().find("recovery action 2 (node reboot required)"), std::string::npos)
      << daemon_.Log();
  Sim({"recovery-action", "0", "drain-and-reset"});
  ASSERT_TRUE(
      kubelet_->WaitForDevices("nvidia.com/gpu", OnlyGpuHealthIs("Healthy"), absl::Seconds(5)))
      << daemon_.Log();
  Sim({"recovery-action", "0", "none"});
  EXPECT_TRUE(
      kubelet_->WaitForDevices("nvidia.com/gpu", OnlyGpuHealthIs("Healthy"), absl::Seconds(5)));
}

// The health outputs together, as one daemon shows them: XID 79 takes the RTX 5090 out in
// ListAndWatch and in the metrics with the reboot action; XID 13 on the RTX 3080 is counted
// but leaves it Healthy; then a hung RTX 3080 goes Unhealthy while Allocate and /metrics
// keep answering at once.
TEST_F(PluginIntegrationTest, HealthReachesPluginAndMetricsAndHangBlocksNeither) {
  int port = testing::FreeLoopbackPort();
  std::vector<std::string> argv = ServeArgv();
  argv.back() = absl::StrCat("127.0.0.1:", port);  // --metrics-address
  for (const char* flag : {"--probe-interval", "200ms", "--quiet-period", "60s"}) {
    argv.push_back(flag);
  }
  ASSERT_TRUE(daemon_.Start(argv, {}, (dir_ / "daemon.log").string()));
  ASSERT_TRUE(kubelet_->WaitForDevices(
      "nvidia.com/gpu", [](const auto& r) { return CountHealthy(r) == 2; }, absl::Seconds(10)))
      << daemon_.Log();
  Sim({"xid", "0", "13"});
  Sim({"xid", "1", "79"});
  ASSERT_TRUE(kubelet_->WaitForDevices("nvidia.com/gpu", OnlyRtx5090Unhealthy, absl::Seconds(5)))
      << daemon_.Log();

  httplib::Client http("127.0.0.1", port);
  http.set_connection_timeout(1, 0);
  std::string body;
  for (int i = 0; i < 100; ++i) {
    auto r = http.Get("/metrics");
    if (r) body = r->body;
    if (!testing::LineStartingWith(body, "gpulet_gpu_xid_errors_total{gpu=\"1\"").empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::string info1 = testing::LineStartingWith(body, "gpulet_gpu_health_info{gpu=\"1\"");
  EXPECT_NE(info1.find("state=\"Unhealthy\""), std::string::npos) << info1;
  EXPECT_NE(info1.find("reason=\"XID 79"), std::string::npos) << info1;
  size_t action = info1.find("action=\"");
  ASSERT_NE(action, std::string::npos) << info1;
  EXPECT_NE(info1.find("reboot", action), std::string::npos) << info1;
  EXPECT_NE(body.find("xid=\"79\"} 1\n"), std::string::npos) << body;
  std::string xid13 = testing::LineStartingWith(body, "gpulet_gpu_xid_errors_total{gpu=\"0\"");
  EXPECT_NE(xid13.find("xid=\"13\"} 1"), std::string::npos) << xid13;
  EXPECT_NE(
      testing::LineStartingWith(body, "gpulet_gpu_health_info{gpu=\"0\"").find("state=\"Healthy\""),
      std::string::npos)
      << body;

  // A hung RTX 3080: out of scheduling within about a probe interval plus the hang timeout,
  // and neither the plugin nor the exporter waits for it.
  Sim({"hang", "0", "60"});
  auto both_unhealthy = [](const v1beta1::ListAndWatchResponse& r) {
    return r.devices_size() == 2 && CountHealthy(r) == 0;
  };
  ASSERT_TRUE(kubelet_->WaitForDevices("nvidia.com/gpu", both_unhealthy, absl::Seconds(5)))
      << daemon_.Log();
  for (int i = 0; i < 20; ++i) {
    absl::Time t0 = absl::Now();
    auto refused = kubelet_->Allocate("nvidia.com/gpu", {kRtx5090});
    EXPECT_FALSE(refused.ok());  // Unhealthy: refused, by name, at once
    EXPECT_LT(absl::Now() - t0, absl::Milliseconds(250)) << "Allocate during the hang";
    t0 = absl::Now();
    auto r = http.Get("/metrics");
    ASSERT_TRUE(r);
    EXPECT_LT(absl::Now() - t0, absl::Milliseconds(250)) << "/metrics during the hang";
  }
  Sim({"hang", "0", "0"});
}

// --- MIG: NVIDIA's strategies against the simulated DGX with mixed layouts -----------------

bool CountIs(const v1beta1::ListAndWatchResponse& r, int n) { return r.devices_size() == n; }

TEST_F(PluginIntegrationTest, MigMixedAdvertisesEachProfileAsItsOwnResource) {
  fixture_ = "dgx8-mig";
  // nvidia.com/gpu (GPU 6, MIG disabled) and one resource per profile in use.
  StartDaemon({"--mig-strategy", "mixed"}, 6);
  const std::map<std::string, int> want = {
      {"nvidia.com/gpu", 1},         {"nvidia.com/mig-1g.10gb", 21}, {"nvidia.com/mig-2g.20gb", 6},
      {"nvidia.com/mig-3g.40gb", 1}, {"nvidia.com/mig-4g.40gb", 1},  {"nvidia.com/mig-7g.80gb", 1}};
  for (const auto& entry : want) {
    const std::string& resource = entry.first;
    const int count = entry.second;  // a plain local: lambdas cannot capture bindings in clang
    EXPECT_TRUE(kubelet_->WaitForDevices(
        resource, [count](const auto& r) { return CountIs(r, count) && CountHealthy(r) == count; },
        absl::Seconds(5)))
        << resource << "\n"
        << daemon_.Log();
  }
  // Allocate answers with the MIG UUID the kubelet was given.
  const std::string mig = "MIG-5e0c3b7a-6d21-5f8e-a9c4-1b2d3e4f0003";
  auto a = kubelet_->Allocate("nvidia.com/mig-1g.10gb", {mig});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->container_responses(0).envs().at("NVIDIA_VISIBLE_DEVICES"), mig);
  // The whole GPU without MIG is still an nvidia.com/gpu; a MIG device is not.
  EXPECT_FALSE(kubelet_->Allocate("nvidia.com/gpu", {mig}).ok());
}

TEST_F(PluginIntegrationTest, MigSingleRefusesAMixedLayoutWithAClearError) {
  fixture_ = "dgx8-mig";
  std::vector<std::string> argv = ServeArgv();
  argv.insert(argv.end(), {"--mig-strategy", "single"});
  auto r = RunProgram(argv);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("plugin.migStrategy single: all GPUs on the node must have the same MIG "
                       "mode, but GPU 6 has MIG disabled"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("set plugin.migStrategy to mixed"), std::string::npos) << r.err;
}

TEST_F(PluginIntegrationTest, MigSingleIsRefusedOnReloadAndTheRunningStrategyKept) {
  fixture_ = "dgx8-mig";
  const fs::path config = dir_ / "config.yaml";
  std::ofstream(config) << "version: v1\nplugin:\n  migStrategy: mixed\n";
  StartDaemon({"--config", config.string()}, 6);
  std::ofstream(config, std::ios::trunc) << "version: v1\nplugin:\n  migStrategy: single\n";
  ASSERT_EQ(kill(daemon_.pid(), SIGHUP), 0);
  const std::string want =
      "configuration not reloaded, the running one is kept: plugin.migStrategy single: all GPUs "
      "on the node must have the same MIG mode";
  for (int i = 0; i < 250 && daemon_.Log().find(want) == std::string::npos; ++i) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_NE(daemon_.Log().find(want), std::string::npos) << daemon_.Log();
  // Still mixed: the per-profile resources keep their devices.
  EXPECT_TRUE(kubelet_->WaitForDevices(
      "nvidia.com/mig-2g.20gb", [](const auto& r) { return CountIs(r, 6); }, absl::Seconds(2)));
  EXPECT_TRUE(daemon_.Running());
}

TEST_F(PluginIntegrationTest, MigSingleServesAUniformLayoutUnderTheGpuResource) {
  fixture_ = "h200-mig";
  Sim({"mig", "0", "layout", "1g.18gb,1g.18gb,1g.18gb,1g.18gb,1g.18gb,1g.18gb,1g.18gb"});
  StartDaemon({"--mig-strategy", "single", "--device-id-strategy", "index"});
  ASSERT_TRUE(kubelet_->WaitForDevices(
      "nvidia.com/gpu", [](const auto& r) { return CountIs(r, 7); }, absl::Seconds(5)))
      << daemon_.Log();
  std::vector<std::string> ids;
  ASSERT_TRUE(kubelet_->WaitForDevices(
      "nvidia.com/gpu",
      [&ids](const auto& r) {
        ids.clear();
        for (const auto& d : r.devices()) ids.push_back(d.id());
        return true;
      },
      absl::Seconds(1)));
  for (const std::string& id : ids) EXPECT_EQ(id.rfind("MIG-", 0), 0u) << id;
  auto a = kubelet_->Allocate("nvidia.com/gpu", {ids[2]});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->container_responses(0).envs().at("NVIDIA_VISIBLE_DEVICES"), "0:2");
}

TEST_F(PluginIntegrationTest, AMigLayoutChangeReachesListAndWatchWithinTwoSeconds) {
  fixture_ = "h200-mig";
  // 3g.71gb, 2g.35gb and two 1g.18gb: four resources.
  StartDaemon({"--mig-strategy", "mixed"}, 4);
  ASSERT_TRUE(kubelet_->WaitForDevices(
      "nvidia.com/mig-1g.18gb", [](const auto& r) { return CountIs(r, 2); }, absl::Seconds(5)));
  // An operator destroys the 3g.71gb instance (GPU instance 1) and makes three 1g.18gb.
  // The clock starts once the last of the four `gpulet sim` processes has made the final
  // layout: their own start-up (half a second each under the sanitizers) is not gpulet's.
  Sim({"mig", "0", "destroy", "1"});
  Sim({"mig", "0", "create", "1g.18gb"});
  Sim({"mig", "0", "create", "1g.18gb"});
  Sim({"mig", "0", "create", "1g.18gb"});
  const absl::Time changed = absl::Now();
  ASSERT_TRUE(kubelet_->WaitForDevices(
      "nvidia.com/mig-1g.18gb", [](const auto& r) { return CountIs(r, 5); }, absl::Seconds(2)))
      << daemon_.Log();
  EXPECT_LE(absl::Now() - changed, absl::Seconds(2) + absl::Milliseconds(500));
  // The 3g.71gb resource is gone: its socket is removed, the kubelet drops its devices.
  const fs::path gone = dir_ / "kubelet/device-plugins/gpulet-mig-3g.71gb.sock";
  for (int i = 0; i < 100 && fs::exists(gone); ++i) absl::SleepFor(absl::Milliseconds(20));
  EXPECT_FALSE(fs::exists(gone)) << daemon_.Log();
  // A new profile becomes a new resource, registered with the kubelet.
  const int before = kubelet_->registrations();
  Sim({"mig", "0", "destroy", "2"});  // the 2g.35gb
  Sim({"mig", "0", "create", "1g.35gb"});
  ASSERT_TRUE(kubelet_->WaitForRegistrations(before + 1, absl::Seconds(3))) << daemon_.Log();
  ASSERT_TRUE(kubelet_->WaitForDevices(
      "nvidia.com/mig-1g.35gb", [](const auto& r) { return CountIs(r, 1); }, absl::Seconds(2)));
}

TEST_F(PluginIntegrationTest, AnXidInAGpuInstanceTakesOnlyThatMigDeviceOut) {
  fixture_ = "h200-mig";
  StartDaemon({"--mig-strategy", "mixed"}, 4);
  ASSERT_TRUE(kubelet_->WaitForDevices(
      "nvidia.com/mig-1g.18gb", [](const auto& r) { return CountHealthy(r) == 2; },
      absl::Seconds(5)));
  Sim({"xid", "0", "79", "--gpu-instance", "3"});
  ASSERT_TRUE(kubelet_->WaitForDevices(
      "nvidia.com/mig-1g.18gb",
      [](const auto& r) {
        for (const auto& d : r.devices()) {
          if ((d.health() == "Unhealthy") !=
              (d.id() == "MIG-c1a7e0f2-9b34-5d58-8e61-2f0b7a3d0203")) {
            return false;
          }
        }
        return r.devices_size() == 2;
      },
      absl::Seconds(5)))
      << daemon_.Log();
  // The GPU's other MIG devices keep working.
  EXPECT_TRUE(kubelet_->WaitForDevices(
      "nvidia.com/mig-3g.71gb", [](const auto& r) { return CountHealthy(r) == 1; },
      absl::Seconds(1)));
  // A GPU-level fault (no instance) takes every MIG device out.
  Sim({"xid", "0", "79"});
  EXPECT_TRUE(kubelet_->WaitForDevices(
      "nvidia.com/mig-3g.71gb", [](const auto& r) { return CountHealthy(r) == 0; },
      absl::Seconds(5)))
      << daemon_.Log();
}

// Kubelet 1.37 refuses a registration at an endpoint path it still counts as connected and
// then keeps refusing that path (plugin/plugin_manager.h). A reload that re-registers meets
// it: gpulet serves the resource under a new socket name and the kubelet gets the new list.
TEST_F(PluginIntegrationTest, ARefusedEndpointIsServedUnderANewSocketName) {
  const fs::path config = dir_ / "config.yaml";
  std::ofstream(config) << "version: v1\n";
  StartDaemon({"--config", config.string()});
  kubelet_->RefuseEndpoint("gpulet-gpu.sock");
  std::ofstream(config, std::ios::trunc) << "version: v1\nsharing:\n  timeSlicing:\n"
                                            "    replicas: 4\n";
  ASSERT_EQ(kill(daemon_.pid(), SIGHUP), 0);
  ASSERT_TRUE(kubelet_->WaitForDevices(
      "nvidia.com/gpu", [](const auto& r) { return r.devices_size() == 8; }, absl::Seconds(10)))
      << daemon_.Log();
  EXPECT_EQ(kubelet_->requests().back().endpoint(), "gpulet-gpu.r1.sock");
  EXPECT_NE(daemon_.Log().find("device plugin already connected"), std::string::npos);
  EXPECT_TRUE(fs::exists(dir_ / "kubelet/device-plugins/gpulet-gpu.r1.sock"));
  // The moved server stays: a GPU going out and back changes its devices, not its socket,
  // and nothing registers again.
  const size_t registrations = kubelet_->requests().size();
  Sim({"lose", "1"});
  ASSERT_TRUE(kubelet_->WaitForDevices(
      "nvidia.com/gpu",
      [](const auto& r) {
        int unhealthy = 0;
        for (const auto& d : r.devices()) unhealthy += d.health() == "Unhealthy";
        return unhealthy == 4;
      },
      absl::Seconds(10)))
      << daemon_.Log();
  Sim({"recover", "1"});
  absl::SleepFor(absl::Seconds(1));
  EXPECT_EQ(kubelet_->requests().size(), registrations) << daemon_.Log();
  EXPECT_EQ(daemon_.Log().find("no longer serving"), std::string::npos) << daemon_.Log();
}

}  // namespace
}  // namespace gpulet::plugin
