#include "doctor/doctor.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <variant>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cdi/generator.h"
#include "cdi/spec_dirs.h"
#include "deploy/talos_migration.h"
#include "doctor/check_list.h"
#include "doctor/explain.h"
#include "doctor/stack_checks.h"
#include "gpu/nvml_api.h"
#include "gpu/nvml_loader.h"
#include "health/kmsg_source.h"
#include "health/xid.h"
#include "health/xid_catalog.h"
#include "nlohmann/json.hpp"

namespace gpulet::doctor {
namespace {

constexpr size_t kMaxListed = 8;  // evidence lines per kind before "... and N more"

// The modules a Talos machine config must list (the kmod extensions blacklist them).
constexpr const char* kTalosModulesYaml =
    "machine:\n  kernel:\n    modules:\n      - name: nvidia\n      - name: nvidia_uvm\n"
    "      - name: nvidia_drm\n      - name: nvidia_modeset";

// Everything the checks share: the inputs, plus facts worked out once.
struct Context {
  const HostFs& host;
  const Inventory& inv;
  const DoctorInput& input;
  OsInfo os;
  std::optional<TalosExpectations> talos;  // unset off Talos and on unsupported releases
  std::string talos_unsupported;           // why a Talos release has no row (older than 1.8)
  std::vector<const Gpu*> pci_gpus;        // NVIDIA GPUs on the PCI bus
  std::optional<cdi::SpecCatalog> catalog;
};

void Worsen(CheckResult* r, Verdict v) {
  auto rank = [](Verdict x) {
    switch (x) {
      case Verdict::kNotChecked:
        return 0;
      case Verdict::kPass:
        return 1;
      case Verdict::kWarn:
        return 2;
      case Verdict::kFail:
        return 3;
    }
    return 0;
  };
  if (rank(v) > rank(r->verdict)) r->verdict = v;
}

void AddLimited(std::vector<std::string>* out, const std::vector<std::string>& lines) {
  for (size_t i = 0; i < lines.size() && i < kMaxListed; ++i) out->push_back(lines[i]);
  if (lines.size() > kMaxListed) {
    out->push_back(absl::StrCat("... and ", lines.size() - kMaxListed, " more"));
  }
}

std::string GpuLabel(const Gpu& gpu) {
  std::string arch = gpu.architecture == Architecture::kUnknown
                         ? ""
                         : absl::StrCat(", ", ArchitectureName(gpu.architecture));
  return absl::StrCat(gpu.bus_id.empty() ? gpu.uuid : gpu.bus_id, " (",
                      gpu.name.empty() ? "unknown NVIDIA GPU" : gpu.name, arch, ")");
}

std::string TalosName(const Context& c) {
  return absl::StrCat("Talos ", c.os.version_id.empty() ? "?" : c.os.version_id);
}

// Fix text for loading the modules, per OS.
std::string ModulesFix(const Context& c) {
  if (c.talos) {
    if (c.talos->kernel_module_config_docs) {
      return "Add one KernelModuleConfig document per module (name: nvidia, nvidia_uvm, "
             "nvidia_drm, nvidia_modeset) to the machine config and apply it; the NVIDIA "
             "kernel-module extension blacklists them until the config names them.";
    }
    return absl::StrCat(
        "Add the modules to the machine config and apply it (talosctl patch mc -p @patch.yaml); "
        "the NVIDIA kernel-module extension blacklists them until the config names them:\n",
        kTalosModulesYaml);
  }
  return "Load them: `modprobe nvidia && modprobe nvidia_uvm && modprobe nvidia_modeset && "
         "modprobe nvidia_drm`, and make it permanent in /etc/modules-load.d/nvidia.conf. If "
         "modprobe fails, `dmesg | grep -i nvrm` says why (module not built for this kernel, "
         "Secure Boot signature, unsupported GPU).";
}

// --- os -------------------------------------------------------------------------------------

CheckResult CheckOs(const Context& c) {
  CheckResult r = CheckResultFor("os.release");
  r.verdict = Verdict::kPass;
  if (!c.os.readable) {
    r.summary = "unknown: /etc/os-release is not readable; Talos-specific checks are skipped";
    r.evidence.push_back(c.host.Describe("/etc/os-release") + ": not readable");
    return r;
  }
  r.evidence.push_back(absl::StrCat(c.host.Describe("/etc/os-release"), ": ID=", c.os.id,
                                    " VERSION_ID=", c.os.version_id));
  if (!c.os.talos) {
    r.summary = c.os.pretty_name.empty() ? c.os.id : c.os.pretty_name;
    return r;
  }
  if (!c.talos) {
    r.verdict = Verdict::kFail;
    r.summary = c.talos_unsupported;
    r.fix =
        "Upgrade the node to a Talos release gpulet knows (talosctl upgrade), with the "
        "NVIDIA extensions built for it.";
    return r;
  }
  const TalosExpectations& t = *c.talos;
  const talos::Release& row = *t.release;
  r.summary = absl::StrCat(TalosName(c), " (", t.label, "): NVIDIA libraries expected in ",
                           t.library_dir, "; containers get GPUs through ",
                           t.cdi_mode ? absl::StrCat("CDI (", row.cdi_spec_writer.value, " writes ",
                                                     row.cdi_spec_path.value, ")")
                                      : std::string("the nvidia runtime in legacy mode or CDI"));
  // The facts the other checks use, each with where it comes from.
  const talos::LibraryLayout& l = row.layout.value;
  r.evidence.push_back(absl::StrCat("libraries in ", l.library_dir, ", glibc ", l.libc,
                                    ", ld.so.cache ", l.ld_so_cache, " [", row.layout.source, "]"));
  r.evidence.push_back(absl::StrCat("runtime mode ", talos::RuntimeModeName(row.runtime_mode.value),
                                    " [", row.runtime_mode.source, "]"));
  r.evidence.push_back(absl::StrCat("containerd ", row.containerd_major.value, ", CDI ",
                                    row.containerd_cdi_enabled.value ? "enabled" : "disabled", " [",
                                    row.containerd_cdi_enabled.source, "]"));
  if (!t.warning.empty()) {
    r.verdict = Verdict::kWarn;
    r.summary = absl::StrCat(t.warning, ". ", r.summary);
    r.fix = c.os.talos_major == 0
                ? "Check /etc/os-release on the node (talosctl read /etc/os-release)."
                : "Check the Talos release notes for changes to the NVIDIA extensions, and use "
                  "a gpulet release that knows this Talos release.";
  }
  return r;
}

// --- PCI and kernel driver ------------------------------------------------------------------

CheckResult CheckGpuPresent(const Context& c) {
  CheckResult r = CheckResultFor("gpu.present");
  if (!c.inv.pci_status.ok()) {
    r.verdict = Verdict::kFail;
    r.summary = "cannot tell whether an NVIDIA GPU is present: PCI sysfs is unreadable";
    r.evidence.push_back(std::string(c.inv.pci_status.message()));
    r.fix =
        "Give gpulet the host's /sys: run it on the host, or mount the host at --host-root "
        "(in a pod: a hostPath volume of / mounted read-only, e.g. at /host).";
    return r;
  }
  if (c.pci_gpus.empty()) {
    r.verdict = Verdict::kFail;
    r.summary = "no NVIDIA GPU is present on this node";
    absl::StatusOr<std::vector<std::string>> all = c.host.ListDir("/sys/bus/pci/devices");
    r.evidence.push_back(absl::StrCat(
        c.host.Describe("/sys/bus/pci/devices"), ": ", all.ok() ? all->size() : 0,
        " PCI functions, none an NVIDIA display controller (vendor 10de, class 0300/0302)"));
    r.fix =
        "If this node should have a GPU: check that the card is seated and powered, "
        "enabled in the firmware (above-4G decoding for large cards), and, in a VM, passed "
        "through to this guest. `lspci -nn | grep -i 10de` on the host must list it.";
    return r;
  }
  r.verdict = Verdict::kPass;
  r.summary = absl::StrCat(c.pci_gpus.size(), " NVIDIA GPU", c.pci_gpus.size() == 1 ? "" : "s",
                           " on the PCI bus");
  for (const Gpu* g : c.pci_gpus) r.evidence.push_back(GpuLabel(*g));
  return r;
}

CheckResult CheckDriverBound(const Context& c) {
  CheckResult r = CheckResultFor("gpu.driver");
  r.verdict = Verdict::kPass;
  std::vector<std::string> fixes;
  for (const Gpu* g : c.pci_gpus) {
    std::string where =
        c.host.Describe(absl::StrCat("/sys/bus/pci/devices/", g->bus_id, "/driver"));
    if (g->kernel_driver == "nvidia") {
      r.evidence.push_back(absl::StrCat(GpuLabel(*g), ": nvidia (", where, ")"));
      continue;
    }
    if (g->kernel_driver.empty()) {
      Worsen(&r, Verdict::kFail);
      r.evidence.push_back(absl::StrCat(GpuLabel(*g), ": no driver bound (", where, " missing)"));
      fixes.push_back(
          c.inv.driver.modules.nvidia
              ? absl::StrCat("The nvidia module is loaded but did not take ", g->bus_id,
                             ": `dmesg | grep NVRM` says why (e.g. the driver is too old "
                             "for this GPU, or the GPU needs the other module flavour, see "
                             "driver.flavor).")
              : "Load the nvidia kernel modules (see driver.modules); the module "
                "binds the GPUs when it loads.");
    } else if (g->kernel_driver == "nouveau") {
      Worsen(&r, Verdict::kFail);
      r.evidence.push_back(absl::StrCat(GpuLabel(*g), ": bound to nouveau (", where, ")"));
      fixes.push_back(
          c.talos ? "Keep nouveau off the GPU: add the kernel argument module_blacklist=nouveau "
                    "(machine.install.extraKernelArgs, then upgrade the node to apply it)."
                  : "Blacklist nouveau (/etc/modprobe.d/blacklist-nouveau.conf: `blacklist "
                    "nouveau` and `options nouveau modeset=0`), rebuild the initramfs "
                    "(update-initramfs -u) and reboot.");
    } else if (g->kernel_driver == "vfio-pci") {
      Worsen(&r, Verdict::kWarn);
      r.evidence.push_back(absl::StrCat(GpuLabel(*g), ": bound to vfio-pci (", where,
                                        "), reserved for passthrough to a VM"));
      fixes.push_back(absl::StrCat(
          "If ", g->bus_id,
          " is meant for containers on this node, remove its vfio-pci.ids= / "
          "driver_override setting and reboot (or unbind it from vfio-pci and bind it to "
          "nvidia); if it is meant for VMs (KubeVirt), ignore this."));
    } else {
      Worsen(&r, Verdict::kFail);
      r.evidence.push_back(
          absl::StrCat(GpuLabel(*g), ": bound to ", g->kernel_driver, " (", where, ")"));
      fixes.push_back(absl::StrCat("Unbind ", g->bus_id, " from ", g->kernel_driver,
                                   " and let the nvidia module take it."));
    }
  }
  size_t bound = 0;
  for (const Gpu* g : c.pci_gpus) bound += g->kernel_driver == "nvidia";
  r.summary = r.verdict == Verdict::kPass ? "every GPU is bound to the nvidia driver"
                                          : absl::StrCat(bound, " of ", c.pci_gpus.size(),
                                                         " GPUs bound to the nvidia driver");
  std::set<std::string> unique(fixes.begin(), fixes.end());
  r.fix = absl::StrJoin(unique, "\n");
  return r;
}

CheckResult CheckFlavor(const Context& c) {
  CheckResult r = CheckResultFor("driver.flavor");
  const DriverInfo& d = c.inv.driver;
  if (d.flavor == DriverFlavor::kUnknown) {
    std::vector<std::string> needs;
    for (const Gpu* g : c.pci_gpus) {
      if (g->module_flavor == ModuleFlavor::kEither) continue;
      needs.push_back(absl::StrCat(
          GpuLabel(*g), " needs ", ModuleFlavorName(g->module_flavor),
          c.talos ? absl::StrCat(" (Talos extension ", TalosExtensionFor(g->module_flavor), ")")
                  : ""));
    }
    r = NotCheckedResult(
        r.id,
        absl::StrCat("no nvidia module is loaded (", c.host.Describe("/proc/driver/nvidia/version"),
                     " missing)",
                     needs.empty() ? "" : "; when you install one: ", absl::StrJoin(needs, "; ")));
    return r;
  }
  r.verdict = Verdict::kPass;
  r.evidence.push_back(
      absl::StrCat(c.host.Describe("/proc/driver/nvidia/version"), ": ", d.nvrm_line));
  std::vector<std::string> bad;
  ModuleFlavor wanted = ModuleFlavor::kEither;
  for (const Gpu* g : c.pci_gpus) {
    if (DriverFlavorSupports(d.flavor, g->module_flavor)) continue;
    bad.push_back(GpuLabel(*g));
    wanted = g->module_flavor;
  }
  if (bad.empty()) {
    r.summary = absl::StrCat("the ", DriverFlavorName(d.flavor),
                             " kernel modules are loaded, which every GPU here supports");
    return r;
  }
  r.verdict = Verdict::kFail;
  bool need_open = wanted == ModuleFlavor::kOpenRequired;
  r.summary = absl::StrCat(absl::StrJoin(bad, ", "), bad.size() == 1 ? " needs" : " need", " the ",
                           need_open ? "open" : "proprietary", " kernel modules, but the ",
                           DriverFlavorName(d.flavor), " ones are loaded");
  if (c.talos) {
    r.fix = absl::StrCat(
        "Replace the system extension ",
        need_open ? "nonfree-kmod-nvidia-production" : "nvidia-open-gpu-kernel-modules-production",
        " with ", TalosExtensionFor(wanted),
        " (same driver version as nvidia-container-toolkit-production) in the node's "
        "installer image (Image Factory schematic), then upgrade the node to that image.");
  } else {
    r.fix = need_open
                ? "Install the open kernel modules of the same driver version (NVIDIA's "
                  "nvidia-open / nvidia-kernel-open-dkms packages, or the .run installer with "
                  "-m=kernel-open) and reboot. Blackwell and newer GPUs work only with them."
                : "Install the proprietary kernel modules of the same driver version "
                  "(nvidia-kernel-dkms, or the .run installer with -m=kernel) and reboot; "
                  "GPUs older than Turing do not work with the open modules.";
  }
  return r;
}

CheckResult CheckModules(const Context& c) {
  CheckResult r = CheckResultFor("driver.modules");
  const DriverInfo& d = c.inv.driver;
  if (!d.proc_modules_readable) {
    r.verdict = Verdict::kWarn;
    r.summary = "cannot tell: /proc/modules is not readable";
    r.evidence.push_back(c.host.Describe("/proc/modules") + ": not readable");
    r.fix = "Run gpulet with the host's /proc visible (on the host, or with --host-root).";
    return r;
  }
  std::vector<std::string> missing_required, missing_optional, loaded;
  auto note = [&](bool present, const char* name, bool required) {
    if (present) {
      loaded.push_back(name);
    } else {
      (required ? missing_required : missing_optional).push_back(name);
    }
  };
  note(d.modules.nvidia, "nvidia", true);
  note(d.modules.nvidia_uvm, "nvidia_uvm", true);
  note(d.modules.nvidia_modeset, "nvidia_modeset", false);
  note(d.modules.nvidia_drm, "nvidia_drm", false);
  r.evidence.push_back(absl::StrCat(c.host.Describe("/proc/modules"), ": loaded: ",
                                    loaded.empty() ? "none of them" : absl::StrJoin(loaded, ", ")));
  if (d.modules.nouveau) r.evidence.push_back("nouveau is loaded too");
  if (c.talos) {
    bool kmod_ext = c.host.Exists("/usr/local/lib/modprobe.d/nvidia.conf");
    r.evidence.push_back(
        absl::StrCat(c.host.Describe("/usr/local/lib/modprobe.d/nvidia.conf"),
                     kmod_ext ? ": present (an NVIDIA kernel-module extension is installed)"
                              : ": missing (no NVIDIA kernel-module extension seems installed)"));
    if (!kmod_ext && !d.modules.nvidia) {
      ModuleFlavor want = ModuleFlavor::kEither;
      for (const Gpu* g : c.pci_gpus) {
        if (g->module_flavor != ModuleFlavor::kEither) want = g->module_flavor;
      }
      r.verdict = Verdict::kFail;
      r.summary =
          "the nvidia modules are not loaded, and no NVIDIA kernel-module extension "
          "is installed";
      r.fix = absl::StrCat("Add the system extensions ", TalosExtensionFor(want),
                           " and nvidia-container-toolkit-production (same driver version) to "
                           "the node's installer image, upgrade the node, then list the "
                           "modules in the machine config:\n",
                           kTalosModulesYaml);
      return r;
    }
  }
  if (!missing_required.empty()) {
    r.verdict = Verdict::kFail;
    r.summary = absl::StrCat(
        absl::StrJoin(missing_required, " and "), missing_required.size() == 1 ? " is" : " are",
        " not loaded; CUDA needs ", missing_required.size() == 1 ? "it" : "them");
    r.fix = ModulesFix(c);
  } else if (!missing_optional.empty()) {
    r.verdict = Verdict::kWarn;
    r.summary = absl::StrCat(absl::StrJoin(missing_optional, " and "),
                             " not loaded: CUDA works, display and DRM-based tools do not");
    r.fix = ModulesFix(c);
  } else {
    r.verdict = Verdict::kPass;
    r.summary = "nvidia, nvidia_uvm, nvidia_modeset and nvidia_drm are loaded";
  }
  if (!d.module_version.empty() && !d.version.empty() && d.module_version != d.version) {
    Worsen(&r, Verdict::kWarn);
    r.evidence.push_back(absl::StrCat("/sys/module/nvidia/version says ", d.module_version,
                                      " but /proc/driver/nvidia/version says ", d.version));
  }
  return r;
}

CheckResult CheckDevNodes(const Context& c) {
  CheckResult r = CheckResultFor("dev.nodes");
  const DriverInfo& d = c.inv.driver;
  std::vector<std::string> missing, present;
  auto want = [&](bool exists, const std::string& path) {
    (exists ? present : missing).push_back(path);
  };
  want(d.dev_nvidiactl, "/dev/nvidiactl");
  want(d.dev_nvidia_uvm, "/dev/nvidia-uvm");
  std::set<int> minors(d.dev_gpu_minors.begin(), d.dev_gpu_minors.end());
  size_t known_minors = 0;
  for (const Gpu& g : c.inv.gpus) {
    if (!g.minor) continue;
    ++known_minors;
    want(minors.count(static_cast<int>(*g.minor)) > 0, g.DeviceNode());
  }
  if (known_minors == 0) {
    // Without NVML the minor numbers are unknown; count nodes against bound GPUs instead.
    size_t bound = 0;
    for (const Gpu* g : c.pci_gpus) bound += g->kernel_driver == "nvidia";
    if (d.dev_gpu_minors.size() < bound) {
      missing.push_back(absl::StrCat(bound - d.dev_gpu_minors.size(), " of the ", bound,
                                     " /dev/nvidiaN nodes for the bound GPUs"));
    }
    for (int m : d.dev_gpu_minors) present.push_back(absl::StrCat("/dev/nvidia", m));
  }
  if (!present.empty()) {
    r.evidence.push_back(absl::StrCat("present: ", absl::StrJoin(present, ", ")));
  }
  if (missing.empty()) {
    r.verdict = Verdict::kPass;
    r.summary = "the control nodes and one node per GPU exist";
    return r;
  }
  r.verdict = Verdict::kFail;
  r.summary = absl::StrCat("missing: ", absl::StrJoin(missing, ", "));
  r.evidence.push_back(absl::StrCat("looked under ", c.host.Describe("/dev")));
  r.fix = c.talos ? "The nodes appear when the modules load: the toolkit extension's udev rule "
                    "runs nvidia-modprobe when nvidia binds a GPU and when nvidia_uvm loads. "
                    "Load nvidia and nvidia_uvm (see driver.modules) and make sure "
                    "nvidia-container-toolkit-production is installed."
                  : "Create them with `nvidia-modprobe -u -c 0` (one -c per GPU minor) once "
                    "the modules are loaded, or run `nvidia-smi` once as root; install "
                    "nvidia-modprobe so that it happens at boot.";
  return r;
}

// --- NVML and the user-space libraries ------------------------------------------------------

CheckResult CheckNvml(const Context& c) {
  CheckResult r = CheckResultFor("nvml.load");
  const Inventory& inv = c.inv;
  if (inv.nvml_status.ok()) {
    r.verdict = Verdict::kPass;
    size_t n = 0;
    for (const Gpu& g : inv.gpus) n += g.in_nvml;
    r.summary = absl::StrCat("NVML loaded from ", inv.system.library_path, ": driver ",
                             inv.system.driver_version, ", CUDA ", inv.system.CudaVersionString(),
                             ", ", n, " GPU", n == 1 ? "" : "s");
    for (const Gpu& g : inv.gpus) {
      if (g.on_pci && !g.in_nvml) {
        Worsen(&r, Verdict::kWarn);
        r.evidence.push_back(absl::StrCat(GpuLabel(g),
                                          " is on the PCI bus but NVML does not "
                                          "list it"));
        r.fix = "See gpu.driver and driver.flavor: the driver did not initialise that GPU.";
      } else if (!g.nvml_error.empty()) {
        Worsen(&r, Verdict::kWarn);
        r.evidence.push_back(absl::StrCat(GpuLabel(g), ": ", g.nvml_error));
      }
    }
    return r;
  }
  r.verdict = Verdict::kFail;
  bool glibc = false, crashed = false, hung = false, any_file = false;
  bool not_library = false, damaged = false, incompatible = false;
  std::vector<std::string> absent;
  for (const NvmlLoadAttempt& a : inv.nvml_attempts) {
    std::string msg(a.status.message());
    if (a.result != NvmlLoadAttempt::Result::kAbsent) any_file = true;
    glibc = glibc || a.reason == NvmlLoadAttempt::Reason::kNeedsNewerGlibc;
    crashed = crashed || a.reason == NvmlLoadAttempt::Reason::kCrashed;
    hung = hung || a.reason == NvmlLoadAttempt::Reason::kHung;
    not_library = not_library || a.reason == NvmlLoadAttempt::Reason::kNotALibrary;
    damaged = damaged || a.reason == NvmlLoadAttempt::Reason::kDamaged;
    incompatible = incompatible || a.reason == NvmlLoadAttempt::Reason::kIncompatible;
    if (a.result == NvmlLoadAttempt::Result::kAbsent) {
      // One line for all the empty places; each file that was there gets its own.
      absent.push_back(a.candidate.substr(0, a.candidate.find(" (read as ")));
      continue;
    }
    r.evidence.push_back(absl::StrCat(a.candidate, a.note.empty() ? "" : " [" + a.note + "]", ": ",
                                      a.status.ok() ? "ok" : msg));
  }
  if (!absent.empty()) {
    r.evidence.push_back(absl::StrCat("not found: ", absl::StrJoin(absent, ", ")));
  }
  std::string where_talos =
      c.talos ? absl::StrCat(" On ", TalosName(c), " the toolkit extension puts it in ",
                             c.talos->library_dir, ".")
              : "";
  if (glibc) {
    r.summary = "the NVML library needs a newer glibc than gpulet runs with";
    r.fix = absl::StrCat(
        "gpulet then runs NVML in gpulet-nvml-worker, started through the driver's own dynamic "
        "loader and C library (ld-linux and libc.so.6 beside the driver or under "
        "/usr/local/glibc); the attempts above say why that did not work here. Mount the "
        "host's / whole at --host-root (deploy/base does) so both are visible, and never "
        "hostPath-mount a host library directory into gpulet's container.",
        where_talos);
  } else if (damaged) {
    r.summary = "the NVML library file is truncated or damaged";
    r.fix =
        "The file starts like a shared library but is cut short or corrupt (an interrupted "
        "copy or download, a full disk). Reinstall the driver's user-space libraries, or point "
        "--nvml-lib at an intact libnvidia-ml.so.1.";
  } else if (not_library) {
    r.summary = "the NVML library path is not a shared library file";
    r.fix =
        "The path named in the evidence is not an ELF shared library (a linker script or text "
        "file, a FIFO, socket, device or directory, or a symlink loop). Point --nvml-lib at "
        "the driver's libnvidia-ml.so.1, or replace what sits at that path with it.";
  } else if (incompatible) {
    r.summary = "the NVML library is built for another architecture (ELF class or machine)";
    r.fix =
        "Use the libnvidia-ml.so.1 built for this node's architecture (the driver package "
        "for this CPU, not its 32-bit compatibility copy or another machine's library).";
  } else if (crashed) {
    r.summary = "loading NVML crashed (in a probe process): mixed glibc builds";
    r.fix =
        "Never hostPath-mount a driver library directory into a container (on Talos it "
        "also holds Talos' own glibc); let CDI or runtimeClassName: nvidia inject the "
        "individual library files. Remove --nvml-lib/LD_LIBRARY_PATH pointing at a host "
        "library directory.";
  } else if (hung) {
    r.summary = "NVML did not answer in time: the driver is wedged";
    r.fix =
        "Check `dmesg | grep -E 'NVRM|Xid'` for a fallen-off GPU (XID 79) and reset the "
        "GPU or reboot the node.";
  } else if (inv.nvml_code == NVML_ERROR_DRIVER_NOT_LOADED) {
    r.summary = "NVML loads but says the kernel driver is not loaded";
    r.fix = "Load the nvidia kernel modules (see driver.modules).";
  } else if (!any_file) {
    r.summary = "libnvidia-ml.so.1 was not found anywhere gpulet looks";
    r.fix = absl::StrCat(
        c.talos ? "Install the nvidia-container-toolkit-production extension (same driver "
                  "version as the kernel-module extension)."
                : "Install the driver's user-space libraries (the libnvidia-ml/nvidia-utils "
                  "package of the same version as the kernel module).",
        " When gpulet runs in a pod, mount the host at --host-root, or give the pod "
        "runtimeClassName: nvidia or a CDI device so the library is injected.",
        where_talos);
  } else {
    r.summary = "a libnvidia-ml.so.1 exists but could not be used (see the evidence)";
    std::string msg(inv.nvml_status.message());
    r.fix = absl::StrCat(
        msg.substr(0, msg.find("\nPaths tried")),
        ".\nIf the message above names no fix: reinstall the driver's user-space libraries (the "
        "file may be truncated or not a library), or point --nvml-lib at a working "
        "libnvidia-ml.so.1.");
  }
  return r;
}

// "libnvidia-ml.so.570.133.20" -> "570.133.20"; "" for anything else (.so.1, .so).
std::string LibraryVersion(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, "libnvidia-ml.so.")) return "";
  if (std::count(name.begin(), name.end(), '.') < 1) return "";
  for (char c : name) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c)) && c != '.') return "";
  }
  return std::string(name);
}

