// gpulet's Talos machine-config patches checked by Talos' own configuration code: one build of
// tests/talos/validate.go per release, against github.com/siderolabs/talos/pkg/machinery at
// that release's version (scripts/e2e/build.sh --tools, which `make test` runs, links each as
// talos-validate-v1.N). The validator generates a configuration as that release's `talosctl
// gen config` does, or reads one a node carries, applies the patches with Talos' patcher and
// runs Talos' validation (every document's rules and the conflicts between the v1alpha1
// document and the newer ones). Our own rule table (node/talos_releases) is checked in-process
// by manifests_test.cc; this is the check that the table is right.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "deploy/manifests.h"
#include "deploy/manifests_yaml.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/node_facts.h"
#include "node/os_release.h"
#include "node/talos_releases.h"
#include "testing/files.h"
#include "testing/real_tools.h"
#include "testing/subprocess.h"

namespace gpulet::deploy {
namespace {

using ::testing::HasSubstr;

class TalosMachineryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const node::Release& r : node::KnownReleases()) {
      std::string tool = testing::RealTool(absl::StrCat("talos-validate-v1.", r.minor));
      GPULET_REQUIRE_REAL_TOOL(tool, absl::StrCat("talos-validate-v1.", r.minor));
    }
  }

  // gpulet's patch for Talos 1.`minor`, fitted to `current` when given.
  std::string Patch(int minor, const std::string* current = nullptr) {
    absl::StatusOr<node::TalosVersion> version =
        node::ParseTalosVersion(absl::StrCat("v1.", minor, ".0"));
    EXPECT_TRUE(version.ok());
    absl::StatusOr<TalosExtensions> extensions =
        ChooseTalosExtensions(node::NodeFacts(), *version, DriverBranch::kProduction);
    EXPECT_TRUE(extensions.ok()) << extensions.status();
    TalosCurrentConfig config;
    if (current != nullptr) config = {*current, "current.yaml"};
    absl::StatusOr<std::string> patch = RenderTalosMachinePatch(
        EmbeddedManifestFiles(), *version, *extensions, current ? &config : nullptr);
    EXPECT_TRUE(patch.ok()) << patch.status();
    return patch.ok() ? *patch : "";
  }

  // talos-validate-v1.`minor` on `base` ("generated" or a configuration's text) with
  // `patches` (texts); the patched configuration is left in *out when it is valid.
  testing::RunResult Validate(int minor, const std::string& base,
                              const std::vector<std::string>& patches, std::string* out = nullptr,
                              const std::string& type = "worker") {
    std::vector<std::string> argv = {testing::RealTool(absl::StrCat("talos-validate-v1.", minor)),
                                     "--type", type};
    argv.push_back("--base");
    argv.push_back(base == "generated" ? base : dir_.Write(absl::StrCat("base-", ++n_), base));
    const std::string out_path = absl::StrCat(dir_.path(), "/out-", ++n_);
    argv.push_back("--out");
    argv.push_back(out_path);
    for (const std::string& p : patches)
      argv.push_back(dir_.Write(absl::StrCat("patch-", ++n_), p));
    testing::RunResult r = testing::RunProgram(argv);
    if (out != nullptr && r.exit_code == 0) *out = testing::ReadTextFile(out_path);
    return r;
  }

  testing::ScratchDir dir_;
  int n_ = 0;
};

// The document of `kind` ("" for v1alpha1) in a configuration's text.
YAML::Node Document(const std::string& config, const std::string& kind) {
  absl::StatusOr<std::vector<YamlDocument>> docs = SplitYamlDocuments(config, "config");
  EXPECT_TRUE(docs.ok()) << docs.status();
  if (!docs.ok()) return YAML::Node();
  for (const YamlDocument& d : *docs) {
    if (kind.empty() ? !d.node["kind"] : (d.node["kind"] && d.node["kind"].Scalar() == kind)) {
      return d.node;
    }
  }
  return YAML::Node();
}

