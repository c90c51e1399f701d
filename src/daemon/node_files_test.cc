#include "daemon/node_files.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "dra/resource_slices.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "plugin/resources.h"
#include "testing/files.h"
#include "testing/homelab.h"
#include "testing/simulated_clock.h"

namespace gpulet::daemon {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr char kH200[] = "GPU-c1a7e0f2-9b34-4d58-8e61-2f0b7a3d0200";
constexpr char kMig3[] = "MIG-c1a7e0f2-9b34-5d58-8e61-2f0b7a3d0203";
constexpr char kMig4[] = "MIG-c1a7e0f2-9b34-5d58-8e61-2f0b7a3d0204";

gpu::MigDeviceInfo Mig(unsigned index, unsigned gi, const std::string& uuid) {
  gpu::MigDeviceInfo m;
  m.index = index;
  m.gpu_instance_id = gi;
  m.profile = "1g.18gb";
  m.uuid = uuid;
  return m;
}

// NodeFiles on a writable copy of a simulator fixture's root, with the daemon's store.
class NodeFilesTest : public ::testing::Test {
 protected:
  void CopyRoot(const std::string& fixture) {
    fs::copy(testing::SimRoot(fixture), root_.path(),
             fs::copy_options::recursive | fs::copy_options::copy_symlinks);
    fs::create_directories(fs::path(root_.path()) / "var/run/cdi");
    config_.cdi.spec_dir = "/var/run/cdi";
    config_.labels.features_file = "";  // the labels file is not what these tests are about
    config_.plugin.device_list_strategy = {config::DeviceListStrategy::kCdiCri};
  }
  // The h200-mig H200 with 1g.18gb MIG devices in GPU instances 3 and 4; only instance 3's
  // capability nodes (minors 30 and 31 in the fixture's mig-minors) exist.
  void H200WithMig() {
    CopyRoot("h200-mig");
    Touch("dev/nvidia-caps/nvidia-cap30");
    Touch("dev/nvidia-caps/nvidia-cap31");
    inventory_ = testing::InventoryFor(
        root_.path(), {testing::GpuIdentity(0, kH200, "0000:18:00.0", 0)}, "570.133.20");
    ASSERT_EQ(inventory_.gpus.size(), 1u);
    inventory_.gpus[0].mig_capable = inventory_.gpus[0].mig_enabled = true;
    inventory_.gpus[0].mig_devices = {Mig(0, 3, kMig3), Mig(1, 4, kMig4)};
    store_.SetInventory(inventory_, clock_.Now());
    config_.plugin.mig_strategy = config::MigStrategy::kMixed;
  }
  void Touch(const std::string& rel) { std::ofstream(fs::path(root_.path()) / rel); }

  // The "cdi-spec" condition of the H200 (nullopt) or one of its MIG devices, if any.
  std::optional<state::HealthCondition> Condition(std::optional<unsigned> gpu_instance_id) const {
    std::shared_ptr<const state::Snapshot> snap = store_.Get();
    const state::DeviceRecord& d = snap->devices[0];
    const state::GpuHealth* h = &d.health;
    if (gpu_instance_id) {
      auto it = d.mig_health.find(*gpu_instance_id);
      if (it == d.mig_health.end()) return std::nullopt;
      h = &it->second;
    }
    auto it = h->conditions.find(kCdiSpecSource);
    if (it == h->conditions.end()) return std::nullopt;
    return it->second;
  }
  // What the device plugin advertises for nvidia.com/mig-1g.18gb, by ID.
  std::map<std::string, bool> Advertised() const {
    std::map<std::string, bool> out;
    for (const plugin::AdvertisedDevice& a :
         plugin::AdvertisedDevices(Mig1g(), config_, *store_.Get())) {
      out[a.id] = a.healthy;
    }
    return out;
  }
  plugin::ResourceSpec Mig1g() const {
    for (const plugin::ResourceSpec& r : plugin::ResourcesFor(config_, store_.Get().get())) {
      if (r.mig_profile == "1g.18gb") return r;
    }
    ADD_FAILURE() << "no 1g.18gb resource";
    return {};
  }
  std::string Spec() const {
    return testing::ReadTextFile(
        (fs::path(root_.path()) / "var/run/cdi" / cdi::SpecFileName(config_.plugin.cdi_kind))
            .string());
  }

