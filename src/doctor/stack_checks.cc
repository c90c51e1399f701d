#include "doctor/stack_checks.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "doctor/explain.h"
#include "doctor/explain_catalog.h"
#include "node/dmem.h"

namespace gpulet::doctor {
namespace {

// `key = value` (TOML) or `key: value` (YAML) on a trimmed line: the value without quotes;
// nullopt when the line sets something else.
std::optional<std::string> Setting(absl::string_view line, absl::string_view key) {
  if (!absl::ConsumePrefix(&line, key)) return std::nullopt;
  line = absl::StripLeadingAsciiWhitespace(line);
  if (!absl::ConsumePrefix(&line, "=") && !absl::ConsumePrefix(&line, ":")) return std::nullopt;
  line = absl::StripAsciiWhitespace(line);
  if (size_t hash = line.find(" #"); hash != absl::string_view::npos) {
    line = absl::StripTrailingAsciiWhitespace(line.substr(0, hash));
  }
  if (line.size() >= 2 && (line.front() == '"' || line.front() == '\'') &&
      line.back() == line.front()) {
    line = line.substr(1, line.size() - 2);
  }
  return std::string(line);
}

// The character-device majors the kernel registered (/proc/devices), by name.
std::map<std::string, int> CharMajors(const HostFs& host) {
  std::map<std::string, int> out;
  absl::StatusOr<std::string> text = host.ReadFile("/proc/devices");
  if (!text.ok()) return out;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    if (absl::StartsWith(line, "Block devices")) break;
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    int major = 0;
    if (f.size() == 2 && absl::SimpleAtoi(f[0], &major)) out[std::string(f[1])] = major;
  }
  return out;
}

// The major of the character device at `host_path`; nullopt when it is not one (a fixture's
// plain file) or cannot be looked at.
std::optional<unsigned> DeviceMajor(const HostFs& host, absl::string_view host_path) {
  absl::StatusOr<std::string> real = host.Resolve(host_path);
  struct stat st;
  if (!real.ok() || stat(real->c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) return std::nullopt;
  return major(st.st_rdev);
}

bool KubeletUsesSystemd(const HostFs& host, std::string* where) {
  constexpr absl::string_view kConfig = "/var/lib/kubelet/config.yaml";
  absl::StatusOr<std::string> text = host.ReadFile(kConfig);
  if (!text.ok()) return false;
  int n = 0;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    ++n;
    if (std::optional<std::string> v = Setting(absl::StripAsciiWhitespace(line), "cgroupDriver")) {
      *where = absl::StrCat(kConfig, ":", n);
      return *v == "systemd";
    }
  }
  return false;
}

}  // namespace

void ScanContainerdConfig(absl::string_view path, absl::string_view text, ContainerdFacts* f) {
  f->files.push_back(std::string(path));
  int n = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++n;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::string where = absl::StrCat(path, ":", n);
    if (absl::StrContains(line, "io.containerd.cri.v1.runtime") || line == "version = 3") {
      f->v3_config = true;
    }
    if (f->nvidia_runtime.empty() && (absl::StrContains(line, "runtimes.nvidia]") ||
                                      absl::StrContains(line, "runtimes.nvidia.") ||
                                      absl::StrContains(line, "runtimes.\"nvidia\""))) {
      f->nvidia_runtime = where;
    }
    if (std::optional<std::string> v = Setting(line, "enable_cdi")) {
      f->enable_cdi = absl::StartsWith(*v, "true");
      f->enable_cdi_where = where;
    }
    if (std::optional<std::string> v = Setting(line, "default_runtime_name")) {
      f->default_runtime = *v;
      f->default_runtime_where = where;
    }
    if (std::optional<std::string> v = Setting(line, "SystemdCgroup")) {
      f->systemd_cgroup = absl::StartsWith(*v, "true");
      f->systemd_cgroup_where = where;
    }
    absl::string_view rest = line;
    if (absl::ConsumePrefix(&rest, "cdi_spec_dirs")) {
      f->cdi_spec_dirs = QuotedPaths(rest);
      f->cdi_spec_dirs_where = where;
    }
  }
}

