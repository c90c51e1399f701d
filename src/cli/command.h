// The gpulet command table: every subcommand is one entry (name, one-line summary, option
// setup, handler), so `gpulet help` and the "did you mean" suggestion come from one place.
//
// Options common to all commands (--host-root, --nvml-lib, --simulate, ...) live in
// GlobalOptions and may appear before or after the command name. A handler returns the
// process exit code; errors are printed by the handler itself, in words a node operator can
// act on.
//
// Thread-safety: the table is immutable; commands run on the main thread.
#ifndef GPULET_CLI_COMMAND_H_
#define GPULET_CLI_COMMAND_H_

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/string_view.h"

namespace gpulet::cli {

// Exit codes shared by all commands, distinct so that scripts can tell "you called me
// wrong" from "the node has a problem". Documented in the README's "Using it" section.
enum ExitCode : int {
  kExitOk = 0,
  kExitFailure = 1,      // the command ran and found a problem (NVML unusable, a GPU
                         // unhealthy, doctor warnings, ...)
  kExitUsage = 2,        // bad command line or configuration: nothing was checked
  kExitCheckFailed = 3,  // `gpulet doctor`: at least one check failed (doctor::Report::ExitCode)
};

struct GlobalOptions {
  std::string host_root = "/";   // where the host's file system is visible
  bool host_root_given = false;  // --host-root or GPULET_HOST_ROOT was set, "/" included
  std::string nvml_lib;          // --nvml-lib: explicit libnvidia-ml path
  std::string simulate;          // --simulate FIXTURE
  std::string sim_state;         // --sim-state PATH (default: per-user runtime dir)
  double probe_timeout_s = 15;   // child-process NVML probe deadline
  double call_timeout_s = 10;    // deadline for one batch of NVML calls on one GPU
  bool verbose = false;
};

// What every command gets besides its own options.
struct CommandContext {
  GlobalOptions global;
};

// One command's options and behaviour. A fresh handler is made for each run.
class CommandHandler {
 public:
  virtual ~CommandHandler() = default;
  // Adds the command's own options and positional arguments to `app`.
  virtual void AddOptions(CLI::App& app) { (void)app; }
  // Runs the command; returns the exit code.
  virtual int Run(CommandContext& ctx) = 0;
};

struct Command {
  const char* name;
  const char* summary;
  std::unique_ptr<CommandHandler> (*make)();
};

// The table, in the order `gpulet help` prints it.
std::span<const Command> Commands();

// Entry point used by main(): parses argv, dispatches, returns the exit code.
int RunCli(int argc, char** argv);

// The closest command name to `name` by edit distance, or "" if none is close.
std::string SuggestCommand(absl::string_view name);

// Registers the global options on `app` (exposed so each command's parser accepts them).
void AddGlobalOptions(CLI::App& app, GlobalOptions& options);

}  // namespace gpulet::cli

#endif  // GPULET_CLI_COMMAND_H_
