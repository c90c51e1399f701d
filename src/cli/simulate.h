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
#include <utility>

#include "absl/status/statusor.h"
#include "cli/command.h"
#include "node/pci_reset.h"

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

// In a simulation, what resets a GPU (health.reset mode on in `gpulet --simulate F serve`):
// sim::ResetGpu on the simulator's state file, as the kernel's reset acts on a card, so that
// the reset rung runs end to end against the simulator. Thread-safe: each Reset reads and
// writes the file whole (the last writer wins against a concurrent `gpulet sim`).
class SimGpuResetter : public node::GpuResetter {
 public:
  explicit SimGpuResetter(std::string state_file) : state_file_(std::move(state_file)) {}
  absl::Status Reset(absl::string_view uuid, absl::string_view bus_id) override;

 private:
  std::string state_file_;
};

// The directory holding the running gpulet binary.
std::string ExecutableDir();

}  // namespace gpulet::cli

#endif  // GPULET_CLI_SIMULATE_H_
