// Moving a Talos node's machine configuration across the release that introduced the
// KubeNodeConfig document (1.14): what a node configured by an earlier release (gpulet's own
// earlier patch, or the user's settings) holds in the v1alpha1 document that the release
// refuses next to a KubeNodeConfig, and the patch that moves it there.
//
// Talos 1.14 refuses a KubeNodeConfig while .machine.nodeLabels, .machine.nodeTaints,
// .machine.kubelet.nodeIP and the other fields of its release row's `conflicts` are set
// (V1Alpha1ConflictValidate in pkg/machinery/config/types/k8s/node.go). A node upgraded from
// 1.13 keeps its configuration as it was, so gpulet's 1.14 patch (a KubeNodeConfig with the GPU
// label and taint) is refused there unless the same patch deletes those fields (`$patch:
// delete`) and carries their values into the KubeNodeConfig. One table (kCarries in the .cc)
// says where each field goes; a test checks it covers every KubeNodeConfig conflict of the
// release table, and src/node/talos_machinery_test.cc checks the result with Talos' own code.
//
// Thread-safety: pure functions.
#ifndef GPULET_DEPLOY_TALOS_MIGRATION_H_
#define GPULET_DEPLOY_TALOS_MIGRATION_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "node/talos_releases.h"
#include "yaml-cpp/yaml.h"

namespace gpulet::deploy {

// The largest machine configuration gpulet reads (`gpulet manifests --talos-current-config`,
// doctor's talos.config): a few tens of KiB usually; one with inline manifests can be more.
inline constexpr size_t kMaxMachineConfigBytes = size_t{4} << 20;

// What the patch for one node must do besides adding gpulet's own settings.
struct KubeNodeMigration {
  // The v1alpha1 fields set on the node that `release` refuses beside a KubeNodeConfig, as
  // dotted paths ("machine.nodeLabels"), in the order of the release's conflicts.
  std::vector<std::string> moved;
  // A v1alpha1 patch document deleting them (`$patch: delete`); null when nothing moves.
  YAML::Node deletes;
  // The KubeNodeConfig fields their values become (labels, annotations, taints, nodeIP,
  // registerWithFQDN, skipNodeRegistration), to merge with gpulet's own; a map.
  YAML::Node carried;
  // A KubeNodeConfig document is already in the configuration (a node installed with 1.14):
  // gpulet's patch merges into it.
  bool has_kube_node_config = false;
};

// Plans the move for the machine configuration `current` (the node's, as `talosctl get
// machineconfig -o jsonpath='{.spec}'` prints it: the v1alpha1 document and any others),
// read from `origin` (named in errors). Returns an empty plan for a release without the
// KubeNodeConfig document. Errors (InvalidArgument, naming `origin` and the field): not YAML,
// no v1alpha1 document, a field of an unexpected shape, or a value Talos 1.14 has no place
// for (say which and what to do).
absl::StatusOr<KubeNodeMigration> PlanKubeNodeMigration(const node::Release& release,
                                                        absl::string_view current,
                                                        absl::string_view origin);

// The v1alpha1 fields of the release's KubeNodeConfig conflicts that kCarries does not say
// how to move (empty when the table is complete; for the table's test).
std::vector<std::string> UncarriedKubeNodeConflicts(const node::Release& release);

// The commands that fit gpulet's patch for Talos `version` ("v1.14", "v1.14.1") to a node's
// configuration and apply it, for the patch's header and doctor's talos.config fix: the one
// place they are spelled.
struct FitPatchCommands {
  std::string get;     // the node's configuration into current.yaml
  std::string render;  // gpulet's patch fitted to it (on stdout)
  std::string apply;   // the patch, saved as gpu-node-patch.yaml, applied
};
FitPatchCommands FitPatchCommandsFor(absl::string_view version);

}  // namespace gpulet::deploy

#endif  // GPULET_DEPLOY_TALOS_MIGRATION_H_
