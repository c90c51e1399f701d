// `gpulet --simulate FIXTURE sim <action> ...`: writes the simulator's fault-injection state
// file, which a running simulator picks up on its next NVML call.
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/simulate.h"
#include "sim/fault_scripts.h"
#include "sim/fixture.h"
#include "sim/mig.h"
#include "sim/state.h"

namespace gpulet::cli {
namespace {

// Parses `--gpm NAME=VALUE`: a metric name from sim::GpmMetrics() and a value in its range.
std::optional<std::pair<std::string, double>> ParseGpmAssignment(const std::string& text,
                                                                 std::string* error) {
  const size_t eq = text.find('=');
  const std::string name = text.substr(0, eq);
  const sim::GpmMetric* metric = sim::FindGpmMetric(name);
  if (eq == std::string::npos || metric == nullptr) {
    *error =
        absl::StrCat("'", text, "': expected NAME=VALUE with NAME one of ", sim::GpmMetricNames());
    return std::nullopt;
  }
  const std::string number = text.substr(eq + 1);
  char* end = nullptr;
  const double value = std::strtod(number.c_str(), &end);
  if (number.empty() || *end != '\0' || !sim::GpmValueInRange(*metric, value)) {
    *error = absl::StrCat(
        "'", text, "': ", name,
        metric->percent ? " is a percentage from 0 to 100" : " is a rate in MiB/s, 0 or more");
    return std::nullopt;
  }
  return std::make_pair(name, value);
}

class SimCommand final : public CommandHandler {
 public:
  void AddOptions(CLI::App& app) override {
    app.require_subcommand(1, 1);
    auto gpu_arg = [this](CLI::App* sub) {
      sub->add_option("gpu", gpu_, "GPU index or UUID")->required();
    };

    CLI::App* xid = app.add_subcommand("xid", "Inject an XID error event on a GPU");
    gpu_arg(xid);
    xid->add_option("code", number_, "XID number (e.g. 79, 13, 48)")->required();
    CLI::Option* gi_option =
        xid->add_option("--gpu-instance", gpu_instance_,
                        "The MIG GPU instance the XID names (the event's gpuInstanceId)")
            ->check(CLI::Range(0u, sim::kMaxGpuInstanceId));
    xid->add_option("--compute-instance", compute_instance_,
                    "The MIG compute instance (needs --gpu-instance)")
        ->check(CLI::Range(0u, sim::kMaxComputeInstanceId))
        ->needs(gi_option);
    xid->callback([this] {
      action_ = [this](sim::SimState* s) {
        return sim::InjectXid(s, gpu_, number_, gpu_instance_, compute_instance_);
      };
      what_ = absl::StrCat(
          "injected XID ", number_, " on GPU ", gpu_,
          gpu_instance_ ? absl::StrCat(" GPU instance ", *gpu_instance_) : std::string(),
          compute_instance_ ? absl::StrCat(" compute instance ", *compute_instance_)
                            : std::string());
    });

    // `sim mig GPU ACTION ...`: what an operator running mig-parted does, on a running sim.
    CLI::App* mig = app.add_subcommand(
        "mig", "Change a GPU's MIG mode and instances (MIG-capable GPUs: h200, dgx8, ...-mig)");
    mig->require_subcommand(1, 1);
    gpu_arg(mig);
    mig->add_subcommand("enable", "Turn MIG mode on (current and pending)")->callback([this] {
      mig_action_ = "enable";
    });
    mig->add_subcommand("disable", "Turn MIG mode off (the GPU must have no instances)")
        ->callback([this] { mig_action_ = "disable"; });
    CLI::App* create = mig->add_subcommand("create", "Create a GPU instance");
    create->add_option("profile", word_, "Profile, e.g. 1g.18gb")->required();
    create->add_option("--placement", placement_, "First memory slice (default: the first free)")
        ->check(CLI::Range(0u, sim::kMigMemorySlices - 1));
    create->callback([this] { mig_action_ = "create"; });
    CLI::App* destroy = mig->add_subcommand("destroy", "Destroy a GPU instance");
    destroy->add_option("gpu_instance", number_, "GPU instance id")->required();
    destroy->callback([this] { mig_action_ = "destroy"; });
    CLI::App* layout = mig->add_subcommand(
        "layout", "Replace every instance: PROFILE[,PROFILE...] placed largest first, or none");
    layout->add_option("profiles", word_, "e.g. 3g.71gb,2g.35gb,1g.18gb,1g.18gb, or none")
        ->required();
    layout->callback([this] { mig_action_ = "layout"; });

    CLI::App* lose = app.add_subcommand("lose", "Make a GPU fall off the bus (GPU_IS_LOST)");
    gpu_arg(lose);
    lose->callback([this] {
      action_ = [this](sim::SimState* s) { return sim::SetLost(s, gpu_, true); };
      what_ = absl::StrCat("GPU ", gpu_, " is now lost");
    });

    CLI::App* reset = app.add_subcommand("reset-required", "Make a GPU require a reset");
    gpu_arg(reset);
    reset->callback([this] {
      action_ = [this](sim::SimState* s) { return sim::SetResetRequired(s, gpu_, true); };
      what_ = absl::StrCat("GPU ", gpu_, " now requires a reset");
    });

    CLI::App* reset_gpu = app.add_subcommand(
        "reset", "Reset a GPU as the kernel's PCI reset would (what gpulet's health.reset does)");
    gpu_arg(reset_gpu);
    reset_gpu->callback([this] {
      action_ = [this](sim::SimState* s) { return sim::ResetGpu(s, gpu_); };
      what_ = absl::StrCat("GPU ", gpu_, " was reset");
    });

    CLI::App* failing = app.add_subcommand("faults-after-reset",
                                           "Make a GPU raise its last XID again after every reset");
    gpu_arg(failing);
    failing->callback([this] {
      action_ = [this](sim::SimState* s) { return sim::SetFaultsAfterReset(s, gpu_, true); };
      what_ = absl::StrCat("GPU ", gpu_, " now faults again after every reset");
    });

    app.add_subcommand("reboot",
                       "Reboot the simulated node: every card back, except one that fails after "
                       "every reboot; with --host-root, a new boot id under it")
        ->callback([this] {
          action_ = [](sim::SimState* s) {
            sim::RebootNode(s);
            return true;
          };
          what_ = "node rebooted";
          reboot_ = true;
        });

    CLI::App* idle = app.add_subcommand("idle", "End every process on a GPU");
    gpu_arg(idle);
    idle->callback([this] {
      action_ = [this](sim::SimState* s) { return sim::SetProcesses(s, gpu_, {}); };
      what_ = absl::StrCat("GPU ", gpu_, " now runs nothing");
    });

    CLI::App* recover = app.add_subcommand("recover", "Clear lost, reset-required and hang");
    gpu_arg(recover);
    recover->callback([this] {
      action_ = [this](sim::SimState* s) {
        return sim::SetLost(s, gpu_, false) && sim::SetResetRequired(s, gpu_, false) &&
               sim::SetHang(s, gpu_, 0);
      };
      what_ = absl::StrCat("GPU ", gpu_, " answers normally again");
    });

    CLI::App* hang = app.add_subcommand("hang", "Make every call on a GPU hang for SECONDS");
    gpu_arg(hang);
    hang->add_option("seconds", seconds_, "How long each call hangs (0 clears)")
        ->required()
        ->check(CLI::NonNegativeNumber);
    hang->callback([this] {
      action_ = [this](sim::SimState* s) { return sim::SetHang(s, gpu_, seconds_); };
      what_ = absl::StrCat("calls on GPU ", gpu_, " now hang for ", seconds_, " s");
    });

    CLI::App* remap =
        app.add_subcommand("remap", "Set a GPU's row-remapping state (GPUs with HBM only)");
    gpu_arg(remap);
    remap->add_option("state", word_, "pending, failed or clear")
        ->required()
        ->check(CLI::IsMember({"pending", "failed", "clear"}));
    remap->callback([this] {
      action_ = [this](sim::SimState* s) {
        sim::RemappedRows rows;
        rows.uncorrectable = word_ == "clear" ? 0 : 1;
        rows.pending = word_ == "pending";
        rows.failure = word_ == "failed";
        return sim::SetRemappedRows(s, gpu_, rows);
      };
      what_ = absl::StrCat("GPU ", gpu_, " row remapping: ", word_);
    });

    CLI::App* recovery = app.add_subcommand(
        "recovery-action", "Set the recovery action the GPU's driver reports (R570+ drivers)");
    gpu_arg(recovery);
    recovery
        ->add_option("action", word_,
                     "none, reset, reboot, drain-p2p, drain-and-reset or unsupported")
        ->required()
        ->check(CLI::IsMember(
            {"none", "reset", "reboot", "drain-p2p", "drain-and-reset", "unsupported"}));
    recovery->callback([this] {
      action_ = [this](sim::SimState* s) {
        // NVML's nvmlDeviceGpuRecoveryAction_t values, in the order of the names above.
        const char* kNames[] = {"none", "reset", "reboot", "drain-p2p", "drain-and-reset"};
        std::optional<unsigned> value;
        for (unsigned i = 0; i < 5; ++i) {
          if (word_ == kNames[i]) value = i;
        }
        return sim::SetRecoveryAction(s, gpu_, value);
      };
      what_ = absl::StrCat("GPU ", gpu_, " recovery action: ", word_);
    });

    CLI::App* driver = app.add_subcommand("driver", "Unload or load the simulated kernel driver");
    driver->add_option("state", word_, "unloaded or loaded")
        ->required()
        ->check(CLI::IsMember({"unloaded", "loaded"}));
    driver->callback([this] {
      action_ = [this](sim::SimState* s) {
        sim::SetDriverNotLoaded(s, word_ == "unloaded");
        return true;
      };
      what_ = absl::StrCat("driver is now ", word_);
    });

    CLI::App* crash = app.add_subcommand("init-crash", "Make nvmlInit_v2 crash (on|off)");
    crash->add_option("state", word_, "on or off")->required()->check(CLI::IsMember({"on", "off"}));
    crash->callback([this] {
      action_ = [this](sim::SimState* s) {
        sim::SetInitCrash(s, word_ == "on");
        return true;
      };
      what_ = absl::StrCat("nvmlInit_v2 crash is ", word_);
    });

    CLI::App* init_hang = app.add_subcommand("init-hang", "Make nvmlInit_v2 hang for SECONDS");
    init_hang->add_option("seconds", seconds_, "0 clears")
        ->required()
        ->check(CLI::NonNegativeNumber);
    init_hang->callback([this] {
      action_ = [this](sim::SimState* s) {
        sim::SetInitHang(s, seconds_);
        return true;
      };
      what_ = absl::StrCat("nvmlInit_v2 now hangs for ", seconds_, " s");
    });

    CLI::App* load = app.add_subcommand("load", "Set live values on a GPU");
    gpu_arg(load);
    load->add_option("--util", util_, "GPU utilisation, percent")->check(CLI::Range(0, 100));
    load->add_option("--mem-util", mem_util_, "Memory utilisation, percent")
        ->check(CLI::Range(0, 100));
    load->add_option("--mem-used", mem_used_mib_, "Memory used, MiB");
    load->add_option("--temp", temp_c_, "GPU temperature, Celsius");
    load->add_option("--power", power_w_, "Power draw, watts");
    load->add_option("--gpm", gpm_,
                     "GPM metric NAME=VALUE, repeatable (percent, or MiB/s for the *_mib_s rates; "
                     "GPUs whose fixture has GPM only)")
        ->allow_extra_args(false)
        ->check(CLI::Validator(
            [](std::string& text) {
              std::string error;
              return ParseGpmAssignment(text, &error) ? std::string() : error;
            },
            "NAME=VALUE"));
    load->callback([this] {
      action_ = [this](sim::SimState* s) {
        sim::LoadOverride o;
        if (util_ >= 0) o.utilization_gpu = static_cast<unsigned>(util_);
        if (mem_util_ >= 0) o.utilization_memory = static_cast<unsigned>(mem_util_);
        if (mem_used_mib_ >= 0) o.memory_used_mib = static_cast<uint64_t>(mem_used_mib_);
        if (temp_c_ >= 0) o.temperature_c = static_cast<unsigned>(temp_c_);
        if (power_w_ >= 0) o.power_w = power_w_;
        for (const std::string& text : gpm_) {
          std::string error;
          const auto assignment = ParseGpmAssignment(text, &error);
          if (!assignment) return false;  // the option's check has rejected it already
          o.gpm[assignment->first] = assignment->second;
        }
        return sim::SetLoad(s, gpu_, o);
      };
      what_ = absl::StrCat("load set on GPU ", gpu_);
    });

    CLI::App* nvlink = app.add_subcommand(
        "nvlink", "Force an NVLink down or up and set its error counters (NVLink GPUs only)");
    gpu_arg(nvlink);
    nvlink->add_option("link", number_, "Link number")
        ->required()
        ->check(CLI::Range(0u, sim::kMaxNvLinks - 1));
    nvlink->add_option("state", word_, "down or up")
        ->required()
        ->check(CLI::IsMember({"down", "up"}));
    const char* const kCounterFlags[] = {"--replay", "--recovery", "--crc-flit", "--crc-data"};
    for (size_t i = 0; i < sim::kNvLinkCounterNames.size(); ++i) {
      // NonNegativeNumber: CLI11 would otherwise wrap "-1" into a huge unsigned count.
      counter_options_[i] =
          nvlink
              ->add_option(kCounterFlags[i], counters_[i],
                           absl::StrCat("Set the link's ", std::string(sim::kNvLinkCounterNames[i]),
                                        " error counter"))
              ->check(CLI::NonNegativeNumber);
    }
    nvlink->callback([this] {
      action_ = [this](sim::SimState* s) {
        sim::NvLinkCounters errors;
        for (size_t i = 0; i < errors.size(); ++i) {
          if (counter_options_[i]->count() > 0) errors[i] = counters_[i];
        }
        return sim::SetNvLink(s, gpu_, number_, word_ == "down", errors);
      };
      what_ = absl::StrCat("GPU ", gpu_, " NVLink ", number_, " is ", word_);
    });

    CLI::App* process = app.add_subcommand("process", "Add a process using GPU memory");
    gpu_arg(process);
    process->add_option("pid", number_, "Process id")->required();
    process->add_option("name", word_, "Process name")->required();
    process->add_option("mib", mem_used_mib_, "GPU memory used, MiB")->required();
    CLI::Option* process_gi_option =
        process
            ->add_option("--gpu-instance", gpu_instance_,
                         "The MIG GPU instance the process runs in (not reported while the "
                         "layout lacks it)")
            ->check(CLI::Range(0u, sim::kMaxGpuInstanceId));
    process->add_option("--compute-instance", compute_instance_, "Its compute instance")
        ->check(CLI::Range(0u, sim::kMaxComputeInstanceId))
        ->needs(process_gi_option);
    process->callback([this] {
      action_ = [this](sim::SimState* s) {
        sim::SimProcess p;
        p.pid = number_;
        p.name = word_;
        p.used_mib = static_cast<uint64_t>(mem_used_mib_);
        p.gpu_instance = gpu_instance_;
        p.compute_instance = compute_instance_;
        return sim::AddProcess(s, gpu_, p);
      };
      what_ = absl::StrCat("process ", number_, " (", word_, ") added on GPU ", gpu_);
    });

    app.add_subcommand("clear", "Remove every injected fault and override")->callback([this] {
      action_ = [](sim::SimState* s) {
        sim::Reset(s);
        return true;
      };
      what_ = "simulator state cleared";
    });
    app.add_subcommand("show", "Print the current state file")->callback([this] { show_ = true; });

    // `sim script NAME GPU`: a failing card's faults, step by step (sim/fault_scripts.h).
    std::string names;
    for (const sim::FaultScript& f : sim::FaultScripts()) {
      absl::StrAppend(&names, "\n  ", f.name, ": ", f.summary);
    }
    CLI::App* script = app.add_subcommand(
        "script",
        absl::StrCat("Play a fault script on a GPU, one step every --pace seconds:", names));
    script->add_option("name", script_name_, "The script")->required();
    gpu_arg(script);
    script->add_option("--pace", pace_, "Seconds between steps (default 5)")
        ->check(CLI::Range(0.0, 3600.0));
    script->callback([this] { script_ = true; });
  }

