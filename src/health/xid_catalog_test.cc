#include "health/xid_catalog.h"

#include <optional>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"

namespace gpulet::health {
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

  // NVIDIA's buckets, verbatim.
  EXPECT_EQ(fallen.immediate, XidBucket::kRestartBm);
  EXPECT_EQ(fallen.investigatory, XidBucket::kContactSupport);
  EXPECT_EQ(DescribeXid(48).immediate, XidBucket::kWorkflowXid48);
  EXPECT_EQ(DescribeXid(48).investigatory, XidBucket::kWorkflowXid48);
  EXPECT_EQ(DescribeXid(54).immediate, XidBucket::kCheckMechanicals);
  EXPECT_EQ(DescribeXid(78).immediate, XidBucket::kUpdateSwFw);
  EXPECT_EQ(DescribeXid(154).immediate, XidBucket::kXid154);
  EXPECT_EQ(DescribeXid(63).immediate, XidBucket::kIgnore);
  EXPECT_EQ(DescribeXid(151).immediate, XidBucket::kRestartVm);
  EXPECT_EQ(DescribeXid(13).investigatory, XidBucket::kWorkflowXid13);
  EXPECT_EQ(DescribeXid(136).investigatory, XidBucket::kInvestigateLinkSi);
  EXPECT_EQ(DescribeXid(162).immediate, XidBucket::kNotPublished);
  EXPECT_EQ(DescribeXid(1).investigatory, XidBucket::kNotApplicable);

  // Generations, from the catalogue's "Applies to" columns.
  EXPECT_EQ(fallen.generations, kXidGenA100 | kXidGenH100 | kXidGenB100 | kXidGenGB200);
  EXPECT_EQ(DescribeXid(121).generations, kXidGenGB200);  // C2C: Grace only
  EXPECT_EQ(DescribeXid(136).generations, kXidGenH100);
  EXPECT_EQ(DescribeXid(74).generations, kXidGenA100 | kXidGenH100);
  EXPECT_EQ(DescribeXid(54).generations, kXidGenA100 | kXidGenH100 | kXidGenB100);
  EXPECT_EQ(DescribeXid(93).generations, kXidGenA100);
  EXPECT_EQ(DescribeXid(2).generations, kXidGenNone);
  for (int code = 144; code <= 150; ++code) {
    EXPECT_EQ(DescribeXid(code).generations, kXidGenB100 | kXidGenGB200) << code;
    EXPECT_EQ(DescribeXid(code).immediate, XidBucket::kWorkflowNvlink5Err) << code;
  }
  EXPECT_EQ(XidGenerationsText(fallen.generations), "A100, H100, B100, GB200");
  EXPECT_EQ(XidGenerationsText(kXidGenNone), "none listed");
}

TEST(XidCatalogTest, ListsEveryCodeOfNvidiasCatalogue) {
  // NVIDIA's catalogue lists each code from 1 to 172; gpulet's table holds each one.
  for (int code = 1; code <= 172; ++code) {
    const XidInfo* info = FindXid(code);
    ASSERT_NE(info, nullptr) << "XID " << code << " of NVIDIA's catalogue is missing";
    EXPECT_FALSE(info->mnemonic.empty()) << code;
    EXPECT_FALSE(info->meaning.empty()) << code;
    EXPECT_EQ(info->meaning.find('\n'), absl::string_view::npos) << code;
    EXPECT_FALSE(absl::StartsWith(info->mnemonic, "ROBUST_CHANNEL_")) << code;
    // A code with generations is in use; one NVIDIA lists for no generation is either
    // unused (documented = false) or outside data-centre GPUs (the DLA codes 152, 153).
    if (info->generations == kXidGenNone && code != 152 && code != 153) {
      EXPECT_FALSE(info->documented) << code;
    }
  }
  EXPECT_EQ(AllXids().size(), 172u);
}

TEST(XidCatalogTest, AtLeast150CodesCarryNvidiasActions) {
  int with_bucket = 0;
  for (const XidInfo& info : AllXids()) {
    if (info.immediate != XidBucket::kNotPublished) ++with_bucket;
  }
  EXPECT_GE(with_bucket, 150);
  // Rows without a bucket are exactly the catalogue's newest, 162-172.
  for (const XidInfo& info : AllXids()) {
    EXPECT_EQ(info.immediate == XidBucket::kNotPublished, info.code >= 162) << info.code;
  }
}

TEST(XidCatalogTest, ActionsFollowTheImmediateBucketUnlessTheRowSaysWhy) {
  // Where the catalogue gives a plain bucket, gpulet's action is that bucket's action, except
  // for the rows whose comment in xid_catalog.cc explains the difference.
  const std::set<int> kDeparting = {43, 54, 61, 78, 81, 151, 159, 109};
  for (const XidInfo& info : AllXids()) {
    if (!info.documented || kDeparting.count(info.code) == 1) continue;
    switch (info.immediate) {
      case XidBucket::kRestartApp:
      case XidBucket::kResetGpu:
      case XidBucket::kRestartBm:
      case XidBucket::kIgnore:
        EXPECT_EQ(info.action, GpuActionForBucket(info.immediate))
            << "XID " << info.code << " bucket " << XidBucketName(info.immediate);
        break;
      default:
        break;
    }
  }
}

