// gpulet doctor: checks, one by one, everything that has to be true on a node for a pod to
// get an NVIDIA GPU, and says for each what it found (with the evidence: which file said
// what) and the exact fix.
//
// The checks follow the chain a GPU container depends on, in order, and each failure mode
// of the field report and of Talos' history has one: a GPU on the PCI bus; bound to the
// nvidia driver (not unbound, nouveau or vfio-pci); the right kernel-module flavour for its
// generation (Blackwell needs the open modules, pre-Turing the proprietary ones); the four
// modules loaded (Talos loads nothing unless machine.kernel.modules lists it); the /dev
// nodes; an NVML library that loads (found, right glibc, does not crash); driver libraries
// where this OS (and this Talos version) keeps them, of the kernel module's version; the
// BPF sysctl Talos' legacy runtime mode needs; CDI specs that load, resolve
// nvidia.com/gpu=0 and =all, and whose hooks and mounts exist on the host (the Talos
// `/usr/bin/nvidia-ctk` trap); containerd set up with the nvidia runtime and/or CDI; the
// kubelet's device-plugin and pod-resources sockets. When no NVIDIA GPU is present at all,
// that is said plainly and the checks that depend on one are reported as not checked.
//
// Everything is read through HostFs (so `--host-root` and the fixture roots work) and from
// the Inventory that discovery built, which carries the NVML load attempts; the doctor
// itself never loads NVML or changes anything.
//
// GPU health: a GPU can be present, bound and loadable yet unusable (fallen off the bus,
// XID 79, uncorrectable ECC errors, pending row remapping). Those states are observed over
// time by the health monitors inside `gpulet serve`, not by a one-shot command, so the
// "gpu.health" check asks a HealthSource: `gpulet doctor --daemon-address` passes one that
// reads the running daemon's /status (HealthFromStatus). Without one, or when the daemon
// cannot be asked, the check is reported as not checked, saying why.
//
// Thread-safety: RunDoctor keeps no state; it reads through the const HostFs and inventory.
#ifndef GPULET_DOCTOR_DOCTOR_H_
#define GPULET_DOCTOR_DOCTOR_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/host_fs.h"
#include "gpu/gpu_model.h"
#include "nlohmann/json_fwd.hpp"
#include "node/os_release.h"
#include "node/talos_releases.h"
#include "state/status_report.h"

