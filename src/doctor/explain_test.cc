#include "doctor/explain.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "doctor/explain_catalog.h"
#include "gmock/gmock.h"
#include "gpu/nvml_errors.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/files.h"
#include "testing/homelab.h"
#include "testing/subprocess.h"

extern char** environ;

namespace gpulet::doctor {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Fixture(const std::string& name) {
  return ReadFile(std::string(GPULET_SOURCE_DIR) + "/tests/fixtures/kmsg/" + name);
}

std::vector<std::string> Ids(const std::vector<Explanation>& found) {
  std::vector<std::string> ids;
  for (const Explanation& e : found) ids.push_back(e.id);
  return ids;
}

// A copy, so that Find(Explain(...)) cannot leave a pointer into a destroyed vector.
std::optional<Explanation> Find(const std::vector<Explanation>& found, absl::string_view id) {
  for (const Explanation& e : found) {
    if (e.id == id) return e;
  }
  return std::nullopt;
}

std::string Detail(const Explanation& e, absl::string_view key) {
  for (const auto& [k, v] : e.details) {
    if (k == key) return v;
  }
  return "";
}

TEST(WildcardSearchTest, Table) {
  struct Case {
    const char* pattern;
    std::string text;  // owned: some cases are built at run time
    bool want;
  } cases[] = {
      {"", "", true},
      {"", "anything", true},
      {"abc", "xxabcxx", true},
      {"ABC", "xxabcxx", true},
      {"abc", "ab", false},
      {"a*c", "xxa123cxx", true},
      {"a*c", "xxa123", false},
      {"a?c", "abc", true},
      {"a?c", "ac", false},
      {"*", "", true},
      {"**", "x", true},
      {"GLIBC_2.* not found", "version `GLIBC_2.34' not found (required by x)", true},
      {"GLIBC_2.* not found", "GLIBC_2.34 is fine", false},
      {"GLIBC_2.* not found", "GLIBC_2.38 not found", true},
      {"nodes are available*untolerated taint",
       "0/3 nodes are available: 3 node(s) had untolerated taint {nvidia.com/gpu: present}.", true},
      {"a*b*c*d", "aXbXcXd", true},
      {"a*b*c*d", "aXbXcX", false},
      {"aaa*b", std::string(1000, 'a'), false},
      {"multi*line", "multi\nline", true},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(WildcardSearch(c.pattern, c.text), c.want)
        << "pattern '" << c.pattern << "' text '" << c.text << "'";
  }
}

TEST(MessagePatternTest, Placeholders) {
  struct Case {
    const char* pattern;
    const char* text;
    bool want;
  } cases[] = {
      {"version <n>.<n>", "has the version 535.54, but", true},
      {"version <n>.<n>", "has the version 535, but", false},
      {"gpu <w>: rminitadapter", "gpu 0000:01:00.0: rminitadapter failed", true},
      {"gpu <w>: rminitadapter", "gpu : rminitadapter failed", false},
      {"for nvidia/<w>/ failed", "for nvidia/570.144/ failed", true},
      {"pci:<x>", "xid (pci:0000:3b:00)", true},
      {"pci:<x>", "xid (pci:zz)", false},
      {"<n> device(s)", "failed for 12 device(s).", true},
      // Runs are taken whole: "<n>1" cannot match inside one run of digits.
      {"<n>1", "x121", false},
      {"a*<n>*b", "a 5 b", true},
      {"a*<n>*b", "a b", false},
      {"a<b", "a<b", true},  // not a placeholder: taken literally
  };
  for (const Case& c : cases) {
    EXPECT_EQ(MessagePattern::Compile(c.pattern).Search(c.text), c.want)
        << "pattern '" << c.pattern << "' text '" << c.text << "'";
  }
  EXPECT_EQ(MessagePattern::Compile("gpu <w>: rminitadapter failed!").anchor(), "rminitadapter");
  // Common words only when there is nothing else.
  EXPECT_EQ(MessagePattern::Compile("failed to load nvsandbox").anchor(), "nvsandbox");
  EXPECT_EQ(MessagePattern::Compile("failed driver").anchor(), "failed");
  for (const Case& c : cases) {
    std::string lower = absl::AsciiStrToLower(c.text);
    EXPECT_EQ(MessagePattern::Compile(c.pattern).SearchNormalized(lower), c.want) << c.pattern;
  }
}

TEST(ExplainCatalogTest, BuiltinCatalogueLoads) {
  const absl::StatusOr<ExplainCatalog>& catalog = BuiltinExplainCatalog();
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  EXPECT_GE(catalog->entries().size(), 150u);
}

// Every entry: a unique id, a public source URL, a known doctor check, fixes and examples;
// and every example, explained on its own, selects its own entry.
TEST(ExplainCatalogTest, EveryEntryIsSourcedAndMatchesItsExamples) {
  const absl::StatusOr<ExplainCatalog>& catalog = BuiltinExplainCatalog();
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  std::set<std::string> ids;
  std::set<std::string> sources;
  for (const ExplainCatalogEntry& entry : catalog->entries()) {
    SCOPED_TRACE(entry.id);
    EXPECT_TRUE(ids.insert(entry.id).second) << "duplicate id";
    EXPECT_TRUE(absl::StartsWith(entry.source, "https://")) << entry.source;
    sources.insert(entry.source);
    EXPECT_FALSE(entry.examples.empty()) << "no example";
    EXPECT_FALSE(entry.patterns.empty());
    EXPECT_FALSE(entry.title.empty());
    EXPECT_FALSE(entry.cause.empty());
    EXPECT_FALSE(entry.fix.empty());
    EXPECT_TRUE(entry.check.empty() || IsDoctorCheckName(entry.check)) << entry.check;
    for (const std::string& example : entry.examples) {
      EXPECT_TRUE(Find(Explain(example), entry.id).has_value())
          << "example not matched by its entry: " << example << "\n got "
          << ::testing::PrintToString(Ids(Explain(example)));
    }
  }
  // Many sources, not one page quoted over and over.
  EXPECT_GE(sources.size(), 100u);
}

TEST(ExplainCatalogTest, ParseRejectsBadCatalogues) {
  const std::string good =
      "entries:\n"
      "  - id: a\n    title: T\n    severity: error\n    patterns: [some text]\n"
      "    cause: C.\n    fix: {generic: F.}\n    source: https://example.org/a\n"
      "    examples: [some text here]\n";
  ASSERT_TRUE(ExplainCatalog::Parse(good).ok()) << ExplainCatalog::Parse(good).status();
  struct Case {
    std::string yaml;
    const char* says;
  } cases[] = {
      {"entries: [", "explain catalogue"},
      {"{}", "explain catalogue:1: entries must be a list"},
      {good + good.substr(std::string("entries:\n").size()), "duplicate id a"},
      {absl::StrReplaceAll(good, {{"    source: https://example.org/a\n", ""}}),
       "explain catalogue:2: entries[0].source is missing"},
      {absl::StrReplaceAll(good, {{"https://example.org/a", "issue 12"}}),
       "explain catalogue:8: entries[0].source must be the URL"},
      {absl::StrReplaceAll(good, {{"    examples: [some text here]\n", ""}}),
       "explain catalogue:2: entries[0].examples is missing"},
      {absl::StrReplaceAll(good, {{"severity: error", "severity: bad"}}),
       "explain catalogue:4: entries[0].severity must be info, warning, error or critical"},
      {absl::StrReplaceAll(good, {{"[some text]", "['*']"}}),
       "explain catalogue:5: entries[0].patterns: pattern \"*\" has no literal run"},
      {absl::StrReplaceAll(good, {{"{generic: F.}", "{windows: F.}"}}),
       "explain catalogue:7: unknown key 'entries[0].fix.windows' (allowed: generic, talos)"},
      {absl::StrReplaceAll(good, {{"    cause: C.\n", "    cause: C.\n    check: no.such\n"}}),
       "explain catalogue:7: entries[0].check names no gpulet doctor check: no.such"},
      {absl::StrReplaceAll(good, {{"    cause: C.\n", "    cause: C.\n    colour: red\n"}}),
       "explain catalogue:7: unknown key 'entries[0].colour'"},
      // yaml-cpp keeps both and a lookup finds the first: the second cause would do nothing.
      {absl::StrReplaceAll(good, {{"    cause: C.\n", "    cause: C.\n    cause: D.\n"}}),
       "explain catalogue:7: duplicate key 'entries[0].cause'"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ExplainCatalog> parsed = ExplainCatalog::Parse(c.yaml);
    ASSERT_FALSE(parsed.ok()) << c.yaml;
    EXPECT_TRUE(absl::StrContains(parsed.status().message(), c.says)) << parsed.status();
  }
}

// The catalogue is one file per area: an error names the file, and an id is unique across
// files.
TEST(ExplainCatalogTest, ParseFilesNamesTheFileAndKeepsIdsUniqueAcrossFiles) {
  const std::string a =
      "entries:\n"
      "  - id: a\n    title: T\n    severity: error\n    patterns: [some text]\n"
      "    cause: C.\n    fix: {generic: F.}\n    source: https://example.org/a\n"
      "    examples: [some text here]\n";
  const std::string b = absl::StrReplaceAll(a, {{"id: a", "id: b"}, {"some text", "other text"}});
  absl::StatusOr<ExplainCatalog> both = ExplainCatalog::ParseFiles(
      {ExplainCatalogFile{"a.yaml", a}, ExplainCatalogFile{"b.yaml", b}});
  ASSERT_TRUE(both.ok()) << both.status();
  ASSERT_EQ(both->entries().size(), 2u);
  EXPECT_EQ(both->Find("b")->file, "b.yaml");
  EXPECT_EQ(both->Find("c"), nullptr);

  absl::StatusOr<ExplainCatalog> twice = ExplainCatalog::ParseFiles(
      {ExplainCatalogFile{"a.yaml", a}, ExplainCatalogFile{"c.yaml", a}});
  ASSERT_FALSE(twice.ok());
  EXPECT_TRUE(absl::StrContains(twice.status().message(),
                                "explain catalogue c.yaml:2: duplicate id a (also in a.yaml)"))
      << twice.status();
  absl::StatusOr<ExplainCatalog> bad = ExplainCatalog::ParseFiles(
      {ExplainCatalogFile{"a.yaml", a}, ExplainCatalogFile{"bad.yaml", "entries: ["}});
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "explain catalogue bad.yaml"))
      << bad.status();
  absl::StatusOr<ExplainCatalog> extra =
      ExplainCatalog::ParseFiles({ExplainCatalogFile{"x.yaml", absl::StrCat("area: dcgm\n", a)}});
  ASSERT_FALSE(extra.ok());
  EXPECT_TRUE(
      absl::StrContains(extra.status().message(),
                        "explain catalogue x.yaml:1: unknown key 'area' (allowed: entries)"))
      << extra.status();
  EXPECT_FALSE(ExplainCatalog::ParseFiles({}).ok());
}

