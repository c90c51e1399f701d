// `gpulet cdi generate`: writes the node's CDI spec (see cdi/generator.h).
// `gpulet cdi list`: the qualified device names the spec directories define.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cdi/generator.h"
#include "cdi/spec.h"
#include "cdi/spec_dirs.h"
#include "cli/commands.h"
#include "common/atomic_file.h"

namespace gpulet::cli {
namespace {

void PrintError(const absl::Status& status) {
  std::fprintf(stderr, "gpulet: %s\n", std::string(status.message()).c_str());
}

class CdiCommand final : public CommandHandler {
 public:
  void AddOptions(CLI::App& app) override {
    app.require_subcommand(1, 1);

    CLI::App* gen = app.add_subcommand(
        "generate", "Write a CDI spec for this node's GPUs (default /var/run/cdi/nvidia.yaml)");
    gen->fallthrough();  // global options may follow the subcommand
    gen->add_option("--format", format_, "Spec encoding: yaml or json")
        ->check(CLI::IsMember({"yaml", "json"}));
    gen->add_option("--output,-o", output_,
                    "Where to write: a path on this machine, or - for stdout (default: "
                    "/var/run/cdi/nvidia.yaml under --host-root; stdout with --simulate)");
    gen->add_option("--cdi-version", options_.cdi_version,
                    "Write this cdiVersion (e.g. 0.5.0 for podman 4); refuses content it "
                    "cannot express. Default: the lowest the content needs, at least 0.5.0");
    gen->add_option("--kind", options_.kind, "Device kind vendor/class")
        ->default_str("nvidia.com/gpu");
    gen->add_option("--device-name-strategy", strategy_, "Device names: index, uuid or both")
        ->check(CLI::IsMember({"index", "uuid", "both"}));
    gen->add_option("--driver-root", options_.driver_root,
                    "Directory holding the driver's user-space files (default: --host-root)");
    gen->add_option("--dev-root", options_.dev_root,
                    "Directory holding /dev with the nvidia nodes (default: --host-root)");
    gen->add_option("--hook-path", options_.hook_path,
                    "Host path of the CDI hook program (default: probe for nvidia-cdi-hook, "
                    "then nvidia-ctk, /usr/local/bin first)");
    gen->callback([this] { action_ = Action::kGenerate; });

    CLI::App* list = app.add_subcommand("list", "List the CDI devices the spec directories define");
    list->fallthrough();
    list->add_option("--spec-dir", spec_dirs_,
                     "Spec directory under --host-root, repeatable (default: /etc/cdi and "
                     "/var/run/cdi)");
    list->callback([this] { action_ = Action::kList; });
  }

  int Run(CommandContext& ctx) override {
    switch (action_) {
      case Action::kGenerate:
        return Generate(ctx);
      case Action::kList:
        return List(ctx);
      case Action::kNone:
        break;
    }
    return kExitUsage;
  }

 private:
  enum class Action { kNone, kGenerate, kList };

