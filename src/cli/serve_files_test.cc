// `gpulet serve` keeps two files on the node through --host-root: its CDI spec and the GPU
// labels file for node-feature-discovery. Run against a writable copy of the homelab
// fixture root, as gpulet's pod would run against the host's.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cli/command.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/daemon_process.h"
#include "testing/files.h"
#include "testing/homelab.h"
#include "testing/subprocess.h"

namespace gpulet::cli {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr char kSpec[] = "var/run/cdi/gpulet.dev-gpu.yaml";
constexpr char kLabels[] = "etc/kubernetes/node-feature-discovery/features.d/gpulet";

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
    return {gpulet::testing::GpuletBinary(),
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
  // GFD counts the GPUs of the labelled product: one RTX 3080 (the other GPU is an RTX 5090).
  EXPECT_THAT(testing::ReadTextFile((root_ / kLabels).string()),
              HasSubstr("nvidia.com/gpu.count=1\nnvidia.com/gpu.family=ampere\n"));

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
  // Served without metrics: what rides on the sampler says it does nothing.
  EXPECT_THAT(daemon_.Log(),
              HasSubstr("metrics.address is empty, so nothing samples the GPUs and the flight "
                        "recorder (health.recorder.window), the eviction rung (health.evict.mode), "
                        "the reset rung (health.reset.mode), the reboot rung (health.reboot.mode) "
                        "do nothing"));
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
  // GFD counts the GPUs of the labelled product: one RTX 3080 (the other GPU is an RTX 5090).
  EXPECT_THAT(testing::ReadTextFile((root_ / kLabels).string()),
              HasSubstr("nvidia.com/gpu.count=1\nnvidia.com/gpu.family=ampere\n"));
  EXPECT_THAT(r.err, HasSubstr(root_.string()));
}

size_t Count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// SIGHUP with a broken config (wrong types, a directory, a FIFO, garbage, a huge file) is
// logged and refused; the daemon keeps running with the config it had (its CDI spec stays
// under the kind the old config names; resetting to defaults would move it).
TEST_F(ServeFilesTest, SighupWithABrokenConfigKeepsRunningWithTheOldOne) {
  const std::string good =
      "version: v1\nplugin:\n  deviceListStrategy: [cdi-cri]\n  cdiKind: example.com/accel\n";
  std::ofstream(config_) << good;
  const fs::path spec = root_ / "var/run/cdi/example.com-accel.yaml";
  ASSERT_TRUE(StartServe());
  ASSERT_TRUE(WaitFor(spec, absl::Seconds(20))) << daemon_.Log();
  const std::string kRefused = "SIGHUP: keeping the running configuration";
  struct Case {
    const char* what;
    std::function<void()> make;  // turns config_ into the broken kind
    const char* message;
  };
  auto write = [this](const std::string& text) {
    fs::remove_all(config_);
    std::ofstream(config_) << text;
  };
  const Case kCases[] = {
      {"list version", [&] { write("version: [v1]\n"); }, "'version' must be v1"},
      {"list for a scalar", [&] { write("version: v1\nkubeletDir: [/a, /b]\n"); }, "kubeletDir"},
      {"inf duration", [&] { write("version: v1\nhealth:\n  probeInterval: inf\n"); },
       "health.probeInterval"},
      {"duplicate key", [&] { write(good + "plugin:\n  cdiKind: example.com/other\n"); },
       "duplicate key 'plugin'"},
      {"garbage", [&] { write("\x01\xff{{[[: :\n"); }, config_.c_str()},
      {"a directory",
       [&] {
         fs::remove_all(config_);
         fs::create_directory(config_);
       },
       "is a directory"},
      {"a FIFO",
       [&] {
         fs::remove_all(config_);
         mkfifo(config_.c_str(), 0600);
       },
       "is a FIFO"},
      {"a huge file", [&] { write(good + std::string(2 << 20, '#')); }, "more than the limit"},
  };
  for (const Case& c : kCases) {
    c.make();
    const size_t before = Count(daemon_.Log(), kRefused);
    ASSERT_EQ(kill(daemon_.pid(), SIGHUP), 0);
    absl::Time end = absl::Now() + absl::Seconds(10);
    while (Count(daemon_.Log(), kRefused) == before && absl::Now() < end) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    ASSERT_GT(Count(daemon_.Log(), kRefused), before) << c.what << "\n" << daemon_.Log();
    EXPECT_THAT(daemon_.Log(), HasSubstr(c.message)) << c.what;
    ASSERT_TRUE(daemon_.Running()) << c.what << "\n" << daemon_.Log();
  }
  EXPECT_TRUE(fs::exists(spec));
  EXPECT_FALSE(fs::exists(root_ / kSpec));  // not reset to the default kind
  // And a good file is applied again.
  write("version: v1\nplugin:\n  deviceListStrategy: [cdi-cri]\n");
  ASSERT_EQ(kill(daemon_.pid(), SIGHUP), 0);
  EXPECT_TRUE(WaitFor(root_ / kSpec, absl::Seconds(10))) << daemon_.Log();
  EXPECT_EQ(daemon_.Stop(SIGTERM, absl::Seconds(10)), 0) << daemon_.Log();
}

TEST_F(ServeFilesTest, AnUnusableWebConfigAtStartIsAUsageError) {
  std::ofstream(dir_ / "web.yml") << "basic_auth_users:\n  prom: s3cret\n";
  std::vector<std::string> argv = Global();
  argv.insert(argv.end(), {"serve", "--metrics-address", "127.0.0.1:0", "--kubelet-dir",
                           (dir_ / "kubelet").string(), "--config", config_, "--web-config-file",
                           (dir_ / "web.yml").string()});
  testing::RunResult r = testing::RunProgram(argv);
  EXPECT_EQ(r.exit_code, kExitUsage) << r.out << r.err;
  EXPECT_THAT(r.out + r.err, HasSubstr("basic_auth_users.prom is not a bcrypt hash"));
  // A directory or FIFO as --config: refused at once, exit 2.
  fs::create_directory(dir_ / "cfgdir");
  mkfifo((dir_ / "cfgfifo").c_str(), 0600);
  for (const char* bad : {"cfgdir", "cfgfifo"}) {
    argv = Global();
    argv.insert(argv.end(), {"serve", "--config", (dir_ / bad).string()});
    r = testing::RunProgram(argv);
    EXPECT_EQ(r.exit_code, kExitUsage) << bad << r.err;
    EXPECT_THAT(r.err, HasSubstr("not a regular file")) << bad;
  }
}

// An operator changes a MIG layout under a serving gpulet: the spec names the new MIG
// device (with its capability nodes) and no longer the destroyed one, within 2 s.
TEST(ServeMigFilesTest, AMigLayoutChangeReachesTheCdiSpecWithinTwoSeconds) {
  fs::path dir = fs::temp_directory_path() / absl::StrCat("gpulet-serve-mig-", getpid());
  fs::remove_all(dir);
  fs::create_directories(dir / "kubelet/device-plugins");
  fs::copy(absl::StrCat(GPULET_SOURCE_DIR, "/sim/fixtures/h200-mig/root"), dir / "root",
           fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  // Placeholders for every capability node the driver lists for GPU 0 (the dev root).
  fs::create_directories(dir / "root/dev/nvidia-caps");
  for (int minor = 3; minor < 138; ++minor) {
    std::ofstream(dir / absl::StrCat("root/dev/nvidia-caps/nvidia-cap", minor));
  }
  const std::vector<std::string> global = {gpulet::testing::GpuletBinary(),
                                           "--simulate",
                                           "h200-mig",
                                           "--host-root",
                                           (dir / "root").string(),
                                           "--sim-state",
                                           (dir / "sim-state.json").string()};
  std::vector<std::string> argv = global;
  argv.insert(argv.end(), {"serve", "--metrics-address", "", "--kubelet-dir",
                           (dir / "kubelet").string(), "--mig-strategy", "mixed"});
  testing::DaemonProcess d;
  ASSERT_TRUE(d.Start(argv, {}, (dir / "serve.log").string()));
  const fs::path spec = dir / "root" / kSpec;
  auto spec_text = [&spec] {
    std::ifstream in(spec);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  ASSERT_TRUE(WaitFor(spec, absl::Seconds(20))) << d.Log();
  // GPU instance 1 is the 3g.71gb: its caps are gpu0/gi1/access (12) and gi1/ci0 (13).
  const std::string destroyed = "MIG-c1a7e0f2-9b34-5d58-8e61-2f0b7a3d0201";
  EXPECT_THAT(spec_text(), HasSubstr(destroyed));
  EXPECT_THAT(spec_text(), HasSubstr("/dev/nvidia-caps/nvidia-cap13"));
  std::vector<std::string> sim = global;
  sim.insert(sim.end(), {"sim", "mig", "0", "destroy", "1"});
  auto r = testing::RunProgram(sim);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const absl::Time changed = absl::Now();
  while (absl::Now() - changed < absl::Seconds(2) &&
         spec_text().find(destroyed) != std::string::npos) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_THAT(spec_text(), ::testing::Not(HasSubstr(destroyed))) << d.Log();
  sim = global;
  sim.insert(sim.end(), {"sim", "mig", "0", "create", "3g.71gb"});
  r = testing::RunProgram(sim);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const absl::Time created = absl::Now();
  while (absl::Now() - created < absl::Seconds(2) &&
         spec_text().find("name: \"0:3\"") == std::string::npos) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_THAT(spec_text(), HasSubstr("name: \"0:3\"")) << spec_text();
  EXPECT_EQ(d.Stop(SIGTERM, absl::Seconds(10)), 0) << d.Log();
  fs::remove_all(dir);
}

// Simulating on the bundled fixture (no --host-root) writes nothing into it.
TEST(ServeBundledFixtureTest, WritesNoSpecIntoTheFixture) {
  fs::path dir = fs::temp_directory_path() / absl::StrCat("gpulet-serve-bundled-", getpid());
  fs::create_directories(dir / "kubelet/device-plugins");
  testing::DaemonProcess d;
  ASSERT_TRUE(d.Start({gpulet::testing::GpuletBinary(), "--simulate", "homelab", "--sim-state",
                       (dir / "state.json").string(), "serve", "--metrics-address", "",
                       "--kubelet-dir", (dir / "kubelet").string()},
                      {}, (dir / "serve.log").string()));
  EXPECT_TRUE(WaitFor(dir / "kubelet/device-plugins/gpulet-gpu.sock", absl::Seconds(20)));
  EXPECT_EQ(d.Stop(SIGTERM, absl::Seconds(10)), 0);
  EXPECT_THAT(d.Log(), HasSubstr("no CDI spec written"));
  EXPECT_FALSE(fs::exists(absl::StrCat(
      GPULET_SOURCE_DIR, "/sim/fixtures/homelab/root/var/run/cdi/gpulet.dev-gpu.yaml")));
  fs::remove_all(dir);
}

// The gpulet-* thread names a running `gpulet serve --simulate <fixture>` has (with its
// metrics server, so that every worker runs).
std::set<std::string> ServeThreadNames(const std::string& fixture) {
  fs::path dir =
      fs::temp_directory_path() / absl::StrCat("gpulet-serve-threads-", fixture, "-", getpid());
  fs::remove_all(dir);
  fs::create_directories(dir / "kubelet/device-plugins");
  testing::DaemonProcess d;
  std::set<std::string> running;
  if (!d.Start({gpulet::testing::GpuletBinary(), "--simulate", fixture, "--sim-state",
                (dir / "state.json").string(), "serve", "--metrics-address", "127.0.0.1:0",
                "--kubelet-dir", (dir / "kubelet").string()},
               {}, (dir / "serve.log").string())) {
    ADD_FAILURE() << "gpulet serve did not start";
    return running;
  }
  EXPECT_TRUE(WaitFor(dir / "kubelet/device-plugins/gpulet-gpu.sock", absl::Seconds(20)))
      << d.Log();
  absl::SleepFor(absl::Milliseconds(500));  // every worker has started
  for (const auto& task : fs::directory_iterator(absl::StrCat("/proc/", d.pid(), "/task"))) {
    std::ifstream in(task.path() / "comm");
    std::string name;
    std::getline(in, name);
    if (name.rfind("gpulet-", 0) == 0) running.insert(name);
  }
  EXPECT_EQ(d.Stop(SIGTERM, absl::Seconds(10)), 0) << d.Log();
  fs::remove_all(dir);
  return running;
}

// docs/architecture.md's list of threads is true: every gpulet-* thread a running `gpulet
// serve` has is in it, and every name in it is one gpulet's sources give a thread.
TEST(ServeThreadsTest, ArchitectureDocListsEveryThreadServeRuns) {
  std::ifstream doc_in(absl::StrCat(GPULET_SOURCE_DIR, "/docs/architecture.md"));
  std::stringstream doc_ss;
  doc_ss << doc_in.rdbuf();
  const std::string doc = doc_ss.str();
  const size_t from = doc.find("### Threads in `gpulet serve`");
  ASSERT_NE(from, std::string::npos);
  const std::string section = doc.substr(from, doc.find("\n## ", from) - from);
  std::set<std::string> documented;
  for (size_t at = section.find("`gpulet-"); at != std::string::npos;
       at = section.find("`gpulet-", at + 1)) {
    documented.insert(section.substr(at + 1, section.find('`', at + 1) - at - 1));
  }
  ASSERT_GE(documented.size(), 8u) << section;

  // Each documented name is a thread name in the sources (a quoted literal outside tests).
  std::string sources;
  for (const auto& e : fs::recursive_directory_iterator(absl::StrCat(GPULET_SOURCE_DIR, "/src"))) {
    const std::string path = e.path().string();
    if (!e.is_regular_file() || path.find("_test.cc") != std::string::npos ||
        path.find("/testing/") != std::string::npos) {
      continue;
    }
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    sources += ss.str();
  }
  for (const std::string& name : documented) {
    EXPECT_THAT(sources, HasSubstr(absl::StrCat("\"", name, "\""))) << name;
  }

  const std::set<std::string> running = ServeThreadNames("homelab");
  EXPECT_GE(running.size(), 5u);
  for (const std::string& name : running) {
    EXPECT_TRUE(documented.count(name))
        << name << " runs but docs/architecture.md does not list it";
  }
}

// docs/mig.md: the `gpulet-mig` thread runs "only on nodes with a MIG-capable GPU": the
// homelab's GeForce cards are not, h200-mig's H200 is.
TEST(ServeThreadsTest, MigThreadRunsOnlyWithAMigCapableGpu) {
  std::set<std::string> homelab = ServeThreadNames("homelab");
  EXPECT_FALSE(homelab.empty());
  EXPECT_FALSE(homelab.count("gpulet-mig"));
  std::set<std::string> h200 = ServeThreadNames("h200-mig");
  EXPECT_TRUE(h200.count("gpulet-mig"));
}

// SIGTERM while discovery waits on an nvmlInit that hangs (the probe's deadline is 30 s):
// gpulet exits 0 at once instead of finishing discovery first, and leaves no socket.
TEST(ServeSignalsTest, SigtermDuringAHangingNvmlInitExitsAtOnce) {
  fs::path dir = fs::temp_directory_path() / absl::StrCat("gpulet-serve-hang-", getpid());
  fs::create_directories(dir / "kubelet/device-plugins");
  testing::DaemonProcess d;
  // Blocked from the start, so a sanitizer build still starting up after 500 ms (half a
  // second of CPU on a 2-core machine) holds the signal for gpulet's own handling instead of
  // dying of its default action.
  d.BlockStopSignalsAtStart();
  ASSERT_TRUE(
      d.Start({gpulet::testing::GpuletBinary(), "--nvml-lib",
               absl::StrCat(GPULET_TESTLIB_DIR, "/libnvml-hang_init.so"), "--probe-timeout", "30",
               "serve", "--metrics-address", "", "--kubelet-dir", (dir / "kubelet").string()},
              {}, (dir / "serve.log").string()));
  absl::SleepFor(absl::Milliseconds(500));
  const absl::Time sent = absl::Now();
  EXPECT_EQ(d.Stop(SIGTERM, absl::Seconds(5)), 0) << d.Log();
  EXPECT_LT(absl::Now() - sent, absl::Seconds(2)) << d.Log();
  EXPECT_THAT(d.Log(), HasSubstr("during discovery: stopping"));
  EXPECT_FALSE(fs::exists(dir / "kubelet/device-plugins/gpulet-gpu.sock"));
  fs::remove_all(dir);
}

// One round of SIGTERM (SIGINT in odd rounds: Ctrl-C) at moments across start-up: one gpulet
// per delay (0 to 500 ms after its start, from before main(): the signal waits, blocked, as a
// supervisor may start gpulet), all at once. Each must exit 0 within 2 s of its signal and
// leave no socket.
//
// What a process that only starts and exits costs here, for `n` of them at once as
// TermAtEachDelay runs them: `gpulet --version`'s wall time. A sanitizer build spends about
// half a second of CPU starting and exiting, so seven at once on two cores take about two
// seconds before gpulet's own shutdown counts; on a fast machine this is a few ms.
absl::Duration ConcurrentStartCost(int n, const fs::path& dir) {
  static absl::Duration cost = [&] {
    std::vector<std::unique_ptr<testing::DaemonProcess>> procs;
    const absl::Time t0 = absl::Now();
    for (int i = 0; i < n; ++i) {
      auto p = std::make_unique<testing::DaemonProcess>();
      fs::create_directories(dir);
      if (!p->Start({gpulet::testing::GpuletBinary(), "--version"}, {},
                    (dir / absl::StrCat("version-", i)).string())) {
        return absl::ZeroDuration();
      }
      procs.push_back(std::move(p));
    }
    for (auto& p : procs) {
      while (p->Running() && absl::Now() - t0 < absl::Seconds(30)) {
        absl::SleepFor(absl::Milliseconds(5));
      }
    }
    return absl::Now() - t0;
  }();
  return cost;
}

void TermAtEachDelay(const fs::path& base, const std::vector<std::string>& front, int round) {
  constexpr int kDelaysMs[] = {0, 10, 20, 50, 100, 200, 500};
  // Measured before this round's processes start, never while they run.
  const absl::Duration start_cost = ConcurrentStartCost(std::size(kDelaysMs), base / "version");
  struct Run {
    int delay_ms = 0;
    fs::path dir;
    testing::DaemonProcess d;
    absl::Time started, signalled, exited = absl::InfiniteFuture();
  };
  std::vector<std::unique_ptr<Run>> runs;
  for (int delay_ms : kDelaysMs) {
    auto run = std::make_unique<Run>();
    run->delay_ms = delay_ms;
    run->dir = base / absl::StrCat(round, "-", delay_ms);
    fs::create_directories(run->dir / "kubelet/device-plugins");
    std::vector<std::string> argv = {gpulet::testing::GpuletBinary()};
    argv.insert(argv.end(), front.begin(), front.end());
    if (front[0] == "--simulate") {
      argv.insert(argv.end(), {"--sim-state", (run->dir / "state.json").string()});
    }
    argv.insert(argv.end(), {"serve", "--metrics-address", "127.0.0.1:0", "--kubelet-dir",
                             (run->dir / "kubelet").string()});
    run->d.BlockStopSignalsAtStart();
    ASSERT_TRUE(run->d.Start(argv, {}, (run->dir / "serve.log").string()));
    run->started = absl::Now();
    runs.push_back(std::move(run));
  }
  for (auto& run : runs) {  // in order of delay, so each is sent on time
    absl::SleepFor(run->started + absl::Milliseconds(run->delay_ms) - absl::Now());
    run->signalled = absl::Now();
    kill(run->d.pid(), round % 2 == 0 ? SIGTERM : SIGINT);
  }
  const absl::Time give_up = absl::Now() + absl::Seconds(5) + start_cost;
  for (bool waiting = true; waiting && absl::Now() < give_up;) {
    waiting = false;
    for (auto& run : runs) {
      if (run->exited != absl::InfiniteFuture()) continue;
      if (run->d.Running()) {
        waiting = true;
      } else {
        run->exited = absl::Now();
      }
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  for (auto& run : runs) {
    const std::string what = absl::StrCat(
        "round ", round, round % 2 == 0 ? ", SIGTERM" : ", SIGINT", " at ", run->delay_ms, " ms");
    EXPECT_LT(run->exited - run->signalled, absl::Seconds(2) + start_cost)
        << what << " (starting and exiting alone cost " << start_cost << ")\n"
        << run->d.Log();
    EXPECT_EQ(run->d.Stop(SIGKILL, absl::Seconds(1)), 0) << what << "\n" << run->d.Log();
    EXPECT_FALSE(fs::exists(run->dir / "kubelet/device-plugins/gpulet-gpu.sock")) << what;
  }
}

// 20 rounds on the simulated homelab node.
TEST(ServeSignalsTest, SigtermAtAnyMomentOfStartUpExitsCleanly) {
  const fs::path base = fs::temp_directory_path() / absl::StrCat("gpulet-serve-term-", getpid());
  for (int round = 0; round < 20 && !::testing::Test::HasFailure(); ++round) {
    TermAtEachDelay(base, {"--simulate", "homelab"}, round);
  }
  fs::remove_all(base);
}

// 20 rounds with an nvmlInit that hangs (the probe's deadline is 30 s).
TEST(ServeSignalsTest, SigtermAtAnyMomentOfAHangingNvmlInitExitsCleanly) {
  const fs::path base = fs::temp_directory_path() / absl::StrCat("gpulet-serve-hang-", getpid());
  for (int round = 0; round < 20 && !::testing::Test::HasFailure(); ++round) {
    TermAtEachDelay(base,
                    {"--nvml-lib", absl::StrCat(GPULET_TESTLIB_DIR, "/libnvml-hang_init.so"),
                     "--probe-timeout", "30"},
                    round);
  }
  fs::remove_all(base);
}

}  // namespace
}  // namespace gpulet::cli
