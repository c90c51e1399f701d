#include "deploy/talos_migration.h"

#include <set>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/k8s_names.h"
#include "deploy/manifests_yaml.h"

namespace gpulet::deploy {
namespace {

// How a v1alpha1 value becomes KubeNodeConfig's.
enum class CarryAs {
  kStringMap,          // a map of strings, key by key (labels, annotations, taints)
  kNodeIp,             // {validSubnets: [...]} as it is
  kBool,               // a boolean as it is
  kControlPlaneTaint,  // allowScheduling...: false keeps the control-plane taint, true drops it
  kTaintFlag,          // the kubelet flag "key=value:Effect,...": one taint each
};

// Where each v1alpha1 field Talos 1.14 refuses beside a KubeNodeConfig goes (the fields of
// KubeNodeConfigV1Alpha1 and its V1Alpha1ConflictValidate, siderolabs/talos@v1.14.1:
// pkg/machinery/config/types/k8s/node.go). The last row is no conflict: it is the GPU taint
// gpulet's patch for 1.8 to 1.13 set as a kubelet flag, which would override the
// KubeNodeConfig taints (a kubelet flag wins over its configuration file), so it moves too.
struct Carry {
  const char* field;  // dotted v1alpha1 path
  const char* into;   // KubeNodeConfig key
  CarryAs as;
};
constexpr Carry kCarries[] = {
    {"machine.nodeLabels", "labels", CarryAs::kStringMap},
    {"machine.nodeAnnotations", "annotations", CarryAs::kStringMap},
    {"machine.nodeTaints", "taints", CarryAs::kStringMap},
    {"machine.kubelet.nodeIP", "nodeIP", CarryAs::kNodeIp},
    {"machine.kubelet.registerWithFQDN", "registerWithFQDN", CarryAs::kBool},
    {"machine.kubelet.skipNodeRegistration", "skipNodeRegistration", CarryAs::kBool},
    {"cluster.allowSchedulingOnControlPlanes", "taints", CarryAs::kControlPlaneTaint},
    {"cluster.allowSchedulingOnMasters", "taints", CarryAs::kControlPlaneTaint},
    {"machine.kubelet.extraArgs.register-with-taints", "taints", CarryAs::kTaintFlag},
};

// What Talos gives a control-plane node by itself while the node's settings are in v1alpha1
// (the k8sNodeConfigShim's Labels and Taints, pkg/machinery/config/types/v1alpha1/
// v1alpha1_k8s_bridge.go at v1.14.1): this label, and this taint unless it allows scheduling.
// Once a KubeNodeConfig document exists, it alone decides (Container.K8sNodeConfig prefers it,
// config/container/container.go), so the patch that adds one carries both over, as 1.14 writes
// them into a new control plane's KubeNodeConfig (config/generate/kubernetes.go).
constexpr char kControlPlaneRole[] = "node-role.kubernetes.io/control-plane";

const Carry* FindCarry(absl::string_view field) {
  for (const Carry& c : kCarries) {
    if (field == c.field) return &c;
  }
  return nullptr;
}

// The node at the dotted `path` (keys may contain '-', never '.'), or an undefined node.
YAML::Node Lookup(const YAML::Node& root, absl::string_view path) {
  return NodeAtPath(root, absl::StrSplit(path, '.'));
}

// Adds {$patch: delete} at the dotted `path` of `doc`.
void AddDelete(YAML::Node& doc, absl::string_view path) {
  std::vector<std::string> keys = absl::StrSplit(path, '.');
  YAML::Node cur = doc;
  for (size_t i = 0; i + 1 < keys.size(); ++i) {
    YAML::Node next = cur[keys[i]];
    cur.reset(next);
  }
  cur[keys.back()]["$patch"] = "delete";
}

absl::Status Invalid(absl::string_view origin, absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(origin, ": .", field, " ", what));
}

// Label, annotation and taint keys are qualified names (the API server and Talos refuse any
// other); one that is not would not even print back as a YAML key.
absl::Status CheckKey(absl::string_view origin, absl::string_view field, absl::string_view key) {
  if (IsQualifiedName(key)) return absl::OkStatus();
  std::string shown = absl::CHexEscape(key.substr(0, 80));
  if (key.size() > 80) shown += "...";
  return Invalid(origin, field,
                 absl::StrCat("has the key '", shown,
                              "', which is not a Kubernetes qualified name (an optional DNS "
                              "prefix and '/', then up to 63 letters, digits, '-', '_' or '.'); "
                              "fix it in the node's configuration first"));
}

}  // namespace

std::vector<std::string> UncarriedKubeNodeConflicts(const node::Release& release) {
  std::vector<std::string> missing;
  for (const node::Conflict& c : release.conflicts) {
    if (c.kind == "KubeNodeConfig" && FindCarry(c.field) == nullptr) missing.push_back(c.field);
  }
  return missing;
}