  int Run(CommandContext& ctx) override {
    if (ctx.global.simulate.empty()) {
      std::fprintf(stderr,
                   "gpulet sim: needs --simulate FIXTURE (e.g. `gpulet --simulate homelab sim "
                   "xid 1 79`) to know which simulator to change\n");
      return kExitUsage;
    }
    absl::StatusOr<Simulation> simulation = FindSimulation(ctx.global);
    if (!simulation.ok()) {
      std::fprintf(stderr, "gpulet sim: %s\n", std::string(simulation.status().message()).c_str());
      return kExitUsage;
    }
    const std::string& path = simulation->state_file;
    sim::SimState state;
    if (!Load(path, &state, "gpulet sim")) return kExitFailure;
    if (show_) {
      std::printf("%s\n", sim::StateToJson(state).c_str());
      return kExitOk;
    }
    if (!gpu_.empty() && !sim::IsValidGpuKey(gpu_)) {
      std::fprintf(stderr, "gpulet sim: '%s' is not a GPU index or UUID (e.g. 0, or GPU-...)\n",
                   gpu_.c_str());
      return kExitUsage;
    }
    if (script_) return PlayScript(*simulation);
    if (!mig_action_.empty()) {
      if (const int code = ApplyMig(*simulation, &state); code != kExitOk) return code;
    }
    if (mig_action_.empty() && (!action_ || !action_(&state))) {
      std::fprintf(stderr, "gpulet sim: could not apply the change to GPU '%s'\n", gpu_.c_str());
      return kExitUsage;
    }
    if (reboot_) {
      if (const int code = NewBootId(ctx.global, state.boots); code != kExitOk) return code;
    }
    if (!Save(path, state, "gpulet sim")) return kExitFailure;
    std::printf("%s: %s (state file %s)\n", simulation->fixture_name.c_str(), what_.c_str(),
                path.c_str());
    return kExitOk;
  }

