#include "doctor/explain_eval.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"

namespace gpulet::doctor {
namespace {

const char kCatalog[] =
    "entries:\n"
    "  - id: disk-full\n    title: T\n    severity: error\n    patterns: ['no space left on <w>']\n"
    "    cause: C.\n    fix: {generic: F.}\n    source: https://example.org/a\n"
    "    examples: ['no space left on /dev/sda1']\n"
    "  - id: node-down\n    title: T\n    severity: critical\n    patterns: ['node <w> is down']\n"
    "    cause: C.\n    fix: {generic: F.}\n    source: https://example.org/b\n"
    "    examples: ['node n1 is down']\n";

std::vector<EvalMessage> Messages(const std::string& yaml) {
  absl::StatusOr<std::vector<EvalMessage>> m = ParseEvalSet("t.yaml", yaml);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : std::vector<EvalMessage>{};
}

std::string Message(const std::string& expect, const std::string& text) {
  return absl::StrCat("  - expect: ", expect, "\n    source: https://example.org/x\n",
                      "    text: '", text, "'\n");
}

TEST(ExplainEvalTest, ScoresRecognisedAndRightCauseByArea) {
  absl::StatusOr<ExplainCatalog> catalog = ExplainCatalog::Parse(kCatalog);
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  std::vector<EvalMessage> disk = Messages(absl::StrCat(
      "area: disk\nmessages:\n", Message("disk-full", "E0101 write: no space left on /dev/sdb2"),
      // Recognised, but the worse node-down message comes first: the wrong cause.
      Message("disk-full", "no space left on /var; node n7 is down"),
      Message("disk-full", "something else entirely")));
  std::vector<EvalMessage> nodes = Messages(absl::StrCat(
      "area: nodes\nmessages:\n", Message("node-down", "kubelet: node talos-07 is down"),
      Message("xid-79", "NVRM: Xid (PCI:0000:01:00): 79, pid=0, GPU has fallen off the bus."),
      Message("nvml-gpu-is-lost", "nvmlDeviceGetHandleByIndex: NVML_ERROR_GPU_IS_LOST")));
  disk.insert(disk.end(), nodes.begin(), nodes.end());

  absl::StatusOr<EvalReport> r = Evaluate(catalog, disk);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->areas.size(), 2u);
  EXPECT_EQ(r->areas[0].area, "disk");
  EXPECT_EQ(r->areas[0].messages, 3u);
  EXPECT_EQ(r->areas[0].recognised, 2u);
  EXPECT_EQ(r->areas[0].right, 1u);
  EXPECT_EQ(r->areas[1].area, "nodes");
  EXPECT_EQ(r->areas[1].right, 3u);
  EXPECT_EQ(r->all.messages, 6u);
  EXPECT_EQ(r->all.recognised, 5u);
  EXPECT_EQ(r->all.right, 4u);
  ASSERT_EQ(r->misses.size(), 2u);
  EXPECT_EQ(r->misses[0].message->where, "t.yaml: message 2");
  EXPECT_EQ(r->misses[0].found, (std::vector<std::string>{"node-down", "disk-full"}));
  EXPECT_TRUE(r->misses[1].found.empty());
}

TEST(ExplainEvalTest, RefusesMessagesThatMeasureNothing) {
  absl::StatusOr<ExplainCatalog> catalog = ExplainCatalog::Parse(kCatalog);
  ASSERT_TRUE(catalog.ok());
  struct Case {
    std::string message;
    const char* says;
  } cases[] = {
      {Message("no-such-entry", "x"), "`expect` names no explanation: no-such-entry"},
      {Message("nvml-not-a-code", "x"), "names no explanation"},
      {Message("xid-abc", "x"), "names no explanation"},
      // The entry's own example (whitespace and case aside) is no evaluation.
      {Message("disk-full", "No space  left on /dev/sda1"), "an example of entry disk-full"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<EvalReport> r =
        Evaluate(catalog, Messages(absl::StrCat("area: a\nmessages:\n", c.message)));
    ASSERT_FALSE(r.ok()) << c.message;
    EXPECT_TRUE(absl::StrContains(r.status().message(), c.says)) << r.status();
    EXPECT_TRUE(absl::StrContains(r.status().message(), "t.yaml: message 1")) << r.status();
  }
  EXPECT_FALSE(Evaluate(absl::InvalidArgumentError("broken"), {}).ok());
}

TEST(ExplainEvalTest, ParseRefusesBadFiles) {
  const std::string good = absl::StrCat("area: a\nmessages:\n", Message("disk-full", "x"));
  ASSERT_TRUE(ParseEvalSet("t.yaml", good).ok());
  struct Case {
    std::string yaml;
    const char* says;
  } cases[] = {
      {"area: [", "t.yaml:1: not valid YAML"},
      {"messages: []\n", "t.yaml:1: area is missing"},
      {"area: a\nmessages: []\n", "t.yaml:2: messages must be a non-empty list"},
      {"area: a\n", "messages must be a non-empty list"},
      {"area: a\nmessages: [x]\n", "t.yaml:2: messages[0] must be a mapping"},
      {absl::StrCat(good, "colour: red\n"), "t.yaml:6: unknown key 'colour'"},
      {absl::StrReplaceAll(good, {{"https://example.org/x", "issue 12"}}),
       "t.yaml:4: messages[0].source must be the URL"},
      {absl::StrReplaceAll(good, {{"    text: 'x'\n", ""}}), "messages[0].text is missing"},
      {absl::StrReplaceAll(good, {{"    text: 'x'\n", "    text: 'x'\n    text: 'y'\n"}}),
       "t.yaml:6: duplicate key 'messages[0].text'"},
      {absl::StrReplaceAll(good, {{"    text: 'x'\n", "    text: [x]\n"}}),
       "t.yaml:5: messages[0].text must be a non-empty string, not a list"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::vector<EvalMessage>> m = ParseEvalSet("t.yaml", c.yaml);
    ASSERT_FALSE(m.ok()) << c.yaml;
    EXPECT_TRUE(absl::StrContains(m.status().message(), c.says)) << m.status();
  }
}

TEST(ExplainEvalTest, LoadsACatalogueFromADirectory) {
  std::string dir = ::testing::TempDir() + "/explain-eval-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  EXPECT_FALSE(LoadExplainCatalogDir(dir).ok());  // no files
  EXPECT_FALSE(LoadExplainCatalogDir(dir + "/missing").ok());
  std::ofstream(dir + "/b.yaml") << kCatalog;
  std::ofstream(dir + "/README.md") << "not a catalogue";
  absl::StatusOr<ExplainCatalog> c = LoadExplainCatalogDir(dir);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->entries().size(), 2u);
  EXPECT_EQ(c->Find("node-down")->file, "b.yaml");
  std::ofstream(dir + "/a.yaml") << kCatalog;  // the same ids again, in a file read first
  c = LoadExplainCatalogDir(dir);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(
      absl::StrContains(c.status().message(), "b.yaml:2: duplicate id disk-full (also in a.yaml)"))
      << c.status();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gpulet::doctor
