// The Talos releases gpulet knows (1.8 to 1.14), one row each, with every fact about how
// that release serves NVIDIA GPUs: extension names, where the driver libraries and the
// private glibc live, who writes CDI specs, containerd and its CDI default, the NVIDIA
// runtime mode, the BPF sysctl, and which machine-config documents and field combinations
// the release accepts. Each fact carries the public source it was read from (a
// repository@tag:path, or a URL), so a new Talos release means adding one row here and
// checking it against that release's source, not editing doctor, manifests, the NVML
// loader and explain separately. Each release's own configuration code (its machinery Go
// module) checks the patches gpulet renders from this table: src/deploy/talos_machinery_test.cc.
//
// The module depends on absl and the standard library only, so every other module may use
// it. The machine-config rule checker works on document shapes (kind + dotted field
// paths), not on YAML, for the same reason; callers turn their YAML into shapes.
//
// Thread-safety: the table is immutable after first use (built once, never freed); every
// function is safe to call concurrently.
#ifndef GPULET_NODE_TALOS_RELEASES_H_
#define GPULET_NODE_TALOS_RELEASES_H_

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpulet::node {

// A value and where it was read.
template <typename T>
struct Sourced {
  T value{};
  std::string source;  // "siderolabs/extensions@v1.9.0:misc/glibc/pkg.yaml", or a URL
};

// How GPU containers get the driver on a release.
enum class RuntimeMode {
  kLegacy,  // nvidia-container-runtime + nvidia-container-cli (prestart hook, ld.so.cache)
  kCdi,     // CDI specs (ext-nvidia-cdi-gen writes /run/cdi/nvidia.yaml)
};
absl::string_view RuntimeModeName(RuntimeMode mode);  // "legacy", "CDI"

// Where the NVIDIA user space and the private glibc it needs live on the host.
struct LibraryLayout {
  std::string library_dir;                       // real directory holding libnvidia-ml.so.1
  std::vector<std::string> library_dir_aliases;  // symlinks to it ("/usr/local/glibc/lib")
  std::string ld_linux;                          // the glibc loader extensions use
  std::string libc;                              // "…/libc.so.6"
  std::string ld_so_cache;                       // the cache that loader reads
};

// A v1alpha1 field that a multi-document kind refuses to coexist with.
struct Conflict {
  std::string kind;   // "KubeNodeConfig"
  std::string field;  // dotted v1alpha1 path, "machine.nodeLabels"; a prefix rejects subfields
  std::string source;
};

// A field a document must carry when it is first added.
struct Required {
  std::string kind;
  std::string field;
  std::string source;
};

struct Release {
  int major = 1;
  int minor = 0;
  std::string tag;  // the git tag the facts were read at, "v1.12.0"

  // -production / -lts suffixes on the NVIDIA extension names (unsuffixed before).
  Sourced<bool> suffixed_extension_names;
  Sourced<LibraryLayout> layout;
  // Who writes a CDI spec for the GPUs at boot: "" nobody, else the service and the file.
  Sourced<std::string> cdi_spec_writer;
  Sourced<std::string> cdi_spec_path;  // "/run/cdi/nvidia.yaml" or ""
  Sourced<int> containerd_major;
  Sourced<bool> containerd_cdi_enabled;
  Sourced<std::vector<std::string>> cdi_spec_dirs;  // what containerd scans
  Sourced<RuntimeMode> runtime_mode;
  // nvidia-container-cli needs net.core.bpf_jit_harden: 1 (Talos' KSPP default is 2).
  Sourced<bool> needs_bpf_jit_harden_1;
  Sourced<std::string> bpf_jit_harden_default;  // "2"
  // /usr/bin/nvidia-ctk and /usr/bin/nvidia-cdi-hook links (hooks written by NVIDIA tools).
  Sourced<bool> hook_links_in_usr_bin;
  // NVIDIA's GPU Operator: the Helm values Talos' own documentation of this release gives for
  // it ("driver.enabled=false", ...: the driver and toolkit come from the extensions), or
  // empty when the release documents no GPU Operator.
  Sourced<std::vector<std::string>> gpu_operator_values;

  // Machine configuration: v1alpha1 paths gpulet's patch may use, the multi-document kinds
  // that exist, which combinations are refused, and what `talosctl gen config` of this
  // release writes (the base a patch is merged into on a node installed with it).
  Sourced<std::set<std::string>> v1alpha1_fields;
  Sourced<std::set<std::string>> document_kinds;
  std::vector<Conflict> conflicts;
  std::vector<Required> required;
  Sourced<std::vector<std::string>>
      generated_config;  // "v1alpha1:machine.kubelet", "KubeletConfig"

  std::string Name() const;  // "Talos 1.12"
  bool KernelModuleDocuments() const { return document_kinds.value.count("KernelModuleConfig"); }
  bool KubeNodeDocuments() const { return document_kinds.value.count("KubeNodeConfig"); }
};

// Every known release, oldest first.
const std::vector<Release>& KnownReleases();
const Release& OldestRelease();
const Release& NewestRelease();

// The row for a release. Newer than the newest known: that row, with `warning` saying so.
// Older than the oldest known (1.8): FailedPrecondition naming the oldest supported.
struct Match {
  const Release* release = nullptr;
  std::string warning;  // empty when the release is known
};
absl::StatusOr<Match> FindRelease(int major, int minor);

// "Talos 1.9 to 1.12": the releases whose NVIDIA libraries are in `dir` (as the real
// directory or an alias). Empty when none.
std::string ReleasesWithLibraryDir(absl::string_view dir);

// Extension names for a release: `base` is "nvidia-open-gpu-kernel-modules",
// "nonfree-kmod-nvidia", "nvidia-container-toolkit" or "nvidia-fabricmanager"; `lts` picks
// the long-term branch (ignored where names are unsuffixed).
std::string ExtensionName(const Release& release, absl::string_view base, bool lts);

// --- machine-config rule checker ------------------------------------------------------------

// One YAML document reduced to what the rules look at.
struct DocumentShape {
  std::string kind;              // "" for the v1alpha1 document
  std::set<std::string> fields;  // dotted paths of every key, "machine.kubelet.extraArgs"
};

// A rule broken, with the source that says so.
struct Violation {
  std::string message;
  std::string source;
};

// Checks `patch` on its own against `release`: document kinds that exist, v1alpha1 fields
// gpulet may set, and fields a document kind requires.
std::vector<Violation> CheckPatch(const Release& release, const std::vector<DocumentShape>& patch);

// Checks `patch` merged into `base` (documents of one kind merge; v1alpha1 merges into
// v1alpha1): the conflicts between multi-document kinds and v1alpha1 fields.
std::vector<Violation> CheckMerged(const Release& release, const std::vector<DocumentShape>& base,
                                   const std::vector<DocumentShape>& patch);

// The configurations a patch meets on a node of `release`: as generated by this release
// (new node) and by the previous one (a node upgraded to this release).
struct BaseConfig {
  std::string description;  // "generated by Talos 1.14", "upgraded from Talos 1.13"
  std::vector<DocumentShape> documents;
  std::string source;
};
std::vector<BaseConfig> BaseConfigs(const Release& release);

}  // namespace gpulet::node

#endif  // GPULET_NODE_TALOS_RELEASES_H_
