#include "node/pci_reset.h"

#include <sys/stat.h>
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

// A host tree laid out as sysfs is: the bus's entry a link to the device's directory.
class SysfsGpuResetterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    device_ = fs::path(root_.path()) / "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0";
    fs::create_directories(device_);
    fs::create_directories(fs::path(root_.path()) / "sys/bus/pci/devices");
    fs::create_symlink("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0",
                       fs::path(root_.path()) / "sys/bus/pci/devices/0000:01:00.0");
  }
  void AddResetFile() { std::ofstream(device_ / "reset").flush(); }

  testing::ScratchDir root_;
  fs::path device_;
  HostFs host_{root_.path()};
  SysfsGpuResetter resetter_{&host_};
};

TEST_F(SysfsGpuResetterTest, WritesOneToTheDevicesResetFileInAnySpelling) {
  AddResetFile();
  ASSERT_TRUE(resetter_.Reset("GPU-1", "00000000:01:00.0").ok());
  EXPECT_EQ(testing::ReadTextFile((device_ / "reset").string()), "1");
}

TEST_F(SysfsGpuResetterTest, NoResetFileIsNotFoundAndSaysToReboot) {
  absl::Status s = resetter_.Reset("GPU-1", "0000:01:00.0");
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_NE(s.message().find("reboot the node"), std::string::npos) << s;
}

TEST_F(SysfsGpuResetterTest, AGpuGoneFromTheBusIsNotFound) {
  absl::Status s = resetter_.Reset("GPU-1", "0000:02:00.0");
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_NE(s.message().find("gone from the bus"), std::string::npos) << s;
}

TEST_F(SysfsGpuResetterTest, AnAddressThatIsNotOneIsInvalid) {
  EXPECT_TRUE(absl::IsInvalidArgument(resetter_.Reset("GPU-1", "../../etc/passwd")));
  EXPECT_TRUE(absl::IsInvalidArgument(resetter_.Reset("GPU-1", "")));
}

// A hostile tree's reset file that links outside the root is refused, not followed.
TEST_F(SysfsGpuResetterTest, AResetFileThatIsALinkIsNotFollowed) {
  testing::ScratchDir outside;
  const fs::path target = fs::path(outside.path()) / "target";
  std::ofstream(target).flush();
  fs::create_symlink(target, device_ / "reset");
  EXPECT_FALSE(resetter_.Reset("GPU-1", "0000:01:00.0").ok());
  EXPECT_EQ(testing::ReadTextFile(target.string()), "");
}

// The device's own link pointing above the root stays inside it.
TEST_F(SysfsGpuResetterTest, ADeviceLinkClimbingOutOfTheRootStaysInside) {
  fs::remove(fs::path(root_.path()) / "sys/bus/pci/devices/0000:01:00.0");
  fs::create_symlink("../../../../../../../../tmp",
                     fs::path(root_.path()) / "sys/bus/pci/devices/0000:01:00.0");
  absl::Status s = resetter_.Reset("GPU-1", "0000:01:00.0");
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(fs::exists("/tmp/reset") && testing::ReadTextFile("/tmp/reset") == "1");
}

TEST_F(SysfsGpuResetterTest, AReadOnlyResetFileIsPermissionDeniedAndSaysWhatToGrant) {
  if (geteuid() == 0) GTEST_SKIP() << "root writes a read-only file";
  AddResetFile();
  fs::permissions(device_ / "reset", fs::perms::owner_read);
  absl::Status s = resetter_.Reset("GPU-1", "0000:01:00.0");
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_NE(s.message().find("deploy/reset"), std::string::npos) << s;
}

TEST_F(SysfsGpuResetterTest, AResetPathThatIsADirectoryIsRefused) {
  fs::create_directories(device_ / "reset");
  EXPECT_FALSE(resetter_.Reset("GPU-1", "0000:01:00.0").ok());
}

}  // namespace
}  // namespace gpulet::node
