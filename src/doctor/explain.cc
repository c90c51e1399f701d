#include "doctor/explain.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <variant>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gpu/nvml_errors.h"
#include "health/kmsg.h"
#include "health/xid.h"
#include "health/xid_catalog.h"

namespace gpulet {
namespace {

using P = absl::string_view;

// --- the table of known messages ----------------------------------------------------------
// Patterns are matched against the text with whitespace runs collapsed to one space.

constexpr P kNvmlMissing[] = {"could not load NVML library",
                              "libnvidia-ml.so.1: cannot open shared object file",
                              "libnvidia-ml.so: cannot open shared object file"};
constexpr P kIncompatibleStrategy[] = {"Incompatible strategy detected"};
constexpr P kInit250[] = {"ERROR: init 250 result=11", "init 250 result=11"};
constexpr P kHookPath[] = {"fork/exec /usr/bin/nvidia-ctk: no such file",
                           "fork/exec /usr/bin/nvidia-cdi-hook: no such file"};
constexpr P kUnresolvableCdi[] = {"unresolvable CDI devices"};
constexpr P kNvmlUnknownInContainer[] = {"Failed to initialize NVML: Unknown Error"};
constexpr P kEnvvarUnprivileged[] = {
    "insufficient privileges to read device list from NVIDIA_VISIBLE_DEVICES"};
constexpr P kGlibc[] = {"GLIBC_2.* not found"};
constexpr P kVersionMismatch[] = {"Driver/library version mismatch",
                                  "API mismatch: the NVIDIA kernel module"};
constexpr P kSmiNoDriver[] = {
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"};
constexpr P kKeyRejected[] = {"key was rejected by service"};
constexpr P kNoGpuResource[] = {"Insufficient nvidia.com/gpu", "nvidia.com/gpu: 0",
                                "nvidia.com/gpu\": \"0\"", "nvidia.com/gpu\":\"0\""};
constexpr P kUntoleratedTaint[] = {"nodes are available*untolerated taint",
                                   "had untolerated taint"};
constexpr P kRuntimeClassMissing[] = {
    "RuntimeClass \"nvidia\" not found", "runtimeclass.node.k8s.io \"nvidia\" not found",
    "runtimeClassName nvidia not found", "runtimeClassName: nvidia not found"};
constexpr P kRuntimeHandlerMissing[] = {"no runtime for \"nvidia\" is configured",
                                        "no runtime for nvidia is configured"};
constexpr P kBpfDeviceRules[] = {"failed to add device rules*load program: invalid argument"};
constexpr P kEmptyDeviceEdits[] = {"empty device edits"};
constexpr P kProbeFailed[] = {"probe with driver nvidia failed", "RmInitAdapter failed",
                              "NVIDIA probe routine failed", "No devices were found"};
// The driver prints this over several lines, each starting with "NVRM: ".
constexpr P kUnsupportedGpu[] = {"installed in this system is*not supported by the NVIDIA"};

constexpr ExplainEntry kEntries[] = {
    {"nvml-library-missing", kNvmlMissing,
     "The NVIDIA management library (libnvidia-ml.so.1) is not visible in the container",
     "The pod was not started by the NVIDIA container runtime, so the driver's user-space "
     "libraries were never injected into it. Typical for the device plugin, dcgm-exporter or a "
     "CUDA pod without `runtimeClassName: nvidia`, or a device plugin whose `nvidiaDriverRoot` "
     "points at a library directory instead of a root.",
     "Run the pod with `runtimeClassName: nvidia` (Helm: `--set runtimeClassName=nvidia`; "
     "create the RuntimeClass if it is missing) or make nvidia containerd's default runtime. "
     "`nvidiaDriverRoot` must be a root such as `/`, not `/usr/lib/x86_64-linux-gnu`. Do not "
     "hostPath-mount the host's library directory (on Talos `/usr/local/glibc/lib` on 1.8-1.12, "
     "`/usr/local/lib` on 1.13+): let the runtime inject the files. `gpulet doctor` shows where "
     "the library is on this node.",
     "NVIDIA/k8s-device-plugin #444, #478, #1743; siderolabs/extensions #544"},
    {"device-plugin-incompatible-strategy", kIncompatibleStrategy,
     "The device plugin could not detect how to find GPUs (\"Incompatible strategy detected "
     "auto\")",
     "Auto-detection found neither NVML nor a Tegra system inside the plugin's container. The "
     "root cause is the same as for a missing libnvidia-ml.so.1: the plugin pod does not run "
     "with the NVIDIA container runtime.",
     "Run the plugin with `runtimeClassName: nvidia` (Helm: `--set runtimeClassName=nvidia`). "
     "Forcing `deviceDiscoveryStrategy: nvml` only turns this into an NVML load error; fix the "
     "runtime first.",
     "NVIDIA/k8s-device-plugin #1134, #1220, #1574 (RTX 5090)"},
    {"talos-ldcache-init-250", kInit250,
     "GPU containers crash at start with \"ERROR: init 250 result=11\" (Talos 1.8-1.12)",
     "Talos 1.8-1.12 keep the NVIDIA user space under /usr/local/glibc/lib on a read-only file "
     "system, and the glibc ld.so.cache there has no NVIDIA entries. The legacy NVIDIA "
     "container hook looks the libraries up in that cache and crashes (SIGSEGV, exit 139) in "
     "libnvsandboxutils.",
     "Upgrade to Talos v1.13 or newer: its nvidia-container-toolkit extension switched to CDI "
     "(the ext-nvidia-cdi-gen service writes /run/cdi/nvidia.yaml at boot) and no longer uses "
     "the legacy hook. Keep the kernel-module and nvidia-container-toolkit extensions on the "
     "same driver version.",
     "siderolabs/extensions #940, fixed by #996 (\"switch to CDI\")"},
    {"cdi-hook-path", kHookPath,
     "A CDI hook points at /usr/bin/nvidia-ctk, which does not exist on the host",
     "CDI hooks run on the host, not in the container. The device plugin's spec "
     "(/run/cdi/k8s.device-plugin.nvidia.com-gpu.json) names /usr/bin/nvidia-ctk, but on Talos "
     "the binaries are in /usr/local/bin (the /usr/bin symlinks exist only from Talos 1.13 with "
     "talos PR #13022). Pods with only `runtimeClassName: nvidia` and no GPU limit do not run "
     "the hook, which hides the problem.",
     "Point the plugin at the host's hook: Helm `--set cdi.nvidiaHookPath=/usr/local/bin/"
     "nvidia-cdi-hook` (environment NVIDIA_CDI_HOOK_PATH), or upgrade Talos to a release that "
     "has the /usr/bin/nvidia-ctk and /usr/bin/nvidia-cdi-hook symlinks.",
     "siderolabs/talos #13021, #13022"},
    {"cdi-unresolvable", kUnresolvableCdi,
     "The container runtime was asked for a CDI device that no spec defines",
     "A name such as nvidia.com/gpu=all or nvidia.com/gpu=0 is not defined by any spec in "
     "/etc/cdi or /var/run/cdi: the spec is missing, stale (GPUs or driver changed since it was "
     "generated), or it is the device plugin's own spec, which has no `all` device.",
     "List what is defined with `nvidia-ctk cdi list`. Regenerate the node-wide spec with "
     "`nvidia-ctk cdi generate --output /var/run/cdi/nvidia.yaml`; on Talos 1.13+ the "
     "ext-nvidia-cdi-gen service writes /run/cdi/nvidia.yaml at boot, so check that it ran. On "
     "Talos write specs to /var/run/cdi (= /run/cdi): /etc is read-only.",
     "NVIDIA/k8s-device-plugin #1203; NVIDIA/nvidia-container-toolkit #1239, #1895"},
    {"nvml-unknown-error-in-container", kNvmlUnknownInContainer,
     "A running container lost access to its GPU (\"Failed to initialize NVML: Unknown Error\")",
     "Inside a container that used to work, this means systemd re-applied the device cgroups "
     "(for example after `systemctl daemon-reload`) and took away access to /dev/nvidia*; runc "
     "can only restore it when /dev/char has symlinks for the NVIDIA devices. On a fresh "
     "container it can also mean the device nodes were never allowed.",
     "Restart the pod to get the devices back. Prevent it by injecting devices with CDI, or "
     "create the /dev/char symlinks for the NVIDIA devices "
     "(`nvidia-ctk system create-dev-char-symlinks --create-all`).",
     "NVIDIA/nvidia-container-toolkit #48 (notice), #251, #1227"},
    {"visible-devices-unprivileged", kEnvvarUnprivileged,
     "An unprivileged pod sets NVIDIA_VISIBLE_DEVICES, which the toolkit refuses",
     "The device plugin passes GPUs as volume mounts and the toolkit is configured not to trust "
     "NVIDIA_VISIBLE_DEVICES from unprivileged containers "
     "(accept-nvidia-visible-devices-envvar-when-unprivileged = false), but the image bakes the "
     "variable in (CUDA images set NVIDIA_VISIBLE_DEVICES=all).",
     "Request GPUs with `resources.limits: {nvidia.com/gpu: 1}` instead of the variable; for "
     "pods that should get no GPU, override it in the pod (`NVIDIA_VISIBLE_DEVICES=void`). "
     "Trusting the variable again (accept-nvidia-visible-devices-envvar-when-unprivileged = "
     "true) silences the error but lets any pod take every GPU.",
     "NVIDIA/k8s-device-plugin #203, #87, #61"},
    {"glibc-too-old", kGlibc, "A program or library needs a newer glibc than the one it runs with",
     "A binary was built against a newer glibc than the process loading it has: typically host "
     "NVIDIA libraries hostPath-mounted into an image with an older glibc, or a library from a "
     "newer distribution. On Talos the base system is musl; glibc and the NVIDIA user space "
     "come from extensions under /usr/local/glibc/lib (Talos 1.8-1.12) or /usr/local/lib "
     "(1.13+), and mixing them with a container's own glibc fails to load or even segfaults.",
     "Do not hostPath-mount host library directories; let the NVIDIA runtime or CDI inject the "
     "driver files (`runtimeClassName: nvidia`). Build images on a base at least as new as the "
     "glibc version named in the message. `gpulet doctor` compares libnvidia-ml's glibc needs "
     "with gpulet's own.",
     "NVIDIA/kubevirt-gpu-device-plugin #81; siderolabs/extensions #544; the field report"},
    {"driver-library-mismatch", kVersionMismatch,
     "The NVIDIA libraries and the loaded kernel module are different driver versions",
     "The user-space driver (libnvidia-ml, libcuda) and the nvidia kernel module disagree "
     "(NVML_ERROR_LIB_RM_VERSION_MISMATCH): the driver was upgraded without reloading the "
     "module, or two driver installs are mixed.",
     "Reboot the node (or unload and reload the nvidia modules). On Talos install the "
     "kernel-module extension (nvidia-open-gpu-kernel-modules-production or "
     "nonfree-kmod-nvidia-production) and nvidia-container-toolkit-production with the same "
     "driver version and upgrade them together. Compare /proc/driver/nvidia/version with the "
     "library version; `gpulet doctor` does.",
     "NVML return codes; siderolabs/extensions (nvidia-gpu README)"},
    {"nvidia-smi-no-driver", kSmiNoDriver, "nvidia-smi cannot reach the NVIDIA kernel driver",
     "The nvidia kernel module is not loaded (or failed to load), or /dev/nvidiactl and "
     "/dev/nvidia* are not present where nvidia-smi runs (a container without the NVIDIA "
     "runtime).",
     "Check /proc/modules for nvidia and the kernel log for NVRM errors. On Talos the modules "
     "load only when listed: `machine.kernel.modules: [{name: nvidia}, {name: nvidia_uvm}, "
     "{name: nvidia_drm}, {name: nvidia_modeset}]` (Talos 1.14: one KernelModuleConfig "
     "document per module), with a kernel-module extension installed "
     "(nvidia-open-gpu-kernel-modules-production for Turing and newer and required for "
     "Blackwell such as the RTX 5090; nonfree-kmod-nvidia-production for older GPUs). Verify "
     "with `talosctl read /proc/modules` and `talosctl get extensions`. In a container, run "
     "it with `runtimeClassName: nvidia`.",
     "Talos NVIDIA GPU docs; siderolabs/extensions; the field report"},
    {"talos-module-signature", kKeyRejected,
     "The kernel refused to load a module: \"key was rejected by service\"",
     "Talos enforces kernel module signatures, so only modules signed for that exact Talos "
     "release load. Self-built NVIDIA modules, vGPU guest drivers or an extension built for "
     "another Talos version are rejected.",
     "Install the NVIDIA modules as the system extension for your Talos version "
     "(nvidia-open-gpu-kernel-modules-production or nonfree-kmod-nvidia-production, or their "
     "-lts variants) through the Image Factory schematic, and upgrade Talos and the extension "
     "together.",
     "siderolabs/extensions #227"},
    {"no-gpu-resource", kNoGpuResource,
     "No schedulable nvidia.com/gpu: the node advertises none, or none is free",
     "The node has no allocatable nvidia.com/gpu: the device plugin is not running on it (its "
     "DaemonSet shows DESIRED 0 because chart 0.15+ requires NFD/GFD node labels), it has not "
     "(re-)registered with the kubelet, or it found no usable GPU (NVML failed, or every GPU is "
     "unhealthy). \"Insufficient nvidia.com/gpu\" can also simply mean every GPU is taken; GPUs "
     "are whole units unless sharing is configured.",
     "Check that the device-plugin DaemonSet has a pod on the node. Label the node "
     "(`kubectl label node NODE nvidia.com/gpu.present=true`) or enable NFD/GFD so the "
     "chart's nodeAffinity matches. Read the plugin's log for NVML errors and run `gpulet "
     "explain` on them. If the count drops to 0 after working, restart the plugin (a lost "
     "kubelet registration). `kubectl describe node` shows capacity and allocatable.",
     "siderolabs/talos #12103; NVIDIA/k8s-device-plugin #1228, #1698; the field report"},
    {"untolerated-taint", kUntoleratedTaint, "The pod does not tolerate the GPU node's taint",
     "GPU nodes are usually tainted (for example nvidia.com/gpu=present:NoSchedule) so that "
     "only GPU workloads land on them; the scheduler found no node whose taints the pod "
     "tolerates.",
     "Add a toleration to the pod: `tolerations: [{key: nvidia.com/gpu, operator: Exists, "
     "effect: NoSchedule}]`. On Talos set the taint when the node first registers, with "
     "`machine.kubelet.extraArgs: {register-with-taints: \"nvidia.com/gpu=present:"
     "NoSchedule\"}`; machine.nodeTaints cannot change an already-registered worker (use "
     "`kubectl taint` for those).",
     "Talos docs (taints); siderolabs/talos #10935; NVIDIA/k8s-device-plugin #1934"},
    {"runtimeclass-missing", kRuntimeClassMissing, "The cluster has no RuntimeClass named nvidia",
     "The pod sets `runtimeClassName: nvidia`, but no RuntimeClass object of that name exists, "
     "so the pod is rejected.",
     "Create it: `apiVersion: node.k8s.io/v1`, `kind: RuntimeClass`, `metadata: {name: "
     "nvidia}`, `handler: nvidia`. The node's containerd must also have a runtime handler "
     "named nvidia (on Talos the nvidia-container-toolkit-production extension adds it).",
     "Kubernetes RuntimeClass docs; Talos NVIDIA GPU docs"},
    {"containerd-nvidia-runtime-missing", kRuntimeHandlerMissing,
     "containerd on the node has no runtime handler named nvidia",
     "The RuntimeClass exists but the node's containerd does not know its handler: on Talos "
     "the nvidia-container-toolkit-production extension (which drops "
     "/etc/cri/conf.d/10-nvidia-container-runtime.part) is not installed; elsewhere the NVIDIA "
     "Container Toolkit was not configured for containerd.",
     "Talos: add the nvidia-container-toolkit-production extension (same driver version as the "
     "kernel-module extension) and reboot; check with `talosctl get extensions`. Other "
     "distributions: `nvidia-ctk runtime configure --runtime=containerd`, then restart "
     "containerd.",
     "siderolabs/extensions (nvidia-container-toolkit); NVIDIA Container Toolkit docs"},
    {"talos-bpf-jit-harden", kBpfDeviceRules,
     "nvidia-container-cli could not load its device-cgroup BPF program",
     "The legacy NVIDIA hook (Talos 1.8 to 1.12) loads BPF programs to allow GPU devices on "
     "cgroup v2; Talos' default net.core.bpf_jit_harden=2 makes that fail.",
     "On Talos 1.8 to 1.12 set `machine.sysctls: {net.core.bpf_jit_harden: 1}`; Talos 1.13+ "
     "uses CDI and does not need it.",
     "siderolabs/extensions #101; Talos NVIDIA GPU docs"},
    {"talos-cdi-gen-empty-edits", kEmptyDeviceEdits,
     "nvidia-ctk could not generate a CDI spec: NVML sees no usable GPU",
     "`nvidia-ctk cdi generate` (on Talos the ext-nvidia-cdi-gen service) fails with \"empty "
     "device edits\" when NVML reports no usable GPU, for example an HGX system whose Fabric "
     "Manager failed, or a GPU that fell off the bus.",
     "Find out why NVML sees no GPU: `gpulet doctor`, the kernel log (XIDs), and on NVSwitch "
     "systems the nvidia-fabricmanager-production extension and its service.",
     "siderolabs/talos #14015"},
    {"gpu-probe-failed", kProbeFailed, "The NVIDIA driver could not initialise the GPU",
     "The kernel module is loaded but the GPU did not come up: on Blackwell cards (RTX 50xx, "
     "RTX PRO 6000 Blackwell, B200) the proprietary modules are loaded where only the open "
     "modules work; on consumer boards Resizable BAR or Above 4G Decoding is disabled in the "
     "firmware setup; or the GPU is not answering on PCIe (look for XID 79 or \"fallen off the "
     "bus\" in the kernel log).",
     "Use the open kernel modules for Turing and newer GPUs (on Talos the "
     "nvidia-open-gpu-kernel-modules-production extension instead of "
     "nonfree-kmod-nvidia-production). Enable Resizable BAR and Above 4G Decoding in the "
     "BIOS/UEFI setup. Then check the kernel log (`dmesg | gpulet explain -`) for the "
     "driver's own reason.",
     "NVIDIA/open-gpu-kernel-modules #862, #872; NVIDIA driver README (open modules)"},
    {"gpu-not-supported-by-driver", kUnsupportedGpu, "The loaded driver does not support this GPU",
     "The GPU is newer than the driver release (or needs the open kernel modules), so the "
     "driver refuses to attach to it.",
     "Install a driver release that supports the GPU; for Blackwell use the open kernel "
     "modules. On Talos pick the -production extensions (nvidia-open-gpu-kernel-modules-"
     "production and nvidia-container-toolkit-production) for a Talos release that ships a "
     "recent enough driver.",
     "NVIDIA driver README (supported GPUs); siderolabs/extensions"},
};

// nvmlErrorString() phrases people see ("Failed to initialize NVML: Driver Not Loaded"),
// mapped to NVML return-code names.
struct NvmlPhrase {
  absl::string_view phrase;
  absl::string_view name;
};
constexpr NvmlPhrase kNvmlPhrases[] = {
    {"Driver Not Loaded", "DRIVER_NOT_LOADED"},
    {"Insufficient Permissions", "NO_PERMISSION"},
    {"GPU is lost", "GPU_IS_LOST"},
    {"GPU requires reset", "RESET_REQUIRED"},
    {"NVML Shared Library Not Found", "LIBRARY_NOT_FOUND"},
};

// Collapses runs of whitespace to one space so patterns need not guess column alignment.
std::string CollapseWhitespace(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool space = false;
  for (char c : text) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c))) {
      space = true;
      continue;
    }
    if (space && !out.empty()) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

bool IsIdentifierChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
}

