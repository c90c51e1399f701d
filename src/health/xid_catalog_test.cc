#include "health/xid_catalog.h"

#include <set>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace gpulet {
namespace {

TEST(XidCatalogTest, TableIsSortedAndUnique) {
  int previous = -1;
  for (const XidInfo& info : AllXids()) {
    EXPECT_GT(info.code, previous) << "out of order or duplicate at " << info.code;
    previous = info.code;
  }
}

TEST(XidCatalogTest, CoversTheReferenceTableAndGpudFatalList) {
  const int kRequired[] = {
      // NVIDIA catalogue rows used in the field.
      8, 13, 31, 32, 38, 43, 44, 45, 46, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 119,
      120, 121, 140, 143, 144, 145, 146, 147, 148, 149, 150, 154, 155, 156, 158, 167, 171, 172,
      // gpud's fatal list.
      9, 12, 16, 18, 19, 26, 27, 28, 29, 30, 33, 34, 35, 36, 42, 47, 59, 60, 65, 78, 110, 123};
  for (int code : kRequired) {
    const XidInfo* info = FindXid(code);
    ASSERT_NE(info, nullptr) << "XID " << code << " missing";
    EXPECT_EQ(info->code, code);
    EXPECT_FALSE(info->mnemonic.empty()) << code;
    EXPECT_FALSE(info->meaning.empty()) << code;
    EXPECT_EQ(info->meaning.find('\n'), absl::string_view::npos) << "one line: " << code;
    EXPECT_FALSE(absl::StartsWith(info->mnemonic, "ROBUST_CHANNEL_")) << code;
    EXPECT_EQ(DescribeXid(code).mnemonic, info->mnemonic);
  }
}

TEST(XidCatalogTest, KeyEntries) {
  XidInfo fallen = DescribeXid(79);
  EXPECT_EQ(fallen.mnemonic, "GPU_HAS_FALLEN_OFF_THE_BUS");
  EXPECT_EQ(fallen.severity, XidSeverity::kFatal);
  EXPECT_EQ(fallen.action, GpuAction::kRebootNode);
  EXPECT_EQ(fallen.if_repeated, GpuAction::kInspectHardware);

  EXPECT_EQ(DescribeXid(48).severity, XidSeverity::kFatal);
  EXPECT_EQ(DescribeXid(48).action, GpuAction::kResetGpu);
  EXPECT_EQ(DescribeXid(119).action, GpuAction::kResetGpu);
  EXPECT_EQ(DescribeXid(13).severity, XidSeverity::kApplication);
  EXPECT_EQ(DescribeXid(13).action, GpuAction::kRestartApp);
  EXPECT_EQ(DescribeXid(63).action, GpuAction::kNone);
  EXPECT_EQ(DescribeXid(167).action, GpuAction::kRebootNode);
  EXPECT_TRUE(DescribeXid(48).documented);
  EXPECT_FALSE(DescribeXid(27).documented);
  EXPECT_EQ(DescribeXid(27).severity, XidSeverity::kFatal);
}

TEST(XidCatalogTest, ApplicationXidsAreExactlyTheDefaultList) {
  std::set<int> expected = {13, 31, 43, 45, 68, 94};
  std::set<int> got(DefaultApplicationXids().begin(), DefaultApplicationXids().end());
  EXPECT_EQ(got, expected);
  for (int code : expected) {
    EXPECT_TRUE(IsDefaultApplicationXid(code)) << code;
    EXPECT_EQ(DescribeXid(code).severity, XidSeverity::kApplication) << code;
  }
  // The catalogue's application-severity rows are the same list: nothing else is waved off.
  for (const XidInfo& info : AllXids()) {
    EXPECT_EQ(info.severity == XidSeverity::kApplication, expected.count(info.code) == 1)
        << info.code;
  }
  EXPECT_FALSE(IsDefaultApplicationXid(109));
  EXPECT_FALSE(IsDefaultApplicationXid(79));
}

TEST(XidCatalogTest, UnknownCodeGetsGenericEntryCarryingTheCode) {
  for (int code : {0, 1, 999, -5, 100000}) {
    EXPECT_EQ(FindXid(code), nullptr) << code;
    XidInfo info = DescribeXid(code);
    EXPECT_EQ(info.code, code);
    EXPECT_EQ(info.mnemonic, "UNKNOWN_XID");
    EXPECT_FALSE(info.documented);
    EXPECT_EQ(info.action, GpuAction::kContactSupport);
  }
}

TEST(XidCatalogTest, ActionNamesRoundTripAndDescriptionsAreSentences) {
  for (GpuAction action :
       {GpuAction::kNone, GpuAction::kRestartApp, GpuAction::kResetGpu, GpuAction::kRebootNode,
        GpuAction::kInspectHardware, GpuAction::kContactSupport}) {
    absl::string_view name = GpuActionName(action);
    EXPECT_NE(name, "unknown");
    EXPECT_EQ(ParseGpuAction(name), action) << name;
    absl::string_view description = GpuActionDescription(action);
    ASSERT_FALSE(description.empty());
    EXPECT_EQ(description.back(), '.') << description;
  }
  EXPECT_EQ(ParseGpuAction("REBOOT_NODE"), GpuAction::kRebootNode);
  EXPECT_EQ(ParseGpuAction(" reset-gpu "), GpuAction::kResetGpu);
  EXPECT_EQ(ParseGpuAction("reboot"), std::nullopt);
  // Actions are ordered by how disruptive they are.
  EXPECT_LT(GpuAction::kRestartApp, GpuAction::kResetGpu);
  EXPECT_LT(GpuAction::kResetGpu, GpuAction::kRebootNode);
}

TEST(XidCatalogTest, SeverityNames) {
  EXPECT_EQ(XidSeverityName(XidSeverity::kApplication), "application");
  EXPECT_EQ(XidSeverityName(XidSeverity::kWarning), "warning");
  EXPECT_EQ(XidSeverityName(XidSeverity::kFatal), "fatal");
}

TEST(XidCatalogTest, Xid154RecoveryActions) {
  struct Case {
    const char* message;
    std::optional<GpuAction> want;
  } cases[] = {
      {"GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
       GpuAction::kResetGpu},
      {"GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
       GpuAction::kRebootNode},
      {"GPU recovery action changed from 0x0 (None) to 0x2 (OS Reboot)", GpuAction::kRebootNode},
      {"GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)", GpuAction::kNone},
      {"GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P)", GpuAction::kRestartApp},
      {"GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)",
       GpuAction::kResetGpu},
      {"something else", std::nullopt},
      {"", std::nullopt},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(RecoveryActionFromXid154(c.message), c.want) << c.message;
  }
}

}  // namespace
}  // namespace gpulet