TEST(ExplainCatalogTest, EveryBuiltinFileHoldsEntries) {
  const absl::StatusOr<ExplainCatalog>& catalog = BuiltinExplainCatalog();
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  std::set<std::string> with_entries;
  for (const ExplainCatalogEntry& e : catalog->entries()) with_entries.insert(e.file);
  ASSERT_GE(ExplainCatalogFiles().size(), 10u);
  for (const ExplainCatalogFile& f : ExplainCatalogFiles()) {
    EXPECT_TRUE(absl::EndsWith(f.name, ".yaml")) << f.name;
    EXPECT_TRUE(with_entries.contains(std::string(f.name))) << f.name << " has no entries";
  }
}

// A message with several causes lists each with the question that tells it apart; the
// explanation carries them.
TEST(ExplainCatalogTest, CandidatesAreParsedValidatedAndExplained) {
  const std::string good =
      "entries:\n"
      "  - id: a\n    title: T\n    severity: error\n    patterns: [some text]\n"
      "    cause: One of two things.\n    fix: {generic: F.}\n"
      "    source: https://example.org/a\n    examples: [some text here]\n"
      "    candidates:\n"
      "      - {cause: First., question: Does it load, check: nvml.load}\n"
      "      - {cause: Second., question: Or else}\n";
  absl::StatusOr<ExplainCatalog> parsed = ExplainCatalog::Parse(good);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->entries()[0].candidates.size(), 2u);
  EXPECT_EQ(parsed->entries()[0].candidates[0].check, "nvml.load");
  ExplainResult r = ExplainText("log: some text", CompileExplainCatalog(parsed));
  ASSERT_EQ(r.found.size(), 1u);
  ASSERT_EQ(r.found[0].candidates.size(), 2u);
  EXPECT_EQ(r.found[0].candidates[1].question, "Or else");

  struct Case {
    std::string from, to;
    const char* says;
  } cases[] = {
      {"      - {cause: Second., question: Or else}\n", "", "two or more"},
      {"question: Or else", "check: nvml.load",
       "entries[0].candidates[1].question is missing: a candidate needs"},
      {"check: nvml.load", "check: no.such", "no gpulet doctor check"},
      {"question: Or else", "question: Or else, colour: red",
       "explain catalogue:12: unknown key 'entries[0].candidates[1].colour'"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ExplainCatalog> bad =
        ExplainCatalog::Parse(absl::StrReplaceAll(good, {{c.from, c.to}}));
    ASSERT_FALSE(bad.ok()) << c.to;
    EXPECT_TRUE(absl::StrContains(bad.status().message(), c.says)) << bad.status();
  }
}

