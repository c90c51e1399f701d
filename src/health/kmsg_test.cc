#include "health/kmsg.h"

#include <fstream>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace gpulet::health {
namespace {

std::string ReadFixture(const std::string& name) {
  std::ifstream in(std::string(GPULET_SOURCE_DIR) + "/tests/fixtures/kmsg/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(KmsgRecordTest, ParsesHeaderAndText) {
  absl::StatusOr<KmsgRecord> r =
      ParseKmsgRecord("4,1302,8123456801,-;NVRM: Xid (PCI:0000:18:00): 119, pid=1\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->facility, 0);
  EXPECT_EQ(r->level, 4);
  EXPECT_EQ(r->seq, 1302u);
  EXPECT_EQ(r->timestamp_us, 8123456801u);
  EXPECT_FALSE(r->continuation);
  EXPECT_TRUE(r->from_kernel());
  EXPECT_EQ(r->text, "NVRM: Xid (PCI:0000:18:00): 119, pid=1");
  EXPECT_TRUE(r->dict.empty());
}

TEST(KmsgRecordTest, FacilityLevelFlagsAndExtraFields) {
  absl::StatusOr<KmsgRecord> r = ParseKmsgRecord("30,7,1,c,caller=T1,more;hello");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->facility, 3);  // 30 = 3 << 3 | 6
  EXPECT_EQ(r->level, 6);
  EXPECT_TRUE(r->continuation);
  EXPECT_FALSE(r->from_kernel());
  EXPECT_EQ(r->text, "hello");  // no trailing newline needed
  absl::StatusOr<KmsgRecord> plus = ParseKmsgRecord("6,8,2,+;x\n");
  ASSERT_TRUE(plus.ok());
  EXPECT_TRUE(plus->continuation);
}

TEST(KmsgRecordTest, EmptyTextIsFine) {
  absl::StatusOr<KmsgRecord> r = ParseKmsgRecord("6,8,2,-;\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->text, "");
}

TEST(KmsgRecordTest, DictionaryLines) {
  absl::StatusOr<KmsgRecord> r = ParseKmsgRecord(
      "3,1303,8123999000,-;NVRM: GPU lost\n SUBSYSTEM=pci\n DEVICE=+pci:0000:5d:00.0\n"
      " EMPTY=\n NOEQUALS\n =novalue\n ESCAPED=a\\x20b\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->dict.size(), 4u);
  EXPECT_EQ(r->dict.at("SUBSYSTEM"), "pci");
  EXPECT_EQ(r->dict.at("DEVICE"), "+pci:0000:5d:00.0");
  EXPECT_EQ(r->dict.at("EMPTY"), "");
  EXPECT_EQ(r->dict.at("ESCAPED"), "a b");
}

TEST(KmsgRecordTest, UnescapesEmbeddedNewlines) {
  absl::StatusOr<KmsgRecord> r = ParseKmsgRecord(
      "3,1,2,-;NVRM: The NVIDIA GPU 0000:5d:00.0\\x0aNVRM: (PCI ID: 10de:2330) installed in "
      "this system has\\x0aNVRM: fallen off the bus and is not responding to commands.\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->text,
            "NVRM: The NVIDIA GPU 0000:5d:00.0\nNVRM: (PCI ID: 10de:2330) installed in this "
            "system has\nNVRM: fallen off the bus and is not responding to commands.");
}

TEST(UnescapeKmsgTextTest, Table) {
  struct Case {
    const char* in;
    std::string out;
  } cases[] = {
      {"plain", "plain"},
      {"a\\x0ab", "a\nb"},
      {"\\x5c", "\\"},
      {"\\x41\\x4A\\x4a", "AJJ"},
      {"tab\\x09", "tab\t"},
      {"\\x00", std::string(1, '\0')},
      {"\\xff", "\xff"},
      {"bad \\xg1", "bad \\xg1"},
      {"short \\x4", "short \\x4"},
      {"end \\x", "end \\x"},
      {"end \\", "end \\"},
      {"\\\\x41", "\\A"},
      {"", ""},
  };
  for (const Case& c : cases) EXPECT_EQ(UnescapeKmsgText(c.in), c.out) << c.in;
}

TEST(KmsgRecordTest, MalformedRecordsGiveStatusNamingTheRecord) {
  const char* bad[] = {
      "",
      "no semicolon",
      "6,1,2;too few fields",
      "x,1,2,-;prio not a number",
      "6,x,2,-;seq not a number",
      "6,1,x,-;ts not a number",
      "6,1,2,;empty flag",
      "-6,1,2,-;negative",
      "6,-1,2,-;negative seq",
      " 6,1,2,-;leading space",
      "6 ,1,2,-;space",
      "1024,1,2,-;prio too large",
      "6,99999999999999999999999,2,-;seq overflows",
      "6,1\n,2,-;header across lines",
      "6,1,2,-;one\n6,2,3,-;two\n",
      ";",
      ",,,;",
  };
  for (const char* raw : bad) {
    absl::StatusOr<KmsgRecord> r = ParseKmsgRecord(raw);
    EXPECT_FALSE(r.ok()) << "'" << raw << "'";
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_TRUE(absl::StrContains(r.status().message(), "/dev/kmsg record")) << r.status();
    }
  }
}

TEST(KmsgRecordTest, ErrorExcerptIsPrintableAndShort) {
  std::string raw(500, '\x01');
  absl::StatusOr<KmsgRecord> r = ParseKmsgRecord(raw);
  ASSERT_FALSE(r.ok());
  EXPECT_LT(r.status().message().size(), 200u);
  for (char c : r.status().message()) EXPECT_GE(static_cast<unsigned char>(c), 0x20);
}

TEST(KmsgRecordTest, LargestValues) {
  absl::StatusOr<KmsgRecord> r = ParseKmsgRecord("1023,18446744073709551615,0,-;x");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->facility, 127);
  EXPECT_EQ(r->level, 7);
  EXPECT_EQ(r->seq, 18446744073709551615u);
}

TEST(SplitKmsgRecordsTest, SplitsAtNonContinuationLines) {
  std::vector<std::string> records = SplitKmsgRecords(
      "# comment\n\n6,1,2,-;first\n KEY=V\n6,2,3,-;second\n orphan?\n\n KEY=after blank\n"
      "6,3,4,-;third");
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0], "6,1,2,-;first\n KEY=V\n");
  EXPECT_EQ(records[1], "6,2,3,-;second\n orphan?\n");
  EXPECT_EQ(records[2], "6,3,4,-;third\n");
}