 private:
  // Reads the state file (none yet: no faults); false after saying why.
  static bool Load(const std::string& path, sim::SimState* state, const char* who) {
    std::string error;
    if (sim::LoadState(path, state, &error)) return true;
    std::fprintf(stderr, "%s: cannot read state file %s: %s\n", who, path.c_str(), error.c_str());
    return false;
  }

  // Writes the state file (its directory made when missing); false after saying why.
  static bool Save(const std::string& path, const sim::SimState& state, const char* who) {
    std::string dir = path.substr(0, path.rfind('/'));
    if (!dir.empty()) mkdir(dir.c_str(), 0700);
    std::string error;
    if (sim::SaveStateAtomic(path, state, &error)) return true;
    std::fprintf(stderr, "%s: cannot write state file %s: %s\n", who, path.c_str(), error.c_str());
    return false;
  }

  // `sim reboot` with --host-root (a copy of a fixture's root, a test's): the new boot's id in
  // <root>/proc/sys/kernel/random/boot_id, which gpulet reads to tell boots apart. The bundled
  // root is data, and a real host's id is its kernel's: neither is written.
  int NewBootId(const GlobalOptions& global, uint64_t boot) {
    if (!global.host_root_given || global.host_root.empty() || global.host_root == "/") {
      what_ += " (no --host-root: no boot id written)";
      return kExitOk;
    }
    const std::string dir = global.host_root + "/proc/sys/kernel/random";
    const std::string file = dir + "/boot_id";
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    std::random_device random;
    char id[40];
    std::snprintf(id, sizeof(id), "%08x-%04x-4%03x-%04x-%04x%08x", random(), random() & 0xffff,
                  random() & 0xfff, (random() & 0x3fff) | 0x8000, random() & 0xffff, random());
    std::ofstream out(file, std::ios::trunc);
    out << id << "\n";
    out.close();
    if (ec || !out) {
      std::fprintf(stderr, "gpulet sim reboot: cannot write the new boot id to %s: %s\n",
                   file.c_str(), ec ? ec.message().c_str() : "write failed");
      return kExitFailure;
    }
    what_ = absl::StrCat(what_, " (boot ", boot, ", boot id ", id, " in ", file, ")");
    return kExitOk;
  }

