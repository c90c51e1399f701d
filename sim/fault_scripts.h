// Fault scripts: what a failing card goes through, step by step, as `gpulet sim script NAME
// GPU` plays it on a running simulator (docs/remediation.md, "The seed's lockup, in the
// simulator"). Each step is one edit of the fault-injection state (sim/state.h) that the
// simulator picks up on its next NVML call; the command waits `--pace` between steps, so that
// gpulet's sampler and flight recorder see the build-up before the fault, as they would on a
// node.
//
// The scripts, and which of gpulet's rungs each one is for:
//   off-the-bus        PCIe replays climb, then XID 79 and NVML loses the card: the reboot
//                      rung (only a reboot clears it) and the recorder's hardware verdict.
//   thermal-hang       94 °C with thermal slowdown, then every call on the card hangs: the
//                      liveness probe, and the verdict's thermal excursion before the fault.
//   recovers-on-reset  XID 48 with the driver asking for a GPU reset: the reset rung, whose
//                      reset clears it (`gpulet sim reset`, what the kernel's reset does).
//   fails-after-reset  the same on a failing card, which raises XID 48 again after every
//                      reset: the reset rung's second fault, escalated to inspect-hardware.
//   fails-after-reboot XID 79 and a lost card that `gpulet sim reboot` (sim::RebootNode)
//                      brings back for 30 s, then XID 79 and lost again: the reboot rung's
//                      budget, and retirement.
//   returns-elsewhere  XID 79 and a lost card, then the card answering again on minor 12:
//                      the inventory taken again when the driver serves a GPU anew.
// The host's side of a fault (AER counters in sysfs, a kernel log line, the driver's
// /proc/driver/nvidia/gpus/<bus>/information and /dev/nvidia<minor> after a card came back)
// is not the simulator's: tests write it under their host root.
//
// Thread-safety: the table is immutable; a step's edit changes only the state it is given.
#ifndef GPULET_SIM_FAULT_SCRIPTS_H_
#define GPULET_SIM_FAULT_SCRIPTS_H_

#include <string>
#include <string_view>
#include <vector>

#include "sim/state.h"

namespace gpulet::sim {

struct FaultStep {
  const char* what;  // what the step does, for the command's output
  // The edit; false (nothing changed) for a bad key.
  bool (*apply)(SimState* state, const std::string& gpu_key);
};

struct FaultScript {
  const char* name;
  const char* summary;  // one line, for --help and the command's output
  std::vector<FaultStep> steps;
};

// Every script, in the order above.
const std::vector<FaultScript>& FaultScripts();
// nullptr when no script has that name.
const FaultScript* FindFaultScript(std::string_view name);
// "off-the-bus, thermal-hang, ...", for error messages.
std::string FaultScriptNames();

}  // namespace gpulet::sim

#endif  // GPULET_SIM_FAULT_SCRIPTS_H_
