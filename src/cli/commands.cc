#include "cli/commands.h"

#include <cstdio>

#include "cli/simulate.h"

namespace gpulet::cli {

std::span<const Command> Commands() {
  static const Command kCommands[] = {
      {"cdi", "Write (cdi generate) or list (cdi list) CDI specs", &MakeCdiCommand},
      {"doctor", "Check the node's GPU stack and say what to fix", &MakeDoctorCommand},
      {"explain", "Explain an error message: its cause and the fix", &MakeExplainCommand},
      {"image-serve", "Serve gpulet's image archive as a registry to nodes that have none",
       &MakeImageServeCommand},
      {"labels", "Write GPU node labels (gpu-feature-discovery compatible) for NFD",
       &MakeLabelsCommand},
      {"list", "List the node's NVIDIA GPUs (NVML and PCI views merged)", &MakeListCommand},
      {"manifests", "Print the Kubernetes manifests that install gpulet, fitted to this node",
       &MakeManifestsCommand},
      {"postmortem", "Read a GPU fault's flight recording back: its timeline and cause",
       &MakePostmortemCommand},
      {"retired", "List the GPUs kept out for faulting again and again, or return one (--clear)",
       &MakeRetiredCommand},
      {"serve", "Run the node daemon: device plugin, metrics, health", &MakeServeCommand},
      {"sim", "Inject faults and load into the NVML simulator (with --simulate)", &MakeSimCommand},
      {"status", "Show per-GPU health and use from the running daemon", &MakeStatusCommand},
      {"version", "Print gpulet's version", &MakeVersionCommand},
  };
  return kCommands;
}

bool PrepareDiscovery(CommandContext& ctx, nvml::DiscoveryOptions* out, bool quiet_simulation) {
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

}  // namespace gpulet::cli
