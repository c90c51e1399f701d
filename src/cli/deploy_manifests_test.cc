// Checks every YAML file under deploy/ (read from GPULET_SOURCE_DIR): each document is a
// Kubernetes object of a known kind (or a Talos machine-config patch / Image Factory
// schematic, recognised separately), gpulet's containers name the gpulet image and only flags
// gpulet accepts, every kustomization's resources and patches exist and render, the Talos
// overlay names extensions that exist, gpulet's ConfigMaps load with gpulet's own config
// parser, and the binary embeds exactly these files.
#include <regex>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cli/command.h"
#include "config/config.h"
#include "deploy/manifests.h"
#include "deploy/manifests_yaml.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/subprocess.h"

namespace gpulet {
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
    {"kustomize.config.k8s.io/v1beta1", "Kustomization", false},
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
  kGrafanaProvisioning
};

// The node at `path` under `root`, or an undefined node. Unlike chained operator[], never
// throws on a missing intermediate key and never adds keys.
YAML::Node At(const YAML::Node& root, std::initializer_list<const char*> path) {
  YAML::Node cur = root;
  for (const char* key : path) {
    YAML::Node next(YAML::NodeType::Undefined);
    if (cur.IsMap()) {
      for (const auto& kv : cur) {
        if (kv.first.Scalar() == key) {
          next = kv.second;
          break;
        }
      }
    }
    if (!next.IsDefined()) return next;
    cur.reset(next);
  }
  return cur;
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
    absl::StatusOr<ManifestFiles> files = ReadManifestFiles(GPULET_SOURCE_DIR);
    ASSERT_TRUE(files.ok()) << files.status();
    files_ = new ManifestFiles(std::move(*files));
  }
  static void TearDownTestSuite() {
    delete files_;
    files_ = nullptr;
  }

  // Every document of every file, classified.
  static std::vector<Doc> AllDocs() {
    std::vector<Doc> docs;
    for (const auto& [path, text] : *files_) {
      absl::StatusOr<std::vector<YamlDocument>> split = SplitYamlDocuments(text, path);
      EXPECT_TRUE(split.ok()) << split.status();
      if (!split.ok()) continue;
      for (YamlDocument& d : *split) {
        Doc doc{path, d.first_line, d.node, DocType::kKubernetes};
        if (d.node.IsMap() && (d.node["machine"] || d.node["cluster"]) && !d.node["kind"]) {
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

  static bool IsPatchFile(const std::string& path) {
    return absl::EndsWith(path, "-patch.yaml") && !absl::StrContains(path, "talos-machine");
  }

  static ManifestFiles* files_;
};

ManifestFiles* DeployManifestsTest::files_ = nullptr;

TEST_F(DeployManifestsTest, TreeHasTheExpectedFiles) {
  for (const char* path :
       {"deploy/base/kustomization.yaml", "deploy/base/namespace.yaml",
        "deploy/base/serviceaccount.yaml", "deploy/base/clusterrole.yaml",
        "deploy/base/configmap.yaml", "deploy/base/daemonset.yaml", "deploy/base/service.yaml",
        "deploy/base/servicemonitor.yaml", "deploy/overlays/talos/kustomization.yaml",
        "deploy/overlays/talos/runtimeclass.yaml", kTalosMachinePatchPath, kTalosSchematicPath,
        "deploy/overlays/generic/kustomization.yaml",
        "deploy/examples/ollama/whole-card/kustomization.yaml"}) {
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
    if (kind == "Kustomization") {
      EXPECT_TRUE(absl::EndsWith(d.file, "/kustomization.yaml")) << d.Where();
      continue;
    }
    EXPECT_FALSE(d.Scalar({"metadata", "name"}).empty()) << d.Where() << ": no metadata.name";
    // gpulet's own objects live in gpulet-system.
    if (known->namespaced && (absl::StartsWith(d.file, "deploy/base/") ||
                              absl::StartsWith(d.file, "deploy/overlays/"))) {
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
        EXPECT_EQ(image, DefaultGpuletImage()) << d.Where();
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
        testing::RunProgram({std::string(GPULET_BINARY_DIR) + "/gpulet", "serve", "--help"});
    ASSERT_EQ(help.exit_code, 0) << help.err;
    for (const std::string& flag : flags_used) {
      EXPECT_THAT(help.out, HasSubstr(flag)) << "`gpulet serve --help` does not list " << flag;
    }
  }
}

// The gpulet DaemonSet's wiring: flags, mounts, probes, tolerations and node selection agree.
TEST_F(DeployManifestsTest, DaemonSetWiring) {
  absl::StatusOr<std::vector<KubeObject>> objs = RenderKustomization(*files_, "deploy/base", {});
  ASSERT_TRUE(objs.ok()) << objs.status();
  const KubeObject* ds = nullptr;
  const KubeObject* ns = nullptr;
  const KubeObject* cm = nullptr;
  for (const KubeObject& o : *objs) {
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
  const std::string features = Config().labels.features_file;
  const std::string features_dir = args["--host-root"] + features.substr(0, features.rfind('/'));
  ASSERT_TRUE(mounts.count(features_dir)) << features_dir;
  EXPECT_EQ(args["--host-root"] + host_paths[mounts[features_dir]["name"].Scalar()], features_dir);
  EXPECT_FALSE(mounts[features_dir]["readOnly"]);
  // And the XID history (health.xidHistoryFile), the same way.
  const std::string history = Config().health.xid_history_file;
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
    for (const auto& p : k["patches"]) {
      EXPECT_TRUE(std::filesystem::is_regular_file(std::filesystem::path(GPULET_SOURCE_DIR) / dir /
                                                   p["path"].Scalar()))
          << path << ": patch " << p["path"].Scalar() << " does not exist";
    }
    absl::StatusOr<std::vector<KubeObject>> objs = RenderKustomization(*files_, dir, {});
    ASSERT_TRUE(objs.ok()) << objs.status();
    EXPECT_FALSE(objs->empty()) << dir;
    // What gpulet prints reads back as the same objects.
    absl::StatusOr<std::vector<YamlDocument>> back =
        SplitYamlDocuments(FormatObjects(*objs), absl::StrCat(dir, " (rendered)"));
    ASSERT_TRUE(back.ok()) << back.status();
    ASSERT_EQ(back->size(), objs->size()) << dir;
    for (size_t i = 0; i < objs->size(); ++i) {
      EXPECT_TRUE(YamlEqual((*back)[i].node, (*objs)[i].node))
          << dir << ": " << (*objs)[i].Kind() << " " << (*objs)[i].Name();
    }
    ++rendered;
  }
  EXPECT_GE(rendered, 6);
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
  YAML::Node schematic = YAML::Load(files_->at(kTalosSchematicPath));
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
  YAML::Node patch = YAML::Load(files_->at(kTalosMachinePatchPath));
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

  absl::StatusOr<std::vector<KubeObject>> objs = RenderKustomization(*files_, kTalosOverlayDir, {});
  ASSERT_TRUE(objs.ok()) << objs.status();
  bool runtime_class = false;
  for (const KubeObject& o : *objs) {
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
      EXPECT_EQ(pod["containers"][0]["image"].Scalar(), DefaultGpuletImage());
    }
  }
  EXPECT_TRUE(runtime_class);
}

TEST_F(DeployManifestsTest, GpuletConfigMapsLoadWithGpuletsParser) {
  int configs = 0;
  for (const Doc& d : AllDocs()) {
    if (d.Scalar({"kind"}) != "ConfigMap" || d.Scalar({"metadata", "name"}) != "gpulet-config") {
      continue;
    }
    std::string yaml = d.Scalar({"data", "config.yaml"});
    absl::StatusOr<Config> config = ParseConfig(yaml, d.Where(), {});
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
  }
  EXPECT_EQ(configs, 2);
}

// Returns the limits of the named container of a rendered Deployment.
YAML::Node Limits(const std::vector<KubeObject>& objs, const std::string& deployment) {
  for (const KubeObject& o : objs) {
    if (o.Kind() == "Deployment" && o.Name() == deployment) {
      return o.node["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"];
    }
  }
  return YAML::Node();
}

TEST_F(DeployManifestsTest, OllamaExample) {
  absl::StatusOr<std::vector<KubeObject>> whole =
      RenderKustomization(*files_, "deploy/examples/ollama/whole-card", {});
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(Limits(*whole, "ollama")["nvidia.com/gpu"].Scalar(), "1");
  const KubeObject* pv = nullptr;
  const KubeObject* pvc = nullptr;
  for (const KubeObject& o : *whole) {
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

  absl::StatusOr<std::vector<KubeObject>> shared =
      RenderKustomization(*files_, "deploy/examples/ollama/shared", {});
  ASSERT_TRUE(shared.ok()) << shared.status();
  YAML::Node ollama = Limits(*shared, "ollama");
  EXPECT_FALSE(ollama["nvidia.com/gpu"]);
  EXPECT_EQ(ollama["nvidia.com/gpu-memory"].Scalar(), "24");
  EXPECT_EQ(Limits(*shared, "anpr")["nvidia.com/gpu-memory"].Scalar(), "4");
}

TEST_F(DeployManifestsTest, BinaryEmbedsExactlyTheseFiles) {
  EXPECT_EQ(EmbeddedManifestFiles(), *files_)
      << "the gpulet binary embeds a different deploy/ than the source tree: rebuild";
}

}  // namespace
}  // namespace gpulet
