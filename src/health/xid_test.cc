#include "health/xid.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "health/kmsg.h"

namespace gpulet::health {
namespace {

std::string ReadFixture(const std::string& name) {
  std::ifstream in(std::string(GPULET_SOURCE_DIR) + "/tests/fixtures/kmsg/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Non-blank, non-comment lines of a fixture.
std::vector<std::string> FixtureLines(const std::string& name) {
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(ReadFixture(name), '\n')) {
    if (line.empty() || line[0] == '#') continue;
    lines.emplace_back(line);
  }
  return lines;
}

struct XidCase {
  const char* line;
  const char* bus_id;
  int xid;
  std::optional<int64_t> pid;
  const char* name;
  const char* message;
  std::optional<int> gi;
  std::optional<int> ci;
};

TEST(ParseXidLineTest, EveryFormat) {
  const XidCase cases[] = {
      {"NVRM: Xid (PCI:0000:3b:00): 119, pid='<unknown>', name=<unknown>, Timeout waiting for "
       "RPC from GSP! Expected function FREE (0x0 0x0).",
       "0000:3b:00.0", 119, std::nullopt, "",
       "Timeout waiting for RPC from GSP! Expected function FREE (0x0 0x0).", std::nullopt,
       std::nullopt},
      {"NVRM: Xid (PCI:0000:18:00): 13, pid=90211, name=vllm, Graphics SM Warp Exception on "
       "(GPC 1, TPC 2, SM 0): Out Of Range Address",
       "0000:18:00.0", 13, 90211, "vllm",
       "Graphics SM Warp Exception on (GPC 1, TPC 2, SM 0): Out Of Range Address", std::nullopt,
       std::nullopt},
      {"NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:02): 31, pid=7788, name=python3, Ch 0000000a",
       "0000:3b:00.0", 31, 7788, "python3", "Ch 0000000a", 1, 2},
      {"NVRM: Xid (PCI:0000:3b:00 GPU-I:05): 43, pid=7790, name=tritonserver, Ch 00000011",
       "0000:3b:00.0", 43, 7790, "tritonserver", "Ch 00000011", 5, std::nullopt},
      {"NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.", "0000:01:00.0", 79,
       std::nullopt, "", "GPU has fallen off the bus.", std::nullopt, std::nullopt},
      {"NVRM: Xid (0000:03:00): 14, Channel 00000001", "0000:03:00.0", 14, std::nullopt, "",
       "Channel 00000001", std::nullopt, std::nullopt},
      {"NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 "
       "0x00000000)",
       "0018:01:00.0", 149, std::nullopt, "",
       "NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 0x00000000)", std::nullopt, std::nullopt},
      // Prefixes from dmesg and syslog, trailing whitespace and CR.
      {"[ 8123.456789] NVRM: Xid (PCI:0000:3b:00): 43, pid=3112, name=python, Ch 00000009  \r",
       "0000:3b:00.0", 43, 3112, "python", "Ch 00000009", std::nullopt, std::nullopt},
      {"Jun 21 03:14:15 talos-07 kernel: NVRM: Xid (PCI:0000:01:00): 120, pid='<unknown>', "
       "name=<unknown>, GSP task timeout",
       "0000:01:00.0", 120, std::nullopt, "", "GSP task timeout", std::nullopt, std::nullopt},
      // Upper case, 8-digit domain: normalised like NVML's bus id.
      {"NVRM: Xid (PCI:00000000:3B:00): 74, pid=1, name=x, NVLink", "0000:3b:00.0", 74, 1, "x",
       "NVLink", std::nullopt, std::nullopt},
      // Nothing after the code, or after pid/name.
      {"NVRM: Xid (PCI:0000:3b:00): 79", "0000:3b:00.0", 79, std::nullopt, "", "", std::nullopt,
       std::nullopt},
      {"NVRM: Xid (PCI:0000:3b:00): 13, pid=12, name=foo", "0000:3b:00.0", 13, 12, "foo", "",
       std::nullopt, std::nullopt},
      {"NVRM: Xid (PCI:0000:3b:00): 13, pid=12", "0000:3b:00.0", 13, 12, "", "", std::nullopt,
       std::nullopt},
      // A pid that is not a number is treated as unknown.
      {"NVRM: Xid (PCI:0000:3b:00): 13, pid=<unknown>, name=<unknown>, x", "0000:3b:00.0", 13,
       std::nullopt, "", "x", std::nullopt, std::nullopt},
      // Unknown attributes inside the parentheses are ignored.
      {"NVRM: Xid (PCI:0000:3b:00 FUTURE:7 GPU-CI:03): 31, pid=1, name=a, m", "0000:3b:00.0", 31, 1,
       "a", "m", std::nullopt, 3},
  };
  for (const XidCase& c : cases) {
    SCOPED_TRACE(c.line);
    std::optional<XidEvent> e = ParseXidLine(c.line);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->bus_id, c.bus_id);
    EXPECT_EQ(e->xid, c.xid);
    EXPECT_EQ(e->pid, c.pid);
    EXPECT_EQ(e->process_name, c.name);
    EXPECT_EQ(e->message, c.message);
    EXPECT_EQ(e->gpu_instance, c.gi);
    EXPECT_EQ(e->compute_instance, c.ci);
    EXPECT_EQ(e->source, XidSource::kXidLine);
  }
}

TEST(ParseXidLineTest, RejectsNonXidText) {
  for (const char* line :
       {"", "NVRM:", "NVRM: Xid", "NVRM: Xid (", "NVRM: Xid ()", "NVRM: Xid (PCI:0000:3b:00",
        "NVRM: Xid (PCI:0000:3b:00):", "NVRM: Xid (PCI:0000:3b:00): x",
        "NVRM: Xid (PCI:0000:3b:00) 13,", "NVRM: Xid (PCI:0000:3b:00): 13x, y",
        "NVRM: Xid (PCI:0000:3b:00): 1234567, too many digits", "NVRM: Xid (nonsense): 13, x",
        "Xid (PCI:0000:3b:00): 13, no NVRM", "NVRM: Xid PCI:0000:3b:00: 13, no parentheses"}) {
    EXPECT_FALSE(ParseXidLine(line).has_value()) << "'" << line << "'";
  }
}

TEST(ParseXidLineTest, NvlinkExtendedForm) {
  std::optional<XidEvent> e = ParseXidLine(
      "NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 "
      "0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)");
  ASSERT_TRUE(e.has_value());
  ASSERT_TRUE(e->nvlink.has_value());
  EXPECT_EQ(e->nvlink->unit, "NETIR_LINK_EVT");
  EXPECT_EQ(e->nvlink->fatal, true);
  EXPECT_EQ(e->nvlink->link, 8);
  EXPECT_EQ(e->nvlink->intrinfo, 0x004505c6u);
  EXPECT_EQ(e->nvlink->sub_code, (0x004505c6 >> 20) & 0x3f);

  std::optional<XidEvent> nonfatal = ParseXidLine(
      "NVRM: Xid (PCI:0018:01:00): 145, RLW_REMAP Nonfatal XC1 i0 Link 17 "
      "(0x00288002 0x00000004)");
  ASSERT_TRUE(nonfatal.has_value() && nonfatal->nvlink.has_value());
  EXPECT_EQ(nonfatal->nvlink->fatal, false);
  EXPECT_EQ(nonfatal->nvlink->link, 17);

  // Outside 144-150 there is no NVLink5 detail; inside, a line without it has none either.
  EXPECT_FALSE(ParseXidLine("NVRM: Xid (PCI:0000:3b:00): 74, NVLINK_X Fatal Link 1 (0x1)")
                   ->nvlink.has_value());
  EXPECT_FALSE(
      ParseXidLine("NVRM: Xid (PCI:0000:3b:00): 144, lower case text")->nvlink.has_value());
}

TEST(ParseGpuUuidLineTest, MapsBusIdToUuid) {
  std::optional<GpuUuidMapping> m = ParseGpuUuidLine(
      "[  3.1] NVRM: GPU at PCI:0000:3b:00: GPU-c1a7e0f2-9b34-4d58-8e61-2f0b7a3d0200");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->bus_id, "0000:3b:00.0");
  EXPECT_EQ(m->uuid, "GPU-c1a7e0f2-9b34-4d58-8e61-2f0b7a3d0200");
  EXPECT_FALSE(ParseGpuUuidLine("NVRM: GPU at PCI:0000:3b:00: GPU-1234").has_value());
  EXPECT_FALSE(ParseGpuUuidLine("NVRM: GPU at PCI:zz: GPU-c1a7e0f2-9b34-4d58-8e61-2f0b7a3d0200")
                   .has_value());
  EXPECT_FALSE(ParseGpuUuidLine("NVRM: GPU Board Serial Number: 1655024018263").has_value());
}

TEST(ParseFallenOffBusLineTest, SingleLineForm) {
  std::optional<XidEvent> e =
      ParseFallenOffBusLine("NVRM: GPU 0000:18:00.0: GPU has fallen off the bus.");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->bus_id, "0000:18:00.0");
  EXPECT_EQ(e->xid, 79);
  EXPECT_EQ(e->source, XidSource::kFallenOffBusMessage);
  EXPECT_EQ(e->message, "GPU has fallen off the bus.");
  // An XID line is not the single-line message (it is reported as an XID instead).
  EXPECT_FALSE(ParseFallenOffBusLine("NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.")
                   .has_value());
  EXPECT_FALSE(ParseFallenOffBusLine("NVRM: GPU garbage: GPU has fallen off the bus.").has_value());
}