std::vector<std::string> QuotedPaths(absl::string_view value) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(value, '"')) {
    if (absl::StartsWith(part, "/")) out.emplace_back(part);
  }
  return out;
}

bool ListsRunCdi(const std::vector<std::string>& dirs) {
  return std::any_of(dirs.begin(), dirs.end(),
                     [](const std::string& d) { return d == "/var/run/cdi" || d == "/run/cdi"; });
}

ContainerdFacts ReadContainerdConfig(const HostFs& host) {
  ContainerdFacts f;
  std::vector<std::string> files;
  if (host.Exists("/etc/containerd/config.toml")) files.push_back("/etc/containerd/config.toml");
  if (host.Exists("/etc/cri/containerd.toml")) files.push_back("/etc/cri/containerd.toml");
  if (absl::StatusOr<std::vector<std::string>> parts = host.ListDir("/etc/cri/conf.d");
      parts.ok()) {
    for (const std::string& p : *parts) {
      if (absl::EndsWith(p, ".part")) files.push_back(JoinPath("/etc/cri/conf.d", p));
    }
  }
  for (const std::string& file : files) {
    if (absl::StatusOr<std::string> text = host.ReadFile(file); text.ok()) {
      ScanContainerdConfig(file, *text, &f);
    }
  }
  return f;
}

// The systemd cgroup driver rewrites a container's device rules from its unit when systemd
// reloads (`systemctl daemon-reload`), and keeps only the devices named in the OCI spec: the
// device nodes the NVIDIA runtime's hook added are dropped, and the container's NVML calls
// fail with "Failed to initialize NVML: Unknown Error". Devices given through CDI are in the
// spec. /dev/char/MAJOR:MINOR links to the nodes let runc name them too (nvidia-ctk system
// create-dev-char-symlinks, toolkit 1.12). Source:
// https://github.com/NVIDIA/nvidia-docker/issues/1730 (NVIDIA's notice), and
// https://github.com/NVIDIA/nvidia-container-toolkit/issues/48.
CheckResult CheckCgroupDevices(const StackInput& in) {
  CheckResult r = CheckResultFor("cgroup.devices");
  const HostFs& host = in.host;
  bool v2 = host.Exists("/sys/fs/cgroup/cgroup.controllers");
  bool v1 = host.IsDirectory("/sys/fs/cgroup/devices");
  if (!v2 && !v1) {
    r.evidence.push_back(absl::StrCat("neither ",
                                      host.Describe("/sys/fs/cgroup/cgroup.controllers"), " nor ",
                                      host.Describe("/sys/fs/cgroup/devices"), " exists"));
    return NotCheckedResult(std::move(r), "cannot see the cgroup hierarchy (/sys/fs/cgroup)");
  }
  r.evidence.push_back(v2 ? "cgroup v2 (unified): runc enforces device access with BPF programs"
                          : "cgroup v1: the devices controller enforces device access");
  std::string kubelet_where;
  bool kubelet_systemd = KubeletUsesSystemd(host, &kubelet_where);
  if (kubelet_systemd)
    r.evidence.push_back(absl::StrCat("cgroupDriver: systemd at ", kubelet_where));
  ContainerdFacts cd = ReadContainerdConfig(host);
  bool containerd_systemd = cd.systemd_cgroup.value_or(false);
  if (cd.systemd_cgroup) {
    r.evidence.push_back(absl::StrCat("SystemdCgroup = ", containerd_systemd ? "true" : "false",
                                      " at ", cd.systemd_cgroup_where));
  }
  if (in.cdi) {
    r.verdict = Verdict::kPass;
    r.summary =
        "containers get their GPUs through CDI: the device nodes are in the OCI spec, so the "
        "cgroup rules keep them";
    return r;
  }
  if (!kubelet_systemd && !containerd_systemd) {
    r.verdict = Verdict::kPass;
    r.summary = "the cgroupfs driver: systemd does not rewrite the containers' device rules";
    return r;
  }
  // The nodes the NVIDIA runtime's hook gives a container, and the /dev/char links for them.
  std::map<std::string, int> majors = CharMajors(host);
  auto major_of = [&](std::initializer_list<const char*> names) {
    for (const char* n : names) {
      if (auto it = majors.find(n); it != majors.end()) return it->second;
    }
    return -1;
  };
  int gpu_major = major_of({"nvidia-frontend", "nvidia"});
  int uvm_major = major_of({"nvidia-uvm"});
  std::vector<std::pair<std::string, std::string>> nodes;  // /dev path, /dev/char name
  const node::DriverInfo& d = in.inv.driver;
  if (gpu_major >= 0) {
    if (d.dev_nvidiactl) nodes.push_back({"/dev/nvidiactl", absl::StrCat(gpu_major, ":255")});
    for (int m : d.dev_gpu_minors) {
      nodes.push_back({absl::StrCat("/dev/nvidia", m), absl::StrCat(gpu_major, ":", m)});
    }
  }
  if (uvm_major >= 0 && d.dev_nvidia_uvm) {
    nodes.push_back({"/dev/nvidia-uvm", absl::StrCat(uvm_major, ":0")});
  }
  if (nodes.empty()) {
    return NotCheckedResult(
        std::move(r),
        "cannot tell: no NVIDIA device numbers in /proc/devices or no /dev/nvidia* "
        "nodes (see driver.modules and dev.nodes)");
  }
  std::vector<std::string> missing;
  for (const auto& [node, name] : nodes) {
    if (!host.ReadLink(absl::StrCat("/dev/char/", name)).ok()) {
      missing.push_back(absl::StrCat("/dev/char/", name, " (", node, ")"));
    }
  }
  if (missing.empty()) {
    r.verdict = Verdict::kPass;
    r.summary = "the systemd cgroup driver, with /dev/char links for every NVIDIA device node";
    return r;
  }
  r.verdict = Verdict::kWarn;
  r.summary =
      "the systemd cgroup driver without /dev/char links for the NVIDIA device nodes: "
      "containers given GPUs by the NVIDIA runtime's hook lose them when systemd reloads "
      "(\"Failed to initialize NVML: Unknown Error\")";
  r.evidence.push_back(absl::StrCat("missing: ", absl::StrJoin(missing, ", ")));
  r.fix =
      "Give GPUs through CDI (gpulet's cdi-cri strategy, or the nvidia runtime in CDI mode), or "
      "create the links at boot: `nvidia-ctk system create-dev-char-symlinks --create-all` "
      "(NVIDIA Container Toolkit 1.12 or later), run from a udev rule when the nvidia driver "
      "binds.";
  return r;
}

