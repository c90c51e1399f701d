// --simulate FIXTURE: points gpulet at the bundled NVML simulator and a fixture host root.
//
// The simulator is a real shared library loaded through the same loader as a real
// libnvidia-ml (nothing in the daemon knows it is simulated). This file only finds the
// assets (the library next to the binary or under ../lib/gpulet, fixtures under ./fixtures
// or ../share/gpulet/fixtures), chooses the fault-injection state file, and passes both to
// the simulator through its environment variables before NVML is loaded.
//
// Thread-safety: call once, on the main thread, before any other thread starts (it sets
// environment variables).
#ifndef GPULET_CLI_SIMULATE_H_
#define GPULET_CLI_SIMULATE_H_

#include <string>

#include "absl/status/statusor.h"
#include "cli/command.h"

namespace gpulet::cli {

struct Simulation {
  std::string fixture_name;  // "homelab"
  std::string fixture_yaml;  // .../fixtures/homelab.yaml
  std::string host_root;     // .../fixtures/homelab/root
  std::string library;       // .../libgpulet-nvml-sim.so
  std::string state_file;    // where `gpulet sim ...` writes faults
};

// Finds the assets for `options.simulate` (a bundled fixture name or a path to a fixture
// .yaml). Does not change anything. NotFound names every place looked at.
absl::StatusOr<Simulation> FindSimulation(const GlobalOptions& options);

// FindSimulation, then rewrites `options` (nvml_lib and host_root, unless the user set them)
// and exports GPULET_SIM_FIXTURE / GPULET_SIM_STATE for the simulator. Prints one line to
// stderr saying what is simulated and where the state file is, unless `quiet`.
absl::StatusOr<Simulation> ApplySimulation(GlobalOptions& options, bool quiet);

// The directory holding the running gpulet binary.
std::string ExecutableDir();

}  // namespace gpulet::cli

#endif  // GPULET_CLI_SIMULATE_H_