TEST(KernelLogScannerTest, MultiLineMessageAsOneRecord) {
  KernelLogScanner scanner;
  std::vector<KernelLogFinding> found = scanner.Scan(
      "NVRM: The NVIDIA GPU 0000:5d:00.0\nNVRM: (PCI ID: 10de:2330) installed in this system "
      "has\nNVRM: fallen off the bus and is not responding to commands.");
  ASSERT_EQ(found.size(), 1u);
  const XidEvent& e = std::get<XidEvent>(found[0]);
  EXPECT_EQ(e.bus_id, "0000:5d:00.0");
  EXPECT_EQ(e.xid, 79);
  EXPECT_EQ(e.source, XidSource::kFallenOffBusMessage);
  EXPECT_EQ(e.message,
            "The NVIDIA GPU 0000:5d:00.0 (PCI ID: 10de:2330) installed in this system has "
            "fallen off the bus and is not responding to commands.");
}

TEST(KernelLogScannerTest, MultiLineMessageAsThreeRecords) {
  KernelLogScanner scanner;
  EXPECT_TRUE(scanner.Scan("NVRM: The NVIDIA GPU 0000:5d:00.0").empty());
  EXPECT_TRUE(scanner.Scan("NVRM: (PCI ID: 10de:2330) installed in this system has").empty());
  std::vector<KernelLogFinding> found =
      scanner.Scan("NVRM: fallen off the bus and is not responding to commands.");
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(std::get<XidEvent>(found[0]).bus_id, "0000:5d:00.0");
  // The state is consumed: the end of the message alone does not repeat the event.
  EXPECT_TRUE(scanner.Scan("NVRM: fallen off the bus and is not responding to commands.").empty());
}

