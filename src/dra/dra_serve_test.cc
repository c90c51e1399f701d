// `gpulet serve` as a DRA driver, end to end: a real gpulet process (the homelab simulator on
// a copy of its fixture root) registers with the DRA kubelet stand-in
// (testing/fake_dra_kubelet.h) over real sockets, publishes its ResourceSlices to the API
// server stand-in (testing/fake_apiserver.h) through a kubeconfig, prepares a ResourceClaim
// the test allocated, survives kill -9 between prepare and unprepare, and follows an XID 79
// into a device taint and the health stream and back out after recovery. Two gpulet processes
// on one node (dra.rollingUpdate, POD_UID) hand the driver over as a DaemonSet rolling update
// with maxSurge does: no call fails in between, and the new pod unprepares the old pod's
// claims; a SIGKILLed pod's sockets are cleaned up by the next.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "dra/registration.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/daemon_process.h"
#include "testing/fake_apiserver.h"
#include "testing/fake_dra_kubelet.h"
#include "testing/files.h"
#include "testing/homelab.h"
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
constexpr char kOtherClaimUid[] = "5d0f9a41-27c3-4b8e-8f6a-93e1c2b7a4d5";
// The pod UIDs (metadata.uid) of the old and the new gpulet pod of a rolling update.
constexpr char kPodA[] = "a1a1a1a1-0000-4000-8000-0000000000a1";
constexpr char kPodB[] = "b2b2b2b2-0000-4000-8000-0000000000b2";

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
    // Short: a pod UID in the socket names leaves little of the 107 bytes a unix socket
    // address holds (/var/lib/kubelet in a real node).
    kubelet_dir_ = dir_.path() + "/k";
    std::filesystem::create_directories(kubelet_dir_ + "/device-plugins");
    kubelet_ = std::make_unique<gpulet::testing::FakeDraKubelet>(kubelet_dir_);
    absl::Status started = kubelet_->Start();
    ASSERT_TRUE(started.ok()) << started;
  }
  void TearDown() override {
    daemon_.Stop(SIGTERM, absl::Seconds(10));
    new_pod_.Stop(SIGTERM, absl::Seconds(10));
    kubelet_->Stop();
    server_.Stop();
  }

  // One gpulet pod on the node, as `daemon` (daemon_ by default). With `pod_uid`, the config
  // says dra.rollingUpdate and the environment has POD_UID (unless `pass_uid` is false), as
  // deploy/dra sets them. Every pod shares the kubelet directory, host root and checkpoint.
  void Serve(gpulet::testing::DaemonProcess* daemon = nullptr, const std::string& pod_uid = "",
             bool pass_uid = true) {
    if (daemon == nullptr) daemon = &daemon_;
    const std::string name = pod_uid.empty() ? "" : absl::StrCat("-", pod_uid.substr(0, 2));
    const std::string config = dir_.Write(
        absl::StrCat("config", name, ".yaml"),
        absl::StrCat("version: v1\nhealth: {quietPeriod: 2s}\ncluster: {kubeconfig: ", kubeconfig_,
                     "}\ndra: {enabled: true, rollingUpdate: ", pod_uid.empty() ? "false" : "true",
                     "}\n"));
    std::map<std::string, std::string> env = {{"NODE_NAME", kNode},
                                              {"POD_NAME", absl::StrCat("gpulet-x7k2p", name)}};
    if (!pod_uid.empty() && pass_uid) env["POD_UID"] = pod_uid;
    ASSERT_TRUE(daemon->Start({gpulet::testing::GpuletBinary(), "--simulate", "homelab",
                               "--host-root", root_, "--sim-state", state_, "serve", "--config",
                               config, "--kubelet-dir", kubelet_dir_, "--metrics-address", ""},
                              env, absl::StrCat(dir_.path(), "/log", name)));
  }

  DraPaths PathsOf(const std::string& pod_uid) const {
    return DraPaths::For(kubelet_dir_, kDriver, pod_uid);
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

  void AllocateClaim(const std::string& device, const std::string& name = "ollama-gpu",
                     const std::string& uid = kClaimUid) {
    server_.PutResourceClaim(json::parse(absl::StrCat(R"({
      "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
      "metadata": {"namespace": "ml", "name": ")",
                                                      name, R"(", "uid": ")", uid, R"("},
      "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.gpulet.dev"}}]}},
      "status": {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": "gpu.gpulet.dev", "pool": "talos-08", "device": ")",
                                                      device, R"("}]}}}})")));
  }

  absl::StatusOr<testing::drapb::NodePrepareResourcesResponse> Prepare() {
    return kubelet_->Prepare(
        kDriver, {gpulet::testing::FakeDraKubelet::MakeClaim("ml", kClaimUid, "ollama-gpu")});
  }

  std::string ClaimSpecPath(const std::string& uid = kClaimUid) const {
    return absl::StrCat(root_, "/var/run/cdi/gpulet.dev-claim_", uid, ".json");
  }

  gpulet::testing::ScratchDir dir_;
  gpulet::testing::FakeApiServer server_;
  std::unique_ptr<gpulet::testing::FakeDraKubelet> kubelet_;
  gpulet::testing::DaemonProcess daemon_;
  gpulet::testing::DaemonProcess new_pod_;  // the second pod of a rolling update
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
  auto sim = gpulet::testing::RunProgram({gpulet::testing::GpuletBinary(), "--simulate", "homelab",
                                          "--host-root", root_, "--sim-state", state_, "sim", "xid",
                                          "1", "79"});
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