// The releases where the NVIDIA library directory changed: "1.9, 1.13".
std::string LibraryMoves() {
  std::vector<std::string> moves;
  const talos::Release* prev = nullptr;
  for (const talos::Release& r : talos::KnownReleases()) {
    if (prev != nullptr && prev->layout.value.library_dir != r.layout.value.library_dir) {
      moves.push_back(absl::StrCat(r.major, ".", r.minor));
    }
    prev = &r;
  }
  return absl::StrJoin(moves, ", ");
}

CheckResult CheckUserspace(const Context& c) {
  CheckResult r = CheckResultFor("driver.userspace");
  struct Found {
    std::string dir, version, real_dir;
  };
  std::vector<Found> found;
  std::set<std::string> seen;
  for (const NvmlSearchLocation& loc : NvmlSearchLocations()) {
    if (loc.host_dir.empty()) continue;
    absl::StatusOr<std::string> real = c.host.Resolve(loc.host_dir);
    if (!real.ok() || !c.host.IsDirectory(loc.host_dir) || !seen.insert(*real).second) continue;
    absl::StatusOr<std::vector<std::string>> names = c.host.ListDir(loc.host_dir);
    if (!names.ok()) continue;
    for (const std::string& n : *names) {
      std::string v = LibraryVersion(n);
      if (!v.empty()) found.push_back({loc.host_dir, v, *real});
    }
  }
  for (const Found& f : found) {
    r.evidence.push_back(
        absl::StrCat(c.host.Describe(JoinPath(f.dir, "libnvidia-ml.so." + f.version))));
  }
  const std::string& kernel = c.inv.driver.version;
  if (found.empty()) {
    if (c.inv.nvml_status.ok()) {
      r.verdict = Verdict::kPass;
      r.summary = absl::StrCat("no driver libraries under the host root; NVML works through ",
                               c.inv.system.library_path, " (injected into this container)");
      return r;
    }
    r.verdict = Verdict::kFail;
    r.summary =
        "no NVIDIA user-space libraries (libnvidia-ml.so.<version>) in any known "
        "directory";
    r.evidence.push_back(
        absl::StrCat("looked in the NVML loader's directories under ", c.host.root()));
    r.fix = c.talos ? absl::StrCat(
                          "Install the nvidia-container-toolkit-production extension "
                          "(driver version ",
                          kernel.empty() ? "matching the kernel modules" : kernel, "); on ",
                          TalosName(c), " it puts them in ", c.talos->library_dir, ".")
                    : "Install the NVIDIA driver's user-space libraries of the same version as "
                      "the kernel module.";
    return r;
  }
  r.verdict = Verdict::kPass;
  std::set<std::string> versions;
  for (const Found& f : found) versions.insert(f.version);
  std::vector<std::string> fixes;
  if (c.talos) {
    absl::StatusOr<std::string> expected = c.host.Resolve(c.talos->library_dir);
    bool in_place = false;
    std::vector<std::string> elsewhere;
    for (const Found& f : found) {
      if (expected.ok() && f.real_dir == *expected) {
        in_place = true;
      } else {
        elsewhere.push_back(f.dir);
      }
    }
    if (!in_place) {
      r.verdict = Verdict::kFail;
      // Name the layout the files are in: it tells which Talos release they were built for.
      std::string label = talos::ReleasesWithLibraryDir(elsewhere.front());
      if (label.empty()) label = "another distribution";
      r.summary =
          absl::StrCat("the libraries are in ", absl::StrJoin(elsewhere, ", "), " (the ", label,
                       " layout), but ", TalosName(c), " keeps them in ", c.talos->library_dir);
      r.evidence.push_back(
          absl::StrCat(c.talos->label, " layout: ", c.talos->release->layout.source));
      fixes.push_back(
          absl::StrCat("Use the NVIDIA extensions built for ", TalosName(c),
                       " (the extension versions must match the Talos release). Workloads that "
                       "hostPath-mount a library directory break each time Talos moves it (",
                       LibraryMoves(), "): use CDI instead."));
    } else if (!elsewhere.empty()) {
      r.verdict = Verdict::kWarn;
      r.summary = absl::StrCat("driver libraries also in ", absl::StrJoin(elsewhere, ", "),
                               ", besides ", c.talos->library_dir);
      fixes.push_back(
          "Remove the stray copies (a leftover hostPath or an extension for another Talos "
          "release): a loader that finds them first mixes driver versions.");
    }
  }
  if (!kernel.empty()) {
    for (const std::string& v : versions) {
      if (v == kernel) continue;
      r.verdict = Verdict::kFail;
      std::string mismatch =
          absl::StrCat("user-space libraries ", v, " do not match kernel module ", kernel,
                       ": NVML fails with \"Driver/library version mismatch\"");
      r.summary = r.summary.empty() ? mismatch : absl::StrCat(r.summary, "; ", mismatch);
      fixes.push_back(
          c.talos ? "The kernel-module extension and nvidia-container-toolkit-production must "
                    "carry the same driver version: pick matching versions of both."
                  : "Install user-space libraries and kernel module of one driver version "
                    "(reboot if the module was upgraded but not reloaded).");
      break;
    }
  }
  if (versions.size() > 1 && r.verdict == Verdict::kPass) {
    r.verdict = Verdict::kWarn;
    r.summary = absl::StrCat("several driver versions installed: ", absl::StrJoin(versions, ", "));
    fixes.push_back("Remove the libraries of the driver versions not in use.");
  }
  if (r.verdict == Verdict::kPass) {
    r.summary = absl::StrCat("libnvidia-ml.so.", *versions.begin(), " in ", found.front().dir,
                             kernel.empty() ? "" : ", matching the kernel module",
                             c.talos ? absl::StrCat(", where ", TalosName(c), " keeps it") : "");
  }
  r.fix = absl::StrJoin(fixes, "\n");
  return r;
}

