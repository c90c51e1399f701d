// The deployment manifests of deploy/, compiled into the binary, and what `gpulet manifests`
// makes of them: a kustomize-compatible rendering of an overlay (from what node inspection,
// src/node/node_facts.h, found) and the Talos pieces that are not
// Kubernetes objects (the machine-config patch and the Image Factory schematic).
//
// The files are embedded at build time (cmake/EmbedDeploy.cmake), so the printed manifests
// are the files in deploy/ and cannot drift from them. Rendering works on any ManifestFiles
// map, so tests render the files on disk through the same code.
//
// Thread-safety: pure functions over values; all are safe to call concurrently.
#ifndef GPULET_DEPLOY_MANIFESTS_H_
#define GPULET_DEPLOY_MANIFESTS_H_

#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/host_fs.h"
#include "node/node_facts.h"
#include "node/os_release.h"
#include "yaml-cpp/yaml.h"

namespace gpulet::deploy {

// One file of deploy/, as embedded.
struct EmbeddedFile {
  const char* path;     // relative to the source tree: "deploy/base/daemonset.yaml"
  const char* content;  // the whole file
};

// Every deploy/**/*.yaml and *.yml file, sorted by path. Defined in the generated
// embedded_deploy.cc.
std::span<const EmbeddedFile> EmbeddedDeployFiles();

// Manifest files by path relative to the source tree ("deploy/base/daemonset.yaml").
using ManifestFiles = std::map<std::string, std::string>;

// The embedded files as a map.
ManifestFiles EmbeddedManifestFiles();

// The YAML files under <source_dir>/deploy, read from disk (tests compare them with the
// embedded ones and render them). NotFound when <source_dir>/deploy does not exist.
absl::StatusOr<ManifestFiles> ReadManifestFiles(const std::string& source_dir);

// The image reference the manifests use for gpulet: "gpulet:<project version>".
std::string DefaultGpuletImage();

// One Kubernetes object of a rendered overlay.
//
// Copying or assigning a KubeObject rebinds `node` to the other object's tree. (Plain
// YAML::Node assignment would instead overwrite the tree `node` refers to, which corrupts
// objects when a container of them is sorted.)
struct KubeObject {
  KubeObject() = default;
  KubeObject(const KubeObject& other) = default;
  KubeObject& operator=(const KubeObject& other);
  KubeObject& operator=(KubeObject&& other) {
    return *this = static_cast<const KubeObject&>(other);
  }

  std::string file;  // where it came from: "deploy/base/daemonset.yaml"
  int line = 1;      // first line of its document in `file`
  YAML::Node node;   // the object after patches and image changes
  std::string text;  // its source text (comments kept) when `modified` is false
  bool modified = false;

