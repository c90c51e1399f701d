// `gpulet serve` as a DRA driver, end to end: a real gpulet process (the homelab simulator on
// a copy of its fixture root) registers with the DRA kubelet stand-in
// (testing/fake_dra_kubelet.h) over real sockets, publishes its ResourceSlices to the API
// server stand-in (testing/fake_apiserver.h) through a kubeconfig, prepares a ResourceClaim
// the test allocated, survives kill -9 between prepare and unprepare, and follows an XID 79
// into a device taint and the health stream and back out after recovery.
#include <signal.h>

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/daemon_process.h"
#include "testing/fake_apiserver.h"
#include "testing/fake_dra_kubelet.h"
#include "testing/files.h"
#include "testing/subprocess.h"
#include "testing/wait_for.h"

namespace gpulet::dra {
namespace {

using gpulet::testing::WaitFor;
using nlohmann::json;

#if GPULET_SANITIZED
constexpr absl::Duration kPromptly = absl::Seconds(3);
#else
constexpr absl::Duration kPromptly = absl::Seconds(1);
#endif

constexpr char kDriver[] = "gpu.gpulet.dev";
constexpr char kNode[] = "talos-08";
constexpr char kClaimUid[] = "0b6c2f7e-6d3c-4a8e-9a55-2f1e4b7c9d10";

class DraServeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.Start("serve-token").ok());
    server_.AddNode({{"metadata", {{"name", kNode}, {"uid", "uid-talos-08"}}},
                     {"status", {{"conditions", json::array()}}}});
    kubeconfig_ = dir_.Write("kubeconfig", server_.Kubeconfig("serve-token"));
    root_ = dir_.path() + "/root";
    std::filesystem::copy(
        std::string(GPULET_SOURCE_DIR) + "/sim/fixtures/homelab/root", root_,
        std::filesystem::copy_options::recursive | std::filesystem::copy_options::copy_symlinks);
    state_ = dir_.path() + "/state.json";
    kubelet_dir_ = dir_.path() + "/kubelet";
    std::filesystem::create_directories(kubelet_dir_ + "/device-plugins");
    kubelet_ = std::make_unique<gpulet::testing::FakeDraKubelet>(kubelet_dir_);
    absl::Status started = kubelet_->Start();
    ASSERT_TRUE(started.ok()) << started;
  }
  void TearDown() override {
    daemon_.Stop(SIGTERM, absl::Seconds(10));
    kubelet_->Stop();
    server_.Stop();
  }

  void Serve() {
    const std::string config =
        dir_.Write("config.yaml", absl::StrCat("version: v1\nhealth: {quietPeriod: 2s}\n"
                                               "cluster: {kubeconfig: ",
                                               kubeconfig_, "}\ndra: {enabled: true}\n"));
    ASSERT_TRUE(daemon_.Start({std::string(GPULET_BINARY_DIR) + "/gpulet", "--simulate", "homelab",
                               "--host-root", root_, "--sim-state", state_, "serve", "--config",
                               config, "--kubelet-dir", kubelet_dir_, "--metrics-address", ""},
                              {{"NODE_NAME", kNode}, {"POD_NAME", "gpulet-x7k2p"}},
                              dir_.path() + "/log"));
  }

  // The published device named `name`, or null.
  json Device(const std::string& name) {
    for (const json& slice : server_.ResourceSlices()) {
      if (slice["spec"].value("driver", "") != kDriver) continue;
      for (const json& d : slice["spec"]["devices"]) {
        if (d.value("name", "") == name) return d;
      }
    }
    return nullptr;
  }
  bool Tainted(const std::string& name) {
    json d = Device(name);
    return !d.is_null() && d.contains("taints") && !d["taints"].empty();
  }

  void AllocateClaim(const std::string& device) {
    server_.PutResourceClaim(json::parse(absl::StrCat(R"({
      "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
      "metadata": {"namespace": "ml", "name": "ollama-gpu", "uid": ")",
                                                      kClaimUid, R"("},
      "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.gpulet.dev"}}]}},
      "status": {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": "gpu.gpulet.dev", "pool": "talos-08", "device": ")",
                                                      device, R"("}]}}}})")));
  }

  absl::StatusOr<testing::drapb::NodePrepareResourcesResponse> Prepare() {
    return kubelet_->Prepare(
        kDriver, {gpulet::testing::FakeDraKubelet::MakeClaim("ml", kClaimUid, "ollama-gpu")});
  }

  std::string ClaimSpecPath() const {
    return absl::StrCat(root_, "/var/run/cdi/gpulet.dev-claim_", kClaimUid, ".json");
  }

  gpulet::testing::ScratchDir dir_;
  gpulet::testing::FakeApiServer server_;
  std::unique_ptr<gpulet::testing::FakeDraKubelet> kubelet_;
  gpulet::testing::DaemonProcess daemon_;
  std::string kubeconfig_, root_, state_, kubelet_dir_;
};

