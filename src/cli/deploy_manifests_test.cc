// Checks every YAML file under deploy/ (read from GPULET_SOURCE_DIR): each document is a
// Kubernetes object of a known kind (or a Talos machine-config patch / Image Factory
// schematic, recognised separately), gpulet's containers name the gpulet image and only flags
// gpulet accepts, every kustomization's resources and patches exist and render, the Talos
// overlay names extensions that exist, gpulet's ConfigMaps load with gpulet's own config
// parser, the binary embeds exactly these files, and (where kubectl is installed) the real
// kustomize renders every kustomization to the same objects as gpulet's renderer, and the real
// helm renders charts/gpulet to the same objects as the overlays (lint --strict too). The DRA
// manifests against what the slices publish: src/dra/deviceclasses_test.cc.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cli/command.h"
#include "common/read_file.h"
#include "config/config.h"
#include "deploy/manifests.h"
#include "deploy/manifests_yaml.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/files.h"
#include "testing/homelab.h"
#include "testing/real_tools.h"
#include "testing/subprocess.h"

namespace gpulet::cli {
namespace {

using ::testing::HasSubstr;

struct KnownKind {
  const char* api_version;
  const char* kind;
  bool namespaced;
};

constexpr KnownKind kKnownKinds[] = {
    {"v1", "Namespace", false},
    {"v1", "ServiceAccount", true},
    {"v1", "ConfigMap", true},
    {"v1", "Secret", true},
    {"v1", "Service", true},
    {"v1", "PersistentVolume", false},
    {"v1", "PersistentVolumeClaim", true},
    {"apps/v1", "DaemonSet", true},
    {"apps/v1", "Deployment", true},
    {"node.k8s.io/v1", "RuntimeClass", false},
    {"rbac.authorization.k8s.io/v1", "Role", true},
    {"rbac.authorization.k8s.io/v1", "RoleBinding", true},
    {"rbac.authorization.k8s.io/v1", "ClusterRole", false},
    {"rbac.authorization.k8s.io/v1", "ClusterRoleBinding", false},
    {"monitoring.coreos.com/v1", "ServiceMonitor", true},
    {"monitoring.coreos.com/v1", "PodMonitor", true},
    {"monitoring.coreos.com/v1", "PrometheusRule", true},
    // Checked by the Prometheus Operator's own code: tests/amtool_routes_test.sh.
    {"monitoring.coreos.com/v1alpha1", "AlertmanagerConfig", true},
    {"resource.k8s.io/v1", "DeviceClass", false},
    {"resource.k8s.io/v1", "ResourceClaim", true},
    {"resource.k8s.io/v1", "ResourceClaimTemplate", true},
    {"argoproj.io/v1alpha1", "Application", true},
    // Talos' ServiceAccount for pods that reach its API (deploy/reboot-talos; the CRD Talos
    // serves: ../shared/reference/quotas-remediation-realk8s.md, section 4.2).
    {"talos.dev/v1alpha1", "ServiceAccount", true},
    {"kustomize.config.k8s.io/v1beta1", "Kustomization", false},
    {"kustomize.config.k8s.io/v1alpha1", "Component", false},
};

const KnownKind* FindKind(const std::string& api_version, const std::string& kind) {
  for (const KnownKind& k : kKnownKinds) {
    if (api_version == k.api_version && kind == k.kind) return &k;
  }
  return nullptr;
}

// The Talos extension packages that exist (siderolabs/extensions, nvidia-gpu/).
const std::set<std::string> kTalosExtensions = {
    "nonfree-kmod-nvidia-production",
    "nonfree-kmod-nvidia-lts",
    "nvidia-open-gpu-kernel-modules-production",
    "nvidia-open-gpu-kernel-modules-lts",
    "nvidia-container-toolkit-production",
    "nvidia-container-toolkit-lts",
    "nvidia-fabricmanager-production",
    "nvidia-fabricmanager-lts",
};

// Talos machine-config documents of the multi-document (1.12+) kinds.
const std::set<std::string> kTalosDocumentKinds = {"KernelModuleConfig", "KubeletConfig",
                                                   "KubeNodeConfig", "SysctlConfig"};

// Flags the DaemonSet may pass to gpulet: the global ones and `serve`'s. When `serve` exists
// in this build, its --help is checked too (ServeHelp below).
const std::set<std::string> kGpuletFlags = {
    "--host-root",   "--nvml-lib",        "--probe-timeout", "--call-timeout", "--verbose",
    "--kubelet-dir", "--metrics-address", "--config",        "--log-level",    "--cdi-spec-dir"};

enum class DocType {
  kKubernetes,
  kTalosMachinePatch,
  kTalosSchematic,
  kPrometheusRules,
  kPrometheusRuleTests,  // `promtool test rules` input
  kAlertmanagerConfig,   // an example alertmanager.yml
  kGrafanaProvisioning,
  kGpuletConfig,  // a config.yaml a configMapGenerator reads
};

// The node at `path` under `root`, or an undefined node (NodeAtPath).
YAML::Node At(const YAML::Node& root, std::initializer_list<const char*> path) {
  return deploy::NodeAtPath(root, std::vector<std::string>(path.begin(), path.end()));
}

struct Doc {
  std::string file;
  int line = 0;
  YAML::Node node;
  DocType type = DocType::kKubernetes;

  std::string Where() const { return absl::StrCat(file, ":", line); }
  std::string Scalar(std::initializer_list<const char*> path) const {
    YAML::Node n = At(node, path);
    return n.IsDefined() && n.IsScalar() ? n.Scalar() : "";
  }
};

class DeployManifestsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<deploy::ManifestFiles> files = deploy::ReadManifestFiles(GPULET_SOURCE_DIR);
    ASSERT_TRUE(files.ok()) << files.status();
    files_ = new deploy::ManifestFiles(std::move(*files));
  }
  static void TearDownTestSuite() {
    delete files_;
    files_ = nullptr;
  }

  // Every document of every file, classified.
  static std::vector<Doc> AllDocs() {
    std::vector<Doc> docs;
    for (const auto& [path, text] : *files_) {
      absl::StatusOr<std::vector<deploy::YamlDocument>> split =
          deploy::SplitYamlDocuments(text, path);
      EXPECT_TRUE(split.ok()) << split.status();
      if (!split.ok()) continue;
      for (deploy::YamlDocument& d : *split) {
        Doc doc{path, d.first_line, d.node, DocType::kKubernetes};
        if (absl::EndsWith(path, "/config.yaml") && d.node.IsMap() && d.node["version"]) {
          doc.type = DocType::kGpuletConfig;
        } else if (d.node.IsMap() && (d.node["machine"] || d.node["cluster"]) && !d.node["kind"]) {
          doc.type = DocType::kTalosMachinePatch;
        } else if (d.node.IsMap() && d.node["apiVersion"] &&
                   d.node["apiVersion"].Scalar() == "v1alpha1" && d.node["kind"] &&
                   kTalosDocumentKinds.count(d.node["kind"].Scalar())) {
          doc.type = DocType::kTalosMachinePatch;
        } else if (d.node.IsMap() && d.node["customization"]) {
          doc.type = DocType::kTalosSchematic;
        } else if (absl::StartsWith(path, "deploy/prometheus/") && d.node.IsMap() &&
                   d.node["groups"]) {
          doc.type = DocType::kPrometheusRules;
        } else if (absl::StartsWith(path, "deploy/prometheus/") && d.node.IsMap() &&
                   d.node["rule_files"] && d.node["tests"]) {
          doc.type = DocType::kPrometheusRuleTests;
        } else if (absl::StartsWith(path, "deploy/prometheus/") && d.node.IsMap() &&
                   d.node["route"] && d.node["receivers"]) {
          doc.type = DocType::kAlertmanagerConfig;
        } else if (absl::StartsWith(path, "deploy/grafana/") && d.node.IsMap() &&
                   (d.node["providers"] || d.node["datasources"])) {
          doc.type = DocType::kGrafanaProvisioning;
        }
        docs.push_back(std::move(doc));
      }
    }
    return docs;
  }