  // `sim script`: each step read, applied and written anew (the simulator, or another `gpulet
  // sim`, may change the file between steps), then the pace's wait.
  int PlayScript(const Simulation& simulation) {
    const sim::FaultScript* script = sim::FindFaultScript(script_name_);
    if (script == nullptr) {
      std::fprintf(stderr, "gpulet sim script: no script '%s' (the scripts: %s)\n",
                   script_name_.c_str(), sim::FaultScriptNames().c_str());
      return kExitUsage;
    }
    const std::string& path = simulation.state_file;
    std::printf("%s: GPU %s: %s\n", simulation.fixture_name.c_str(), gpu_.c_str(), script->summary);
    for (size_t i = 0; i < script->steps.size(); ++i) {
      if (i > 0) std::this_thread::sleep_for(std::chrono::duration<double>(pace_));
      sim::SimState state;
      if (!Load(path, &state, "gpulet sim script")) return kExitFailure;
      if (!script->steps[i].apply(&state, gpu_)) {
        std::fprintf(stderr, "gpulet sim script: could not apply step %zu to GPU '%s'\n", i + 1,
                     gpu_.c_str());
        return kExitUsage;
      }
      if (!Save(path, state, "gpulet sim script")) return kExitFailure;
      std::printf("  step %zu of %zu: %s\n", i + 1, script->steps.size(), script->steps[i].what);
      std::fflush(stdout);
    }
    std::printf("(state file %s)\n", path.c_str());
    return kExitOk;
  }

