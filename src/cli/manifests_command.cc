// `gpulet manifests`: prints the Kubernetes manifests that install gpulet, fitted to a node.
//
//   gpulet manifests [--overlay talos|generic] [--dra] [--talos-version V] [--image REF]
//                    [--inspect|--no-inspect] [--driver-branch production|lts]
//                    [--talos-machine-patch [--talos-current-config FILE] | --talos-schematic]
//
// The manifests are the files of deploy/ compiled into the binary (deploy/manifests.h), so
// the output is what `kubectl kustomize deploy/overlays/<overlay>` gives, plus a header that
// says what was chosen and why. With --inspect (the default) gpulet looks at the host root:
// /etc/os-release decides Talos or not (and the Talos version), the PCI inventory decides the
// kernel-module flavour (Blackwell: open modules only) and Fabric Manager (NVSwitches).
// Inspection only reads files; it never loads NVML.
#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/commands.h"
#include "common/read_file.h"
#include "deploy/manifests.h"
#include "deploy/talos_migration.h"
#include "node/talos_releases.h"

namespace gpulet::cli {
namespace {

std::string DescribeGpus(const node::NodeFacts& facts) {
  if (!facts.pci_status.ok()) {
    return absl::StrCat("PCI sysfs unreadable (", facts.pci_status.message(), ")");
  }
  if (facts.gpus.empty()) return "no NVIDIA GPU on the PCI bus";
  // Identical cards are listed once with a count: an 8-GPU board is one line, not eight.
  std::vector<std::pair<std::string, int>> kinds;
  for (const node::PciGpu& g : facts.gpus) {
    std::string kind = absl::StrCat(g.product.empty() ? "unknown NVIDIA GPU" : g.product, " (",
                                    node::ArchitectureName(g.architecture), ")");
    auto it =
        std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) { return k.first == kind; });
    if (it == kinds.end()) {
      kinds.emplace_back(kind, 1);
    } else {
      ++it->second;
    }
  }
  std::vector<std::string> parts;
  for (const auto& [kind, count] : kinds) {
    parts.push_back(count == 1 ? kind : absl::StrCat(count, " x ", kind));
  }
  return absl::StrCat(facts.gpus.size(),
                      facts.gpus.size() == 1 ? " GPU: " : " GPUs: ", absl::StrJoin(parts, ", "));
}

std::string DescribeDriver(const node::DriverInfo& d) {
  if (!d.version_file_present) return "NVIDIA kernel modules not loaded";
  return absl::StrCat(node::DriverFlavorName(d.flavor), " kernel modules ",
                      d.version.empty() ? "(version unknown)" : d.version);
}

class ManifestsCommand final : public CommandHandler {
 public:
  void AddOptions(CLI::App& app) override {
    app.add_option("--overlay", overlay_,
                   "talos or generic (default: talos when the host root is a Talos node)")
        ->check(CLI::IsMember({"talos", "generic"}));
    app.add_flag("--dra", dra_,
                 "Also gpulet's DRA driver (deploy/dra: RBAC, DeviceClasses, the kubelet's plugin "
                 "directories; Kubernetes 1.34+; docs/dra.md)");
    app.add_option("--talos-version", talos_version_,
                   "Talos version the node runs, e.g. v1.12.6 (default: from /etc/os-release)");
    app.add_option("--image", image_,
                   "gpulet image reference, e.g. registry.example.com/gpulet:" GPULET_VERSION
                   " (default: gpulet:" GPULET_VERSION ", as `make image` builds it)");
    app.add_flag("--inspect,!--no-inspect", inspect_,
                 "Look at the host root (Talos version, GPUs, driver) to choose (default: on)");
    app.add_option("--driver-branch", branch_, "production or lts NVIDIA Talos extensions")
        ->check(CLI::IsMember({"production", "lts"}));
    CLI::Option* patch = app.add_flag(
        "--talos-machine-patch", print_patch_,
        "Print the Talos machine-config patch (kernel modules, GPU taint, GPU label) instead");
    CLI::Option* schematic = app.add_flag(
        "--talos-schematic", print_schematic_,
        "Print the Talos Image Factory schematic (the NVIDIA system extensions) instead");
    patch->excludes(schematic);
    app.add_option("--talos-current-config", current_config_,
                   "The node's machine configuration (talosctl -n NODE get machineconfig -o "
                   "jsonpath='{.spec}' > FILE): fit the patch to it, moving what the release "
                   "refuses beside its documents (a node upgraded to Talos 1.14)")
        ->needs(patch);
  }