// CRI-O reads its runtimes from /etc/crio/crio.conf and /etc/crio/crio.conf.d/ (crio.conf(5));
// the NVIDIA runtime is registered as [crio.runtime.runtimes.nvidia] by `nvidia-ctk runtime
// configure --runtime=crio`, or the toolkit's OCI hook is installed in a hooks directory.
// Talos runs containerd only.
CheckResult CheckCrio(const StackInput& in) {
  CheckResult r = CheckResultFor("crio");
  const HostFs& host = in.host;
  if (in.talos) return NotCheckedResult(std::move(r), "Talos runs containerd, not CRI-O");
  std::vector<std::string> files;
  if (host.Exists("/etc/crio/crio.conf")) files.push_back("/etc/crio/crio.conf");
  if (absl::StatusOr<std::vector<std::string>> parts = host.ListDir("/etc/crio/crio.conf.d");
      parts.ok()) {
    std::vector<std::string> sorted = *parts;
    std::sort(sorted.begin(), sorted.end());
    for (const std::string& p : sorted) files.push_back(JoinPath("/etc/crio/crio.conf.d", p));
  }
  if (files.empty()) {
    return NotCheckedResult(std::move(r),
                            "CRI-O is not configured on this node (no /etc/crio/crio.conf or "
                            "crio.conf.d): the containerd check covers containerd");
  }
  std::string nvidia_runtime, default_runtime, default_where, cdi_dirs_where;
  std::vector<std::string> hooks_dirs = {"/usr/share/containers/oci/hooks.d",
                                         "/etc/containers/oci/hooks.d"};
  std::vector<std::string> cdi_dirs;
  for (const std::string& file : files) {
    absl::StatusOr<std::string> text = host.ReadFile(file);
    if (!text.ok()) continue;
    int n = 0;
    for (absl::string_view line : absl::StrSplit(*text, '\n')) {
      ++n;
      line = absl::StripAsciiWhitespace(line);
      if (line.empty() || line[0] == '#') continue;
      std::string where = absl::StrCat(file, ":", n);
      if (nvidia_runtime.empty() && (absl::StrContains(line, "runtimes.nvidia]") ||
                                     absl::StrContains(line, "runtimes.\"nvidia\"]"))) {
        nvidia_runtime = where;
      }
      if (std::optional<std::string> v = Setting(line, "default_runtime")) {
        default_runtime = *v;
        default_where = where;
      }
      absl::string_view rest = line;
      for (absl::string_view key : {"hooks_dir", "cdi_spec_dirs"}) {
        if (!absl::StartsWith(rest, key)) continue;
        (key == "hooks_dir" ? hooks_dirs : cdi_dirs) = QuotedPaths(rest);
        if (key == "cdi_spec_dirs") cdi_dirs_where = where;
      }
    }
  }
  r.evidence.push_back(absl::StrCat("read ", absl::StrJoin(files, ", ")));
  std::string hook;
  for (const std::string& dir : hooks_dirs) {
    absl::StatusOr<std::vector<std::string>> names = host.ListDir(dir);
    if (!names.ok()) continue;
    for (const std::string& name : *names) {
      if (absl::StrContains(name, "nvidia") && hook.empty()) hook = JoinPath(dir, name);
    }
  }
  if (!nvidia_runtime.empty()) r.evidence.push_back("runtime nvidia at " + nvidia_runtime);
  if (!default_where.empty()) {
    r.evidence.push_back(
        absl::StrCat("default_runtime = ", default_runtime, " at ", default_where));
  }
  if (!hook.empty()) r.evidence.push_back("NVIDIA OCI hook: " + hook);
  bool cdi_dirs_ok = cdi_dirs_where.empty() || ListsRunCdi(cdi_dirs);
  if (!cdi_dirs_where.empty()) {
    r.evidence.push_back(
        absl::StrCat("cdi_spec_dirs = ", absl::StrJoin(cdi_dirs, ", "), " at ", cdi_dirs_where));
  }
  if (in.cdi) {
    r.verdict = cdi_dirs_ok ? Verdict::kPass : Verdict::kWarn;
    r.summary = cdi_dirs_ok ? "CRI-O resolves the CDI devices gpulet names"
                            : "cdi_spec_dirs leaves out /var/run/cdi, where gpulet writes its spec";
    if (!cdi_dirs_ok)
      r.fix = absl::StrCat("Add /var/run/cdi to cdi_spec_dirs at ", cdi_dirs_where, ".");
    return r;
  }
  if (!hook.empty() || default_runtime == "nvidia") {
    r.verdict = Verdict::kPass;
    r.summary = hook.empty() ? "the nvidia runtime is CRI-O's default"
                             : "the NVIDIA OCI hook gives containers their GPUs";
    return r;
  }
  if (!nvidia_runtime.empty()) {
    r.verdict = Verdict::kWarn;
    r.summary =
        "the nvidia runtime is registered but is not the default: only pods that name "
        "runtimeClassName: nvidia get GPUs";
    r.fix =
        "Create the RuntimeClass nvidia (handler nvidia) and name it in GPU pods, or set "
        "default_runtime = \"nvidia\" under [crio.runtime]; or use CDI.";
    return r;
  }
  r.verdict = Verdict::kFail;
  r.summary = "CRI-O has neither the nvidia runtime nor the NVIDIA OCI hook";
  r.fix =
      "Run `nvidia-ctk runtime configure --runtime=crio` and restart CRI-O, or have gpulet "
      "name CDI devices (plugin.deviceListStrategy: [cdi-cri]).";
  return r;
}

