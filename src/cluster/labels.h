// Node labels describing a node's GPUs, compatible with NVIDIA's gpu-feature-discovery (GFD),
// for `gpulet labels`.
//
// Workloads and charts select GPU nodes by GFD's labels (nvidia.com/gpu.product,
// nvidia.com/gpu.family, nvidia.com/cuda.driver-version.major, ...). gpulet computes the same
// keys with the same values from its inventory, so those selectors keep working without GFD,
// and adds the facts only gpulet knows (the kernel-module flavour running). The labels are
// written as a node-feature-discovery "local" feature file: one `key=value` per line, which
// NFD's worker turns into node labels.
//
// Conventions copied from GFD (NVIDIA/k8s-device-plugin, internal/lm/: resource.go,
// mig-strategy.go, nvml.go, machine-type.go), so that values match: the per-GPU labels
// describe one product; on a node with two products GFD makes one set of product labels per
// product and whichever is merged last wins, each with gpu.count counting the GPUs of *that*
// product (newGPULabelers), so gpulet picks the first GPU's (NVML index 0) product and counts
// the GPUs of that product. The product name is sanitised as GFD's sanitise() does;
// gpu.family comes from the CUDA compute capability; gpu.memory is in MiB; gpu.machine is the
// DMI product name, "unknown" when unreadable; gpu.mode is "graphics" or "compute" when every
// GPU has that PCI class, else "unknown" (getModeForClasses). Sharing (baseLabeler): gpu.replicas
// is the time-slicing replica count (1 without sharing), gpu.sharing-strategy "time-slicing" when
// it is above 1 and "none" otherwise, and the product gets "-SHARED" when shared and not renamed.
// mps.capable is "false": GFD writes false unless the sharing strategy is MPS, which gpulet
// does not offer. mig.capable is "true" when any GPU supports MIG (nvmlDeviceGetMigMode
// answers), vgpu.present "true" on a vGPU guest (NVML's virtualization mode), both "false"
// otherwise; GFD's vgpu.host-driver-version/branch come from the PCI config space of a vGPU
// and are not written. When NVML is not usable the labels come from PCI sysfs and the driver's
// /proc files, and the values only NVML knows (memory, compute capability, CUDA version) are left
// out rather than guessed.
//
// Thread-safety: pure functions.
#ifndef GPULET_CLUSTER_LABELS_H_
#define GPULET_CLUSTER_LABELS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/atomic_file.h"
#include "common/host_fs.h"
#include "config/config.h"
#include "gpu/gpu_model.h"

namespace gpulet::cluster {

// Sorted by key.
using NodeLabels = std::map<std::string, std::string>;

// Where GFD, and so gpulet, writes its feature file by default.
inline constexpr char kDefaultFeaturesFile[] =
    "/etc/kubernetes/node-feature-discovery/features.d/gpulet";

// Facts for the labels that the inventory does not carry.
struct LabelExtras {
  // /sys/class/dmi/id/product_name, e.g. "DGX H100"; "" when unreadable.
  std::string machine_type;
  // PCI class of each labelled GPU, in order (0x030000 VGA: "graphics"; 0x030200 3D:
  // "compute"); nullopt where unreadable.
  std::vector<std::optional<uint32_t>> gpu_pci_classes;
};

// Reads LabelExtras through `host` (DMI product name, every labelled GPU's PCI class).
LabelExtras ReadLabelExtras(const HostFs& host, const gpu::Inventory& inventory);

// A label value as GFD's sanitise() writes it: characters outside [A-Za-z0-9._- ] are
// removed and each run of spaces becomes one '-'. Beyond GFD, so that the value is always a
// valid Kubernetes label value: leading and trailing non-alphanumerics are dropped, and the
// result is cut to 63 characters.
std::string SanitizeLabelValue(absl::string_view value);

// GFD's family name for a compute capability: "volta" (7.0-7.4), "turing" (7.5), "ampere"
// (8.0-8.8), "ada-lovelace" (8.9), "hopper" (9.x), "blackwell" (10.x and 12.x), "rubin"
// (13.x), older ones by name, "undefined" otherwise.
std::string GpuFamilyFromComputeCapability(int major, int minor);

// The same names from an architecture (used when NVML, and so the compute capability, is
// not available).
std::string GpuFamilyFromArchitecture(node::Architecture arch);

// How `gpulet serve` shares whole GPUs, as GFD's sharing labels describe it.
struct LabelSharing {
  int replicas = 1;      // sharing.timeSlicing.replicas
  bool renamed = false;  // sharing.timeSlicing.renameByDefault: advertised as <name>.shared
  config::MigStrategy mig_strategy = config::MigStrategy::kNone;  // plugin.migStrategy
};

// The sharing of `config` (sharing.timeSlicing).
LabelSharing LabelSharingFromConfig(const config::Config& config);

// The labels for a node. Empty when the inventory has no GPU (the file is still written, so
// that labels from an earlier run disappear).
NodeLabels ComputeGpuLabels(const gpu::Inventory& inventory, const LabelExtras& extras,
                            const LabelSharing& sharing);

// The labels of this node served with `config`: what `gpulet serve` keeps in
// labels.featuresFile and what `gpulet labels --config FILE` writes. The one function both use.
NodeLabels NodeGpuLabels(const gpu::Inventory& inventory, const HostFs& host,
                         const config::Config& config);

// The feature file: "key=value\n" per label, sorted by key.
std::string FormatFeatureFile(const NodeLabels& labels);

}  // namespace gpulet::cluster

#endif  // GPULET_CLUSTER_LABELS_H_
