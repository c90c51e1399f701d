#include "sim/fault_scripts.h"

#include <cstdint>

namespace gpulet::sim {
namespace {

// NVML's clocks event reasons (nvml.h): software and hardware thermal slowdown.
constexpr uint64_t kSwThermalSlowdown = 0x20;
constexpr uint64_t kHwThermalSlowdown = 0x40;
// NVML_FI_DEV_GET_GPU_RECOVERY_ACTION's NVML_GPU_RECOVERY_ACTION_GPU_RESET.
constexpr unsigned kRecoveryGpuReset = 1;
// The minor number a card comes back on after it fell off the bus (`returns-elsewhere`): one
// no bundled fixture uses (dgx8's are 0 to 7), so that a test can tell the two apart.
constexpr unsigned kReturnMinor = 12;
// How long after each reboot the `fails-after-reboot` card falls off the bus again: long
// enough for gpulet to start and serve it (a card that fails during boot is never identified,
// so nothing of the ladder acts on it).
constexpr double kFailsAfterRebootS = 30;

// XID 79 (the card fell off the bus) and NVML loses it.
bool OffTheBus(SimState* s, const std::string& gpu) {
  return InjectXid(s, gpu, 79) && SetLost(s, gpu, true);
}

// XID 48 (a double-bit ECC error, which the catalogue answers with a reset) with the driver
// asking for the reset; `again`: the card raises it anew after each reset. NVML keeps
// answering (no RESET_REQUIRED): the reset rung needs its process list to know the card is
// idle.
bool ResetClearable(SimState* s, const std::string& gpu, bool again) {
  return InjectXid(s, gpu, 48) && SetRecoveryAction(s, gpu, kRecoveryGpuReset) &&
         SetFaultsAfterReset(s, gpu, again);
}

}  // namespace

const std::vector<FaultScript>& FaultScripts() {
  static const std::vector<FaultScript>* scripts = new std::vector<FaultScript>{
      {"off-the-bus",
       "the PCIe link degrades, then the card falls off the bus (XID 79)",
       {{"PCIe replays climb to 120 (the link is failing)",
         [](SimState* s, const std::string& gpu) {
           LoadOverride load;
           load.pcie_replay = 120;
           return SetLoad(s, gpu, load);
         }},
        {"XID 79, and NVML loses the card (GPU_IS_LOST)", OffTheBus}}},
      {"thermal-hang",
       "a thermal excursion, then the card hangs",
       {{"94 C, with software and hardware thermal slowdown",
         [](SimState* s, const std::string& gpu) {
           LoadOverride load;
           load.temperature_c = 94;
           load.clocks_event_reasons = kSwThermalSlowdown | kHwThermalSlowdown;
           return SetLoad(s, gpu, load);
         }},
        {"every call on the card hangs (3600 s)",
         [](SimState* s, const std::string& gpu) { return SetHang(s, gpu, 3600); }}}},
      {"recovers-on-reset",
       "XID 48 with the driver asking for a GPU reset, which clears it",
       {{"XID 48, and the driver's recovery action GPU_RESET",
         [](SimState* s, const std::string& gpu) { return ResetClearable(s, gpu, false); }}}},
      {"fails-after-reset",
       "a failing card: XID 48 asks for a reset, and comes back after every reset",
       {{"XID 48, and the driver's recovery action GPU_RESET; XID 48 again after each reset",
         [](SimState* s, const std::string& gpu) { return ResetClearable(s, gpu, true); }}}},
      {"fails-after-reboot",
       "a failing card: it falls off the bus (XID 79), and again after every reboot",
       {{"XID 79, and NVML loses the card; after each `gpulet sim reboot` it is back for 30 s, "
         "then XID 79 and lost again",
         [](SimState* s, const std::string& gpu) {
           return OffTheBus(s, gpu) && SetFailsAfterReboot(s, gpu, kFailsAfterRebootS);
         }}}},
      {"returns-elsewhere",
       "the card falls off the bus, then comes back on another minor number",
       {{"XID 79, and NVML loses the card (GPU_IS_LOST)", OffTheBus},
        {"the card answers again, as /dev/nvidia12 (a PCI rescan enumerated it anew)",
         [](SimState* s, const std::string& gpu) {
           return SetLost(s, gpu, false) && SetMinor(s, gpu, kReturnMinor);
         }}}},
  };
  return *scripts;
}

const FaultScript* FindFaultScript(std::string_view name) {
  for (const FaultScript& s : FaultScripts()) {
    if (name == s.name) return &s;
  }
  return nullptr;
}

std::string FaultScriptNames() {
  std::string out;
  for (const FaultScript& s : FaultScripts()) {
    if (!out.empty()) out += ", ";
    out += s.name;
  }
  return out;
}

}  // namespace gpulet::sim
