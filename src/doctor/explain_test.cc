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
#include "absl/strings/strip.h"
#include "gpu/nvml_errors.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/subprocess.h"

extern char** environ;

namespace gpulet {
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

TEST(ExplainTableTest, EntriesAreWellFormedAndReachable) {
  std::set<std::string> ids;
  for (const ExplainEntry& entry : ExplainEntries()) {
    SCOPED_TRACE(std::string(entry.id));
    EXPECT_TRUE(ids.insert(std::string(entry.id)).second) << "duplicate id";
    ASSERT_FALSE(entry.patterns.empty());
    for (absl::string_view field : {entry.title, entry.cause, entry.fix, entry.source}) {
      EXPECT_FALSE(field.empty());
    }
    EXPECT_EQ(entry.cause.back(), '.');
    EXPECT_EQ(entry.fix.back(), '.');
    for (absl::string_view pattern : entry.patterns) {
      // Every pattern, taken literally (wildcards as themselves), selects its own entry.
      std::vector<Explanation> found = Explain(pattern);
      EXPECT_TRUE(Find(found, entry.id).has_value()) << pattern;
    }
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
      {"Capacity:\n  cpu:                16\n  nvidia.com/gpu:     0\n",
       "no-gpu-resource",
       {"nvidia.com/gpu.present=true"}},
      {"0/3 nodes are available: 3 Insufficient nvidia.com/gpu.", "no-gpu-resource", {}},
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
    for (const char* mention : c.fix_mentions) {
      EXPECT_TRUE(absl::StrContains(e->fix, mention)) << mention << " not in: " << e->fix;
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
  EXPECT_TRUE(absl::StrContains(smi->fix,
                                "machine.kernel.modules: [{name: nvidia}, {name: nvidia_uvm}, "
                                "{name: nvidia_drm}, {name: nvidia_modeset}]"));
  std::optional<Explanation> cdi = Find(Explain("unresolvable CDI devices"), "cdi-unresolvable");
  ASSERT_TRUE(cdi.has_value());
  EXPECT_TRUE(absl::StrContains(cdi->fix, "/run/cdi/nvidia.yaml"));
}

TEST(ExplainTest, EveryNvmlReturnName) {
  for (const NvmlReturnInfo& info : AllNvmlReturns()) {
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
  // The only thing in the noise corpus worth explaining is the driver's probe failure.
  EXPECT_EQ(Ids(Explain(Fixture("noise.txt"))), std::vector<std::string>{"gpu-probe-failed"});
}

// --- the command ----------------------------------------------------------------------------

std::string Gpulet() { return std::string(GPULET_BINARY_DIR) + "/gpulet"; }

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
  std::vector<std::string> argv = {Gpulet()};
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
  testing::RunResult r = testing::RunProgram({Gpulet(), "explain", "Failed", "to", "initialize",
                                              "NVML:", "Driver/library", "version", "mismatch"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "different driver versions")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "Fix:")) << r.out;
}

TEST(ExplainCommandTest, UnknownTextExitsOneAndSuggestsDoctor) {
  testing::RunResult r =
      testing::RunProgram({Gpulet(), "explain", "the", "printer", "is", "on", "fire"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.out, "does not recognise")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "gpulet doctor")) << r.out;
}

TEST(ExplainCommandTest, NoTextIsAUsageError) {
  testing::RunResult r = testing::RunProgram({Gpulet(), "explain"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(r.err, "gpulet explain")) << r.err;
}

TEST(ExplainCommandTest, JsonOutput) {
  testing::RunResult r =
      testing::RunProgram({Gpulet(), "explain", "--json",
                           "NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus."});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["recognised"], true);
  ASSERT_EQ(j["explanations"].size(), 1u);
  EXPECT_EQ(j["explanations"][0]["id"], "xid-79");
  EXPECT_EQ(j["explanations"][0]["details"]["bus_id"], "0000:01:00.0");
  EXPECT_EQ(j["explanations"][0]["details"]["action"], "reboot-node");

  testing::RunResult none = testing::RunProgram({Gpulet(), "explain", "--json", "nothing"});
  EXPECT_EQ(none.exit_code, 1);
  nlohmann::json n = nlohmann::json::parse(none.out, nullptr, false);
  ASSERT_FALSE(n.is_discarded()) << none.out;
  EXPECT_EQ(n["recognised"], false);
  EXPECT_TRUE(n["explanations"].empty());
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

}  // namespace
}  // namespace gpulet
