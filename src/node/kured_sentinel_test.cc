#include "node/kured_sentinel.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "testing/files.h"

namespace gpulet::node {
namespace {

namespace fs = std::filesystem;

class KuredSentinelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // As most hosts have it: /var/run a link to /run.
    fs::create_directories(root() / "run");
    fs::create_directories(root() / "var");
    fs::create_symlink("/run", root() / "var/run");
  }
  fs::path root() const { return fs::path(dir_.path()); }

  testing::ScratchDir dir_;
  HostFs host_{dir_.path()};
  KuredSentinel sentinel_{&host_, kKuredDefaultSentinel};
};

TEST_F(KuredSentinelTest, CreatesTheSentinelThroughTheHostsLinkSayingWhy) {
  ASSERT_TRUE(sentinel_.Reboot("GPU-1 (GPU 1): XID 79", "XID 79").ok());
  EXPECT_EQ(testing::ReadTextFile((root() / "run/reboot-required").string()),
            "gpulet: GPU-1 (GPU 1): XID 79\n");
  // Asked already (by gpulet or by a package update): left as it is.
  ASSERT_TRUE(sentinel_.Reboot("again", "XID 79").ok());
  EXPECT_EQ(testing::ReadTextFile((root() / "run/reboot-required").string()),
            "gpulet: GPU-1 (GPU 1): XID 79\n");
  EXPECT_NE(sentinel_.Describe().find("/var/run/reboot-required"), std::string::npos);
}

TEST_F(KuredSentinelTest, AMissingDirectoryIsAFailedPreconditionNamingTheMount) {
  KuredSentinel elsewhere(&host_, "/nonexistent/reboot-required");
  absl::Status s = elsewhere.Reboot("x", "XID 79");
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_NE(s.message().find("deploy/reboot"), std::string::npos) << s;
}

// A link planted at the sentinel's own name is never written through.
TEST_F(KuredSentinelTest, ALinkAtTheSentinelsNameIsNotFollowed) {
  testing::ScratchDir outside;
  const fs::path target = fs::path(outside.path()) / "target";
  fs::create_symlink(target, root() / "run/reboot-required");
  EXPECT_TRUE(sentinel_.Reboot("x", "XID 79").ok());  // something is there: not gpulet's to replace
  EXPECT_FALSE(fs::exists(target));
}

TEST_F(KuredSentinelTest, AReadOnlyDirectoryIsPermissionDeniedNamingTheMount) {
  if (geteuid() == 0) GTEST_SKIP() << "root writes a read-only directory";
  fs::permissions(root() / "run", fs::perms::owner_read | fs::perms::owner_exec);
  absl::Status s = sentinel_.Reboot("x", "XID 79");
  fs::permissions(root() / "run", fs::perms::owner_all);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_NE(s.message().find("deploy/reboot"), std::string::npos) << s;
}

}  // namespace
}  // namespace gpulet::node
