// The real gpulet binary on a host root whose driver needs a newer glibc than gpulet's (the
// talos-glibc root, tests/CMakeLists.txt): `list` and `serve` work through
// gpulet-nvml-worker, and a worker that crashes or hangs leaves the daemon serving. Also the
// daemon with NVML unusable altogether (PCI inventory, gpulet_nvml_up 0, every GPU
// Unhealthy with the reason).
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "testing/daemon_process.h"
#include "testing/fake_kubelet.h"
#include "testing/free_port.h"
#include "testing/homelab.h"
#include "testing/subprocess.h"
#include "testing/text_lines.h"

namespace gpulet::nvml {
namespace {

namespace fs = std::filesystem;
using ::gpulet::testing::DaemonProcess;
using ::gpulet::testing::FakeKubelet;
using ::gpulet::testing::RunProgram;

using ::gpulet::testing::CountHealthy;
using ::gpulet::testing::kRtx3080;
using ::gpulet::testing::kRtx5090;

bool BothHealthy(const v1beta1::ListAndWatchResponse& r) {
  return r.devices_size() == 2 && CountHealthy(r) == 2;
}

// The gpulet-nvml-worker child of `parent`, from /proc; 0 when there is none.
pid_t WorkerOf(pid_t parent) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    std::getline(stat, line);
    size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    std::string state;
    long ppid = 0;
    rest >> state >> ppid;
    if (ppid != parent || state == "Z") continue;
    std::ifstream cmd(entry.path() / "cmdline");
    std::string cmdline((std::istreambuf_iterator<char>(cmd)), std::istreambuf_iterator<char>());
    if (cmdline.find("gpulet-nvml-worker") != std::string::npos) return std::stoi(name);
  }
  return 0;
}

class NvmlWorkerIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (GPULET_SANITIZED) GTEST_SKIP() << "the NVML worker path is tested in the plain build";
    static int counter = 0;
    dir_ = fs::temp_directory_path() /
           ("glw-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "kubelet/device-plugins");
    kubelet_ = std::make_unique<FakeKubelet>((dir_ / "kubelet/device-plugins").string());
    ASSERT_TRUE(kubelet_->Start().ok());
    env_ = {{"GPULET_SIM_FIXTURE", GPULET_SOURCE_DIR "/sim/fixtures/homelab.yaml"},
            {"GPULET_SIM_STATE", (dir_ / "state.json").string()}};
  }
  void TearDown() override {
    if (daemon_.Running()) daemon_.Stop(SIGTERM, absl::Seconds(5));
    kubelet_.reset();
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // `gpulet serve` with metrics on a free port and fast health timings.
  void StartDaemon(std::vector<std::string> front) {
    port_ = testing::FreeLoopbackPort();
    std::vector<std::string> argv = {gpulet::testing::GpuletBinary()};
    argv.insert(argv.end(), front.begin(), front.end());
    for (const std::string& a :
         {std::string("serve"), std::string("--kubelet-dir"), (dir_ / "kubelet").string(),
          std::string("--metrics-address"), absl::StrCat("127.0.0.1:", port_),
          std::string("--probe-interval"), std::string("200ms"), std::string("--quiet-period"),
          std::string("1s")}) {
      argv.push_back(a);
    }
    ASSERT_TRUE(daemon_.Start(argv, env_, (dir_ / "daemon.log").string()));
    ASSERT_TRUE(kubelet_->WaitForRegistrations(1, absl::Seconds(20))) << daemon_.Log();
  }

  // Waits until both GPUs are listed Healthy within `timeout`.
  bool WaitBothHealthy(absl::Duration timeout) {
    return kubelet_->WaitForDevices("nvidia.com/gpu", BothHealthy, timeout);
  }

  // Serves on the worker's root until both GPUs are Healthy; the worker's pid (0 if none).
  pid_t StartOnWorkerRoot() {
    StartDaemon({"--host-root", GPULET_WORKER_ROOT});
    if (!WaitBothHealthy(absl::Seconds(10))) return 0;
    return WorkerOf(daemon_.pid());
  }

  // /metrics and Allocate both answer promptly (Allocate may refuse an Unhealthy GPU).
  void ExpectServing() {
    httplib::Client http("127.0.0.1", port_);
    http.set_connection_timeout(1, 0);
    http.set_read_timeout(2, 0);
    absl::Time t0 = absl::Now();
    auto r = http.Get("/metrics");
    ASSERT_TRUE(r) << daemon_.Log();
    EXPECT_EQ(r->status, 200);
    EXPECT_NE(r->body.find("gpulet_nvml_up"), std::string::npos);
    EXPECT_LT(absl::Now() - t0, absl::Seconds(1)) << "/metrics";
    t0 = absl::Now();
    (void)kubelet_->Allocate("nvidia.com/gpu", {kRtx3080});
    EXPECT_LT(absl::Now() - t0, absl::Seconds(1)) << "Allocate";
  }

  fs::path dir_;
  std::map<std::string, std::string> env_;
  int port_ = 0;
  std::unique_ptr<FakeKubelet> kubelet_;
  DaemonProcess daemon_;
};

