// The gpulet binary end to end: command table, list against the simulator and against
// hosts without NVML.
#include <filesystem>

#include "cli/command.h"
#include "gtest/gtest.h"
#include "testing/subprocess.h"

namespace gpulet {
namespace {

using ::gpulet::testing::RunProgram;

std::string Gpulet() { return std::string(GPULET_BINARY_DIR) + "/gpulet"; }

TEST(CliTest, SuggestsTheClosestCommand) {
  EXPECT_EQ(SuggestCommand("lsit"), "list");
  EXPECT_EQ(SuggestCommand("serv"), "serve");
  EXPECT_EQ(SuggestCommand("xyzzy-nothing"), "");
  auto r = RunProgram({Gpulet(), "lsit"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("Did you mean 'list'?"), std::string::npos) << r.err;
}

TEST(CliTest, VersionMatchesBuild) {
  auto r = RunProgram({Gpulet(), "version"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find(std::string("gpulet ") + GPULET_VERSION), std::string::npos);
}

TEST(CliTest, HelpListsEveryCommand) {
  auto r = RunProgram({Gpulet(), "help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const Command& c : Commands()) {
    EXPECT_NE(r.out.find(c.name), std::string::npos) << c.name;
  }
}

TEST(CliTest, ListHomelabShowsBothGpus) {
  auto r = RunProgram(
      {Gpulet(), "--simulate", "homelab", "--sim-state", "/tmp/gpulet-cli-test-none.json", "list"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("NVIDIA GeForce RTX 3080  10.0 GiB  Ampere"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NVIDIA GeForce RTX 5090  31.8 GiB  Blackwell"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Driver 570.133.20, CUDA 12.8"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("fault-injection state"), std::string::npos);
}

TEST(CliTest, ListJsonDgx8HasEightHoppersOnTwoNumaNodes) {
  auto r = RunProgram({Gpulet(), "--simulate", "dgx8", "--sim-state",
                       "/tmp/gpulet-cli-test-none.json", "list", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  size_t count = 0, pos = 0;
  while ((pos = r.out.find("\"architecture\": \"Hopper\"", pos)) != std::string::npos) {
    ++count;
    ++pos;
  }
  EXPECT_EQ(count, 8u);
  EXPECT_NE(r.out.find("\"numa_node\": 1"), std::string::npos);
}

TEST(CliTest, ListWithMissingExplicitLibraryFailsWithTheFix) {
  auto r = RunProgram({Gpulet(), "list", "--nvml-lib", "/nonexistent"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("/nonexistent"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Fix:"), std::string::npos) << r.err;
}

TEST(CliTest, ListOnHostRootWithoutLibraryListsPathsAndPciGpus) {
  std::string root = std::string(GPULET_SOURCE_DIR) + "/tests/fixtures/hostroots/driver-unbound";
  auto r = RunProgram({Gpulet(), "--host-root", root, "list"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("/usr/local/glibc/lib/libnvidia-ml.so.1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("/nvidia-libs/libnvidia-ml.so.1"), std::string::npos) << r.err;
  // The GPUs are still listed from PCI, with no driver bound.
  EXPECT_NE(r.out.find("RTX 5090"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("none"), std::string::npos) << r.out;
}

TEST(CliTest, CrashingNvmlNeverCrashesGpulet) {
  auto r = RunProgram({Gpulet(), "--simulate", "homelab", "--nvml-lib",
                       std::string(GPULET_TESTLIB_DIR) + "/libnvml-crash_init.so", "list"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.signal, 0);
  EXPECT_NE(r.err.find("SIGSEGV"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace gpulet
