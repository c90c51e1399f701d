#include "cli/commands.h"

#include <cstdio>

#include "cli/simulate.h"

namespace gpulet {

std::span<const Command> Commands() {
  static const Command kCommands[] = {
      {"list", "List the node's NVIDIA GPUs (NVML and PCI views merged)", &MakeListCommand},
      {"sim", "Inject faults and load into the NVML simulator (with --simulate)",
       &MakeSimCommand},
      {"version", "Print gpulet's version", &MakeVersionCommand},
  };
  return kCommands;
}

bool PrepareDiscovery(CommandContext& ctx, DiscoveryOptions* out, bool quiet_simulation) {
  GlobalOptions& g = ctx.global;
  if (!g.simulate.empty()) {
    absl::StatusOr<Simulation> sim = ApplySimulation(g, quiet_simulation);
    if (!sim.ok()) {
      std::fprintf(stderr, "gpulet: %s\n", std::string(sim.status().message()).c_str());
      return false;
    }
  }
  out->host_root = g.host_root;
  out->nvml.explicit_path = g.nvml_lib;
  out->nvml.probe_timeout = absl::Seconds(g.probe_timeout_s);
  out->call_timeout = absl::Seconds(g.call_timeout_s);
  return true;
}

}  // namespace gpulet