TEST_F(DraServeTest, RegistersPublishesPreparesAndSurvivesKill9BeforeUnprepare) {
  Serve();
  ASSERT_TRUE(kubelet_->WaitForRegistrations(1, absl::Seconds(20))) << daemon_.Log();
  std::optional<gpulet::testing::FakeDraKubelet::Plugin> plugin = kubelet_->plugin(kDriver);
  ASSERT_TRUE(plugin.has_value());
  EXPECT_EQ(plugin->version, "v1");
  ASSERT_NE(WaitFor([&] { return !Device("gpu-0").is_null() && !Device("gpu-1").is_null(); }),
            absl::InfiniteDuration())
      << daemon_.Log();
  json gpu1 = Device("gpu-1");
  EXPECT_EQ(gpu1["attributes"]["productName"]["string"], "NVIDIA GeForce RTX 5090");
  EXPECT_EQ(gpu1["attributes"]["driverVersion"]["version"], "570.133.20");
  EXPECT_TRUE(gpu1["capacity"].contains("memory")) << gpu1;

  AllocateClaim("gpu-1");
  absl::StatusOr<testing::drapb::NodePrepareResourcesResponse> prepared = Prepare();
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  const testing::drapb::NodePrepareResourceResponse& answer = prepared->claims().at(kClaimUid);
  ASSERT_EQ(answer.error(), "") << daemon_.Log();
  ASSERT_EQ(answer.devices_size(), 1);
  EXPECT_EQ(answer.devices(0).device_name(), "gpu-1");
  EXPECT_EQ(answer.devices(0).pool_name(), kNode);
  ASSERT_EQ(answer.devices(0).cdi_device_ids_size(), 1);
  EXPECT_EQ(answer.devices(0).cdi_device_ids(0),
            absl::StrCat("gpulet.dev/claim=", kClaimUid, "-gpu-1"));
  EXPECT_TRUE(std::filesystem::exists(ClaimSpecPath()));
  const std::string cdi_id = answer.devices(0).cdi_device_ids(0);

  // kill -9 between prepare and unprepare; the claim is deleted from the API server meanwhile.
  daemon_.Stop(SIGKILL, absl::Seconds(5));
  server_.DeleteResourceClaim("ml", "ollama-gpu");
  Serve();
  ASSERT_TRUE(kubelet_->Restart().ok());
  ASSERT_TRUE(kubelet_->WaitForRegistrations(2, absl::Seconds(20))) << daemon_.Log();
  // The kubelet repeats the prepare: the same answer, from the checkpoint (the claim is gone).
  prepared = Prepare();
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  ASSERT_EQ(prepared->claims().at(kClaimUid).error(), "");
  ASSERT_EQ(prepared->claims().at(kClaimUid).devices_size(), 1);
  EXPECT_EQ(prepared->claims().at(kClaimUid).devices(0).cdi_device_ids(0), cdi_id);
  absl::StatusOr<testing::drapb::NodeUnprepareResourcesResponse> unprepared = kubelet_->Unprepare(
      kDriver, {gpulet::testing::FakeDraKubelet::MakeClaim("ml", kClaimUid, "ollama-gpu")});
  ASSERT_TRUE(unprepared.ok()) << unprepared.status();
  EXPECT_EQ(unprepared->claims().at(kClaimUid).error(), "");
  EXPECT_FALSE(std::filesystem::exists(ClaimSpecPath()));
  // A second unprepare (the kubelet retries) succeeds too.
  unprepared = kubelet_->Unprepare(
      kDriver, {gpulet::testing::FakeDraKubelet::MakeClaim("ml", kClaimUid, "ollama-gpu")});
  ASSERT_TRUE(unprepared.ok());
  EXPECT_EQ(unprepared->claims().at(kClaimUid).error(), "");
}

