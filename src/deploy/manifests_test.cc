#include "deploy/manifests.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "deploy/manifests_yaml.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/talos_releases.h"
#include "testing/files.h"
#include "testing/homelab.h"
#include "testing/subprocess.h"

namespace gpulet::deploy {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

const char kBaseKustomization[] =
    "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
    "resources:\n  - ds.yaml\n  - ns.yaml\n";
const char kNamespace[] =
    "# the namespace\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: x\n"
    "  labels:\n    pod-security.kubernetes.io/enforce: privileged\n";
const char kDaemonSet[] =
    "# the daemonset\n"
    "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: gpulet\n  namespace: x\n"
    "spec:\n  template:\n    spec:\n      containers:\n"
    "        - name: gpulet\n          # the image\n          image: gpulet:0.1.0\n"
    "          args: [serve]\n";

ManifestFiles SmallTree() {
  return {
      {"deploy/base/kustomization.yaml", kBaseKustomization},
      {"deploy/base/ns.yaml", kNamespace},
      {"deploy/base/ds.yaml", kDaemonSet},
      {"deploy/overlays/o/kustomization.yaml",
       "resources: [../../base, rc.yaml]\npatches:\n  - path: ds-patch.yaml\n"},
      {"deploy/overlays/o/rc.yaml",
       "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: nvidia}\nhandler: "
       "nvidia\n"},
      {"deploy/overlays/o/ds-patch.yaml",
       "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: gpulet, namespace: x}\n"
       "spec:\n  template:\n    spec:\n      runtimeClassName: nvidia\n"},
      {"deploy/overlays/img/kustomization.yaml",
       "resources: [../../base]\nimages:\n  - {name: gpulet, newName: reg.example/gpulet, "
       "newTag: \"2\"}\n"},
  };
}

TEST(ManifestsRenderTest, BaseKeepsSourceTextInKindOrder) {
  absl::StatusOr<std::vector<KubeObject>> objs =
      RenderKustomization(SmallTree(), "deploy/base", {});
  ASSERT_TRUE(objs.ok()) << objs.status();
  ASSERT_EQ(objs->size(), 2u);
  EXPECT_EQ((*objs)[0].Kind(), "Namespace");  // moved ahead of the DaemonSet
  EXPECT_EQ((*objs)[1].Kind(), "DaemonSet");
  EXPECT_EQ((*objs)[1].Namespace(), "x");
  std::string text = FormatObjects(*objs);
  EXPECT_THAT(text, HasSubstr("# the namespace\n"));
  EXPECT_THAT(text, HasSubstr("# the image\n"));
  EXPECT_TRUE(absl::StartsWith(text, "---\n"));
}

TEST(ManifestsRenderTest, OverlayAppliesPatchAndAddsResources) {
  absl::StatusOr<std::vector<KubeObject>> objs =
      RenderKustomization(SmallTree(), "deploy/overlays/o", {});
  ASSERT_TRUE(objs.ok()) << objs.status();
  ASSERT_EQ(objs->size(), 3u);
  const KubeObject* ds = nullptr;
  for (const KubeObject& o : *objs) {
    if (o.Kind() == "DaemonSet") ds = &o;
  }
  ASSERT_NE(ds, nullptr);
  EXPECT_TRUE(ds->modified);
  EXPECT_EQ(ds->node["spec"]["template"]["spec"]["runtimeClassName"].Scalar(), "nvidia");
  std::string text = FormatObjects(*objs);
  EXPECT_THAT(text, HasSubstr("# From deploy/base/ds.yaml with the overlay's patches applied"));
  // The emitted document reads back as the patched object.
  absl::StatusOr<std::vector<YamlDocument>> back = SplitYamlDocuments(text, "out");
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 3u);
}