// On one line, the entry with more literal text comes first; an entry that names an NVML
// reason outranks the return code's own explanation, and one that covers the reason with a
// placeholder ranks below it.
TEST(ExplainTest, OnOneLineTheMostSpecificComesFirst) {
  auto entry = [](const char* id, const char* pattern, const char* example) {
    return absl::StrCat("  - id: ", id, "\n    title: T\n    severity: error\n    patterns: ['",
                        pattern, "']\n    cause: C.\n    fix: {generic: F.}\n",
                        "    source: https://example.org/", id, "\n    examples: ['", example,
                        "']\n");
  };
  absl::StatusOr<ExplainCatalog> catalog = ExplainCatalog::Parse(
      absl::StrCat("entries:\n", entry("short", "no space left", "no space left"),
                   entry("long", "no space left on device", "no space left on device"),
                   entry("names-reason", "Failed to initialize NVML: Insufficient Permissions",
                         "Failed to initialize NVML: Insufficient Permissions"),
                   entry("placeholder", "Cannot init NVML library; err: <w>",
                         "Cannot init NVML library; err: ERROR_UNKNOWN")));
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  std::shared_ptr<const ExplainMatcher> m = CompileExplainCatalog(catalog);
  EXPECT_EQ(Ids(ExplainText("write: no space left on device", m).found),
            (std::vector<std::string>{"long", "short"}));
  EXPECT_EQ(Ids(ExplainText("Failed to initialize NVML: Insufficient Permissions", m).found),
            (std::vector<std::string>{"names-reason", "nvml-no-permission"}));
  EXPECT_EQ(
      Ids(ExplainText("msg=\"Cannot init NVML library; err: ERROR_LIBRARY_NOT_FOUND\"", m).found),
      (std::vector<std::string>{"nvml-library-not-found", "placeholder"}));
}

// JSON and logfmt logs, and kubectl's quoting of an Event, escape a message's quotes and
// line breaks; explain undoes them (up to three levels) and matches the message as printed.
TEST(ExplainTest, QuotedAndEscapedMessagesMatchAsPrinted) {
  std::string buffer;
  EXPECT_EQ(UnescapePaste(R"(no \"escape\" here)", &buffer), R"(no "escape" here)");
  EXPECT_EQ(UnescapePaste(R"(plain)", &buffer), "plain");
  EXPECT_EQ(UnescapePaste(R"(a\\\"b\\\"c)", &buffer), R"(a"b"c)");  // two levels
  // Three levels (a JSON log line in an Event that kubectl quotes) are undone; a fourth is
  // left as it is, one level short.
  EXPECT_EQ(UnescapePaste(std::string(7, '\\') + "\"", &buffer), "\"");
  EXPECT_EQ(UnescapePaste(std::string(15, '\\') + "\"", &buffer), "\\\"");
  EXPECT_EQ(UnescapePaste(R"(x\u003cy\u003e\nz\tw)", &buffer), "x<y> z w");
  EXPECT_EQ(UnescapePaste(R"(\xe2\x80\x9c)", &buffer), "\xe2\x80\x9c");
  EXPECT_EQ(UnescapePaste(R"(C:\path\u12)", &buffer), R"(C:\path\u12)");  // not escapes
  EXPECT_EQ(UnescapePaste("ends with \\", &buffer), "ends with \\");

  const char* pastes[] = {
      // A JSON log line (containerd, klog's JSON format).
      R"({"level":"error","msg":"RunPodSandbox failed","error":"rpc error: code = Unknown desc = failed to get sandbox runtime: no runtime for \"nvidia\" is configured"})",
      // kubectl describe of an Event whose message quotes a Go error with %q.
      R"(  Warning  FailedCreatePodSandBox  2m  kubelet  Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox runtime: no runtime for \\\"nvidia\\\" is configured)",
      // logfmt.
      R"(time="2024-02-01T10:00:00Z" level=error msg="failed: no runtime for \"nvidia\" is configured")",
  };
  for (const char* paste : pastes) {
    EXPECT_EQ(Ids(Explain(paste)), std::vector<std::string>{"containerd-nvidia-runtime-missing"})
        << paste;
  }
}

struct MessageCase {
  const char* text;
  const char* id;
  std::vector<const char*> fix_mentions;
};

