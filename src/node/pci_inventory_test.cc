#include "node/pci_inventory.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/host_fs.h"
#include "gtest/gtest.h"

namespace gpulet::node {
namespace {

namespace fs = std::filesystem;

std::string FixtureRoot(const std::string& name) {
  return std::string(GPULET_SOURCE_DIR) + "/sim/fixtures/" + name + "/root";
}

std::string TestRoot(const std::string& name) {
  return std::string(GPULET_SOURCE_DIR) + "/tests/fixtures/hostroots/" + name;
}

std::vector<PciGpu> Scan(const std::string& root) {
  absl::StatusOr<std::vector<PciGpu>> gpus = ScanPciGpus(HostFs(root));
  EXPECT_TRUE(gpus.ok()) << root << ": " << gpus.status();
  return gpus.ok() ? *std::move(gpus) : std::vector<PciGpu>{};
}

// A scratch host root for cases no committed fixture covers; removed afterwards.
class ScratchRoot {
 public:
  ScratchRoot() {
    std::string tmpl = (fs::path(::testing::TempDir()) / "pci_inventory_XXXXXX").string();
    char* dir = mkdtemp(tmpl.data());
    EXPECT_NE(dir, nullptr);
    root_ = tmpl;
    fs::create_directories(fs::path(root_) / "sys/bus/pci/devices");
  }
  ~ScratchRoot() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  const std::string& root() const { return root_; }

  // A device directory reached through /sys/bus/pci/devices/<name> like on a real host.
  // Attributes whose value is empty are not written.
  void AddDevice(const std::string& name, const std::string& vendor, const std::string& device,
                 const std::string& cls) {
    fs::path dir = fs::path(root_) / "sys/devices/pci0000:00" / name;
    fs::create_directories(dir);
    if (!vendor.empty()) Write(dir / "vendor", vendor + "\n");
    if (!device.empty()) Write(dir / "device", device + "\n");
    if (!cls.empty()) Write(dir / "class", cls + "\n");
    fs::create_symlink("../../../devices/pci0000:00/" + name,
                       fs::path(root_) / "sys/bus/pci/devices" / name);
  }