absl::StatusOr<KubeNodeMigration> PlanKubeNodeMigration(const node::Release& release,
                                                        absl::string_view current,
                                                        absl::string_view origin) {
  KubeNodeMigration plan;
  if (!release.KubeNodeDocuments()) return plan;
  absl::StatusOr<std::vector<YamlDocument>> docs = SplitYamlDocuments(current, origin);
  if (!docs.ok()) return docs.status();
  YAML::Node v1alpha1(YAML::NodeType::Undefined);
  for (const YamlDocument& d : *docs) {
    if (!d.node.IsMap()) continue;
    if (d.node["kind"]) {
      if (d.node["kind"].Scalar() == "KubeNodeConfig") plan.has_kube_node_config = true;
    } else if (d.node["version"] && d.node["version"].Scalar() == "v1alpha1") {
      v1alpha1 = d.node;
    }
  }
  if (!v1alpha1.IsDefined()) {
    return absl::InvalidArgumentError(absl::StrCat(
        origin,
        ": no v1alpha1 document (the one with `version: v1alpha1` and `machine:`); give the "
        "node's whole machine configuration: talosctl -n <node> get machineconfig -o "
        "jsonpath='{.spec}'"));
  }
  const std::string type = Lookup(v1alpha1, "machine.type").IsScalar()
                               ? Lookup(v1alpha1, "machine.type").Scalar()
                               : std::string();
  const bool control_plane = type == "controlplane" || type == "init";

  // The fields to move: the release's KubeNodeConfig conflicts, then the taint flag.
  std::vector<std::string> fields;
  for (const node::Conflict& c : release.conflicts) {
    if (c.kind == "KubeNodeConfig") fields.push_back(c.field);
  }
  // Built in place: a pushed temporary here meets GCC 12's false -Warray-bounds in libstdc++.
  fields.emplace_back("machine.kubelet.extraArgs.register-with-taints");

  plan.carried = YAML::Node(YAML::NodeType::Map);
  plan.deletes = YAML::Node(YAML::NodeType::Map);
  bool schedulable_control_plane = false;
  for (const std::string& field : fields) {
    YAML::Node value = Lookup(v1alpha1, field);
    if (!value.IsDefined() || value.IsNull()) continue;
    const Carry* carry = FindCarry(field);
    if (carry == nullptr) {
      return absl::InternalError(absl::StrCat(
          "gpulet does not know where ", release.Name(), " wants .", field,
          " (a release-table conflict without a row in talos_migration.cc's kCarries)"));
    }
    YAML::Node into = plan.carried[carry->into];
    switch (carry->as) {
      case CarryAs::kStringMap:
        if (!value.IsMap()) return Invalid(origin, field, "is not a map of strings");
        for (const auto& kv : value) {
          if (!kv.second.IsScalar()) return Invalid(origin, field, "is not a map of strings");
          if (absl::Status s = CheckKey(origin, field, kv.first.Scalar()); !s.ok()) return s;
          into[kv.first.Scalar()] = QuotedScalar(kv.second.Scalar());
        }
        break;
      case CarryAs::kNodeIp: {
        if (!value.IsMap()) return Invalid(origin, field, "is not a map (validSubnets: [...])");
        for (const auto& kv : value) {
          if (kv.first.Scalar() != "validSubnets") {
            return Invalid(origin, absl::StrCat(field, ".", kv.first.Scalar()),
                           absl::StrCat("has no place in ", release.Name(),
                                        "'s KubeNodeConfig.nodeIP (only validSubnets); remove it "
                                        "from the node's configuration first"));
          }
          // A list of subnets, each a plain string: what the node holds is printed back.
          if (!kv.second.IsSequence()) {
            return Invalid(origin, absl::StrCat(field, ".validSubnets"),
                           "is not a list of subnets");
          }
          for (const YAML::Node& subnet : kv.second) {
            if (!subnet.IsScalar()) {
              return Invalid(origin, absl::StrCat(field, ".validSubnets"),
                             "is not a list of subnets");
            }
          }
          into["validSubnets"] = kv.second;
        }
        break;
      }
      case CarryAs::kBool:
        if (!value.IsScalar()) return Invalid(origin, field, "is not true or false");
        plan.carried[carry->into] = value;
        break;
      case CarryAs::kControlPlaneTaint:
        if (!value.IsScalar() || (value.Scalar() != "true" && value.Scalar() != "false")) {
          return Invalid(origin, field, "is not true or false");
        }
        schedulable_control_plane |= value.Scalar() == "true";
        break;
      case CarryAs::kTaintFlag:
        if (!value.IsScalar()) return Invalid(origin, field, "is not a string");
        for (absl::string_view taint : absl::StrSplit(value.Scalar(), ',', absl::SkipEmpty())) {
          // key=value:Effect or key:Effect -> taints[key] = "value:Effect" or "Effect".
          size_t colon = taint.rfind(':');
          size_t eq = taint.find('=');
          if (colon == absl::string_view::npos || colon == 0 ||
              (eq != absl::string_view::npos && eq > colon)) {
            return Invalid(origin, field,
                           absl::StrCat("entry '", taint, "' is not key=value:Effect"));
          }
          size_t key_end = eq == absl::string_view::npos ? colon : eq;
          std::string key(taint.substr(0, key_end));
          if (absl::Status s = CheckKey(origin, field, key); !s.ok()) return s;
          std::string rest(eq == absl::string_view::npos ? taint.substr(colon + 1)
                                                         : taint.substr(eq + 1));
          into[key] = QuotedScalar(rest);
        }
        break;
    }
    AddDelete(plan.deletes, field);
    plan.moved.push_back(field);
  }
  // A control plane keeps the label and taint Talos gave it (above).
  if (control_plane && !plan.has_kube_node_config) {
    plan.carried["labels"][kControlPlaneRole] = QuotedScalar("");
    if (!schedulable_control_plane) {
      plan.carried["taints"][kControlPlaneRole] = QuotedScalar("NoSchedule");
    }
  }
  if (plan.moved.empty()) {
    plan.deletes = YAML::Node(YAML::NodeType::Null);
  }
  return plan;
}

FitPatchCommands FitPatchCommandsFor(absl::string_view version) {
  return {"talosctl -n <node> get machineconfig -o jsonpath='{.spec}' > current.yaml",
          absl::StrCat("gpulet manifests --talos-machine-patch --talos-version ", version,
                       " --talos-current-config current.yaml"),
          "talosctl -n <node> patch machineconfig --patch @gpu-node-patch.yaml"};
}

}  // namespace gpulet::deploy
