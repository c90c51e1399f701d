#include "cluster/labels.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/hex.h"
#include "gpu/nvml_api.h"
#include "node/driver_info.h"

namespace gpulet::cluster {
namespace {

constexpr char kNvidia[] = "nvidia.com/";

// The GPUs the labels count: those NVML serves when it works (a card NVML cannot use is not
// a GPU a pod can get), else every GPU on the PCI bus.
std::vector<const gpu::Gpu*> LabelledGpus(const gpu::Inventory& inv) {
  std::vector<const gpu::Gpu*> out;
  if (inv.nvml_status.ok()) {
    for (const gpu::Gpu& g : inv.gpus) {
      if (g.in_nvml) out.push_back(&g);
    }
  }
  if (out.empty()) {
    for (const gpu::Gpu& g : inv.gpus) {
      if (g.on_pci) out.push_back(&g);
    }
  }
  return out;
}

bool IsAlnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

}  // namespace

std::string SanitizeLabelValue(absl::string_view value) {
  // GFD: drop what is not [A-Za-z0-9-_. ], then join the space-separated fields with '-'.
  std::string out;
  out.reserve(value.size());
  bool pending_space = false;
  for (char c : value) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') {
      pending_space = true;
      continue;
    }
    if (!(IsAlnum(c) || c == '.' || c == '_' || c == '-')) continue;
    if (pending_space && !out.empty()) out += '-';
    pending_space = false;
    out += c;
  }
  auto trim = [](std::string& s) {
    size_t b = 0;
    while (b < s.size() && !IsAlnum(s[b])) ++b;
    size_t e = s.size();
    while (e > b && !IsAlnum(s[e - 1])) --e;
    s = s.substr(b, e - b);
  };
  trim(out);
  if (out.size() > 63) {
    out.resize(63);
    trim(out);
  }
  return out;
}

std::string GpuFamilyFromComputeCapability(int major, int minor) {
  switch (major) {
    case 1:
      return "tesla";
    case 2:
      return "fermi";
    case 3:
      return "kepler";
    case 5:
      return "maxwell";
    case 6:
      return "pascal";
    case 7:
      return minor < 5 ? "volta" : "turing";
    case 8:
      return minor == 9 ? "ada-lovelace" : "ampere";
    case 9:
      return "hopper";
    case 10:
    case 12:
      return "blackwell";
    case 13:
      return "rubin";
    default:
      return "undefined";
  }
}

std::string GpuFamilyFromArchitecture(node::Architecture arch) {
  switch (arch) {
    case node::Architecture::kKepler:
      return "kepler";
    case node::Architecture::kMaxwell:
      return "maxwell";
    case node::Architecture::kPascal:
      return "pascal";
    case node::Architecture::kVolta:
      return "volta";
    case node::Architecture::kTuring:
      return "turing";
    case node::Architecture::kAmpere:
      return "ampere";
    case node::Architecture::kAda:
      return "ada-lovelace";
    case node::Architecture::kHopper:
      return "hopper";
    case node::Architecture::kBlackwell:
      return "blackwell";
    case node::Architecture::kRubin:
      return "rubin";
    case node::Architecture::kUnknown:
      break;
  }
  return "undefined";
}

LabelExtras ReadLabelExtras(const HostFs& host, const gpu::Inventory& inventory) {
  LabelExtras extras;
  absl::StatusOr<std::string> product = host.ReadAttribute("/sys/class/dmi/id/product_name");
  if (product.ok()) extras.machine_type = *product;
  for (const gpu::Gpu* g : LabelledGpus(inventory)) {
    std::optional<uint32_t>& cls = extras.gpu_pci_classes.emplace_back();
    if (g->bus_id.empty()) continue;
    absl::StatusOr<std::string> text =
        host.ReadAttribute(JoinPath("/sys/bus/pci/devices", g->bus_id) + "/class");
    if (!text.ok()) continue;
    // value_or, not *code: g++ 12 at -Os takes the optional's value for maybe-uninitialized.
    const uint64_t code = ParseHex(*text).value_or(uint64_t{UINT32_MAX} + 1);
    if (code <= UINT32_MAX) cls = static_cast<uint32_t>(code);
  }
  return extras;
}

LabelSharing LabelSharingFromConfig(const config::Config& config) {
  LabelSharing sharing;
  sharing.replicas = config.sharing.time_slicing.replicas;
  sharing.renamed = config.sharing.time_slicing.rename_by_default;
  sharing.mig_strategy = config.plugin.mig_strategy;
  return sharing;
}

NodeLabels NodeGpuLabels(const gpu::Inventory& inventory, const HostFs& host,
                         const config::Config& config) {
  return ComputeGpuLabels(inventory, ReadLabelExtras(host, inventory),
                          LabelSharingFromConfig(config));
}

