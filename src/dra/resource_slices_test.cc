// The ResourceSlice rules as a pure function, each slice checked by the API-server stand-in's
// validation (the limits and field rules of resource.k8s.io/v1), in milliseconds.
#include "dra/resource_slices.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/fake_apiserver.h"

namespace gpulet::dra {
namespace {

using ::testing::IsEmpty;

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

state::DeviceRecord Record(unsigned index, const std::string& uuid) {
  state::DeviceRecord d;
  d.gpu.index = index;
  d.gpu.uuid = uuid;
  d.gpu.bus_id = "0000:1" + std::to_string(index) + ":00.0";
  d.gpu.name = "NVIDIA H200";
  d.gpu.minor = index;
  d.gpu.memory_total_bytes = 143771ull << 20;
  d.gpu.cc_major = 9;
  d.gpu.cc_minor = 0;
  d.gpu.architecture = node::Architecture::kHopper;
  d.gpu.in_nvml = d.gpu.on_pci = true;
  return d;
}

SliceOptions Options() {
  SliceOptions o;
  o.driver = "gpu.gpulet.dev";
  o.node_name = "node-a";
  o.generation = 7;
  return o;
}

// Every slice as the API server would take it.
void ExpectValid(const std::vector<nlohmann::json>& specs) {
  for (const nlohmann::json& spec : specs) {
    nlohmann::json slice = {{"apiVersion", "resource.k8s.io/v1"},
                            {"kind", "ResourceSlice"},
                            {"metadata", {{"name", "node-a-gpu.gpulet.dev-x"}}},
                            {"spec", spec}};
    EXPECT_THAT(testing::ValidateResourceSlice(slice, nullptr), IsEmpty()) << spec.dump(2);
  }
}

TEST(ResourceSlicesTest, WholeGpusWithNvidiasAttributeNamesAndTheirMemory) {
  state::Snapshot snap;
  snap.devices = {Record(0, "GPU-a"), Record(1, "GPU-b")};
  std::vector<nlohmann::json> specs = BuildSliceSpecs(snap, Options());
  ASSERT_EQ(specs.size(), 1u);
  ExpectValid(specs);
  const nlohmann::json& spec = specs[0];
  EXPECT_EQ(spec["pool"]["name"], "node-a");
  EXPECT_EQ(spec["pool"]["generation"], 7);
  EXPECT_EQ(spec["pool"]["resourceSliceCount"], 1);
  ASSERT_EQ(spec["devices"].size(), 2u);
  const nlohmann::json& d = spec["devices"][1];
  EXPECT_EQ(d["name"], "gpu-1");
  EXPECT_EQ(d["attributes"]["uuid"]["string"], "GPU-b");
  EXPECT_EQ(d["attributes"]["type"]["string"], "gpu");
  EXPECT_EQ(d["attributes"]["productName"]["string"], "NVIDIA H200");
  EXPECT_EQ(d["attributes"]["cudaComputeCapability"]["version"], "9.0.0");
  EXPECT_EQ(d["attributes"]["resource.kubernetes.io/pciBusID"]["string"], "0000:11:00.0");
  EXPECT_EQ(d["capacity"]["memory"]["value"], "143771Mi");
  EXPECT_FALSE(d.contains("allowMultipleAllocations"));
  EXPECT_FALSE(d.contains("taints"));
}

TEST(ResourceSlicesTest, DriverVersionsAreSemanticVersionsTheApiTakes) {
  state::Snapshot snap;
  snap.devices = {Record(0, "GPU-a")};
  SliceOptions o = Options();
  o.driver_version = "580.65.06";
  o.cuda_driver_version = "13.0";
  std::vector<nlohmann::json> specs = BuildSliceSpecs(snap, o);
  ExpectValid(specs);
  const nlohmann::json& a = specs[0]["devices"][0]["attributes"];
  EXPECT_EQ(a["driverVersion"]["version"], "580.65.6");
  EXPECT_EQ(a["cudaDriverVersion"]["version"], "13.0.0");
  EXPECT_EQ(SemVer("12"), "12.0.0");
  EXPECT_EQ(SemVer("570.133.20"), "570.133.20");
  for (const char* bad : {"", "1.2.3.4", "r570", "1..2", "12.x"}) EXPECT_EQ(SemVer(bad), "") << bad;
  o.driver_version = "unknown";  // left out, never an attribute the API refuses
  EXPECT_FALSE(BuildSliceSpecs(snap, o)[0]["devices"][0]["attributes"].contains("driverVersion"));
}

// A GPU is offered by DRA or by the device plugin (dra.gpus), so only DRA's are published.
TEST(ResourceSlicesTest, OnlyTheGpusOfferedToDraArePublished) {
  state::Snapshot snap;
  snap.devices = {Record(0, "GPU-a"), Record(1, "GPU-b"), Record(2, "GPU-c")};
  SliceOptions o = Options();
  o.gpus = {"1", "GPU-c"};
  std::vector<nlohmann::json> specs = BuildSliceSpecs(snap, o);
  ASSERT_EQ(specs.size(), 1u);
  ASSERT_EQ(specs[0]["devices"].size(), 2u);
  EXPECT_EQ(specs[0]["devices"][0]["name"], "gpu-1");
  EXPECT_EQ(specs[0]["devices"][1]["name"], "gpu-2");
}

TEST(ResourceSlicesTest, MemorySharesMakeMemoryConsumableInSteps) {
  state::Snapshot snap;
  snap.devices = {Record(0, "GPU-a")};
  SliceOptions o = Options();
  o.memory_shares = true;
  o.share_mib = 1024;
  std::vector<nlohmann::json> specs = BuildSliceSpecs(snap, o);
  ExpectValid(specs);
  const nlohmann::json& d = specs[0]["devices"][0];
  EXPECT_EQ(d["allowMultipleAllocations"], true);
  EXPECT_EQ(d["capacity"]["memory"]["requestPolicy"]["validRange"]["step"], "1024Mi");
  // No memory named: the whole card, in whole steps (143771 MiB -> 140 GiB).
  EXPECT_EQ(d["capacity"]["memory"]["requestPolicy"]["default"], "143360Mi");
}

TEST(ResourceSlicesTest, AnUnhealthyGpuIsTaintedAndTheTaintGoesWithTheCondition) {
  state::Snapshot snap;
  snap.devices = {Record(0, "GPU-a")};
  state::GpuHealth& h = snap.devices[0].health;
  h.last_xid = 79;
  h.Raise("xid",
          {state::HealthState::kUnhealthy, "XID 79", "reboot", kT0, /*reboot_required=*/true}, kT0);
  SliceOptions o = Options();
  std::vector<nlohmann::json> specs = BuildSliceSpecs(snap, o);
  ExpectValid(specs);
  const nlohmann::json& taint = specs[0]["devices"][0]["taints"][0];
  EXPECT_EQ(taint["key"], kUnhealthyTaintKey);
  EXPECT_EQ(taint["value"], "xid-79");
  EXPECT_EQ(taint["effect"], "NoSchedule");
  EXPECT_EQ(taint["timeAdded"], "2023-11-14T22:13:20Z");
  o.no_execute_on_fatal = true;
  EXPECT_EQ(BuildSliceSpecs(snap, o)[0]["devices"][0]["taints"][0]["effect"], "NoExecute");
  h.Clear("xid", kT0 + absl::Minutes(5));
  EXPECT_FALSE(BuildSliceSpecs(snap, o)[0]["devices"][0].contains("taints"));
}

TEST(ResourceSlicesTest, MigDevicesReplaceTheirGpuAndCarryTheirOwnTaint) {
  state::Snapshot snap;
  snap.devices = {Record(0, "GPU-a")};
  gpu::Gpu& g = snap.devices[0].gpu;
  g.mig_enabled = true;
  for (unsigned gi : {1u, 2u}) {
    gpu::MigDeviceInfo m;
    m.gpu_instance_id = gi;
    m.uuid = "MIG-" + std::to_string(gi);
    m.profile = "3g.71gb";
    m.memory_bytes = 71680ull << 20;
    m.sm_count = 60;
    g.mig_devices.push_back(m);
  }
  snap.devices[0].mig_health[2].Raise("xid", {state::HealthState::kUnhealthy, "XID 43", "", kT0},
                                      kT0);
  std::vector<nlohmann::json> specs = BuildSliceSpecs(snap, Options());
  ExpectValid(specs);
  const nlohmann::json& devices = specs[0]["devices"];
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0]["name"], "gpu-0-mig-1-0");
  EXPECT_EQ(devices[0]["attributes"]["type"]["string"], "mig");
  EXPECT_EQ(devices[0]["attributes"]["profile"]["string"], "3g.71gb");
  EXPECT_EQ(devices[0]["attributes"]["parentUUID"]["string"], "GPU-a");
  EXPECT_EQ(devices[0]["capacity"]["memory"]["value"], "71680Mi");
  EXPECT_FALSE(devices[0].contains("taints"));
  EXPECT_EQ(devices[1]["taints"][0]["key"], kUnhealthyTaintKey);
}

TEST(ResourceSlicesTest, ManyDevicesSplitIntoSlicesTheApiTakesEvenWithTaints) {
  state::Snapshot snap;
  for (unsigned i = 0; i < 150; ++i) snap.devices.push_back(Record(i, "GPU-" + std::to_string(i)));
  snap.devices[3].health.Raise("liveness", {state::HealthState::kUnhealthy, "GPU is lost", "", kT0},
                               kT0);
  std::vector<nlohmann::json> specs = BuildSliceSpecs(snap, Options());
  ASSERT_EQ(specs.size(), 3u);
  ExpectValid(specs);
  EXPECT_EQ(specs[0]["devices"].size(), 64u);
  EXPECT_EQ(specs[2]["devices"].size(), 22u);
  for (const auto& s : specs) EXPECT_EQ(s["pool"]["resourceSliceCount"], 3);
  EXPECT_EQ(specs[0]["devices"][3]["taints"][0]["value"], "lost");
  // No GPU: one empty slice still says the pool exists with nothing in it.
  EXPECT_EQ(BuildSliceSpecs(state::Snapshot(), Options()).size(), 1u);
}

}  // namespace
}  // namespace gpulet::dra