CheckResult CheckTalosSysctl(const Context& c) {
  CheckResult r = CheckResultFor("talos.bpf");
  if (!c.talos) return NotCheckedResult(r.id, "only needed on Talos in legacy runtime mode");
  const talos::Release& row = *c.talos->release;
  if (!c.talos->needs_bpf_jit_harden_1) {
    return NotCheckedResult(r.id, absl::StrCat(TalosName(c),
                                               " runs GPU containers in CDI mode, without "
                                               "nvidia-container-cli"));
  }
  r.evidence.push_back(absl::StrCat(c.talos->label, " needs net.core.bpf_jit_harden: 1 [",
                                    row.needs_bpf_jit_harden_1.source, "]; Talos' default is ",
                                    row.bpf_jit_harden_default.value, " [",
                                    row.bpf_jit_harden_default.source, "]"));
  absl::StatusOr<std::string> value = c.host.ReadAttribute("/proc/sys/net/core/bpf_jit_harden");
  if (!value.ok()) {
    r.verdict = Verdict::kWarn;
    r.summary = "cannot read net.core.bpf_jit_harden";
    r.evidence.push_back(std::string(value.status().message()));
    r.fix = "Check it with `talosctl read /proc/sys/net/core/bpf_jit_harden`; it must be 1.";
    return r;
  }
  r.evidence.push_back(
      absl::StrCat(c.host.Describe("/proc/sys/net/core/bpf_jit_harden"), ": ", *value));
  if (*value != "0" && *value != "1") {
    r.verdict = Verdict::kFail;
    r.summary =
        absl::StrCat("net.core.bpf_jit_harden is ", *value, " (Talos' default is ",
                     row.bpf_jit_harden_default.value,
                     "): nvidia-container-cli "
                     "cannot load its device-filter BPF program, so GPU containers fail to start");
    r.fix =
        "Add to the machine config and apply it:\nmachine:\n  sysctls:\n    "
        "net.core.bpf_jit_harden: 1";
  } else {
    r.verdict = Verdict::kPass;
    r.summary = absl::StrCat("net.core.bpf_jit_harden is ", *value);
  }
  return r;
}