  testing::ScratchDir root_;
  HostFs host_{root_.path()};
  testing::SimulatedClock clock_;
  state::DeviceStore store_;
  gpu::Inventory inventory_;
  config::Config config_;
  NodeFiles files_{&host_, &inventory_, false, &store_, &clock_};
};

// The defect `make e2e`'s MIG work found: a MIG device left out of the spec was advertised
// Healthy, and Allocate answered with a CDI name no spec defined.
TEST_F(NodeFilesTest, AMigDeviceTheSpecLeavesOutIsUnhealthyUntilItsNodesAppear) {
  H200WithMig();
  files_.Reconcile(config_);
  EXPECT_THAT(Spec(), HasSubstr(kMig3));
  EXPECT_THAT(Spec(), ::testing::Not(HasSubstr(kMig4)));
  EXPECT_EQ(Condition(3), std::nullopt);
  EXPECT_EQ(Condition(std::nullopt), std::nullopt);  // the GPU itself is fine
  std::optional<state::HealthCondition> left = Condition(4);
  ASSERT_TRUE(left.has_value());
  EXPECT_EQ(left->severity, state::HealthState::kUnhealthy);
  EXPECT_THAT(left->reason, HasSubstr("left out of the CDI spec"));
  EXPECT_THAT(left->reason, HasSubstr("/dev/nvidia-caps/nvidia-cap39"));
  EXPECT_THAT(left->action,
              HasSubstr("nvidia-modprobe -f /proc/driver/nvidia/capabilities/gpu0/mig/gi4/access"));
  EXPECT_EQ(Advertised(), (std::map<std::string, bool>{{kMig3, true}, {kMig4, false}}));
  absl::StatusOr<v1beta1::ContainerAllocateResponse> refused =
      plugin::AllocateContainer(Mig1g(), config_, *store_.Get(), {}, {kMig4});
  ASSERT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("nvidia-cap39"));

  // Nothing changed: the check publishes nothing (the plugin would re-send its list).
  const uint64_t version = store_.Get()->version;
  files_.Check();
  EXPECT_EQ(store_.Get()->version, version);

  // The nodes appear (nvidia-modprobe): the next check puts the device in the spec and
  // clears the condition.
  Touch("dev/nvidia-caps/nvidia-cap39");
  Touch("dev/nvidia-caps/nvidia-cap40");
  files_.Check();
  EXPECT_THAT(Spec(), HasSubstr(kMig4));
  EXPECT_EQ(Condition(4), std::nullopt);
  EXPECT_EQ(Advertised(), (std::map<std::string, bool>{{kMig3, true}, {kMig4, true}}));
  EXPECT_TRUE(plugin::AllocateContainer(Mig1g(), config_, *store_.Get(), {}, {kMig4}).ok());

  // And the other way: a node that goes after a clean spec is seen at the next check.
  fs::remove(fs::path(root_.path()) / "dev/nvidia-caps/nvidia-cap31");
  files_.Check();
  EXPECT_THAT(Spec(), ::testing::Not(HasSubstr(kMig3)));
  ASSERT_TRUE(Condition(3).has_value());
  EXPECT_THAT(Condition(3)->reason, HasSubstr("nvidia-cap31"));
  EXPECT_EQ(Advertised(), (std::map<std::string, bool>{{kMig3, false}, {kMig4, true}}));
}

// With envvar answers the runtime's own hook creates the nodes: the device stays servable,
// and a reload to cdi-cri marks it.
TEST_F(NodeFilesTest, OnlyAnswersNamingCdiDevicesMakeALeftOutDeviceUnhealthy) {
  H200WithMig();
  config_.plugin.device_list_strategy = {config::DeviceListStrategy::kEnvvar};
  files_.Reconcile(config_);
  EXPECT_THAT(Spec(), ::testing::Not(HasSubstr(kMig4)));
  EXPECT_EQ(Condition(4), std::nullopt);
  EXPECT_EQ(Advertised(), (std::map<std::string, bool>{{kMig3, true}, {kMig4, true}}));

  config_.plugin.device_list_strategy = {config::DeviceListStrategy::kEnvvar,
                                         config::DeviceListStrategy::kCdiAnnotations};
  files_.Reconcile(config_);
  ASSERT_TRUE(Condition(4).has_value());

  // No spec written (cdi.specDir ""): gpulet cannot tell, and keeps no condition.
  config_.cdi.spec_dir = "";
  files_.Reconcile(config_);
  EXPECT_EQ(Condition(4), std::nullopt);
}

