#include "node/device_holders.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "testing/files.h"

namespace gpulet::node {
namespace {

namespace fs = std::filesystem;

// A host root with /dev/nvidia0 and /dev/nvidia1 (placeholders) and processes whose fd
// directories link to them, as /proc/<pid>/fd does.
class DeviceHoldersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    root_ = dir_.path();
    fs::create_directories(root_ / "dev");
    std::ofstream(root_ / "dev/nvidia0") << "";
    std::ofstream(root_ / "dev/nvidia1") << "";
    std::ofstream(root_ / "usr-bin-ollama") << "";
    fs::create_directories(root_ / "proc/self");  // not a pid: skipped
  }

  // Process `pid` named `comm`, child of `ppid`, running `exe`, with `open` as descriptors.
  void Process(unsigned pid, const std::string& comm, unsigned ppid, const std::string& exe,
               const std::vector<std::string>& open) {
    const fs::path p = root_ / "proc" / std::to_string(pid);
    fs::create_directories(p / "fd");
    std::ofstream(p / "comm") << comm << "\n";
    std::ofstream(p / "stat") << pid << " (" << comm << ") S " << ppid << " 1 1 0 -1\n";
    fs::create_symlink(exe, p / "exe");
    int fd = 3;
    for (const std::string& file : open)
      fs::create_symlink(root_ / file, p / "fd" / std::to_string(fd++));
  }

  testing::ScratchDir dir_;
  fs::path root_;
};

TEST_F(DeviceHoldersTest, FindsTheProcessesThatHoldTheDeviceAndLeavesOutGpuletAndTheDriver) {
  Process(4242, "ollama", 1, "/usr/bin/ollama", {"usr-bin-ollama", "dev/nvidia1"});
  Process(3117, "ffmpeg", 1, "/usr/bin/ffmpeg", {"dev/nvidia0"});
  Process(812, "nvidia-persiste", 1, "/usr/bin/nvidia-persistenced",
          {"dev/nvidia0", "dev/nvidia1"});
  Process(900, "gpulet", 1, "/usr/bin/gpulet", {"dev/nvidia1"});
  Process(901, "gpulet-nvml-wor", 900, "/usr/lib/gpulet/gpulet-nvml-worker", {"dev/nvidia1"});
  HostFs host(root_.string());
  DeviceHolderOptions options;
  options.self_pid = 900;
  absl::StatusOr<std::vector<DeviceHolder>> held = ProcessesHolding(host, "/dev/nvidia1", options);
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_EQ(held->size(), 1u);
  EXPECT_EQ((*held)[0].pid, 4242u);
  EXPECT_EQ((*held)[0].name, "ollama");
  EXPECT_EQ((*held)[0].exe, "ollama");

  // Without knowing itself, gpulet's own processes count: never "nobody" by mistake.
  held = ProcessesHolding(host, "/dev/nvidia1", DeviceHolderOptions());
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(held->size(), 3u);
}

TEST_F(DeviceHoldersTest, AnIdleDeviceHasNoHoldersAndAMissingOneIsAnError) {
  Process(3117, "ffmpeg", 1, "/usr/bin/ffmpeg", {"dev/nvidia0"});
  HostFs host(root_.string());
  absl::StatusOr<std::vector<DeviceHolder>> held =
      ProcessesHolding(host, "/dev/nvidia1", DeviceHolderOptions());
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_TRUE(held->empty());
  // A process with no fd directory (a kernel thread, one that ended) is skipped.
  fs::create_directories(root_ / "proc/2");
  EXPECT_TRUE(ProcessesHolding(host, "/dev/nvidia1", DeviceHolderOptions()).ok());
  absl::StatusOr<std::vector<DeviceHolder>> missing =
      ProcessesHolding(host, "/dev/nvidia7", DeviceHolderOptions());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/dev/nvidia7"), std::string::npos) << missing.status();
}

// proc(5)'s numbering, counted from the last ')': a name with spaces and parentheses moves
// nothing.
TEST(ProcStatFieldTest, CountsFromTheLastParenthesis) {
  EXPECT_EQ(ProcStatField("7 (a) b (c) R 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 55 0 0", 4), 1u);
  EXPECT_EQ(ProcStatField("7 (a) b (c) R 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 55 0 0", 22), 55u);
  EXPECT_EQ(ProcStatField("7 (short) R 1 2 3", 22), std::nullopt);
  EXPECT_EQ(ProcStatField("7 (x) R 1", 3), std::nullopt);  // the state is not a number
  EXPECT_EQ(ProcStatField("no parenthesis 1 2 3", 4), std::nullopt);
}

}  // namespace
}  // namespace gpulet::node