TEST(KernelLogScannerTest, MultiLineMessageJoinedOnOneLine) {
  std::vector<KernelLogFinding> found = ScanKernelLog(
      "kernel: NVRM: The NVIDIA GPU 0000:5d:00.0 NVRM: (PCI ID: 10de:2330) installed in this "
      "system has NVRM: fallen off the bus and is not responding to commands.");
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(std::get<XidEvent>(found[0]).bus_id, "0000:5d:00.0");
}

TEST(KernelLogScannerTest, InterleavedLinesAndExpiry) {
  KernelLogScanner scanner;
  // Another CPU's line between the parts, and an XID, do not break the message.
  std::vector<KernelLogFinding> found = scanner.Scan(
      "NVRM: The NVIDIA GPU 0000:5d:00.0\n"
      "e1000e: eno1 NIC Link is Up\n"
      "NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=a, b\n"
      "NVRM: (PCI ID: 10de:2330) installed in this system has\n"
      "NVRM: fallen off the bus and is not responding to commands.");
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(std::get<XidEvent>(found[0]).xid, 13);
  EXPECT_EQ(std::get<XidEvent>(found[1]).bus_id, "0000:5d:00.0");

  // A start whose end never comes is forgotten after a few lines.
  EXPECT_TRUE(scanner.Scan("NVRM: The NVIDIA GPU 0000:77:00.0\na\nb\nc\nd\ne").empty());
  EXPECT_TRUE(scanner.Scan("NVRM: fallen off the bus and is not responding to commands.").empty());

  // Reset drops a started message.
  scanner.Scan("NVRM: The NVIDIA GPU 0000:77:00.0");
  scanner.Reset();
  EXPECT_TRUE(scanner.Scan("NVRM: fallen off the bus and is not responding to commands.").empty());
}