 private:
  static void Write(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

  std::string root_;
};

TEST(ScanPciGpusTest, HomelabListsBothCardsButNotTheAudioFunction) {
  std::vector<PciGpu> gpus = Scan(FixtureRoot("homelab"));
  ASSERT_EQ(gpus.size(), 2u);

  const PciGpu& rtx3080 = gpus[0];
  EXPECT_EQ(rtx3080.bus_id, "0000:01:00.0");
  EXPECT_EQ(rtx3080.device_id, 0x2206);
  EXPECT_EQ(rtx3080.product, "NVIDIA GeForce RTX 3080");
  EXPECT_EQ(rtx3080.memory, "10 GB");
  EXPECT_EQ(rtx3080.architecture, Architecture::kAmpere);
  EXPECT_FALSE(rtx3080.architecture_guessed);
  EXPECT_EQ(rtx3080.module_flavor, ModuleFlavor::kEither);
  EXPECT_EQ(rtx3080.class_code, 0x030000u);
  EXPECT_EQ(rtx3080.subsystem_vendor_id, 0x1462);
  EXPECT_EQ(rtx3080.subsystem_device_id, 0x3890);
  EXPECT_EQ(rtx3080.driver, "nvidia");
  EXPECT_EQ(rtx3080.numa_node, -1);
  EXPECT_EQ(rtx3080.iommu_group, -1);

  const PciGpu& rtx5090 = gpus[1];
  EXPECT_EQ(rtx5090.bus_id, "0000:02:00.0");
  EXPECT_EQ(rtx5090.device_id, 0x2b85);
  EXPECT_EQ(rtx5090.product, "NVIDIA GeForce RTX 5090");
  EXPECT_EQ(rtx5090.memory, "32 GB");
  EXPECT_EQ(rtx5090.architecture, Architecture::kBlackwell);
  EXPECT_EQ(rtx5090.module_flavor, ModuleFlavor::kOpenRequired);
  EXPECT_EQ(rtx5090.subsystem_vendor_id, 0x10de);
  EXPECT_EQ(rtx5090.subsystem_device_id, 0x530c);
  EXPECT_EQ(rtx5090.driver, "nvidia");
  EXPECT_EQ(rtx5090.numa_node, -1);
}

TEST(ScanPciGpusTest, H200HasNumaNodeAndIommuGroup) {
  std::vector<PciGpu> gpus = Scan(FixtureRoot("h200"));
  ASSERT_EQ(gpus.size(), 1u);  // the ConnectX-7 and the host bridge are not GPUs
  EXPECT_EQ(gpus[0].bus_id, "0000:18:00.0");
  EXPECT_EQ(gpus[0].device_id, 0x2335);
  EXPECT_EQ(gpus[0].product, "NVIDIA H200");
  EXPECT_EQ(gpus[0].memory, "141 GB");
  EXPECT_EQ(gpus[0].architecture, Architecture::kHopper);
  EXPECT_EQ(gpus[0].class_code, 0x030200u);  // data-centre parts are 3D controllers
  EXPECT_EQ(gpus[0].numa_node, 0);
  EXPECT_EQ(gpus[0].iommu_group, 27);
  EXPECT_EQ(gpus[0].driver, "nvidia");
}

TEST(ScanPciGpusTest, Dgx8ListsEightH100sInBusOrderSplitAcrossNumaNodes) {
  std::vector<PciGpu> gpus = Scan(FixtureRoot("dgx8"));
  ASSERT_EQ(gpus.size(), 8u);  // the NVSwitch (NVIDIA, class 0x0680) is left out
  const char* kBusIds[] = {"0000:1b:00.0", "0000:43:00.0", "0000:52:00.0", "0000:61:00.0",
                           "0000:9d:00.0", "0000:c3:00.0", "0000:d1:00.0", "0000:df:00.0"};
  for (size_t i = 0; i < gpus.size(); ++i) {
    EXPECT_EQ(gpus[i].bus_id, kBusIds[i]);
    EXPECT_EQ(gpus[i].device_id, 0x2330);
    EXPECT_EQ(gpus[i].product, "NVIDIA H100 80GB HBM3");
    EXPECT_EQ(gpus[i].architecture, Architecture::kHopper);
    EXPECT_EQ(gpus[i].module_flavor, ModuleFlavor::kEither);
    EXPECT_EQ(gpus[i].numa_node, i < 4 ? 0 : 1) << gpus[i].bus_id;
    EXPECT_EQ(gpus[i].driver, "nvidia");
  }
}

TEST(ScanPciGpusTest, UnboundCardsAreStillListed) {
  std::vector<PciGpu> gpus = Scan(TestRoot("driver-unbound"));
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].product, "NVIDIA GeForce RTX 3080");
  EXPECT_EQ(gpus[0].driver, "");
  EXPECT_EQ(gpus[1].product, "NVIDIA GeForce RTX 5090");
  EXPECT_EQ(gpus[1].driver, "");
  EXPECT_EQ(gpus[1].module_flavor, ModuleFlavor::kOpenRequired);
}

TEST(ScanPciGpusTest, ReportsNouveauBinding) {
  std::vector<PciGpu> gpus = Scan(TestRoot("nouveau"));
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0].driver, "nouveau");
}

TEST(ScanPciGpusTest, BlackwellNeedsOpenModules) {
  std::vector<PciGpu> gpus = Scan(TestRoot("blackwell-proprietary"));
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0].architecture, Architecture::kBlackwell);
  EXPECT_EQ(gpus[0].module_flavor, ModuleFlavor::kOpenRequired);
  EXPECT_EQ(gpus[0].driver, "nvidia");
}

TEST(ScanPciGpusTest, NoNvidiaDevicesIsAnEmptyListNotAnError) {
  // no-gpu has an ASPEED VGA controller: display class, wrong vendor.
  absl::StatusOr<std::vector<PciGpu>> gpus = ScanPciGpus(HostFs(TestRoot("no-gpu")));
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  EXPECT_TRUE(gpus->empty());
}

