// The doctor checks of what surrounds the driver, which `gpulet explain`'s causes point at:
// the container runtime's configuration (containerd's facts, read here for the `containerd`
// check too, and CRI-O), the cgroup device controller, the unified-memory module's device,
// NVSwitch systems' fabric manager, DCGM's host engine, and MIG mode. Each says which
// systems and releases it applies to and is "not checked" elsewhere, saying why.
//
// Everything is read through HostFs; the one network probe (DCGM's host engine) goes
// through DoctorInput::tcp_probe, so tests use a fake.
//
// Thread-safety: pure functions over const inputs.
#ifndef GPULET_DOCTOR_STACK_CHECKS_H_
#define GPULET_DOCTOR_STACK_CHECKS_H_

#include <optional>
#include <string>
#include <vector>

#include "common/host_fs.h"
#include "doctor/doctor.h"
#include "gpu/gpu_model.h"

namespace gpulet::doctor {

// What containerd's configuration files say (/etc/containerd/config.toml, Talos'
// /etc/cri/containerd.toml and /etc/cri/conf.d/*.part), each fact with "file:line".
struct ContainerdFacts {
  std::vector<std::string> files;
  std::string nvidia_runtime;  // where runtimes.nvidia is configured
  std::optional<bool> enable_cdi;
  std::string enable_cdi_where;
  std::vector<std::string> cdi_spec_dirs;
  std::string cdi_spec_dirs_where;
  bool v3_config = false;              // plugins."io.containerd.cri.v1.runtime" (containerd 2)
  std::string default_runtime;         // default_runtime_name; "" = runc
  std::string default_runtime_where;   //
  std::optional<bool> systemd_cgroup;  // SystemdCgroup of a runtime's options
  std::string systemd_cgroup_where;
};
void ScanContainerdConfig(absl::string_view path, absl::string_view text, ContainerdFacts* f);

// The absolute paths quoted in a TOML list value (`["/etc/cdi", "/var/run/cdi"]`).
std::vector<std::string> QuotedPaths(absl::string_view value);
// Whether a runtime's CDI directories include /var/run/cdi, where gpulet and Talos write their
// specs (/run/cdi is the same directory).
bool ListsRunCdi(const std::vector<std::string>& dirs);
ContainerdFacts ReadContainerdConfig(const HostFs& host);

// What the stack checks read besides the host.
struct StackInput {
  const HostFs& host;
  const gpu::Inventory& inv;
  const DoctorInput& input;
  bool talos = false;
  // Containers get their GPUs through CDI (gpulet's strategy, or the Talos release's mode):
  // their device nodes are in the OCI spec, so the runtime's cgroup rules include them.
  bool cdi = false;
};

CheckResult CheckCgroupDevices(const StackInput& in);   // "cgroup.devices"
CheckResult CheckCrio(const StackInput& in);            // "crio"
CheckResult CheckUvm(const StackInput& in);             // "driver.uvm"
CheckResult CheckFabricManager(const StackInput& in);   // "fabricmanager"
CheckResult CheckDcgmHostEngine(const StackInput& in);  // "dcgm.hostengine"
CheckResult CheckMig(const StackInput& in);             // "mig.mode"
CheckResult CheckVram(const StackInput& in);            // "vram.enforcement"

}  // namespace gpulet::doctor

#endif  // GPULET_DOCTOR_STACK_CHECKS_H_
