#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cli/command.h"
#include "common/build_info.h"

namespace gpulet::cli {
namespace {

// Global options that take a value, so the command-name scan can skip their argument.
constexpr const char* kValueOptions[] = {"--host-root", "--nvml-lib",      "--simulate",
                                         "--sim-state", "--probe-timeout", "--call-timeout"};

bool TakesValue(absl::string_view arg) {
  for (const char* opt : kValueOptions) {
    if (arg == opt) return true;
  }
  return false;
}

// A deadline flag: seconds ("15", "0.5") or a duration ("30s", "500ms", "1m"), finite and
// within [min_s, max_s]; the value is handed on as a number of seconds.
CLI::Validator DeadlineSeconds(double min_s, double max_s) {
  const std::string range = absl::StrCat(min_s, " to ", max_s, " seconds");
  return CLI::Validator(
      [min_s, max_s, range](std::string& text) -> std::string {
        double seconds = 0;
        absl::Duration d;
        if (absl::SimpleAtod(text, &seconds)) {
          // SimpleAtod takes "nan" and "inf"; neither is a deadline.
        } else if (absl::ParseDuration(text, &d) && d != absl::InfiniteDuration() &&
                   d != -absl::InfiniteDuration()) {
          seconds = absl::ToDoubleSeconds(d);
        } else {
          return absl::StrCat("'", text, "' is not a number of seconds or a duration; give ",
                              "e.g. 15, 0.5 or 30s (", range, ")");
        }
        if (!std::isfinite(seconds)) {
          return absl::StrCat("'", text, "' is not a finite number of seconds; give ", range);
        }
        if (seconds < min_s || seconds > max_s) {
          return absl::StrCat("'", text, "' is out of range; give ", range);
        }
        text = absl::StrCat(seconds);
        return std::string();
      },
      absl::StrCat("SECONDS in [", min_s, ", ", max_s, "]"));
}

size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

void PrintHelp(FILE* out) {
  std::fprintf(out,
               "gpulet %s: makes NVIDIA GPUs work on Kubernetes nodes.\n\n"
               "usage: gpulet [global options] <command> [options]\n\ncommands:\n",
               GPULET_VERSION);
  for (const Command& c : Commands()) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
  std::fprintf(out,
               "\nglobal options:\n"
               "  --host-root DIR      the host's file system (default /; in a pod, where the "
               "host is mounted)\n"
               "  --nvml-lib PATH      use this libnvidia-ml instead of searching for one\n"
               "  --simulate FIXTURE   use the bundled NVML simulator and fixture host root "
               "(homelab, h200, dgx8, h200-mig, dgx8-mig)\n"
               "  --sim-state PATH     the simulator's fault-injection state file\n"
               "  --probe-timeout SEC  deadline for loading NVML in a child process, 0.1 to "
               "600 s (default 15; 30s and 500ms work too)\n"
               "  --call-timeout SEC   deadline for NVML calls about one GPU, 0.01 to 600 s "
               "(default 10)\n"
               "  -v, --verbose        more detail\n\n"
               "Run 'gpulet <command> --help' for a command's options.\n");
}

}  // namespace

void AddGlobalOptions(CLI::App& app, GlobalOptions& o) {
  app.add_option("--host-root", o.host_root, "The host's file system root")
      ->envname("GPULET_HOST_ROOT")
      ->each([&o](const std::string&) { o.host_root_given = true; });
  app.add_option("--nvml-lib", o.nvml_lib, "Path of libnvidia-ml.so.1 to use")
      ->envname("GPULET_NVML_LIB");
  app.add_option("--simulate", o.simulate, "Use the NVML simulator with this fixture")
      ->envname("GPULET_SIMULATE");
  app.add_option("--sim-state", o.sim_state, "Simulator state file")
      ->envname("GPULET_SIM_STATE_FILE");
  // A deadline of more than 10 minutes is no deadline: a hung driver would hold gpulet that
  // long. Below 0.1 s (probe) or 0.01 s (calls) even a healthy driver cannot answer.
  app.add_option("--probe-timeout", o.probe_timeout_s, "NVML probe deadline in seconds")
      ->transform(DeadlineSeconds(0.1, 600));
  app.add_option("--call-timeout", o.call_timeout_s, "NVML call deadline in seconds")
      ->transform(DeadlineSeconds(0.01, 600));
  app.add_flag("-v,--verbose", o.verbose, "More detail");
}

std::string SuggestCommand(absl::string_view name) {
  std::string best;
  size_t best_distance = 0;
  for (const Command& c : Commands()) {
    absl::string_view candidate = c.name;
    if (!name.empty() && absl::StartsWith(candidate, name)) return std::string(candidate);
    size_t d = EditDistance(name, candidate);
    size_t limit = std::max<size_t>(1, candidate.size() / 3 + 1);
    if (d <= limit && (best.empty() || d < best_distance)) {
      best = std::string(candidate);
      best_distance = d;
    }
  }
  return best;
}

int RunCli(int argc, char** argv) {
  int command_at = -1;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!arg.empty() && arg[0] == '-') {
      if (TakesValue(arg)) ++i;
      continue;
    }
    command_at = i;
    break;
  }
  if (command_at < 0) {
    bool asked = false;
    for (int i = 1; i < argc; ++i) {
      absl::string_view arg = argv[i];
      if (arg == "-h" || arg == "--help") asked = true;
      if (arg == "--version") {
        std::printf("gpulet %s (%s)\n", GPULET_VERSION, GitRevision());
        return kExitOk;
      }
    }
    PrintHelp(asked ? stdout : stderr);
    return asked ? kExitOk : kExitUsage;
  }

  absl::string_view name = argv[command_at];
  const Command* command = nullptr;
  for (const Command& c : Commands()) {
    if (name == c.name) command = &c;
  }
  if (name == "help") {
    PrintHelp(stdout);
    return kExitOk;
  }
  if (command == nullptr) {
    std::string suggestion = SuggestCommand(name);
    std::fprintf(
        stderr, "gpulet: unknown command '%.*s'.%s Run 'gpulet help' for the list.\n",
        static_cast<int>(name.size()), name.data(),
        suggestion.empty() ? "" : absl::StrCat(" Did you mean '", suggestion, "'?").c_str());
    return kExitUsage;
  }

  CommandContext ctx;
  std::unique_ptr<CommandHandler> handler = command->make();
  CLI::App app{command->summary, absl::StrCat("gpulet ", command->name)};
  AddGlobalOptions(app, ctx.global);
  handler->AddOptions(app);
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    if (i != command_at) args.emplace_back(argv[i]);
  }
  std::reverse(args.begin(), args.end());  // CLI11 consumes a reversed vector
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    // CLI11 reports through exceptions; they stop here, at the edge of the program.
    int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }
  return handler->Run(ctx);
}

}  // namespace gpulet::cli