TEST(ScanPciGpusTest, MissingSysfsIsAnErrorNamingThePath) {
  ScratchRoot scratch;
  fs::remove_all(fs::path(scratch.root()) / "sys");
  absl::StatusOr<std::vector<PciGpu>> gpus = ScanPciGpus(HostFs(scratch.root()));
  ASSERT_FALSE(gpus.ok());
  EXPECT_EQ(gpus.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(gpus.status().message().find("/sys/bus/pci/devices"), absl::string_view::npos)
      << gpus.status();
}

TEST(ScanPciGpusTest, UnknownIdGetsAGuessedArchitecture) {
  ScratchRoot scratch;
  scratch.AddDevice("0000:01:00.0", "0x10de", "0x2bff", "0x030000");  // unlisted GB202 ID
  scratch.AddDevice("0000:02:00.0", "0x10de", "0x2a00", "0x030200");  // outside every block
  std::vector<PciGpu> gpus = Scan(scratch.root());
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].product, "");
  EXPECT_EQ(gpus[0].architecture, Architecture::kBlackwell);
  EXPECT_TRUE(gpus[0].architecture_guessed);
  EXPECT_EQ(gpus[0].module_flavor, ModuleFlavor::kOpenRequired);
  EXPECT_EQ(gpus[0].subsystem_vendor_id, 0);  // attribute absent
  EXPECT_EQ(gpus[0].numa_node, -1);           // attribute absent
  EXPECT_EQ(gpus[1].architecture, Architecture::kUnknown);
  EXPECT_FALSE(gpus[1].architecture_guessed);
  EXPECT_EQ(gpus[1].module_flavor, ModuleFlavor::kEither);
}

TEST(ScanPciGpusTest, NormalisesAndSortsNumerically) {
  ScratchRoot scratch;
  // Upper-case names, and a domain wider than 4 digits that sorts after 0000 numerically
  // but before it as text.
  scratch.AddDevice("10000:01:00.0", "0x10de", "0x2330", "0x030200");
  scratch.AddDevice("0000:0A:00.0", "0x10de", "0x2330", "0x030200");
  scratch.AddDevice("0000:09:00.0", "0x10de", "0x2330", "0x030200");
  std::vector<PciGpu> gpus = Scan(scratch.root());
  ASSERT_EQ(gpus.size(), 3u);
  EXPECT_EQ(gpus[0].bus_id, "0000:09:00.0");
  EXPECT_EQ(gpus[1].bus_id, "0000:0a:00.0");
  EXPECT_EQ(gpus[2].bus_id, "10000:01:00.0");
}

TEST(ScanPciGpusTest, SkipsEntriesThatCannotBeIdentified) {
  ScratchRoot scratch;
  scratch.AddDevice("0000:01:00.0", "", "0x2330", "0x030200");         // no vendor
  scratch.AddDevice("0000:02:00.0", "0x10de", "0x2330", "");           // no class
  scratch.AddDevice("0000:03:00.0", "garbage", "0x2330", "0x030200");  // bad vendor
  fs::create_directories(fs::path(scratch.root()) / "sys/bus/pci/devices/not-a-device");
  std::vector<PciGpu> gpus = Scan(scratch.root());
  EXPECT_TRUE(gpus.empty());
}

TEST(ScanPciGpusTest, GpuWithoutReadableDeviceIdIsAnError) {
  ScratchRoot scratch;
  scratch.AddDevice("0000:01:00.0", "0x10de", "", "0x030200");
  absl::StatusOr<std::vector<PciGpu>> gpus = ScanPciGpus(HostFs(scratch.root()));
  ASSERT_FALSE(gpus.ok());
  EXPECT_NE(gpus.status().message().find("0000:01:00.0"), absl::string_view::npos) << gpus.status();
}

TEST(IsGpuPciClassTest, VgaAnd3dOnly) {
  EXPECT_TRUE(IsGpuPciClass(0x030000));
  EXPECT_TRUE(IsGpuPciClass(0x030001));
  EXPECT_TRUE(IsGpuPciClass(0x030200));
  EXPECT_FALSE(IsGpuPciClass(0x038000));  // other display controller
  EXPECT_FALSE(IsGpuPciClass(0x040300));  // HD audio
  EXPECT_FALSE(IsGpuPciClass(0x068000));  // NVSwitch
  EXPECT_FALSE(IsGpuPciClass(0x000000));
}

}  // namespace
}  // namespace gpulet::node