TEST(ManifestsRenderTest, ImagesKeepCommentsWhenOnlyTheImageChanges) {
  absl::StatusOr<std::vector<KubeObject>> objs =
      RenderKustomization(SmallTree(), "deploy/overlays/img", {});
  ASSERT_TRUE(objs.ok()) << objs.status();
  const KubeObject& ds = (*objs)[1];
  EXPECT_FALSE(ds.modified);
  EXPECT_THAT(ds.text, HasSubstr("image: \"reg.example/gpulet:2\""));
  EXPECT_THAT(ds.text, HasSubstr("# the image"));

  RenderOptions options;
  options.image = "registry.example.com:5000/team/gpulet@sha256:abc";
  objs = RenderKustomization(SmallTree(), "deploy/overlays/img", options);
  ASSERT_TRUE(objs.ok()) << objs.status();
  EXPECT_EQ((*objs)[1].node["spec"]["template"]["spec"]["containers"][0]["image"].Scalar(),
            "registry.example.com:5000/team/gpulet@sha256:abc");
}

TEST(ManifestsRenderTest, ImageOptionOnPatchedObjectEmitsIt) {
  RenderOptions options;
  options.image = "r/gpulet:9";
  absl::StatusOr<std::vector<KubeObject>> objs =
      RenderKustomization(SmallTree(), "deploy/overlays/o", options);
  ASSERT_TRUE(objs.ok()) << objs.status();
  EXPECT_THAT(FormatObjects(*objs), HasSubstr("image: \"r/gpulet:9\""));
}

TEST(ManifestsRenderTest, TheRegistryMirrorPatchTakesOnlyAHostAndPort) {
  absl::StatusOr<std::string> ok = RenderTalosRegistryMirrorPatch("[fd00::1]:5000", "--advertise");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_THAT(*ok, HasSubstr("- http://[fd00::1]:5000"));
  EXPECT_TRUE(RenderTalosRegistryMirrorPatch("build-box.lan:5000", "--advertise").ok());
  for (const char* bad : {"192.168.1.10", "192.168.1.10:0", "192.168.1.10:70000", ":5000",
                          "a b:5000", "host/x:5000", "-x:5000", "h\n  evil: 1:5000"}) {
    absl::StatusOr<std::string> r = RenderTalosRegistryMirrorPatch(bad, "--advertise");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr(absl::StrCat("--advertise '", bad, "'")));
  }
}

TEST(ManifestsRenderTest, ErrorsNameTheKustomizationAndTheProblem) {
  ManifestFiles files = SmallTree();
  files["deploy/overlays/bad/kustomization.yaml"] = "resources: [missing.yaml]\n";
  absl::StatusOr<std::vector<KubeObject>> r = RenderKustomization(files, "deploy/overlays/bad", {});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("deploy/overlays/bad/kustomization.yaml: resource 'missing.yaml'"));

  files["deploy/overlays/bad/kustomization.yaml"] = "resources: [../../base]\nnamePrefix: a-\n";
  r = RenderKustomization(files, "deploy/overlays/bad", {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("namePrefix"));

  files["deploy/overlays/bad/kustomization.yaml"] =
      "resources: [../../base]\npatches: [{path: p.yaml}]\n";
  files["deploy/overlays/bad/p.yaml"] = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: nope}\n";
  r = RenderKustomization(files, "deploy/overlays/bad", {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("ConfigMap nope"));

  files["deploy/overlays/loop/kustomization.yaml"] = "resources: [../loop]\n";
  r = RenderKustomization(files, "deploy/overlays/loop", {});
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("cycle"));

  files["deploy/base/sub/kustomization.yaml"] = "resources: [..]\n";
  r = RenderKustomization(files, "deploy/base/sub", {});
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("kustomize rejects this"));

  EXPECT_EQ(RenderKustomization(files, "deploy/nowhere", {}).status().code(),
            absl::StatusCode::kNotFound);
}

