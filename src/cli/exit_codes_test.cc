// The CLI's exit codes (cli/command.h) as scripts see them: a usage error and a failed
// doctor check must be told apart by the code alone.
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "cli/command.h"
#include "gtest/gtest.h"
#include "testing/homelab.h"
#include "testing/subprocess.h"

namespace gpulet::cli {
namespace {

static_assert(kExitOk != kExitFailure && kExitFailure != kExitUsage &&
                  kExitUsage != kExitCheckFailed && kExitCheckFailed != kExitFailure &&
                  kExitCheckFailed != kExitOk,
              "exit codes must be distinct");

std::string Root(const std::string& name) {
  return absl::StrCat(GPULET_SOURCE_DIR, "/tests/fixtures/hostroots/", name);
}

TEST(ExitCodesTest, UsageErrorsAndFailedChecksDiffer) {
  const std::string bad_config = ::testing::TempDir() + "/gpulet-exit-codes-bad.yaml";
  std::ofstream(bad_config) << "version: v1\nplugin:\n  deviceIdStrategy: serial\n";
  struct Case {
    const char* what;
    std::vector<std::string> argv;
    int want;
  };
  const Case kCases[] = {
      {"unknown flag", {gpulet::testing::GpuletBinary(), "doctor", "--no-such-flag"}, kExitUsage},
      {"unknown command", {gpulet::testing::GpuletBinary(), "doctr"}, kExitUsage},
      {"doctor with a bad config",
       {gpulet::testing::GpuletBinary(), "--host-root", Root("no-gpu"), "doctor", "--config",
        bad_config},
       kExitUsage},
      {"doctor finds no GPU",
       {gpulet::testing::GpuletBinary(), "--host-root", Root("no-gpu"), "doctor"},
       kExitCheckFailed},
  };
  for (const Case& c : kCases) {
    testing::RunResult r = testing::RunProgram(c.argv);
    EXPECT_EQ(r.exit_code, c.want) << c.what << "\n" << r.out << r.err;
  }
}

}  // namespace
}  // namespace gpulet::cli