TEST(ExplainTest, MessagesPeopleMeet) {
  const MessageCase cases[] = {
      {"Failed to initialize NVML: could not load NVML library: libnvidia-ml.so.1: cannot open "
       "shared object file: No such file or directory",
       "nvml-library-missing",
       {"runtimeClassName: nvidia"}},
      {"E0611 12:00:00.000000 1 main.go:132] error starting plugins: error creating plugin "
       "manager: unable to create plugin manager: invalid device discovery strategy",
       nullptr,
       {}},
      {"Incompatible strategy detected auto",
       "device-plugin-incompatible-strategy",
       {"runtimeClassName=nvidia"}},
      {"nvidia-container-cli: initialization error: ERROR: init 250 result=11",
       "talos-ldcache-init-250",
       {"v1.13", "CDI"}},
      {"Error: failed to create containerd task: failed to create shim task: OCI runtime create "
       "failed: error running createContainer hook #0: fork/exec /usr/bin/nvidia-ctk: no such "
       "file or directory: unknown",
       "cdi-hook-path",
       {"/usr/local/bin/nvidia-cdi-hook", "NVIDIA_CDI_HOOK_PATH"}},
      {"failed to create containerd container: CDI device injection failed: unresolvable CDI "
       "devices nvidia.com/gpu=all",
       "cdi-unresolvable",
       {"nvidia-ctk cdi generate", "/var/run/cdi"}},
      {"Failed to initialize NVML: Unknown Error", "nvml-unknown-error-in-container", {"CDI"}},
      {"nvidia-container-cli: insufficient privileges to read device list from "
       "NVIDIA_VISIBLE_DEVICES envvar",
       "visible-devices-unprivileged",
       {"nvidia.com/gpu"}},
      {"/usr/bin/nvidia-smi: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.34' not found "
       "(required by /usr/bin/nvidia-smi)",
       "glibc-too-old",
       {"runtimeClassName: nvidia"}},
      {"Failed to initialize NVML: Driver/library version mismatch",
       "driver-library-mismatch",
       {"Reboot", "same driver version"}},
      {"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure "
       "that the latest NVIDIA driver is installed and running.",
       "nvidia-smi-no-driver",
       {"machine.kernel.modules", "nvidia_uvm", "talosctl"}},
      {"modprobe: ERROR: could not insert 'nvidia': Key was rejected by service",
       "talos-module-signature",
       {"nvidia-open-gpu-kernel-modules-production"}},
      {"0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
       "no-gpu-resource",
       {"nvidia.com/gpu.present=true"}},
      {"0/4 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: present}, 3 "
       "node(s) didn't match Pod's node affinity/selector.",
       "untolerated-taint",
       {"register-with-taints", "operator: Exists"}},
      {"pods \"ollama-0\" is forbidden: pod rejected: RuntimeClass \"nvidia\" not found",
       "runtimeclass-missing",
       {"handler: nvidia"}},
      {"Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox "
       "runtime: no runtime for \"nvidia\" is configured",
       "containerd-nvidia-runtime-missing",
       {"nvidia-container-toolkit-production"}},
      {"nvidia-container-cli: mount error: failed to add device rules: unable to generate new "
       "device filter program from existing programs: unable to create new device filters "
       "program: load program: invalid argument: unknown",
       "talos-bpf-jit-harden",
       {"net.core.bpf_jit_harden: 1"}},
      {"nvidia 0000:02:00.0: probe with driver nvidia failed with error -1",
       "gpu-probe-failed",
       {"Resizable BAR", "nvidia-open-gpu-kernel-modules-production"}},
  };
  for (const MessageCase& c : cases) {
    SCOPED_TRACE(c.text);
    std::vector<Explanation> found = Explain(c.text);
    if (c.id == nullptr) {
      EXPECT_TRUE(found.empty()) << ::testing::PrintToString(Ids(found));
      continue;
    }
    std::optional<Explanation> e = Find(found, c.id);
    ASSERT_TRUE(e.has_value()) << "got: " << ::testing::PrintToString(Ids(found));
    EXPECT_FALSE(e->matched.empty());
    std::string fixes = absl::StrCat(e->fix, "\n", e->fix_talos);
    for (const char* mention : c.fix_mentions) {
      EXPECT_TRUE(absl::StrContains(fixes, mention)) << mention << " not in: " << fixes;
    }
  }
}

TEST(ExplainTest, TalosFactsAreQuotedExactly) {
  std::optional<Explanation> glibc = Find(Explain("GLIBC_2.38 not found"), "glibc-too-old");
  ASSERT_TRUE(glibc.has_value());
  EXPECT_TRUE(absl::StrContains(glibc->cause, "/usr/local/glibc/lib"));
  std::optional<Explanation> smi =
      Find(Explain("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"),
           "nvidia-smi-no-driver");
  ASSERT_TRUE(smi.has_value());
  EXPECT_TRUE(absl::StrContains(smi->fix_talos,
                                "machine.kernel.modules: [{name: nvidia}, {name: nvidia_uvm}, "
                                "{name: nvidia_drm}, {name: nvidia_modeset}]"))
      << smi->fix_talos;
  std::optional<Explanation> cdi = Find(Explain("unresolvable CDI devices"), "cdi-unresolvable");
  ASSERT_TRUE(cdi.has_value());
  EXPECT_TRUE(absl::StrContains(cdi->fix_talos, "/run/cdi/nvidia.yaml"));
}

TEST(ExplainTest, EveryNvmlReturnName) {
  for (const gpu::NvmlReturnInfo& info : gpu::AllNvmlReturns()) {
    if (info.code == 0) continue;
    SCOPED_TRACE(std::string(info.name));
    absl::string_view short_name = info.name;
    ASSERT_TRUE(absl::ConsumePrefix(&short_name, "NVML_ERROR_"));
    // As printed by C tools, by Go tools (go-nvml's ERROR_ names), in lower case, and alone.
    for (const std::string& text : {absl::StrCat("nvmlInit failed: ", info.name),
                                    absl::StrCat("nvml init failed: ERROR_", short_name),
                                    absl::StrCat("error: ", absl::AsciiStrToLower(info.name), "."),
                                    std::string(short_name)}) {
      std::vector<Explanation> found = Explain(text);
      const Explanation* nvml = nullptr;
      for (const Explanation& e : found) {
        if (absl::StartsWith(e.id, "nvml-") && Detail(e, "nvml_return") == info.name) nvml = &e;
      }
      ASSERT_NE(nvml, nullptr) << text << " -> " << ::testing::PrintToString(Ids(found));
      EXPECT_TRUE(absl::StrContains(nvml->title, info.name));
      EXPECT_EQ(Detail(*nvml, "code"), absl::StrCat(info.code));
      EXPECT_FALSE(nvml->cause.empty());
      EXPECT_EQ(nvml->fix.back(), '.');
    }
  }
}

TEST(ExplainTest, NvmlErrorStringPhrasesAndNoFalseFriends) {
  std::optional<Explanation> e =
      Find(Explain("Failed to initialize NVML: Driver Not Loaded"), "nvml-driver-not-loaded");
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(Find(Explain("Unable to determine the device handle for GPU0000:01:00.0: GPU is "
                           "lost. Reboot the system to recover this GPU"),
                   "nvml-gpu-is-lost")
                  .has_value());
  EXPECT_TRUE(
      Find(Explain("Failed to initialize NVML: Insufficient Permissions"), "nvml-no-permission")
          .has_value());
  // Plain words that happen to be NVML names are not NVML errors inside other text.
  EXPECT_TRUE(Explain("request timeout while the memory was unknown").empty());
  // The same code named twice gives one explanation.
  EXPECT_EQ(Explain("NVML_ERROR_GPU_IS_LOST ERROR_GPU_IS_LOST GPU is lost").size(), 1u);
}

