// `gpulet retired [--file PATH] [--clear GPU-UUID]`: lists the GPUs gpulet keeps out of
// service because they kept faulting (recorder/retirement.h, health.retire), or returns one
// to service after its card was reseated or replaced: --clear removes it from the file, and
// the running daemon puts it back within its next file check (10 s). The file is a host path
// under --host-root.
//
// Exit status: 0 listed or cleared; 1 the file cannot be read or written (the message says
// which and what to do); 2 --clear names a GPU the file does not list.
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cli/commands.h"
#include "common/host_fs.h"
#include "recorder/retirement.h"

namespace gpulet::cli {
namespace {

class RetiredCommand final : public CommandHandler {
 public:
  void AddOptions(CLI::App& app) override {
    app.add_option("--file", file_, "The retired-GPU file (health.retire.file), under --host-root")
        ->capture_default_str();
    app.add_option("--clear", clear_, "Return this GPU (its UUID) to service");
  }

  int Run(CommandContext& ctx) override {
    HostFs host(ctx.global.host_root);
    absl::StatusOr<std::string> local = host.Resolve(file_);
    if (!local.ok()) {
      std::fprintf(stderr, "gpulet retired: %s\n", std::string(local.status().message()).c_str());
      return kExitFailure;
    }
    recorder::RetiredFile file(*local, file_);
    absl::StatusOr<recorder::RetiredGpus> gpus = file.Load();
    if (!gpus.ok()) {
      std::fprintf(stderr, "gpulet retired: %s\n", std::string(gpus.status().message()).c_str());
      return kExitFailure;
    }
    if (!clear_.empty()) {
      if (gpus->erase(clear_) == 0) {
        std::fprintf(stderr,
                     "gpulet retired: %s does not list GPU %s; run `gpulet retired` to see the "
                     "ones it does\n",
                     file_.c_str(), clear_.c_str());
        return kExitUsage;
      }
      if (absl::Status s = file.Save(*gpus); !s.ok()) {
        std::fprintf(stderr, "gpulet retired: %s\n", std::string(s.message()).c_str());
        return kExitFailure;
      }
      std::printf("GPU %s is no longer retired; gpulet serve returns it to service within 10 s.\n",
                  clear_.c_str());
      return kExitOk;
    }
    if (gpus->empty()) {
      std::printf("No GPU is retired (%s).\n", file_.c_str());
      return kExitOk;
    }
    for (const auto& [uuid, g] : *gpus) {
      std::printf("%s  %s  since %s\n  %s\n", uuid.c_str(), g.pci_bus_id.c_str(),
                  absl::FormatTime(absl::RFC3339_sec, absl::FromUnixSeconds(g.since_unix),
                                   absl::UTCTimeZone())
                      .c_str(),
                  g.reason.c_str());
    }
    return kExitOk;
  }

 private:
  std::string file_ = "/var/lib/gpulet/retired.json";
  std::string clear_;
};

}  // namespace

std::unique_ptr<CommandHandler> MakeRetiredCommand() { return std::make_unique<RetiredCommand>(); }

}  // namespace gpulet::cli
