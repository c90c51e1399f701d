#include "node/pci_ids.h"

#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "node/architecture.h"

namespace gpulet::node {
namespace {

struct Expected {
  uint16_t id;
  const char* product;
  Architecture arch;
  const char* memory;
};

// Facts the rest of gpulet (and the fixtures) rely on.
TEST(LookupPciDeviceTest, KnowsTheCommonParts) {
  const Expected kCases[] = {
      {0x1eb8, "Tesla T4", Architecture::kTuring, "16 GB"},
      {0x2206, "NVIDIA GeForce RTX 3080", Architecture::kAmpere, "10 GB"},
      {0x2216, "NVIDIA GeForce RTX 3080", Architecture::kAmpere, "10 GB"},
      {0x2204, "NVIDIA GeForce RTX 3090", Architecture::kAmpere, "24 GB"},
      {0x20b0, "NVIDIA A100-SXM4-40GB", Architecture::kAmpere, "40 GB"},
      {0x20b2, "NVIDIA A100-SXM4-80GB", Architecture::kAmpere, "80 GB"},
      {0x20f1, "NVIDIA A100-PCIE-40GB", Architecture::kAmpere, "40 GB"},
      {0x20b5, "NVIDIA A100 80GB PCIe", Architecture::kAmpere, "80 GB"},
      {0x2236, "NVIDIA A10", Architecture::kAmpere, "24 GB"},
      {0x20b7, "NVIDIA A30", Architecture::kAmpere, "24 GB"},
      {0x27b8, "NVIDIA L4", Architecture::kAda, "24 GB"},
      {0x26b5, "NVIDIA L40", Architecture::kAda, "48 GB"},
      {0x26b9, "NVIDIA L40S", Architecture::kAda, "48 GB"},
      {0x2684, "NVIDIA GeForce RTX 4090", Architecture::kAda, "24 GB"},
      {0x2704, "NVIDIA GeForce RTX 4080", Architecture::kAda, "16 GB"},
      {0x2330, "NVIDIA H100 80GB HBM3", Architecture::kHopper, "80 GB"},
      {0x2331, "NVIDIA H100 PCIe", Architecture::kHopper, "80 GB"},
      {0x2321, "NVIDIA H100 NVL", Architecture::kHopper, "94 GB"},
      {0x2342, "NVIDIA GH200", Architecture::kHopper, "96 GB"},
      {0x2335, "NVIDIA H200", Architecture::kHopper, "141 GB"},
      {0x233b, "NVIDIA H200 NVL", Architecture::kHopper, "141 GB"},
      {0x2b85, "NVIDIA GeForce RTX 5090", Architecture::kBlackwell, "32 GB"},
      {0x2c02, "NVIDIA GeForce RTX 5080", Architecture::kBlackwell, "16 GB"},
      {0x2901, "NVIDIA B200", Architecture::kBlackwell, "180 GB"},
      {0x1db4, "Tesla V100-PCIE-16GB", Architecture::kVolta, "16 GB"},
      {0x1db5, "Tesla V100-SXM2-32GB", Architecture::kVolta, "32 GB"},
      {0x1df6, "Tesla V100S-PCIE-32GB", Architecture::kVolta, "32 GB"},
      {0x15f8, "Tesla P100-PCIE-16GB", Architecture::kPascal, "16 GB"},
      {0x1b38, "Tesla P40", Architecture::kPascal, "24 GB"},
      {0x13f2, "Tesla M60", Architecture::kMaxwell, "8 GB"},
      {0x102d, "Tesla K80", Architecture::kKepler, "12 GB"},
  };
  for (const Expected& c : kCases) {
    const PciDeviceInfo* info = LookupPciDevice(c.id);
    ASSERT_NE(info, nullptr) << std::hex << c.id;
    EXPECT_EQ(info->device_id, c.id);
    EXPECT_EQ(info->product, c.product) << std::hex << c.id;
    EXPECT_EQ(info->architecture, c.arch) << std::hex << c.id;
    EXPECT_EQ(info->memory, c.memory) << std::hex << c.id;
  }
}

TEST(LookupPciDeviceTest, UnknownIdsGiveNull) {
  EXPECT_EQ(LookupPciDevice(0x0000), nullptr);
  EXPECT_EQ(LookupPciDevice(0xffff), nullptr);
  EXPECT_EQ(LookupPciDevice(0x1aef), nullptr);  // GA102 HDMI audio: not a GPU
  EXPECT_EQ(LookupPciDevice(0x2b8f), nullptr);
}

TEST(AllPciDevicesTest, TableIsSortedCompleteAndConsistentWithIdBlocks) {
  auto all = AllPciDevices();
  ASSERT_GT(all.size(), 100u);
  std::set<std::string> products;
  for (size_t i = 0; i < all.size(); ++i) {
    const PciDeviceInfo& row = all[i];
    if (i > 0) {
      EXPECT_LT(all[i - 1].device_id, row.device_id);
    }
    EXPECT_FALSE(row.product.empty()) << std::hex << row.device_id;
    EXPECT_FALSE(row.memory.empty()) << std::hex << row.device_id;
    EXPECT_TRUE(absl::EndsWith(row.memory, " GB")) << row.memory;
    EXPECT_NE(row.architecture, Architecture::kUnknown) << std::hex << row.device_id;
    // The block guess must agree with every known ID; if NVIDIA ever breaks the block
    // scheme, this is where it shows.
    EXPECT_EQ(GuessArchitectureFromDeviceId(row.device_id), row.architecture)
        << std::hex << row.device_id << " " << row.product;
    EXPECT_EQ(LookupPciDevice(row.device_id), &row);
  }
}

TEST(GuessArchitectureTest, UsesDeviceIdBlocks) {
  EXPECT_EQ(GuessArchitectureFromDeviceId(0x2b8f), Architecture::kBlackwell);  // GB202
  EXPECT_EQ(GuessArchitectureFromDeviceId(0x2d83), Architecture::kBlackwell);  // GB207
  EXPECT_EQ(GuessArchitectureFromDeviceId(0x31c2), Architecture::kBlackwell);  // GB110
  EXPECT_EQ(GuessArchitectureFromDeviceId(0x237f), Architecture::kHopper);
  EXPECT_EQ(GuessArchitectureFromDeviceId(0x28e0), Architecture::kAda);
  EXPECT_EQ(GuessArchitectureFromDeviceId(0x2414), Architecture::kAmpere);
  EXPECT_EQ(GuessArchitectureFromDeviceId(0x2191), Architecture::kTuring);  // TU116
  EXPECT_EQ(GuessArchitectureFromDeviceId(0x1f95), Architecture::kTuring);  // TU117
  EXPECT_EQ(GuessArchitectureFromDeviceId(0x1d80), Architecture::kVolta);
  EXPECT_EQ(GuessArchitectureFromDeviceId(0x1c8c), Architecture::kPascal);
  EXPECT_EQ(GuessArchitectureFromDeviceId(0x15c0), Architecture::kPascal);
  EXPECT_EQ(GuessArchitectureFromDeviceId(0x1617), Architecture::kMaxwell);
  EXPECT_EQ(GuessArchitectureFromDeviceId(0x1187), Architecture::kKepler);
}

TEST(GuessArchitectureTest, GapsStayUnknown) {
  EXPECT_EQ(GuessArchitectureFromDeviceId(0x0000), Architecture::kUnknown);
  EXPECT_EQ(GuessArchitectureFromDeviceId(0x06d1), Architecture::kUnknown);  // Fermi
  EXPECT_EQ(GuessArchitectureFromDeviceId(0x2100), Architecture::kUnknown);
  EXPECT_EQ(GuessArchitectureFromDeviceId(0x2a00), Architecture::kUnknown);
  EXPECT_EQ(GuessArchitectureFromDeviceId(0xffff), Architecture::kUnknown);
}

TEST(ModuleFlavorTest, FollowsTheGeneration) {
  EXPECT_EQ(ModuleFlavorFor(Architecture::kKepler), ModuleFlavor::kProprietaryRequired);
  EXPECT_EQ(ModuleFlavorFor(Architecture::kMaxwell), ModuleFlavor::kProprietaryRequired);
  EXPECT_EQ(ModuleFlavorFor(Architecture::kPascal), ModuleFlavor::kProprietaryRequired);
  EXPECT_EQ(ModuleFlavorFor(Architecture::kVolta), ModuleFlavor::kProprietaryRequired);
  EXPECT_EQ(ModuleFlavorFor(Architecture::kTuring), ModuleFlavor::kEither);
  EXPECT_EQ(ModuleFlavorFor(Architecture::kAmpere), ModuleFlavor::kEither);
  EXPECT_EQ(ModuleFlavorFor(Architecture::kAda), ModuleFlavor::kEither);
  EXPECT_EQ(ModuleFlavorFor(Architecture::kHopper), ModuleFlavor::kEither);
  EXPECT_EQ(ModuleFlavorFor(Architecture::kBlackwell), ModuleFlavor::kOpenRequired);
  EXPECT_EQ(ModuleFlavorFor(Architecture::kRubin), ModuleFlavor::kOpenRequired);
  EXPECT_EQ(ModuleFlavorFor(Architecture::kUnknown), ModuleFlavor::kEither);
}

TEST(ModuleFlavorTest, NamesAndTalosExtensions) {
  EXPECT_EQ(ModuleFlavorName(ModuleFlavor::kEither), "either");
  EXPECT_EQ(ModuleFlavorName(ModuleFlavor::kOpenRequired), "open required");
  EXPECT_EQ(ModuleFlavorName(ModuleFlavor::kProprietaryRequired), "proprietary required");
  EXPECT_EQ(TalosExtensionFor(ModuleFlavor::kOpenRequired),
            "nvidia-open-gpu-kernel-modules-production");
  EXPECT_EQ(TalosExtensionFor(ModuleFlavor::kEither), "nvidia-open-gpu-kernel-modules-production");
  EXPECT_EQ(TalosExtensionFor(ModuleFlavor::kProprietaryRequired),
            "nonfree-kmod-nvidia-production");
}

TEST(ParsePciIdTest, AcceptsCommonSpellings) {
  for (const char* text : {"10de:2b85", "10DE:2B85", " 0x10de:0x2b85\n", "10de:2B85"}) {
    absl::StatusOr<PciId> id = ParsePciId(text);
    ASSERT_TRUE(id.ok()) << text << ": " << id.status();
    EXPECT_EQ(id->vendor_id, kNvidiaPciVendorId);
    EXPECT_EQ(id->device_id, 0x2b85);
  }
  absl::StatusOr<PciId> short_id = ParsePciId("8086:1");
  ASSERT_TRUE(short_id.ok());
  EXPECT_EQ(short_id->device_id, 1);
}

TEST(ParsePciIdTest, RejectsMalformed) {
  for (const char* text : {"", "10de", "10de2b85", "10de:", ":2b85", "10de:2b85:00", "10de:12345",
                           "zzzz:0000", "10de:-1", "10de: 2b85 x"}) {
    absl::StatusOr<PciId> id = ParsePciId(text);
    EXPECT_FALSE(id.ok()) << "'" << text << "'";
    if (!id.ok()) {
      EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
}

TEST(ParsePciHexIdTest, ReadsSysfsAttributes) {
  absl::StatusOr<uint16_t> id = ParsePciHexId("0x2b85\n");
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(*id, 0x2b85);
  EXPECT_FALSE(ParsePciHexId("0x").ok());
  EXPECT_FALSE(ParsePciHexId("0x10000").ok());
  EXPECT_FALSE(ParsePciHexId("+10").ok());
}

TEST(ArchitectureTest, NamesMatchNvidiaSmi) {
  EXPECT_EQ(ArchitectureName(Architecture::kAmpere), "Ampere");
  EXPECT_EQ(ArchitectureName(Architecture::kAda), "Ada Lovelace");
  EXPECT_EQ(ArchitectureName(Architecture::kBlackwell), "Blackwell");
  EXPECT_EQ(ArchitectureName(Architecture::kUnknown), "Unknown");
}

TEST(ArchitectureTest, FromNameIsCaseInsensitiveAndRoundTrips) {
  for (Architecture arch :
       {Architecture::kKepler, Architecture::kMaxwell, Architecture::kPascal, Architecture::kVolta,
        Architecture::kTuring, Architecture::kAmpere, Architecture::kAda, Architecture::kHopper,
        Architecture::kBlackwell, Architecture::kRubin}) {
    EXPECT_EQ(ArchitectureFromName(ArchitectureName(arch)), arch) << ArchitectureName(arch);
  }
  EXPECT_EQ(ArchitectureFromName("HOPPER"), Architecture::kHopper);
  EXPECT_EQ(ArchitectureFromName(" ada "), Architecture::kAda);
  EXPECT_EQ(ArchitectureFromName("Lovelace"), Architecture::kAda);
  EXPECT_EQ(ArchitectureFromName("Fermi"), Architecture::kUnknown);
  EXPECT_EQ(ArchitectureFromName(""), Architecture::kUnknown);
}

TEST(ArchitectureTest, OrderIsChronological) {
  EXPECT_LT(Architecture::kVolta, Architecture::kTuring);
  EXPECT_LT(Architecture::kHopper, Architecture::kBlackwell);
  EXPECT_LT(Architecture::kBlackwell, Architecture::kRubin);
}

}  // namespace
}  // namespace gpulet::node