// The catalogue's phrases as a sentence: capitalised when the first word is a plain
// lower-case word (not "libnvidia-ml.so.1" or a command), with a full stop.
std::string Sentence(absl::string_view phrase) {
  std::string out(phrase);
  size_t word_end = std::min(out.find(' '), out.size());
  bool plain = word_end > 0;
  for (size_t i = 0; i < word_end; ++i) {
    if (!absl::ascii_islower(static_cast<unsigned char>(out[i]))) plain = false;
  }
  if (plain) out[0] = absl::ascii_toupper(static_cast<unsigned char>(out[0]));
  if (!out.empty() && out.back() != '.') out += '.';
  return out;
}

Explanation FromNvml(const NvmlReturnInfo& info, absl::string_view matched) {
  Explanation e;
  absl::string_view short_name = info.name;
  absl::ConsumePrefix(&short_name, "NVML_ERROR_");
  e.id = absl::StrCat("nvml-", absl::AsciiStrToLower(short_name));
  std::replace(e.id.begin(), e.id.end(), '_', '-');
  e.title = absl::StrCat(info.name, " (NVML return code ", info.code, ")");
  e.cause = Sentence(info.cause);
  e.fix = Sentence(info.fix);
  e.source = "NVML return codes (nvml.h), gpulet's NVML error catalogue";
  e.matched = std::string(matched);
  e.details = {{"nvml_return", std::string(info.name)}, {"code", absl::StrCat(info.code)}};
  return e;
}

