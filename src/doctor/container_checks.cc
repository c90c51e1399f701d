// The doctor's checks of what containers get: CDI specs, containerd and the kubelet (checks.h).
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
      const node::Release& row = *c.talos->release;
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
  for (const gpu::Gpu& g : c.inv.gpus) {
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

namespace {

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
  for (const node::Release& r : node::KnownReleases()) {
    if (r.hook_links_in_usr_bin.value) return absl::StrCat(r.major, ".", r.minor);
  }
  return "no known release";
}

}  // namespace

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

}  // namespace gpulet::doctor