// Each release takes its own patch on a node it installed, worker or control plane.
TEST_F(TalosMachineryTest, EveryReleaseTakesItsPatchOnANodeItInstalled) {
  for (const node::Release& r : node::KnownReleases()) {
    for (const char* type : {"worker", "controlplane"}) {
      testing::RunResult v = Validate(r.minor, "generated", {Patch(r.minor)}, nullptr, type);
      EXPECT_EQ(v.exit_code, 0) << r.Name() << " " << type << ": " << v.err;
    }
  }
}

// deploy/reboot-talos's patch, which lets gpulet's pods reach Talos' API as os:operator, is
// taken by every release on a control-plane node (a homelab's one node is GPU node and
// control plane at once: with gpulet's own patch), where it lands as written; on a worker
// Talos refuses it (checked on the newest release: it has since 1.8), which is why the
// Component says to patch the control plane.
TEST_F(TalosMachineryTest, EveryReleaseTakesTheTalosApiAccessPatchOnTheControlPlaneOnly) {
  const std::string access = testing::ReadTextFile(
      absl::StrCat(GPULET_SOURCE_DIR, "/deploy/reboot-talos/talos-machine-patch.yaml"));
  ASSERT_FALSE(access.empty());
  for (const node::Release& r : node::KnownReleases()) {
    std::string out;
    testing::RunResult v =
        Validate(r.minor, "generated", {Patch(r.minor), access}, &out, "controlplane");
    ASSERT_EQ(v.exit_code, 0) << r.Name() << ": " << v.err;
    YAML::Node feature = Document(out, "")["machine"]["features"]["kubernetesTalosAPIAccess"];
    EXPECT_TRUE(feature["enabled"].as<bool>()) << r.Name();
    EXPECT_EQ(feature["allowedRoles"][0].as<std::string>(), "os:operator") << r.Name();
    EXPECT_EQ(feature["allowedKubernetesNamespaces"][0].as<std::string>(), "gpulet-system")
        << r.Name();
  }
  const node::Release& newest = node::KnownReleases().back();
  testing::RunResult v = Validate(newest.minor, "generated", {access}, nullptr, "worker");
  EXPECT_NE(v.exit_code, 0) << newest.Name();
  EXPECT_THAT(v.err, HasSubstr("can only be enabled on control plane machines"));
}

// The patch `gpulet image-serve` prints, which sends a node's pulls of the image to it over
// HTTP, is taken by every release, on top of gpulet's own patch, and it lands where the
// release's containerd configuration is generated from.
TEST_F(TalosMachineryTest, EveryReleaseTakesTheImageServeMirrorPatch) {
  absl::StatusOr<std::string> mirror =
      RenderTalosRegistryMirrorPatch("192.168.1.10:5000", "--advertise");
  ASSERT_TRUE(mirror.ok()) << mirror.status();
  for (const node::Release& r : node::KnownReleases()) {
    std::string out;
    testing::RunResult v = Validate(r.minor, "generated", {Patch(r.minor), *mirror}, &out);
    ASSERT_EQ(v.exit_code, 0) << r.Name() << ": " << v.err;
    YAML::Node endpoints =
        Document(out, "")["machine"]["registries"]["mirrors"]["192.168.1.10:5000"]["endpoints"];
    ASSERT_TRUE(endpoints.IsSequence()) << r.Name() << ":\n" << out;
    EXPECT_EQ(endpoints[0].as<std::string>(), "http://192.168.1.10:5000") << r.Name();
  }
}

