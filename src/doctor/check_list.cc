#include "doctor/check_list.h"

namespace gpulet::doctor {
namespace {

constexpr CheckInfo kChecks[] = {
    {"os.release", "Operating system"},
    {"gpu.present", "NVIDIA GPU on the PCI bus"},
    {"gpu.driver", "Kernel driver bound to each GPU"},
    {"driver.flavor", "Kernel module flavour fits each GPU"},
    {"driver.modules", "NVIDIA kernel modules loaded"},
    {"dev.nodes", "/dev/nvidia* device nodes"},
    {"nvml.load", "NVML library loads"},
    {"driver.userspace", "Driver libraries where this OS keeps them"},
    {"talos.bpf", "BPF sysctl for the legacy nvidia runtime"},
    {"talos.config", "Machine configuration takes gpulet's patch"},
    {"cdi.specs", "CDI specs present and loadable"},
    {"cdi.gpulet", "The CDI devices gpulet's answers name resolve"},
    {"cdi.resolve", "nvidia.com/gpu=0 and =all resolve"},
    {"cdi.hooks", "CDI hook programs exist on the host"},
    {"cdi.paths", "CDI mounts and device nodes exist on the host"},
    {"containerd", "containerd: nvidia runtime and/or CDI"},
    {"kubelet", "kubelet device-plugin and pod-resources sockets"},
    {"driver.uvm", "Unified-memory module and its device nodes"},
    {"mig.mode", "MIG mode and instances"},
    {"fabricmanager", "Fabric manager on NVSwitch systems"},
    {"cgroup.devices", "cgroup device access for GPU containers"},
    {"crio", "CRI-O: nvidia runtime, hook or CDI"},
    {"dcgm.hostengine", "DCGM host engine reachable"},
    {"vram.enforcement", "VRAM limits of memory slices"},
    {"gpu.health", "GPU health (XIDs, ECC, fallen off the bus)"},
    {"kernel.log", "Kernel log since boot: XIDs, NVRM errors, GPUs fallen off the bus"},
};

}  // namespace

absl::Span<const CheckInfo> CheckList() { return kChecks; }

absl::string_view CheckTitle(absl::string_view id) {
  for (const CheckInfo& c : kChecks) {
    if (c.id == id) return c.title;
  }
  return "";
}

}  // namespace gpulet::doctor