// Where Talos keeps the node's machine configuration: the STATE partition's mount point and
// the file name in it (siderolabs/talos@v1.14.1:pkg/machinery/constants/constants.go,
// StateMountPoint and ConfigFilename).
constexpr char kTalosMachineConfig[] = "/system/state/config.yaml";

// A node upgraded to a release with KubeNodeConfig keeps the v1alpha1 fields an earlier one
// (or gpulet's earlier patch) set; that release refuses gpulet's patch beside them.
CheckResult CheckTalosMachineConfig(const Context& c) {
  CheckResult r = CheckResultFor("talos.config");
  if (!c.talos) return NotCheckedResult(r.id, "only on Talos");
  const talos::Release& row = *c.talos->release;
  const FitPatchCommands fit = FitPatchCommandsFor(absl::StrCat("v", row.major, ".", row.minor));
  const std::string patch_command =
      absl::StrCat(fit.get, "\n", fit.render, " > gpu-node-patch.yaml\n", fit.apply);
  if (!row.KubeNodeDocuments()) {
    return NotCheckedResult(r.id, absl::StrCat(TalosName(c),
                                               " keeps node labels and taints in the v1alpha1 "
                                               "document, where gpulet's patch for it puts them"));
  }
  const std::string where = c.host.Describe(kTalosMachineConfig);
  absl::StatusOr<std::string> text = c.host.ReadFile(kTalosMachineConfig, kMaxMachineConfigBytes);
  if (!text.ok()) {
    r.evidence.push_back(std::string(text.status().message()));
    return NotCheckedResult(
        r, absl::StrCat("the machine configuration is not readable here; before applying "
                        "gpulet's patch to a node upgraded from an earlier Talos, fit it to the "
                        "node's configuration: ",
                        absl::StrReplaceAll(patch_command, {{"\n", "; "}})));
  }
  absl::StatusOr<KubeNodeMigration> plan = PlanKubeNodeMigration(row, *text, where);
  if (!plan.ok()) {
    r.verdict = Verdict::kWarn;
    r.summary = "the machine configuration cannot be read as Talos writes it";
    r.evidence.push_back(std::string(plan.status().message()));
    r.fix = "Check the node's configuration with `talosctl -n <node> get machineconfig`.";
    return r;
  }
  if (plan->moved.empty()) {
    r.verdict = Verdict::kPass;
    r.summary = absl::StrCat(
        where, " sets none of the v1alpha1 fields ", TalosName(c),
        " refuses beside a KubeNodeConfig",
        plan->has_kube_node_config ? " (it has a KubeNodeConfig document already)" : "");
    return r;
  }
  r.verdict = Verdict::kWarn;
  r.summary = absl::StrCat(
      "the node was configured by an earlier Talos: its v1alpha1 document still sets .",
      absl::StrJoin(plan->moved, ", ."), ", and ", TalosName(c),
      " refuses gpulet's patch (a KubeNodeConfig document) beside ",
      plan->moved.size() == 1 ? "it" : "them");
  for (const talos::Conflict& conflict : row.conflicts) {
    if (conflict.kind != "KubeNodeConfig") continue;
    if (std::find(plan->moved.begin(), plan->moved.end(), conflict.field) == plan->moved.end()) {
      continue;
    }
    r.evidence.push_back(absl::StrCat(where, ": .", conflict.field, " is set; ", row.Name(),
                                      " refuses it beside a KubeNodeConfig [", conflict.source,
                                      "]"));
  }
  r.fix = absl::StrCat(
      "Render the patch for this node's configuration: it deletes those fields and carries "
      "their values into the KubeNodeConfig:\n",
      patch_command);
  return r;
}

// --- CDI ------------------------------------------------------------------------------------

CheckResult CheckCdiSpecs(const Context& c) {
  CheckResult r = CheckResultFor("cdi.specs");
  const cdi::SpecCatalog& cat = *c.catalog;
  for (const std::string& e : cat.dir_errors()) r.evidence.push_back(e);
  std::vector<std::string> bad;
  size_t good = 0;
  for (const cdi::SpecFile& f : cat.files()) {
    if (f.status.ok()) {
      ++good;
      r.evidence.push_back(absl::StrCat(f.path, ": cdiVersion ", f.spec.version, ", kind ",
                                        f.spec.kind, ", ", f.spec.devices.size(), " devices"));
    } else {
      bad.push_back(std::string(f.status.message()));
    }
  }
  AddLimited(&r.evidence, bad);
  std::string dirs = absl::StrJoin(cat.dirs(), " and ");
  if (!bad.empty()) {
    r.verdict = Verdict::kFail;
    r.summary = absl::StrCat(bad.size(), " spec file", bad.size() == 1 ? "" : "s", " in ", dirs,
                             bad.size() == 1 ? " does" : " do",
                             " not load; runtimes skip them (and podman refuses to start "
                             "containers that request their devices)");
    r.fix =
        "Regenerate the spec with `gpulet cdi generate` (writes /var/run/cdi/nvidia.yaml), "
        "or remove the broken file.";
    return r;
  }
  if (good == 0) {
    if (c.talos && c.talos->cdi_mode) {
      r.verdict = Verdict::kFail;
      r.summary = absl::StrCat("no CDI spec in ", dirs, ", but ", TalosName(c),
                               " gives containers GPUs only through CDI");
      const talos::Release& row = *c.talos->release;
      r.evidence.push_back(absl::StrCat(c.talos->label, ": ", row.cdi_spec_writer.value, " writes ",
                                        row.cdi_spec_path.value, " [", row.cdi_spec_writer.source,
                                        "]"));
      r.fix = absl::StrCat(
          "The ", row.cdi_spec_writer.value, " service writes ", row.cdi_spec_path.value,
          " at boot: check it with `talosctl service ", row.cdi_spec_writer.value,
          "` and `talosctl logs ", row.cdi_spec_writer.value,
          "` (it crash-loops when NVML reports no usable GPU). Or write the spec with `gpulet "
          "cdi generate`.");
    } else {
      r.verdict = Verdict::kWarn;
      r.summary = absl::StrCat("no CDI spec in ", dirs,
                               ": containers can get GPUs only through the nvidia runtime "
                               "(runtimeClassName: nvidia)");
      r.fix = "Write one with `gpulet cdi generate` (to /var/run/cdi/nvidia.yaml).";
    }
    return r;
  }
  r.verdict = Verdict::kPass;
  r.summary = absl::StrCat(good, " spec file", good == 1 ? "" : "s", " in ", dirs, " load");
  return r;
}