  // `sim mig`: reads the fixture for the GPU's product and layout, applies mig_action_ to the
  // layout in force (the state's, else the fixture's) and stores the result in the state.
  // Returns kExitOk, or the exit code after printing why not.
  int ApplyMig(const Simulation& simulation, sim::SimState* state) {
    sim::Fixture fixture;
    std::string error;
    if (!sim::LoadFixture(simulation.fixture_yaml, &fixture, &error)) {
      std::fprintf(stderr, "gpulet sim mig: %s\n", error.c_str());
      return kExitFailure;
    }
    unsigned index = 0;
    bool found = false;
    for (unsigned i = 0; i < fixture.gpus.size(); ++i) {
      if (gpu_ == std::to_string(i) || gpu_ == fixture.gpus[i].uuid) {
        index = i;
        found = true;
      }
    }
    if (!found) {
      std::fprintf(stderr,
                   "gpulet sim mig: fixture %s has no GPU '%s' (its GPUs: 0 to %zu, or their "
                   "UUIDs)\n",
                   simulation.fixture_name.c_str(), gpu_.c_str(), fixture.gpus.size() - 1);
      return kExitUsage;
    }
    const sim::FixtureGpu& gpu = fixture.gpus[index];
    const std::string who = absl::StrCat("GPU ", index, " (", gpu.name, ")");
    auto fail = [&](const std::string& why, int code) {
      std::fprintf(stderr, "gpulet sim mig: %s: %s\n", who.c_str(), why.c_str());
      return code;
    };
    if (!gpu.mig.has_value()) return fail("not MIG-capable in this fixture", kExitFailure);
    if (gpu.mig_product == nullptr) {
      return fail("the simulator has no MIG profile table for this product", kExitFailure);
    }
    const sim::MigProduct& product = *gpu.mig_product;
    const sim::GpuState merged = sim::MergedGpuState(*state, index, gpu.uuid);
    sim::MigOverride mig;
    if (merged.mig.has_value()) {
      mig = *merged.mig;
    } else {
      mig.enabled = gpu.mig->current == 1;
      mig.instances = gpu.mig->instances;
    }
    bool usage = false;
    std::string why;
    if (mig_action_ == "enable") {
      mig.enabled = true;
    } else if (mig_action_ == "disable") {
      if (!mig.instances.empty()) {
        return fail(absl::StrCat(
                        "cannot disable MIG while ", mig.instances.size(),
                        mig.instances.size() == 1 ? " GPU instance exists" : " GPU instances exist",
                        " (destroy them, or `layout none`, first)"),
                    kExitFailure);
      }
      mig.enabled = false;
    } else if (!mig.enabled) {
      return fail(absl::StrCat("MIG mode is disabled; run `gpulet --simulate ",
                               simulation.fixture_name, " sim mig ", gpu_, " enable` first"),
                  kExitFailure);
    } else if (mig_action_ == "create") {
      why = sim::MigCreate(product, gpu.uuid, word_, placement_, &mig.instances, &usage);
    } else if (mig_action_ == "destroy") {
      why = sim::MigDestroy(number_, &mig.instances, &usage);
    } else if (mig_action_ == "layout") {
      std::vector<std::string> profiles;
      if (word_ != "none") {
        for (size_t start = 0; start <= word_.size();) {
          const size_t comma = std::min(word_.find(',', start), word_.size());
          profiles.push_back(word_.substr(start, comma - start));
          start = comma + 1;
        }
      }
      why = sim::MigLayout(product, gpu.uuid, profiles, &mig.instances, &usage);
    }
    if (!why.empty()) return fail(why, usage ? kExitUsage : kExitFailure);
    // The layout lives under the key the user gave; the GPU's other key must not shadow it.
    const std::string other = gpu_ == gpu.uuid ? std::to_string(index) : gpu.uuid;
    if (!sim::SetMig(state, gpu_, mig) || !sim::ClearMig(state, other)) {
      return fail("could not store the layout", kExitFailure);
    }
    std::string layout;
    for (const sim::MigInstance& m : sim::SortedMigLayout(mig.instances)) {
      absl::StrAppend(&layout, layout.empty() ? "" : ", ", m.profile, " (GPU instance ",
                      m.gpu_instance, ", placement ", m.placement, ", ", m.uuid, ")");
    }
    what_ = absl::StrCat(
        who, " MIG ", mig.enabled ? "enabled" : "disabled",
        mig.enabled ? absl::StrCat(": ", layout.empty() ? "no instances" : layout) : std::string());
    return kExitOk;
  }

  std::string gpu_;
  std::string word_;
  unsigned number_ = 0;
  double seconds_ = 0;
  int util_ = -1, mem_util_ = -1, temp_c_ = -1;
  double mem_used_mib_ = -1, power_w_ = -1;
  std::vector<std::string> gpm_;
  uint64_t counters_[4] = {0, 0, 0, 0};  // indexed like sim::kNvLinkCounterNames
  CLI::Option* counter_options_[4] = {nullptr, nullptr, nullptr, nullptr};
  bool show_ = false;
  // MIG instance ids for `xid` and `process`.
  std::optional<unsigned> gpu_instance_, compute_instance_;
  std::string mig_action_;  // enable, disable, create, destroy or layout
  std::optional<unsigned> placement_;
  std::function<bool(sim::SimState*)> action_;
  std::string what_;
  bool script_ = false;
  bool reboot_ = false;
  double pace_ = 5.0;
  std::string script_name_;
};

}  // namespace

std::unique_ptr<CommandHandler> MakeSimCommand() { return std::make_unique<SimCommand>(); }

}  // namespace gpulet::cli
