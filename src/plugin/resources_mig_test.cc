// The device plugin's MIG rules (NVIDIA's --mig-strategy none, single, mixed) as pure
// functions over hand-built snapshots: which resources a layout calls for, which devices each
// advertises, which layouts `single` refuses and what Allocate answers for MIG devices.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "plugin/resources.h"

namespace gpulet::plugin {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

gpu::MigDeviceInfo Mig(unsigned index, unsigned gi, const std::string& profile, unsigned slices) {
  gpu::MigDeviceInfo m;
  m.index = index;
  m.uuid = "MIG-" + std::to_string(gi) + "-" + profile;
  m.gpu_instance_id = gi;
  m.gpu_instance_slices = m.compute_instance_slices = slices;
  m.memory_bytes = uint64_t{slices} * 10 << 30;
  m.profile = profile;
  return m;
}

state::DeviceRecord Gpu(unsigned index, std::vector<gpu::MigDeviceInfo> migs, bool enabled = true) {
  state::DeviceRecord d;
  d.gpu.index = index;
  d.gpu.uuid = "GPU-" + std::to_string(index);
  d.gpu.bus_id = "0000:0" + std::to_string(index + 1) + ":00.0";
  d.gpu.minor = index;
  d.gpu.in_nvml = d.gpu.on_pci = true;
  d.gpu.mig_capable = true;
  d.gpu.mig_enabled = enabled;
  for (gpu::MigDeviceInfo& m : migs)
    m.uuid = "MIG-" + std::to_string(index) + "-" + std::to_string(m.gpu_instance_id);
  d.gpu.mig_devices = std::move(migs);
  return d;
}

// GPU 0: two 1g.10gb and a 2g.20gb; GPU 1: three 2g.20gb; GPU 2: MIG disabled.
state::Snapshot Mixed() {
  state::Snapshot s;
  s.nvml_ok = true;
  s.devices = {Gpu(0, {Mig(0, 7, "1g.10gb", 1), Mig(1, 8, "1g.10gb", 1), Mig(2, 3, "2g.20gb", 2)}),
               Gpu(1, {Mig(0, 1, "2g.20gb", 2), Mig(1, 2, "2g.20gb", 2), Mig(2, 3, "2g.20gb", 2)}),
               Gpu(2, {}, /*enabled=*/false)};
  return s;
}

state::Snapshot Uniform() {
  state::Snapshot s;
  s.nvml_ok = true;
  s.devices = {Gpu(0, {Mig(0, 1, "3g.40gb", 3), Mig(1, 2, "3g.40gb", 3)}),
               Gpu(1, {Mig(0, 1, "3g.40gb", 3), Mig(1, 2, "3g.40gb", 3)})};
  return s;
}

config::Config Strategy(config::MigStrategy strategy) {
  config::Config c;
  c.plugin.mig_strategy = strategy;
  return c;
}

std::vector<std::string> Names(const std::vector<ResourceSpec>& specs) {
  std::vector<std::string> out;
  for (const ResourceSpec& r : specs) out.push_back(r.name);
  return out;
}

std::vector<std::string> Ids(const std::vector<AdvertisedDevice>& devices) {
  std::vector<std::string> out;
  for (const AdvertisedDevice& d : devices) out.push_back(d.id);
  return out;
}

const ResourceSpec* Find(const std::vector<ResourceSpec>& specs, const std::string& name) {
  for (const ResourceSpec& r : specs) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

TEST(MigResourcesTest, NoneIgnoresMigAndAdvertisesEveryWholeGpu) {
  state::Snapshot s = Mixed();
  config::Config c = Strategy(config::MigStrategy::kNone);
  std::vector<ResourceSpec> specs = ResourcesFor(c, &s);
  EXPECT_THAT(Names(specs), ElementsAre("nvidia.com/gpu"));
  EXPECT_THAT(Ids(AdvertisedDevices(specs[0], c, s)), ElementsAre("GPU-0", "GPU-1", "GPU-2"));
  EXPECT_TRUE(MigLayoutError(c, s).ok());
}

TEST(MigResourcesTest, MixedAdvertisesEachProfileAsItsOwnResourceWithItsCount) {
  state::Snapshot s = Mixed();
  config::Config c = Strategy(config::MigStrategy::kMixed);
  std::vector<ResourceSpec> specs = ResourcesFor(c, &s);
  EXPECT_THAT(Names(specs),
              ElementsAre("nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb"));
  EXPECT_EQ(Find(specs, "nvidia.com/mig-1g.10gb")->socket_name, "gpulet-mig-1g.10gb.sock");
  // Whole GPUs: only the one without MIG.
  EXPECT_THAT(Ids(AdvertisedDevices(specs[0], c, s)), ElementsAre("GPU-2"));
  EXPECT_THAT(Ids(AdvertisedDevices(*Find(specs, "nvidia.com/mig-1g.10gb"), c, s)),
              ElementsAre("MIG-0-7", "MIG-0-8"));
  EXPECT_EQ(AdvertisedDevices(*Find(specs, "nvidia.com/mig-2g.20gb"), c, s).size(), 4u);
  // Time-slicing applies to MIG devices too.
  c.sharing.time_slicing.replicas = 2;
  EXPECT_THAT(Ids(AdvertisedDevices(*Find(specs, "nvidia.com/mig-1g.10gb"), c, s)),
              ElementsAre("MIG-0-7::0", "MIG-0-7::1", "MIG-0-8::0", "MIG-0-8::1"));
  // The resource set follows the layout: without MIG anywhere, whole GPUs only.
  EXPECT_THAT(Names(ResourcesFor(c, nullptr)), ElementsAre("nvidia.com/gpu"));
}

// docs/mig.md: "memory slices are for GPUs without MIG only".
TEST(MigResourcesTest, MemorySlicesSkipGpusInMigModeUnderAMigStrategy) {
  state::Snapshot s = Mixed();
  for (state::DeviceRecord& d : s.devices) d.gpu.memory_total_bytes = uint64_t{4} << 30;
  config::Config c = Strategy(config::MigStrategy::kMixed);
  c.sharing.memory_slices.enabled = true;
  c.sharing.memory_slices.slice_mib = 2048;
  std::vector<ResourceSpec> specs = ResourcesFor(c, &s);
  const ResourceSpec* mem = Find(specs, "nvidia.com/gpu-memory");
  ASSERT_NE(mem, nullptr);
  EXPECT_EQ(mem->kind, ResourceKind::kMemorySlice);
  // Only GPU 2 (MIG disabled) is sliced: 4 GiB in 2 GiB slices.
  std::vector<AdvertisedDevice> slices = AdvertisedDevices(*mem, c, s);
  ASSERT_EQ(slices.size(), 2u);
  for (const AdvertisedDevice& a : slices) {
    EXPECT_EQ(a.gpu, 2u);
    EXPECT_THAT(a.id, HasSubstr("GPU-2"));
  }
  // Under `single` too: with every GPU in MIG mode there is nothing to slice.
  state::Snapshot uniform = Uniform();
  for (state::DeviceRecord& d : uniform.devices) d.gpu.memory_total_bytes = uint64_t{4} << 30;
  c.plugin.mig_strategy = config::MigStrategy::kSingle;
  const std::vector<ResourceSpec> single = ResourcesFor(c, &uniform);
  mem = Find(single, "nvidia.com/gpu-memory");
  ASSERT_NE(mem, nullptr);
  EXPECT_TRUE(AdvertisedDevices(*mem, c, uniform).empty());
  // Without a MIG strategy every GPU is sliced, MIG or not.
  c.plugin.mig_strategy = config::MigStrategy::kNone;
  const std::vector<ResourceSpec> none = ResourcesFor(c, &s);
  mem = Find(none, "nvidia.com/gpu-memory");
  ASSERT_NE(mem, nullptr);
  EXPECT_EQ(AdvertisedDevices(*mem, c, s).size(), 6u);
}

// docs/mig.md: "The resource name domain follows `resourceName`".
TEST(MigResourcesTest, MigResourceDomainFollowsResourceName) {
  state::Snapshot s = Mixed();
  config::Config c = Strategy(config::MigStrategy::kMixed);
  c.resource_name = "example.com/gpu";
  std::vector<ResourceSpec> specs = ResourcesFor(c, &s);
  EXPECT_THAT(Names(specs),
              ElementsAre("example.com/gpu", "example.com/mig-1g.10gb", "example.com/mig-2g.20gb"));
  EXPECT_EQ(Find(specs, "example.com/mig-1g.10gb")->socket_name, "gpulet-mig-1g.10gb.sock");
  EXPECT_THAT(Ids(AdvertisedDevices(*Find(specs, "example.com/mig-1g.10gb"), c, s)),
              ElementsAre("MIG-0-7", "MIG-0-8"));
}

TEST(MigResourcesTest, SingleServesUniformLayoutsUnderTheGpuResource) {
  state::Snapshot s = Uniform();
  config::Config c = Strategy(config::MigStrategy::kSingle);
  std::vector<ResourceSpec> specs = ResourcesFor(c, &s);
  ASSERT_THAT(Names(specs), ElementsAre("nvidia.com/gpu"));
  EXPECT_EQ(specs[0].kind, ResourceKind::kMig);
  EXPECT_TRUE(MigLayoutError(c, s).ok());
  EXPECT_THAT(Ids(AdvertisedDevices(specs[0], c, s)),
              ElementsAre("MIG-0-1", "MIG-0-2", "MIG-1-1", "MIG-1-2"));
  // No GPU with MIG: whole GPUs, as NVIDIA's plugin.
  state::Snapshot plain = Uniform();
  for (state::DeviceRecord& d : plain.devices) d.gpu.mig_enabled = false;
  EXPECT_EQ(ResourcesFor(c, &plain)[0].kind, ResourceKind::kGpu);
  EXPECT_TRUE(MigLayoutError(c, plain).ok());
}

TEST(MigResourcesTest, SingleRefusesMixedLayoutsNamingGpusProfilesAndTheFix) {
  config::Config c = Strategy(config::MigStrategy::kSingle);
  state::Snapshot s = Mixed();
  absl::Status e = MigLayoutError(c, s);
  EXPECT_EQ(e.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(e.message(), HasSubstr("all GPUs on the node must have the same MIG mode, but GPU "
                                     "2 has MIG disabled"));
  EXPECT_THAT(e.message(), HasSubstr("set plugin.migStrategy to mixed"));
  s.devices.pop_back();  // now every GPU has MIG, with two profiles
  e = MigLayoutError(c, s);
  EXPECT_THAT(e.message(), HasSubstr("more than one MIG device type present on the node "
                                     "(1g.10gb on GPU 0; 2g.20gb on GPU 0, 1)"));
  // Refused: the resource advertises nothing, so nothing is scheduled on it.
  EXPECT_TRUE(AdvertisedDevices(ResourcesFor(c, &s)[0], c, s).empty());
  s.devices[1].gpu.mig_devices.clear();
  s.devices[0].gpu.mig_devices.resize(1);
  EXPECT_THAT(MigLayoutError(c, s).message(),
              HasSubstr("GPU 1 has MIG enabled but no MIG devices"));
}

TEST(MigResourcesTest, AMigDeviceIsOutWhenItsInstanceOrItsGpuIs) {
  state::Snapshot s = Mixed();
  config::Config c = Strategy(config::MigStrategy::kMixed);
  const ResourceSpec r = *Find(ResourcesFor(c, &s), "nvidia.com/mig-1g.10gb");
  s.devices[0].mig_health[7].Raise(
      "xid", {state::HealthState::kUnhealthy, "XID 43", "", absl::UnixEpoch()}, absl::UnixEpoch());
  std::vector<AdvertisedDevice> a = AdvertisedDevices(r, c, s);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_FALSE(a[0].healthy);  // GPU instance 7
  EXPECT_TRUE(a[1].healthy);   // GPU instance 8 keeps working
  s.devices[0].health.Raise(
      "xid", {state::HealthState::kUnhealthy, "XID 79", "", absl::UnixEpoch()}, absl::UnixEpoch());
  a = AdvertisedDevices(r, c, s);
  EXPECT_FALSE(a[1].healthy);  // a GPU-level fault takes every instance out
  absl::StatusOr<v1beta1::ContainerAllocateResponse> refused =
      AllocateContainer(r, c, s, ControlNodes{}, {"MIG-0-8"});
  EXPECT_THAT(refused.status().message(), HasSubstr("MIG-0-8 (XID 79)"));
}

TEST(MigResourcesTest, AllocateAnswersWithMigUuidsIndexesCdiNamesAndCapNodes) {
  state::Snapshot s = Mixed();
  config::Config c = Strategy(config::MigStrategy::kMixed);
  c.plugin.device_list_strategy = {config::DeviceListStrategy::kEnvvar,
                                   config::DeviceListStrategy::kCdiCri};
  c.plugin.pass_device_specs = true;
  const ResourceSpec r = *Find(ResourcesFor(c, &s), "nvidia.com/mig-2g.20gb");
  ControlNodes control{{"/dev/nvidiactl"},
                       {{"gpu0/gi3/access", 30},
                        {"gpu0/gi3/ci0/access", 31},
                        {"gpu1/gi1/access", 147},
                        {"gpu1/gi1/ci0/access", 148}}};
  absl::StatusOr<v1beta1::ContainerAllocateResponse> a =
      AllocateContainer(r, c, s, control, {"MIG-0-3", "MIG-1-1"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->envs().at("NVIDIA_VISIBLE_DEVICES"), "MIG-0-3,MIG-1-1");
  ASSERT_EQ(a->cdi_devices_size(), 2);
  EXPECT_EQ(a->cdi_devices(0).name(), "gpulet.dev/gpu=MIG-0-3");
  std::vector<std::string> paths;
  for (const auto& d : a->devices()) paths.push_back(d.container_path());
  EXPECT_THAT(paths,
              ElementsAre("/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap30",
                          "/dev/nvidia-caps/nvidia-cap31", "/dev/nvidia1",
                          "/dev/nvidia-caps/nvidia-cap147", "/dev/nvidia-caps/nvidia-cap148"));
  // Index strategy: "<GPU index>:<MIG index>", as nvidia-ctk names MIG devices.
  c.plugin.device_id_strategy = config::DeviceIdStrategy::kIndex;
  a = AllocateContainer(r, c, s, control, {"MIG-0-3", "MIG-1-1"});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->envs().at("NVIDIA_VISIBLE_DEVICES"), "0:2,1:0");
  // A whole GPU's ID is not a device of a MIG resource.
  EXPECT_EQ(AllocateContainer(r, c, s, control, {"GPU-2"}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpulet::plugin