  int Generate(CommandContext& ctx) {
    bool simulated = !ctx.global.simulate.empty();
    nvml::DiscoveryOptions discovery;
    if (!PrepareDiscovery(ctx, &discovery, /*quiet_simulation=*/true)) return kExitUsage;
    absl::StatusOr<cdi::Format> format = cdi::ParseFormat(format_);
    absl::StatusOr<cdi::NameStrategy> names = cdi::ParseNameStrategy(strategy_);
    if (!format.ok() || !names.ok()) {
      PrintError(!format.ok() ? format.status() : names.status());
      return kExitUsage;
    }
    options_.names = *names;
    if (!options_.cdi_version.empty()) {
      if (absl::StatusOr<cdi::Version> v = cdi::ParseVersion(options_.cdi_version); !v.ok()) {
        PrintError(
            absl::InvalidArgumentError(absl::StrCat("--cdi-version: ", v.status().message())));
        return kExitUsage;
      }
    }

    nvml::Node node = nvml::DiscoverNode(discovery);
    absl::StatusOr<cdi::GeneratedSpec> generated =
        cdi::GenerateSpec(node.inventory, *node.host, options_);
    if (!generated.ok()) {
      PrintError(generated.status());
      return absl::IsInvalidArgument(generated.status()) ? kExitUsage : kExitFailure;
    }
    for (const std::string& w : generated->warnings) {
      std::fprintf(stderr, "gpulet: warning: %s\n", w.c_str());
    }
    std::string text = cdi::Encode(generated->spec, *format);

    std::string output = output_;
    if (output.empty()) {
      // A simulated node has no runtime reading its spec directory, and the fixture tree
      // must not be written into: print instead.
      if (simulated) {
        output = "-";
      } else {
        std::string default_path = cdi::kDefaultSpecPath;
        if (*format == cdi::Format::kJson) {
          default_path.replace(default_path.size() - 4, 4, "json");
        }
        // Resolve inside the host root: /var/run is often a symlink to /run.
        absl::StatusOr<std::string> local = node.host->Resolve(cdi::kDynamicSpecDir);
        output = local.ok() ? JoinPath(*local, default_path.substr(default_path.rfind('/') + 1))
                            : JoinPath(node.host->root(), default_path);
      }
    }
    std::vector<std::string> device_names;
    for (const cdi::Device& d : generated->spec.devices) device_names.push_back(d.name);
    std::string summary = absl::StrCat(
        "cdiVersion ", generated->spec.version, ", kind ", generated->spec.kind, ", devices ",
        absl::StrJoin(device_names, ", "), "; ", generated->spec.edits.mounts.size(), " mounts; ",
        generated->hook_path.empty() ? "no hooks"
                                     : absl::StrCat("hooks via ", generated->hook_path));
    if (output == "-") {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fprintf(stderr, "gpulet: CDI spec for driver %s: %s\n",
                   generated->driver_version.c_str(), summary.c_str());
      return kExitOk;
    }
    if (absl::Status st = WriteFileAtomically(output, text, {.create_parents = true}); !st.ok()) {
      if (absl::IsPermissionDenied(st)) {
        st = absl::PermissionDeniedError(absl::StrCat(
            st.message(), "; run as root (on Talos only /var is writable: use /var/run/cdi)"));
      }
      PrintError(st);
      return kExitFailure;
    }
    std::fprintf(stderr, "gpulet: wrote %s for driver %s: %s\n", output.c_str(),
                 generated->driver_version.c_str(), summary.c_str());
    return kExitOk;
  }

  int List(CommandContext& ctx) {
    nvml::DiscoveryOptions discovery;
    if (!PrepareDiscovery(ctx, &discovery, /*quiet_simulation=*/true)) return kExitUsage;
    HostFs host(discovery.host_root);
    std::vector<std::string> dirs = spec_dirs_.empty() ? cdi::DefaultSpecDirs() : spec_dirs_;
    for (const std::string& dir : dirs) {
      if (dir.empty() || dir[0] != '/') {
        PrintError(absl::InvalidArgumentError(
            absl::StrCat("--spec-dir \"", dir, "\" must be an absolute host path")));
        return kExitUsage;
      }
    }
    cdi::SpecCatalog catalog = cdi::SpecCatalog::Load(host, dirs);
    for (const std::string& name : catalog.DeviceNames()) std::printf("%s\n", name.c_str());
    bool broken = !catalog.dir_errors().empty() || !catalog.conflicts().empty();
    for (const std::string& e : catalog.dir_errors())
      std::fprintf(stderr, "gpulet: %s\n", e.c_str());
    for (const cdi::SpecFile& f : catalog.files()) {
      if (!f.status.ok()) {
        broken = true;
        std::fprintf(stderr, "gpulet: spec not loadable (runtimes skip it): %s\n",
                     std::string(f.status.message()).c_str());
      }
    }
    for (const auto& [name, files] : catalog.conflicts()) {
      std::fprintf(stderr, "gpulet: %s is defined in %s; runtimes use neither\n", name.c_str(),
                   absl::StrJoin(files, " and ").c_str());
    }
    if (catalog.DeviceNames().empty()) {
      std::fprintf(stderr, "gpulet: no CDI devices in %s (under host root %s)\n",
                   absl::StrJoin(dirs, ", ").c_str(), host.root().c_str());
    }
    return broken ? kExitFailure : kExitOk;
  }

  Action action_ = Action::kNone;
  cdi::GeneratorOptions options_;
  std::string format_ = "yaml";
  std::string strategy_ = "both";
  std::string output_;
  std::vector<std::string> spec_dirs_;
};

}  // namespace

std::unique_ptr<CommandHandler> MakeCdiCommand() { return std::make_unique<CdiCommand>(); }

}  // namespace gpulet::cli
