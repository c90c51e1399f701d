// The doctor's checks of the OS, the GPUs on the PCI bus, the kernel driver, NVML and the
// user-space libraries, and Talos' settings (checks.h).
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
#include "doctor/checks.h"
#include "doctor/explain.h"
#include "doctor/stack_checks.h"
#include "gpu/nvml_api.h"
#include "health/kmsg_source.h"
#include "health/xid.h"
#include "health/xid_catalog.h"
#include "nlohmann/json.hpp"
#include "nvml/nvml_loader.h"

namespace gpulet::doctor {

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
  const node::Release& row = *t.release;
  r.summary = absl::StrCat(TalosName(c), " (", t.label, "): NVIDIA libraries expected in ",
                           t.library_dir, "; containers get GPUs through ",
                           t.cdi_mode ? absl::StrCat("CDI (", row.cdi_spec_writer.value, " writes ",
                                                     row.cdi_spec_path.value, ")")
                                      : std::string("the nvidia runtime in legacy mode or CDI"));
  // The facts the other checks use, each with where it comes from.
  const node::LibraryLayout& l = row.layout.value;
  r.evidence.push_back(absl::StrCat("libraries in ", l.library_dir, ", glibc ", l.libc,
                                    ", ld.so.cache ", l.ld_so_cache, " [", row.layout.source, "]"));
  r.evidence.push_back(absl::StrCat("runtime mode ", node::RuntimeModeName(row.runtime_mode.value),
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
  for (const gpu::Gpu* g : c.pci_gpus) r.evidence.push_back(GpuLabel(*g));
  return r;
}

CheckResult CheckDriverBound(const Context& c) {
  CheckResult r = CheckResultFor("gpu.driver");
  r.verdict = Verdict::kPass;
  std::vector<std::string> fixes;
  for (const gpu::Gpu* g : c.pci_gpus) {
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
  for (const gpu::Gpu* g : c.pci_gpus) bound += g->kernel_driver == "nvidia";
  r.summary = r.verdict == Verdict::kPass ? "every GPU is bound to the nvidia driver"
                                          : absl::StrCat(bound, " of ", c.pci_gpus.size(),
                                                         " GPUs bound to the nvidia driver");
  std::set<std::string> unique(fixes.begin(), fixes.end());
  r.fix = absl::StrJoin(unique, "\n");
  return r;
}

CheckResult CheckFlavor(const Context& c) {
  CheckResult r = CheckResultFor("driver.flavor");
  const node::DriverInfo& d = c.inv.driver;
  if (d.flavor == node::DriverFlavor::kUnknown) {
    std::vector<std::string> needs;
    for (const gpu::Gpu* g : c.pci_gpus) {
      if (g->module_flavor == node::ModuleFlavor::kEither) continue;
      needs.push_back(absl::StrCat(
          GpuLabel(*g), " needs ", node::ModuleFlavorName(g->module_flavor),
          c.talos
              ? absl::StrCat(" (Talos extension ", node::TalosExtensionFor(g->module_flavor), ")")
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
  node::ModuleFlavor wanted = node::ModuleFlavor::kEither;
  for (const gpu::Gpu* g : c.pci_gpus) {
    if (node::DriverFlavorSupports(d.flavor, g->module_flavor)) continue;
    bad.push_back(GpuLabel(*g));
    wanted = g->module_flavor;
  }
  if (bad.empty()) {
    r.summary = absl::StrCat("the ", node::DriverFlavorName(d.flavor),
                             " kernel modules are loaded, which every GPU here supports");
    return r;
  }
  r.verdict = Verdict::kFail;
  bool need_open = wanted == node::ModuleFlavor::kOpenRequired;
  r.summary = absl::StrCat(absl::StrJoin(bad, ", "), bad.size() == 1 ? " needs" : " need", " the ",
                           need_open ? "open" : "proprietary", " kernel modules, but the ",
                           node::DriverFlavorName(d.flavor), " ones are loaded");
  if (c.talos) {
    r.fix = absl::StrCat(
        "Replace the system extension ",
        need_open ? "nonfree-kmod-nvidia-production" : "nvidia-open-gpu-kernel-modules-production",
        " with ", node::TalosExtensionFor(wanted),
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
  const node::DriverInfo& d = c.inv.driver;
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
      node::ModuleFlavor want = node::ModuleFlavor::kEither;
      for (const gpu::Gpu* g : c.pci_gpus) {
        if (g->module_flavor != node::ModuleFlavor::kEither) want = g->module_flavor;
      }
      r.verdict = Verdict::kFail;
      r.summary =
          "the nvidia modules are not loaded, and no NVIDIA kernel-module extension "
          "is installed";
      r.fix = absl::StrCat("Add the system extensions ", node::TalosExtensionFor(want),
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
  const node::DriverInfo& d = c.inv.driver;
  std::vector<std::string> missing, present;
  auto want = [&](bool exists, const std::string& path) {
    (exists ? present : missing).push_back(path);
  };
  want(d.dev_nvidiactl, "/dev/nvidiactl");
  want(d.dev_nvidia_uvm, "/dev/nvidia-uvm");
  std::set<int> minors(d.dev_gpu_minors.begin(), d.dev_gpu_minors.end());
  size_t known_minors = 0;
  for (const gpu::Gpu& g : c.inv.gpus) {
    if (!g.minor) continue;
    ++known_minors;
    want(minors.count(static_cast<int>(*g.minor)) > 0, g.DeviceNode());
  }
  if (known_minors == 0) {
    // Without NVML the minor numbers are unknown; count nodes against bound GPUs instead.
    size_t bound = 0;
    for (const gpu::Gpu* g : c.pci_gpus) bound += g->kernel_driver == "nvidia";
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
  const gpu::Inventory& inv = c.inv;
  if (inv.nvml_status.ok()) {
    r.verdict = Verdict::kPass;
    size_t n = 0;
    for (const gpu::Gpu& g : inv.gpus) n += g.in_nvml;
    r.summary = absl::StrCat("NVML loaded from ", inv.system.library_path, ": driver ",
                             inv.system.driver_version, ", CUDA ", inv.system.CudaVersionString(),
                             ", ", n, " GPU", n == 1 ? "" : "s");
    for (const gpu::Gpu& g : inv.gpus) {
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
  for (const gpu::NvmlLoadAttempt& a : inv.nvml_attempts) {
    std::string msg(a.status.message());
    if (a.result != gpu::NvmlLoadAttempt::Result::kAbsent) any_file = true;
    glibc = glibc || a.reason == gpu::NvmlLoadAttempt::Reason::kNeedsNewerGlibc;
    crashed = crashed || a.reason == gpu::NvmlLoadAttempt::Reason::kCrashed;
    hung = hung || a.reason == gpu::NvmlLoadAttempt::Reason::kHung;
    not_library = not_library || a.reason == gpu::NvmlLoadAttempt::Reason::kNotALibrary;
    damaged = damaged || a.reason == gpu::NvmlLoadAttempt::Reason::kDamaged;
    incompatible = incompatible || a.reason == gpu::NvmlLoadAttempt::Reason::kIncompatible;
    if (a.result == gpu::NvmlLoadAttempt::Result::kAbsent) {
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

namespace {

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
  const node::Release* prev = nullptr;
  for (const node::Release& r : node::KnownReleases()) {
    if (prev != nullptr && prev->layout.value.library_dir != r.layout.value.library_dir) {
      moves.push_back(absl::StrCat(r.major, ".", r.minor));
    }
    prev = &r;
  }
  return absl::StrJoin(moves, ", ");
}

}  // namespace

CheckResult CheckUserspace(const Context& c) {
  CheckResult r = CheckResultFor("driver.userspace");
  struct Found {
    std::string dir, version, real_dir;
  };
  std::vector<Found> found;
  std::set<std::string> seen;
  for (const nvml::NvmlSearchLocation& loc : nvml::NvmlSearchLocations()) {
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
      std::string label = node::ReleasesWithLibraryDir(elsewhere.front());
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
  const node::Release& row = *c.talos->release;
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

namespace {

// Where Talos keeps the node's machine configuration: the STATE partition's mount point and
// the file name in it (siderolabs/talos@v1.14.1:pkg/machinery/constants/constants.go,
// StateMountPoint and ConfigFilename).
constexpr char kTalosMachineConfig[] = "/system/state/config.yaml";

}  // namespace

// A node upgraded to a release with KubeNodeConfig keeps the v1alpha1 fields an earlier one
// (or gpulet's earlier patch) set; that release refuses gpulet's patch beside them.
CheckResult CheckTalosMachineConfig(const Context& c) {
  CheckResult r = CheckResultFor("talos.config");
  if (!c.talos) return NotCheckedResult(r.id, "only on Talos");
  const node::Release& row = *c.talos->release;
  const deploy::FitPatchCommands fit =
      deploy::FitPatchCommandsFor(absl::StrCat("v", row.major, ".", row.minor));
  const std::string patch_command =
      absl::StrCat(fit.get, "\n", fit.render, " > gpu-node-patch.yaml\n", fit.apply);
  if (!row.KubeNodeDocuments()) {
    return NotCheckedResult(r.id, absl::StrCat(TalosName(c),
                                               " keeps node labels and taints in the v1alpha1 "
                                               "document, where gpulet's patch for it puts them"));
  }
  const std::string where = c.host.Describe(kTalosMachineConfig);
  absl::StatusOr<std::string> text =
      c.host.ReadFile(kTalosMachineConfig, deploy::kMaxMachineConfigBytes);
  if (!text.ok()) {
    r.evidence.push_back(std::string(text.status().message()));
    return NotCheckedResult(
        r, absl::StrCat("the machine configuration is not readable here; before applying "
                        "gpulet's patch to a node upgraded from an earlier Talos, fit it to the "
                        "node's configuration: ",
                        absl::StrReplaceAll(patch_command, {{"\n", "; "}})));
  }
  absl::StatusOr<deploy::KubeNodeMigration> plan = deploy::PlanKubeNodeMigration(row, *text, where);
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
  for (const node::Conflict& conflict : row.conflicts) {
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

}  // namespace gpulet::doctor