  int Run(CommandContext& ctx) override {
    std::optional<node::TalosVersion> version;
    if (!talos_version_.empty()) {
      absl::StatusOr<node::TalosVersion> v = node::ParseTalosVersion(talos_version_);
      if (!v.ok()) {
        std::fprintf(stderr, "gpulet manifests: --talos-version: %s\n",
                     std::string(v.status().message()).c_str());
        return kExitUsage;
      }
      version = *v;
    }

    node::NodeFacts facts;
    std::string root;
    if (inspect_) {
      nvml::DiscoveryOptions options;
      if (!PrepareDiscovery(ctx, &options, /*quiet_simulation=*/true)) return kExitUsage;
      root = options.host_root;
      HostFs host(root);
      facts = node::InspectNode(host);
      if (facts.talos_version) {
        if (version && (version->major != facts.talos_version->major ||
                        version->minor != facts.talos_version->minor)) {
          std::fprintf(stderr,
                       "gpulet manifests: note: --talos-version %s, but %s says this node "
                       "runs Talos %s; using %s.\n",
                       version->ToString().c_str(), host.Describe("/etc/os-release").c_str(),
                       facts.talos_version->ToString().c_str(), version->ToString().c_str());
        } else if (!version) {
          version = facts.talos_version;
        }
      }
    }

    std::string overlay = overlay_;
    std::string why = "chosen with --overlay";
    if (overlay.empty()) {
      overlay = (facts.IsTalos() || version) ? "talos" : "generic";
      why = facts.IsTalos() ? absl::StrCat("the node under ", root, " runs Talos (/etc/os-release)")
            : version       ? "--talos-version was given"
            : !inspect_     ? "no node was inspected (--no-inspect)"
                        : absl::StrCat("the node under ", root, " is not Talos (/etc/os-release",
                                       facts.os_id.empty() ? " missing" : ": " + facts.os_id, ")");
    }
    bool talos = overlay == "talos";

    deploy::DriverBranch branch =
        branch_ == "lts" ? deploy::DriverBranch::kLts : deploy::DriverBranch::kProduction;
    absl::StatusOr<deploy::TalosExtensions> extensions =
        deploy::ChooseTalosExtensions(facts, version, branch);
    if (!extensions.ok()) {
      std::fprintf(stderr, "gpulet manifests: %s\n",
                   std::string(extensions.status().message()).c_str());
      return kExitFailure;
    }

    deploy::ManifestFiles files = deploy::EmbeddedManifestFiles();
    if (print_schematic_) {
      std::fputs(deploy::RenderTalosSchematic(*extensions).c_str(), stdout);
      return kExitOk;
    }
    if (print_patch_) {
      std::optional<deploy::TalosCurrentConfig> current;
      if (!current_config_.empty()) {
        absl::StatusOr<std::string> text = ReadRegularFile(
            current_config_, deploy::kMaxMachineConfigBytes, "machine configuration");
        if (!text.ok()) {
          std::fprintf(stderr, "gpulet manifests: --talos-current-config: %s\n",
                       std::string(text.status().message()).c_str());
          return kExitUsage;
        }
        current = deploy::TalosCurrentConfig{*text, current_config_};
      }
      absl::StatusOr<std::string> patch = deploy::RenderTalosMachinePatch(
          files, version, *extensions, current ? &*current : nullptr);
      if (!patch.ok()) {
        std::fprintf(stderr, "gpulet manifests: %s\n",
                     std::string(patch.status().message()).c_str());
        return kExitFailure;
      }
      if (current) {
        // Fitting moves settings into a KubeNodeConfig; a release without one (and the
        // unversioned patch, 1.13's form) takes the same patch on every node.
        absl::StatusOr<node::Match> match =
            version ? node::FindRelease(version->major, version->minor)
                    : absl::StatusOr<node::Match>(absl::NotFoundError("no version"));
        if (!match.ok() || !match->release->KubeNodeDocuments()) {
          std::fprintf(stderr,
                       "gpulet manifests: --talos-current-config: %s takes the same patch on "
                       "every node (it has no KubeNodeConfig document to move settings into), "
                       "so %s changed nothing; it matters from Talos 1.14 on "
                       "(--talos-version v1.14)\n",
                       version ? absl::StrCat("Talos ", version->ToString()).c_str()
                               : "the patch without --talos-version (Talos 1.13's form)",
                       current_config_.c_str());
        }
      }
      std::fputs(patch->c_str(), stdout);
      return kExitOk;
    }

    std::string dir = talos ? deploy::kTalosOverlayDir : deploy::kGenericOverlayDir;
    if (dra_) dir = talos ? deploy::kTalosDraOverlayDir : deploy::kDraOverlayDir;
    deploy::RenderOptions render;
    render.image = image_;
    absl::StatusOr<std::vector<deploy::KubeObject>> objects =
        deploy::RenderKustomization(files, dir, render);
    if (!objects.ok()) {
      std::fprintf(stderr, "gpulet manifests: rendering %s: %s\n", dir.c_str(),
                   std::string(objects.status().message()).c_str());
      return kExitFailure;
    }
    // Said on stderr, so that a user piping into kubectl sees which overlay they apply: run
    // on a workstation, the inspected "node" is the workstation.
    std::fprintf(stderr,
                 "gpulet manifests: rendered %s because %s; pass --overlay talos|generic "
                 "(or run on the GPU node, or with --host-root) to choose another\n",
                 dir.c_str(), why.c_str());
    std::fputs(Header(dir, facts, root, version, *extensions, talos).c_str(), stdout);
    std::fputs(deploy::FormatObjects(*objects).c_str(), stdout);
    return kExitOk;
  }