TEST(XidFixtureTest, EveryLineOfXidLinesParses) {
  std::vector<std::string> lines = FixtureLines("xid_lines.txt");
  ASSERT_GE(lines.size(), 20u) << "fixture missing or short";
  for (const std::string& line : lines) {
    std::optional<XidEvent> e = ParseXidLine(line);
    ASSERT_TRUE(e.has_value()) << line;
    EXPECT_FALSE(e->bus_id.empty()) << line;
    EXPECT_GT(e->xid, 0) << line;
    // The scanner sees the same single event.
    std::vector<KernelLogFinding> found = ScanKernelLog(line);
    ASSERT_EQ(found.size(), 1u) << line;
    EXPECT_EQ(std::get<XidEvent>(found[0]), *e);
  }
}

TEST(XidFixtureTest, MigLinesCarryInstanceIds) {
  std::vector<KernelLogFinding> found = ScanKernelLog(ReadFixture("mig.txt"));
  ASSERT_EQ(found.size(), 5u);
  EXPECT_EQ(std::get<GpuUuidMapping>(found[0]).uuid, "GPU-5e0c3b7a-6d21-4f8e-a9c4-1b2d3e4f0a05");
  struct Want {
    int xid, gi;
    std::optional<int> ci;
  } want[] = {{31, 1, 2}, {43, 5, std::nullopt}, {13, 13, 0}, {94, 2, 1}};
  for (size_t i = 0; i < 4; ++i) {
    const XidEvent& e = std::get<XidEvent>(found[i + 1]);
    EXPECT_EQ(e.bus_id, "0000:c3:00.0");
    EXPECT_EQ(e.xid, want[i].xid);
    EXPECT_EQ(e.gpu_instance, want[i].gi);
    EXPECT_EQ(e.compute_instance, want[i].ci);
  }
}

TEST(XidFixtureTest, FallenOffBusCorpus) {
  std::vector<KernelLogFinding> found = ScanKernelLog(ReadFixture("fallen_off_bus.txt"));
  ASSERT_EQ(found.size(), 4u);
  EXPECT_EQ(std::get<GpuUuidMapping>(found[0]).bus_id, "0000:5d:00.0");
  const XidEvent& multi = std::get<XidEvent>(found[1]);
  EXPECT_EQ(multi.bus_id, "0000:5d:00.0");
  EXPECT_EQ(multi.xid, 79);
  EXPECT_EQ(multi.source, XidSource::kFallenOffBusMessage);
  const XidEvent& single = std::get<XidEvent>(found[2]);
  EXPECT_EQ(single.bus_id, "0000:18:00.0");
  EXPECT_EQ(single.source, XidSource::kFallenOffBusMessage);
  const XidEvent& line = std::get<XidEvent>(found[3]);
  EXPECT_EQ(line.bus_id, "0000:18:00.0");
  EXPECT_EQ(line.source, XidSource::kXidLine);
}

