// GpuResetter: resets one GPU, the reset rung's hand on the hardware (daemon/reset_rung.h).
//
// NVML offers no public call that resets a GPU (nvml.h 12.6 has only clock and counter
// resets; `nvidia-smi -r` uses an interface of its own), so the real one is the kernel's PCI
// function reset: writing "1" to /sys/bus/pci/devices/<address>/reset
// (Documentation/ABI/testing/sysfs-bus-pci), which the kernel carries out with the best
// method the device and its slot offer (FLR, a power-management reset, a secondary bus reset)
// and with the bound driver told before and after. It is the same file `echo 1 > .../reset`
// writes, reached under the host root (HostFs: a symlink in a hostile tree cannot lead the
// write outside it), and it needs what that write needs: root with CAP_SYS_ADMIN and /sys
// mounted writable (deploy/reset).
//
// In a simulation (`gpulet --simulate`), cli::SimGpuResetter resets the simulated card
// instead; tests use it, or one of their own.
//
// Thread-safety: Reset may be called from any thread; the real one holds no state.
#ifndef GPULET_NODE_PCI_RESET_H_
#define GPULET_NODE_PCI_RESET_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/host_fs.h"

namespace gpulet::node {

class GpuResetter {
 public:
  virtual ~GpuResetter() = default;
  // Resets the GPU `uuid` at PCI address `bus_id` (any spelling ParsePciAddress takes; the
  // kernel's reset goes by the address, the simulator's by the UUID). Errors:
  // InvalidArgument for an address that is not one; NotFound when the kernel offers no reset
  // for it (no such device, or no reset file: no method the device supports);
  // PermissionDenied when the write is not allowed (not root, /sys read-only: the message
  // says what to grant); Unavailable when the kernel tried and failed (the device did not
  // come back; a node reboot is what is left).
  virtual absl::Status Reset(absl::string_view uuid, absl::string_view bus_id) = 0;
};

// The PCI function reset through sysfs under `host` (which must outlive it).
class SysfsGpuResetter : public GpuResetter {
 public:
  explicit SysfsGpuResetter(const HostFs* host) : host_(host) {}
  absl::Status Reset(absl::string_view uuid, absl::string_view bus_id) override;

 private:
  const HostFs* host_;
};

}  // namespace gpulet::node

#endif  // GPULET_NODE_PCI_RESET_H_