// nvidia_uvm registers its character device when it loads, but does not create
// /dev/nvidia-uvm: nvidia-modprobe (or a udev rule calling it) does. Without the node, or
// with a node left from an earlier load with another major, cuInit fails with
// CUDA_ERROR_UNKNOWN (999) while nvidia-smi works. Sources: the threads of the uvm entries in
// src/doctor/explain/uvm.yaml (uvm-dev-node-missing, uvm-cuinit-unknown-error).
CheckResult CheckUvm(const StackInput& in) {
  CheckResult r = CheckResultFor("driver.uvm");
  const node::DriverInfo& d = in.inv.driver;
  if (!d.proc_modules_readable) {
    return NotCheckedResult(std::move(r), "cannot tell: /proc/modules is not readable");
  }
  if (!d.modules.nvidia_uvm) {
    r.verdict = Verdict::kFail;
    r.summary =
        "nvidia_uvm is not loaded: CUDA cannot initialise (CUDA_ERROR_UNKNOWN, 999) "
        "although nvidia-smi works";
    r.fix = in.talos ? "List nvidia_uvm under machine.kernel.modules (see driver.modules)."
                     : "Load it (`modprobe nvidia-uvm`) and have it load at boot.";
    return r;
  }
  std::map<std::string, int> majors = CharMajors(in.host);
  auto registered = majors.find("nvidia-uvm");
  if (registered == majors.end()) {
    r.evidence.push_back(in.host.Describe("/proc/devices") + ": no nvidia-uvm entry");
  } else {
    r.evidence.push_back(absl::StrCat(in.host.Describe("/proc/devices"), ": nvidia-uvm is major ",
                                      registered->second));
  }
  if (absl::StatusOr<std::string> hmm =
          in.host.ReadAttribute("/sys/module/nvidia_uvm/parameters/uvm_disable_hmm");
      hmm.ok()) {
    r.evidence.push_back(absl::StrCat("uvm_disable_hmm = ", *hmm));
  }
  std::string make_node =
      in.talos ? "The toolkit extension's udev rule creates it when nvidia_uvm loads: make sure "
                 "nvidia-container-toolkit-production is installed, then reboot."
               : "Create it with `nvidia-modprobe -u -c=0` (install nvidia-modprobe so that it "
                 "runs at boot), or run any CUDA program once as root.";
  if (!d.dev_nvidia_uvm) {
    r.verdict = Verdict::kFail;
    r.summary =
        "nvidia_uvm is loaded but /dev/nvidia-uvm does not exist: CUDA cannot "
        "initialise (CUDA_ERROR_UNKNOWN, 999)";
    r.fix = make_node;
    return r;
  }
  if (std::optional<unsigned> m = DeviceMajor(in.host, "/dev/nvidia-uvm");
      m && registered != majors.end() && static_cast<int>(*m) != registered->second) {
    r.verdict = Verdict::kFail;
    r.summary =
        absl::StrCat("/dev/nvidia-uvm has major ", *m, " but nvidia_uvm registered ",
                     registered->second, ": the node is left from an earlier load of the module");
    r.fix = absl::StrCat("Remove /dev/nvidia-uvm and /dev/nvidia-uvm-tools, then: ", make_node);
    return r;
  }
  if (!d.dev_nvidia_uvm_tools) {
    r.verdict = Verdict::kWarn;
    r.summary =
        "/dev/nvidia-uvm exists but /dev/nvidia-uvm-tools does not: CUDA works, "
        "profilers do not, and a CDI spec that lists it does not resolve";
    r.fix = make_node;
    return r;
  }
  r.verdict = Verdict::kPass;
  r.summary = "nvidia_uvm is loaded and /dev/nvidia-uvm and /dev/nvidia-uvm-tools exist";
  return r;
}

