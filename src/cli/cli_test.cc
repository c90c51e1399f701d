// The gpulet binary end to end: command table, list against the simulator and against
// hosts without NVML.
#include <elf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cli/command.h"
#include "gtest/gtest.h"
#include "sim/state.h"
#include "testing/files.h"
#include "testing/homelab.h"
#include "testing/subprocess.h"

namespace gpulet::cli {
namespace {

using ::gpulet::testing::RunProgram;
namespace fs = std::filesystem;

TEST(CliTest, SuggestsTheClosestCommand) {
  EXPECT_EQ(SuggestCommand("lsit"), "list");
  EXPECT_EQ(SuggestCommand("serv"), "serve");
  EXPECT_EQ(SuggestCommand("xyzzy-nothing"), "");
  auto r = RunProgram({gpulet::testing::GpuletBinary(), "lsit"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("Did you mean 'list'?"), std::string::npos) << r.err;
}

TEST(CliTest, VersionMatchesBuild) {
  auto r = RunProgram({gpulet::testing::GpuletBinary(), "version"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find(std::string("gpulet ") + GPULET_VERSION), std::string::npos);
}

TEST(CliTest, HelpListsEveryCommand) {
  auto r = RunProgram({gpulet::testing::GpuletBinary(), "help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const Command& c : Commands()) {
    EXPECT_NE(r.out.find(c.name), std::string::npos) << c.name;
  }
}

// The deadline flags take seconds or a duration, finite and in range; anything else is a
// usage error naming the flag, the value and the range, before any work starts.
TEST(CliTest, DeadlineFlagsAreValidated) {
  struct Case {
    const char* flag;
    const char* value;
    const char* message;  // "" = accepted
  } cases[] = {
      {"--probe-timeout", "30s", ""},
      {"--probe-timeout", "0.5", ""},
      {"--call-timeout", "500ms", ""},
      {"--probe-timeout", "nan", "not a finite number of seconds; give 0.1 to 600 seconds"},
      {"--probe-timeout", "inf", "not a finite number"},
      {"--probe-timeout", "-inf", "not a finite number"},
      {"--probe-timeout", "-1", "out of range"},
      {"--probe-timeout", "0", "out of range"},
      {"--probe-timeout", "1e9", "out of range"},
      {"--call-timeout", "2h", "out of range; give 0.01 to 600 seconds"},
      {"--call-timeout", "ten", "'ten' is not a number of seconds or a duration"},
  };
  for (const Case& c : cases) {
    auto r = RunProgram({gpulet::testing::GpuletBinary(), "--simulate", "homelab", "--sim-state",
                         "/tmp/gpulet-cli-test-none.json", c.flag, c.value, "list"});
    const std::string what = std::string(c.flag) + " " + c.value;
    if (std::string(c.message).empty()) {
      EXPECT_EQ(r.exit_code, 0) << what << ": " << r.err;
    } else {
      EXPECT_EQ(r.exit_code, 2) << what;
      EXPECT_NE(r.err.find(c.flag), std::string::npos) << what << ": " << r.err;
      EXPECT_NE(r.err.find(c.message), std::string::npos) << what << ": " << r.err;
    }
  }
}

TEST(CliTest, ListHomelabShowsBothGpus) {
  auto r = RunProgram({gpulet::testing::GpuletBinary(), "--simulate", "homelab", "--sim-state",
                       "/tmp/gpulet-cli-test-none.json", "list"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("NVIDIA GeForce RTX 3080  10.0 GiB  Ampere"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NVIDIA GeForce RTX 5090  31.8 GiB  Blackwell"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Driver 570.133.20, CUDA 12.8"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("fault-injection state"), std::string::npos);
}

// docs/mig.md: `gpulet list` shows each MIG device as a row under its GPU, as `nvidia-smi -L`
// does (GPU index:MIG index, profile, GPU and compute instance ids, memory, MIG UUID), and
// `--json` adds `mig_enabled` and `mig_devices`.
TEST(CliTest, ListH200MigShowsEachMigDeviceUnderItsGpu) {
  auto r = RunProgram({gpulet::testing::GpuletBinary(), "--simulate", "h200-mig", "--sim-state",
                       "/tmp/gpulet-cli-test-none.json", "list"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> rows;
  for (size_t start = 0, end; start < r.out.size(); start = end + 1) {
    end = r.out.find('\n', start);
    if (end == std::string::npos) end = r.out.size();
    rows.push_back(r.out.substr(start, end - start));
  }
  ASSERT_GE(rows.size(), 6u) << r.out;
  EXPECT_EQ(rows[1].rfind("0    NVIDIA H200 ", 0), 0u) << r.out;
  const char* const kMig[][3] = {
      {"0:0", "MIG 3g.71gb (GI 1, CI 0)  70.0 GiB", "MIG-c1a7e0f2-9b34-5d58-8e61-2f0b7a3d0201"},
      {"0:1", "MIG 2g.35gb (GI 2, CI 0)  35.0 GiB", "MIG-c1a7e0f2-9b34-5d58-8e61-2f0b7a3d0202"},
      {"0:2", "MIG 1g.18gb (GI 3, CI 0)  17.5 GiB", "MIG-c1a7e0f2-9b34-5d58-8e61-2f0b7a3d0203"},
      {"0:3", "MIG 1g.18gb (GI 4, CI 0)  17.5 GiB", "MIG-c1a7e0f2-9b34-5d58-8e61-2f0b7a3d0204"}};
  for (size_t i = 0; i < 4; ++i) {
    const std::string& row = rows[2 + i];
    EXPECT_EQ(row.rfind(std::string(kMig[i][0]) + " ", 0), 0u) << row;
    EXPECT_NE(row.find(kMig[i][1]), std::string::npos) << row;
    EXPECT_EQ(row.substr(row.find_last_not_of(' ') + 1 - std::string(kMig[i][2]).size()),
              kMig[i][2])
        << row;
  }
  r = RunProgram({gpulet::testing::GpuletBinary(), "--simulate", "h200-mig", "--sim-state",
                  "/tmp/gpulet-cli-test-none.json", "list", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"mig_enabled\": true"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"mig_devices\": ["), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"profile\": \"3g.71gb\""), std::string::npos) << r.out;
}

TEST(CliTest, ListJsonDgx8HasEightHoppersOnTwoNumaNodes) {
  auto r = RunProgram({gpulet::testing::GpuletBinary(), "--simulate", "dgx8", "--sim-state",
                       "/tmp/gpulet-cli-test-none.json", "list", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  size_t count = 0, pos = 0;
  while ((pos = r.out.find("\"architecture\": \"Hopper\"", pos)) != std::string::npos) {
    ++count;
    ++pos;
  }
  EXPECT_EQ(count, 8u);
  EXPECT_NE(r.out.find("\"numa_node\": 1"), std::string::npos);
}

// `gpulet sim mig` edits a GPU's MIG layout in the state file, starting from the fixture's, and
// refuses what the product's profile table does not allow with the reason and the exit code
// (2: a malformed request, 1: refused by the current layout).
TEST(CliTest, SimMigVerbsEditTheLayout) {
  testing::ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string state = dir.path() + "/state.json";
  auto sim = [&](const char* fixture, std::vector<std::string> args) {
    std::vector<std::string> argv = {
        gpulet::testing::GpuletBinary(), "--simulate", fixture, "--sim-state", state, "sim"};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProgram(argv);
  };
  auto r = sim("h200-mig", {"mig", "0", "create", "1g.18gb"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("GPU 0 (NVIDIA H200): no room for 1g.18gb"), std::string::npos) << r.err;
  r = sim("h200-mig", {"mig", "0", "create", "1g.10gb"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("\"1g.10gb\" is not a MIG profile of H200 141GB (profiles: 1g.18gb, "
                       "1g.18gb+me, 1g.35gb, 2g.35gb, 3g.71gb, 4g.71gb, 7g.141gb)"),
            std::string::npos)
      << r.err;
  r = sim("h200-mig", {"mig", "0", "destroy", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = sim("h200-mig", {"mig", "0", "create", "3g.71gb", "--placement", "2"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("placement 2 is not one 3g.71gb takes on H200 141GB (it starts at 0, 4)"),
            std::string::npos)
      << r.err;
  r = sim("h200-mig", {"mig", "GPU-c1a7e0f2-9b34-4d58-8e61-2f0b7a3d0200", "create", "1g.35gb",
                       "--placement", "6"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = sim("h200-mig", {"mig", "0", "destroy", "9"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no GPU instance 9 (existing: 1, 2, 3, 4)"), std::string::npos) << r.err;
  r = sim("h200-mig", {"mig", "0", "disable"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot disable MIG while 4 GPU instances exist"), std::string::npos)
      << r.err;
  r = sim("h200-mig", {"show"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  sim::SimState parsed;
  std::string error;
  ASSERT_TRUE(sim::StateFromJson(r.out, &parsed, &error)) << error << "\n" << r.out;
  // The UUID-keyed edit took the layout over from the index key.
  EXPECT_FALSE(parsed.gpus.count("0") != 0 && parsed.gpus.at("0").mig.has_value());
  const sim::GpuState& gpu = parsed.gpus.at("GPU-c1a7e0f2-9b34-4d58-8e61-2f0b7a3d0200");
  ASSERT_TRUE(gpu.mig.has_value());
  EXPECT_TRUE(gpu.mig->enabled);
  ASSERT_EQ(gpu.mig->instances.size(), 4u);
  EXPECT_EQ(gpu.mig->instances.back().profile, "1g.35gb");
  EXPECT_EQ(gpu.mig->instances.back().gpu_instance, 1u);  // the lowest free id
  EXPECT_EQ(gpu.mig->instances.back().placement, 6u);

  r = sim("h200-mig", {"mig", "0", "layout", "1g.18gb,1g.18gb,2g.35gb,3g.71gb"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("3g.71gb (GPU instance 1, placement 4"), std::string::npos) << r.out;
  r = sim("h200-mig", {"mig", "0", "layout", "none"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = sim("h200-mig", {"mig", "0", "disable"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = sim("h200-mig", {"mig", "0", "create", "1g.18gb"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("MIG mode is disabled; run `gpulet --simulate h200-mig sim mig 0 enable`"),
            std::string::npos)
      << r.err;

  r = sim("homelab", {"mig", "1", "enable"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("GPU 1 (NVIDIA GeForce RTX 5090): not MIG-capable"), std::string::npos)
      << r.err;
  r = sim("dgx8-mig", {"mig", "8", "enable"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("fixture dgx8-mig has no GPU '8'"), std::string::npos) << r.err;

  r = sim("dgx8-mig", {"xid", "0", "31", "--gpu-instance", "3", "--compute-instance", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = sim("dgx8-mig", {"xid", "0", "43", "--compute-instance", "0"});
  EXPECT_EQ(r.exit_code, 2);
  r = sim("dgx8-mig", {"process", "2", "4242", "ollama", "9000", "--gpu-instance", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = sim("dgx8-mig", {"show"});
  ASSERT_TRUE(sim::StateFromJson(r.out, &parsed, &error)) << error << "\n" << r.out;
  ASSERT_EQ(parsed.gpus.at("2").processes->size(), 1u);
  EXPECT_EQ((*parsed.gpus.at("2").processes)[0].gpu_instance, 1u);
  ASSERT_EQ(parsed.gpus.at("0").xids.size(), 1u);
  EXPECT_EQ(parsed.gpus.at("0").xids[0].gpu_instance, 3u);
  EXPECT_EQ(parsed.gpus.at("0").xids[0].compute_instance, 0u);
}

// `gpulet sim load --gpm` and `gpulet sim nvlink` write what the state file documents, and
// reject bad names, values and links as usage errors before touching the file.
TEST(CliTest, SimGpmAndNvLinkVerbsEditTheStateFile) {
  testing::ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string state = dir.path() + "/state.json";
  auto sim = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {
        gpulet::testing::GpuletBinary(), "--simulate", "dgx8", "--sim-state", state, "sim"};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProgram(argv);
  };
  auto r = sim({"load", "2", "--gpm", "any_tensor_util=50", "--gpm", "pcie_tx_mib_s=4096.5"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = sim({"nvlink", "2", "3", "down", "--crc-flit", "12", "--replay", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("NVLink 3 is down"), std::string::npos) << r.out;
  r = sim({"nvlink", "2", "5", "down"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = sim({"nvlink", "2", "5", "up"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = sim({"show"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  sim::SimState parsed;
  std::string error;
  ASSERT_TRUE(sim::StateFromJson(r.out, &parsed, &error)) << error << "\n" << r.out;
  const sim::GpuState& gpu = parsed.gpus.at("2");
  EXPECT_EQ(gpu.load.gpm,
            (std::map<std::string, double>{{"any_tensor_util", 50}, {"pcie_tx_mib_s", 4096.5}}));
  EXPECT_EQ(gpu.nvlink.down, std::set<unsigned>{3});  // 5 went down and back up
  const sim::NvLinkCounters expected = {4, std::nullopt, 12, std::nullopt};  // replay, crc_flit
  EXPECT_EQ(gpu.nvlink.errors.at(3), expected);

  const struct {
    std::vector<std::string> args;
    const char* error;
  } bad[] = {
      {{"load", "2", "--gpm", "sm_util=120"}, "sm_util is a percentage from 0 to 100"},
      {{"load", "2", "--gpm", "pcie_rx_mib_s=-1"}, "is a rate in MiB/s"},
      {{"load", "2", "--gpm", "tensor=5"}, "NAME one of graphics_util"},
      {{"load", "2", "--gpm", "sm_util"}, "expected NAME=VALUE"},
      {{"nvlink", "2", "18", "down"}, "link"},
      {{"nvlink", "2", "3", "sideways"}, "state"},
      {{"nvlink", "2", "3", "down", "--crc-flit", "-1"}, "crc-flit"},
  };
  for (const auto& c : bad) {
    r = sim(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args[c.args.size() - 1];
    EXPECT_NE(r.err.find(c.error), std::string::npos) << r.err;
  }
}

// `gpulet sim reboot` brings the cards back and, with --host-root, gives the node a new boot
// id there; a card from the fails-after-reboot script is due to be lost again, and one from
// returns-elsewhere is listed on its new minor number.
TEST(CliTest, SimRebootAndTheCardThatReturnsElsewhere) {
  testing::ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string state = dir.path() + "/state.json";
  const std::string root = dir.path() + "/root";
  auto gpulet = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {gpulet::testing::GpuletBinary(), "--simulate", "homelab",
                                     "--sim-state", state};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProgram(argv);
  };
  auto r = gpulet({"sim", "script", "fails-after-reboot", "1", "--pace", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = gpulet({"--host-root", root, "sim", "reboot"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("node rebooted (boot 1, boot id "), std::string::npos) << r.out;
  std::ifstream boot_id(root + "/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(boot_id, id);
  EXPECT_EQ(id.size(), 36u) << id;
  r = gpulet({"sim", "show"});
  sim::SimState parsed;
  std::string error;
  ASSERT_TRUE(sim::StateFromJson(r.out, &parsed, &error)) << error << "\n" << r.out;
  EXPECT_EQ(parsed.boots, 1u);
  EXPECT_FALSE(parsed.gpus.at("1").lost);  // back for now, and lost again 30 s after the reboot
  ASSERT_TRUE(parsed.gpus.at("1").lost_at.has_value());
  EXPECT_NEAR(*parsed.gpus.at("1").lost_at - sim::WallSeconds(), 30, 5);
  EXPECT_EQ(parsed.gpus.at("1").xids.size(), 2u);

  ASSERT_EQ(gpulet({"sim", "clear"}).exit_code, 0);
  r = gpulet({"sim", "script", "returns-elsewhere", "1", "--pace", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("step 2 of 2: the card answers again, as /dev/nvidia12"), std::string::npos)
      << r.out;
  r = gpulet({"list", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"minor\": 12"), std::string::npos) << r.out;
  // Without --host-root the bundled root is left alone, and says so.
  r = gpulet({"sim", "reboot"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("no --host-root: no boot id written"), std::string::npos) << r.out;
}

TEST(CliTest, ListWithMissingExplicitLibraryFailsWithTheFix) {
  auto r = RunProgram({gpulet::testing::GpuletBinary(), "list", "--nvml-lib", "/nonexistent"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("/nonexistent"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Fix:"), std::string::npos) << r.err;
}

TEST(CliTest, ListOnHostRootWithoutLibraryListsPathsAndPciGpus) {
  std::string root = std::string(GPULET_SOURCE_DIR) + "/tests/fixtures/hostroots/driver-unbound";
  auto r = RunProgram({gpulet::testing::GpuletBinary(), "--host-root", root, "list"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("/usr/local/glibc/lib/libnvidia-ml.so.1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("/nvidia-libs/libnvidia-ml.so.1"), std::string::npos) << r.err;
  // The GPUs are still listed from PCI, with no driver bound.
  EXPECT_NE(r.out.find("RTX 5090"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("none"), std::string::npos) << r.out;
}

TEST(CliTest, CrashingNvmlNeverCrashesGpulet) {
  auto r = RunProgram({gpulet::testing::GpuletBinary(), "--simulate", "homelab", "--nvml-lib",
                       std::string(GPULET_TESTLIB_DIR) + "/libnvml-crash_init.so", "list"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.signal, 0);
  EXPECT_NE(r.err.find("SIGSEGV"), std::string::npos) << r.err;
}

// --nvml-lib pointing at something that is no shared library: `list` fails at once (a FIFO
// used to block it forever in open()) with a message naming the path and what it is.
class CliBadLibraryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gpulet-cli-badlib-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& bytes) {
    std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  static std::string ReadAll(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  // Runs `gpulet --nvml-lib path list` and expects a quick failure whose stderr names the
  // path and says `what`.
  void ExpectListFails(const std::string& path, const std::string& what) {
    auto r = RunProgram({gpulet::testing::GpuletBinary(), "--nvml-lib", path, "list"}, {}, 20000);
    EXPECT_FALSE(r.timed_out) << path;
    EXPECT_EQ(r.exit_code, 1) << path << "\n" << r.err;
    EXPECT_LT(r.seconds, 2.0) << path;  // the loader itself answers in milliseconds
    EXPECT_NE(r.err.find(path), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(what), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("Fix:"), std::string::npos) << r.err;
  }

  fs::path dir_;
};

TEST_F(CliBadLibraryTest, FifoDirectoryDeviceAndSymlinkLoopFailAtOnce) {
  std::string fifo = (dir_ / "fifo.so").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  ExpectListFails(fifo, "a FIFO");
  ExpectListFails(dir_.string(), "a directory");
  ExpectListFails("/dev/zero", "a character device");
  std::string loop = (dir_ / "loop.so").string();
  fs::create_symlink(loop, loop);
  ExpectListFails(loop, "symlink loop");
}

TEST_F(CliBadLibraryTest, LinkerScriptTruncatedAndForeignLibrariesAreNamed) {
  ExpectListFails(Write("script.so", "/* GNU ld script */\nINPUT(libnvidia-ml.so.1)\n"),
                  "linker script");
  std::string whole = ReadAll(std::string(GPULET_TESTLIB_DIR) + "/libnvml-crash_init.so");
  ASSERT_GT(whole.size(), 1000u);
  std::string half = Write("half.so", whole.substr(0, whole.size() / 2));
  ExpectListFails(half, "truncated");
  auto r = RunProgram({gpulet::testing::GpuletBinary(), "--nvml-lib", half, "list"});
  EXPECT_EQ(r.err.find("mixed"), std::string::npos) << r.err;
  if (whole[EI_CLASS] == ELFCLASS64 && whole[offsetof(Elf64_Ehdr, e_machine)] == EM_X86_64) {
    std::string foreign = whole;
    foreign[offsetof(Elf64_Ehdr, e_machine)] = static_cast<char>(EM_AARCH64);
    ExpectListFails(Write("aarch64.so", foreign), "aarch64");
  }
}

}  // namespace
}  // namespace gpulet::cli
