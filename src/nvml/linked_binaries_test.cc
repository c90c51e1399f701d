// The binaries as the optimised build links them (tests/CMakeLists.txt runs this file in the
// plain build only, in gpulet_plain_tests): what linking from Debian's static archives
// leaves them needing at run time.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "nvml/elf_check.h"
#include "testing/homelab.h"

namespace gpulet::nvml {
namespace {

// docs/architecture.md, "Linking and resident memory": with GPULET_STATIC_DEPS, `gpulet`
// needs only glibc and p11-kit (GnuTLS's, no archive in Debian 12), and the simulator
// library only glibc: what was linked from archives brings no shared library along.
TEST(BuildLinkTest, GpuletAndTheSimulatorNeedOnlyLibrariesWithoutArchives) {
  if (!GPULET_STATIC_DEPS_LINKED) GTEST_SKIP() << "built with shared libraries";
  const std::vector<std::string> glibc = {"libc.so.6", "libm.so.6", "ld-linux-x86-64.so.2"};
  struct Case {
    std::string path;
    std::vector<std::string> allowed;
  } cases[] = {
      {gpulet::testing::GpuletBinary(), {"libp11-kit.so.0"}},
      {GPULET_SIM_LIB, {}},
  };
  for (Case& c : cases) {
    SCOPED_TRACE(c.path);
    c.allowed.insert(c.allowed.end(), glibc.begin(), glibc.end());
    absl::StatusOr<ElfInfo> info = ReadElfInfo(c.path);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_FALSE(info->needed.empty());
    for (const std::string& lib : info->needed) {
      EXPECT_NE(std::find(c.allowed.begin(), c.allowed.end(), lib), c.allowed.end()) << lib;
    }
  }
}

}  // namespace
}  // namespace gpulet::nvml