// On NVSwitch systems (HGX and DGX boards) CUDA waits for the fabric manager to program the
// switches; until it has, cuInit fails with "system not yet initialized" (802). Its log says
// when it succeeded: "Successfully configured all the available NVSwitches to route GPU
// NVLink traffic." (https://github.com/NVIDIA/nvtrust/issues/128). Its errors are in the
// catalogue's fabric-manager.yaml, which explain reads the log with.
CheckResult CheckFabricManager(const StackInput& in) {
  CheckResult r = CheckResultFor("fabricmanager");
  const HostFs& host = in.host;
  absl::StatusOr<std::vector<std::string>> switches =
      host.ListDir("/proc/driver/nvidia-nvswitch/devices");
  bool nvswitch = (switches.ok() && !switches->empty()) || host.Exists("/dev/nvidia-nvswitchctl");
  if (!nvswitch) {
    return NotCheckedResult(std::move(r),
                            "no NVSwitch on this node: the fabric manager serves only NVSwitch "
                            "systems (HGX and DGX boards)");
  }
  if (switches.ok()) {
    r.evidence.push_back(absl::StrCat(host.Describe("/proc/driver/nvidia-nvswitch/devices"), ": ",
                                      switches->size(), " NVSwitch(es)"));
  }
  std::string binary;
  for (const char* path : {"/usr/bin/nv-fabricmanager", "/usr/local/bin/nv-fabricmanager"}) {
    if (host.Exists(path) && binary.empty()) binary = path;
  }
  constexpr absl::string_view kLog = "/var/log/fabricmanager.log";
  constexpr size_t kLogBytes = 1 << 20;
  absl::StatusOr<std::string> log = host.ReadFile(kLog, kLogBytes);
  if (binary.empty() && !log.ok()) {
    r.verdict = Verdict::kFail;
    r.summary =
        "NVSwitches but no fabric manager: CUDA fails with \"system not yet "
        "initialized\" (802) until one runs";
    r.fix = in.talos ? "Add the NVIDIA fabric manager system extension (same driver version as "
                       "the kernel modules) to the node's image."
                     : "Install the nvidia-fabricmanager package of exactly the driver's "
                       "version and enable nvidia-fabricmanager.service.";
    return r;
  }
  if (!binary.empty()) r.evidence.push_back(host.Describe(binary) + ": present");
  if (!log.ok()) {
    r.verdict = Verdict::kWarn;
    r.summary =
        absl::StrCat("cannot tell whether it configured the switches: ", log.status().message());
    r.fix =
        "Check `systemctl status nvidia-fabricmanager`, or run gpulet with the host's "
        "/var/log visible.";
    return r;
  }
  // The last success, and the errors after it.
  size_t last_success = 0, line_no = 0;
  for (absl::string_view line : absl::StrSplit(*log, '\n')) {
    ++line_no;
    if (absl::StrContains(line, "Successfully configured all the available NVSwitches")) {
      last_success = line_no;
    }
  }
  const absl::StatusOr<ExplainCatalog>& catalog = BuiltinExplainCatalog();
  std::vector<std::string> errors;
  for (const Explanation& e : ExplainText(*log).found) {
    const ExplainCatalogEntry* entry = catalog.ok() ? catalog->Find(e.id) : nullptr;
    bool fabric = entry != nullptr && entry->file == "fabric-manager.yaml";
    if (fabric && e.line > last_success && e.severity != "info") {
      errors.push_back(absl::StrCat(e.title, " (line ", e.line, ", explain: ", e.id, ")"));
    }
  }
  if (!errors.empty()) {
    r.verdict = Verdict::kFail;
    r.summary = absl::StrCat("the fabric manager's log reports: ", errors.front());
    for (const std::string& e : errors) r.evidence.push_back(absl::StrCat(kLog, ": ", e));
    r.fix = absl::StrCat("`gpulet explain - < ", kLog,
                         "` gives the cause and fix of each; then restart "
                         "nvidia-fabricmanager.");
    return r;
  }
  if (last_success == 0) {
    r.verdict = Verdict::kWarn;
    r.summary = "the fabric manager's log does not say that it configured the switches";
    r.evidence.push_back(absl::StrCat(host.Describe(kLog), ": no success line"));
    r.fix =
        "Check `systemctl status nvidia-fabricmanager` and `nvidia-smi -q | grep -A2 Fabric` "
        "(State must be Completed).";
    return r;
  }
  r.verdict = Verdict::kPass;
  r.summary = "the fabric manager configured the NVSwitches";
  r.evidence.push_back(absl::StrCat(kLog, ":", last_success, ": success"));
  return r;
}

