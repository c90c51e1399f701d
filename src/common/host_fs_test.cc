#include "common/host_fs.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpulet {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A scratch directory holding a host root ("root/") and, next to it, a file that must never
// be readable through the root ("outside/secret").
class HostFsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::path(::testing::TempDir()) / "host_fs_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    base_ = tmpl;
    root_ = (fs::path(base_) / "root").string();
    fs::create_directories(fs::path(base_) / "outside");
    Write(fs::path(base_) / "outside/secret", "outside the root\n");

    // A PCI device reached the way the kernel presents it: a bus entry linking to the
    // device directory, whose `driver` link is relative to the device directory.
    Write(Local("/sys/devices/pci0000:00/0000:01:00.0/vendor"), "0x10de\n");
    fs::create_directories(Local("/sys/bus/pci/drivers/nvidia"));
    fs::create_directories(Local("/sys/bus/pci/devices"));
    fs::create_symlink("../../../devices/pci0000:00/0000:01:00.0",
                       Local("/sys/bus/pci/devices/0000:01:00.0"));
    fs::create_symlink("../../../bus/pci/drivers/nvidia",
                       Local("/sys/devices/pci0000:00/0000:01:00.0/driver"));
    Write(Local("/etc/target"), "inside\n");
  }

  void TearDown() override {
    std::error_code ec;
    fs::remove_all(base_, ec);
  }

  // The path on this machine of a host path.
  fs::path Local(const std::string& host_path) const { return fs::path(root_ + host_path); }

  static void Write(const fs::path& path, const std::string& text) {
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }

  std::string base_;
  std::string root_;
};

TEST_F(HostFsTest, ReadsThroughRelativeSymlinks) {
  HostFs host(root_);
  absl::StatusOr<std::string> vendor =
      host.ReadAttribute("/sys/bus/pci/devices/0000:01:00.0/vendor");
  ASSERT_TRUE(vendor.ok()) << vendor.status();
  EXPECT_EQ(*vendor, "0x10de");
  absl::StatusOr<std::string> raw = host.ReadFile("/sys/bus/pci/devices/0000:01:00.0/vendor");
  ASSERT_TRUE(raw.ok());
  EXPECT_EQ(*raw, "0x10de\n");
}

TEST_F(HostFsTest, AbsoluteSymlinksAreReanchoredAtTheRoot) {
  fs::create_symlink("/etc/target", Local("/abs"));
  HostFs host(root_);
  absl::StatusOr<std::string> text = host.ReadFile("/abs");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "inside\n");
  absl::StatusOr<std::string> local = host.Resolve("/abs");
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(*local, root_ + "/etc/target");
}

TEST_F(HostFsTest, SymlinksCannotClimbOutOfTheRoot) {
  // Relative and absolute attempts to reach <base>/outside/secret both land inside the
  // root, where there is no such file.
  fs::create_symlink("../../../../../../outside/secret", Local("/etc/rel-escape"));
  fs::create_symlink("/../../outside/secret", Local("/abs-escape"));
  HostFs host(root_);
  for (const char* path : {"/etc/rel-escape", "/abs-escape"}) {
    absl::StatusOr<std::string> text = host.ReadFile(path);
    EXPECT_FALSE(text.ok()) << path << " read: " << *text;
    if (!text.ok()) {
      EXPECT_EQ(text.status().code(), absl::StatusCode::kNotFound) << path;
    }
    absl::StatusOr<std::string> local = host.Resolve(path);
    ASSERT_TRUE(local.ok());
    EXPECT_EQ(*local, root_ + "/outside/secret") << path;
  }
}