// The names gpulet's own Allocate answers contain must resolve, or every GPU pod fails at
// container creation with "unresolvable CDI devices".
CheckResult CheckGpuletCdi(const Context& c) {
  CheckResult r = CheckResultFor("cdi.gpulet");
  const DoctorInput& in = c.input;
  if (!in.gpulet_uses_cdi) {
    return NotCheckedResult(r.id,
                            "gpulet's plugin.deviceListStrategy names no CDI devices (pass the "
                            "daemon's --config, or set GPULET_CONFIG, to check its answers)");
  }
  if (in.gpulet_cdi_names.empty()) {
    return NotCheckedResult(
        r.id, "NVML identified no GPU, so gpulet advertises none as Healthy (see nvml.load)");
  }
  const cdi::SpecCatalog& cat = *c.catalog;
  std::vector<std::string> unresolved;
  for (const std::string& name : in.gpulet_cdi_names) {
    absl::StatusOr<cdi::ResolvedDevice> d = cat.Resolve(name);
    if (d.ok()) {
      r.evidence.push_back(absl::StrCat(name, " -> ", d->file->path));
    } else {
      unresolved.push_back(std::string(d.status().message()));
    }
  }
  if (unresolved.empty()) {
    r.verdict = Verdict::kPass;
    r.summary = absl::StrCat("all ", in.gpulet_cdi_names.size(),
                             " device names gpulet answers with resolve");
    return r;
  }
  AddLimited(&r.evidence, unresolved);
  r.verdict = Verdict::kFail;
  r.summary = absl::StrCat(unresolved.size(), " of ", in.gpulet_cdi_names.size(),
                           " CDI device names gpulet answers with resolve in no spec in ",
                           absl::StrJoin(cat.dirs(), " and "),
                           ": pods asking for a GPU fail with \"unresolvable CDI devices\"");
  if (in.gpulet_cdi_spec_dir.empty()) {
    r.fix =
        "cdi.specDir is empty, so gpulet serve writes no spec: set it to /var/run/cdi (the "
        "default), or write a spec of that kind yourself (`gpulet cdi generate --kind ...`).";
  } else {
    r.fix = absl::StrCat(
        "gpulet serve writes this spec to ", in.gpulet_cdi_spec_dir,
        " at start: check its log for \"CDI spec\" errors. Its pod must mount the host's "
        "/var/run/cdi writable at <host root>",
        in.gpulet_cdi_spec_dir,
        " (deploy/base does), and that directory must be one the container runtime scans.");
  }
  return r;
}

CheckResult CheckCdiResolve(const Context& c) {
  CheckResult r = CheckResultFor("cdi.resolve");
  const cdi::SpecCatalog& cat = *c.catalog;
  if (cat.DeviceNames().empty() && cat.conflicts().empty()) {
    return NotCheckedResult(r.id, "no loadable CDI spec (see cdi.specs)");
  }
  // Kinds present: nvidia.com/gpu is what nvidia-ctk, Talos and gpulet write and what pods
  // and the device plugin's cdi strategies request; other NVIDIA kinds (the device plugin's
  // own k8s.device-plugin.nvidia.com/gpu) do not answer those requests.
  std::set<std::string> kinds;
  for (const cdi::SpecFile& f : cat.files()) {
    if (f.status.ok()) kinds.insert(f.spec.kind);
  }
  r.verdict = Verdict::kPass;
  if (kinds.count("nvidia.com/gpu") == 0) {
    r.verdict = kinds.empty() ? Verdict::kFail : Verdict::kWarn;
    r.summary = absl::StrCat("no spec of kind nvidia.com/gpu (found: ", absl::StrJoin(kinds, ", "),
                             "): requests for nvidia.com/gpu=0 or =all do not resolve");
    r.fix =
        "If pods request nvidia.com/gpu=... CDI devices (gpulet, nvidia-ctk and Talos name "
        "them so), write the spec with `gpulet cdi generate`.";
    return r;
  }
  std::vector<std::string> resolved;
  for (const char* name : {"nvidia.com/gpu=0", "nvidia.com/gpu=all"}) {
    absl::StatusOr<cdi::ResolvedDevice> d = cat.Resolve(name);
    if (d.ok()) {
      resolved.push_back(absl::StrCat(name, " -> ", d->file->path));
    } else {
      r.verdict = Verdict::kFail;
      r.evidence.push_back(std::string(d.status().message()));
    }
  }
  for (const std::string& line : resolved) r.evidence.push_back(line);
  // Devices named by UUID must be GPUs of this node, or the spec was written elsewhere.
  std::set<std::string> uuids;
  for (const Gpu& g : c.inv.gpus) {
    if (!g.uuid.empty()) uuids.insert(g.uuid);
  }
  std::vector<std::string> stale;
  if (c.inv.nvml_status.ok()) {
    for (const std::string& name : cat.DeviceNames()) {
      size_t eq = name.find('=');
      std::string dev = name.substr(eq + 1);
      if (absl::StartsWith(name, "nvidia.com/gpu=") && absl::StartsWith(dev, "GPU-") &&
          uuids.count(dev) == 0) {
        stale.push_back(name);
      }
    }
  }
  std::string why = r.verdict == Verdict::kFail ? "a pod asking for them will not start" : "";
  if (!stale.empty()) {
    Worsen(&r, Verdict::kWarn);
    std::vector<std::string> lines;
    for (const std::string& s : stale) lines.push_back(absl::StrCat(s, ": no such GPU here"));
    AddLimited(&r.evidence, lines);
  }
  if (r.verdict == Verdict::kPass) {
    r.summary = "both resolve";
  } else if (r.verdict == Verdict::kFail) {
    r.summary = "nvidia.com/gpu=0 or =all does not resolve: a pod asking for it will not start";
    r.fix = "Write a spec for this node's GPUs with `gpulet cdi generate`.";
  } else {
    r.summary = absl::StrCat(stale.size(),
                             " device(s) name GPUs this node does not have: the "
                             "spec is stale");
    r.fix = "Regenerate the spec (`gpulet cdi generate`) after hardware or driver changes.";
  }
  return r;
}

// Every edit list of a spec, with where it is.
std::vector<std::pair<std::string, const cdi::ContainerEdits*>> AllEdits(const cdi::Spec& s) {
  std::vector<std::pair<std::string, const cdi::ContainerEdits*>> out;
  out.emplace_back("containerEdits", &s.edits);
  for (const cdi::Device& d : s.devices) {
    out.emplace_back(absl::StrCat("device ", d.name), &d.edits);
  }
  return out;
}

// "1.13": the first release whose rootfs may carry /usr/bin/nvidia-cdi-hook.
std::string FirstReleaseWithHookLinks() {
  for (const talos::Release& r : talos::KnownReleases()) {
    if (r.hook_links_in_usr_bin.value) return absl::StrCat(r.major, ".", r.minor);
  }
  return "no known release";
}

CheckResult CheckCdiHooks(const Context& c) {
  CheckResult r = CheckResultFor("cdi.hooks");
  const cdi::SpecCatalog& cat = *c.catalog;
  std::map<std::string, std::set<std::string>> missing;  // program -> spec files
  std::set<std::string> present;
  size_t hooks = 0;
  for (const cdi::SpecFile& f : cat.files()) {
    if (!f.status.ok()) continue;
    for (const auto& [where, edits] : AllEdits(f.spec)) {
      for (const cdi::Hook& h : edits->hooks) {
        ++hooks;
        if (c.host.Exists(h.path)) {
          present.insert(h.path);
        } else {
          missing[h.path].insert(f.path);
        }
      }
    }
  }
  if (hooks == 0) return NotCheckedResult(r.id, "no hooks in any loadable CDI spec");
  for (const std::string& p : present) r.evidence.push_back(absl::StrCat(p, ": exists"));
  if (missing.empty()) {
    r.verdict = Verdict::kPass;
    r.summary = absl::StrCat("all ", hooks,
                             " hooks run programs that exist: ", absl::StrJoin(present, ", "));
    return r;
  }
  r.verdict = Verdict::kFail;
  std::vector<std::string> names;
  for (const auto& [path, files] : missing) {
    names.push_back(path);
    r.evidence.push_back(absl::StrCat(path, ": missing on the host (", c.host.Describe(path),
                                      "); used by ", absl::StrJoin(files, ", ")));
  }
  r.summary = absl::StrCat("hooks run ", absl::StrJoin(names, ", "),
                           ", which does not exist on the host: every container requesting "
                           "these devices fails with \"fork/exec ... no such file or "
                           "directory\"");
  std::string real;
  for (const std::string& p : cdi::HookProgramCandidates()) {
    if (c.host.Exists(p)) {
      real = p;
      break;
    }
  }
  bool plugin_spec = false;
  for (const auto& [path, files] : missing) {
    for (const std::string& f : files) plugin_spec |= absl::StrContains(f, "device-plugin");
  }
  r.fix = absl::StrCat(
      "Regenerate the spec with `gpulet cdi generate`, which only emits hooks whose program "
      "exists",
      real.empty() ? " (none exists here: install the NVIDIA container toolkit)"
                   : absl::StrCat(" (here: ", real, ")"),
      ".",
      plugin_spec ? absl::StrCat(" The spec comes from the NVIDIA device plugin: set its "
                                 "environment variable NVIDIA_CDI_HOOK_PATH=",
                                 real.empty() ? "/usr/local/bin/nvidia-cdi-hook" : real, ".")
                  : "",
      c.talos && !c.talos->release->hook_links_in_usr_bin.value
          ? absl::StrCat(" ", TalosName(c),
                         " has nvidia-ctk and nvidia-cdi-hook only in "
                         "/usr/local/bin (the /usr/bin links came with ",
                         FirstReleaseWithHookLinks(), ").")
          : "");
  return r;
}