// DCGM's host engine, when installed on the host, listens on TCP 127.0.0.1:5555 by default
// (https://docs.nvidia.com/datacenter/dcgm/latest/reference/command-line-reference/nv-hostengine.html);
// dcgm-exporter and dcgmi pointed at it fail with "Host engine connection invalid" when it
// does not answer.
CheckResult CheckDcgmHostEngine(const StackInput& in) {
  CheckResult r = CheckResultFor("dcgm.hostengine");
  constexpr absl::string_view kBinary = "/usr/bin/nv-hostengine";
  if (!in.host.Exists(kBinary)) {
    return NotCheckedResult(
        std::move(r),
        "DCGM's host engine is not installed on the host (gpulet's metrics need "
        "none; dcgm-exporter runs its own unless pointed at one)");
  }
  r.evidence.push_back(in.host.Describe(kBinary) + ": present");
  if (!in.input.tcp_probe) return NotCheckedResult(std::move(r), "no network probe was given");
  absl::Status s = in.input.tcp_probe("127.0.0.1", 5555);
  if (s.ok()) {
    r.verdict = Verdict::kPass;
    r.summary = "nv-hostengine answers on 127.0.0.1:5555";
    return r;
  }
  r.verdict = Verdict::kWarn;
  r.summary = "nv-hostengine is installed but nothing answers on 127.0.0.1:5555, its default";
  r.evidence.push_back(absl::StrCat("connect 127.0.0.1:5555: ", s.message()));
  r.fix =
      "Start it (`systemctl enable --now nvidia-dcgm`), or point dcgmi and dcgm-exporter "
      "(-r HOST:PORT) at the address it was started with (--port, --domain-socket).";
  return r;
}