TEST_F(DraServeTest, AnXid79TaintsTheDeviceWithinASecondAndTheTaintGoesAfterRecovery) {
  Serve();
  ASSERT_TRUE(kubelet_->WaitForRegistrations(1, absl::Seconds(20))) << daemon_.Log();
  ASSERT_NE(WaitFor([&] { return !Device("gpu-1").is_null(); }), absl::InfiniteDuration())
      << daemon_.Log();
  ASSERT_FALSE(Tainted("gpu-1"));

  // The health stream, as the kubelet watches it, on its own thread.
  absl::Mutex mu;
  std::map<std::string, int> last;  // device -> status of the latest message
  bool saw_unhealthy = false;
  absl::Status watched;
  std::thread watch([&] {
    watched = kubelet_->WatchHealth(
        kDriver,
        [&](const ::v1alpha1::NodeWatchResourcesResponse& m) {
          absl::MutexLock lock(&mu);
          for (const auto& d : m.devices()) {
            last[d.device().device_name()] = d.health();
            if (d.device().device_name() == "gpu-1" && d.health() == ::v1alpha1::UNHEALTHY) {
              saw_unhealthy = true;
            }
          }
          return !(saw_unhealthy && last["gpu-1"] == ::v1alpha1::HEALTHY);
        },
        absl::Seconds(30));
  });

  const absl::Time injected = absl::Now();
  auto sim = gpulet::testing::RunProgram({std::string(GPULET_BINARY_DIR) + "/gpulet", "--simulate",
                                          "homelab", "--host-root", root_, "--sim-state", state_,
                                          "sim", "xid", "1", "79"});
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  ASSERT_NE(WaitFor([&] { return Tainted("gpu-1"); }), absl::InfiniteDuration()) << daemon_.Log();
  EXPECT_LE(absl::Now() - injected, kPromptly);
  json taint = Device("gpu-1")["taints"][0];
  EXPECT_EQ(taint["key"], "gpu.gpulet.dev/unhealthy");
  EXPECT_EQ(taint["value"], "xid-79");
  EXPECT_EQ(taint["effect"], "NoSchedule");
  EXPECT_FALSE(Tainted("gpu-0"));
  ASSERT_NE(WaitFor([&] {
              absl::MutexLock lock(&mu);
              return saw_unhealthy;
            }),
            absl::InfiniteDuration());

  // The quiet period (2 s) passes without another XID: the taint goes, the stream says Healthy.
  ASSERT_NE(WaitFor([&] { return !Tainted("gpu-1"); }), absl::InfiniteDuration()) << daemon_.Log();
  watch.join();
  EXPECT_TRUE(watched.ok()) << watched;
  absl::MutexLock lock(&mu);
  EXPECT_EQ(last["gpu-1"], ::v1alpha1::HEALTHY);
  EXPECT_EQ(last["gpu-0"], ::v1alpha1::HEALTHY);
}

}  // namespace
}  // namespace gpulet::dra