TEST(ExplainTest, XidLineNamesGpuSeverityAndAction) {
  std::vector<Explanation> found = Explain(
      "[ 8123.4] NVRM: Xid (PCI:0000:3b:00): 119, pid='<unknown>', name=<unknown>, Timeout "
      "waiting for RPC from GSP! Expected function 76 (GSP_RM_CONTROL) (0x20800a4c 0x4).");
  ASSERT_EQ(found.size(), 1u);
  const Explanation& e = found[0];
  EXPECT_EQ(e.id, "xid-119");
  EXPECT_TRUE(absl::StrContains(e.title, "GSP_RPC_TIMEOUT")) << e.title;
  EXPECT_TRUE(absl::StrContains(e.title, "0000:3b:00.0")) << e.title;
  EXPECT_TRUE(absl::StrContains(e.cause, "fatal")) << e.cause;
  EXPECT_TRUE(absl::StrContains(e.fix, "nvidia-smi -r")) << e.fix;
  EXPECT_EQ(Detail(e, "bus_id"), "0000:3b:00.0");
  EXPECT_EQ(Detail(e, "severity"), "fatal");
  EXPECT_EQ(Detail(e, "action"), "reset-gpu");
  EXPECT_TRUE(absl::StartsWith(e.matched, "[ 8123.4] NVRM: Xid"));
}

TEST(ExplainTest, ApplicationXidWithMigAndProcess) {
  std::vector<Explanation> found = Explain(
      "NVRM: GPU at PCI:0000:c3:00: GPU-5e0c3b7a-6d21-4f8e-a9c4-1b2d3e4f0a05\n"
      "NVRM: Xid (PCI:0000:c3:00 GPU-I:01 GPU-CI:02): 31, pid=7788, name=python3, Ch "
      "0000000a\n"
      "NVRM: Xid (PCI:0000:c3:00 GPU-I:01 GPU-CI:02): 31, pid=7788, name=python3, Ch "
      "0000000b\n"
      "NVRM: Xid (PCI:0000:c3:00 GPU-I:01 GPU-CI:02): 31, pid=7788, name=python3, Ch "
      "0000000c\n");
  ASSERT_EQ(found.size(), 1u);
  const Explanation& e = found[0];
  EXPECT_EQ(Detail(e, "uuid"), "GPU-5e0c3b7a-6d21-4f8e-a9c4-1b2d3e4f0a05");
  EXPECT_EQ(Detail(e, "gpu_instance"), "1");
  EXPECT_EQ(Detail(e, "compute_instance"), "2");
  EXPECT_EQ(Detail(e, "pid"), "7788");
  EXPECT_EQ(Detail(e, "process"), "python3");
  EXPECT_EQ(Detail(e, "severity"), "application");
  EXPECT_EQ(Detail(e, "occurrences"), "3");
  EXPECT_TRUE(absl::StrContains(e.title, "GPU-5e0c3b7a")) << e.title;
  EXPECT_TRUE(absl::StrContains(e.title, "python3 (pid 7788)")) << e.title;
}

TEST(ExplainTest, XidNumberAlone) {
  for (const char* text : {"xid 79", "XID79", "  Xid 79\n"}) {
    std::vector<Explanation> found = Explain(text);
    ASSERT_EQ(found.size(), 1u) << text;
    EXPECT_EQ(found[0].id, "xid-79");
    EXPECT_EQ(Detail(found[0], "bus_id"), "");
    EXPECT_EQ(Detail(found[0], "action"), "reboot-node");
  }
  EXPECT_EQ(Detail(Explain("xid 999")[0], "mnemonic"), "UNKNOWN_XID");
  EXPECT_TRUE(Explain("xid").empty());
  EXPECT_TRUE(Explain("xid seventy").empty());
}

TEST(ExplainTest, FallenOffBusLogGivesEveryReport) {
  std::vector<Explanation> found = Explain(Fixture("fallen_off_bus.txt"));
  std::vector<std::string> ids = Ids(found);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), "xid-79"), 3) << ::testing::PrintToString(ids);
  EXPECT_TRUE(Find(found, "gpu-probe-failed").has_value());
  EXPECT_TRUE(Find(found, "gpu-not-supported-by-driver").has_value());
}

TEST(ExplainTest, UnknownTextGivesNothing) {
  EXPECT_TRUE(Explain("").empty());
  EXPECT_TRUE(Explain("hello world").empty());
  // The noise corpus holds two things worth explaining: the driver's probe failure and a
  // corrected PCIe error on the GPU's link; its load banners are harmless lines, not listed
  // beside them.
  EXPECT_EQ(Ids(Explain(Fixture("noise.txt"))),
            (std::vector<std::string>{"gpu-probe-failed", "pcie-aer-corrected"}));
  // Alone, a harmless line is explained as such.
  std::vector<Explanation> banner =
      Explain("NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.133.20  Release Build");
  ASSERT_EQ(banner.size(), 1u);
  EXPECT_EQ(banner[0].severity, "info");
}

// Every message the field report (/work/shared/seed) and the docs quote is explained: the
// quoted phrases below, and every `gpulet explain "..."` example the docs and README give (with
// the entry id they name, when they name one).
// The messages the diagnosis issue (18) quotes as ones a new user pastes.
TEST(ExplainTest, MessagesTheDiagnosisIssueQuotesAreExplained) {
  const char* quoted[] = {
      "GPU lockup + DCGM init 250",
      "DCGM init 250",
      "Segmentation fault (core dumped)",
      "exit code 139",
      "is not allowed to modify taints",
      "Error creating: pods \"ollama-0\" is forbidden: violates PodSecurity \"baseline:latest\": "
      "privileged (container \"ollama\" must not set securityContext.privileged=true)",
      "No devices found. Waiting indefinitely.",
      "requires use of the NVIDIA open kernel modules",
      "Unable to determine the device handle for GPU0000:01:00.0: Unknown Error",
      "Failed to initialize NVML",
      "NVRM: API mismatch: the client has the version 570.133.20, but this kernel module has the "
      "version 550.54.15.  Please make sure that this kernel module and all NVIDIA driver "
      "components have the same version.",
  };
  for (const char* text : quoted) {
    EXPECT_FALSE(Explain(text).empty()) << text;
  }
}