namespace gpulet::doctor {

enum class Verdict {
  kPass,
  kWarn,        // works, or may, but something is off; exit code 1
  kFail,        // GPUs will not work in pods until fixed; exit code 3
  kNotChecked,  // the check could not run or does not apply (the summary says why)
};

// "pass", "warn", "fail", "not checked".
absl::string_view VerdictName(Verdict verdict);

struct CheckResult {
  std::string id;     // stable, for scripts: "gpu.present", "cdi.hooks", ...
  std::string title;  // "NVIDIA GPU on the PCI bus"
  Verdict verdict = Verdict::kNotChecked;
  std::string summary;                // one sentence: what is true
  std::vector<std::string> evidence;  // what was read, each naming its source
  std::string fix;                    // what to do; empty on pass and not checked
};

// For the checks' own code: a result with its id and the title doctor/check_list gives it
// (verdict to be set); one that could not run or does not apply, its summary
// "not checked: <why>", keeping any evidence `r` holds.
CheckResult CheckResultFor(absl::string_view id);
CheckResult NotCheckedResult(CheckResult r, absl::string_view why);
CheckResult NotCheckedResult(absl::string_view id, absl::string_view why);

// What a Talos version expects of the NVIDIA extensions: a view of its row in the release
// table (src/node/talos_releases.h), which holds each fact with its source.
struct TalosExpectations {
  std::string label;                    // the row: "Talos 1.12"
  std::string library_dir;              // where the toolkit extension puts libnvidia-ml & co.
  bool cdi_mode = false;                // containers get GPUs through CDI (1.13+), not legacy mode
  bool needs_bpf_jit_harden_1 = false;  // legacy nvidia-container-cli loads BPF programs
  bool kernel_module_config_docs = false;  // 1.14+: KernelModuleConfig, not machine.kernel
  const node::Release* release = nullptr;  // the row; null when unsupported (older than 1.8)
  std::string warning;  // newer than the table (row = newest), or why it is unsupported
};
// major 0 (an unparseable version) gets the newest row, with a warning.
TalosExpectations ExpectationsFor(int talos_major, int talos_minor);

// One GPU's state as the health monitor sees it.
struct GpuHealth {
  std::string gpu;  // UUID or bus id
  bool healthy = true;
  // Healthy but with a warning (Degraded: still scheduled, e.g. a pending row remap).
  bool degraded = false;
  std::string reason;  // "XID 79: GPU has fallen off the bus"
  std::string fix;     // "reset the GPU or reboot the node"
};

// Each GPU of a running daemon's /status, as GpuHealth.
std::vector<GpuHealth> HealthFromStatus(const state::StatusReport& report);

// Where GPU health comes from (see the header comment). Implementations must be safe to
// call from the thread running the doctor.
class HealthSource {
 public:
  virtual ~HealthSource() = default;
  // The health of each GPU, or an error saying why it is unknown (daemon unreachable...).
  virtual absl::StatusOr<std::vector<GpuHealth>> GpuHealthStates() const = 0;
};

struct DoctorInput {
  const HostFs* host = nullptr;               // REQUIRES: non-null
  const gpu::Inventory* inventory = nullptr;  // REQUIRES: non-null; from DiscoverNode
  const HealthSource* health = nullptr;       // null: health is "not checked"
  // CDI spec directories (host paths), lowest priority first; empty = the defaults.
  std::vector<std::string> cdi_spec_dirs;
  // From the daemon's configuration (`gpulet serve --config`): whether its Allocate answers
  // name CDI devices (cdi-cri or cdi-annotations), the names they use for this node's GPUs
  // ("gpulet.dev/gpu=GPU-…"), and the host directory `gpulet serve` writes their spec to
  // ("" when it writes none).
  bool gpulet_uses_cdi = false;
  std::vector<std::string> gpulet_cdi_names;
  std::string gpulet_cdi_spec_dir;
  // Connects to HOST:PORT over TCP and closes (a service answers): the dcgm.hostengine
  // check's one network look. Null: that check is "not checked".
  std::function<absl::Status(const std::string& host, int port)> tcp_probe;
  // VRAM enforcement (docs/sharing.md), from the daemon's configuration: whether memory
  // slices or DRA memory shares are served, whether the enforcement library holds them, the
  // host directory of its files, and the library gpulet ships beside itself ("" when not
  // found: `gpulet_vram_library_error` says why).
  bool gpulet_slices = false;
  bool gpulet_vram_enforce = true;
  std::string gpulet_vram_host_dir;
  std::string gpulet_vram_library;
  std::string gpulet_vram_library_error;
};

struct Report {
  std::string host_root;
  node::OsInfo os;
  std::vector<CheckResult> checks;

  // 0 when nothing warned or failed, 1 with warnings only, 3 with any failure (2 is the
  // CLI's usage error: cli/command.h kExit*).
  int ExitCode() const;
  const CheckResult* Find(absl::string_view id) const;
};

Report RunDoctor(const DoctorInput& input);

// Human-readable report: one block per check (verdict, title, summary, evidence, fix) and
// a closing count.
std::string FormatReport(const Report& report, bool verbose);

// {"host_root", "os", "checks": [{id, title, verdict, summary, evidence, fix}],
//  "summary": {pass, warn, fail, not_checked}, "exit_code"}.
void to_json(nlohmann::json& out, const Report& report);

}  // namespace gpulet::doctor

#endif  // GPULET_DOCTOR_DOCTOR_H_