  // A kustomization with a generator: a user's kustomize runs it; gpulet's renderer, which
  // renders the overlays `gpulet manifests` prints, does not.
  static bool RunsGenerators(const YAML::Node& k) {
    return k["configMapGenerator"] || k["secretGenerator"];
  }

  static bool IsPatchFile(const std::string& path) {
    return absl::EndsWith(path, "-patch.yaml") && !absl::StrContains(path, "talos-machine");
  }

  static deploy::ManifestFiles* files_;
};

deploy::ManifestFiles* DeployManifestsTest::files_ = nullptr;

TEST_F(DeployManifestsTest, TreeHasTheExpectedFiles) {
  for (const char* path : {"deploy/base/kustomization.yaml",
                           "deploy/base/namespace.yaml",
                           "deploy/base/serviceaccount.yaml",
                           "deploy/base/clusterrole.yaml",
                           "deploy/base/configmap.yaml",
                           "deploy/base/daemonset.yaml",
                           "deploy/base/service.yaml",
                           "deploy/base/servicemonitor.yaml",
                           "deploy/overlays/talos/kustomization.yaml",
                           "deploy/overlays/talos/runtimeclass.yaml",
                           deploy::kTalosMachinePatchPath,
                           deploy::kTalosSchematicPath,
                           "deploy/overlays/generic/kustomization.yaml",
                           "deploy/examples/ollama/whole-card/kustomization.yaml",
                           "deploy/dra/kustomization.yaml",
                           "deploy/dra/deviceclasses.yaml",
                           "deploy/dra/clusterrole.yaml",
                           "deploy/overlays/dra/kustomization.yaml",
                           "deploy/overlays/talos-dra/kustomization.yaml",
                           "deploy/examples/dra/whole-gpu/kustomization.yaml",
                           "deploy/examples/dra/shared/kustomization.yaml",
                           "deploy/examples/dra/gpulet-memory-shares/kustomization.yaml",
                           "deploy/examples/dra/side-by-side/kustomization.yaml",
                           "deploy/monitoring/kustomization.yaml",
                           "deploy/monitoring/prometheusrule.yaml",
                           "deploy/monitoring/grafana-dashboard.yaml"}) {
    EXPECT_EQ(files_->count(path), 1u) << path;
  }
}

TEST_F(DeployManifestsTest, EveryDocumentIsAKnownObjectWithAName) {
  int kube = 0;
  for (const Doc& d : AllDocs()) {
    if (d.type != DocType::kKubernetes) continue;
    ++kube;
    std::string api = d.Scalar({"apiVersion"});
    std::string kind = d.Scalar({"kind"});
    const KnownKind* known = FindKind(api, kind);
    ASSERT_NE(known, nullptr) << d.Where() << ": unknown apiVersion/kind '" << api << "' / '"
                              << kind << "'";
    if (kind == "Kustomization" || kind == "Component") {
      EXPECT_TRUE(absl::EndsWith(d.file, "/kustomization.yaml")) << d.Where();
      continue;
    }
    EXPECT_FALSE(d.Scalar({"metadata", "name"}).empty()) << d.Where() << ": no metadata.name";
    // gpulet's own objects live in gpulet-system.
    if (known->namespaced &&
        (absl::StartsWith(d.file, "deploy/base/") || absl::StartsWith(d.file, "deploy/overlays/") ||
         absl::StartsWith(d.file, "deploy/dra/"))) {
      EXPECT_EQ(d.Scalar({"metadata", "namespace"}), "gpulet-system") << d.Where();
    }
  }
  EXPECT_GT(kube, 10);
}

TEST_F(DeployManifestsTest, GpuletContainersUseTheImageAndKnownFlags) {
  std::set<std::string> flags_used;
  int containers = 0;
  for (const Doc& d : AllDocs()) {
    if (d.type != DocType::kKubernetes) continue;
    for (const char* list : {"containers", "initContainers"}) {
      YAML::Node cs = At(d.node, {"spec", "template", "spec", list});
      if (!cs.IsDefined() || !cs.IsSequence()) continue;
      for (const auto& c : cs) {
        std::string image = c["image"] ? c["image"].Scalar() : "";
        bool gpulet = c["name"].Scalar() == "gpulet" || absl::StartsWith(image, "gpulet:");
        if (!gpulet) continue;
        if (IsPatchFile(d.file) && image.empty()) continue;  // a patch names only what it changes
        ++containers;
        EXPECT_EQ(image, deploy::DefaultGpuletImage()) << d.Where();
        ASSERT_TRUE(c["args"] && c["args"].IsSequence()) << d.Where();
        EXPECT_EQ(c["args"][0].Scalar(), "serve") << d.Where();
        for (size_t i = 1; i < c["args"].size(); ++i) {
          std::string arg = c["args"][i].Scalar();
          ASSERT_TRUE(absl::StartsWith(arg, "--")) << d.Where() << ": " << arg;
          std::string flag = arg.substr(0, arg.find('='));
          EXPECT_EQ(kGpuletFlags.count(flag), 1u) << d.Where() << ": unknown flag " << flag;
          flags_used.insert(flag);
        }
      }
    }
  }
  EXPECT_EQ(containers, 1);
  bool have_serve = false;
  for (const Command& c : Commands()) have_serve |= std::string(c.name) == "serve";
  if (have_serve) {
    testing::RunResult help =
        testing::RunProgram({gpulet::testing::GpuletBinary(), "serve", "--help"});
    ASSERT_EQ(help.exit_code, 0) << help.err;
    for (const std::string& flag : flags_used) {
      EXPECT_THAT(help.out, HasSubstr(flag)) << "`gpulet serve --help` does not list " << flag;
    }
  }
}

