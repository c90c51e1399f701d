// Factories for the commands in the table (command.h). Each lives in its own
// <name>_command.cc beside this file.
//
// Thread-safety: factories are pure.
#ifndef GPULET_CLI_COMMANDS_H_
#define GPULET_CLI_COMMANDS_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/command.h"
#include "doctor/doctor.h"
#include "nvml/discovery.h"

namespace gpulet::cli {

std::unique_ptr<CommandHandler> MakeCdiCommand();
std::unique_ptr<CommandHandler> MakeDoctorCommand();
std::unique_ptr<CommandHandler> MakeExplainCommand();
std::unique_ptr<CommandHandler> MakeImageServeCommand();
std::unique_ptr<CommandHandler> MakeLabelsCommand();
std::unique_ptr<CommandHandler> MakeListCommand();
std::unique_ptr<CommandHandler> MakeManifestsCommand();
std::unique_ptr<CommandHandler> MakePostmortemCommand();
std::unique_ptr<CommandHandler> MakeRetiredCommand();
std::unique_ptr<CommandHandler> MakeVersionCommand();
std::unique_ptr<CommandHandler> MakeServeCommand();
std::unique_ptr<CommandHandler> MakeSimCommand();
std::unique_ptr<CommandHandler> MakeStatusCommand();

// Shared by commands that look at the node: applies --simulate, then discovers. Returns
// false (after printing why) when the options are unusable.
bool PrepareDiscovery(CommandContext& ctx, nvml::DiscoveryOptions* out, bool quiet_simulation);

// What `gpulet doctor` is told besides the node (its flags; `gpulet explain --check` passes
// the same).
struct DoctorOptions {
  std::string config_file;     // the daemon's config ("" = defaults)
  std::string daemon_address;  // gpulet serve's metrics address, for GPU health ("" = none)
  std::vector<std::string> spec_dirs;
};

// Discovers the node and runs every doctor check on it. nullopt (after printing why, as
// `who`) on a usage error: bad --simulate, config file or daemon address.
std::optional<doctor::Report> DoctorOnNode(CommandContext& ctx, const DoctorOptions& options,
                                           const char* who);

}  // namespace gpulet::cli

#endif  // GPULET_CLI_COMMANDS_H_