TEST_F(HostFsTest, ADirReadsItsFilesAndFollowsNoLinkInThem) {
  Write(Local("/sys/devices/pci0000:00/0000:01:00.0/current_link_width"), "16\n");
  // A link in the directory, to a file inside the root and to one outside it: neither is
  // followed (sysfs attributes are regular files).
  fs::create_symlink("/etc/target", Local("/sys/devices/pci0000:00/0000:01:00.0/inside"));
  fs::create_symlink(fs::path(base_) / "outside/secret",
                     Local("/sys/devices/pci0000:00/0000:01:00.0/escape"));
  HostFs host(root_);
  absl::StatusOr<HostFs::Dir> dir = host.OpenDir("/sys/bus/pci/devices/0000:01:00.0");
  ASSERT_TRUE(dir.ok()) << dir.status();
  absl::StatusOr<std::string> width = dir->ReadAttribute("current_link_width");
  ASSERT_TRUE(width.ok()) << width.status();
  EXPECT_EQ(*width, "16");
  absl::StatusOr<std::string> raw = dir->ReadFile("vendor");
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(*raw, "0x10de\n");
  for (const char* name : {"inside", "escape"}) {
    absl::StatusOr<std::string> text = dir->ReadFile(name);
    ASSERT_FALSE(text.ok()) << name << " read: " << *text;
    EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(std::string(text.status().message()), HasSubstr("is a symbolic link")) << name;
    EXPECT_THAT(std::string(text.status().message()),
                HasSubstr("/sys/bus/pci/devices/0000:01:00.0/" + std::string(name)));
  }
  EXPECT_EQ(dir->ReadFile("missing").status().code(), absl::StatusCode::kNotFound);
  // One component only: a name cannot walk out of the directory.
  for (const char* name : {"", ".", "..", "../0000:01:00.0/vendor", "driver/x"}) {
    EXPECT_EQ(dir->ReadFile(name).status().code(), absl::StatusCode::kInvalidArgument) << name;
  }
  // A directory is only what resolves to one, inside the root.
  EXPECT_EQ(host.OpenDir("/sys/bus/pci/devices/0000:02:00.0").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(host.OpenDir("/etc/target").status().code(), absl::StatusCode::kNotFound);
  fs::create_symlink("/../../outside", Local("/escape-dir"));
  EXPECT_EQ(host.OpenDir("/escape-dir").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(HostFsTest, DotDotInHostPathsStopsAtTheRoot) {
  HostFs host(root_);
  absl::StatusOr<std::string> text = host.ReadFile("/../outside/secret");
  EXPECT_FALSE(text.ok());
  absl::StatusOr<std::string> local = host.Resolve("/../../..");
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(*local, root_);
  absl::StatusOr<std::string> inside = host.ReadFile("/sys/../etc/./target");
  ASSERT_TRUE(inside.ok()) << inside.status();
  EXPECT_EQ(*inside, "inside\n");
}

TEST_F(HostFsTest, MissingPathsAreNotFoundAndNamed) {
  HostFs host(root_);
  absl::StatusOr<std::string> text = host.ReadFile("/proc/driver/nvidia/version");
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(text.status().message(), "/proc/driver/nvidia/version"));
  EXPECT_TRUE(absl::StrContains(text.status().message(), root_)) << text.status();
  EXPECT_FALSE(host.Exists("/proc/driver/nvidia/version"));
  absl::StatusOr<std::vector<std::string>> list = host.ListDir("/nope");
  ASSERT_FALSE(list.ok());
  EXPECT_EQ(list.status().code(), absl::StatusCode::kNotFound);
  // A missing file under a missing directory resolves lexically without error.
  absl::StatusOr<std::string> local = host.Resolve("/no/such/dir/../file");
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(*local, root_ + "/no/such/file");
}

TEST_F(HostFsTest, RelativeHostPathsAreRejected) {
  HostFs host(root_);
  absl::StatusOr<std::string> text = host.ReadFile("etc/target");
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(host.Resolve("").ok());
}

TEST_F(HostFsTest, SymlinkLoopsFail) {
  fs::create_symlink("b", Local("/a"));
  fs::create_symlink("a", Local("/b"));
  HostFs host(root_);
  absl::StatusOr<std::string> text = host.ReadFile("/a");
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), absl::StatusCode::kFailedPrecondition) << text.status();
}

TEST_F(HostFsTest, ReadLinkResolvesAgainstTheLinksRealDirectory) {
  HostFs host(root_);
  // The device directory is reached through /sys/bus/pci/devices, but the driver link's
  // "../../.." counts from /sys/devices/pci0000:00/0000:01:00.0.
  absl::StatusOr<std::string> target = host.ReadLink("/sys/bus/pci/devices/0000:01:00.0/driver");
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ(*target, "/sys/bus/pci/drivers/nvidia");
  absl::StatusOr<std::string> direct = host.ReadLink("/sys/devices/pci0000:00/0000:01:00.0/driver");
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ(*direct, "/sys/bus/pci/drivers/nvidia");
  absl::StatusOr<std::string> entry = host.ReadLink("/sys/bus/pci/devices/0000:01:00.0");
  ASSERT_TRUE(entry.ok());
  EXPECT_EQ(*entry, "/sys/devices/pci0000:00/0000:01:00.0");
}

TEST_F(HostFsTest, ReadLinkReturnsAbsoluteTargetsAsHostPaths) {
  fs::create_symlink("/etc/target", Local("/abs"));
  HostFs host(root_);
  absl::StatusOr<std::string> target = host.ReadLink("/abs");
  ASSERT_TRUE(target.ok());
  EXPECT_EQ(*target, "/etc/target");
}

TEST_F(HostFsTest, ReadLinkOnMissingOrPlainFileFails) {
  HostFs host(root_);
  absl::StatusOr<std::string> missing =
      host.ReadLink("/sys/devices/pci0000:00/0000:02:00.0/driver");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(host.ReadLink("/etc/target").ok());
}

