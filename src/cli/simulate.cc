#include "cli/simulate.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/host_fs.h"
#include "sim/state.h"

namespace gpulet::cli {
namespace {

constexpr char kSimLibrary[] = "libgpulet-nvml-sim.so";

bool IsFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool IsDir(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string DefaultStateFile(const std::string& fixture) {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  std::string dir = (runtime != nullptr && runtime[0] == '/')
                        ? JoinPath(runtime, "gpulet-sim")
                        : absl::StrCat("/tmp/gpulet-sim-", getuid());
  return JoinPath(dir, absl::StrCat(fixture, ".state.json"));
}

}  // namespace

std::string ExecutableDir() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string path(buf, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/'));
}

absl::StatusOr<Simulation> FindSimulation(const GlobalOptions& options) {
  Simulation sim;
  std::string exe_dir = ExecutableDir();
  std::vector<std::string> looked;

  // The fixture: a path to a .yaml, or a bundled name.
  const std::string& want = options.simulate;
  if (absl::EndsWith(want, ".yaml")) {
    sim.fixture_yaml = want;
    std::string base = want.substr(0, want.size() - 5);
    sim.fixture_name = base.substr(base.rfind('/') + 1);
    sim.host_root = JoinPath(base, "root");
    looked.push_back(want);
  } else {
    sim.fixture_name = want;
    std::vector<std::string> dirs;
    if (const char* env = std::getenv("GPULET_FIXTURES_DIR")) dirs.push_back(env);
    dirs.push_back(JoinPath(exe_dir, "fixtures"));
    dirs.push_back(JoinPath(exe_dir, "../share/gpulet/fixtures"));
    for (const std::string& dir : dirs) {
      std::string yaml = JoinPath(dir, absl::StrCat(want, ".yaml"));
      looked.push_back(yaml);
      if (IsFile(yaml)) {
        sim.fixture_yaml = yaml;
        sim.host_root = JoinPath(dir, absl::StrCat(want, "/root"));
        break;
      }
    }
  }
  if (sim.fixture_yaml.empty() || !IsFile(sim.fixture_yaml)) {
    return absl::NotFoundError(absl::StrCat("simulator fixture '", want,
                                            "' not found; looked at: ", absl::StrJoin(looked, ", "),
                                            ". Bundled fixtures are homelab, h200, dgx8, h200-mig "
                                            "and dgx8-mig; or pass a path to a fixture .yaml"));
  }
  if (!IsDir(sim.host_root)) {
    return absl::NotFoundError(absl::StrCat("fixture '", want, "' has no host root at ",
                                            sim.host_root, " (expected next to ", sim.fixture_yaml,
                                            ")"));
  }

  std::vector<std::string> libs;
  if (const char* env = std::getenv("GPULET_SIM_LIB")) libs.push_back(env);
  libs.push_back(JoinPath(exe_dir, kSimLibrary));
  libs.push_back(JoinPath(exe_dir, absl::StrCat("../lib/gpulet/", kSimLibrary)));
  for (const std::string& lib : libs) {
    if (IsFile(lib)) {
      sim.library = lib;
      break;
    }
  }
  if (sim.library.empty()) {
    return absl::NotFoundError(
        absl::StrCat("NVML simulator library not found; looked at: ", absl::StrJoin(libs, ", "),
                     ". Build it with `make build`"));
  }
  sim.state_file =
      options.sim_state.empty() ? DefaultStateFile(sim.fixture_name) : options.sim_state;
  return sim;
}

absl::StatusOr<Simulation> ApplySimulation(GlobalOptions& options, bool quiet) {
  absl::StatusOr<Simulation> sim = FindSimulation(options);
  if (!sim.ok()) return sim.status();
  std::string dir = sim->state_file.substr(0, sim->state_file.rfind('/'));
  if (!dir.empty()) mkdir(dir.c_str(), 0700);  // may exist; the simulator tolerates no file
  if (options.nvml_lib.empty()) options.nvml_lib = sim->library;
  // The fixture's tree, unless a root was named ("/" too: the simulator's GPUs on this
  // machine's files, as a test of /proc-facing code needs).
  if (options.host_root.empty() || !options.host_root_given) options.host_root = sim->host_root;
  setenv("GPULET_SIM_FIXTURE", sim->fixture_yaml.c_str(), 1);
  setenv("GPULET_SIM_STATE", sim->state_file.c_str(), 1);
  if (!quiet) {
    std::fprintf(stderr,
                 "gpulet: simulating '%s' (fixture %s, host root %s); fault-injection state: %s "
                 "(change it with `gpulet --simulate %s sim ...`)\n",
                 sim->fixture_name.c_str(), sim->fixture_yaml.c_str(), options.host_root.c_str(),
                 sim->state_file.c_str(), sim->fixture_name.c_str());
  }
  return sim;
}

absl::Status SimGpuResetter::Reset(absl::string_view uuid, absl::string_view bus_id) {
  sim::SimState state;
  std::string error;
  if (!sim::LoadState(state_file_, &state, &error)) {
    return absl::UnavailableError(
        absl::StrCat("cannot read the simulator's state file ", state_file_, ": ", error));
  }
  if (!sim::ResetGpu(&state, std::string(uuid))) {
    return absl::NotFoundError(absl::StrCat("the simulator has no GPU ", uuid, " (", bus_id, ")"));
  }
  if (!sim::SaveStateAtomic(state_file_, state, &error)) {
    return absl::UnavailableError(
        absl::StrCat("cannot write the simulator's state file ", state_file_, ": ", error));
  }
  return absl::OkStatus();
}

}  // namespace gpulet::cli
