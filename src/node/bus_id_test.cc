#include "node/bus_id.h"

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace gpulet::node {
namespace {

TEST(NormalizeBusIdTest, AcceptsEverySpellingOfTheSameDevice) {
  // NVML busId, NVML busIdLegacy / sysfs, kernel log, kernel log with prefix, lspci.
  for (const char* text : {"00000000:1B:00.0", "00000000:1b:00.0", "0000:1b:00.0", "0000:1B:00",
                           "PCI:0000:1b:00", "pci:0000:1b:00.0", "1b:00.0", " 0000:1b:00.0\n"}) {
    EXPECT_EQ(NormalizeBusId(text), "0000:1b:00.0") << text;
  }
}

TEST(NormalizeBusIdTest, KeepsFunctionAndDevice) {
  EXPECT_EQ(NormalizeBusId("0000:01:00.1"), "0000:01:00.1");
  EXPECT_EQ(NormalizeBusId("0000:c3:1f.7"), "0000:c3:1f.7");
  EXPECT_EQ(NormalizeBusId("0000:01:0a.0"), "0000:01:0a.0");
}

TEST(NormalizeBusIdTest, PadsShortFieldsAndWidensDomainOnlyWhenNeeded) {
  EXPECT_EQ(NormalizeBusId("0:1:0.0"), "0000:01:00.0");
  EXPECT_EQ(NormalizeBusId("00000001:01:00.0"), "0001:01:00.0");
  // Some hypervisors (Hyper-V, VMD) hand out domains above 0xffff.
  EXPECT_EQ(NormalizeBusId("00010000:01:00.0"), "10000:01:00.0");
  EXPECT_EQ(NormalizeBusId("ABCDEF12:01:00.0"), "abcdef12:01:00.0");
}

TEST(NormalizeBusIdTest, ReturnsEmptyForNonBusIds) {
  for (const char* text :
       {"", "   ", "garbage", "0000:01:00.8", "0000:01:20.0", "0000:100:00.0", "000000000:01:00.0",
        "0000:01:00.", "0000::00.0", "0000:01:00.0.1", "g000:01:00.0", "0000:01", "0000:01:00:00.0",
        "-1:01:00.0", "0000:01:00.0 trailing"}) {
    EXPECT_EQ(NormalizeBusId(text), "") << "'" << text << "'";
  }
}

TEST(ParsePciAddressTest, SplitsFields) {
  absl::StatusOr<PciAddress> a = ParsePciAddress("00000002:C3:1e.5");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->domain, 2u);
  EXPECT_EQ(a->bus, 0xc3);
  EXPECT_EQ(a->device, 0x1e);
  EXPECT_EQ(a->function, 5);
  EXPECT_EQ(*a, (PciAddress{2, 0xc3, 0x1e, 5}));
}

TEST(ParsePciAddressTest, ErrorNamesTheText) {
  absl::StatusOr<PciAddress> a = ParsePciAddress("nvidia0");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("nvidia0"), absl::string_view::npos) << a.status();
}

TEST(FormatPciAddressTest, RoundTrips) {
  PciAddress a{0, 0x1b, 0, 0};
  EXPECT_EQ(FormatPciAddress(a), "0000:1b:00.0");
  absl::StatusOr<PciAddress> back = ParsePciAddress(FormatPciAddress(a));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, a);
}

}  // namespace
}  // namespace gpulet::node