TEST(XidFixtureTest, NoiseGivesNothing) {
  std::vector<std::string> lines = FixtureLines("noise.txt");
  ASSERT_GE(lines.size(), 20u);
  for (const std::string& line : lines) {
    EXPECT_TRUE(ScanKernelLog(line).empty()) << line;
  }
  EXPECT_TRUE(ScanKernelLog(ReadFixture("noise.txt")).empty());
}

TEST(XidFixtureTest, RecordsCorpusThroughKmsgParser) {
  KernelLogScanner scanner;
  std::vector<KernelLogFinding> found;
  for (const std::string& raw : SplitKmsgRecords(ReadFixture("kmsg_records.txt"))) {
    absl::StatusOr<KmsgRecord> record = ParseKmsgRecord(raw);
    ASSERT_TRUE(record.ok()) << record.status();
    for (KernelLogFinding& f : scanner.Scan(record->text)) found.push_back(std::move(f));
  }
  ASSERT_EQ(found.size(), 5u);
  EXPECT_EQ(std::get<GpuUuidMapping>(found[0]),
            (GpuUuidMapping{"0000:18:00.0", "GPU-c1a7e0f2-9b34-4d58-8e61-2f0b7a3d0200"}));
  EXPECT_EQ(std::get<XidEvent>(found[1]).xid, 119);
  EXPECT_EQ(std::get<XidEvent>(found[2]).bus_id, "0000:5d:00.0");
  EXPECT_EQ(std::get<XidEvent>(found[2]).source, XidSource::kFallenOffBusMessage);
  EXPECT_EQ(std::get<XidEvent>(found[3]).gpu_instance, 1);
  EXPECT_EQ(std::get<XidEvent>(found[3]).compute_instance, 0);
  EXPECT_EQ(std::get<XidEvent>(found[4]).bus_id, "0000:18:00.0");
}

TEST(AssessXidTest, CatalogueAndLineDetails) {
  XidAssessment fallen = AssessXid(*ParseXidLine("NVRM: Xid (PCI:0000:01:00): 79, x"));
  EXPECT_EQ(fallen.severity, XidSeverity::kFatal);
  EXPECT_EQ(fallen.action, GpuAction::kRebootNode);
  EXPECT_TRUE(fallen.adjustment.empty());

  XidAssessment reset = AssessXid(*ParseXidLine(
      "NVRM: Xid (PCI:0000:97:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 "
      "(GPU Reset Required)"));
  EXPECT_EQ(reset.severity, XidSeverity::kFatal);
  EXPECT_EQ(reset.action, GpuAction::kResetGpu);
  EXPECT_FALSE(reset.adjustment.empty());

  XidAssessment cleared = AssessXid(*ParseXidLine(
      "NVRM: Xid (PCI:0000:97:00): 154, GPU recovery action changed from 0x1 (GPU Reset "
      "Required) to 0x0 (None)"));
  EXPECT_EQ(cleared.severity, XidSeverity::kWarning);
  EXPECT_EQ(cleared.action, GpuAction::kNone);

  XidAssessment fatal_link = AssessXid(*ParseXidLine(
      "NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6)"));
  EXPECT_EQ(fatal_link.severity, XidSeverity::kFatal);
  EXPECT_EQ(fatal_link.action, GpuAction::kResetGpu);
  XidAssessment benign_link = AssessXid(*ParseXidLine(
      "NVRM: Xid (PCI:0018:01:00): 145, RLW_REMAP Nonfatal XC1 i0 Link 17 (0x00288002)"));
  EXPECT_EQ(benign_link.severity, XidSeverity::kWarning);
  EXPECT_EQ(benign_link.action, GpuAction::kNone);

  XidAssessment unknown = AssessXid(*ParseXidLine("NVRM: Xid (PCI:0000:d1:00): 999, x"));
  EXPECT_EQ(unknown.info.code, 999);
  EXPECT_EQ(unknown.info.mnemonic, "UNKNOWN_XID");
}

}  // namespace
}  // namespace gpulet::health