// The gpulet DaemonSet's wiring: flags, mounts, probes, tolerations and node selection agree.
TEST_F(DeployManifestsTest, DaemonSetWiring) {
  absl::StatusOr<std::vector<deploy::KubeObject>> objs =
      deploy::RenderKustomization(*files_, "deploy/base", {});
  ASSERT_TRUE(objs.ok()) << objs.status();
  const deploy::KubeObject* ds = nullptr;
  const deploy::KubeObject* ns = nullptr;
  const deploy::KubeObject* cm = nullptr;
  for (const deploy::KubeObject& o : *objs) {
    if (o.Kind() == "DaemonSet") ds = &o;
    if (o.Kind() == "Namespace") ns = &o;
    if (o.Kind() == "ConfigMap") cm = &o;
  }
  ASSERT_TRUE(ds && ns && cm);
  YAML::Node pod = ds->node["spec"]["template"]["spec"];
  YAML::Node c = pod["containers"][0];
  std::map<std::string, std::string> args;
  for (const auto& a : c["args"]) {
    std::string s = a.Scalar();
    size_t eq = s.find('=');
    if (eq != std::string::npos) args[s.substr(0, eq)] = s.substr(eq + 1);
  }
  std::map<std::string, std::string> host_paths;  // volume name -> host path
  for (const auto& v : pod["volumes"]) {
    if (v["hostPath"]) host_paths[v["name"].Scalar()] = v["hostPath"]["path"].Scalar();
  }
  std::set<std::string> paths;
  for (const auto& [name, path] : host_paths) paths.insert(path);
  EXPECT_EQ(paths, (std::set<std::string>{"/", "/dev", "/sys", "/var/run/cdi",
                                          "/var/lib/kubelet/device-plugins",
                                          "/var/lib/kubelet/pod-resources", "/var/lib/gpulet",
                                          "/etc/kubernetes/node-feature-discovery/features.d"}));
  std::map<std::string, YAML::Node> mounts;  // mount path -> mount
  for (const auto& m : c["volumeMounts"]) {
    mounts.emplace(m["mountPath"].Scalar(), static_cast<const YAML::Node&>(m));
  }
  // Host root read-only at --host-root, the kubelet directories under --kubelet-dir.
  ASSERT_TRUE(mounts.count(args["--host-root"]));
  EXPECT_EQ(host_paths[mounts[args["--host-root"]]["name"].Scalar()], "/");
  EXPECT_EQ(mounts[args["--host-root"]]["readOnly"].Scalar(), "true");
  EXPECT_EQ(mounts["/sys"]["readOnly"].Scalar(), "true");
  for (const char* sub : {"/device-plugins", "/pod-resources"}) {
    std::string path = args["--kubelet-dir"] + sub;
    ASSERT_TRUE(mounts.count(path)) << path;
    EXPECT_EQ(host_paths[mounts[path]["name"].Scalar()], path);
  }
  // gpulet writes its CDI spec and its labels through the host root: each directory is a
  // writable mount of the same host directory, at the place the host path resolves to.
  const std::string cdi_dir = args["--host-root"] + args["--cdi-spec-dir"];
  ASSERT_TRUE(mounts.count(cdi_dir)) << cdi_dir;
  EXPECT_EQ(host_paths[mounts[cdi_dir]["name"].Scalar()], "/var/run/cdi");
  EXPECT_FALSE(mounts[cdi_dir]["readOnly"]);
  const std::string features = config::Config().labels.features_file;
  const std::string features_dir = args["--host-root"] + features.substr(0, features.rfind('/'));
  ASSERT_TRUE(mounts.count(features_dir)) << features_dir;
  EXPECT_EQ(args["--host-root"] + host_paths[mounts[features_dir]["name"].Scalar()], features_dir);
  EXPECT_FALSE(mounts[features_dir]["readOnly"]);
  // And the XID history (health.xidHistoryFile), the same way.
  const std::string history = config::Config().health.xid_history_file;
  const std::string history_dir = args["--host-root"] + history.substr(0, history.rfind('/'));
  ASSERT_TRUE(mounts.count(history_dir)) << history_dir;
  EXPECT_EQ(args["--host-root"] + host_paths[mounts[history_dir]["name"].Scalar()], history_dir);
  EXPECT_FALSE(mounts[history_dir]["readOnly"]);
  std::map<std::string, std::string> env;
  for (const auto& e : c["env"]) {
    if (e["value"]) env[e["name"].Scalar()] = e["value"].Scalar();
  }
  // Commands run by hand in the pod see the node and the daemon's config.
  EXPECT_EQ(env["GPULET_HOST_ROOT"], args["--host-root"]);
  EXPECT_EQ(env["GPULET_CONFIG"], args["--config"]);
  // The config file is config.yaml of the mounted ConfigMap.
  std::string config = args["--config"];
  std::string config_dir = config.substr(0, config.rfind('/'));
  ASSERT_TRUE(mounts.count(config_dir));
  EXPECT_TRUE(cm->node["data"][config.substr(config.rfind('/') + 1)]);
  // Metrics port, probes.
  EXPECT_EQ(args["--metrics-address"], ":9400");
  EXPECT_EQ(c["ports"][0]["containerPort"].Scalar(), "9400");
  for (const char* probe : {"livenessProbe", "readinessProbe", "startupProbe"}) {
    EXPECT_EQ(c[probe]["httpGet"]["path"].Scalar(), "/healthz") << probe;
    EXPECT_EQ(c[probe]["httpGet"]["port"].Scalar(), c["ports"][0]["name"].Scalar()) << probe;
  }
  EXPECT_TRUE(c["resources"]["requests"] && c["resources"]["limits"]);
  // Privileged (see the comment in daemonset.yaml) needs a privileged namespace.
  EXPECT_EQ(c["securityContext"]["privileged"].Scalar(), "true");
  EXPECT_EQ(ns->node["metadata"]["labels"]["pod-security.kubernetes.io/enforce"].Scalar(),
            "privileged");
  EXPECT_EQ(ns->Name(), "gpulet-system");
  // Tolerates every nvidia.com/gpu taint; selects nodes labelled nvidia.com/gpu.present=true.
  bool tolerates = false;
  for (const auto& t : pod["tolerations"]) {
    if (t["key"].Scalar() == "nvidia.com/gpu" && t["operator"].Scalar() == "Exists" &&
        !t["effect"] && !t["value"]) {
      tolerates = true;
    }
  }
  EXPECT_TRUE(tolerates);
  bool selects = false;
  for (const auto& term :
       pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
          ["nodeSelectorTerms"]) {
    const auto& e = term["matchExpressions"][0];
    if (e["key"].Scalar() == "nvidia.com/gpu.present" && e["values"][0].Scalar() == "true") {
      selects = true;
    }
  }
  EXPECT_TRUE(selects);
}

TEST_F(DeployManifestsTest, KustomizationsReferenceExistingFilesAndRender) {
  int rendered = 0;
  std::set<std::string> components, included;  // Component directories; those listed somewhere
  for (const auto& [path, text] : *files_) {
    if (!absl::EndsWith(path, "/kustomization.yaml")) continue;
    std::string dir = path.substr(0, path.rfind('/'));
    YAML::Node k = YAML::Load(text);
    for (const auto& r : k["resources"]) {
      std::filesystem::path p = std::filesystem::path(GPULET_SOURCE_DIR) / dir / r.Scalar();
      EXPECT_TRUE(std::filesystem::is_regular_file(p) ||
                  std::filesystem::is_regular_file(p / "kustomization.yaml"))
          << path << ": resource " << r.Scalar() << " does not exist";
    }
    for (const auto& c : k["components"]) {
      std::filesystem::path p = std::filesystem::path(GPULET_SOURCE_DIR) / dir / c.Scalar();
      EXPECT_TRUE(std::filesystem::is_regular_file(p / "kustomization.yaml"))
          << path << ": component " << c.Scalar() << " does not exist";
      included.insert(std::filesystem::relative(std::filesystem::weakly_canonical(p),
                                                std::filesystem::path(GPULET_SOURCE_DIR))
                          .generic_string());
    }
    for (const auto& p : k["patches"]) {
      EXPECT_TRUE(std::filesystem::is_regular_file(std::filesystem::path(GPULET_SOURCE_DIR) / dir /
                                                   p["path"].Scalar()))
          << path << ": patch " << p["path"].Scalar() << " does not exist";
    }
    for (const auto& g : k["configMapGenerator"]) {
      for (const auto& f : g["files"]) {
        EXPECT_TRUE(std::filesystem::is_regular_file(std::filesystem::path(GPULET_SOURCE_DIR) /
                                                     dir / f.Scalar()))
            << path << ": generator file " << f.Scalar() << " does not exist";
      }
    }
    // A Component renders only inside a kustomization that lists it (checked below).
    if (k["kind"] && k["kind"].Scalar() == "Component") {
      components.insert(dir);
      continue;
    }
    if (RunsGenerators(k)) continue;  // the real kustomize's (below)
    absl::StatusOr<std::vector<deploy::KubeObject>> objs =
        deploy::RenderKustomization(*files_, dir, {});
    ASSERT_TRUE(objs.ok()) << objs.status();
    EXPECT_FALSE(objs->empty()) << dir;
    // What gpulet prints reads back as the same objects.
    absl::StatusOr<std::vector<deploy::YamlDocument>> back =
        deploy::SplitYamlDocuments(deploy::FormatObjects(*objs), absl::StrCat(dir, " (rendered)"));
    ASSERT_TRUE(back.ok()) << back.status();
    ASSERT_EQ(back->size(), objs->size()) << dir;
    for (size_t i = 0; i < objs->size(); ++i) {
      EXPECT_TRUE(deploy::YamlEqual((*back)[i].node, (*objs)[i].node))
          << dir << ": " << (*objs)[i].Kind() << " " << (*objs)[i].Name();
    }
    ++rendered;
  }
  EXPECT_GE(rendered, 12);
  EXPECT_EQ(components, (std::set<std::string>{"deploy/dra", "deploy/evict", "deploy/reboot",
                                               "deploy/reboot-talos", "deploy/reset"}));
  for (const std::string& c : components) {
    EXPECT_TRUE(included.count(c)) << c << " is a Component no kustomization lists";
  }
}

