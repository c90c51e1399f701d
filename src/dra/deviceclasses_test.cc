// The DRA manifests in deploy/ (DeviceClasses, claims and their comments) select on what
// BuildSliceSpecs really publishes: every `device.attributes["<domain>"].<name>` and
// `device.capacity["<domain>"].<name>` in a CEL expression or an example names an attribute or
// capacity gpulet's slices carry, the DeviceClasses' type values are the ones whole GPUs and
// MIG devices get, and the taint the manifests mention is kUnhealthyTaintKey. The files are
// read from GPULET_SOURCE_DIR; deploy_manifests_test.cc checks the driver name against the
// config's default.
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "dra/resource_slices.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "yaml-cpp/yaml.h"

namespace gpulet::dra {
namespace {

namespace fs = std::filesystem;

constexpr char kDriver[] = "gpu.gpulet.dev";

// A node with one whole GPU and one GPU in MIG mode: every attribute either kind publishes.
std::vector<nlohmann::json> Devices(bool memory_shares) {
  state::Snapshot snap;
  for (unsigned i : {0u, 1u}) {
    state::DeviceRecord d;
    d.gpu.index = i;
    d.gpu.uuid = "GPU-" + std::to_string(i);
    d.gpu.bus_id = "0000:1" + std::to_string(i) + ":00.0";
    d.gpu.name = "NVIDIA H200";
    d.gpu.minor = i;
    d.gpu.memory_total_bytes = 143771ull << 20;
    d.gpu.cc_major = 9;
    d.gpu.cc_minor = 0;
    d.gpu.architecture = node::Architecture::kHopper;
    d.gpu.in_nvml = d.gpu.on_pci = true;
    snap.devices.push_back(d);
  }
  gpu::Gpu& mig = snap.devices[1].gpu;
  mig.mig_enabled = true;
  gpu::MigDeviceInfo m;
  m.gpu_instance_id = 1;
  m.uuid = "MIG-1";
  m.profile = "3g.71gb";
  m.memory_bytes = 71680ull << 20;
  m.sm_count = 60;
  mig.mig_devices.push_back(m);
  SliceOptions o;
  o.driver = kDriver;
  o.node_name = "node-a";
  o.memory_shares = memory_shares;
  std::vector<nlohmann::json> devices;
  for (const nlohmann::json& spec : BuildSliceSpecs(snap, o)) {
    EXPECT_EQ(spec["driver"], kDriver);
    for (const nlohmann::json& d : spec["devices"]) devices.push_back(d);
  }
  return devices;
}

// Every deploy/**/*.yaml and *.md file, by path relative to the source tree.
std::map<std::string, std::string> DeployFiles() {
  std::map<std::string, std::string> out;
  const fs::path root = fs::path(GPULET_SOURCE_DIR) / "deploy";
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    const std::string ext = e.path().extension().string();
    if (!e.is_regular_file() || (ext != ".yaml" && ext != ".yml" && ext != ".md")) continue;
    std::ifstream in(e.path());
    std::stringstream ss;
    ss << in.rdbuf();
    out[fs::relative(e.path(), GPULET_SOURCE_DIR).generic_string()] = ss.str();
  }
  return out;
}

TEST(DraDeployTest, ManifestsSelectOnlyWhatTheSlicesPublish) {
  std::set<std::string> attributes;  // "gpu.gpulet.dev/uuid", "resource.kubernetes.io/pciBusID"
  std::set<std::string> capacities;
  for (bool shares : {false, true}) {
    for (const nlohmann::json& d : Devices(shares)) {
      for (const auto& [name, value] : d["attributes"].items()) {
        attributes.insert(name.find('/') == std::string::npos ? std::string(kDriver) + "/" + name
                                                              : name);
      }
      for (const auto& [name, value] : d["capacity"].items()) {
        capacities.insert(std::string(kDriver) + "/" + name);
      }
    }
  }
  ASSERT_TRUE(attributes.count("gpu.gpulet.dev/productName"));
  ASSERT_TRUE(attributes.count("gpu.gpulet.dev/profile"));
  ASSERT_TRUE(capacities.count("gpu.gpulet.dev/memory"));

  // device.attributes["domain"].name, and the same for capacity. CEL also allows
  // ["domain"]["name"]; the manifests use the field form.
  const std::regex ref(
      R"re(device\.(attributes|capacity)\["([^"]+)"\]\.([A-Za-z][A-Za-z0-9_]*))re");
  int refs = 0;
  for (const auto& [path, text] : DeployFiles()) {
    for (auto it = std::sregex_iterator(text.begin(), text.end(), ref);
         it != std::sregex_iterator(); ++it) {
      const std::string qualified = (*it)[2].str() + "/" + (*it)[3].str();
      const std::set<std::string>& known = (*it)[1] == "attributes" ? attributes : capacities;
      EXPECT_TRUE(known.count(qualified))
          << path << ": " << it->str() << ": gpulet publishes no " << (*it)[1] << " " << qualified;
      ++refs;
    }
  }
  EXPECT_GE(refs, 4);
}

TEST(DraDeployTest, DeviceClassesSelectTheDriverAndTheTypeItPublishes) {
  std::map<std::string, std::set<std::string>> types;  // type attribute -> device names
  for (const nlohmann::json& d : Devices(false)) {
    types[d["attributes"]["type"]["string"].get<std::string>()].insert(d["name"]);
  }
  ASSERT_EQ(types.size(), 2u);
  const std::map<std::string, std::string> files = DeployFiles();
  const std::string& text = files.at("deploy/dra/deviceclasses.yaml");
  std::map<std::string, std::string> expressions;  // class -> CEL
  for (const YAML::Node& doc : YAML::LoadAll(text)) {
    if (!doc.IsMap() || doc["kind"].Scalar() != "DeviceClass") continue;
    EXPECT_EQ(doc["apiVersion"].Scalar(), "resource.k8s.io/v1");
    ASSERT_EQ(doc["spec"]["selectors"].size(), 1u);
    expressions[doc["metadata"]["name"].Scalar()] =
        doc["spec"]["selectors"][0]["cel"]["expression"].Scalar();
  }
  ASSERT_EQ(expressions.size(), 2u);
  const std::string driver = std::string("device.driver == \"") + kDriver + "\"";
  const std::string type = std::string("device.attributes[\"") + kDriver + "\"].type == ";
  EXPECT_EQ(expressions["gpu.gpulet.dev"], driver + " && " + type + "\"gpu\"");
  EXPECT_EQ(expressions["mig.gpu.gpulet.dev"], driver + " && " + type + "\"mig\"");
  EXPECT_TRUE(types.count("gpu") && types.count("mig"));
  for (const std::string& name : types["gpu"])
    EXPECT_THAT(name, ::testing::MatchesRegex("gpu-[0-9]+"));
  for (const std::string& name : types["mig"]) {
    EXPECT_THAT(name, ::testing::MatchesRegex("gpu-[0-9]+-mig-[0-9]+-[0-9]+"));
  }

  // The taint the manifests tell people about is the one the slices carry.
  // (Not a path such as plugins/gpu.gpulet.dev/dra.sock, nor the GpuConfig apiVersion
  // gpu.gpulet.dev/v1alpha1.)
  const std::regex taint(R"((^|[^/])(gpu\.gpulet\.dev/[a-z-]+)(?![a-z0-9.]))");
  int taints = 0;
  for (const auto& [path, t] : files) {
    for (auto it = std::sregex_iterator(t.begin(), t.end(), taint); it != std::sregex_iterator();
         ++it) {
      EXPECT_EQ((*it)[2].str(), kUnhealthyTaintKey) << path;
      ++taints;
    }
  }
  EXPECT_GE(taints, 1);
}

}  // namespace
}  // namespace gpulet::dra