TEST_F(HostFsTest, ListDirIsSortedWithoutDotEntries) {
  Write(Local("/d/b"), "");
  Write(Local("/d/a"), "");
  fs::create_directories(Local("/d/c"));
  HostFs host(root_);
  absl::StatusOr<std::vector<std::string>> names = host.ListDir("/d");
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, (std::vector<std::string>{"a", "b", "c"}));
  absl::StatusOr<std::vector<std::string>> through_link = host.ListDir("/sys/bus/pci/devices");
  ASSERT_TRUE(through_link.ok());
  EXPECT_EQ(*through_link, (std::vector<std::string>{"0000:01:00.0"}));
}

TEST_F(HostFsTest, ExistsAndIsDirectoryFollowLinks) {
  HostFs host(root_);
  EXPECT_TRUE(host.Exists("/etc/target"));
  EXPECT_FALSE(host.IsDirectory("/etc/target"));
  EXPECT_TRUE(host.IsDirectory("/sys/bus/pci/devices/0000:01:00.0"));
  EXPECT_TRUE(host.IsDirectory("/sys/bus/pci/devices/0000:01:00.0/driver"));
  EXPECT_TRUE(host.Exists("/"));
  EXPECT_TRUE(host.IsDirectory("/"));
}

// A FIFO, socket or directory planted in the host tree is refused at once, named, never
// waited on.
TEST_F(HostFsTest, ReadFileRefusesWhatIsNotARegularFile) {
  fs::create_directories(Local("/proc/driver/nvidia"));
  ASSERT_EQ(mkfifo(Local("/proc/driver/nvidia/version").c_str(), 0600), 0);
  fs::create_directories(Local("/etc/os-release"));
  HostFs host(root_);
  absl::StatusOr<std::string> fifo = host.ReadFile("/proc/driver/nvidia/version");
  ASSERT_FALSE(fifo.ok());
  EXPECT_TRUE(absl::StrContains(fifo.status().message(), "/proc/driver/nvidia/version"))
      << fifo.status();
  EXPECT_TRUE(absl::StrContains(fifo.status().message(), "is a FIFO")) << fifo.status();
  absl::StatusOr<std::string> dir = host.ReadAttribute("/etc/os-release");
  ASSERT_FALSE(dir.ok());
  EXPECT_TRUE(absl::StrContains(dir.status().message(), "is a directory")) << dir.status();
}

TEST_F(HostFsTest, ReadFileHonoursMaxBytes) {
  Write(Local("/big"), std::string(100, 'x'));
  HostFs host(root_);
  absl::StatusOr<std::string> text = host.ReadFile("/big", 10);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->size(), 10u);
}

TEST_F(HostFsTest, RootIsNormalised) {
  HostFs with_slash(root_ + "///");
  EXPECT_EQ(with_slash.root(), root_);
  EXPECT_FALSE(with_slash.is_real_root());
  EXPECT_EQ(with_slash.Describe("/x"), "/x (read as " + root_ + "/x)");
}

TEST(HostFsRealRootTest, SlashIsTheRealRoot) {
  HostFs host("/");
  EXPECT_TRUE(host.is_real_root());
  EXPECT_EQ(host.Describe("/proc/modules"), "/proc/modules");
  absl::StatusOr<std::string> local = host.Resolve("/no-such-gpulet-path");
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(*local, "/no-such-gpulet-path");
  EXPECT_TRUE(HostFs("").is_real_root());
}

TEST(HostFsRealRootTest, RelativeRootIsMadeAbsolute) {
  HostFs host("some/dir");
  ASSERT_FALSE(host.root().empty());
  EXPECT_EQ(host.root().front(), '/');
  EXPECT_TRUE(absl::EndsWith(host.root(), "/some/dir"));
}

TEST(HostFsFixtureTest, HomelabDriverLinkNamesNvidia) {
  HostFs host(std::string(GPULET_SOURCE_DIR) + "/sim/fixtures/homelab/root");
  absl::StatusOr<std::string> target = host.ReadLink("/sys/bus/pci/devices/0000:02:00.0/driver");
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ(*target, "/sys/bus/pci/drivers/nvidia");
  EXPECT_TRUE(host.IsDirectory("/sys/bus/pci/devices/0000:02:00.0/driver"));
}

TEST(JoinPathTest, ExactlyOneSlash) {
  EXPECT_EQ(JoinPath("/a", "b"), "/a/b");
  EXPECT_EQ(JoinPath("/a/", "b"), "/a/b");
  EXPECT_EQ(JoinPath("/a", "/b"), "/a/b");
  EXPECT_EQ(JoinPath("/a/", "/b"), "/a/b");
  EXPECT_EQ(JoinPath("", "b"), "b");
  EXPECT_EQ(JoinPath("/a", ""), "/a");
}

}  // namespace
}  // namespace gpulet