// The real kustomize, else kubectl's built-in one. Returns the command before the directory
// ({} when none is found).
std::vector<std::string> RealKustomize() {
  if (std::string k = testing::RealTool("kustomize"); !k.empty()) return {k, "build"};
  if (std::string k = testing::FindOnPath("kubectl"); !k.empty()) return {k, "kustomize"};
  return {};
}

// apiVersion, kind, namespace/name: how the comparisons below match objects.
std::string ObjectId(const YAML::Node& n) {
  YAML::Node meta = n["metadata"];
  return absl::StrCat(n["apiVersion"].Scalar(), " ", n["kind"].Scalar(), " ",
                      meta["namespace"] ? meta["namespace"].Scalar() : "", "/",
                      meta["name"].Scalar());
}

// The objects a real tool printed, by ObjectId.
std::map<std::string, YAML::Node> ObjectsById(const std::string& out, const std::string& what) {
  std::map<std::string, YAML::Node> by_id;
  absl::StatusOr<std::vector<deploy::YamlDocument>> docs = deploy::SplitYamlDocuments(out, what);
  EXPECT_TRUE(docs.ok()) << docs.status();
  if (!docs.ok()) return by_id;
  for (const deploy::YamlDocument& d : *docs) {
    if (d.node.IsNull()) continue;  // helm prints an empty document for a template it skips
    EXPECT_TRUE(by_id.emplace(ObjectId(d.node), d.node).second)
        << what << ": twice: " << ObjectId(d.node);
  }
  return by_id;
}

// The real kustomize renders every kustomization under deploy/ to the same objects gpulet's
// RenderKustomization does. `make test` builds it first; only a bare ctest run without it
// skips, and never in CI.
TEST_F(DeployManifestsTest, KubectlKustomizeRendersEveryKustomizationAsGpuletDoes) {
  const std::vector<std::string> kustomize = RealKustomize();
  GPULET_REQUIRE_REAL_TOOL(kustomize, "kustomize");
  int checked = 0;
  for (const auto& [path, text] : *files_) {
    if (!absl::EndsWith(path, "/kustomization.yaml")) continue;
    YAML::Node k = YAML::Load(text);
    if (k["kind"] && k["kind"].Scalar() == "Component") continue;  // not buildable alone
    const std::string dir = path.substr(0, path.rfind('/'));
    std::vector<std::string> argv = kustomize;
    argv.push_back(absl::StrCat(GPULET_SOURCE_DIR, "/", dir));
    testing::RunResult r = testing::RunProgram(argv);
    ASSERT_EQ(r.exit_code, 0) << absl::StrJoin(argv, " ") << ":\n" << r.err;
    if (RunsGenerators(k)) continue;  // RollingConfigExample checks what kustomize made
    std::map<std::string, YAML::Node> by_id =
        ObjectsById(r.out, absl::StrCat("kubectl kustomize ", dir));
    absl::StatusOr<std::vector<deploy::KubeObject>> ours =
        deploy::RenderKustomization(*files_, dir, {});
    ASSERT_TRUE(ours.ok()) << ours.status();
    EXPECT_EQ(by_id.size(), ours->size()) << dir;
    for (const deploy::KubeObject& o : *ours) {
      auto it = by_id.find(ObjectId(o.node));
      if (it == by_id.end()) {
        ADD_FAILURE() << dir << ": kustomize does not render " << ObjectId(o.node);
        continue;
      }
      EXPECT_TRUE(deploy::YamlEqual(it->second, o.node))
          << dir << ": " << ObjectId(o.node) << " differs; kustomize:\n"
          << deploy::EmitYaml(it->second) << "gpulet:\n"
          << deploy::EmitYaml(o.node);
    }
    ++checked;
  }
  EXPECT_GE(checked, 12);
}

// `helm template` of charts/gpulet with these --set values, for a cluster of `kube_version`.
testing::RunResult HelmTemplate(const std::string& helm, const std::vector<std::string>& sets,
                                const std::string& kube_version = "1.34.0") {
  std::vector<std::string> argv = {helm,
                                   "template",
                                   "gpulet",
                                   absl::StrCat(GPULET_SOURCE_DIR, "/charts/gpulet"),
                                   "--namespace",
                                   "gpulet-system",
                                   "--kube-version",
                                   kube_version};
  for (const std::string& s : sets) {
    argv.push_back("--set");
    argv.push_back(s);
  }
  return testing::RunProgram(argv);
}

// gpulet's ConfigMap with its config.yaml parsed: the chart writes the file with toYaml (keys
// sorted, no comments), the kustomize tree by hand; what gpulet reads must be the same.
YAML::Node WithConfigParsed(YAML::Node object) {
  YAML::Node copy = YAML::Clone(object);
  if (copy["kind"].Scalar() == "ConfigMap" && copy["data"] && copy["data"]["config.yaml"]) {
    copy["data"]["config.yaml"] = YAML::Load(copy["data"]["config.yaml"].Scalar());
  }
  return copy;
}

// The Helm chart and the kustomize tree are one install: with the values each overlay stands
// for, `helm template` renders the overlay's objects, and nothing else.
TEST_F(DeployManifestsTest, HelmRendersWhatKustomizeRenders) {
  const std::string helm = testing::RealTool("helm");
  GPULET_REQUIRE_REAL_TOOL(helm, "helm");
  const std::vector<std::string> kustomize = RealKustomize();
  GPULET_REQUIRE_REAL_TOOL(kustomize, "kustomize");
  struct Case {
    const char* overlay;
    std::vector<std::string> sets;
    bool without_namespace;  // helm install's default: the namespace exists already
  };
  const Case cases[] = {
      {"overlays/generic", {}, true},
      {"overlays/generic", {"namespace.create=true"}, false},
      {"overlays/talos", {"namespace.create=true", "runtimeClass.create=true"}, false},
      {"overlays/dra", {"namespace.create=true", "dra.enabled=true"}, false},
      {"overlays/talos-dra", {"dra.enabled=true", "runtimeClass.create=true"}, true},
      {"examples/evict", {"namespace.create=true", "evict.enabled=true"}, false},
      {"examples/remediation",
       {"namespace.create=true", "evict.enabled=true", "reset.enabled=true", "reboot.enabled=true"},
       false},
      {"examples/remediation-talos",
       {"namespace.create=true", "runtimeClass.create=true", "evict.enabled=true",
        "reset.enabled=true", "rebootTalos.enabled=true"},
       false},
  };
  for (const Case& c : cases) {
    const std::string what = absl::StrCat(c.overlay, " --set ", absl::StrJoin(c.sets, ","));
    std::vector<std::string> argv = kustomize;
    argv.push_back(absl::StrCat(GPULET_SOURCE_DIR, "/deploy/", c.overlay));
    testing::RunResult k = testing::RunProgram(argv);
    ASSERT_EQ(k.exit_code, 0) << absl::StrJoin(argv, " ") << ":\n" << k.err;
    std::map<std::string, YAML::Node> want = ObjectsById(k.out, c.overlay);
    if (c.without_namespace) want.erase("v1 Namespace /gpulet-system");
    testing::RunResult h = HelmTemplate(helm, c.sets);
    ASSERT_EQ(h.exit_code, 0) << what << ":\n" << h.err;
    std::map<std::string, YAML::Node> got = ObjectsById(h.out, what);
    for (const auto& [id, object] : want) {
      auto it = got.find(id);
      if (it == got.end()) {
        ADD_FAILURE() << what << ": the chart does not render " << id;
        continue;
      }
      EXPECT_TRUE(deploy::YamlEqual(WithConfigParsed(object), WithConfigParsed(it->second)))
          << what << ": " << id << " differs; kustomize:\n"
          << deploy::EmitYaml(object) << "helm:\n"
          << deploy::EmitYaml(it->second);
    }
    for (const auto& [id, object] : got) {
      EXPECT_TRUE(want.count(id)) << what << ": the chart renders " << id << ", kustomize does not";
    }
  }
}