// MIG (A100, A30, H100, H200, B200 and later data-centre GPUs): with MIG mode on, a GPU runs
// work only in its MIG devices; one with no GPU instances offers nothing to allocate.
CheckResult CheckMig(const StackInput& in) {
  CheckResult r = CheckResultFor("mig.mode");
  std::vector<const gpu::Gpu*> capable;
  for (const gpu::Gpu& g : in.inv.gpus) {
    if (g.mig_capable.value_or(false)) capable.push_back(&g);
  }
  if (capable.empty()) {
    return NotCheckedResult(std::move(r), "no GPU here supports MIG (or NVML did not say)");
  }
  std::vector<std::string> empty, enabled, off;
  for (const gpu::Gpu* g : capable) {
    std::string name = g->uuid.empty() ? g->bus_id : g->uuid;
    if (!g->mig_enabled) {
      off.push_back(name);
      continue;
    }
    if (g->mig_devices.empty()) {
      empty.push_back(name);
      continue;
    }
    std::vector<std::string> profiles;
    for (const gpu::MigDeviceInfo& m : g->mig_devices) profiles.push_back(m.profile);
    enabled.push_back(name);
    r.evidence.push_back(absl::StrCat(name, ": MIG on, ", g->mig_devices.size(),
                                      " device(s): ", absl::StrJoin(profiles, ", ")));
  }
  if (!off.empty()) r.evidence.push_back(absl::StrCat("MIG off: ", absl::StrJoin(off, ", ")));
  if (!empty.empty()) {
    r.verdict = Verdict::kWarn;
    r.summary = absl::StrCat("MIG mode is on but no GPU instance exists on ",
                             absl::StrJoin(empty, ", "), ": nothing of that GPU can be allocated");
    r.fix =
        "Create instances (`nvidia-smi mig -i N -cgi PROFILE -C`, or NVIDIA's mig-parted "
        "with a layout), or turn MIG off (`nvidia-smi -i N -mig 0`, applied at the next GPU "
        "reset).";
    return r;
  }
  r.verdict = Verdict::kPass;
  r.summary = absl::StrCat(enabled.size(), " GPU(s) in MIG mode with instances, ", off.size(),
                           " MIG-capable GPU(s) with MIG off");
  return r;
}