TEST(KmsgFixtureTest, EveryRecordInTheCorpusParses) {
  std::string text = ReadFixture("kmsg_records.txt");
  ASSERT_FALSE(text.empty()) << "fixture missing";
  std::vector<std::string> records = SplitKmsgRecords(text);
  ASSERT_EQ(records.size(), 10u);
  uint64_t previous_seq = 0;
  for (const std::string& raw : records) {
    absl::StatusOr<KmsgRecord> r = ParseKmsgRecord(raw);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_GT(r->seq, previous_seq);
    previous_seq = r->seq;
  }
  absl::StatusOr<KmsgRecord> fallen = ParseKmsgRecord(records[4]);
  ASSERT_TRUE(fallen.ok());
  EXPECT_EQ(fallen->level, 3);
  EXPECT_EQ(std::count(fallen->text.begin(), fallen->text.end(), '\n'), 2);
  EXPECT_EQ(fallen->dict.at("DEVICE"), "+pci:0000:5d:00.0");
  absl::StatusOr<KmsgRecord> user = ParseKmsgRecord(records[6]);
  ASSERT_TRUE(user.ok());
  EXPECT_EQ(user->facility, 1);
  EXPECT_TRUE(absl::StrContains(user->text, "tab\tand a backslash \\ here"));
  absl::StatusOr<KmsgRecord> fragment = ParseKmsgRecord(records[7]);
  ASSERT_TRUE(fragment.ok());
  EXPECT_TRUE(fragment->continuation);
}

}  // namespace
}  // namespace gpulet::health