TEST_F(DeployManifestsTest, HelmLintPassesStrict) {
  const std::string helm = testing::RealTool("helm");
  GPULET_REQUIRE_REAL_TOOL(helm, "helm");
  for (const char* set :
       {"namespace.create=false", "dra.enabled=true,serviceMonitor.enabled=true"}) {
    testing::RunResult r =
        testing::RunProgram({helm, "lint", "--strict", "--kube-version", "1.34.0", "--set", set,
                             absl::StrCat(GPULET_SOURCE_DIR, "/charts/gpulet")});
    EXPECT_EQ(r.exit_code, 0) << set << ":\n" << r.out << r.err;
  }
}

// The common settings reach the objects, and a wrong one is refused with what to do.
TEST_F(DeployManifestsTest, HelmValuesReachTheObjectsAndBadOnesAreRefused) {
  const std::string helm = testing::RealTool("helm");
  GPULET_REQUIRE_REAL_TOOL(helm, "helm");
  const std::string digest = absl::StrCat("sha256:", std::string(64, 'a'));
  testing::RunResult r = HelmTemplate(
      helm, {absl::StrCat("image.repository=registry.example.com/gpulet,image.digest=", digest),
             "kubeletDir=/var/lib/k0s/kubelet/", "config.sharing.timeSlicing.replicas=4",
             "serviceMonitor.enabled=true,clusterReporting=false"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, YAML::Node> got = ObjectsById(r.out, "helm template");
  ASSERT_TRUE(got.count("apps/v1 DaemonSet gpulet-system/gpulet"));
  YAML::Node pod = got["apps/v1 DaemonSet gpulet-system/gpulet"]["spec"]["template"]["spec"];
  YAML::Node container = pod["containers"][0];
  EXPECT_EQ(container["image"].Scalar(), absl::StrCat("registry.example.com/gpulet@", digest));
  std::vector<std::string> args;
  for (const auto& a : container["args"]) args.push_back(a.Scalar());
  EXPECT_THAT(args, ::testing::Contains("--kubelet-dir=/var/lib/k0s/kubelet"));
  for (const auto& v : pod["volumes"]) {
    if (v["name"].Scalar() == "device-plugins") {
      EXPECT_EQ(v["hostPath"]["path"].Scalar(), "/var/lib/k0s/kubelet/device-plugins");
    }
  }
  for (const auto& e : container["env"]) {
    if (e["name"].Scalar() == "GPULET_CLUSTER_REPORTING") {
      EXPECT_EQ(e["value"].Scalar(), "false");
    }
  }
  EXPECT_TRUE(got.count("monitoring.coreos.com/v1 ServiceMonitor gpulet-system/gpulet"));
  absl::StatusOr<config::Config> config = config::ParseConfig(
      got["v1 ConfigMap gpulet-system/gpulet-config"]["data"]["config.yaml"].Scalar(), "chart", {});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->sharing.time_slicing.replicas, 4);
  EXPECT_EQ(config->resource_name, "nvidia.com/gpu");

  struct Bad {
    std::vector<std::string> sets;
    const char* kube_version;
    const char* says;
  };
  const Bad bad[] = {
      {{"image.digest=latest"}, "1.34.0", "is not a digest"},
      {{"kubeletDir=var/lib/kubelet"}, "1.34.0", "must be an absolute path"},
      {{"dra.enabled=true"}, "1.33.4", "dra.enabled needs Kubernetes 1.34"},
      {{}, "1.28.0", "1.29"},  // Chart.yaml's kubeVersion
  };
  for (const Bad& b : bad) {
    testing::RunResult f = HelmTemplate(helm, b.sets, b.kube_version);
    EXPECT_NE(f.exit_code, 0) << absl::StrJoin(b.sets, ",");
    EXPECT_THAT(f.err, HasSubstr(b.says)) << absl::StrJoin(b.sets, ",");
  }
}

// deploy/monitoring wraps the files Prometheus and Grafana read as they are
// (scripts/gen_monitoring.py): the same rule groups, the same dashboard, byte for byte.
TEST_F(DeployManifestsTest, MonitoringManifestsWrapTheirSources) {
  auto doc = [&](const std::string& path) {
    auto it = files_->find(path);
    return it == files_->end() ? YAML::Node() : YAML::Load(it->second);
  };
  YAML::Node rule = doc("deploy/monitoring/prometheusrule.yaml");
  YAML::Node rules = doc("deploy/prometheus/gpulet-rules.yaml");
  ASSERT_TRUE(rule.IsMap() && rules.IsMap());
  EXPECT_EQ(rule["kind"].Scalar(), "PrometheusRule");
  EXPECT_TRUE(deploy::YamlEqual(rule["spec"]["groups"], rules["groups"]))
      << "deploy/monitoring/prometheusrule.yaml is stale: run scripts/gen_monitoring.py";

  absl::StatusOr<std::string> read = ReadRegularFile(
      absl::StrCat(GPULET_SOURCE_DIR, "/deploy/grafana/gpulet-dashboard.json"), 1 << 20);
  ASSERT_TRUE(read.ok()) << read.status();
  std::string dashboard = *read;
  if (!absl::EndsWith(dashboard, "\n")) dashboard += "\n";
  YAML::Node board = doc("deploy/monitoring/grafana-dashboard.yaml");
  ASSERT_TRUE(board.IsMap());
  EXPECT_EQ(board["metadata"]["labels"]["grafana_dashboard"].Scalar(), "1");
  EXPECT_TRUE(board["data"]["gpulet-dashboard.json"].Scalar() == dashboard)
      << "deploy/monitoring/grafana-dashboard.yaml is stale: run scripts/gen_monitoring.py";
}

// The ArgoCD example: every Application's path is a kustomization of this tree that renders,
// into the namespace its objects name; one whose objects need a CRD (the Prometheus
// Operator's kinds) syncs in a later wave than gpulet and skips the dry run for missing kinds.
TEST_F(DeployManifestsTest, ArgoCdExample) {
  absl::StatusOr<std::vector<deploy::KubeObject>> apps =
      deploy::RenderKustomization(*files_, "deploy/examples/argocd", {});
  ASSERT_TRUE(apps.ok()) << apps.status();
  std::map<std::string, int> wave;
  for (const deploy::KubeObject& app : *apps) {
    ASSERT_EQ(app.Kind(), "Application");
    const std::string name = app.Name();
    const std::string path = At(app.node, {"spec", "source", "path"}).Scalar();
    EXPECT_TRUE(files_->count(absl::StrCat(path, "/kustomization.yaml"))) << name << ": " << path;
    absl::StatusOr<std::vector<deploy::KubeObject>> objects =
        deploy::RenderKustomization(*files_, path, {});
    ASSERT_TRUE(objects.ok()) << name << ": " << objects.status();
    const std::string ns = At(app.node, {"spec", "destination", "namespace"}).Scalar();
    bool needs_crd = false;
    for (const deploy::KubeObject& o : *objects) {
      if (!o.Namespace().empty()) {
        EXPECT_EQ(o.Namespace(), ns) << name << ": " << o.Name();
      }
      needs_crd |= absl::StartsWith(o.node["apiVersion"].Scalar(), "monitoring.coreos.com/");
    }
    const std::string w =
        At(app.node, {"metadata", "annotations", "argocd.argoproj.io/sync-wave"}).Scalar();
    ASSERT_TRUE(absl::SimpleAtoi(w, &wave[name])) << name << ": sync-wave '" << w << "'";
    bool skips = false;
    for (const auto& option : At(app.node, {"spec", "syncPolicy", "syncOptions"})) {
      skips |= option.Scalar() == "SkipDryRunOnMissingResource=true";
    }
    EXPECT_EQ(skips, needs_crd) << name;
  }
  ASSERT_EQ(wave.size(), 2u);
  EXPECT_LT(wave["gpulet"], wave["gpulet-monitoring"]);
}

TEST_F(DeployManifestsTest, TalosOverlayNamesRealExtensions) {
  // Every extension-looking word in the Talos overlay, comments included, must exist.
  std::regex word(
      R"((nvidia-open-gpu-kernel-modules|nonfree-kmod-nvidia|nvidia-container-toolkit|nvidia-fabricmanager)(-[a-z]+)?)");
  for (const auto& [path, text] : *files_) {
    if (!absl::StartsWith(path, "deploy/overlays/talos/")) continue;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), word);
         it != std::sregex_iterator(); ++it) {
      EXPECT_EQ(kTalosExtensions.count(it->str()), 1u)
          << path << ": '" << it->str() << "' is not a Talos extension";
    }
  }
  YAML::Node schematic = YAML::Load(files_->at(deploy::kTalosSchematicPath));
  std::vector<std::string> names;
  for (const auto& e : schematic["customization"]["systemExtensions"]["officialExtensions"]) {
    absl::string_view name = e.Scalar();
    ASSERT_TRUE(absl::ConsumePrefix(&name, "siderolabs/")) << e.Scalar();
    EXPECT_EQ(kTalosExtensions.count(std::string(name)), 1u) << name;
    names.emplace_back(name);
  }
  EXPECT_THAT(names, ::testing::ElementsAre("nvidia-open-gpu-kernel-modules-production",
                                            "nvidia-container-toolkit-production"));
}