// Which holds each sliced container's VRAM: gpulet's enforcement library (docs/sharing.md),
// loaded by the containers' dynamic loader, and on drivers from r615 with the kernel's dmem
// cgroup controller the driver itself too, a limit per container cgroup that gpulet sets
// (daemon/driver_limits.h). The same rules as the daemon's (node/dmem.h).
CheckResult CheckVram(const StackInput& in) {
  CheckResult r = CheckResultFor("vram.enforcement");
  const DoctorInput& d = in.input;
  if (!d.gpulet_slices) {
    return NotCheckedResult(std::move(r),
                            "memory slices (sharing.memorySlices) and DRA memory shares "
                            "(dra.memoryShares) are off: every container holds whole GPUs");
  }
  const std::string& version = in.inv.system.driver_version;
  absl::StatusOr<std::string> dmem = in.host.ReadFile(node::kDmemCapacityPath, 1 << 16);
  std::vector<std::string> listed;  // the GPUs whose memory the dmem controller accounts
  for (const gpu::Gpu& g : in.inv.gpus) {
    if (dmem.ok() && node::DmemCapacityLists(*dmem, g.bus_id)) {
      listed.push_back(g.index ? absl::StrCat("GPU ", *g.index) : g.bus_id);
    }
  }
  const bool driver_can = node::DriverHasMemoryLimits(version) && !listed.empty();
  r.evidence.push_back(absl::StrCat(
      "driver ", version.empty() ? "unknown" : version, "; ",
      dmem.ok()
          ? absl::StrCat(in.host.Describe(node::kDmemCapacityPath),
                         listed.empty() ? " lists no NVIDIA GPU"
                                        : absl::StrCat(" lists ", absl::StrJoin(listed, ", ")))
          : "no dmem cgroup controller (kernel 6.14+, cgroup v2)",
      driver_can ? ": the driver holds each sliced container's limit itself, set by gpulet per "
                   "container cgroup on those GPUs (not on a MIG-enabled one)"
                 : ": the driver holds no per-container limit; the library is the enforcement"));
  if (!d.gpulet_vram_enforce) {
    r.verdict = Verdict::kWarn;
    r.summary =
        "slices are accounting only (sharing.memorySlices.enforce: false): a container can take "
        "the whole card's memory from its neighbours";
    r.fix = "Set sharing.memorySlices.enforce: true (the default) in gpulet's config.";
    return r;
  }
  if (d.gpulet_vram_library.empty()) {
    r.verdict = Verdict::kFail;
    r.summary = absl::StrCat(
        "the VRAM enforcement library is missing, so gpulet refuses every "
        "sliced container: ",
        d.gpulet_vram_library_error);
    r.fix =
        "Run gpulet's own image (it ships the library at /usr/lib/gpulet/libgpulet-vram.so), or "
        "install it beside the gpulet binary.";
    return r;
  }
  r.evidence.push_back(absl::StrCat("the library gpulet ships: ", d.gpulet_vram_library));
  const std::string installed = absl::StrCat(d.gpulet_vram_host_dir, "/lib/libgpulet-vram.so");
  r.evidence.push_back(absl::StrCat(in.host.Describe(installed),
                                    in.host.Exists(installed)
                                        ? ": installed for containers"
                                        : ": not installed yet (gpulet installs it at the first "
                                          "sliced container)"));
  r.verdict = Verdict::kPass;
  r.summary = absl::StrCat(
      "gpulet's enforcement library holds each sliced container to its "
      "slices (",
      driver_can ? "and the driver holds them too, set per container by gpulet"
                 : "the driver has no limit of its own",
      ")");
  return r;
}

}  // namespace gpulet::doctor