TEST(XidCatalogTest, BucketNamesRoundTrip) {
  std::set<std::string> names;
  for (const XidInfo& info : AllXids()) {
    for (XidBucket bucket : {info.immediate, info.investigatory}) {
      absl::string_view name = XidBucketName(bucket);
      EXPECT_NE(name, "UNKNOWN") << info.code;
      if (bucket == XidBucket::kNotPublished) {
        EXPECT_EQ(name, "");
        continue;
      }
      EXPECT_EQ(ParseXidBucket(name), bucket) << name;
      absl::string_view description = XidBucketDescription(bucket);
      ASSERT_FALSE(description.empty()) << name;
      EXPECT_EQ(description.back(), '.') << description;
      names.insert(std::string(name));
    }
  }
  // The catalogue's buckets, as NVIDIA spells them, all occur in the table.
  for (const char* name : {"RESTART_APP",
                           "RESET_GPU",
                           "RESTART_BM",
                           "RESTART_VM",
                           "IGNORE",
                           "CONTACT_SUPPORT",
                           "CHECK_MECHANICALS",
                           "UPDATE_SWFW",
                           "WORKFLOW_XID_48",
                           "WORKFLOW_XID_45",
                           "WORKFLOW_NVLINK_ERR",
                           "WORKFLOW_NVLINK5_ERR",
                           "XID_154",
                           "XID_137_FLOW",
                           "CHECK_APP/CUDA",
                           "CHECK_UVM",
                           "INVESTIGATE_SW",
                           "INVESTIGATE_SW_USER",
                           "INVESTIGATE_LINK_SI",
                           "SYMPATHETIC_REPORT_SOLO",
                           "RESTART_FM",
                           "N/A"}) {
    EXPECT_EQ(names.count(name), 1u) << name;
  }
  EXPECT_EQ(ParseXidBucket(" restart_bm "), XidBucket::kRestartBm);
  EXPECT_EQ(ParseXidBucket("update_sw"), XidBucket::kUpdateSwFw);
  EXPECT_EQ(ParseXidBucket("xid_154_eval"), XidBucket::kXid154Eval);
  EXPECT_EQ(ParseXidBucket("REBOOT"), std::nullopt);
  EXPECT_EQ(ParseXidBucket(""), std::nullopt);
  EXPECT_EQ(GpuActionForBucket(XidBucket::kRestartBm), GpuAction::kRebootNode);
  EXPECT_EQ(GpuActionForBucket(XidBucket::kCheckMechanicals), GpuAction::kInspectHardware);
  EXPECT_EQ(GpuActionForBucket(XidBucket::kIgnore), GpuAction::kNone);
}

TEST(XidCatalogTest, Nvlink5SubCodes) {
  // The line in xid.h: "149, NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 ...)", a
  // pre-R575 (V1) word: unit bits 9:0 = 0x1c6, reason bits 25:20 = 4.
  std::optional<Nvlink5Decode> d = DecodeNvlink5(149, 0x004505c6);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->unit, "NETIR_LINK_DOWN");
  EXPECT_EQ(d->format, "V1 (before R575)");
  EXPECT_EQ(d->reason, 4);
  EXPECT_EQ(d->immediate, XidBucket::kResetGpu);
  EXPECT_EQ(d->investigatory, XidBucket::kInvestigateLinkSi);
  // The same unit in the R575 layout (bits 6:0 = 17), reason 0x26 (38): IGNORE.
  d = DecodeNvlink5(149, (0x26u << 20) | 17u);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->unit, "NETIR_LINK_DOWN");
  EXPECT_EQ(d->format, "V2 (R575 and later)");
  EXPECT_EQ(d->immediate, XidBucket::kIgnore);
  // Other units.
  EXPECT_EQ(DecodeNvlink5(149, 0x00000013)->unit, "NETIR_BER_EVENT");
  EXPECT_EQ(DecodeNvlink5(149, 0x00000013)->investigatory, XidBucket::kInvestigateLinkSi);
  EXPECT_EQ(DecodeNvlink5(145, 0x00000082)->unit, "RLW_REMAP");
  EXPECT_EQ(DecodeNvlink5(145, 0x00000082)->immediate, XidBucket::kXid154Eval);
  EXPECT_EQ(DecodeNvlink5(146, 0x0000000b)->unit, "TLW_RX_PIPE1");
  EXPECT_EQ(DecodeNvlink5(150, 0)->unit, "MSE_WATCHDOG");
  EXPECT_EQ(DecodeNvlink5(144, 1)->unit, "SAW_MVB");
  // A unit of another XID, and codes outside 144-150, decode to nothing.
  EXPECT_EQ(DecodeNvlink5(144, 17), std::nullopt);
  EXPECT_EQ(DecodeNvlink5(79, 0x004505c6), std::nullopt);
  EXPECT_EQ(DecodeNvlink5(151, 0), std::nullopt);
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
  for (int code : {0, 173, 999, -5, 100000}) {
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
}  // namespace gpulet::health