// NVML return codes named in the text, as full names, Go-style ERROR_ names, or a bare name
// that is the whole text; plus nvmlErrorString phrases.
void ExplainNvml(absl::string_view text, absl::string_view collapsed,
                 std::vector<Explanation>* out) {
  std::set<int> seen;
  auto add = [&](const NvmlReturnInfo* info, absl::string_view matched) {
    if (info == nullptr || info->code == 0 || !seen.insert(info->code).second) return;
    out->push_back(FromNvml(*info, matched));
  };
  absl::string_view whole = absl::StripAsciiWhitespace(text);
  for (size_t i = 0; i < text.size();) {
    if (!IsIdentifierChar(text[i])) {
      ++i;
      continue;
    }
    size_t start = i;
    while (i < text.size() && IsIdentifierChar(text[i])) ++i;
    absl::string_view token = text.substr(start, i - start);
    std::string upper = absl::AsciiStrToUpper(token);
    absl::string_view name = upper;
    if (absl::StartsWith(name, "NVML_ERROR_") || token == whole) {
      add(FindNvmlReturnByName(name), token);
    } else if (absl::ConsumePrefix(&name, "ERROR_")) {
      add(FindNvmlReturnByName(name), token);
    }
  }
  std::string lower = absl::AsciiStrToLower(collapsed);
  for (const NvmlPhrase& p : kNvmlPhrases) {
    if (absl::StrContains(lower, absl::AsciiStrToLower(p.phrase))) {
      add(FindNvmlReturnByName(p.name), p.phrase);
    }
  }
}