CheckResult CheckCdiPaths(const Context& c) {
  CheckResult r = CheckResultFor("cdi.paths");
  const cdi::SpecCatalog& cat = *c.catalog;
  std::vector<std::string> missing;
  size_t checked = 0;
  for (const cdi::SpecFile& f : cat.files()) {
    if (!f.status.ok()) continue;
    for (const auto& [where, edits] : AllEdits(f.spec)) {
      for (const cdi::Mount& m : edits->mounts) {
        if (m.host_path.empty() || m.host_path[0] != '/') continue;
        ++checked;
        if (!c.host.Exists(m.host_path)) {
          missing.push_back(absl::StrCat(f.path, " (", where, "): mount ", m.host_path));
        }
      }
      for (const cdi::DeviceNode& d : edits->device_nodes) {
        // With a type and a major number the runtime does not need the host node.
        if (!d.type.empty() && d.major && *d.major != 0) continue;
        const std::string& p = d.host_path.empty() ? d.path : d.host_path;
        ++checked;
        if (!c.host.Exists(p)) {
          missing.push_back(absl::StrCat(f.path, " (", where, "): device node ", p));
        }
      }
    }
  }
  if (checked == 0) return NotCheckedResult(r.id, "no loadable CDI spec (see cdi.specs)");
  if (missing.empty()) {
    r.verdict = Verdict::kPass;
    r.summary = absl::StrCat("all ", checked, " host paths exist");
    return r;
  }
  r.verdict = Verdict::kFail;
  r.summary = absl::StrCat(missing.size(), " of ", checked,
                           " host paths named by CDI specs do not exist: the runtime refuses "
                           "containers that request those devices");
  AddLimited(&r.evidence, missing);
  r.fix = absl::StrCat(
      "Regenerate the spec with `gpulet cdi generate` after driver upgrades (the library file "
      "names carry the driver version)",
      c.talos ? absl::StrCat("; on ", TalosName(c), " the libraries are in ", c.talos->library_dir)
              : "",
      ".");
  return r;
}

// --- containerd -----------------------------------------------------------------------------

CheckResult CheckContainerd(const Context& c) {
  CheckResult r = CheckResultFor("containerd");
  ContainerdFacts f = ReadContainerdConfig(c.host);
  if (f.files.empty()) {
    r.verdict = c.talos ? Verdict::kFail : Verdict::kWarn;
    r.summary = c.talos ? "no /etc/cri/conf.d/*.part: the NVIDIA container toolkit extension "
                          "is not installed"
                        : "no containerd configuration found (/etc/containerd/config.toml)";
    r.evidence.push_back(absl::StrCat("looked at ", c.host.Describe("/etc/containerd/config.toml"),
                                      " and ", c.host.Describe("/etc/cri/conf.d")));
    r.fix = c.talos ? "Add the nvidia-container-toolkit-production system extension."
                    : "If this node runs containerd with its configuration elsewhere, ignore "
                      "this; otherwise run `nvidia-ctk runtime configure --runtime=containerd` "
                      "and restart containerd.";
    return r;
  }
  r.evidence.push_back(absl::StrCat("read ", absl::StrJoin(f.files, ", ")));
  if (!f.nvidia_runtime.empty()) {
    r.evidence.push_back(absl::StrCat("runtime handler nvidia at ", f.nvidia_runtime));
  }
  if (!f.default_runtime_where.empty()) {
    r.evidence.push_back(absl::StrCat("default_runtime_name = ", f.default_runtime, " at ",
                                      f.default_runtime_where));
  }
  if (f.enable_cdi) {
    r.evidence.push_back(absl::StrCat("enable_cdi = ", *f.enable_cdi ? "true" : "false", " at ",
                                      f.enable_cdi_where));
  }
  if (!f.cdi_spec_dirs_where.empty()) {
    r.evidence.push_back(absl::StrCat("cdi_spec_dirs = ", absl::StrJoin(f.cdi_spec_dirs, ", "),
                                      " at ", f.cdi_spec_dirs_where));
  }
  // CDI is on when set so, and otherwise by containerd's default: on for containerd 2
  // (config version 3). On Talos the release table says which containerd the release ships
  // and whether CDI is on (containerd 2 from 1.8, so on everywhere; 1.13 also sets it).
  bool cdi_default = c.talos ? c.talos->release->containerd_cdi_enabled.value : f.v3_config;
  if (c.talos) {
    r.evidence.push_back(absl::StrCat(c.talos->label, ": containerd ",
                                      c.talos->release->containerd_major.value, ", CDI ",
                                      cdi_default ? "enabled" : "disabled", " by default [",
                                      c.talos->release->containerd_cdi_enabled.source, "]"));
  }
  bool cdi = f.enable_cdi.value_or(cdi_default);
  bool cdi_dirs_ok = true;
  if (cdi && !f.cdi_spec_dirs_where.empty()) cdi_dirs_ok = ListsRunCdi(f.cdi_spec_dirs);
  bool runtime = !f.nvidia_runtime.empty();
  std::vector<std::string> fixes;
  r.verdict = Verdict::kPass;
  if (c.talos && !c.talos->cdi_mode && !runtime) {
    r.verdict = Verdict::kFail;
    fixes.push_back(
        "Add the nvidia-container-toolkit-production extension; it registers the "
        "nvidia runtime in /etc/cri/conf.d/10-nvidia-container-runtime.part.");
  }
  if (c.talos && c.talos->cdi_mode && !cdi) {
    r.verdict = Verdict::kFail;
    fixes.push_back(absl::StrCat("Remove the `enable_cdi = false` at ", f.enable_cdi_where, ": ",
                                 TalosName(c), " gives containers GPUs through CDI."));
  }
  if (!c.talos && !runtime && !cdi) {
    r.verdict = Verdict::kFail;
    fixes.push_back(
        "Enable CDI (`enable_cdi = true` and `cdi_spec_dirs = [\"/etc/cdi\", \"/var/run/cdi\"]` "
        "under [plugins.\"io.containerd.grpc.v1.cri\"] on containerd 1.7) or register the "
        "nvidia runtime (`nvidia-ctk runtime configure --runtime=containerd`), then restart "
        "containerd.");
  }
  if (cdi && !cdi_dirs_ok) {
    Worsen(&r, Verdict::kWarn);
    fixes.push_back(absl::StrCat("cdi_spec_dirs at ", f.cdi_spec_dirs_where,
                                 " leaves out /var/run/cdi, where gpulet and Talos write specs: "
                                 "add it."));
  }
  if (!cdi && c.catalog && !c.catalog->DeviceNames().empty() && r.verdict != Verdict::kFail) {
    Worsen(&r, Verdict::kWarn);
    fixes.push_back(
        c.talos ? "CDI specs exist but containerd's CDI support is off: enable it with a "
                  "machine.files entry /etc/cri/conf.d/20-customization.part containing "
                  "[plugins.\"io.containerd.cri.v1.runtime\"] enable_cdi = true."
                : "CDI specs exist but containerd's CDI support is off: set enable_cdi = true "
                  "and restart containerd.");
  }
  r.summary = absl::StrCat(runtime ? "nvidia runtime handler registered"
                                   : "no nvidia runtime "
                                     "handler",
                           "; CDI ", cdi ? "enabled" : "disabled",
                           f.enable_cdi ? "" : (cdi ? " (default)" : " (not enabled)"));
  r.fix = absl::StrJoin(fixes, "\n");
  return r;
}

// --- kubelet --------------------------------------------------------------------------------

CheckResult CheckKubelet(const Context& c) {
  CheckResult r = CheckResultFor("kubelet");
  const char* kDir = "/var/lib/kubelet/device-plugins";
  const char* kSock = "/var/lib/kubelet/device-plugins/kubelet.sock";
  const char* kPodResources = "/var/lib/kubelet/pod-resources/kubelet.sock";
  bool dir = c.host.IsDirectory(kDir);
  bool sock = c.host.Exists(kSock);
  bool pr = c.host.Exists(kPodResources);
  r.evidence.push_back(absl::StrCat(c.host.Describe(kSock), sock ? ": present" : ": missing"));
  r.evidence.push_back(
      absl::StrCat(c.host.Describe(kPodResources), pr ? ": present" : ": missing"));
  if (dir && sock && pr) {
    r.verdict = Verdict::kPass;
    r.summary = "both present";
    return r;
  }
  r.verdict = Verdict::kWarn;
  if (!dir) {
    r.summary = absl::StrCat(kDir,
                             " is missing: the kubelet is not running on this node or "
                             "uses another --root-dir");
    r.fix =
        "Run the doctor on a Kubernetes node (or with --host-root at the node's root); if "
        "the kubelet uses another --root-dir, mount that directory at "
        "/var/lib/kubelet in gpulet's pod.";
  } else if (!sock) {
    r.summary =
        "the device-plugin directory exists but kubelet.sock does not: the kubelet is "
        "not running";
    r.fix =
        "Start the kubelet (Talos: `talosctl service kubelet`); device plugins register "
        "through this socket.";
  } else {
    r.summary =
        "the pod-resources socket is missing: GPU metrics cannot name the pods using "
        "each GPU";
    r.fix =
        "Use a kubelet with the PodResources API (Kubernetes 1.20+, on by default) and "
        "mount /var/lib/kubelet/pod-resources into gpulet's pod.";
  }
  return r;
}

// --- the kernel log ---------------------------------------------------------------------------

// /dev/kmsg hands out the kernel's ring buffer from its oldest record, so one pass over it is
// the log since boot (or since the oldest record not yet overwritten). Enough for a full
// 16 MiB buffer; a node logging faster than the doctor reads stops here.
constexpr size_t kMaxKernelRecords = 250000;