TEST_F(NvmlWorkerIntegrationTest, ListReadsBothGpusThroughTheWorker) {
  auto r = RunProgram({gpulet::testing::GpuletBinary(), "--host-root", GPULET_WORKER_ROOT, "list"},
                      env_);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("NVIDIA GeForce RTX 3080"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NVIDIA GeForce RTX 5090"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(kRtx5090), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("in gpulet-nvml-worker, with the driver's own glibc 9.99 at "),
            std::string::npos)
      << r.out;

  auto doctor = RunProgram(
      {gpulet::testing::GpuletBinary(), "--host-root", GPULET_WORKER_ROOT, "doctor"}, env_);
  EXPECT_NE(doctor.out.find("gpulet-nvml-worker"), std::string::npos) << doctor.out << doctor.err;
}

TEST_F(NvmlWorkerIntegrationTest, ServeSurvivesAWorkerCrash) {
  const pid_t worker = StartOnWorkerRoot();
  ASSERT_GT(worker, 0) << daemon_.Log();
  ASSERT_EQ(kill(worker, SIGKILL), 0);
  ASSERT_TRUE(kubelet_->WaitForDevices(
      "nvidia.com/gpu", [](const auto& r) { return CountHealthy(r) < 2; }, absl::Seconds(5)))
      << daemon_.Log();
  ExpectServing();
  ASSERT_TRUE(WaitBothHealthy(absl::Seconds(15))) << daemon_.Log();
  const pid_t again = WorkerOf(daemon_.pid());
  EXPECT_GT(again, 0);
  EXPECT_NE(again, worker);
  EXPECT_TRUE(daemon_.Running());
  EXPECT_NE(daemon_.Log().find("was killed by SIGKILL"), std::string::npos) << daemon_.Log();
}

TEST_F(NvmlWorkerIntegrationTest, ServeSurvivesAHungWorker) {
  const pid_t worker = StartOnWorkerRoot();
  ASSERT_GT(worker, 0) << daemon_.Log();
  ASSERT_EQ(kill(worker, SIGSTOP), 0);
  ASSERT_TRUE(kubelet_->WaitForDevices(
      "nvidia.com/gpu", [](const auto& r) { return CountHealthy(r) == 0; }, absl::Seconds(8)))
      << daemon_.Log();
  ExpectServing();
  ASSERT_TRUE(WaitBothHealthy(absl::Seconds(20))) << daemon_.Log();
  EXPECT_NE(WorkerOf(daemon_.pid()), worker);
  EXPECT_NE(daemon_.Log().find("did not answer a ping"), std::string::npos) << daemon_.Log();
}

// NVML unusable altogether: the daemon still starts from the PCI inventory, exports
// gpulet_nvml_up 0 and advertises every GPU Unhealthy with the reason.
TEST_F(NvmlWorkerIntegrationTest, NvmlUnusableStillServesPciGpusUnhealthy) {
  std::ofstream(dir_ / "state.json") << R"({"version": 1, "driver_not_loaded": true})";
  StartDaemon({"--simulate", "homelab", "--sim-state", (dir_ / "state.json").string()});
  ASSERT_TRUE(kubelet_->WaitForDevices(
      "nvidia.com/gpu", [](const auto& r) { return r.devices_size() == 2 && CountHealthy(r) == 0; },
      absl::Seconds(10)))
      << daemon_.Log();
  httplib::Client http("127.0.0.1", port_);
  http.set_connection_timeout(1, 0);
  std::string body;
  for (int i = 0; i < 100 && body.find("gpulet_gpu_health_info{") == std::string::npos; ++i) {
    auto r = http.Get("/metrics");
    if (r) body = r->body;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::string up = testing::LineStartingWith(body, "gpulet_nvml_up{");
  EXPECT_TRUE(absl::EndsWith(up, " 0")) << up;
  std::string info = testing::LineStartingWith(body, "gpulet_gpu_health_info{");
  EXPECT_NE(info.find("state=\"Unhealthy\""), std::string::npos) << info;
  EXPECT_NE(info.find("reason=\""), std::string::npos) << info;
  EXPECT_EQ(info.find("reason=\"\""), std::string::npos) << info;
}

}  // namespace
}  // namespace gpulet::nvml
