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

std::string GpuLabel(const gpu::Gpu& gpu) {
  std::string arch = gpu.architecture == node::Architecture::kUnknown
                         ? ""
                         : absl::StrCat(", ", node::ArchitectureName(gpu.architecture));
  return absl::StrCat(gpu.bus_id.empty() ? gpu.uuid : gpu.bus_id, " (",
                      gpu.name.empty() ? "unknown NVIDIA GPU" : gpu.name, arch, ")");
}

std::string TalosName(const Context& c) {
  return absl::StrCat("Talos ", c.os.version_id.empty() ? "?" : c.os.version_id);
}

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

namespace {

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

std::vector<GpuHealth> HealthFromStatus(const state::StatusReport& report) {
  std::vector<GpuHealth> out;
  for (const state::GpuStatus& g : report.gpus) {
    GpuHealth h;
    h.gpu = g.index
                ? absl::StrCat("GPU ", *g.index, " (", g.uuid.empty() ? g.pci_bus_id : g.uuid, ")")
                : (g.uuid.empty() ? g.pci_bus_id : g.uuid);
    h.healthy = g.health != state::HealthState::kUnhealthy;
    h.degraded = g.health == state::HealthState::kDegraded;
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
  const node::Release* row = nullptr;
  if (major == 0) {
    row = &node::NewestRelease();
    t.warning = absl::StrCat("the Talos version is unknown; assuming ", row->Name());
  } else if (absl::StatusOr<node::Match> m = node::FindRelease(major, minor); m.ok()) {
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
  t.cdi_mode = row->runtime_mode.value == node::RuntimeMode::kCdi;
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
  c.os = node::ReadOsRelease(c.host);
  if (c.os.talos) {
    TalosExpectations t = ExpectationsFor(c.os.talos_major, c.os.talos_minor);
    if (t.release != nullptr) {
      c.talos = std::move(t);
    } else {
      c.talos_unsupported = t.warning;
    }
  }
  for (const gpu::Gpu& g : c.inv.gpus) {
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
    for (const gpu::Gpu& g : c.inv.gpus) have_gpu |= g.in_nvml;
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