  std::string ApiVersion() const;
  std::string Kind() const;
  std::string Name() const;
  std::string Namespace() const;  // "" for cluster-scoped objects
};

struct RenderOptions {
  // When non-empty, the image of every gpulet container (one named "gpulet", or whose image
  // name ends in "gpulet"), applied after the kustomizations' own `images:`.
  std::string image;
};

// Renders the kustomization in directory `dir` ("deploy/overlays/talos") of `files` the way
// `kubectl kustomize` would: its resources (files, and directories holding a
// kustomization.yaml, recursively), then its `components` (directories holding a kustomize
// Component, kind Component: its resources are added and its patches and images applied to
// everything rendered so far), then its `patches` (strategic merge, target taken from the
// patch's kind and name), then its `images`. A Component directory does not render on its
// own (InvalidArgument), as with kustomize. Objects come out in kustomize's order
// (Namespace, ServiceAccount, ConfigMap, Service, ..., workloads; by name within a kind).
// Errors name the file and key: a missing resource or patch, a patch whose target is not
// rendered, a kustomization field gpulet does not implement, invalid YAML.
absl::StatusOr<std::vector<KubeObject>> RenderKustomization(const ManifestFiles& files,
                                                            const std::string& dir,
                                                            const RenderOptions& options);

// The objects as one multi-document YAML stream, each after a "---" line. Unmodified
// objects keep their source text and comments; modified ones are emitted by EmitYaml after
// a comment naming their source file.
std::string FormatObjects(const std::vector<KubeObject>& objects);

// --- Talos -----------------------------------------------------------------------------------

// Which branch of the NVIDIA Talos extensions: -production or -lts. Do not mix them.
enum class DriverBranch { kProduction, kLts };

// The Talos system extensions a node needs, and why.
struct TalosExtensions {
  std::vector<std::string> names;    // "nvidia-open-gpu-kernel-modules-production", ...
  std::vector<std::string> reasons;  // one line per decision, for comments
};

// Chooses the kernel-module extension from the GPUs (Blackwell and newer: open only;
// Maxwell to Volta: proprietary only; otherwise the flavour already running, else open),
// adds the container toolkit, and Fabric Manager when `facts` has NVSwitches. Names follow
// `version`'s row of the Talos release table (src/node/talos_releases.h; the newest row when
// unknown). FailedPrecondition when the node's GPUs need both flavours (no single driver
// can drive them; the message names the GPUs) or when `version` is older than Talos 1.8.
// A version newer than the table adds a "Warning:" reason.
absl::StatusOr<TalosExtensions> ChooseTalosExtensions(
    const node::NodeFacts& facts, const std::optional<node::TalosVersion>& version,
    DriverBranch branch);

// The Image Factory schematic listing `extensions`, with comments giving the reasons.
std::string RenderTalosSchematic(const TalosExtensions& extensions);

// The machine-config patch of deploy/overlays/talos/talos-machine-patch.yaml in the form
// `version`'s row of the Talos release table takes: the file's v1alpha1 form, with the
// net.core.bpf_jit_harden sysctl where the release runs the legacy NVIDIA runtime (1.8 to
// 1.12); KernelModuleConfig and KubeNodeConfig documents where the release has them (1.14),
// because 1.14 refuses those documents next to .machine.nodeLabels/.machine.kubelet. With
// no version: the file as written (the 1.13 form). A header comment lists `extensions` with
// their reasons (which carry the warning for a version newer than the table). Errors name
// the file when it lacks the expected keys, and refuse versions older than 1.8.
//
// With `current` (a node's machine configuration, `text` read from `origin`), the patch is
// fitted to that node: on a release with KubeNodeConfig (1.14), it also deletes what that
// node's v1alpha1 document holds that the release refuses beside a KubeNodeConfig, and
// carries the values into it (deploy/talos_migration.h), so a node upgraded from an earlier
// release with gpulet's earlier patch, or with its own node labels or node IP, takes it.
struct TalosCurrentConfig {
  std::string text;
  std::string origin;  // the file it was read from, for messages
};
absl::StatusOr<std::string> RenderTalosMachinePatch(
    const ManifestFiles& files, const std::optional<node::TalosVersion>& version,
    const TalosExtensions& extensions, const TalosCurrentConfig* current = nullptr);

// A Talos machine-config patch that makes containerd pull `host_port`'s images
// ("192.168.1.10:5000") over plain HTTP from that address: the registry `gpulet image-serve`
// runs (docs/no-registry.md). It is v1alpha1's .machine.registries.mirrors, which every
// release of the table accepts, checked by each release's own code (talos_machinery_test).
// InvalidArgument, naming `flag`, for anything but HOST:PORT (a DNS name, an IPv4 address or
// a bracketed IPv6 address; a port from 1 to 65535).
absl::StatusOr<std::string> RenderTalosRegistryMirrorPatch(absl::string_view host_port,
                                                           absl::string_view flag);

// Paths of the Talos files inside the embedded tree.
inline constexpr char kTalosOverlayDir[] = "deploy/overlays/talos";
inline constexpr char kGenericOverlayDir[] = "deploy/overlays/generic";
// The same with gpulet's DRA driver (the deploy/dra Component).
inline constexpr char kTalosDraOverlayDir[] = "deploy/overlays/talos-dra";
inline constexpr char kDraOverlayDir[] = "deploy/overlays/dra";
inline constexpr char kTalosMachinePatchPath[] = "deploy/overlays/talos/talos-machine-patch.yaml";
inline constexpr char kTalosSchematicPath[] = "deploy/overlays/talos/talos-schematic.yaml";

}  // namespace gpulet::deploy

#endif  // GPULET_DEPLOY_MANIFESTS_H_
