#include <cstdio>

#include "cli/commands.h"

namespace gpulet {
namespace {

class VersionCommand final : public CommandHandler {
 public:
  int Run(CommandContext&) override {
    std::printf("gpulet %s (%s)\n", GPULET_VERSION, GPULET_GIT_REV);
    return kExitOk;
  }
};

}  // namespace

std::unique_ptr<CommandHandler> MakeVersionCommand() { return std::make_unique<VersionCommand>(); }

}  // namespace gpulet
