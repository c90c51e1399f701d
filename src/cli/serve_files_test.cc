// `gpulet serve` keeps two files on the node through --host-root: its CDI spec and the GPU
// labels file for node-feature-discovery. Run against a writable copy of the homelab
// fixture root, as gpulet's pod would run against the host's.
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cli/command.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/daemon_process.h"
#include "testing/files.h"
#include "testing/subprocess.h"

namespace gpulet {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr char kSpec[] = "var/run/cdi/gpulet.dev-gpu.yaml";
constexpr char kLabels[] = "etc/kubernetes/node-feature-discovery/features.d/gpulet";

std::string Gpulet() { return absl::StrCat(GPULET_BINARY_DIR, "/gpulet"); }

bool WaitFor(const fs::path& p, absl::Duration timeout) {
  absl::Time end = absl::Now() + timeout;
  while (absl::Now() < end) {
    if (fs::exists(p)) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

class ServeFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / absl::StrCat("gpulet-serve-files-", getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "kubelet/device-plugins");
    root_ = dir_ / "root";
    fs::copy(absl::StrCat(GPULET_SOURCE_DIR, "/sim/fixtures/homelab/root"), root_,
             fs::copy_options::recursive | fs::copy_options::copy_symlinks);
    fs::remove(root_ / "var/run/cdi/nvidia.yaml");  // a node without a spec of its own
    fs::create_directories(root_ / "etc/kubernetes/node-feature-discovery/features.d");
    config_ = (dir_ / "config.yaml").string();
    std::ofstream(config_) << "version: v1\nplugin:\n  deviceListStrategy: [cdi-cri]\n";
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<std::string> Global() const {
    return {Gpulet(),
            "--simulate",
            "homelab",
            "--host-root",
            root_.string(),
            "--sim-state",
            (dir_ / "sim-state.json").string()};
  }
  bool StartServe() {
    std::vector<std::string> argv = Global();
    for (const char* a : {"serve", "--metrics-address", ""}) argv.push_back(a);
    argv.insert(argv.end(), {"--kubelet-dir", (dir_ / "kubelet").string(), "--config", config_});
    return daemon_.Start(argv, {}, (dir_ / "serve.log").string());
  }

  fs::path dir_, root_;
  std::string config_;
  testing::DaemonProcess daemon_;
};

TEST_F(ServeFilesTest, KeepsItsSpecAndLabelsAndDoctorSeesThemResolve) {
  // Before: doctor on this node with this config finds the names unresolvable.
  std::vector<std::string> doctor = Global();
  doctor.insert(doctor.end(), {"doctor", "--json", "--config", config_});
  testing::RunResult before = testing::RunProgram(doctor);
  nlohmann::json j = nlohmann::json::parse(before.out);
  std::string verdict;
  for (const auto& c : j["checks"]) {
    if (c["id"] == "cdi.gpulet") verdict = c["verdict"];
  }
  EXPECT_EQ(verdict, "fail") << before.out;
  EXPECT_EQ(before.exit_code, kExitCheckFailed);

  ASSERT_TRUE(StartServe());
  ASSERT_TRUE(WaitFor(root_ / kSpec, absl::Seconds(20))) << daemon_.Log();
  ASSERT_TRUE(WaitFor(root_ / kLabels, absl::Seconds(5))) << daemon_.Log();
  EXPECT_THAT(testing::ReadTextFile((root_ / kSpec).string()), HasSubstr("kind: gpulet.dev/gpu"));
  EXPECT_THAT(testing::ReadTextFile((root_ / kLabels).string()),
              HasSubstr("nvidia.com/gpu.count=2"));

  testing::RunResult after = testing::RunProgram(doctor);
  j = nlohmann::json::parse(after.out);
  for (const auto& c : j["checks"]) {
    if (c["id"] == "cdi.gpulet") {
      EXPECT_EQ(c["verdict"], "pass") << c.dump(2);
    }
  }

  // The spec outlives the daemon: containers restarting while gpulet is down need it.
  EXPECT_EQ(daemon_.Stop(SIGTERM, absl::Seconds(10)), 0) << daemon_.Log();
  EXPECT_TRUE(fs::exists(root_ / kSpec));
  EXPECT_THAT(daemon_.Log(),
              HasSubstr("CDI spec for gpulet.dev/gpu written to /var/run/cdi/gpulet.dev-gpu.yaml"));
}

bool WaitGone(const fs::path& p, absl::Duration timeout) {
  absl::Time end = absl::Now() + timeout;
  while (absl::Now() < end) {
    if (!fs::exists(p)) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

// SIGHUP applies a new kind (new file, old one removed) and an empty cdi.specDir (no spec
// left behind to go stale).
TEST_F(ServeFilesTest, SighupMovesOrRemovesTheSpec) {
  ASSERT_TRUE(StartServe());
  ASSERT_TRUE(WaitFor(root_ / kSpec, absl::Seconds(20))) << daemon_.Log();
  std::ofstream(config_) << "version: v1\nplugin:\n  deviceListStrategy: [cdi-cri]\n"
                            "  cdiKind: example.com/accel\n";
  ASSERT_EQ(kill(daemon_.pid(), SIGHUP), 0);
  EXPECT_TRUE(WaitFor(root_ / "var/run/cdi/example.com-accel.yaml", absl::Seconds(10)))
      << daemon_.Log();
  EXPECT_TRUE(WaitGone(root_ / kSpec, absl::Seconds(10))) << daemon_.Log();

  std::ofstream(config_) << "version: v1\ncdi:\n  specDir: \"\"\n";
  ASSERT_EQ(kill(daemon_.pid(), SIGHUP), 0);
  EXPECT_TRUE(WaitGone(root_ / "var/run/cdi/example.com-accel.yaml", absl::Seconds(10)))
      << daemon_.Log();
  EXPECT_TRUE(daemon_.Running());
  EXPECT_EQ(daemon_.Stop(SIGTERM, absl::Seconds(10)), 0);
  EXPECT_THAT(daemon_.Log(), HasSubstr("removed: cdi.specDir is now empty"));
}

TEST_F(ServeFilesTest, AnUnwritableSpecDirectoryIsLoggedAndServingGoesOn) {
  fs::remove_all(root_ / "var/run/cdi");
  std::ofstream(root_ / "var/run/cdi") << "a file where the directory should be";
  fs::remove_all(root_ / "etc/kubernetes/node-feature-discovery");
  ASSERT_TRUE(StartServe());
  fs::path socket = dir_ / "kubelet/device-plugins/gpulet-gpu.sock";
  EXPECT_TRUE(WaitFor(socket, absl::Seconds(20))) << daemon_.Log();
  EXPECT_TRUE(daemon_.Running());
  EXPECT_EQ(daemon_.Stop(SIGTERM, absl::Seconds(10)), 0);
  EXPECT_THAT(daemon_.Log(), HasSubstr("CDI spec: cannot write"));
  EXPECT_THAT(daemon_.Log(), HasSubstr("/var/run/cdi/gpulet.dev-gpu.yaml"));
  EXPECT_THAT(daemon_.Log(), HasSubstr("labels.featuresFile "
                                       "/etc/kubernetes/node-feature-discovery/features.d/gpulet"));
  EXPECT_THAT(daemon_.Log(), HasSubstr("its directory does not exist"));
}

TEST_F(ServeFilesTest, LabelsCommandWritesUnderTheHostRootByDefault) {
  std::vector<std::string> argv = Global();
  argv.push_back("labels");
  testing::RunResult r = testing::RunProgram(argv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(testing::ReadTextFile((root_ / kLabels).string()),
              HasSubstr("nvidia.com/gpu.count=2"));
  EXPECT_THAT(r.err, HasSubstr(root_.string()));
}

// Simulating on the bundled fixture (no --host-root) writes nothing into it.
TEST(ServeBundledFixtureTest, WritesNoSpecIntoTheFixture) {
  fs::path dir = fs::temp_directory_path() / absl::StrCat("gpulet-serve-bundled-", getpid());
  fs::create_directories(dir / "kubelet/device-plugins");
  testing::DaemonProcess d;
  ASSERT_TRUE(
      d.Start({Gpulet(), "--simulate", "homelab", "--sim-state", (dir / "state.json").string(),
               "serve", "--metrics-address", "", "--kubelet-dir", (dir / "kubelet").string()},
              {}, (dir / "serve.log").string()));
  EXPECT_TRUE(WaitFor(dir / "kubelet/device-plugins/gpulet-gpu.sock", absl::Seconds(20)));
  EXPECT_EQ(d.Stop(SIGTERM, absl::Seconds(10)), 0);
  EXPECT_THAT(d.Log(), HasSubstr("no CDI spec written"));
  EXPECT_FALSE(fs::exists(absl::StrCat(
      GPULET_SOURCE_DIR, "/sim/fixtures/homelab/root/var/run/cdi/gpulet.dev-gpu.yaml")));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gpulet
