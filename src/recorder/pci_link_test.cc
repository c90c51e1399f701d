#include "recorder/pci_link.h"

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "testing/files.h"

namespace gpulet::recorder {
namespace {

// As Linux 6.x prints /sys/bus/pci/devices/<bdf>/aer_dev_correctable.
constexpr char kCorrectable[] =
    "RxErr 2\nBadTLP 0\nBadDLLP 1\nRollover 0\nTimeout 0\nNonFatalErr 0\nCorrIntErr 0\n"
    "HeaderOF 0\nTOTAL_ERR_COR 3\n";

TEST(PciLinkTest, ParsesTheAerTotalsAndLinkSpeeds) {
  EXPECT_EQ(ParseAerTotal(kCorrectable, "TOTAL_ERR_COR"), 3u);
  EXPECT_EQ(ParseAerTotal(kCorrectable, "TOTAL_ERR_FATAL"), std::nullopt);
  EXPECT_EQ(ParseAerTotal("TOTAL_ERR_COR lots\n", "TOTAL_ERR_COR"), std::nullopt);
  EXPECT_EQ(ParseAerTotal("TOTAL_ERR_COR 1 2\n", "TOTAL_ERR_COR"), std::nullopt);
  EXPECT_EQ(ParseLinkSpeed("16.0 GT/s PCIe\n"), 16000u);
  EXPECT_EQ(ParseLinkSpeed("2.5 GT/s"), 2500u);
  EXPECT_EQ(ParseLinkSpeed("8 GT/s"), 8000u);
  EXPECT_EQ(ParseLinkSpeed("Unknown"), std::nullopt);
  EXPECT_EQ(ParseLinkSpeed("nan GT/s"), std::nullopt);
  EXPECT_EQ(ParseLinkSpeed("-1 GT/s"), std::nullopt);
  EXPECT_EQ(ParseLinkSpeed(""), std::nullopt);
}

TEST(PciLinkTest, ReadsTheGpusFilesUnderTheHostRootAndLeavesMissingOnesAbsent) {
  testing::ScratchDir root;
  std::filesystem::path dev =
      std::filesystem::path(root.path()) / "sys/bus/pci/devices/0000:02:00.0";
  std::filesystem::create_directories(dev);
  std::ofstream(dev / "current_link_width") << "8\n";
  std::ofstream(dev / "current_link_speed") << "32.0 GT/s PCIe\n";
  std::ofstream(dev / "aer_dev_correctable") << kCorrectable;
  std::ofstream(dev / "aer_dev_fatal") << "Undefined 0\nTOTAL_ERR_FATAL 1\n";
  HostFs host(root.path());
  PciLinkReading r = ReadPciLink(host, "00000000:02:00.0");  // NVML's form
  EXPECT_EQ(r.width, 8u);
  EXPECT_EQ(r.mts, 32000u);
  EXPECT_EQ(r.aer_correctable, 3u);
  EXPECT_EQ(r.aer_fatal, 1u);
  EXPECT_EQ(r.aer_nonfatal, std::nullopt);  // no file
  EXPECT_EQ(ReadPciLink(host, "0000:03:00.0"), PciLinkReading{});
  EXPECT_EQ(ReadPciLink(host, "../../etc"), PciLinkReading{});  // not a bus id: nothing read
}

}  // namespace
}  // namespace gpulet::recorder
