// `gpulet image-serve ARCHIVE [--address HOST:PORT] [--advertise HOST:PORT] [--talos-patch
// FILE]`: serves the OCI image archive `make image` writes as a read-only registry
// (registry/registry_server.h), so that nodes with no registry of their own pull gpulet's
// image from the machine that built it, pinned by digest. It prints what to do on the nodes:
// the Talos machine-config patch that sends those pulls to it over HTTP (also written to
// --talos-patch FILE) and the `gpulet manifests --image HOST:PORT/REPO@sha256:...` command;
// docs/no-registry.md has the other ways in. Runs until SIGINT or SIGTERM.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "common/atomic_file.h"
#include "common/log.h"
#include "deploy/manifests.h"
#include "registry/oci_archive.h"
#include "registry/registry_server.h"

namespace gpulet::cli {
namespace {

class ImageServeCommand final : public CommandHandler {
 public:
  void AddOptions(CLI::App& app) override {
    app.add_option("archive", archive_,
                   "The OCI image archive to serve (make image writes "
                   "build/image/gpulet-<version>.oci.tar)")
        ->required();
    app.add_option("--address", address_,
                   "Where to listen (default 0.0.0.0:5000: every IPv4 address, port 5000)");
    app.add_option("--advertise", advertise_,
                   "The HOST:PORT the nodes reach this machine at, for the patch and the "
                   "image reference it prints (default: the --address host when it names "
                   "one, else this machine's host name)");
    app.add_option("--talos-patch", talos_patch_,
                   "Also write the Talos machine-config patch that points the nodes here to "
                   "FILE");
  }

  int Run(CommandContext&) override {
    absl::StatusOr<registry::OciArchive> archive = registry::OciArchive::Open(archive_);
    if (!archive.ok()) {
      std::fprintf(stderr, "gpulet image-serve: %s\n",
                   std::string(archive.status().message()).c_str());
      return kExitUsage;
    }
    const registry::NamedImage& image = archive->images().front();
    registry::RepositoryTag name = image.name;
    if (name.repository.empty()) name.repository = "gpulet";

    // SIGINT and SIGTERM are waited for below; blocked before the server's thread starts so
    // that it inherits the mask and the main thread receives them.
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);

    registry::RegistryServer server(&*archive, {.repository = name.repository});
    if (absl::Status s = server.Start(address_); !s.ok()) {
      std::fprintf(stderr, "gpulet image-serve: %s\n", std::string(s.message()).c_str());
      return kExitFailure;
    }
    std::string advertise = advertise_.empty() ? DefaultAdvertise(server.port()) : advertise_;
    absl::StatusOr<std::string> patch =
        deploy::RenderTalosRegistryMirrorPatch(advertise, "--advertise");
    if (!patch.ok()) {
      std::fprintf(stderr, "gpulet image-serve: %s\n",
                   std::string(patch.status().message()).c_str());
      return kExitUsage;
    }
    if (!talos_patch_.empty()) {
      if (absl::Status s = WriteFileAtomically(talos_patch_, *patch); !s.ok()) {
        std::fprintf(stderr, "gpulet image-serve: cannot write --talos-patch: %s\n",
                     std::string(s.message()).c_str());
        return kExitFailure;
      }
    }
    const std::string pinned =
        absl::StrCat(advertise, "/", name.repository, "@", image.manifest.digest);
    std::printf(
        "gpulet image-serve: serving %s from %s as %s/%s%s%s\n"
        "  manifest %s; listening on %s (plain HTTP, read-only); Ctrl-C stops it.\n\n"
        "Talos nodes: send pulls of %s here (once per node),\n"
        "  talosctl patch machineconfig --nodes NODE --patch @%s\n"
        "%s%s\n"
        "Then install gpulet pinned to this image:\n"
        "  gpulet manifests --overlay talos --image %s | kubectl apply -f -\n\n"
        "Other containerd nodes can import the archive instead: ctr -n k8s.io images import "
        "%s\n"
        "(docs/no-registry.md has every way in.)\n",
        image.ref_name.empty() ? image.manifest.digest.c_str() : image.ref_name.c_str(),
        archive_.c_str(), advertise.c_str(), name.repository.c_str(), name.tag.empty() ? "" : ":",
        name.tag.c_str(), image.manifest.digest.c_str(), address_.c_str(), advertise.c_str(),
        talos_patch_.empty() ? "PATCH-FILE" : talos_patch_.c_str(),
        talos_patch_.empty() ? "with PATCH-FILE holding:\n" : "",
        talos_patch_.empty() ? patch->c_str() : "", pinned.c_str(), archive_.c_str());
    std::fflush(stdout);

    int sig = 0;
    while (sigwait(&stop, &sig) != 0) {
    }
    GPULET_LOG_INFO("image-serve: {}; stopping after {} requests",
                    sig == SIGTERM ? "SIGTERM" : "SIGINT", server.requests());
    server.Stop();
    return kExitOk;
  }

 private:
  // The --address host when it names one; else this machine's host name.
  std::string DefaultAdvertise(int port) const {
    std::string host = address_.substr(0, address_.rfind(':'));
    if (host.empty() || host == "0.0.0.0" || host == "[::]") {
      char name[256] = {};
      if (gethostname(name, sizeof(name) - 1) == 0 && name[0] != '\0') host = name;
      std::fprintf(stderr,
                   "gpulet image-serve: the nodes must reach this machine as '%s'; pass "
                   "--advertise IP:PORT if they cannot resolve that name\n",
                   host.c_str());
    }
    return absl::StrCat(host, ":", port);
  }

  std::string archive_;
  std::string address_ = "0.0.0.0:5000";
  std::string advertise_;
  std::string talos_patch_;
};

}  // namespace

std::unique_ptr<CommandHandler> MakeImageServeCommand() {
  return std::make_unique<ImageServeCommand>();
}

}  // namespace gpulet::cli