std::string TrimLine(absl::string_view line) {
  constexpr size_t kMax = 240;
  line = absl::StripAsciiWhitespace(line);
  if (line.size() <= kMax) return std::string(line);
  return absl::StrCat(line.substr(0, kMax), "...");
}

// The explanation of one XID (or fallen-off-the-bus message) for GPU `gpu` ("" when the text
// names no GPU).
Explanation FromXid(const XidEvent& x, absl::string_view uuid) {
  XidAssessment a = AssessXid(x);
  Explanation e;
  e.id = absl::StrCat("xid-", x.xid);
  std::string gpu = x.bus_id;
  if (!uuid.empty()) absl::StrAppend(&gpu, " (", uuid, ")");
  if (x.source == XidSource::kFallenOffBusMessage) {
    e.title = absl::StrCat("GPU ", gpu, " has fallen off the bus (treated as XID 79)");
  } else if (gpu.empty()) {
    e.title = absl::StrCat("XID ", x.xid, " (", a.info.mnemonic, ")");
  } else {
    e.title = absl::StrCat("XID ", x.xid, " (", a.info.mnemonic, ") on GPU ", gpu);
  }
  if (x.gpu_instance) absl::StrAppend(&e.title, ", MIG GPU instance ", *x.gpu_instance);
  if (x.compute_instance) absl::StrAppend(&e.title, " compute instance ", *x.compute_instance);
  if (!x.process_name.empty() || x.pid) {
    absl::StrAppend(&e.title, ", process ", x.process_name.empty() ? "?" : x.process_name,
                    x.pid ? absl::StrCat(" (pid ", *x.pid, ")") : "");
  }
  std::string meaning(a.info.meaning);
  if (!meaning.empty()) meaning[0] = absl::ascii_toupper(static_cast<unsigned char>(meaning[0]));
  absl::string_view consequence =
      a.severity == XidSeverity::kApplication ? " (the application's fault; the GPU stays in "
                                                "service)"
      : a.severity == XidSeverity::kFatal     ? " (the GPU is unusable until the action is taken)"
                                              : " (the GPU stays in service; watch for repeats)";
  e.cause = absl::StrCat(meaning, ". Severity: ", XidSeverityName(a.severity), consequence,
                         a.adjustment.empty() ? "" : absl::StrCat("; ", a.adjustment), ".");
  e.fix = std::string(GpuActionDescription(a.action));
  if (a.if_repeated != a.action && a.if_repeated != GpuAction::kNone) {
    std::string then(GpuActionDescription(a.if_repeated));
    then[0] = absl::ascii_tolower(static_cast<unsigned char>(then[0]));
    absl::StrAppend(&e.fix, " If it keeps happening: ", then);
  }
  e.source = a.info.documented
                 ? "NVIDIA Xid catalogue resolution buckets; gpud and device-plugin practice"
                 : "NVIDIA documents no meaning for this XID on current GPUs; gpud treats it as "
                   "fatal";
  e.details = {{"xid", absl::StrCat(x.xid)}, {"mnemonic", std::string(a.info.mnemonic)}};
  if (!x.bus_id.empty()) e.details.push_back({"bus_id", x.bus_id});
  if (!uuid.empty()) e.details.push_back({"uuid", std::string(uuid)});
  if (x.gpu_instance) e.details.push_back({"gpu_instance", absl::StrCat(*x.gpu_instance)});
  if (x.compute_instance) {
    e.details.push_back({"compute_instance", absl::StrCat(*x.compute_instance)});
  }
  if (x.pid) e.details.push_back({"pid", absl::StrCat(*x.pid)});
  if (!x.process_name.empty()) e.details.push_back({"process", x.process_name});
  e.details.push_back({"severity", std::string(XidSeverityName(a.severity))});
  e.details.push_back({"action", std::string(GpuActionName(a.action))});
  e.details.push_back({"if_repeated", std::string(GpuActionName(a.if_repeated))});
  if (!x.message.empty()) e.details.push_back({"message", x.message});
  return e;
}