TEST(ExplainTest, MessagesQuotedInDocsAndFieldReportAreExplained) {
  const char* quoted[] = {
      // The field report (chapter 04, "The GPU Detour").
      "GPU lockup + DCGM init 250",
      "persistent GPU lockup",
      // docs/troubleshooting.md.
      "is not allowed to modify taints",
      "couldn't communicate with the NVIDIA driver",
      "Driver Not Loaded",
      "RuntimeClass \"nvidia\" not found",
      "violates PodSecurity \"baseline:latest\": hostPath volumes",
      "Incompatible strategy detected auto",
      "ERROR: init 250 result=11",
      "Unable to determine the device handle for GPU ...: Unknown Error",
      "GPU has fallen off the bus",
      "Insufficient nvidia.com/gpu",
  };
  for (const char* text : quoted) {
    EXPECT_FALSE(Explain(text).empty()) << text;
  }

  int commands = 0;
  for (const char* file : {"docs/troubleshooting.md", "docs/talos.md", "docs/alerting.md",
                           "docs/metrics.md", "README.md"}) {
    std::string doc = ReadFile(std::string(GPULET_SOURCE_DIR) + "/" + file);
    ASSERT_FALSE(doc.empty()) << file;
    // Markdown wraps long commands; whitespace runs mean one space.
    std::string flat;
    for (char c : doc) {
      bool space = absl::ascii_isspace(static_cast<unsigned char>(c));
      if (space && !flat.empty() && flat.back() == ' ') continue;
      flat += space ? ' ' : c;
    }
    const std::string kCommand = "gpulet explain ";
    for (size_t at = flat.find(kCommand); at != std::string::npos;
         at = flat.find(kCommand, at + 1)) {
      size_t start = at + kCommand.size();
      if (start >= flat.size()) break;
      char quote = flat[start];
      std::string message;
      size_t end;
      if (quote == '"' || quote == '\'') {
        end = flat.find(quote, start + 1);
        if (end == std::string::npos) continue;
        message = flat.substr(start + 1, end - start - 1);
      } else {
        end = flat.find_first_of(" `", start);
        message = flat.substr(start, end - start);
      }
      if (message.empty() || message == "-" || message.front() == '<' || message.front() == '[' ||
          message.front() == '-') {
        continue;  // "<message>", "[--json]", "-" (standard input): not a message
      }
      ++commands;
      std::vector<Explanation> found = Explain(message);
      EXPECT_FALSE(found.empty()) << file << ": " << message;
      // "(explain: `id`)" right after the command names the entry it answers with.
      size_t named = flat.find("(explain: `", end);
      if (named != std::string::npos && named - end < 40) {
        size_t id_start = named + std::string("(explain: `").size();
        std::string id = flat.substr(id_start, flat.find('`', id_start) - id_start);
        EXPECT_TRUE(Find(found, id).has_value())
            << file << ": " << message << " should give " << id << ", got "
            << ::testing::PrintToString(Ids(found));
      }
    }
  }
  EXPECT_GE(commands, 10);
}

// `kubectl describe pod` output: the Events table's columns and wrapped messages.
TEST(ExplainTest, KubectlDescribePodEventsNameTheCause) {
  const std::string describe =
      "Name:             ollama-0\n"
      "Namespace:        ai\n"
      "Node:             talos-08/10.0.0.8\n"
      "Status:           Pending\n"
      "Events:\n"
      "  Type     Reason                  Age                   From               Message\n"
      "  ----     ------                  ----                  ----               -------\n"
      "  Normal   Scheduled               2m11s                 default-scheduler  "
      "Successfully assigned ai/ollama-0 to talos-08\n"
      "  Warning  FailedCreatePodSandBox  12s (x10 over 2m11s)  kubelet            Failed to "
      "create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox runtime: no "
      "runtime for \"nvidia\" is configured\n";
  ExplainResult r = ExplainText(describe);
  ASSERT_EQ(r.found.size(), 1u) << ::testing::PrintToString(Ids(r.found));
  EXPECT_EQ(r.found[0].id, "containerd-nvidia-runtime-missing");
  EXPECT_EQ(r.found[0].line, 9u);
  EXPECT_TRUE(absl::StrContains(r.found[0].matched, "FailedCreatePodSandBox"));
  EXPECT_EQ(r.lines, 9u);
}

// A pasted log: every kind once, with the line it was first seen on, worst first.
TEST(ExplainTest, LogIsReportedOncePerKindWorstFirstWithLineNumbers) {
  const std::string log =
      "time=2025-01-29T10:00:00Z level=INFO msg=\"starting\"\n"              // 1
      "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB\n"      // 2: warning
      "Warning  FailedScheduling  0/3 nodes are available: 3 Insufficient "  // 3: error
      "nvidia.com/gpu.\n"
      "RuntimeError: CUDA out of memory. Tried to allocate 40.00 MiB\n"  // 4: repeat
      "[ 1097.650222] NVRM: GPU 0000:04:01.0: RmInitAdapter failed! (0x11:0x45:2525)\n"  // 5
      "unrelated\n";                                                                     // 6
  ExplainResult r = ExplainText(log);
  ASSERT_EQ(Ids(r.found), (std::vector<std::string>{"nvrm-rm-init-adapter-failed",
                                                    "no-gpu-resource", "cuda-out-of-memory"}));
  EXPECT_EQ(r.found[0].line, 5u);
  EXPECT_EQ(r.found[0].severity, "critical");
  EXPECT_EQ(r.found[1].line, 3u);
  EXPECT_EQ(r.found[1].severity, "error");
  EXPECT_EQ(r.found[2].line, 2u);  // the first of the two lines
  EXPECT_EQ(r.found[2].severity, "warning");
  EXPECT_EQ(r.lines, 6u);
}

// A message the kernel wraps over several lines is found across them (a window of lines),
// reported on the line that holds its keyword.
TEST(ExplainTest, MultiLineKernelMessage) {
  ExplainResult r = ExplainText(
      "[    1.0] usb 1-1: new device\n"
      "[ 7386.259769] NVRM: API mismatch: the client has the version 515.48.07, but\n"
      "               NVRM: this kernel module has the version 510.73.05.  Please\n"
      "               NVRM: make sure that this kernel module and all NVIDIA driver\n");
  ASSERT_EQ(Ids(r.found), std::vector<std::string>{"nvrm-api-mismatch"});
  EXPECT_EQ(r.found[0].line, 2u);
  // Too far apart: not one message.
  EXPECT_TRUE(ExplainText("NVRM: API mismatch: the client\na\nb\nc\nd\nhas the version 1, but "
                          "this kernel module has the version 2")
                  .found.empty());
}

// Chunks split anywhere (inside a line, inside a CRLF) give the same result as the whole.
TEST(ExplainTest, FeedInChunksOfAnySize) {
  const std::string log =
      "a\r\nError: setting up CDI devices: unresolvable CDI devices nvidia.com/gpu=all\r\n"
      "b\nmodprobe: FATAL: Module nvidia not found in directory /lib/modules/6.1\n";
  std::vector<std::string> whole = Ids(Explain(log));
  ASSERT_EQ(whole.size(), 2u);
  for (size_t step : {1, 2, 3, 7, 64}) {
    LogExplainer e;
    for (size_t i = 0; i < log.size(); i += step) e.Feed(absl::string_view(log).substr(i, step));
    ExplainResult r = e.Finish();
    EXPECT_EQ(Ids(r.found), whole) << step;
    EXPECT_EQ(r.lines, 4u);
  }
}

