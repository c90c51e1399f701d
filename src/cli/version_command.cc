#include <cstdio>

#include "cli/commands.h"
#include "common/build_info.h"

namespace gpulet::cli {
namespace {

class VersionCommand final : public CommandHandler {
 public:
  int Run(CommandContext&) override {
    std::printf("gpulet %s (%s)\n", GPULET_VERSION, GitRevision());
    return kExitOk;
  }
};

}  // namespace

std::unique_ptr<CommandHandler> MakeVersionCommand() { return std::make_unique<VersionCommand>(); }

}  // namespace gpulet::cli