// Kernel log XID and fallen-off-the-bus lines; or, when the whole text is "xid N", that code.
void ExplainXids(absl::string_view text, std::vector<Explanation>* out) {
  struct Seen {
    XidEvent event;
    std::string line;  // the (last) line that completed it
    int count = 0;
  };
  std::vector<Seen> seen;
  std::map<std::string, std::string> uuids;  // bus id -> UUID, from the mapping lines
  KernelLogScanner scanner;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    // Raw /dev/kmsg records (`cat /dev/kmsg | gpulet explain -`) carry escaped text, in which
    // a multi-line message is one line with "\x0a" in it: scan the unescaped text instead.
    std::string unescaped;
    if (!line.empty() && absl::ascii_isdigit(static_cast<unsigned char>(line[0]))) {
      if (absl::StatusOr<KmsgRecord> record = ParseKmsgRecord(line); record.ok()) {
        unescaped = std::move(record->text);
      }
    }
    for (KernelLogFinding& f : scanner.Scan(unescaped.empty() ? line : unescaped)) {
      if (GpuUuidMapping* m = std::get_if<GpuUuidMapping>(&f)) {
        uuids[m->bus_id] = m->uuid;
        continue;
      }
      XidEvent& x = std::get<XidEvent>(f);
      // One explanation per XID, GPU and kind of report; repeats only raise the count.
      auto it = std::find_if(seen.begin(), seen.end(), [&x](const Seen& s) {
        return s.event.xid == x.xid && s.event.bus_id == x.bus_id && s.event.source == x.source;
      });
      if (it != seen.end()) {
        ++it->count;
      } else {
        seen.push_back(Seen{std::move(x), TrimLine(line), 1});
      }
    }
  }
  for (const Seen& s : seen) {
    auto u = uuids.find(s.event.bus_id);
    Explanation e = FromXid(s.event, u == uuids.end() ? "" : u->second);
    e.matched = s.line;
    e.details.push_back({"occurrences", absl::StrCat(s.count)});
    out->push_back(std::move(e));
  }
  if (!seen.empty()) return;

  // "xid 79", "XID79": someone asking what a code means.
  absl::string_view ask = absl::StripAsciiWhitespace(text);
  if (ask.size() < 3 || !absl::EqualsIgnoreCase(ask.substr(0, 3), "xid")) return;
  ask = absl::StripLeadingAsciiWhitespace(ask.substr(3));
  int code = 0;
  if (ask.empty() || ask.size() > 6 || !absl::SimpleAtoi(ask, &code) || code < 0) return;
  XidEvent x;
  x.xid = code;
  Explanation e = FromXid(x, "");
  e.matched = std::string(absl::StripAsciiWhitespace(text));
  out->push_back(std::move(e));
}

}  // namespace