TEST_F(DeployManifestsTest, TalosMachinePatch) {
  YAML::Node patch = YAML::Load(files_->at(deploy::kTalosMachinePatchPath));
  std::vector<std::string> modules;
  for (const auto& m : patch["machine"]["kernel"]["modules"]) modules.push_back(m["name"].Scalar());
  EXPECT_THAT(modules,
              ::testing::ElementsAre("nvidia", "nvidia_uvm", "nvidia_drm", "nvidia_modeset"));
  // The taint via the kubelet flag (set at registration), not machine.nodeTaints.
  EXPECT_EQ(patch["machine"]["kubelet"]["extraArgs"]["register-with-taints"].Scalar(),
            "nvidia.com/gpu=present:NoSchedule");
  EXPECT_FALSE(patch["machine"]["nodeTaints"]);
  EXPECT_FALSE(patch["machine"]["kubelet"]["extraConfig"]);
  EXPECT_EQ(patch["machine"]["nodeLabels"]["nvidia.com/gpu.present"].Scalar(), "true");
  EXPECT_EQ(patch["machine"]["nodeLabels"]["nvidia.com/gpu.present"].Tag(), "!");

  absl::StatusOr<std::vector<deploy::KubeObject>> objs =
      deploy::RenderKustomization(*files_, deploy::kTalosOverlayDir, {});
  ASSERT_TRUE(objs.ok()) << objs.status();
  bool runtime_class = false;
  for (const deploy::KubeObject& o : *objs) {
    if (o.Kind() == "RuntimeClass") {
      runtime_class = o.Name() == "nvidia" && o.node["handler"].Scalar() == "nvidia";
    }
    if (o.Kind() == "DaemonSet") {
      // gpulet's own pod runs with the default runtime: a broken NVIDIA runtime must not keep
      // the daemon that diagnoses it from starting.
      YAML::Node pod = o.node["spec"]["template"]["spec"];
      EXPECT_FALSE(pod["runtimeClassName"]);
      std::map<std::string, std::string> env;
      for (const auto& e : pod["containers"][0]["env"]) {
        if (e["value"]) env[e["name"].Scalar()] = e["value"].Scalar();
      }
      EXPECT_FALSE(env.count("NVIDIA_VISIBLE_DEVICES"));
      EXPECT_EQ(pod["containers"][0]["image"].Scalar(), deploy::DefaultGpuletImage());
    }
  }
  EXPECT_TRUE(runtime_class);
}

TEST_F(DeployManifestsTest, GpuletConfigMapsLoadWithGpuletsParser) {
  int configs = 0;
  for (const Doc& d : AllDocs()) {
    if (d.Scalar({"kind"}) != "ConfigMap" || d.Scalar({"metadata", "name"}) != "gpulet-config" ||
        d.node["$patch"]) {  // a patch that leaves it out
      continue;
    }
    std::string yaml = d.Scalar({"data", "config.yaml"});
    absl::StatusOr<config::Config> config = config::ParseConfig(yaml, d.Where(), {});
    ASSERT_TRUE(config.ok()) << config.status();
    ++configs;
    if (absl::StartsWith(d.file, "deploy/examples/ollama/")) {
      EXPECT_TRUE(config->sharing.memory_slices.enabled);
      EXPECT_EQ(config->sharing.memory_slices.slice_mib, 1024);
      EXPECT_EQ(config->sharing.memory_slices.resource_name, "nvidia.com/gpu-memory");
    } else {
      EXPECT_FALSE(config->sharing.memory_slices.enabled);
      EXPECT_EQ(config->sharing.time_slicing.replicas, 1);
    }
    EXPECT_EQ(config->resource_name, "nvidia.com/gpu");
    // DRA: on in deploy/dra and the DRA examples, with the default driver name the
    // DeviceClasses select; memory shares only in the shared-card example, GPU 1 only in the
    // side-by-side one.
    const bool dra =
        absl::StartsWith(d.file, "deploy/dra/") || absl::StartsWith(d.file, "deploy/examples/dra/");
    EXPECT_EQ(config->dra.enabled, dra) << d.Where();
    EXPECT_EQ(config->dra.driver_name, config::Config().dra.driver_name) << d.Where();
    EXPECT_EQ(config->dra.memory_shares.enabled,
              absl::StartsWith(d.file, "deploy/examples/dra/gpulet-memory-shares/"))
        << d.Where();
    EXPECT_EQ(config->dra.gpus, absl::StartsWith(d.file, "deploy/examples/dra/side-by-side/")
                                    ? std::vector<std::string>{"1"}
                                    : std::vector<std::string>{"all"})
        << d.Where();
    if (absl::StartsWith(d.file, "deploy/examples/dra/side-by-side/")) {
      // GPU 1 is DRA's and GPU 0 the device plugin's: never both.
      EXPECT_TRUE(config->DraOffers(1, "GPU-b"));
      EXPECT_FALSE(config->DraOffers(0, "GPU-a"));
    }
    // Where DRA is on, its checkpoint stays in gpulet's state directory (mounted writable by
    // deploy/base; DraWiring checks the mount).
    EXPECT_EQ(config->dra.checkpoint_file, config::Config().dra.checkpoint_file) << d.Where();
  }
  EXPECT_EQ(configs, 5);
}

// Returns the limits of the named container of a rendered Deployment.
YAML::Node Limits(const std::vector<deploy::KubeObject>& objs, const std::string& deployment) {
  for (const deploy::KubeObject& o : objs) {
    if (o.Kind() == "Deployment" && o.Name() == deployment) {
      return o.node["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"];
    }
  }
  return YAML::Node();
}