// A DaemonSet rolling update with maxSurge: 1 on one node. Pod A serves and prepares a claim;
// pod B starts beside it, registers under its own socket names and becomes the instance the
// kubelet calls; A gets SIGTERM and leaves, removing only its own sockets. A thread keeps
// preparing another claim every 20 ms throughout: no call finds the driver unregistered or
// fails. B then unprepares the claim A prepared (from the shared checkpoint).
TEST_F(DraServeTest, ARollingUpdateHandsOverWithoutAGap) {
  Serve(&daemon_, kPodA);
  const DraPaths a = PathsOf(kPodA), b = PathsOf(kPodB);
  ASSERT_TRUE(kubelet_->WaitForInUse(kDriver, a.registration_socket, absl::Seconds(20)))
      << daemon_.Log();
  ASSERT_NE(WaitFor([&] { return !Device("gpu-0").is_null() && !Device("gpu-1").is_null(); }),
            absl::InfiniteDuration())
      << daemon_.Log();
  AllocateClaim("gpu-1");
  absl::StatusOr<testing::drapb::NodePrepareResourcesResponse> prepared = Prepare();
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  ASSERT_EQ(prepared->claims().at(kClaimUid).error(), "") << daemon_.Log();
  ASSERT_TRUE(std::filesystem::exists(ClaimSpecPath()));

  AllocateClaim("gpu-0", "anpr-gpu", kOtherClaimUid);
  const auto other = gpulet::testing::FakeDraKubelet::MakeClaim("ml", kOtherClaimUid, "anpr-gpu");
  std::atomic<bool> stop{false};
  std::atomic<int> calls{0};
  absl::Mutex mu;
  std::vector<std::string> failures;
  std::thread kubelet_calls([&] {
    while (!stop.load()) {
      absl::StatusOr<testing::drapb::NodePrepareResourcesResponse> r =
          kubelet_->Prepare(kDriver, {other});
      std::string failure =
          !r.ok() ? std::string(r.status().message()) : r->claims().at(kOtherClaimUid).error();
      calls.fetch_add(1);
      if (!failure.empty()) {
        absl::MutexLock lock(&mu);
        failures.push_back(std::move(failure));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  auto stop_calls = [&] {
    stop.store(true);
    if (kubelet_calls.joinable()) kubelet_calls.join();
  };

  Serve(&new_pod_, kPodB);
  ASSERT_TRUE(kubelet_->WaitForInUse(kDriver, b.registration_socket, absl::Seconds(20)))
      << new_pod_.Log();
  EXPECT_EQ(kubelet_->instances(kDriver).size(), 2u);
  const int calls_before_a_left = calls.load();
  EXPECT_EQ(daemon_.Stop(SIGTERM, absl::Seconds(10)), 0) << daemon_.Log();
  // A removed its own sockets, not B's; the kubelet forgot A and kept B.
  EXPECT_FALSE(std::filesystem::exists(a.registration_socket));
  EXPECT_FALSE(std::filesystem::exists(a.dra_socket));
  EXPECT_TRUE(std::filesystem::exists(b.registration_socket));
  EXPECT_TRUE(std::filesystem::exists(b.dra_socket));
  EXPECT_NE(WaitFor([&] { return kubelet_->instances(kDriver).size() == 1; }),
            absl::InfiniteDuration());
  // Calls after A left, to B alone.
  const int calls_after = calls.load() + 10;
  EXPECT_NE(WaitFor([&] { return calls.load() >= calls_after; }), absl::InfiniteDuration());
  stop_calls();
  EXPECT_GT(calls_before_a_left, 0);
  {
    absl::MutexLock lock(&mu);
    EXPECT_TRUE(failures.empty()) << failures.size() << " of " << calls.load()
                                  << " calls failed, the first: " << failures.front();
  }
  ASSERT_TRUE(kubelet_->plugin(kDriver).has_value());
  EXPECT_EQ(kubelet_->plugin(kDriver)->socket, b.registration_socket);

  // B unprepares the claim A prepared: A's record, in the shared checkpoint.
  absl::StatusOr<testing::drapb::NodeUnprepareResourcesResponse> unprepared = kubelet_->Unprepare(
      kDriver, {gpulet::testing::FakeDraKubelet::MakeClaim("ml", kClaimUid, "ollama-gpu")});
  ASSERT_TRUE(unprepared.ok()) << unprepared.status();
  EXPECT_EQ(unprepared->claims().at(kClaimUid).error(), "") << new_pod_.Log();
  EXPECT_FALSE(std::filesystem::exists(ClaimSpecPath())) << new_pod_.Log();
  EXPECT_TRUE(std::filesystem::exists(ClaimSpecPath(kOtherClaimUid)));

  // The device plugin's sockets (fixed names) went to B at its start; A left them to B
  // instead of taking them back, and B never had to serve them again.
  EXPECT_NE(daemon_.Log().find("took nvidia.com/gpu over): leaving it"), std::string::npos)
      << daemon_.Log();
  EXPECT_EQ(new_pod_.Log().find("was removed (kubelet restart?)"), std::string::npos)
      << new_pod_.Log();
}

// A pod killed with SIGKILL cannot remove its sockets; the next pod finds nobody listening on
// them (connect() refused) and removes them, so the kubelet forgets the dead instance.
TEST_F(DraServeTest, AStaleSocketOfAKilledPodIsRemovedByTheNext) {
  Serve(&daemon_, kPodA);
  const DraPaths a = PathsOf(kPodA), b = PathsOf(kPodB);
  ASSERT_TRUE(kubelet_->WaitForInUse(kDriver, a.registration_socket, absl::Seconds(20)))
      << daemon_.Log();
  daemon_.Stop(SIGKILL, absl::Seconds(5));
  ASSERT_TRUE(std::filesystem::exists(a.registration_socket));
  ASSERT_TRUE(std::filesystem::exists(a.dra_socket));

  Serve(&new_pod_, kPodB);
  ASSERT_TRUE(kubelet_->WaitForInUse(kDriver, b.registration_socket, absl::Seconds(20)))
      << new_pod_.Log();
  EXPECT_FALSE(std::filesystem::exists(a.registration_socket)) << new_pod_.Log();
  EXPECT_FALSE(std::filesystem::exists(a.dra_socket)) << new_pod_.Log();
  EXPECT_NE(WaitFor([&] { return kubelet_->instances(kDriver).size() == 1; }),
            absl::InfiniteDuration());
  EXPECT_NE(new_pod_.Log().find(absl::StrCat("removed ", a.registration_socket)), std::string::npos)
      << new_pod_.Log();
}

TEST_F(DraServeTest, RollingUpdateWithoutThePodUidIsRefusedAtStart) {
  Serve(&daemon_, kPodA, /*pass_uid=*/false);
  ASSERT_NE(WaitFor([&] { return !daemon_.Running(); }), absl::InfiniteDuration()) << daemon_.Log();
  EXPECT_NE(daemon_.Stop(SIGTERM, absl::Seconds(1)), 0);
  EXPECT_NE(daemon_.Log().find("dra.rollingUpdate"), std::string::npos) << daemon_.Log();
  EXPECT_NE(daemon_.Log().find("downward API"), std::string::npos) << daemon_.Log();
}

}  // namespace
}  // namespace gpulet::dra