bool WildcardSearch(absl::string_view pattern, absl::string_view text) {
  // Searching for `pattern` anywhere is matching "*pattern*" against the whole text; the
  // classic single-backtrack algorithm does that without recursion.
  std::string full = absl::StrCat("*", pattern, "*");
  auto same = [](char a, char b) {
    return absl::ascii_tolower(static_cast<unsigned char>(a)) ==
           absl::ascii_tolower(static_cast<unsigned char>(b));
  };
  size_t p = 0;
  size_t t = 0;
  size_t star = std::string::npos;
  size_t mark = 0;
  while (t < text.size()) {
    if (p < full.size() && full[p] == '*') {
      star = p++;
      mark = t;
    } else if (p < full.size() && (full[p] == '?' || same(full[p], text[t]))) {
      ++p;
      ++t;
    } else if (star != std::string::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < full.size() && full[p] == '*') ++p;
  return p == full.size();
}

std::span<const ExplainEntry> ExplainEntries() { return kEntries; }

std::vector<Explanation> Explain(absl::string_view text) {
  std::vector<Explanation> out;
  std::string collapsed = CollapseWhitespace(text);
  for (const ExplainEntry& entry : kEntries) {
    for (absl::string_view pattern : entry.patterns) {
      if (!WildcardSearch(pattern, collapsed)) continue;
      Explanation e;
      e.id = std::string(entry.id);
      e.title = std::string(entry.title);
      e.cause = std::string(entry.cause);
      e.fix = std::string(entry.fix);
      e.source = std::string(entry.source);
      e.matched = std::string(pattern);
      out.push_back(std::move(e));
      break;
    }
  }
  ExplainNvml(text, collapsed, &out);
  ExplainXids(text, &out);
  return out;
}

}  // namespace gpulet