TEST_F(DeployManifestsTest, OllamaExample) {
  absl::StatusOr<std::vector<deploy::KubeObject>> whole =
      deploy::RenderKustomization(*files_, "deploy/examples/ollama/whole-card", {});
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(Limits(*whole, "ollama")["nvidia.com/gpu"].Scalar(), "1");
  const deploy::KubeObject* pv = nullptr;
  const deploy::KubeObject* pvc = nullptr;
  for (const deploy::KubeObject& o : *whole) {
    if (o.Kind() == "PersistentVolume") pv = &o;
    if (o.Kind() == "PersistentVolumeClaim") pvc = &o;
    if (o.Kind() == "Deployment") {
      std::map<std::string, std::string> env;
      for (const auto& e : o.node["spec"]["template"]["spec"]["containers"][0]["env"]) {
        if (e["value"]) env[e["name"].Scalar()] = e["value"].Scalar();
      }
      EXPECT_EQ(env["OLLAMA_KEEP_ALIVE"], "-1");
      EXPECT_FALSE(o.node["spec"]["template"]["spec"]["runtimeClassName"]);
    }
  }
  ASSERT_TRUE(pv && pvc);
  EXPECT_TRUE(pv->node["spec"]["hostPath"]);
  EXPECT_TRUE(pv->node["spec"]["nodeAffinity"]["required"]);
  EXPECT_EQ(pvc->node["spec"]["volumeName"].Scalar(), pv->Name());
  EXPECT_EQ(pvc->node["spec"]["storageClassName"].Scalar(),
            pv->node["spec"]["storageClassName"].Scalar());

  absl::StatusOr<std::vector<deploy::KubeObject>> shared =
      deploy::RenderKustomization(*files_, "deploy/examples/ollama/shared", {});
  ASSERT_TRUE(shared.ok()) << shared.status();
  YAML::Node ollama = Limits(*shared, "ollama");
  EXPECT_FALSE(ollama["nvidia.com/gpu"]);
  EXPECT_EQ(ollama["nvidia.com/gpu-memory"].Scalar(), "24");
  EXPECT_EQ(Limits(*shared, "anpr")["nvidia.com/gpu-memory"].Scalar(), "4");
}

const deploy::KubeObject* Find(const std::vector<deploy::KubeObject>& objs, const std::string& kind,
                               const std::string& name) {
  for (const deploy::KubeObject& o : objs) {
    if (o.Kind() == kind && o.Name() == name) return &o;
  }
  return nullptr;
}

// gpulet with DRA (deploy/dra through both overlays): the kubelet's DRA directories mounted
// where --kubelet-dir puts them, the checkpoint's and the claims' CDI directories writable
// under the host root, the node's name, dra.enabled, the RBAC the driver's calls need bound to
// the pod's ServiceAccount, and the DeviceClasses.
TEST_F(DeployManifestsTest, DraWiring) {
  YAML::Node generic_pod;  // the first overlay's pod
  bool first = true;
  for (const char* dir : {"deploy/overlays/dra", "deploy/overlays/talos-dra"}) {
    SCOPED_TRACE(dir);
    absl::StatusOr<std::vector<deploy::KubeObject>> objs =
        deploy::RenderKustomization(*files_, dir, {});
    ASSERT_TRUE(objs.ok()) << objs.status();
    const deploy::KubeObject* ds = Find(*objs, "DaemonSet", "gpulet");
    const deploy::KubeObject* cm = Find(*objs, "ConfigMap", "gpulet-config");
    const deploy::KubeObject* role = Find(*objs, "ClusterRole", "gpulet-dra");
    const deploy::KubeObject* binding = Find(*objs, "ClusterRoleBinding", "gpulet-dra");
    ASSERT_TRUE(ds && cm && role && binding);
    // The base's cluster-reporting role stays as it was.
    ASSERT_TRUE(Find(*objs, "ClusterRole", "gpulet"));
    EXPECT_EQ(Find(*objs, "RuntimeClass", "nvidia") != nullptr, absl::StrContains(dir, "talos"));

    YAML::Node pod = ds->node["spec"]["template"]["spec"];
    YAML::Node c = pod["containers"][0];
    std::map<std::string, std::string> args;
    for (const auto& a : c["args"]) {
      std::string s = a.Scalar();
      size_t eq = s.find('=');
      if (eq != std::string::npos) args[s.substr(0, eq)] = s.substr(eq + 1);
    }
    std::map<std::string, std::string> host_paths;
    for (const auto& v : pod["volumes"]) {
      if (v["hostPath"]) host_paths[v["name"].Scalar()] = v["hostPath"]["path"].Scalar();
    }
    std::map<std::string, YAML::Node> mounts;
    for (const auto& m : c["volumeMounts"]) {
      mounts.emplace(m["mountPath"].Scalar(), static_cast<const YAML::Node&>(m));
    }
    // The registration and DRA sockets: <kubelet-dir>/plugins_registry/<driver>-reg.sock and
    // <kubelet-dir>/plugins/<driver>/dra.sock, in the same directories on the host.
    for (const char* sub : {"/plugins_registry", "/plugins"}) {
      const std::string path = args["--kubelet-dir"] + sub;
      ASSERT_TRUE(mounts.count(path)) << path;
      EXPECT_EQ(host_paths[mounts[path]["name"].Scalar()], path);
      EXPECT_FALSE(mounts[path]["readOnly"]) << path;
    }
    // dra.checkpointFile and cdi.specDir resolve under --host-root to writable mounts of the
    // same host directories.
    const std::string checkpoint = config::Config().dra.checkpoint_file;
    const std::string checkpoint_dir = checkpoint.substr(0, checkpoint.rfind('/'));
    const std::string in_pod = args["--host-root"] + checkpoint_dir;
    ASSERT_TRUE(mounts.count(in_pod)) << in_pod;
    EXPECT_EQ(host_paths[mounts[in_pod]["name"].Scalar()], checkpoint_dir);
    EXPECT_FALSE(mounts[in_pod]["readOnly"]);
    const std::string cdi = args["--host-root"] + args["--cdi-spec-dir"];
    ASSERT_TRUE(mounts.count(cdi)) << cdi;
    EXPECT_FALSE(mounts[cdi]["readOnly"]);
    // The pool is named after the node: NODE_NAME from the downward API.
    bool node_name = false;
    for (const auto& e : c["env"]) {
      node_name |= e["name"].Scalar() == "NODE_NAME" &&
                   e["valueFrom"]["fieldRef"]["fieldPath"].Scalar() == "spec.nodeName";
    }
    EXPECT_TRUE(node_name);
    // The base's mounts are all still there (the patch adds, it does not replace).
    for (const char* path : {"/var/lib/kubelet/device-plugins", "/var/lib/kubelet/pod-resources",
                             "/host", "/dev", "/sys"}) {
      EXPECT_TRUE(mounts.count(path)) << path;
    }
    if (first) {
      generic_pod.reset(pod);
      first = false;
    } else {
      EXPECT_TRUE(deploy::YamlEqual(generic_pod, pod))
          << "the Talos DRA pod differs from the generic one";
    }

    absl::StatusOr<config::Config> config =
        config::ParseConfig(cm->node["data"]["config.yaml"].Scalar(), cm->file, {});
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_TRUE(config->dra.enabled);
    EXPECT_EQ(config->kubelet_dir, args["--kubelet-dir"]);

    // RBAC: exactly what the driver calls.
    std::map<std::string, std::set<std::string>> verbs;  // "group/resource" -> verbs
    for (const auto& rule : role->node["rules"]) {
      for (const auto& g : rule["apiGroups"]) {
        for (const auto& r : rule["resources"]) {
          for (const auto& v : rule["verbs"]) {
            verbs[absl::StrCat(g.Scalar(), "/", r.Scalar())].insert(v.Scalar());
          }
        }
      }
    }
    EXPECT_EQ(verbs["resource.k8s.io/resourceslices"],
              (std::set<std::string>{"get", "list", "create", "update", "delete"}));
    EXPECT_EQ(verbs["resource.k8s.io/resourceclaims"], (std::set<std::string>{"get"}));
    EXPECT_EQ(verbs["/nodes"], (std::set<std::string>{"get"}));
    EXPECT_EQ(verbs.size(), 3u);
    EXPECT_EQ(binding->node["roleRef"]["name"].Scalar(), "gpulet-dra");
    EXPECT_EQ(binding->node["subjects"][0]["kind"].Scalar(), "ServiceAccount");
    EXPECT_EQ(binding->node["subjects"][0]["name"].Scalar(), pod["serviceAccountName"].Scalar());
    EXPECT_EQ(binding->node["subjects"][0]["namespace"].Scalar(), ds->Namespace());

    for (const char* name : {"gpu.gpulet.dev", "mig.gpu.gpulet.dev"}) {
      const deploy::KubeObject* dc = Find(*objs, "DeviceClass", name);
      ASSERT_NE(dc, nullptr) << name;
      EXPECT_THAT(dc->node["spec"]["selectors"][0]["cel"]["expression"].Scalar(),
                  HasSubstr(absl::StrCat("device.driver == \"", config->dra.driver_name, "\"")));
    }
  }
}