 private:
  std::string Header(const std::string& dir, const node::NodeFacts& facts, const std::string& root,
                     const std::optional<node::TalosVersion>& version,
                     const deploy::TalosExtensions& extensions, bool talos) const {
    std::string h = absl::StrCat("# gpulet ", GPULET_VERSION, " manifests: ", dir,
                                 " (rendered by `gpulet manifests`).\n",
                                 "#   gpulet manifests ... | kubectl apply -f -\n");
    std::string image = image_.empty() ? deploy::DefaultGpuletImage() : image_;
    absl::StrAppend(&h, "# Image: ", image, "\n");
    if (image_.empty()) {
      absl::StrAppend(&h,
                      "#   `make image` builds it locally; nodes cannot pull that. Push it to a "
                      "registry\n#   they can reach and pass --image registry.example.com/",
                      image, "\n");
    }
    if (inspect_) {
      absl::StrAppend(
          &h, "# Node (inspected under ", root, "): ",
          facts.os_pretty_name.empty() ? "OS unknown (no /etc/os-release)" : facts.os_pretty_name,
          "; ", DescribeGpus(facts), "; ", DescribeDriver(facts.driver), ".\n");
      if (facts.gpus.empty()) {
        absl::StrAppend(&h,
                        "#   Not a GPU node? The choices below are then defaults: run this on "
                        "the GPU node\n#   (or with --host-root), or pass --overlay and "
                        "--talos-version.\n");
      }
    }
    if (talos) {
      absl::StrAppend(&h, "# Talos ",
                      version ? version->ToString() : std::string("version unknown"),
                      ". System extensions this node needs:\n");
      for (const std::string& n : extensions.names) {
        absl::StrAppend(&h, "#   siderolabs/", n, "\n");
      }
      for (const std::string& r : extensions.reasons) absl::StrAppend(&h, "#   ", r, "\n");
      std::string version_flag =
          version ? absl::StrCat(" --talos-version ", version->ToString()) : "";
      absl::StrAppend(&h, "# Image Factory schematic:  gpulet manifests --talos-schematic",
                      version_flag, "\n",
                      "# Machine-config patch (kernel modules, GPU taint, GPU label):\n"
                      "#   gpulet manifests --talos-machine-patch",
                      version_flag, " > gpu-node-patch.yaml\n",
                      "#   talosctl -n <node> patch machineconfig --patch @gpu-node-patch.yaml\n");
    } else {
      absl::StrAppend(&h,
                      "# gpulet runs on nodes labelled nvidia.com/gpu.present=true:\n"
                      "#   kubectl label node <node> nvidia.com/gpu.present=true\n");
    }
    return h;
  }

  std::string overlay_;
  bool dra_ = false;
  std::string talos_version_;
  std::string current_config_;
  std::string image_;
  std::string branch_ = "production";
  bool inspect_ = true;
  bool print_patch_ = false;
  bool print_schematic_ = false;
};

}  // namespace

std::unique_ptr<CommandHandler> MakeManifestsCommand() {
  return std::make_unique<ManifestsCommand>();
}

}  // namespace gpulet::cli
