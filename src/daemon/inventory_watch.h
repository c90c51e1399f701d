// InventoryWatch: when the GPUs the nvidia driver serves now (node::ReadDriverGpus, its
// procfs) differ from the inventory gpulet serves in a way only a new inventory mends.
//
// NVML enumerates GPUs once per session, so gpulet's inventory goes stale when the driver
// serves a GPU anew behind its back: a card that fell off the bus comes back after a PCI
// rescan on another minor number, a card is swapped, the driver loads after gpulet started
// (a Talos extension, a driver container), or a reload enumerates the cards differently.
// Each of these shows at once in the driver's procfs. The Daemon's file check asks Check
// every round; a difference sends the "gpulet-reset" thread to take the inventory again
// (Daemon::TakeInventoryAgain), as after its own reset.
//
// What counts, per GPU the driver lists (excluded GPUs and those without a bus ID aside):
//  - no served GPU at its bus ID, or one served without the driver (no minor number);
//  - a minor number other than the served one;
//  - a UUID other than the served one (both known).
// A served GPU the driver no longer lists does not count: it fell off the bus, which the
// lost-GPU rules and the reboot rung handle, and a new inventory would drop it and its
// faults with it. Nothing counts while the driver's procfs cannot be read.
//
// Check returns a difference once: the same difference again (a new inventory that did not
// mend it, say NVML not seeing the card) is not returned until it has cleared, so gpulet
// never restarts its components in a loop.
//
// Thread-safety: not thread-safe; the Daemon calls it from the file check's thread only.
#ifndef GPULET_DAEMON_INVENTORY_WATCH_H_
#define GPULET_DAEMON_INVENTORY_WATCH_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gpu/gpu_model.h"
#include "node/driver_gpus.h"

namespace gpulet::daemon {

class InventoryWatch {
 public:
  // What differs, for the log ("GPU-8a41... at 0000:02:00.0 is /dev/nvidia12 now (served
  // as /dev/nvidia1)"; several joined by "; "), or "" when there is nothing (new) to do.
  std::string Check(const gpu::Inventory& served,
                    const absl::StatusOr<std::vector<node::DriverGpu>>& driver);

 private:
  std::string acted_on_;  // the last difference returned
};

}  // namespace gpulet::daemon

#endif  // GPULET_DAEMON_INVENTORY_WATCH_H_