TEST(ExplainTest, BinaryGarbageAndInvalidUtf8) {
  std::string garbage;
  uint32_t x = 12345;
  for (int i = 0; i < (1 << 20); ++i) {
    x = x * 1103515245 + 12345;
    garbage += static_cast<char>(x >> 16);
  }
  ExplainResult r = ExplainText(garbage);
  EXPECT_TRUE(r.found.empty()) << ::testing::PrintToString(Ids(r.found));
  // Invalid UTF-8 around a real message does not hide it.
  std::string text = "\xff\xfe\xc3(\x80 Failed to initialize NVML: Unknown Error \xe2\x28\xa1\n";
  EXPECT_TRUE(Find(Explain(text), "nvml-unknown-error-in-container").has_value());
  // NUL bytes are just bytes.
  std::string with_nul("no CUDA-capable device\0 is detected", 35);
  with_nul += "\nno CUDA-capable device is detected\n";
  EXPECT_EQ(ExplainText(with_nul).found.at(0).line, 2u);
}

TEST(ExplainTest, LongLineIsMatchedOnItsStartAndCounted) {
  std::string line(1 << 20, 'x');  // a 1 MiB line
  std::string log = "Insufficient nvidia.com/gpu " + line +
                    " no CUDA-capable device is detected\n"
                    "second line\n";
  ExplainResult r = ExplainText(log);
  EXPECT_EQ(Ids(r.found), std::vector<std::string>{"no-gpu-resource"});  // the tail is not read
  EXPECT_EQ(r.truncated_lines, 1u);
  EXPECT_EQ(r.lines, 2u);
}

// 100 MB of log (repeated real-looking lines, near misses and a real message at the end) is
// read in bounded memory and in seconds: the scanner is one pass per line, not per pattern.
// A long paste is read to its end, line by line across Feed calls, and a near miss on every
// fifth line finds nothing. How fast: bench/explain_bench.cc (100 MiB, against a floor).
TEST(ExplainTest, ALongPasteIsReadToItsEndAndOnlyTheRealCauseIsFound) {
  const std::string block =
      "Jun 11 10:00:00 talos-07 kernel: NVRM: loading NVIDIA UNIX x86_64 Kernel Module\n"
      "I0611 10:00:01.000000 1 main.go:132] Starting FS watcher for /var/lib/kubelet\n"
      "  Warning  FailedScheduling  0/3 nodes are available: 3 node(s) didn't match\n"
      "NVRM: API mismatch: the client has the version\n"  // a near miss: no rest
      "time=2025-06-11T10:00:02Z level=INFO source=gpu.go:217 msg=\"looking for GPUs\"\n";
  LogExplainer e;
  size_t fed = 0;
  size_t blocks = 0;
  while (fed < (2u << 20)) {
    // Split each block at a different place, so lines span calls.
    size_t cut = blocks++ % block.size();
    e.Feed(absl::string_view(block).substr(0, cut));
    e.Feed(absl::string_view(block).substr(cut));
    fed += block.size();
  }
  e.Feed("Incompatible strategy detected auto\n");
  ExplainResult r = e.Finish();
  EXPECT_EQ(Ids(r.found), std::vector<std::string>{"device-plugin-incompatible-strategy"});
  EXPECT_EQ(r.lines, blocks * 5 + 1);
  EXPECT_EQ(r.truncated_lines, 0u);
}

// --- the command ----------------------------------------------------------------------------

// Runs gpulet with standard input read from `input` (no shell involved).
int RunWithStdin(const std::vector<std::string>& args, const std::string& input, std::string* out) {
  std::filesystem::path dir = std::filesystem::temp_directory_path();
  std::string in_path = (dir / absl::StrCat("gpulet-explain-in-", getpid())).string();
  std::string out_path = (dir / absl::StrCat("gpulet-explain-out-", getpid())).string();
  {
    std::ofstream f(in_path);
    f << input;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, in_path.c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  std::vector<std::string> argv = {gpulet::testing::GpuletBinary()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, cargv[0], &actions, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  *out = ReadFile(out_path);
  std::filesystem::remove(in_path);
  std::filesystem::remove(out_path);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(ExplainCommandTest, JoinsArgumentsAndExitsZeroOnMatch) {
  testing::RunResult r =
      testing::RunProgram({gpulet::testing::GpuletBinary(), "explain", "Failed", "to", "initialize",
                           "NVML:", "Driver/library", "version", "mismatch"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "different driver versions")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "Fix:")) << r.out;
}

TEST(ExplainCommandTest, UnknownTextExitsOneAndSuggestsDoctor) {
  testing::RunResult r = testing::RunProgram(
      {gpulet::testing::GpuletBinary(), "explain", "the", "printer", "is", "on", "fire"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.out, "does not recognise")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "gpulet doctor")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "To have it explained, report it")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "src/doctor/explain/")) << r.out;
}

TEST(ExplainCommandTest, NoTextIsAUsageError) {
  testing::RunResult r = testing::RunProgram({gpulet::testing::GpuletBinary(), "explain"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(r.err, "gpulet explain")) << r.err;
}

TEST(ExplainCommandTest, JsonOutput) {
  testing::RunResult r =
      testing::RunProgram({gpulet::testing::GpuletBinary(), "explain", "--json",
                           "NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus."});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["recognised"], true);
  ASSERT_EQ(j["explanations"].size(), 1u);
  EXPECT_EQ(j["explanations"][0]["id"], "xid-79");
  EXPECT_EQ(j["explanations"][0]["details"]["bus_id"], "0000:01:00.0");
  EXPECT_EQ(j["explanations"][0]["details"]["action"], "reboot-node");

  testing::RunResult none =
      testing::RunProgram({gpulet::testing::GpuletBinary(), "explain", "--json", "nothing"});
  EXPECT_EQ(none.exit_code, 1);
  nlohmann::json n = nlohmann::json::parse(none.out, nullptr, false);
  ASSERT_FALSE(n.is_discarded()) << none.out;
  EXPECT_EQ(n["recognised"], false);
  EXPECT_TRUE(n["explanations"].empty());
}