constexpr char kTalosKmsgHint[] =
    "On Talos, where a pod usually cannot read the host's kernel log, run `talosctl -n <node> "
    "dmesg | gpulet explain -` instead.";

std::string SecondsAfterBoot(uint64_t us) {
  return absl::StrCat(us / 1000000, ".", (us / 100000) % 10, " s after boot");
}

std::string BucketLabel(XidBucket bucket) {
  return bucket == XidBucket::kNotPublished ? "(none published)"
                                            : std::string(XidBucketName(bucket));
}

// One XID code on one GPU, with how often it came.
struct KernelXid {
  XidEvent last;
  int count = 0;
  uint64_t last_us = 0;
};

// One explained NVRM message, with how often it came.
struct KernelNvrm {
  Explanation explanation;
  std::string line;
  int count = 0;
};

// An NVRM line the XID scanner already covers (XID, UUID mapping, fallen off the bus).
bool CoveredByXidScanner(absl::string_view line) {
  return ParseXidLine(line) || ParseGpuUuidLine(line) || ParseFallenOffBusLine(line) ||
         absl::StrContains(line, "The NVIDIA GPU ") || absl::StrContains(line, "(PCI ID:") ||
         absl::StrContains(line, "fallen off the bus");
}

CheckResult CheckKernelLog(const Context& c) {
  const char* kId = "kernel.log";
  DevKmsgOptions options;
  options.host_root = c.host.root();
  options.path = "/dev/kmsg";
  DevKmsgSource source(options);
  absl::Status open = source.Open();
  if (!open.ok()) {
    std::string why(open.message());
    if (!absl::EndsWith(why, ".")) why += ".";
    return NotCheckedResult(kId, absl::StrCat(why, " ", kTalosKmsgHint));
  }
  CheckResult r = CheckResultFor(kId);
  r.verdict = Verdict::kPass;
  KernelLogScanner scanner;
  std::vector<std::pair<std::string, int>> xid_order;  // (bus id, XID) in first-seen order
  std::map<std::pair<std::string, int>, KernelXid> xids;
  std::map<std::string, std::string> uuid_by_bus;
  std::vector<std::string> nvrm_order;  // explanation ids in first-seen order
  std::map<std::string, KernelNvrm> nvrm;
  std::vector<std::string> unexplained;  // NVRM lines at error level that nothing explains
  size_t records = 0;
  std::optional<KmsgRecord> first;
  while (records < kMaxKernelRecords) {
    absl::StatusOr<std::optional<KmsgRecord>> next = source.ReadNext();
    if (!next.ok()) {
      Worsen(&r, Verdict::kWarn);
      r.evidence.push_back(
          absl::StrCat("reading stopped after ", records, " records: ", next.status().message()));
      break;
    }
    if (!next->has_value()) break;
    const KmsgRecord& rec = **next;
    ++records;
    if (!first) first = rec;
    if (!rec.from_kernel()) continue;
    std::vector<KernelLogFinding> found = scanner.Scan(rec.text);
    for (const KernelLogFinding& f : found) {
      if (const auto* m = std::get_if<GpuUuidMapping>(&f)) {
        uuid_by_bus[m->bus_id] = m->uuid;
        continue;
      }
      const XidEvent& e = std::get<XidEvent>(f);
      std::pair<std::string, int> key{e.bus_id, e.xid};
      KernelXid& k = xids[key];
      if (k.count == 0) xid_order.push_back(key);
      ++k.count;
      k.last = e;
      k.last_us = rec.timestamp_us;
    }
    for (absl::string_view line : absl::StrSplit(rec.text, '\n')) {
      size_t at = line.find("NVRM:");
      if (at == absl::string_view::npos || CoveredByXidScanner(line)) continue;
      bool explained = false;
      for (Explanation& x : Explain(line)) {
        if (absl::StartsWith(x.id, "xid")) continue;
        explained = true;
        // An informational line (the module's load banner) is known, and no error.
        if (x.severity == ExplainSeverityName(ExplainSeverity::kInfo)) continue;
        KernelNvrm& n = nvrm[x.id];
        if (n.count == 0) {
          nvrm_order.push_back(x.id);
          n.explanation = std::move(x);
          n.line = std::string(line.substr(at));
        }
        ++n.count;
      }
      if (!explained && rec.level <= 3) unexplained.push_back(std::string(line.substr(at)));
    }
  }
  r.evidence.push_back(absl::StrCat(source.Describe(), ": ", records, " records read"));
  if (first && first->seq > 0) {
    r.evidence.push_back(
        absl::StrCat("the kernel's buffer starts at record ", first->seq, " (",
                     SecondsAfterBoot(first->timestamp_us),
                     "): older records were overwritten, so earlier XIDs may be missing"));
  }
  std::vector<std::string> fixes;
  std::string worst;  // the summary's headline
  Verdict worst_verdict = Verdict::kPass;
  for (const auto& key : xid_order) {
    const KernelXid& k = xids[key];
    XidAssessment a = AssessXid(k.last);
    std::string gpu = key.first;
    auto uuid = uuid_by_bus.find(key.first);
    if (uuid != uuid_by_bus.end()) absl::StrAppend(&gpu, " (", uuid->second, ")");
    std::string what = absl::StrCat("XID ", key.second, " (", a.info.mnemonic, ") on ", gpu);
    std::string evidence = absl::StrCat(
        what, ", ", k.count, k.count == 1 ? " time" : " times", ", last at ",
        SecondsAfterBoot(k.last_us), ": ", a.info.meaning, "; NVIDIA: immediate ",
        BucketLabel(a.info.immediate), ", investigatory ", BucketLabel(a.info.investigatory));
    if (!a.adjustment.empty()) absl::StrAppend(&evidence, "; ", a.adjustment);
    if (k.last.nvlink && k.last.nvlink->intrinfo) {
      if (std::optional<Nvlink5Decode> d = DecodeNvlink5(key.second, *k.last.nvlink->intrinfo)) {
        absl::StrAppend(&evidence, "; NVLink5 unit ", d->unit, " (", d->format, ")");
        if (d->reason) absl::StrAppend(&evidence, ", link-down reason ", *d->reason);
        absl::StrAppend(&evidence, ": immediate ", XidBucketName(d->immediate), ", investigatory ",
                        XidBucketName(d->investigatory));
      }
    }
    r.evidence.push_back(std::move(evidence));
    Verdict v = Verdict::kPass;
    if (a.severity == XidSeverity::kFatal) {
      v = Verdict::kFail;
    } else if (a.severity == XidSeverity::kWarning) {
      v = Verdict::kWarn;
    }
    if (v == Verdict::kPass) continue;  // the application's fault: listed, nothing to fix
    fixes.push_back(
        absl::StrCat(what, ": ", GpuActionDescription(a.action), " (", GpuActionName(a.action),
                     "; if it comes back after that: ", GpuActionName(a.if_repeated), ")"));
    if (worst.empty() || (v == Verdict::kFail && worst_verdict != Verdict::kFail)) {
      worst = absl::StrCat(what, " asks to ", GpuActionName(a.action));
      worst_verdict = v;
    }
    Worsen(&r, v);
  }
  for (const std::string& id : nvrm_order) {
    const KernelNvrm& n = nvrm[id];
    Worsen(&r, Verdict::kWarn);
    r.evidence.push_back(absl::StrCat(n.line, " (", n.count, n.count == 1 ? " time" : " times",
                                      "; explain: ", id, "): ", n.explanation.cause));
    fixes.push_back(absl::StrCat(n.explanation.title, ": ", n.explanation.fix));
    if (worst.empty()) worst = n.explanation.title;
  }
  if (!unexplained.empty()) {
    Worsen(&r, Verdict::kWarn);
    std::vector<std::string> lines;
    for (const std::string& l : unexplained) {
      lines.push_back(absl::StrCat("NVRM error gpulet has no explanation for: ", l));
    }
    AddLimited(&r.evidence, lines);
    fixes.push_back(
        "For the NVRM errors without an explanation: collect `nvidia-bug-report.sh` output and "
        "the kernel log, and report them to NVIDIA or the hardware vendor.");
    if (worst.empty()) worst = "NVRM errors gpulet has no explanation for";
  }
  if (r.verdict == Verdict::kPass) {
    r.summary = xid_order.empty()
                    ? absl::StrCat("no XID, NVRM error or GPU fallen off the bus in the ", records,
                                   " records since boot")
                    : "only XIDs that are the application's fault since boot";
    return r;
  }
  r.summary = absl::StrCat(xid_order.size(), " kind(s) of XID and ", nvrm_order.size(),
                           " known NVRM error(s) since boot; the worst: ", worst);
  r.fix = absl::StrJoin(fixes, "\n");
  return r;
}

// --- health hook point ----------------------------------------------------------------------

std::vector<CheckResult> CheckHealth(const Context& c, const HealthSource* health) {
  const char* kId = "gpu.health";
  if (health == nullptr) {
    return {NotCheckedResult(kId,
                             "GPU health is watched by gpulet serve; pass --daemon-address (its "
                             "metrics.address) to include what it sees")};
  }
  absl::StatusOr<std::vector<GpuHealth>> states = health->GpuHealthStates();
  if (!states.ok()) return {NotCheckedResult(kId, states.status().message())};
  CheckResult r = CheckResultFor(kId);
  r.verdict = Verdict::kPass;
  std::vector<std::string> fixes;
  for (const GpuHealth& h : *states) {
    if (h.healthy && h.degraded) {
      Worsen(&r, Verdict::kWarn);
      r.evidence.push_back(absl::StrCat(h.gpu, ": degraded (still scheduled): ", h.reason));
      if (!h.fix.empty()) fixes.push_back(absl::StrCat(h.gpu, ": ", h.fix));
      continue;
    }
    if (h.healthy) {
      r.evidence.push_back(absl::StrCat(h.gpu, ": healthy"));
      continue;
    }
    r.verdict = Verdict::kFail;
    r.evidence.push_back(absl::StrCat(h.gpu, ": ", h.reason));
    if (!h.fix.empty()) fixes.push_back(absl::StrCat(h.gpu, ": ", h.fix));
  }
  (void)c;
  r.summary = r.verdict == Verdict::kPass   ? "every GPU is healthy"
              : r.verdict == Verdict::kWarn ? "a GPU is degraded but still scheduled"
                                            : "a GPU is in a bad state";
  r.fix = absl::StrJoin(fixes, "\n");
  return {r};
}

}  // namespace