// A worker installed with Talos 1.8, with the user's own node IP subnet, node label and kubelet
// flag, upgraded release by release to 1.14, gpulet's patch applied (fitted to the node's
// configuration) at each step. Every upgrade and every patch is accepted by that release's
// own code, and the user's settings survive the move into 1.14's KubeNodeConfig.
TEST_F(TalosMachineryTest, ANodeGoesFromOneEightToOneFourteenWithGpuletsPatchAtEachStep) {
  const std::string user =
      "machine:\n  kubelet:\n    nodeIP: {validSubnets: [192.168.1.0/24]}\n"
      "    extraArgs: {rotate-server-certificates: \"true\"}\n"
      "  nodeLabels: {topology.kubernetes.io/zone: lab}\n";
  const int first = node::OldestRelease().minor, last = node::NewestRelease().minor;
  std::string config;
  testing::RunResult v = Validate(first, "generated", {user, Patch(first)}, &config);
  ASSERT_EQ(v.exit_code, 0) << v.err;
  for (int minor = first + 1; minor <= last; ++minor) {
    std::string upgraded;
    v = Validate(minor, config, {}, &upgraded);
    ASSERT_EQ(v.exit_code, 0) << "Talos 1." << minor << " refuses the 1." << minor - 1
                              << " configuration: " << v.err;
    std::string next;
    v = Validate(minor, config, {Patch(minor, &config)}, &next);
    ASSERT_EQ(v.exit_code, 0) << "Talos 1." << minor << " refuses gpulet's patch: " << v.err
                              << "\npatch:\n"
                              << Patch(minor, &config);
    config = next;
  }
  YAML::Node node = Document(config, "KubeNodeConfig");
  ASSERT_TRUE(node.IsMap()) << config;
  EXPECT_EQ(node["labels"]["topology.kubernetes.io/zone"].Scalar(), "lab");
  EXPECT_EQ(node["labels"]["nvidia.com/gpu.present"].Scalar(), "true");
  EXPECT_EQ(node["taints"]["nvidia.com/gpu"].Scalar(), "present:NoSchedule");
  EXPECT_EQ(node["nodeIP"]["validSubnets"][0].Scalar(), "192.168.1.0/24");
  YAML::Node v1alpha1 = Document(config, "");
  EXPECT_FALSE(v1alpha1["machine"]["nodeLabels"]);
  EXPECT_FALSE(v1alpha1["machine"]["kubelet"]["nodeIP"]);
  EXPECT_FALSE(v1alpha1["machine"]["kubelet"]["extraArgs"]["register-with-taints"]);
  EXPECT_EQ(v1alpha1["machine"]["kubelet"]["extraArgs"]["rotate-server-certificates"].Scalar(),
            "true");
}

// The homelab's single node: a control plane that allows scheduling, upgraded from 1.13. It
// keeps its control-plane label and gets no control-plane taint.
TEST_F(TalosMachineryTest, ASchedulableControlPlaneMovesToOneFourteen) {
  const int last = node::NewestRelease().minor;
  std::string config;
  testing::RunResult v = Validate(
      last - 1, "generated", {"cluster: {allowSchedulingOnControlPlanes: true}\n", Patch(last - 1)},
      &config, "controlplane");
  ASSERT_EQ(v.exit_code, 0) << v.err;
  std::string next;
  v = Validate(last, config, {Patch(last, &config)}, &next, "controlplane");
  ASSERT_EQ(v.exit_code, 0) << v.err;
  YAML::Node node = Document(next, "KubeNodeConfig");
  ASSERT_TRUE(node.IsMap()) << next;
  EXPECT_TRUE(node["labels"]["node-role.kubernetes.io/control-plane"]);
  EXPECT_FALSE(node["taints"]["node-role.kubernetes.io/control-plane"]);
  EXPECT_FALSE(Document(next, "")["cluster"]["allowSchedulingOnControlPlanes"]);
}

// Without the node's configuration, the 1.14 patch is refused on a node upgraded from 1.13
// with gpulet's earlier patch: the failure the fitted patch exists for, seen by Talos' code.
TEST_F(TalosMachineryTest, TheUnfittedPatchIsRefusedOnAnUpgradedNode) {
  const int last = node::NewestRelease().minor;
  std::string config;
  testing::RunResult v = Validate(last - 1, "generated", {Patch(last - 1)}, &config);
  ASSERT_EQ(v.exit_code, 0) << v.err;
  v = Validate(last, config, {Patch(last)});
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_THAT(v.err, HasSubstr(".machine.nodeLabels is already set in v1alpha1 config"));
}

}  // namespace
}  // namespace gpulet::deploy