// --check runs the doctor on the node (here a fixture root with /dev/nvidia-uvm removed) and
// says which of the message's causes the node's checks point at.
TEST(ExplainCommandTest, CheckSaysWhichCauseTheNodeShows) {
  testing::ScratchDir dir;
  std::string root = dir.path() + "/root";
  std::filesystem::copy(
      std::string(GPULET_SOURCE_DIR) + "/tests/fixtures/hostroots/talos-1.13", root,
      std::filesystem::copy_options::recursive | std::filesystem::copy_options::copy_symlinks);
  const std::string text =
      "RuntimeError: CUDA unknown error - this may be due to an incorrectly set up environment, "
      "e.g. changing env variable CUDA_VISIBLE_DEVICES after program start. Setting the "
      "available devices to be zero.";
  testing::RunResult healthy = testing::RunProgram(
      {gpulet::testing::GpuletBinary(), "--host-root", root, "explain", "--check", "--json", text});
  EXPECT_EQ(healthy.exit_code, 0) << healthy.err;
  nlohmann::json h = nlohmann::json::parse(healthy.out, nullptr, false);
  ASSERT_FALSE(h.is_discarded()) << healthy.out;
  ASSERT_FALSE(h["explanations"].empty());
  EXPECT_EQ(h["explanations"][0]["id"], "uvm-torch-cuda-unknown-error");
  EXPECT_THAT(h["explanations"][0]["on_this_node"]["summary"].get<std::string>(),
              ::testing::HasSubstr("rule out causes 2, 3; left: 1"));

  std::filesystem::remove(root + "/dev/nvidia-uvm");
  testing::RunResult r = testing::RunProgram(
      {gpulet::testing::GpuletBinary(), "--host-root", root, "explain", "--check", "--json", text});
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  const nlohmann::json& here = j["explanations"][0]["on_this_node"];
  EXPECT_EQ(here["likely_candidate"], 2) << here.dump();
  EXPECT_THAT(here["summary"].get<std::string>(),
              ::testing::HasSubstr("cause 2 is likely here: driver.uvm fail"));

  testing::RunResult human = testing::RunProgram(
      {gpulet::testing::GpuletBinary(), "--host-root", root, "explain", "--check", text});
  EXPECT_THAT(human.out, ::testing::HasSubstr("Here:    cause 2 is likely here"));
  EXPECT_THAT(human.out, ::testing::HasSubstr("2) "));
  // Without --check nothing is looked at on the node.
  testing::RunResult plain =
      testing::RunProgram({gpulet::testing::GpuletBinary(), "explain", "--json", text});
  EXPECT_FALSE(nlohmann::json::parse(plain.out)["explanations"][0].contains("on_this_node"));
}

TEST(ExplainCommandTest, ReadsStandardInputForDash) {
  std::string out;
  int rc = RunWithStdin({"explain", "-"}, Fixture("kmsg_records.txt"), &out);
  EXPECT_EQ(rc, 0) << out;
  // kmsg_records.txt is raw /dev/kmsg output (`cat /dev/kmsg | gpulet explain -`): records
  // are unescaped, so the multi-line fallen-off-the-bus message is found too.
  EXPECT_TRUE(absl::StrContains(out, "XID 119 (GSP_RPC_TIMEOUT) on GPU 0000:18:00.0")) << out;
  EXPECT_TRUE(absl::StrContains(out, "GPU 0000:18:00.0 (GPU-c1a7e0f2")) << out;
  EXPECT_TRUE(absl::StrContains(out, "GPU 0000:5d:00.0 has fallen off the bus")) << out;

  rc = RunWithStdin({"explain", "-", "--json"}, "xid 48\n", &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "\"xid-48\"")) << out;
}

TEST(ExplainCommandTest, PastedLogReportsLinesWorstFirst) {
  std::string out;
  int rc = RunWithStdin(
      {"explain", "-"},
      "Events:\n"
      "  Type     Reason            Age   From               Message\n"
      "  ----     ------            ----  ----               -------\n"
      "  Warning  FailedScheduling  10s   default-scheduler  0/1 nodes are available: 1 "
      "Insufficient nvidia.com/gpu.\n"
      "[   21.238204] NVRM: osInitNvMapping: *** Cannot attach gpu\n",
      &out);
  EXPECT_EQ(rc, 0) << out;
  size_t worst = out.find("map the GPU's memory");
  size_t next = out.find("no node with a free nvidia.com/gpu");
  ASSERT_NE(worst, std::string::npos) << out;
  ASSERT_NE(next, std::string::npos) << out;
  EXPECT_LT(worst, next) << out;
  EXPECT_TRUE(absl::StrContains(out, "line 5:")) << out;
  EXPECT_TRUE(absl::StrContains(out, "line 4:")) << out;
  EXPECT_TRUE(absl::StrContains(out, "2 kinds of message recognised in 5 line(s)")) << out;

  rc = RunWithStdin({"explain", "--json", "-"}, "x\nno CUDA-capable device is detected\n", &out);
  EXPECT_EQ(rc, 0) << out;
  nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  EXPECT_EQ(j["lines"], 2);
  EXPECT_EQ(j["explanations"][0]["id"], "cuda-no-device");
  EXPECT_EQ(j["explanations"][0]["line"], 2);
  EXPECT_EQ(j["explanations"][0]["severity"], "error");
  EXPECT_TRUE(j["explanations"][0]["source"].get<std::string>().starts_with("https://"));
}

TEST(ExplainCommandTest, UnrecognisedOrGarbageStdinExitsOne) {
  std::string out;
  std::string garbage;
  for (int i = 0; i < 200000; ++i) garbage += static_cast<char>((i * 7919) % 251 + 1);
  EXPECT_EQ(RunWithStdin({"explain", "-"}, garbage, &out), 1) << out;
  EXPECT_TRUE(absl::StrContains(out, "does not recognise")) << out;
  EXPECT_EQ(RunWithStdin({"explain", "-"}, "all is well\nnothing to see\n", &out), 1);
  EXPECT_EQ(RunWithStdin({"explain", "-"}, " \n\t\n", &out), 2);  // nothing to explain
}

TEST(ExplainCommandTest, LongLineIsCappedAndSaysSo) {
  std::string out;
  std::string log = "Insufficient nvidia.com/gpu " + std::string(1 << 20, 'y') + "\n";
  EXPECT_EQ(RunWithStdin({"explain", "-"}, log, &out), 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "1 line(s) longer than 16 KiB")) << out;
}

}  // namespace
}  // namespace gpulet::doctor
