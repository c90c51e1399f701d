#include "node/driver_gpus.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "testing/files.h"

namespace gpulet::node {
namespace {

namespace fs = std::filesystem;

// As the 570 driver prints it (nv-procfs.c), for an initialised GPU.
constexpr char kInformation[] =
    "Model: \t\t NVIDIA GeForce RTX 5090\n"
    "IRQ:   \t\t 142\n"
    "GPU UUID: \t GPU-8a41d7b9-52c6-4f13-b0e8-7d2c9e155090\n"
    "Video BIOS: \t 98.02.2e.00.01\n"
    "Bus Type: \t PCIe\n"
    "DMA Size: \t 52 bits\n"
    "DMA Mask: \t 0xfffffffffffff\n"
    "Bus Location: \t 0000:02:00.0\n"
    "Device Minor: \t 1\n"
    "GPU Firmware: \t 570.124.06\n"
    "GPU Excluded:\t No\n";

TEST(DriverGpusTest, ParsesTheDriversInformationFile) {
  DriverGpu gpu = ParseGpuInformation(kInformation);
  EXPECT_EQ(gpu.bus_id, "0000:02:00.0");
  EXPECT_EQ(gpu.minor, 1u);
  EXPECT_EQ(gpu.uuid, "GPU-8a41d7b9-52c6-4f13-b0e8-7d2c9e155090");
  EXPECT_FALSE(gpu.excluded);

  // Before the GPU is initialised the UUID is a placeholder; older drivers say Blacklisted.
  gpu = ParseGpuInformation(
      "GPU UUID: \t ??????????????????????????????????????\nBus Location: \t 0000:41:00.0\n"
      "Device Minor: \t 3\nBlacklisted:\t Yes\n");
  EXPECT_EQ(gpu.uuid, "");
  EXPECT_EQ(gpu.minor, 3u);
  EXPECT_TRUE(gpu.excluded);

  gpu = ParseGpuInformation("Device Minor: \t -1\nBus Location: \t nowhere\nno colon here\n");
  EXPECT_FALSE(gpu.minor.has_value());
  EXPECT_EQ(gpu.bus_id, "");
  EXPECT_FALSE(ParseGpuInformation("").minor.has_value());
}

TEST(DriverGpusTest, ReadsEveryGpuDirectoryAndTrustsOnlyItsName) {
  testing::ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  const fs::path gpus = fs::path(dir.path()) / "proc/driver/nvidia/gpus";
  HostFs host(dir.path());
  EXPECT_TRUE(absl::IsNotFound(ReadDriverGpus(host).status()));

  fs::create_directories(gpus / "0000:02:00.0");
  std::ofstream(gpus / "0000:02:00.0/information") << kInformation;
  fs::create_directories(gpus / "0000:01:00.0");  // no file: listed by its name only
  fs::create_directories(gpus / "0000:03:00.0");  // a file naming another bus
  std::ofstream(gpus / "0000:03:00.0/information") << kInformation;
  fs::create_directories(gpus / "not-a-bus");

  absl::StatusOr<std::vector<DriverGpu>> read = ReadDriverGpus(host);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 3u);
  EXPECT_EQ((*read)[0].bus_id, "0000:01:00.0");
  EXPECT_FALSE((*read)[0].minor.has_value());
  EXPECT_EQ((*read)[1].bus_id, "0000:02:00.0");
  EXPECT_EQ((*read)[1].minor, 1u);
  EXPECT_EQ((*read)[2].bus_id, "0000:03:00.0");
  EXPECT_FALSE((*read)[2].minor.has_value());
  EXPECT_EQ((*read)[2].uuid, "");
}

}  // namespace
}  // namespace gpulet::node