// The DRA examples: every pod claim names a ResourceClaimTemplate rendered beside it, every
// container claim a pod claim; the requests ask for gpulet's DeviceClasses, with the memory
// the README promises; no pod asks for a GPU both ways.
TEST_F(DeployManifestsTest, DraExamples) {
  std::map<std::string, std::map<std::string, YAML::Node>> claims;  // dir -> deployment -> req
  for (const char* dir : {"deploy/examples/dra/whole-gpu", "deploy/examples/dra/shared",
                          "deploy/examples/dra/side-by-side"}) {
    SCOPED_TRACE(dir);
    absl::StatusOr<std::vector<deploy::KubeObject>> objs =
        deploy::RenderKustomization(*files_, dir, {});
    ASSERT_TRUE(objs.ok()) << objs.status();
    for (const deploy::KubeObject& o : *objs) {
      if (o.Kind() != "Deployment") continue;
      YAML::Node pod = o.node["spec"]["template"]["spec"];
      std::set<std::string> pod_claims;
      for (const auto& rc : pod["resourceClaims"]) {
        pod_claims.insert(rc["name"].Scalar());
        const std::string tname = rc["resourceClaimTemplateName"].Scalar();
        const deploy::KubeObject* t = nullptr;
        for (const deploy::KubeObject& x : *objs) {
          if (x.Kind() == "ResourceClaimTemplate" && x.Name() == tname &&
              x.Namespace() == o.Namespace()) {
            t = &x;
          }
        }
        ASSERT_NE(t, nullptr) << o.Name() << ": no ResourceClaimTemplate " << tname << " in "
                              << o.Namespace();
        YAML::Node req = t->node["spec"]["spec"]["devices"]["requests"][0];
        EXPECT_EQ(req["exactly"]["deviceClassName"].Scalar(), "gpu.gpulet.dev");
        claims[dir].emplace(o.Name(), req);
        for (const auto& cfg : t->node["spec"]["spec"]["devices"]["config"]) {
          EXPECT_EQ(cfg["opaque"]["driver"].Scalar(), config::Config().dra.driver_name);
          EXPECT_EQ(cfg["opaque"]["parameters"]["apiVersion"].Scalar(), "gpu.gpulet.dev/v1alpha1");
          EXPECT_EQ(cfg["opaque"]["parameters"]["kind"].Scalar(), "GpuConfig");
        }
      }
      for (const auto& c : pod["containers"]) {
        YAML::Node res = c["resources"];
        for (const auto& cl : res["claims"]) {
          EXPECT_TRUE(pod_claims.count(cl["name"].Scalar())) << o.Name();
        }
        const bool by_claim = res["claims"] && res["claims"].size() > 0;
        const bool by_plugin = res["limits"] && res["limits"]["nvidia.com/gpu"];
        EXPECT_TRUE(by_claim != by_plugin) << o.Name() << ": a GPU both ways, or none";
      }
    }
  }
  auto& whole = claims["deploy/examples/dra/whole-gpu"];
  auto& shared = claims["deploy/examples/dra/shared"];
  auto& side = claims["deploy/examples/dra/side-by-side"];
  ASSERT_TRUE(whole.count("ollama") && shared.count("ollama") && shared.count("anpr"));
  EXPECT_FALSE(whole.at("ollama")["exactly"]["capacity"]);  // the whole card
  EXPECT_EQ(shared.at("ollama")["exactly"]["capacity"]["requests"]["memory"].Scalar(), "24Gi");
  EXPECT_EQ(shared.at("anpr")["exactly"]["capacity"]["requests"]["memory"].Scalar(), "4Gi");
  EXPECT_EQ(side.count("cuda-dra"), 1u);
  EXPECT_EQ(side.count("cuda-device-plugin"), 0u);
}

// deploy/examples/rolling-config, as the real kustomize builds it: the ConfigMap is named by
// its content and the DaemonSet reads it, the base's ConfigMap is gone, the settings are the
// base's; an edit of config.yaml makes a new name, so the DaemonSet's pods roll.
TEST_F(DeployManifestsTest, RollingConfigExample) {
  const std::vector<std::string> kustomize = RealKustomize();
  GPULET_REQUIRE_REAL_TOOL(kustomize, "kustomize");
  testing::ScratchDir dir;
  std::filesystem::copy(std::filesystem::path(GPULET_SOURCE_DIR) / "deploy",
                        std::filesystem::path(dir.path()) / "deploy",
                        std::filesystem::copy_options::recursive);
  const std::string example = dir.path() + "/deploy/examples/rolling-config";
  // The generated ConfigMap's name and config.yaml, and the name the DaemonSet reads.
  struct Built {
    std::string configmap, config_yaml, volume;
    bool base_configmap = false;
  };
  auto build = [&]() {
    Built b;
    std::vector<std::string> argv = kustomize;
    argv.push_back(example);
    testing::RunResult r = testing::RunProgram(argv);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    for (const auto& [id, node] : ObjectsById(r.out, "rolling-config")) {
      const std::string name = node["metadata"]["name"].Scalar();
      if (node["kind"].Scalar() == "ConfigMap" && name == "gpulet-config") b.base_configmap = true;
      if (node["kind"].Scalar() == "ConfigMap" && absl::StartsWith(name, "gpulet-config-rolled-")) {
        b.configmap = name;
        b.config_yaml = node["data"]["config.yaml"].Scalar();
      }
      if (node["kind"].Scalar() == "DaemonSet") {
        for (const auto& v : node["spec"]["template"]["spec"]["volumes"]) {
          if (v["name"].Scalar() == "config") b.volume = v["configMap"]["name"].Scalar();
        }
      }
    }
    return b;
  };
  const Built first = build();
  EXPECT_EQ(first.configmap.size(), std::string("gpulet-config-rolled-").size() + 10)
      << first.configmap;
  EXPECT_EQ(first.volume, first.configmap);
  EXPECT_FALSE(first.base_configmap) << "the base's ConfigMap should be left out";
  // The same settings as the base's ConfigMap.
  absl::StatusOr<config::Config> rolled = config::ParseConfig(first.config_yaml, "rolled", {});
  ASSERT_TRUE(rolled.ok()) << rolled.status();
  std::string base_yaml;
  for (const Doc& d : AllDocs()) {
    if (d.file == "deploy/base/configmap.yaml" && d.Scalar({"kind"}) == "ConfigMap") {
      base_yaml = d.Scalar({"data", "config.yaml"});
    }
  }
  absl::StatusOr<config::Config> base = config::ParseConfig(base_yaml, "base", {});
  ASSERT_TRUE(base.ok()) << base.status();
  EXPECT_EQ(config::ConfigToYaml(*rolled), config::ConfigToYaml(*base));
  // An edit is a new ConfigMap, and the pod template follows it.
  std::ofstream(example + "/config.yaml", std::ios::app) << "metrics: {sampleInterval: 2s}\n";
  const Built edited = build();
  EXPECT_NE(edited.configmap, first.configmap);
  EXPECT_EQ(edited.volume, edited.configmap);
  EXPECT_NE(edited.config_yaml.find("sampleInterval: 2s"), std::string::npos);
}

TEST_F(DeployManifestsTest, BinaryEmbedsExactlyTheseFiles) {
  EXPECT_EQ(deploy::EmbeddedManifestFiles(), *files_)
      << "the gpulet binary embeds a different deploy/ than the source tree: rebuild";
}

}  // namespace
}  // namespace gpulet::cli