// DRA hands a claim's container its devices by CDI name only, whatever the device plugin's
// strategy: a device DRA offers that the spec leaves out is tainted in its ResourceSlice, so
// the scheduler allocates no claim to it; one DRA leaves to an envvar plugin is not.
TEST_F(NodeFilesTest, ADeviceDraOffersThatTheSpecLeavesOutIsTaintedInItsSlice) {
  H200WithMig();
  config_.plugin.device_list_strategy = {config::DeviceListStrategy::kEnvvar};
  config_.dra.enabled = true;
  files_.Reconcile(config_);
  ASSERT_TRUE(Condition(4).has_value());
  EXPECT_EQ(Condition(3), std::nullopt);
  dra::SliceOptions options;
  options.driver = "gpu.gpulet.dev";
  options.node_name = "node-a";
  auto taints = [&] {
    std::map<std::string, std::string> out;  // device name -> its taints, as JSON
    for (const nlohmann::json& slice : dra::BuildSliceSpecs(*store_.Get(), options)) {
      for (const nlohmann::json& d : slice["devices"]) {
        out[d["name"].get<std::string>()] = d.value("taints", nlohmann::json::array()).dump();
      }
    }
    return out;
  };
  const gpu::Gpu& h200 = inventory_.gpus[0];
  const std::string mig3 = dra::MigDeviceName(h200, h200.mig_devices[0]);
  const std::string mig4 = dra::MigDeviceName(h200, h200.mig_devices[1]);
  std::map<std::string, std::string> t = taints();
  EXPECT_THAT(t[mig4], HasSubstr(dra::kUnhealthyTaintKey));
  EXPECT_THAT(t[mig4], HasSubstr(R"("value":"unhealthy")"));
  EXPECT_EQ(t[mig3], "[]");

  // DRA offers only another GPU: the plugin serves this one, by envvar.
  config_.dra.gpus = {"7"};
  files_.Reconcile(config_);
  EXPECT_EQ(Condition(4), std::nullopt);

  config_.dra.gpus = {kH200};
  files_.Reconcile(config_);
  ASSERT_TRUE(Condition(4).has_value());
  Touch("dev/nvidia-caps/nvidia-cap39");
  Touch("dev/nvidia-caps/nvidia-cap40");
  files_.Check();
  EXPECT_EQ(Condition(4), std::nullopt);
  EXPECT_EQ(taints()[mig4], "[]");
}

TEST_F(NodeFilesTest, AWholeGpuWithoutItsDeviceNodeIsUnhealthy) {
  CopyRoot("homelab");
  fs::remove(fs::path(root_.path()) / "dev/nvidia1");
  inventory_ = testing::HomelabInventory();
  store_.SetInventory(inventory_, clock_.Now());
  files_.Reconcile(config_);
  std::shared_ptr<const state::Snapshot> snap = store_.Get();
  ASSERT_EQ(snap->devices.size(), 2u);
  EXPECT_EQ(snap->devices[0].health.state, state::HealthState::kHealthy);
  EXPECT_EQ(snap->devices[1].health.state, state::HealthState::kUnhealthy);
  EXPECT_THAT(snap->devices[1].health.reason, HasSubstr("/dev/nvidia1"));
  EXPECT_THAT(snap->devices[1].health.action, HasSubstr("nvidia-modprobe -c 1"));

  Touch("dev/nvidia1");
  files_.Check();
  EXPECT_EQ(store_.Get()->devices[1].health.state, state::HealthState::kHealthy);
}

// When no spec can be generated at all (no GPU has its node), the check keeps the last good
// one on disk for the containers that restart meanwhile.
TEST_F(NodeFilesTest, TheLastGoodSpecIsKeptWhenNoneCanBeGenerated) {
  CopyRoot("homelab");
  inventory_ = testing::HomelabInventory();
  store_.SetInventory(inventory_, clock_.Now());
  files_.Reconcile(config_);
  const std::string good = Spec();
  ASSERT_THAT(good, HasSubstr(testing::kRtx5090));
  for (const char* rel : {"dev/nvidia0", "dev/nvidia1"}) fs::remove(fs::path(root_.path()) / rel);
  fs::remove(fs::path(root_.path()) / "var/run/cdi" / cdi::SpecFileName(config_.plugin.cdi_kind));
  files_.Check();
  EXPECT_EQ(Spec(), good);
}

}  // namespace
}  // namespace gpulet::daemon