// A kustomize Component: its resources join the including kustomization's, and its patches
// apply to objects the includer rendered before it; the includer's own patches come last.
TEST(ManifestsRenderTest, ComponentPatchesWhatItsIncluderRendered) {
  ManifestFiles files = SmallTree();
  files["deploy/c/kustomization.yaml"] =
      "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n"
      "resources: [rc.yaml]\npatches:\n  - path: ds-patch.yaml\n";
  files["deploy/c/rc.yaml"] = files["deploy/overlays/o/rc.yaml"];
  files["deploy/c/ds-patch.yaml"] =
      "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: gpulet, namespace: x}\n"
      "spec:\n  template:\n    spec:\n      runtimeClassName: nvidia\n      hostPID: true\n";
  files["deploy/overlays/with-c/kustomization.yaml"] =
      "resources: [../../base]\ncomponents: [../../c]\npatches:\n  - path: last.yaml\n";
  files["deploy/overlays/with-c/last.yaml"] =
      "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: gpulet, namespace: x}\n"
      "spec:\n  template:\n    spec:\n      hostPID: false\n";
  absl::StatusOr<std::vector<KubeObject>> objs =
      RenderKustomization(files, "deploy/overlays/with-c", {});
  ASSERT_TRUE(objs.ok()) << objs.status();
  std::vector<std::string> kinds;
  for (const KubeObject& o : *objs) kinds.push_back(o.Kind());
  EXPECT_THAT(kinds, ElementsAre("Namespace", "DaemonSet", "RuntimeClass"));
  YAML::Node pod = (*objs)[1].node["spec"]["template"]["spec"];
  EXPECT_EQ(pod["runtimeClassName"].Scalar(), "nvidia");
  EXPECT_EQ(pod["hostPID"].Scalar(), "false");  // the includer's patch wins

  // A Component renders only through `components:`, and only a Component goes there.
  absl::StatusOr<std::vector<KubeObject>> r = RenderKustomization(files, "deploy/c", {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("components:"));
  files["deploy/overlays/as-resource/kustomization.yaml"] = "resources: [../../base, ../../c]\n";
  r = RenderKustomization(files, "deploy/overlays/as-resource", {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  files["deploy/overlays/not-c/kustomization.yaml"] =
      "resources: [../../base]\n"
      "components: [../img]\n";
  r = RenderKustomization(files, "deploy/overlays/not-c", {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("kind: Component"));
  files["deploy/overlays/no-c/kustomization.yaml"] = "components: [../../none]\n";
  r = RenderKustomization(files, "deploy/overlays/no-c", {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("component '../../none'"));
}

// A writable copy of a fixture host root, optionally with an /etc/os-release.
class HostRootCopy {
 public:
  HostRootCopy(const std::string& fixture_root, const std::string& os_release) {
    dir_ = fs::temp_directory_path() /
           absl::StrCat("gpulet-manifests-test-", getpid(), "-", counter_++);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::copy(fixture_root, dir_, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
    if (!os_release.empty()) {
      fs::create_directories(dir_ / "etc");
      std::ofstream(dir_ / "etc/os-release") << os_release;
    }
  }
  ~HostRootCopy() { fs::remove_all(dir_); }
  std::string path() const { return dir_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path dir_;
};

std::string Fixture(const std::string& name) {
  return absl::StrCat(GPULET_SOURCE_DIR, "/sim/fixtures/", name, "/root");
}

const char kTalosOsRelease[] =
    "NAME=\"Talos\"\nID=talos\nVERSION_ID=v1.12.6\nPRETTY_NAME=\"Talos (v1.12.6)\"\n";

TEST(ManifestsInspectTest, TalosHomelab) {
  HostRootCopy root(Fixture("homelab"), kTalosOsRelease);
  node::NodeFacts facts = node::InspectNode(HostFs(root.path()));
  EXPECT_TRUE(facts.IsTalos());
  ASSERT_TRUE(facts.talos_version.has_value());
  EXPECT_EQ(facts.talos_version->ToString(), "v1.12.6");
  EXPECT_EQ(facts.os_pretty_name, "Talos (v1.12.6)");
  ASSERT_EQ(facts.gpus.size(), 2u);
  EXPECT_EQ(facts.nvswitch_count, 0);
  EXPECT_EQ(facts.driver.flavor, node::DriverFlavor::kOpen);

  absl::StatusOr<TalosExtensions> ext =
      ChooseTalosExtensions(facts, facts.talos_version, DriverBranch::kProduction);
  ASSERT_TRUE(ext.ok()) << ext.status();
  EXPECT_THAT(ext->names, ElementsAre("nvidia-open-gpu-kernel-modules-production",
                                      "nvidia-container-toolkit-production"));
  EXPECT_THAT(ext->reasons[0], HasSubstr("RTX 5090"));
  EXPECT_THAT(ext->reasons[0], HasSubstr("Blackwell"));
}

TEST(ManifestsInspectTest, Dgx8HasNvswitch) {
  node::NodeFacts facts = node::InspectNode(HostFs(Fixture("dgx8")));
  EXPECT_FALSE(facts.IsTalos());
  EXPECT_EQ(facts.gpus.size(), 8u);
  EXPECT_EQ(facts.nvswitch_count, 1);
  absl::StatusOr<TalosExtensions> ext =
      ChooseTalosExtensions(facts, std::nullopt, DriverBranch::kLts);
  ASSERT_TRUE(ext.ok()) << ext.status();
  EXPECT_THAT(ext->names, ElementsAre("nvidia-open-gpu-kernel-modules-lts",
                                      "nvidia-container-toolkit-lts", "nvidia-fabricmanager-lts"));
}

node::PciGpu MakeGpu(const std::string& bus, const std::string& product, node::Architecture arch) {
  node::PciGpu g;
  g.bus_id = bus;
  g.product = product;
  g.architecture = arch;
  g.module_flavor = node::ModuleFlavorFor(arch);
  return g;
}

TEST(ManifestsExtensionsTest, FlavourRules) {
  node::NodeFacts pascal;
  pascal.gpus = {MakeGpu("0000:01:00.0", "Tesla P100-PCIE-16GB", node::Architecture::kPascal)};
  absl::StatusOr<TalosExtensions> ext =
      ChooseTalosExtensions(pascal, std::nullopt, DriverBranch::kProduction);
  ASSERT_TRUE(ext.ok());
  EXPECT_EQ(ext->names[0], "nonfree-kmod-nvidia-production");

  node::NodeFacts mixed = pascal;
  mixed.gpus.push_back(
      MakeGpu("0000:02:00.0", "NVIDIA GeForce RTX 5090", node::Architecture::kBlackwell));
  ext = ChooseTalosExtensions(mixed, std::nullopt, DriverBranch::kProduction);
  ASSERT_FALSE(ext.ok());
  EXPECT_EQ(ext.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(ext.status().message()), HasSubstr("P100"));
  EXPECT_THAT(std::string(ext.status().message()), HasSubstr("RTX 5090"));

  node::NodeFacts ampere_proprietary;
  ampere_proprietary.gpus = {
      MakeGpu("0000:01:00.0", "NVIDIA GeForce RTX 3080", node::Architecture::kAmpere)};
  ampere_proprietary.driver.flavor = node::DriverFlavor::kProprietary;
  ext = ChooseTalosExtensions(ampere_proprietary, node::ParseTalosVersion("v1.8.3").value(),
                              DriverBranch::kProduction);
  ASSERT_TRUE(ext.ok());
  // Talos 1.8 already has the -production/-lts names (extensions v1.8.0).
  EXPECT_THAT(ext->names,
              ElementsAre("nonfree-kmod-nvidia-production", "nvidia-container-toolkit-production"));
  ext = ChooseTalosExtensions(ampere_proprietary, node::ParseTalosVersion("v1.7.7").value(),
                              DriverBranch::kProduction);
  ASSERT_FALSE(ext.ok());
  EXPECT_EQ(ext.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(ext.status().message(), HasSubstr("Talos 1.7 is not supported"));
  ext = ChooseTalosExtensions(node::NodeFacts{}, node::ParseTalosVersion("v1.15.0").value(),
                              DriverBranch::kLts);
  ASSERT_TRUE(ext.ok());
  EXPECT_EQ(ext->names[1], "nvidia-container-toolkit-lts");
  EXPECT_THAT(RenderTalosSchematic(*ext), HasSubstr("# Warning: Talos 1.15 is newer than"));

  ext = ChooseTalosExtensions(node::NodeFacts{}, std::nullopt, DriverBranch::kProduction);
  ASSERT_TRUE(ext.ok());
  EXPECT_EQ(ext->names[0], "nvidia-open-gpu-kernel-modules-production");
  EXPECT_THAT(RenderTalosSchematic(*ext),
              HasSubstr("    officialExtensions:\n"
                        "      - siderolabs/nvidia-open-gpu-kernel-modules-production\n"));
}

TalosExtensions DefaultExtensions() {
  return ChooseTalosExtensions(node::NodeFacts{}, std::nullopt, DriverBranch::kProduction).value();
}

TEST(ManifestsTalosPatchTest, FormsByVersion) {
  ManifestFiles files = EmbeddedManifestFiles();
  const std::string& original = files.at(kTalosMachinePatchPath);

  absl::StatusOr<std::string> v113 = RenderTalosMachinePatch(
      files, node::ParseTalosVersion("v1.13.2").value(), DefaultExtensions());
  ASSERT_TRUE(v113.ok()) << v113.status();
  EXPECT_THAT(*v113, HasSubstr(original));
  EXPECT_THAT(*v113, HasSubstr("siderolabs/nvidia-container-toolkit-production"));
  YAML::Node n = YAML::Load(*v113);
  EXPECT_FALSE(n["machine"]["sysctls"]);

  absl::StatusOr<std::string> v112 = RenderTalosMachinePatch(
      files, node::ParseTalosVersion("v1.12.6").value(), DefaultExtensions());
  ASSERT_TRUE(v112.ok()) << v112.status();
  n = YAML::Load(*v112);
  EXPECT_EQ(n["machine"]["sysctls"]["net.core.bpf_jit_harden"].Scalar(), "1");
  EXPECT_EQ(n["machine"]["kernel"]["modules"].size(), 4u);
  EXPECT_EQ(n["machine"]["kubelet"]["extraArgs"]["register-with-taints"].Scalar(),
            "nvidia.com/gpu=present:NoSchedule");

  absl::StatusOr<std::string> v114 = RenderTalosMachinePatch(
      files, node::ParseTalosVersion("v1.14.0").value(), DefaultExtensions());
  ASSERT_TRUE(v114.ok()) << v114.status();
  absl::StatusOr<std::vector<YamlDocument>> docs = SplitYamlDocuments(*v114, "1.14");
  ASSERT_TRUE(docs.ok()) << docs.status();
  std::vector<std::string> kinds, modules;
  for (const YamlDocument& d : *docs) {
    kinds.push_back(d.node["kind"].Scalar());
    if (d.node["kind"].Scalar() == "KernelModuleConfig") modules.push_back(d.node["name"].Scalar());
    EXPECT_EQ(d.node["apiVersion"].Scalar(), "v1alpha1");
    EXPECT_FALSE(d.node["machine"]);
  }
  EXPECT_THAT(modules, ElementsAre("nvidia", "nvidia_uvm", "nvidia_drm", "nvidia_modeset"));
  // No KubeletConfig: 1.14 refuses one next to .machine.kubelet (upgraded nodes have it), and
  // a new one would need the kubelet image. The taint goes into KubeNodeConfig.
  EXPECT_THAT(kinds, Not(::testing::Contains("KubeletConfig")));
  EXPECT_THAT(kinds, ::testing::Contains("KubeNodeConfig"));
  EXPECT_THAT(*v114, HasSubstr("nvidia.com/gpu.present: \"true\""));
  EXPECT_THAT(*v114, HasSubstr("nvidia.com/gpu: \"present:NoSchedule\""));

  EXPECT_FALSE(
      RenderTalosMachinePatch(files, node::ParseTalosVersion("v1.7.7").value(), DefaultExtensions())
          .ok());

  absl::StatusOr<std::string> unknown =
      RenderTalosMachinePatch(files, std::nullopt, DefaultExtensions());
  ASSERT_TRUE(unknown.ok());
  EXPECT_THAT(*unknown, HasSubstr("Talos version unknown"));
}

// --- golden patches, checked against Talos' own rules -----------------------------------------

std::string PatchGolden(int minor) {
  return absl::StrCat(GPULET_SOURCE_DIR, "/tests/fixtures/talos-patches/talos-1.", minor, ".yaml");
}

// Every key path of a YAML map, dotted: {"machine", "machine.kernel", ...}. Sequences end a
// path (the rules name fields, not list items).
void CollectFields(const YAML::Node& node, const std::string& prefix, std::set<std::string>* out) {
  if (!node.IsMap()) return;
  for (const auto& kv : node) {
    std::string path = prefix.empty() ? kv.first.Scalar() : prefix + "." + kv.first.Scalar();
    out->insert(path);
    CollectFields(kv.second, path, out);
  }
}

std::vector<node::DocumentShape> Shapes(const std::string& text) {
  absl::StatusOr<std::vector<YamlDocument>> docs = SplitYamlDocuments(text, "patch");
  EXPECT_TRUE(docs.ok()) << docs.status();
  std::vector<node::DocumentShape> out;
  if (!docs.ok()) return out;
  for (const YamlDocument& d : *docs) {
    node::DocumentShape shape;
    if (d.node["kind"]) shape.kind = d.node["kind"].Scalar();
    CollectFields(d.node, "", &shape.fields);
    shape.fields.erase("apiVersion");
    shape.fields.erase("kind");
    out.push_back(std::move(shape));
  }
  return out;
}

TEST(TalosGoldenPatchTest, CommandOutputMatchesGoldenFiles) {
  for (const node::Release& release : node::KnownReleases()) {
    std::string version = absl::StrCat("v", release.major, ".", release.minor);
    testing::RunResult r =
        testing::RunProgram({gpulet::testing::GpuletBinary(), "manifests", "--no-inspect",
                             "--talos-machine-patch", "--talos-version", version});
    ASSERT_EQ(r.exit_code, 0) << version << ": " << r.err;
    std::ifstream in(PatchGolden(release.minor));
    ASSERT_TRUE(in) << PatchGolden(release.minor);
    std::stringstream golden;
    golden << in.rdbuf();
    EXPECT_EQ(r.out, golden.str())
        << version << " differs; regenerate with: gpulet manifests --no-inspect "
        << "--talos-machine-patch --talos-version " << version << " > "
        << "tests/fixtures/talos-patches/talos-1." << release.minor << ".yaml";
  }
}

TEST(TalosGoldenPatchTest, EachPatchKeepsItsReleasesRules) {
  for (const node::Release& release : node::KnownReleases()) {
    std::ifstream in(PatchGolden(release.minor));
    ASSERT_TRUE(in) << PatchGolden(release.minor);
    std::stringstream text;
    text << in.rdbuf();
    std::vector<node::DocumentShape> patch = Shapes(text.str());
    ASSERT_FALSE(patch.empty()) << release.Name();
    for (const node::Violation& v : node::CheckPatch(release, patch)) {
      ADD_FAILURE() << release.Name() << ": " << v.message << " [" << v.source << "]";
    }
    for (const node::BaseConfig& base : node::BaseConfigs(release)) {
      for (const node::Violation& v : node::CheckMerged(release, base.documents, patch)) {
        ADD_FAILURE() << release.Name() << " (" << base.description << "): " << v.message << " ["
                      << v.source << "]";
      }
    }
    // What each release needs is in its patch: the modules (as documents where the release
    // has them), the label, the taint, and the BPF sysctl exactly where legacy mode needs it.
    std::set<std::string> kinds, fields;
    for (const node::DocumentShape& d : patch) {
      kinds.insert(d.kind);
      for (const std::string& f : d.fields) fields.insert(d.kind + ":" + f);
    }
    if (release.KernelModuleDocuments()) {
      EXPECT_THAT(kinds, ElementsAre("KernelModuleConfig", "KubeNodeConfig")) << release.Name();
      EXPECT_TRUE(fields.count("KubeNodeConfig:labels.nvidia.com/gpu.present")) << release.Name();
      EXPECT_TRUE(fields.count("KubeNodeConfig:taints.nvidia.com/gpu")) << release.Name();
    } else {
      EXPECT_THAT(kinds, ElementsAre("")) << release.Name();
      EXPECT_TRUE(fields.count(":machine.kernel.modules")) << release.Name();
      EXPECT_TRUE(fields.count(":machine.nodeLabels.nvidia.com/gpu.present")) << release.Name();
      EXPECT_TRUE(fields.count(":machine.kubelet.extraArgs.register-with-taints"))
          << release.Name();
    }
    EXPECT_EQ(fields.count(":machine.sysctls.net.core.bpf_jit_harden") == 1,
              release.needs_bpf_jit_harden_1.value)
        << release.Name() << " [" << release.needs_bpf_jit_harden_1.source << "]";
  }
}

TEST(TalosGoldenPatchTest, TheOneThirteenFormIsRefusedByOneFourteen) {
  // The field bug: the v1alpha1 form on a node whose config 1.14 generated.
  std::ifstream in(PatchGolden(13));
  std::stringstream text;
  text << in.rdbuf();
  const node::Release& r14 = node::NewestRelease();
  ASSERT_EQ(r14.minor, 14);
  std::vector<node::Violation> v =
      node::CheckMerged(r14, node::BaseConfigs(r14)[0].documents, Shapes(text.str()));
  ASSERT_EQ(v.size(), 2u);
  EXPECT_THAT(v[0].message, HasSubstr("machine.kubelet"));
  EXPECT_THAT(v[1].message, HasSubstr("machine.nodeLabels"));
}

// --- the command ------------------------------------------------------------------------------

TEST(ManifestsCommandTest, TalosVersionsOutsideTheTable) {
  testing::RunResult r =
      testing::RunProgram({gpulet::testing::GpuletBinary(), "manifests", "--no-inspect",
                           "--talos-version", "v1.7.7", "--talos-schematic"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("Talos 1.7 is not supported"));
  r = testing::RunProgram({gpulet::testing::GpuletBinary(), "manifests", "--no-inspect",
                           "--talos-version", "v1.15.0", "--talos-machine-patch"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("# Warning: Talos 1.15 is newer than the newest release"));
  EXPECT_THAT(r.out, HasSubstr("kind: KernelModuleConfig"));
}

// A node's configuration changes the patch only where the release has a KubeNodeConfig to
// move settings into (1.14); elsewhere the command says it changed nothing.
TEST(ManifestsCommandTest, ACurrentConfigForAReleaseThatNeedsNoFittingIsSaidToChangeNothing) {
  testing::ScratchDir dir;
  const std::string current =
      dir.Write("current.yaml", "version: v1alpha1\nmachine:\n  nodeLabels: {a: b}\n");
  for (const char* v : {"v1.12.4", "v1.13.0"}) {
    testing::RunResult fitted = testing::RunProgram(
        {gpulet::testing::GpuletBinary(), "manifests", "--no-inspect", "--talos-version", v,
         "--talos-machine-patch", "--talos-current-config", current});
    testing::RunResult plain =
        testing::RunProgram({gpulet::testing::GpuletBinary(), "manifests", "--no-inspect",
                             "--talos-version", v, "--talos-machine-patch"});
    ASSERT_EQ(fitted.exit_code, 0) << fitted.err;
    EXPECT_EQ(fitted.out, plain.out) << v;
    EXPECT_THAT(fitted.err, HasSubstr(absl::StrCat("Talos ", v, " takes the same patch")));
    EXPECT_THAT(fitted.err, HasSubstr("changed nothing"));
  }
  testing::RunResult r14 = testing::RunProgram(
      {gpulet::testing::GpuletBinary(), "manifests", "--no-inspect", "--talos-version", "v1.14.1",
       "--talos-machine-patch", "--talos-current-config", current});
  ASSERT_EQ(r14.exit_code, 0) << r14.err;
  EXPECT_THAT(r14.err, Not(HasSubstr("changed nothing")));
  EXPECT_THAT(r14.out, HasSubstr("$patch: delete"));
}

TEST(ManifestsCommandTest, DraRendersTheDraOverlayOfEitherKind) {
  for (const char* overlay : {"generic", "talos"}) {
    testing::RunResult r = testing::RunProgram({gpulet::testing::GpuletBinary(), "manifests",
                                                "--no-inspect", "--overlay", overlay, "--dra"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.err, HasSubstr(std::string(overlay) == "talos" ? "deploy/overlays/talos-dra"
                                                                 : "deploy/overlays/dra"));
    EXPECT_THAT(r.out, HasSubstr("kind: DeviceClass"));
    EXPECT_THAT(r.out, HasSubstr("resourceslices"));
  }
}

TEST(ManifestsCommandTest, TalosNodeGetsTalosOverlayAndOpenModules) {
  HostRootCopy root(Fixture("homelab"), kTalosOsRelease);
  testing::RunResult r =
      testing::RunProgram({gpulet::testing::GpuletBinary(), "--host-root", root.path(), "manifests",
                           "--image", "reg.example/gpulet:0.1.0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("deploy/overlays/talos"));
  EXPECT_THAT(r.out, HasSubstr("Talos v1.12.6"));
  EXPECT_THAT(r.out, HasSubstr("siderolabs/nvidia-open-gpu-kernel-modules-production"));
  EXPECT_THAT(r.out, HasSubstr("--talos-version v1.12.6"));
  absl::StatusOr<std::vector<YamlDocument>> docs = SplitYamlDocuments(r.out, "stdout");
  ASSERT_TRUE(docs.ok()) << docs.status();
  bool runtime_class = false, daemonset = false;
  for (const YamlDocument& d : *docs) {
    if (d.node["kind"].Scalar() == "RuntimeClass") runtime_class = true;
    if (d.node["kind"].Scalar() == "DaemonSet") {
      daemonset = true;
      YAML::Node spec = d.node["spec"]["template"]["spec"];
      EXPECT_FALSE(spec["runtimeClassName"]);  // gpulet itself needs no NVIDIA runtime
      EXPECT_EQ(spec["containers"][0]["image"].Scalar(), "reg.example/gpulet:0.1.0");
    }
  }
  EXPECT_TRUE(runtime_class);
  EXPECT_TRUE(daemonset);

  r = testing::RunProgram({gpulet::testing::GpuletBinary(), "--host-root", root.path(), "manifests",
                           "--talos-machine-patch"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("net.core.bpf_jit_harden: \"1\""));
  EXPECT_THAT(r.out, Not(HasSubstr("# sysctls:")));

  r = testing::RunProgram({gpulet::testing::GpuletBinary(), "--host-root", root.path(), "manifests",
                           "--talos-schematic"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("- siderolabs/nvidia-container-toolkit-production"));
}

TEST(ManifestsCommandTest, NonTalosNodeGetsGenericOverlayWithSourceComments) {
  testing::RunResult r =
      testing::RunProgram({gpulet::testing::GpuletBinary(), "--simulate", "dgx8", "manifests"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("deploy/overlays/generic"));
  EXPECT_THAT(r.out, HasSubstr("8 GPUs: 8 x NVIDIA H100 80GB HBM3 (Hopper)"));
  EXPECT_THAT(r.out, HasSubstr("image: gpulet:" GPULET_VERSION));
  EXPECT_THAT(r.out, HasSubstr("kubectl label node <node> nvidia.com/gpu.present=true"));
  // Unpatched documents keep their comments.
  EXPECT_THAT(r.out, HasSubstr("privileged: true, and here is why"));
  EXPECT_THAT(r.out, Not(HasSubstr("kind: RuntimeClass")));
  // Which overlay, why, and how to choose another, where a user piping to kubectl sees it.
  EXPECT_THAT(r.err, HasSubstr("rendered deploy/overlays/generic because the node under"));
  EXPECT_THAT(r.err, HasSubstr("is not Talos (/etc/os-release"));
  EXPECT_THAT(r.err, HasSubstr("pass --overlay talos|generic"));
  r = testing::RunProgram({gpulet::testing::GpuletBinary(), "manifests", "--no-inspect"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("because no node was inspected (--no-inspect)"));
}

TEST(ManifestsCommandTest, BadOptionsAreUsageErrors) {
  testing::RunResult r = testing::RunProgram(
      {gpulet::testing::GpuletBinary(), "manifests", "--no-inspect", "--talos-version", "latest"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("v1.12.6"));
  r = testing::RunProgram({gpulet::testing::GpuletBinary(), "manifests", "--overlay", "k3s"});
  EXPECT_EQ(r.exit_code, 2);
  r = testing::RunProgram(
      {gpulet::testing::GpuletBinary(), "manifests", "--talos-machine-patch", "--talos-schematic"});
  EXPECT_EQ(r.exit_code, 2);
}

TEST(ManifestsCommandTest, NoInspectWithTalosVersionPicksTalos) {
  testing::RunResult r =
      testing::RunProgram({gpulet::testing::GpuletBinary(), "manifests", "--no-inspect",
                           "--talos-version", "v1.14.1", "--talos-machine-patch"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("kind: KernelModuleConfig"));
}

}  // namespace
}  // namespace gpulet::deploy