NodeLabels ComputeGpuLabels(const gpu::Inventory& inv, const LabelExtras& extras,
                            const LabelSharing& sharing) {
  NodeLabels labels;
  std::vector<const gpu::Gpu*> gpus = LabelledGpus(inv);
  if (gpus.empty()) return labels;
  const gpu::Gpu& first = *gpus[0];
  auto set = [&](absl::string_view key, absl::string_view value) {
    labels[absl::StrCat(kNvidia, key)] = std::string(value);
  };

  set("gpu.present", "true");
  // GFD counts the GPUs of the product its labels describe (newGPULabelers).
  size_t same_product = 0;
  for (const gpu::Gpu* g : gpus) same_product += g->name == first.name;
  set("gpu.count", absl::StrCat(same_product));
  // GFD's baseLabeler: replicas 1 and strategy "none" without sharing; "-SHARED" on the
  // product of a shared resource that keeps its name.
  bool shared = sharing.replicas > 1;
  set("gpu.replicas", absl::StrCat(shared ? sharing.replicas : 1));
  set("gpu.sharing-strategy", shared ? "time-slicing" : "none");
  if (std::string product = SanitizeLabelValue(first.name); !product.empty()) {
    set("gpu.product", shared && !sharing.renamed ? absl::StrCat(product, "-SHARED") : product);
  }
  // GFD's sharing labeler: MPS-capable only under the MPS strategy, which gpulet lacks.
  set("mps.capable", "false");
  // GFD's MIG-capability labeler (newMigCapabilityLabeler): "true" when any GPU supports
  // MIG. Only NVML can tell, so the label is left out when NVML did not answer.
  if (inv.nvml_status.ok()) {
    bool any_mig = false, any_known = false;
    for (const gpu::Gpu* g : gpus) {
      any_known = any_known || g->mig_capable.has_value();
      any_mig = any_mig || g->mig_capable.value_or(false);
    }
    if (any_known) set("mig.capable", any_mig ? "true" : "false");
    // GFD's vGPU labeler: "true" on a vGPU guest. GFD finds vGPUs in PCI config space;
    // NVML's virtualization mode says the same (VGPU: this is a guest).
    bool vgpu = false;
    for (const gpu::Gpu* g : gpus) {
      vgpu = vgpu || g->virtualization_mode == NVML_GPU_VIRTUALIZATION_MODE_VGPU;
    }
    set("vgpu.present", vgpu ? "true" : "false");
  }
  if (first.memory_total_bytes) {
    set("gpu.memory", absl::StrCat(*first.memory_total_bytes / (1024 * 1024)));
  }
  if (first.cc_major && first.cc_minor) {
    set("gpu.family", GpuFamilyFromComputeCapability(*first.cc_major, *first.cc_minor));
    set("gpu.compute.major", absl::StrCat(*first.cc_major));
    set("gpu.compute.minor", absl::StrCat(*first.cc_minor));
  } else if (first.architecture != node::Architecture::kUnknown) {
    set("gpu.family", GpuFamilyFromArchitecture(first.architecture));
  }
  // GFD's GPU-mode labeler: one class for every GPU, VGA or 3D controller; else unknown
  // (also when a class cannot be read).
  {
    std::optional<uint32_t> cls;
    bool same = !extras.gpu_pci_classes.empty();
    for (const std::optional<uint32_t>& c : extras.gpu_pci_classes) {
      if (!c || (cls && *c != *cls)) same = false;
      if (c && !cls) cls = c;
    }
    const char* mode = "unknown";
    if (same && *cls == 0x030000) mode = "graphics";
    if (same && *cls == 0x030200) mode = "compute";
    set("gpu.mode", mode);
  }
  // GFD's machine-type labeler: "unknown" when the DMI file cannot be read.
  std::string machine = SanitizeLabelValue(extras.machine_type);
  set("gpu.machine", machine.empty() ? "unknown" : machine);

  // Driver version: NVML's when it answered, else the loaded module's.
  std::string driver = inv.nvml_status.ok() ? inv.system.driver_version : "";
  if (driver.empty()) driver = inv.driver.version;
  std::vector<std::string> parts = absl::StrSplit(driver, '.');
  if (!driver.empty() && parts.size() >= 2 && parts.size() <= 3) {
    set("cuda.driver-version.full", driver);
    set("cuda.driver-version.major", parts[0]);
    set("cuda.driver-version.minor", parts[1]);
    // The older names, still set by GFD and still used by selectors.
    set("cuda.driver.major", parts[0]);
    set("cuda.driver.minor", parts[1]);
    // GFD's version labeler writes the revision labels empty for an "X.Y" version.
    std::string revision = parts.size() == 3 ? parts[2] : "";
    set("cuda.driver-version.revision", revision);
    set("cuda.driver.rev", revision);
  }
  // The CUDA version the driver supports (GFD calls it the runtime version).
  int cuda = inv.nvml_status.ok() ? inv.system.cuda_driver_version : 0;
  if (cuda > 0) {
    std::string major = absl::StrCat(cuda / 1000);
    std::string minor = absl::StrCat((cuda % 1000) / 10);
    set("cuda.runtime-version.major", major);
    set("cuda.runtime-version.minor", minor);
    set("cuda.runtime-version.full", absl::StrCat(major, ".", minor));
    set("cuda.runtime.major", major);
    set("cuda.runtime.minor", minor);
  }

  if (inv.driver.flavor != node::DriverFlavor::kUnknown) {
    labels["gpulet.dev/kernel-module-flavor"] =
        std::string(node::DriverFlavorName(inv.driver.flavor));
  }
  for (const gpu::Gpu* g : gpus) {
    if (g->name != first.name) {
      // GFD's per-GPU labels describe only the first GPU; say that they are not the whole
      // story, so a selector on gpu.product can be written knowingly.
      labels["gpulet.dev/gpu.mixed"] = "true";
      break;
    }
  }
  // GFD's MIG labels (internal/lm/mig-strategy.go): nvidia.com/mig.strategy under single and
  // mixed; per MIG resource its product, count, replicas, sharing strategy and the MIG
  // device's attributes (memory in MiB, multiprocessors, slices, engines). Under single the
  // resource is nvidia.com/gpu (its labels replace the whole GPU's), under mixed
  // nvidia.com/mig-<profile>. A single layout gpulet refuses gets GFD's "-MIG-INVALID".
  if (sharing.mig_strategy != config::MigStrategy::kNone) {
    set("mig.strategy", config::MigStrategyName(sharing.mig_strategy));
    struct MigResource {
      const gpu::Gpu* parent = nullptr;
      const gpu::MigDeviceInfo* device = nullptr;
      int count = 0;
    };
    std::map<std::string, MigResource> by_profile;
    bool any_enabled = false, any_disabled = false, empty_enabled = false;
    for (const gpu::Gpu* g : gpus) {
      if (!g->in_nvml) continue;
      (g->mig_enabled ? any_enabled : any_disabled) = true;
      if (g->mig_enabled && g->mig_devices.empty()) empty_enabled = true;
      for (const gpu::MigDeviceInfo& m : g->mig_devices) {
        MigResource& r = by_profile[m.profile];
        if (r.device == nullptr) {
          r.parent = g;
          r.device = &m;
        }
        ++r.count;
      }
    }
    const bool shared = sharing.replicas > 1;
    auto resource_labels = [&](const std::string& prefix, const MigResource& r) {
      auto put = [&](absl::string_view key, const std::string& value) {
        labels[absl::StrCat(prefix, ".", key)] = value;
      };
      put("product", absl::StrCat(SanitizeLabelValue(r.parent->name), "-MIG-", r.device->profile));
      put("count", absl::StrCat(r.count));
      put("replicas", absl::StrCat(shared ? sharing.replicas : 1));
      put("sharing-strategy", shared ? "time-slicing" : "none");
      put("memory", absl::StrCat(r.device->memory_bytes >> 20));
      put("multiprocessors", absl::StrCat(r.device->sm_count));
      put("slices.gi", absl::StrCat(r.device->gpu_instance_slices));
      put("slices.ci", absl::StrCat(r.device->compute_instance_slices));
      put("engines.copy", absl::StrCat(r.device->copy_engines));
      put("engines.decoder", absl::StrCat(r.device->decoders));
      put("engines.encoder", absl::StrCat(r.device->encoders));
      put("engines.jpeg", absl::StrCat(r.device->jpeg_engines));
      put("engines.ofa", absl::StrCat(r.device->ofa_engines));
    };
    if (sharing.mig_strategy == config::MigStrategy::kMixed) {
      for (const auto& [profile, r] : by_profile) {
        resource_labels(absl::StrCat(kNvidia, "mig-", profile), r);
      }
    } else if (any_enabled) {
      if (any_disabled || empty_enabled || by_profile.size() != 1) {
        set("gpu.product", absl::StrCat(SanitizeLabelValue(first.name), "-MIG-INVALID"));
        set("gpu.count", "0");
        set("gpu.replicas", "0");
        set("gpu.sharing-strategy", "");
        set("gpu.memory", "0");
      } else {
        resource_labels(absl::StrCat(kNvidia, "gpu"), by_profile.begin()->second);
      }
    }
  }
  return labels;
}

std::string FormatFeatureFile(const NodeLabels& labels) {
  std::string out;
  for (const auto& [key, value] : labels) absl::StrAppend(&out, key, "=", value, "\n");
  return out;
}

}  // namespace gpulet::cluster