std::vector<GpuHealth> HealthFromStatus(const StatusReport& report) {
  std::vector<GpuHealth> out;
  for (const GpuStatus& g : report.gpus) {
    GpuHealth h;
    h.gpu = g.index
                ? absl::StrCat("GPU ", *g.index, " (", g.uuid.empty() ? g.pci_bus_id : g.uuid, ")")
                : (g.uuid.empty() ? g.pci_bus_id : g.uuid);
    h.healthy = g.health != HealthState::kUnhealthy;
    h.degraded = g.health == HealthState::kDegraded;
    h.reason = g.reason.value_or(h.healthy ? "" : "unhealthy (no reason given)");
    h.fix = g.action.value_or("");
    out.push_back(std::move(h));
  }
  return out;
}

CheckResult CheckResultFor(absl::string_view id) {
  CheckResult r;
  r.id = std::string(id);
  r.title = std::string(doctor::CheckTitle(id));
  return r;
}

CheckResult NotCheckedResult(CheckResult r, absl::string_view why) {
  r.verdict = Verdict::kNotChecked;
  r.summary = absl::StrCat("not checked: ", why);
  return r;
}

CheckResult NotCheckedResult(absl::string_view id, absl::string_view why) {
  return NotCheckedResult(CheckResultFor(id), why);
}

absl::string_view VerdictName(Verdict verdict) {
  switch (verdict) {
    case Verdict::kPass:
      return "pass";
    case Verdict::kWarn:
      return "warn";
    case Verdict::kFail:
      return "fail";
    case Verdict::kNotChecked:
      break;
  }
  return "not checked";
}

TalosExpectations ExpectationsFor(int major, int minor) {
  TalosExpectations t;
  const talos::Release* row = nullptr;
  if (major == 0) {
    row = &talos::NewestRelease();
    t.warning = absl::StrCat("the Talos version is unknown; assuming ", row->Name());
  } else if (absl::StatusOr<talos::Match> m = talos::FindRelease(major, minor); m.ok()) {
    row = m->release;
    t.warning = m->warning;
  } else {
    t.warning = std::string(m.status().message());
    t.label = absl::StrCat("Talos ", major, ".", minor);
    return t;
  }
  t.release = row;
  t.label = row->Name();
  t.library_dir = row->layout.value.library_dir;
  t.cdi_mode = row->runtime_mode.value == talos::RuntimeMode::kCdi;
  t.needs_bpf_jit_harden_1 = row->needs_bpf_jit_harden_1.value;
  t.kernel_module_config_docs = row->KernelModuleDocuments();
  return t;
}

int Report::ExitCode() const {
  int code = 0;
  for (const CheckResult& c : checks) {
    if (c.verdict == Verdict::kFail) return 3;  // kExitCheckFailed: distinct from usage (2)
    if (c.verdict == Verdict::kWarn) code = 1;
  }
  return code;
}

const CheckResult* Report::Find(absl::string_view id) const {
  for (const CheckResult& c : checks) {
    if (c.id == id) return &c;
  }
  return nullptr;
}

Report RunDoctor(const DoctorInput& input) {
  Context c{*input.host, *input.inventory, input, {}, std::nullopt, "", {}, std::nullopt};
  c.os = ReadOsRelease(c.host);
  if (c.os.talos) {
    TalosExpectations t = ExpectationsFor(c.os.talos_major, c.os.talos_minor);
    if (t.release != nullptr) {
      c.talos = std::move(t);
    } else {
      c.talos_unsupported = t.warning;
    }
  }
  for (const Gpu& g : c.inv.gpus) {
    if (g.on_pci) c.pci_gpus.push_back(&g);
  }

  Report report;
  report.host_root = c.host.root();
  report.os = c.os;
  std::vector<CheckResult>& out = report.checks;
  out.push_back(CheckOs(c));
  out.push_back(CheckGpuPresent(c));
  bool have_gpu = !c.pci_gpus.empty();
  if (!c.inv.pci_status.ok()) {
    // No PCI view: fall back on NVML's, so a pod without /sys still gets the other checks.
    for (const Gpu& g : c.inv.gpus) have_gpu |= g.in_nvml;
  }

  using CheckFn = CheckResult (*)(const Context&);
  struct Step {
    const char* id;
    CheckFn fn;
    bool needs_catalog;
  };
  static const Step kSteps[] = {
      {"gpu.driver", &CheckDriverBound, false}, {"driver.flavor", &CheckFlavor, false},
      {"driver.modules", &CheckModules, false}, {"dev.nodes", &CheckDevNodes, false},
      {"nvml.load", &CheckNvml, false},         {"driver.userspace", &CheckUserspace, false},
      {"talos.bpf", &CheckTalosSysctl, false},  {"talos.config", &CheckTalosMachineConfig, false},
      {"cdi.specs", &CheckCdiSpecs, true},      {"cdi.gpulet", &CheckGpuletCdi, true},
      {"cdi.resolve", &CheckCdiResolve, true},  {"cdi.hooks", &CheckCdiHooks, true},
      {"cdi.paths", &CheckCdiPaths, true},      {"containerd", &CheckContainerd, false},
      {"kubelet", &CheckKubelet, false},
  };
  if (have_gpu) {
    c.catalog.emplace(cdi::SpecCatalog::Load(
        c.host, input.cdi_spec_dirs.empty() ? cdi::DefaultSpecDirs() : input.cdi_spec_dirs));
  }
  for (const Step& s : kSteps) {
    if (!have_gpu) {
      out.push_back(NotCheckedResult(s.id, "no NVIDIA GPU on this node"));
    } else {
      out.push_back(s.fn(c));
    }
  }
  // What surrounds the driver (doctor/stack_checks.h).
  using StackFn = CheckResult (*)(const StackInput&);
  static const struct {
    const char* id;
    StackFn fn;
  } kStackSteps[] = {
      {"driver.uvm", &CheckUvm},
      {"mig.mode", &CheckMig},
      {"fabricmanager", &CheckFabricManager},
      {"cgroup.devices", &CheckCgroupDevices},
      {"crio", &CheckCrio},
      {"dcgm.hostengine", &CheckDcgmHostEngine},
      {"vram.enforcement", &CheckVram},
  };
  StackInput stack{c.host, c.inv, input, c.os.talos,
                   input.gpulet_uses_cdi || (c.talos && c.talos->cdi_mode)};
  for (const auto& s : kStackSteps) {
    out.push_back(have_gpu ? s.fn(stack) : NotCheckedResult(s.id, "no NVIDIA GPU on this node"));
  }
  if (!have_gpu) {
    out.push_back(NotCheckedResult("gpu.health", "no NVIDIA GPU on this node"));
  } else {
    for (CheckResult& r : CheckHealth(c, input.health)) out.push_back(std::move(r));
  }
  // Also without a GPU on the bus: a GPU that fell off it may be what the log says.
  out.push_back(CheckKernelLog(c));
  return report;
}

std::string FormatReport(const Report& report, bool verbose) {
  std::string out;
  std::string os = report.os.pretty_name.empty()
                       ? (report.os.readable ? report.os.id : "unknown OS")
                       : report.os.pretty_name;
  absl::StrAppend(&out, "gpulet doctor: host root ", report.host_root, ", ", os, "\n\n");
  std::map<Verdict, int> counts;
  for (const CheckResult& c : report.checks) {
    ++counts[c.verdict];
    absl::string_view tag = c.verdict == Verdict::kPass   ? "PASS"
                            : c.verdict == Verdict::kWarn ? "WARN"
                            : c.verdict == Verdict::kFail ? "FAIL"
                                                          : "----";
    absl::StrAppend(&out, tag, "  ", c.title, ": ", c.summary, "\n");
    // Evidence is printed for problems, and for everything with -v.
    bool detail = verbose || c.verdict == Verdict::kWarn || c.verdict == Verdict::kFail;
    if (detail) {
      for (const std::string& e : c.evidence) {
        absl::StrAppend(
            &out, "      evidence: ", absl::StrReplaceAll(e, {{"\n", "\n                "}}), "\n");
      }
    }
    if (!c.fix.empty() && (c.verdict == Verdict::kWarn || c.verdict == Verdict::kFail)) {
      absl::StrAppend(&out, "      fix: ", absl::StrReplaceAll(c.fix, {{"\n", "\n           "}}),
                      "\n");
    }
  }
  absl::StrAppend(&out, "\n", counts[Verdict::kFail], " failed, ", counts[Verdict::kWarn],
                  " warnings, ", counts[Verdict::kPass], " passed, ", counts[Verdict::kNotChecked],
                  " not checked.\n");
  return out;
}

void to_json(nlohmann::json& out, const Report& report) {
  nlohmann::json checks = nlohmann::json::array();
  std::map<std::string, int> counts = {{"pass", 0}, {"warn", 0}, {"fail", 0}, {"not_checked", 0}};
  for (const CheckResult& c : report.checks) {
    std::string verdict(VerdictName(c.verdict));
    ++counts[c.verdict == Verdict::kNotChecked ? "not_checked" : verdict];
    nlohmann::json j = {{"id", c.id},
                        {"title", c.title},
                        {"verdict", verdict},
                        {"summary", c.summary},
                        {"evidence", c.evidence}};
    if (!c.fix.empty()) j["fix"] = c.fix;
    checks.push_back(std::move(j));
  }
  nlohmann::json os = {{"id", report.os.id},
                       {"version_id", report.os.version_id},
                       {"pretty_name", report.os.pretty_name},
                       {"talos", report.os.talos}};
  out = {{"host_root", report.host_root},
         {"os", std::move(os)},
         {"checks", std::move(checks)},
         {"summary", counts},
         {"exit_code", report.ExitCode()}};
}

}  // namespace gpulet::doctor
