// The doctor's own checks (the ones of what surrounds the driver are stack_checks.h), one
// file per area: driver_checks.cc (the OS, the PCI bus and kernel driver, NVML and the
// user-space libraries, Talos), container_checks.cc (CDI, containerd, the kubelet) and
// kernel_log_check.cc; doctor.cc runs them in check_list.h's order and keeps what they share.
// Internal to doctor/: nothing outside includes it.
//
// Thread-safety: pure functions over const inputs.
#ifndef GPULET_DOCTOR_CHECKS_H_
#define GPULET_DOCTOR_CHECKS_H_

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "cdi/spec_dirs.h"
#include "common/host_fs.h"
#include "doctor/doctor.h"
#include "gpu/gpu_model.h"
#include "node/os_release.h"

namespace gpulet::doctor {

inline constexpr size_t kMaxListed = 8;  // evidence lines per kind before "... and N more"

// The modules a Talos machine config must list (the kmod extensions blacklist them).
inline constexpr char kTalosModulesYaml[] =
    "machine:\n  kernel:\n    modules:\n      - name: nvidia\n      - name: nvidia_uvm\n"
    "      - name: nvidia_drm\n      - name: nvidia_modeset";

// Everything the checks share: the inputs, plus facts worked out once.
struct Context {
  const HostFs& host;
  const gpu::Inventory& inv;
  const DoctorInput& input;
  node::OsInfo os;
  std::optional<TalosExpectations> talos;  // unset off Talos and on unsupported releases
  std::string talos_unsupported;           // why a Talos release has no row (older than 1.8)
  std::vector<const gpu::Gpu*> pci_gpus;   // NVIDIA GPUs on the PCI bus
  std::optional<cdi::SpecCatalog> catalog;
};

// Raises `r`'s verdict to `v` when `v` is worse.
void Worsen(CheckResult* r, Verdict v);
// Appends at most kMaxListed of `lines`, then "... and N more".
void AddLimited(std::vector<std::string>* out, const std::vector<std::string>& lines);
// "0000:01:00.0 (NVIDIA GeForce RTX 3080, Ampere)".
std::string GpuLabel(const gpu::Gpu& gpu);
// "Talos 1.12.1".
std::string TalosName(const Context& c);
// The fix text for loading the kernel modules, per OS.
std::string ModulesFix(const Context& c);

// driver_checks.cc
CheckResult CheckOs(const Context& c);                  // "os"
CheckResult CheckGpuPresent(const Context& c);          // "gpu.present"
CheckResult CheckDriverBound(const Context& c);         // "gpu.driver"
CheckResult CheckFlavor(const Context& c);              // "driver.flavor"
CheckResult CheckModules(const Context& c);             // "driver.modules"
CheckResult CheckDevNodes(const Context& c);            // "dev.nodes"
CheckResult CheckNvml(const Context& c);                // "nvml.load"
CheckResult CheckUserspace(const Context& c);           // "driver.userspace"
CheckResult CheckTalosSysctl(const Context& c);         // "talos.bpf"
CheckResult CheckTalosMachineConfig(const Context& c);  // "talos.config"

// container_checks.cc
CheckResult CheckCdiSpecs(const Context& c);    // "cdi.specs"
CheckResult CheckGpuletCdi(const Context& c);   // "cdi.gpulet"
CheckResult CheckCdiResolve(const Context& c);  // "cdi.resolve"
CheckResult CheckCdiHooks(const Context& c);    // "cdi.hooks"
CheckResult CheckCdiPaths(const Context& c);    // "cdi.paths"
CheckResult CheckContainerd(const Context& c);  // "containerd"
CheckResult CheckKubelet(const Context& c);     // "kubelet"

// kernel_log_check.cc
CheckResult CheckKernelLog(const Context& c);  // "kernel.log"

}  // namespace gpulet::doctor

#endif  // GPULET_DOCTOR_CHECKS_H_
