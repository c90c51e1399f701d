// The Daemon in-process: the homelab simulator loaded through the real loader, a writable
// copy of its host root, a temporary kubelet directory and the fake kubelet.
#include "daemon/daemon.h"

#include <crypt.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/keyed_status.h"
#include "gmock/gmock.h"
#include "gpu/nvml_api.h"
#include "gtest/gtest.h"
#include "health/xid_catalog.h"
#include "httplib.h"
#include "recorder/flight_recorder.h"
#include "recorder/postmortem.h"
#include "recorder/recorder_files.h"
#include "recorder/retirement.h"
#include "sim/fault_scripts.h"
#include "sim/state.h"
#include "state/status_report.h"
#include "testing/fake_apiserver.h"
#include "testing/fake_kubelet.h"
#include "testing/free_port.h"
#include "testing/homelab.h"
#include "testing/subprocess.h"

namespace gpulet::daemon {
namespace {

namespace fs = std::filesystem;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

#define ASSERT_OK(expr)                   \
  do {                                    \
    absl::Status status_ = (expr);        \
    ASSERT_TRUE(status_.ok()) << status_; \
  } while (false)

bool Eventually(const std::function<bool()>& pred, absl::Duration timeout = absl::Seconds(5)) {
  absl::Time end = absl::Now() + timeout;
  while (absl::Now() < end) {
    if (pred()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return pred();
}

// The body of GET `path` on 127.0.0.1:`port`; "" when nothing answered 200.
std::string HttpGet(int port, const std::string& path = "/metrics") {
  if (port <= 0) return "";
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(1, 0);
  c.set_read_timeout(2, 0);
  auto r = c.Get(path.c_str());
  return r && r->status == 200 ? r->body : "";
}

std::string Loopback(int port) { return absl::StrCat("127.0.0.1:", port); }

// A TCP listener on a loopback port, without SO_REUSEPORT: nobody else can bind it.
class PortHolder {
 public:
  PortHolder() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 && listen(fd_, 1) == 0 &&
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port_ = ntohs(addr.sin_port);
    }
  }
  ~PortHolder() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// The value of the homelab RTX 3080's GPU temperature in an exposition; "" when absent.
std::string Rtx3080Temperature(const std::string& exposition) {
  for (absl::string_view line : absl::StrSplit(exposition, '\n')) {
    if (absl::StartsWith(line, "DCGM_FI_DEV_GPU_TEMP{") &&
        absl::StrContains(line, testing::kRtx3080)) {
      return std::string(line.substr(line.rfind(' ') + 1));
    }
  }
  return "";
}

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Short: a unix socket's path has at most 107 characters.
    static int count = 0;
    dir_ = fs::path("/tmp") / absl::StrCat("gd-", getpid(), "-", ++count);
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "kubelet/device-plugins");
    root_ = dir_ / "root";
    fs::copy(testing::SimRoot("homelab"), root_,
             fs::copy_options::recursive | fs::copy_options::copy_symlinks);
    fs::create_directories(root_ / "etc/kubernetes/node-feature-discovery/features.d");
    // One state file for the whole process: the simulator reads the variable at nvmlInit,
    // which a library still loaded by an earlier test may not repeat.
    state_file_ = fs::temp_directory_path() / absl::StrCat("gpulet-daemon-sim-", getpid());
    fs::remove(state_file_);
    setenv("GPULET_SIM_FIXTURE",
           absl::StrCat(GPULET_SOURCE_DIR, "/sim/fixtures/homelab.yaml").c_str(), 1);
    setenv("GPULET_SIM_STATE", state_file_.c_str(), 1);

    config_.kubelet_dir = (dir_ / "kubelet").string();
    config_.metrics.address = "127.0.0.1:0";
    config_.metrics.pod_attribution = false;
    config_.health.kmsg = false;
  }
  void TearDown() override {
    daemon_.reset();
    fs::remove_all(dir_);
    fs::remove(state_file_);
  }

  nvml::Node Homelab() {
    nvml::DiscoveryOptions options;
    options.host_root = root_.string();
    options.nvml.explicit_path = GPULET_SIM_LIB;
    return nvml::DiscoverNode(options);
  }

  absl::Status StartDaemon() {
    DaemonOptions options;
    options.node_name = "test-node";
    if (tune_) tune_(&options);
    daemon_ = std::make_unique<Daemon>(Homelab(), config_, options);
    return daemon_->Start();
  }

  void EditSimState(const std::function<void(sim::SimState*)>& edit) {
    sim::SimState state;
    std::string error;
    ASSERT_TRUE(sim::LoadState(state_file_.string(), &state, &error)) << error;
    edit(&state);
    ASSERT_TRUE(sim::SaveStateAtomic(state_file_.string(), state, &error)) << error;
  }
  // Step `step` of the simulator's fault script `name` (sim/fault_scripts.h) on `gpu`, as
  // `gpulet sim script` plays it.
  void PlayFaultStep(const char* name, size_t step, const std::string& gpu) {
    const sim::FaultScript* script = sim::FindFaultScript(name);
    ASSERT_NE(script, nullptr) << name;
    ASSERT_LT(step, script->steps.size()) << name;
    EditSimState([&](sim::SimState* s) { ASSERT_TRUE(script->steps[step].apply(s, gpu)); });
  }

  fs::path Socket() const { return dir_ / "kubelet/device-plugins/gpulet-gpu.sock"; }

  // What the driver's procfs says of the GPU at `bus` after it enumerated it anew: its minor.
  void SetDriverMinor(const std::string& bus, unsigned minor) {
    const fs::path file = root_ / "proc/driver/nvidia/gpus" / bus / "information";
    std::ifstream in(file);
    std::string text(std::istreambuf_iterator<char>(in), {});
    const size_t at = text.find("Device Minor:");
    ASSERT_NE(at, std::string::npos) << file;
    text.replace(at, text.find('\n', at) - at, absl::StrCat("Device Minor: \t ", minor));
    std::ofstream(file, std::ios::trunc) << text;
  }

  fs::path dir_, root_, state_file_;
  config::Config config_;
  std::function<void(DaemonOptions*)> tune_;  // changes StartDaemon's options
  std::unique_ptr<Daemon> daemon_;
};

// `gpulet serve` and `gpulet labels --config` write the same labels for the same config (both
// call NodeGpuLabels), and a reload that changes the sharing rewrites the daemon's file.
TEST_F(DaemonTest, LabelsFileIsWhatGpuletLabelsPrintsForTheSameConfig) {
  fs::path features = root_ / "etc/kubernetes/node-feature-discovery/features.d/gpulet";
  auto read = [](const fs::path& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  auto cli = [&](const std::string& yaml) {
    fs::path file = dir_ / "config.yaml";
    std::ofstream(file) << yaml;
    testing::RunResult r = testing::RunProgram(
        {testing::GpuletBinary(), "--simulate", "homelab", "--sim-state", state_file_.string(),
         "--host-root", root_.string(), "labels", "--config", file.string(), "--output", "-"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  };
  config_.sharing.time_slicing.replicas = 4;
  ASSERT_OK(StartDaemon());
  std::string served = read(features);
  EXPECT_THAT(served, HasSubstr("nvidia.com/gpu.replicas=4\n"));
  EXPECT_THAT(served, HasSubstr("nvidia.com/gpu.sharing-strategy=time-slicing\n"));
  EXPECT_THAT(served, HasSubstr("nvidia.com/gpu.product=NVIDIA-GeForce-RTX-3080-SHARED\n"));
  EXPECT_EQ(served, cli("version: v1\nsharing:\n  timeSlicing:\n    replicas: 4\n"));

  config::Config next = config_;
  next.sharing.time_slicing.rename_by_default = true;
  ASSERT_OK(daemon_->Reload(next).status());
  served = read(features);
  EXPECT_THAT(served, HasSubstr("nvidia.com/gpu.product=NVIDIA-GeForce-RTX-3080\n"));
  EXPECT_EQ(served, cli("version: v1\nsharing:\n  timeSlicing:\n    replicas: 4\n"
                        "    renameByDefault: true\n"));
}

TEST_F(DaemonTest, StartServesThePluginMetricsAndFilesAndStopIsIdempotent) {
  ASSERT_OK(StartDaemon());
  EXPECT_TRUE(fs::exists(Socket()));
  EXPECT_THAT(HttpGet(daemon_->metrics_port()), HasSubstr("DCGM_FI_DEV_GPU_TEMP"));
  EXPECT_THAT(HttpGet(daemon_->metrics_port()), HasSubstr("test-node"));
  EXPECT_TRUE(fs::exists(root_ / "var/run/cdi/gpulet.dev-gpu.yaml"));
  EXPECT_TRUE(fs::exists(root_ / "etc/kubernetes/node-feature-discovery/features.d/gpulet"));
  int port = daemon_->metrics_port();

  daemon_->Stop();
  EXPECT_FALSE(fs::exists(Socket()));
  EXPECT_EQ(HttpGet(port), "");
  EXPECT_TRUE(fs::exists(root_ / "var/run/cdi/gpulet.dev-gpu.yaml"));  // left for containers
  daemon_->Stop();
  EXPECT_FALSE(daemon_->Reload(config_).ok());  // stopped: nothing to reload
}

TEST_F(DaemonTest, RegistersWithTheKubeletAndAppliesResourceChangesLive) {
  testing::FakeKubelet kubelet((dir_ / "kubelet/device-plugins").string());
  ASSERT_OK(kubelet.Start());
  ASSERT_OK(StartDaemon());
  ASSERT_TRUE(kubelet.WaitForDevices(
      "nvidia.com/gpu", [](const auto& r) { return r.devices_size() == 2; }, absl::Seconds(10)));

  config::Config next = config_;
  next.sharing.time_slicing.replicas = 3;
  absl::StatusOr<ReloadResult> r = daemon_->Reload(next);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->changed_keys, Contains("sharing.timeSlicing.replicas"));
  EXPECT_THAT(r->actions, Contains("plugin manager reconfigured"));
  EXPECT_TRUE(kubelet.WaitForDevices(
      "nvidia.com/gpu", [](const auto& r) { return r.devices_size() == 6; }, absl::Seconds(10)));
  EXPECT_EQ(daemon_->config().sharing.time_slicing.replicas, 3);
  kubelet.Stop();
}

// Every setting the sampler's rounds act on (the slice guard, the flight recorder, the
// remediation rungs and the quiet period of the reset rung's probation) takes effect on
// reload: the sampler is rebuilt with it, not kept because its own metrics.* inputs are the
// same. (The e2e suite found health.reset.mode reloaded as "nothing to do".)
TEST_F(DaemonTest, ReloadRebuildsTheSamplerForEverySettingItsRoundsActOn) {
  ASSERT_OK(StartDaemon());
  const std::pair<const char*, const char*> changes[] = {
      {"health.recorder.window", "10m"},
      {"health.recorder.dir", "/var/lib/other/recorder"},
      {"health.evict.mode", "on"},
      {"health.evict.grace", "5m"},
      {"health.evict.maxPerHour", "3"},
      {"health.reset.mode", "on"},
      {"health.reset.maxPerDay", "1"},
      {"health.reboot.mode", "off"},
      {"health.reboot.grace", "1m"},
      {"health.reboot.maxPerWindow", "2"},
      {"health.reboot.window", "48h"},
      {"health.reboot.file", "/var/lib/other/reboots.json"},
      {"health.reboot.sentinel", "/run/reboot-required"},
      {"health.reboot.via", "kured"},
      {"health.reboot.talosconfig", "/etc/talos/config"},
      {"health.reboot.talosEndpoint", "10.5.0.2:50000"},
      {"health.reboot.drainTimeout", "30m"},
      {"health.quietPeriod", "1m"},
      {"sharing.memorySlices.overQuota.action", "kill"},
      {"sharing.memorySlices.overQuota.marginMiB", "512"},
      {"sharing.memorySlices.overQuota.grace", "1m"},
      {"sharing.memorySlices.overQuota.maxKillsPerHour", "1"},
  };
  for (const auto& [key, value] : changes) {
    SCOPED_TRACE(key);
    absl::StatusOr<config::Config> next =
        config::ParseConfig(config::ConfigToYaml(daemon_->config()), "test", {{key, value}});
    ASSERT_TRUE(next.ok()) << next.status();
    absl::StatusOr<ReloadResult> r = daemon_->Reload(*next);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_THAT(r->changed_keys, Contains(key));
    EXPECT_THAT(r->actions, Contains(HasSubstr("metrics rebuilt"))) << r->Summary();
  }
}

TEST_F(DaemonTest, ReloadMovesMetricsToTheNewAddress) {
  ASSERT_OK(StartDaemon());
  int old_port = daemon_->metrics_port();
  ASSERT_NE(HttpGet(old_port), "");
  int new_port = testing::FreeLoopbackPort();
  config::Config next = config_;
  next.metrics.address = Loopback(new_port);
  absl::StatusOr<ReloadResult> r = daemon_->Reload(next);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->Summary(), HasSubstr("metrics.address"));
  EXPECT_EQ(daemon_->metrics_port(), new_port);
  EXPECT_THAT(HttpGet(new_port), HasSubstr("DCGM_FI_DEV_GPU_TEMP"));
  EXPECT_EQ(HttpGet(old_port), "");

  // An empty address turns metrics off.
  next.metrics.address = "";
  ASSERT_TRUE(daemon_->Reload(next).ok());
  EXPECT_EQ(daemon_->metrics_port(), 0);
  EXPECT_EQ(HttpGet(new_port), "");
}

TEST_F(DaemonTest, ReloadToAPortInUseIsRefusedAndKeepsServing) {
  ASSERT_OK(StartDaemon());
  int port = daemon_->metrics_port();
  PortHolder taken;
  ASSERT_NE(taken.port(), 0);
  config::Config next = config_;
  next.metrics.address = Loopback(taken.port());
  next.sharing.time_slicing.replicas = 2;  // refused with it: all or nothing
  absl::StatusOr<ReloadResult> r = daemon_->Reload(next);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsUnavailable(r.status())) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("metrics.address"));
  EXPECT_EQ(KeyOf(r.status()), "metrics.address");
  EXPECT_THAT(r.status().message(), HasSubstr(Loopback(taken.port())));
  EXPECT_EQ(daemon_->metrics_port(), port);
  EXPECT_NE(HttpGet(port), "");
  EXPECT_EQ(daemon_->config().metrics.address, config_.metrics.address);
  EXPECT_EQ(daemon_->config().sharing.time_slicing.replicas, 1);
}

TEST_F(DaemonTest, ReloadWithAnUnusableWebConfigIsRefusedAndKeepsServing) {
  ASSERT_OK(StartDaemon());
  int port = daemon_->metrics_port();
  config::Config next = config_;
  next.metrics.web_config_file = (dir_ / "missing-web.yaml").string();
  absl::StatusOr<ReloadResult> r = daemon_->Reload(next);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("metrics.webConfigFile"));
  EXPECT_EQ(daemon_->metrics_port(), port);
  EXPECT_NE(HttpGet(port), "");
  EXPECT_EQ(daemon_->config().metrics.web_config_file, "");
}

// A bcrypt hash of `password` (cost 5: fast for tests).
std::string Bcrypt(const std::string& password) {
  char salt[64];
  if (crypt_gensalt_rn("$2b$", 5, nullptr, 0, salt, sizeof(salt)) == nullptr) return "";
  struct crypt_data data {};
  const char* out = crypt_r(password.c_str(), salt, &data);
  return out != nullptr ? out : "";
}

// The status of GET /metrics on 127.0.0.1:`port` over `scheme`, with basic auth when `user`
// is non-empty; 0 when nothing answered.
int MetricsStatus(int port, bool https, const std::string& user = "",
                  const std::string& password = "") {
  std::unique_ptr<httplib::ClientImpl> c;
  if (https) {
    auto ssl = std::make_unique<httplib::SSLClient>("127.0.0.1", port);
    ssl->enable_server_certificate_verification(false);
    c = std::move(ssl);
  } else {
    c = std::make_unique<httplib::ClientImpl>("127.0.0.1", port);
  }
  c->set_connection_timeout(1, 0);
  c->set_read_timeout(2, 0);
  if (!user.empty()) c->set_basic_auth(user, password);
  auto r = c->Get("/metrics");
  return r ? r->status : 0;
}

// A reload with each broken kind of web config (rewritten in place, or a new path) is refused
// naming metrics.webConfigFile, and the running server keeps its TLS and auth.
TEST_F(DaemonTest, ReloadWithEachBrokenWebConfigKeepsTheOldTlsAndAuth) {
  const bool tls = std::system("command -v openssl >/dev/null 2>&1") == 0;
  const fs::path cert = dir_ / "cert.pem", key = dir_ / "key.pem";
  if (tls) {
    ASSERT_EQ(std::system(absl::StrCat("openssl req -x509 -newkey rsa:2048 -nodes -days 1 "
                                       "-subj /CN=127.0.0.1 -keyout ",
                                       key.string(), " -out ", cert.string(), " >/dev/null 2>&1")
                              .c_str()),
              0);
  }
  const std::string hash = Bcrypt("s3cret");
  ASSERT_FALSE(hash.empty());
  const std::string good =
      absl::StrCat(tls ? absl::StrCat("tls_server_config:\n  cert_file: ", cert.string(),
                                      "\n  key_file: ", key.string(), "\n")
                       : "",
                   "basic_auth_users:\n  prom: '", hash, "'\n");
  const fs::path web = dir_ / "web.yml";
  std::ofstream(web) << good;
  config_.metrics.web_config_file = web.string();
  ASSERT_OK(StartDaemon());
  const int port = daemon_->metrics_port();
  ASSERT_EQ(MetricsStatus(port, tls), 401);
  ASSERT_EQ(MetricsStatus(port, tls, "prom", "s3cret"), 200);

  fs::create_directories(dir_ / "adir");
  ASSERT_EQ(mkfifo((dir_ / "fifo").c_str(), 0600), 0);
  std::ofstream(dir_ / "junk.pem") << "not a certificate\n";
  std::ofstream(dir_ / "fake-cert.pem")
      << "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
  std::ofstream(dir_ / "fake-key.pem")
      << "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
  const std::vector<std::pair<std::string, std::string>> kBroken = {
      {"garbage", "\x01\xff{{[[: :"},
      {"empty", ""},
      {"a list", "- prom\n"},
      {"unknown key", "tls_config: {}\n"},
      {"users as a list", "basic_auth_users: [prom]\n"},
      {"plain password", "basic_auth_users:\n  prom: s3cret\n"},
      {"cert without key", absl::StrCat("tls_server_config:\n  cert_file: ", cert.string(), "\n")},
      {"key without cert", absl::StrCat("tls_server_config:\n  key_file: ", key.string(), "\n")},
      {"unreadable cert",
       absl::StrCat("tls_server_config:\n  cert_file: ", (dir_ / "none.pem").string(),
                    "\n  key_file: ", key.string(), "\n")},
      {"junk cert", absl::StrCat("tls_server_config:\n  cert_file: ", (dir_ / "junk.pem").string(),
                                 "\n  key_file: ", key.string(), "\n")},
      {"PEM that OpenSSL refuses",
       absl::StrCat("tls_server_config:\n  cert_file: ", (dir_ / "fake-cert.pem").string(),
                    "\n  key_file: ", (dir_ / "fake-key.pem").string(), "\n")},
  };
  for (const auto& [what, text] : kBroken) {
    std::ofstream(web, std::ios::trunc) << text;  // the same path, new content
    absl::StatusOr<ReloadResult> r = daemon_->Reload(config_);
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << what << ": " << r.status();
    // Keyed as the web config's error, not the address's, a pair GnuTLS refuses included.
    EXPECT_EQ(KeyOf(r.status()), "metrics.webConfigFile") << what;
    EXPECT_TRUE(absl::StartsWith(r.status().message(), "metrics.webConfigFile: "))
        << what << ": " << r.status();
    EXPECT_EQ(daemon_->metrics_port(), port) << what;
    EXPECT_EQ(MetricsStatus(port, tls), 401) << what;
    EXPECT_EQ(MetricsStatus(port, tls, "prom", "s3cret"), 200) << what;
  }
  // A new path that is not a regular file.
  for (const fs::path& p : {dir_ / "adir", dir_ / "fifo", fs::path("/dev/zero")}) {
    config::Config next = config_;
    next.metrics.web_config_file = p.string();
    absl::StatusOr<ReloadResult> r = daemon_->Reload(next);
    ASSERT_FALSE(r.ok()) << p;
    EXPECT_THAT(r.status().message(), HasSubstr("metrics.webConfigFile")) << p;
    EXPECT_EQ(MetricsStatus(port, tls), 401) << p;
    EXPECT_EQ(daemon_->config().metrics.web_config_file, web.string());
  }
  // Dropping the file (plain HTTP, no auth) is a deliberate change, and is applied.
  std::ofstream(web, std::ios::trunc) << good;
  config::Config plain = config_;
  plain.metrics.web_config_file = "";
  ASSERT_TRUE(daemon_->Reload(plain).ok());
  EXPECT_EQ(MetricsStatus(daemon_->metrics_port(), false), 200);
}

// A certificate renewed in place (same paths, new content) is applied by a reload; a reload
// with nothing changed rebuilds nothing.
TEST_F(DaemonTest, ReloadAppliesACertificateRenewedAtTheSamePath) {
  const fs::path cert = dir_ / "cert.pem", key = dir_ / "key.pem";
  auto make_cert = [&](const char* cn) {
    return std::system(
               absl::StrCat("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=", cn,
                            " -keyout ", key.string(), " -out ", cert.string(), " >/dev/null 2>&1")
                   .c_str()) == 0;
  };
  ASSERT_TRUE(make_cert("first")) << "openssl is needed (scripts/deps.sh test installs it)";
  const fs::path web = dir_ / "web.yml";
  std::ofstream(web) << "tls_server_config:\n  cert_file: " << cert.string()
                     << "\n  key_file: " << key.string() << "\n";
  config_.metrics.web_config_file = web.string();
  ASSERT_OK(StartDaemon());
  ASSERT_EQ(MetricsStatus(daemon_->metrics_port(), true), 200);

  absl::StatusOr<ReloadResult> same = daemon_->Reload(config_);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_THAT(same->actions, Not(Contains(HasSubstr("metrics rebuilt"))));

  ASSERT_TRUE(make_cert("renewed"));
  absl::StatusOr<ReloadResult> renewed = daemon_->Reload(config_);
  ASSERT_TRUE(renewed.ok()) << renewed.status();
  EXPECT_THAT(renewed->actions, Contains(HasSubstr("metrics rebuilt")));
  EXPECT_EQ(MetricsStatus(daemon_->metrics_port(), true), 200);
}

TEST_F(DaemonTest, ReloadWithAnInvalidValueNamesTheKey) {
  config_.metrics.sample_interval = absl::Milliseconds(100);
  ASSERT_OK(StartDaemon());
  EXPECT_THAT(HttpGet(daemon_->metrics_port()), HasSubstr("gpulet_config_reload_errors_total{} 0"));
  config::Config next = config_;
  next.sharing.time_slicing.replicas = 0;
  absl::StatusOr<ReloadResult> r = daemon_->Reload(next);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("sharing.timeSlicing.replicas"));
  EXPECT_EQ(daemon_->config().sharing.time_slicing.replicas, 1);
  EXPECT_TRUE(fs::exists(Socket()));
  // Counted, with a file that could not be loaded at all (the CLI's part).
  daemon_->CountReloadError("config.yaml is a directory");
  EXPECT_EQ(daemon_->reload_errors(), 2u);
  EXPECT_TRUE(Eventually([&] {
    return absl::StrContains(HttpGet(daemon_->metrics_port()),
                             "gpulet_config_reload_errors_total{} 2");
  }));
}

TEST_F(DaemonTest, ReloadAppliesTheSampleInterval) {
  config_.metrics.sample_interval = absl::Hours(1);
  ASSERT_OK(StartDaemon());
  ASSERT_TRUE(
      Eventually([&] { return Rtx3080Temperature(HttpGet(daemon_->metrics_port())) != ""; }));
  std::string before = Rtx3080Temperature(HttpGet(daemon_->metrics_port()));
  ASSERT_NE(before, "77");
  EditSimState([](sim::SimState* s) {
    sim::LoadOverride load;
    load.temperature_c = 77;
    sim::SetLoad(s, testing::kRtx3080, load);
  });
  absl::SleepFor(absl::Milliseconds(300));  // an hourly sampler does not see it
  EXPECT_EQ(Rtx3080Temperature(HttpGet(daemon_->metrics_port())), before);

  config::Config next = config_;
  next.metrics.sample_interval = absl::Milliseconds(100);
  absl::StatusOr<ReloadResult> r = daemon_->Reload(next);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(
      Eventually([&] { return Rtx3080Temperature(HttpGet(daemon_->metrics_port())) == "77"; }));
  // And keeps sampling every 100 ms: a later change shows too.
  EditSimState([](sim::SimState* s) {
    sim::LoadOverride load;
    load.temperature_c = 66;
    sim::SetLoad(s, testing::kRtx3080, load);
  });
  EXPECT_TRUE(
      Eventually([&] { return Rtx3080Temperature(HttpGet(daemon_->metrics_port())) == "66"; }));
}

bool HasCondition(const state::DeviceStore& store, const std::string& uuid,
                  const std::string& source) {
  const state::DeviceRecord* d = store.Get()->FindByUuid(uuid);
  return d != nullptr && d->health.Has(source);
}

bool InState(const state::DeviceStore& store, const std::string& uuid, state::HealthState state) {
  const state::DeviceRecord* d = store.Get()->FindByUuid(uuid);
  return d != nullptr && d->health.state == state;
}

// The probe interval reaches the liveness monitor, also while a GPU is out for a liveness
// failure: the new monitor takes over the old one's timer, so the GPU comes back once it
// answers for the (new) quiet period, and not before.
TEST_F(DaemonTest, ReloadAppliesHealthSettingsWhileAGpuIsOutAndItStillComesBack) {
  config_.health.probe_interval = absl::Milliseconds(100);
  config_.health.quiet_period = absl::Hours(1);
  ASSERT_OK(StartDaemon());
  EditSimState([](sim::SimState* s) { sim::SetLost(s, testing::kRtx5090, true); });
  ASSERT_TRUE(
      Eventually([&] { return HasCondition(daemon_->store(), testing::kRtx5090, "liveness"); }));
  EditSimState([](sim::SimState* s) { sim::SetLost(s, testing::kRtx5090, false); });

  config::Config next = config_;
  next.health.probe_interval = absl::Milliseconds(200);
  next.health.hang_timeout = absl::Milliseconds(500);
  absl::StatusOr<ReloadResult> r = daemon_->Reload(next);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->actions, Contains("liveness monitor rebuilt"));
  EXPECT_EQ(daemon_->config().health.probe_interval, absl::Milliseconds(200));
  absl::SleepFor(absl::Milliseconds(600));  // answering, but the quiet period is an hour
  EXPECT_TRUE(HasCondition(daemon_->store(), testing::kRtx5090, "liveness"));

  next.health.quiet_period = absl::Milliseconds(300);
  r = daemon_->Reload(next);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(
      Eventually([&] { return !HasCondition(daemon_->store(), testing::kRtx5090, "liveness"); }));
}

// health.kmsg turned on reads the kernel log (from its start, as at startup); an XID there
// takes the GPU out, and the XID policy's settings still apply while it is out.
TEST_F(DaemonTest, ReloadTurnsTheKernelLogOnAndKeepsThePolicyWhileAGpuIsOut) {
  std::ofstream(root_ / "dev/kmsg")
      << "4,1,100,-;NVRM: Xid (PCI:0000:01:00): 79, pid='<unknown>', name=<unknown>, GPU has "
         "fallen off the bus.\n";
  ASSERT_OK(StartDaemon());
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_FALSE(HasCondition(daemon_->store(), testing::kRtx3080, "xid"));

  config::Config next = config_;
  next.health.kmsg = true;
  absl::StatusOr<ReloadResult> r = daemon_->Reload(next);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->actions, Contains("event monitor rebuilt"));
  ASSERT_TRUE(Eventually([&] { return HasCondition(daemon_->store(), testing::kRtx3080, "xid"); }));

  // The XID policy rebuilt while the GPU is out keeps its timer: still out under the old
  // quiet period (5m), back under a short new one.
  next.health.application_xids = {13, 43};
  r = daemon_->Reload(next);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->actions, Contains("XID policy rebuilt"));
  absl::SleepFor(absl::Milliseconds(1500));  // the tick runs every second
  EXPECT_TRUE(HasCondition(daemon_->store(), testing::kRtx3080, "xid"));
  next.health.quiet_period = absl::Milliseconds(200);
  r = daemon_->Reload(next);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(
      Eventually([&] { return !HasCondition(daemon_->store(), testing::kRtx3080, "xid"); }));
  EXPECT_TRUE(daemon_->config().health.kmsg);
}

// A reload refused by the last component it prepares (an unreadable kubeconfig) leaves every
// component as it was: the event monitor that its health change would have rebuilt still
// delivers XIDs.
TEST_F(DaemonTest, AReloadRefusedLateLeavesTheEventMonitorRunning) {
  ASSERT_OK(StartDaemon());
  config::Config next = config_;
  next.health.application_xids = {13, 43};  // rebuilds the XID policy and the event monitor
  next.cluster.enabled = true;
  next.cluster.kubeconfig = (dir_ / "absent-kubeconfig").string();
  absl::StatusOr<ReloadResult> r = daemon_->Reload(next);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(KeyOf(r.status()), "cluster.kubeconfig") << r.status();
  EXPECT_EQ(daemon_->reload_errors(), 1u);

  EditSimState([](sim::SimState* s) { sim::InjectXid(s, testing::kRtx3080, 79); });
  EXPECT_TRUE(Eventually([&] { return HasCondition(daemon_->store(), testing::kRtx3080, "xid"); }));
}

// The XID history lives in health.xidHistoryFile under the host root: XID 79 (reboot the
// node) that comes back after a reboot (a new boot id), seen by a new daemon, calls for
// hardware inspection.
TEST_F(DaemonTest, TheXidHistorySurvivesARestartAndARepeatAfterRebootMeansInspectHardware) {
  const std::string kXid79 =
      "NVRM: Xid (PCI:0000:01:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the "
      "bus.\n";
  fs::create_directories(root_ / "proc/sys/kernel/random");
  std::ofstream(root_ / "proc/sys/kernel/random/boot_id") << "boot-a\n";
  std::ofstream(root_ / "dev/kmsg") << "4,1,100,-;" << kXid79;
  config_.health.kmsg = true;
  ASSERT_OK(StartDaemon());
  ASSERT_TRUE(Eventually([&] { return HasCondition(daemon_->store(), testing::kRtx3080, "xid"); }));
  const fs::path history = root_ / "var/lib/gpulet/xid-history.json";
  ASSERT_TRUE(Eventually([&] { return fs::exists(history); }));
  std::shared_ptr<const state::Snapshot> snap = daemon_->store().Get();
  const state::DeviceRecord* first = snap->FindByUuid(testing::kRtx3080);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->health.action, health::GpuActionDescription(health::GpuAction::kRebootNode));
  daemon_.reset();

  // The node rebooted; after it the same XID comes back.
  std::ofstream(root_ / "proc/sys/kernel/random/boot_id") << "boot-b\n";
  std::ofstream(root_ / "dev/kmsg") << "4,1,200,-;" << kXid79;
  ASSERT_OK(StartDaemon());
  ASSERT_TRUE(Eventually([&] { return HasCondition(daemon_->store(), testing::kRtx3080, "xid"); }));
  snap = daemon_->store().Get();
  const state::DeviceRecord* again = snap->FindByUuid(testing::kRtx3080);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->health.action,
            health::GpuActionDescription(health::GpuAction::kInspectHardware));
  EXPECT_THAT(again->health.reason, HasSubstr("came back after the recommended node reboot"));
}

// The driver's recovery action, read through the real NVML path (the simulator reports
// NVML_FI_DEV_GET_GPU_RECOVERY_ACTION when its state sets it): node reboot takes the GPU
// out with the reboot action; NONE brings it back.
TEST_F(DaemonTest, TheDriversRecoveryActionTakesTheGpuOutAndBack) {
  config_.health.probe_interval = absl::Milliseconds(100);
  ASSERT_OK(StartDaemon());
  EditSimState([](sim::SimState* s) { s->gpus[testing::kRtx5090].recovery_action = 2; });
  ASSERT_TRUE(Eventually(
      [&] { return HasCondition(daemon_->store(), testing::kRtx5090, "recovery-action"); }));
  std::shared_ptr<const state::Snapshot> snap = daemon_->store().Get();
  const state::DeviceRecord* gpu = snap->FindByUuid(testing::kRtx5090);
  ASSERT_NE(gpu, nullptr);
  EXPECT_EQ(gpu->health.state, state::HealthState::kUnhealthy);
  EXPECT_EQ(gpu->health.action, health::GpuActionDescription(health::GpuAction::kRebootNode));
  EXPECT_FALSE(HasCondition(daemon_->store(), testing::kRtx3080, "recovery-action"));
  EditSimState([](sim::SimState* s) { s->gpus[testing::kRtx5090].recovery_action = 0; });
  EXPECT_TRUE(Eventually(
      [&] { return !HasCondition(daemon_->store(), testing::kRtx5090, "recovery-action"); }));
}

// Resets a simulated card as the kernel's reset acts on a real one (sim::ResetGpu), and
// counts the resets.
class SimResetter : public node::GpuResetter {
 public:
  explicit SimResetter(fs::path state_file) : state_file_(std::move(state_file)) {}
  absl::Status Reset(absl::string_view uuid, absl::string_view bus_id) override {
    sim::SimState state;
    std::string error;
    if (!sim::LoadState(state_file_.string(), &state, &error) ||
        !sim::ResetGpu(&state, std::string(uuid)) ||
        !sim::SaveStateAtomic(state_file_.string(), state, &error)) {
      return absl::UnavailableError(absl::StrCat("sim reset failed: ", error));
    }
    absl::MutexLock lock(&mu_);
    reset_.push_back(std::string(bus_id));
    return absl::OkStatus();
  }
  std::vector<std::string> reset() {
    absl::MutexLock lock(&mu_);
    return reset_;
  }

 private:
  fs::path state_file_;
  absl::Mutex mu_;
  std::vector<std::string> reset_ ABSL_GUARDED_BY(mu_);
};

// The reset rung end to end on the homelab simulator: the driver asks for a reset of the
// 5090 while the LLM server runs on it; nothing happens until it ends; then the card is
// reset once, the inventory is taken again (the components restart on it and serve the new
// minor number), the GPU stays out for the quiet period and comes back; the 3080 is never
// touched.
TEST_F(DaemonTest, AGpuThatNeedsAResetIsResetOnceIdleAndComesBackAfterTheQuietPeriod) {
  SimResetter resetter(state_file_);
  std::atomic<int> discovered{0};
  tune_ = [&](DaemonOptions* o) {
    o->gpu_resetter = &resetter;
    // The reset moved the 5090 to another minor number (as a driver reload may).
    o->discover = [&] {
      fs::rename(root_ / "dev/nvidia1", root_ / "dev/nvidia7");
      SetDriverMinor("0000:02:00.0", 7);
      ++discovered;
      nvml::Node node = Homelab();
      node.inventory.gpus[1].minor = 7;
      return node;
    };
  };
  config_.health.reset.mode = config::RemediationMode::kOn;
  config_.health.quiet_period = absl::Seconds(2);
  config_.health.probe_interval = absl::Milliseconds(100);
  config_.metrics.sample_interval = absl::Milliseconds(100);
  ASSERT_OK(StartDaemon());
  EditSimState([](sim::SimState* s) {
    sim::SetProcesses(
        s, testing::kRtx5090,
        {sim::SimProcess{4242, "ollama", 20000, sim::ProcessType::kCompute, {}, {}, {}}});
    sim::SetRecoveryAction(s, testing::kRtx5090, NVML_GPU_RECOVERY_ACTION_GPU_RESET);
  });
  absl::StatusOr<state::StatusReport> status;
  auto reset_of_5090 = [&]() -> std::optional<state::RungStatus> {
    status = state::StatusReport::FromJsonText(HttpGet(daemon_->metrics_port(), "/status"));
    if (!status.ok() || status->gpus.size() != 2) return std::nullopt;
    return status->gpus[1].reset;
  };
  ASSERT_TRUE(Eventually([&] {
    std::optional<state::RungStatus> r = reset_of_5090();
    return r && r->state == "waiting" && absl::StrContains(r->detail, "pid 4242");
  }));
  EXPECT_FALSE(status->gpus[0].reset.has_value());
  EXPECT_TRUE(resetter.reset().empty());
  // The LLM server ends: the card is reset.
  EditSimState([](sim::SimState* s) { sim::SetProcesses(s, testing::kRtx5090, {}); });
  ASSERT_TRUE(Eventually([&] { return !resetter.reset().empty(); }, absl::Seconds(10)));
  EXPECT_EQ(resetter.reset(), (std::vector<std::string>{"0000:02:00.0"}));
  ASSERT_TRUE(Eventually([&] { return discovered.load() == 1; }));
  // On probation, then back; the restarted components serve it.
  ASSERT_TRUE(Eventually(
      [&] { return HasCondition(daemon_->store(), testing::kRtx5090, ResetRung::kSource); }));
  ASSERT_TRUE(Eventually(
      [&] { return InState(daemon_->store(), testing::kRtx5090, state::HealthState::kHealthy); },
      absl::Seconds(10)));
  EXPECT_EQ(resetter.reset().size(), 1u);
  EXPECT_EQ(daemon_->store().Get()->FindByUuid(testing::kRtx3080)->health.state,
            state::HealthState::kHealthy);
  EXPECT_TRUE(fs::exists(Socket()));
  std::ifstream spec(root_ / "var/run/cdi/gpulet.dev-gpu.yaml");
  const std::string written(std::istreambuf_iterator<char>(spec), {});
  EXPECT_THAT(written, HasSubstr("/dev/nvidia7"));
  EXPECT_THAT(written, Not(HasSubstr("/dev/nvidia1")));
  std::string metrics;
  ASSERT_TRUE(Eventually([&] {
    metrics = HttpGet(daemon_->metrics_port());
    return absl::StrContains(metrics, "gpulet_gpu_resets_total{result=\"reset\"} 1");
  })) << metrics;
}

// A card that fell off the bus and came back on another minor number (a PCI rescan; the
// simulator's returns-elsewhere, the driver's procfs written here) is served on its new
// device node without a restart of gpulet: the inventory watch sees the driver's procfs
// differ, the inventory is taken again once, and the CDI spec names /dev/nvidia12.
TEST_F(DaemonTest, ACardThatComesBackOnAnotherMinorIsServedThereWithoutARestart) {
  std::atomic<int> discovered{0};
  tune_ = [&](DaemonOptions* o) {
    o->file_check_interval = absl::Milliseconds(50);
    o->discover = [&] {
      ++discovered;
      return Homelab();
    };
  };
  config_.health.probe_interval = absl::Milliseconds(100);
  config_.metrics.sample_interval = absl::Milliseconds(100);
  ASSERT_OK(StartDaemon());
  PlayFaultStep("returns-elsewhere", 0, testing::kRtx5090);
  ASSERT_TRUE(Eventually([&] {
    return InState(daemon_->store(), testing::kRtx5090, state::HealthState::kUnhealthy);
  }));
  // Lost is not a reason to take the inventory again: a new one would drop the card.
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(discovered.load(), 0);
  PlayFaultStep("returns-elsewhere", 1, testing::kRtx5090);
  fs::rename(root_ / "dev/nvidia1", root_ / "dev/nvidia12");
  SetDriverMinor("0000:02:00.0", 12);
  ASSERT_TRUE(Eventually([&] { return discovered.load() == 1; }));
  const fs::path spec = root_ / "var/run/cdi/gpulet.dev-gpu.yaml";
  std::string written;
  ASSERT_TRUE(Eventually([&] {
    std::ifstream in(spec);
    written.assign(std::istreambuf_iterator<char>(in), {});
    return absl::StrContains(written, "/dev/nvidia12");
  })) << written;
  EXPECT_THAT(written, Not(HasSubstr("/dev/nvidia1\n")));
  EXPECT_THAT(written, HasSubstr("/dev/nvidia0"));  // the 3080, untouched
  ASSERT_TRUE(Eventually([&] {
    return InState(daemon_->store(), testing::kRtx3080, state::HealthState::kHealthy) &&
           fs::exists(Socket());
  }));
  // Mended: the watch has nothing more to ask for.
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(discovered.load(), 1);
  std::vector<std::string> told;
  for (const cluster::NodeEvent& e : daemon_->event_inbox().Drain()) {
    if (e.reason == "GpuInventoryChanged") told.push_back(e.note);
  }
  ASSERT_EQ(told.size(), 1u);
  EXPECT_THAT(told[0], HasSubstr("is /dev/nvidia12 now (served as /dev/nvidia1)"));
}

// A GPU that answers RESET_REQUIRED to every call cannot list its processes through NVML: the
// rung asks the host who holds /dev/nvidia1 open (the LLM server, by its /proc fd link here),
// waits while someone does, and resets the card once nobody does.
TEST_F(DaemonTest, AGpuThatRequiresAResetIsResetOnceNoProcessHoldsItsDeviceNode) {
  SimResetter resetter(state_file_);
  tune_ = [&](DaemonOptions* o) { o->gpu_resetter = &resetter; };
  config_.health.reset.mode = config::RemediationMode::kOn;
  config_.health.quiet_period = absl::Seconds(2);
  config_.health.probe_interval = absl::Milliseconds(100);
  config_.metrics.sample_interval = absl::Milliseconds(100);
  const fs::path fd = root_ / "proc/4242/fd/3";
  fs::create_directories(fd.parent_path());
  fs::create_symlink(root_ / "dev/nvidia1", fd);
  ASSERT_OK(StartDaemon());
  EditSimState([](sim::SimState* s) { sim::SetResetRequired(s, testing::kRtx5090, true); });
  absl::StatusOr<state::StatusReport> status;
  ASSERT_TRUE(Eventually(
      [&] {
        status = state::StatusReport::FromJsonText(HttpGet(daemon_->metrics_port(), "/status"));
        return status.ok() && status->gpus.size() == 2 && status->gpus[1].reset.has_value() &&
               status->gpus[1].reset->detail ==
                   "1 process holds /dev/nvidia1 open (pid 4242 ollama)";
      },
      absl::Seconds(10)))
      << (status.ok() && status->gpus.size() == 2 && status->gpus[1].reset
              ? status->gpus[1].reset->detail
              : "");
  EXPECT_TRUE(resetter.reset().empty());
  fs::remove(fd);  // the LLM server ends
  ASSERT_TRUE(Eventually([&] { return !resetter.reset().empty(); }, absl::Seconds(10)));
  EXPECT_EQ(resetter.reset(), (std::vector<std::string>{"0000:02:00.0"}));
  ASSERT_TRUE(Eventually(
      [&] { return InState(daemon_->store(), testing::kRtx5090, state::HealthState::kHealthy); },
      absl::Seconds(10)));
  EXPECT_EQ(resetter.reset().size(), 1u);
}

// A card that faults again right after its reset (the simulator's faults_after_reset, XID 48
// anew) is a repeat: the XID policy sends it to hardware inspection, which no reset clears,
// so it is reset once and not again (retirement counts its faults from there).
TEST_F(DaemonTest, ACardThatFaultsAgainAfterItsResetIsNotResetAgain) {
  SimResetter resetter(state_file_);
  tune_ = [&](DaemonOptions* o) { o->gpu_resetter = &resetter; };
  config_.health.reset.mode = config::RemediationMode::kOn;
  // Longer than the rung's settling time (2.3 s at this interval): the XID keeps it out.
  config_.health.quiet_period = absl::Seconds(3);
  config_.metrics.sample_interval = absl::Milliseconds(100);
  ASSERT_OK(StartDaemon());
  // The event monitor's NVML event set registers after start; an XID before it is not news.
  absl::SleepFor(absl::Milliseconds(300));
  EditSimState([](sim::SimState* s) { sim::SetProcesses(s, testing::kRtx5090, {}); });
  PlayFaultStep("fails-after-reset", 0, testing::kRtx5090);
  ASSERT_TRUE(Eventually([&] { return !resetter.reset().empty(); }, absl::Seconds(10)));
  ASSERT_TRUE(Eventually([&] {
    const state::DeviceRecord* d = daemon_->store().Get()->FindByUuid(testing::kRtx5090);
    return d != nullptr &&
           d->health.action == health::GpuActionDescription(health::GpuAction::kInspectHardware);
  }));
  EXPECT_THAT(daemon_->store().Get()->FindByUuid(testing::kRtx5090)->health.reason,
              HasSubstr("came back after the recommended GPU reset"));
  // Past the probation and the XID's quiet period: not reset again.
  absl::SleepFor(absl::Seconds(4));
  EXPECT_EQ(resetter.reset().size(), 1u);
}

// The reboot rung end to end on the homelab simulator: the 5090 falls off the bus (XID 79);
// after the grace (0 s here) gpulet asks kured for a reboot through its sentinel on the
// host, once, after the fault's recording is on the host, and records the request; the next
// boot (a new boot id, gpulet started again, the sentinel gone with /var/run's tmpfs) finds
// the request done, and when the card falls off again the budget of one a day is spent, so
// nothing more is asked.
TEST_F(DaemonTest, AGpuOnlyARebootClearsAsksKuredOnceAndTheNextBootKnowsItRebooted) {
  // A node kured runs on: the homelab's cards on Debian rather than Talos.
  std::ofstream(root_ / "etc/os-release") << "ID=debian\nVERSION_ID=\"12\"\n";
  const fs::path boot_id = root_ / "proc/sys/kernel/random/boot_id";
  fs::create_directories(boot_id.parent_path());
  std::ofstream(boot_id) << "boot-1\n";
  config_.health.reboot.mode = config::RemediationMode::kOn;
  config_.health.reboot.grace = absl::ZeroDuration();
  config_.health.probe_interval = absl::Milliseconds(100);
  config_.metrics.sample_interval = absl::Milliseconds(100);
  ASSERT_OK(StartDaemon());
  absl::SleepFor(absl::Milliseconds(300));  // the NVML event set registers after start
  PlayFaultStep("off-the-bus", 0, testing::kRtx5090);
  // A failing card: it falls off the bus, and again after every reboot (here 1.5 s after it,
  // once gpulet serves it again, rather than the script's 30 s).
  PlayFaultStep("fails-after-reboot", 0, testing::kRtx5090);
  EditSimState([](sim::SimState* s) { sim::SetFailsAfterReboot(s, testing::kRtx5090, 1.5); });
  const fs::path sentinel = root_ / "var/run/reboot-required";
  auto read = [](const fs::path& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  // The file is created (O_EXCL, so that a request already there is kept) before its line is
  // written: wait for the line, not only the file (CI once read it between the two).
  ASSERT_TRUE(Eventually([&] { return absl::StrContains(read(sentinel), "gpulet: GPU GPU-8a41"); },
                         absl::Seconds(10)))
      << read(sentinel);
  recorder::RebootRecord record((root_ / "var/lib/gpulet/reboots.json").string(), "reboots.json");
  absl::StatusOr<std::vector<recorder::RebootRequest>> kept = record.Load();
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_EQ(kept->size(), 1u);
  EXPECT_EQ((*kept)[0].boot_id, "boot-1");
  EXPECT_EQ((*kept)[0].outcome, "asked");
  std::string metrics;
  ASSERT_TRUE(Eventually([&] {
    metrics = HttpGet(daemon_->metrics_port());
    return absl::StrContains(metrics, "gpulet_node_reboots_total{result=\"asked\"} 1");
  })) << metrics;
  absl::StatusOr<state::StatusReport> status;
  ASSERT_TRUE(Eventually([&] {
    status = state::StatusReport::FromJsonText(HttpGet(daemon_->metrics_port(), "/status"));
    return status.ok() && status->gpus.size() == 2 && status->gpus[1].reboot.has_value();
  }));
  EXPECT_EQ(status->gpus[1].reboot->state, "asked");
  EXPECT_FALSE(status->gpus[0].reboot.has_value());
  // The recording of the fault was on the host before the reboot was asked for.
  EXPECT_FALSE(
      recorder::RecorderFiles((root_ / "var/lib/gpulet/recorder").string(), "r").LoadAll().empty());

  // The reboot (what kured does, and `gpulet sim reboot`): the card is back, then lost again.
  daemon_.reset();
  fs::remove(sentinel);
  std::ofstream(boot_id) << "boot-2\n";
  EditSimState([](sim::SimState* s) { sim::RebootNode(s); });
  ASSERT_OK(StartDaemon());
  ASSERT_TRUE(Eventually(
      [&] {
        absl::StatusOr<std::vector<recorder::RebootRequest>> r = record.Load();
        return r.ok() && r->size() == 1 && (*r)[0].outcome == "rebooted";
      },
      absl::Seconds(10)));
  ASSERT_TRUE(Eventually(
      [&] {
        status = state::StatusReport::FromJsonText(HttpGet(daemon_->metrics_port(), "/status"));
        return status.ok() && status->gpus.size() == 2 && status->gpus[1].reboot.has_value() &&
               status->gpus[1].reboot->state == "budget-spent";
      },
      absl::Seconds(10)));
  EXPECT_FALSE(fs::exists(sentinel));
}

// On Talos (the homelab fixture is the seed's Talos node) the rung reboots through Talos' API
// (health.reboot.via auto), after its drain through the API server: without cluster.enabled
// no request is made, the status says why, and kured's sentinel, which nothing reads on
// Talos, is never written.
TEST_F(DaemonTest, OnTalosTheRebootRungGoesThroughTalosAndSaysWhatItNeeds) {
  fs::create_directories(root_ / "proc/sys/kernel/random");
  std::ofstream(root_ / "proc/sys/kernel/random/boot_id") << "boot-1\n";
  config_.health.reboot.mode = config::RemediationMode::kOn;
  config_.health.reboot.grace = absl::ZeroDuration();
  config_.health.probe_interval = absl::Milliseconds(100);
  config_.metrics.sample_interval = absl::Milliseconds(100);
  ASSERT_OK(StartDaemon());
  EditSimState([](sim::SimState* s) { sim::SetLost(s, testing::kRtx5090, true); });
  absl::StatusOr<state::StatusReport> status;
  ASSERT_TRUE(Eventually([&] {
    status = state::StatusReport::FromJsonText(HttpGet(daemon_->metrics_port(), "/status"));
    return status.ok() && status->gpus.size() == 2 && status->gpus[1].reboot.has_value();
  }));
  EXPECT_EQ(status->gpus[1].reboot->state, "waiting");
  EXPECT_THAT(status->gpus[1].reboot->detail, HasSubstr("Talos' API needs cluster.enabled"));
  EXPECT_FALSE(fs::exists(root_ / "var/run/reboot-required"));
}

// On the bundled simulator fixture (data, not a node) no history file is written.
TEST_F(DaemonTest, NoXidHistoryIsWrittenIntoTheBundledFixture) {
  std::ofstream(root_ / "dev/kmsg")
      << "4,1,100,-;NVRM: Xid (PCI:0000:01:00): 79, pid='<unknown>', name=<unknown>, GPU has "
         "fallen off the bus.\n";
  config_.health.kmsg = true;
  DaemonOptions options;
  options.node_name = "test-node";
  options.bundled_fixture_root = true;
  daemon_ = std::make_unique<Daemon>(Homelab(), config_, options);
  ASSERT_OK(daemon_->Start());
  ASSERT_TRUE(Eventually([&] { return HasCondition(daemon_->store(), testing::kRtx3080, "xid"); }));
  EXPECT_FALSE(fs::exists(root_ / "var/lib/gpulet"));
}

TEST_F(DaemonTest, ReloadMovesThePluginToANewKubeletDirectory) {
  ASSERT_OK(StartDaemon());
  config::Config next = config_;
  next.kubelet_dir = (dir_ / "kubelet2").string();
  absl::StatusOr<ReloadResult> r = daemon_->Reload(next);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(fs::exists(dir_ / "kubelet2/device-plugins/gpulet-gpu.sock"));
  EXPECT_FALSE(fs::exists(Socket()));
}

TEST_F(DaemonTest, AStartThatFailsStopsWhatItStarted) {
  PortHolder taken;
  config_.metrics.address = Loopback(taken.port());
  absl::Status s = StartDaemon();
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;  // a failure exit, as before
  EXPECT_THAT(s.message(), HasSubstr(Loopback(taken.port())));
  EXPECT_FALSE(fs::exists(Socket()));  // the plugin had started before metrics failed
  daemon_->Stop();
}

// What a user must fix in the cluster and DRA settings fails the start as a usage error keyed
// with the setting to change (common/keyed_status.h), not only named in the words.
TEST_F(DaemonTest, ClusterAndDraSettingsThatCannotWorkAreKeyedUsageErrors) {
  gpulet::testing::FakeApiServer server;
  ASSERT_TRUE(server.Start("t").ok());
  std::ofstream(dir_ / "kubeconfig") << server.Kubeconfig("t");
  config_.cdi.spec_dir = "/var/run/cdi";
  config_.dra.enabled = true;
  struct Case {
    std::string kubeconfig, node, key;
    bool rolling = false;
  } cases[] = {
      {(dir_ / "absent-kubeconfig").string(), "test-node", "cluster.kubeconfig"},
      {(dir_ / "kubeconfig").string(), "", "dra.enabled"},
      {(dir_ / "kubeconfig").string(), "test-node", "dra.rollingUpdate", /*rolling=*/true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key);
    config::Config config = config_;
    config.cluster.kubeconfig = c.kubeconfig;
    config.dra.rolling_update = c.rolling;
    DaemonOptions options;
    options.node_name = c.node;
    Daemon daemon(Homelab(), config, options);
    absl::Status s = daemon.Start();
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_EQ(KeyOf(s), c.key) << s;
    EXPECT_TRUE(absl::StartsWith(s.message(), c.key + ": ")) << s;
    daemon.Stop();
  }
}

TEST_F(DaemonTest, AnUnusableWebConfigAtStartIsAUsageError) {
  config_.metrics.web_config_file = (dir_ / "missing-web.yaml").string();
  absl::Status s = StartDaemon();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("metrics.webConfigFile: "));
  EXPECT_EQ(KeyOf(s), "metrics.webConfigFile");
  EXPECT_FALSE(fs::exists(Socket()));
}

// A cert and key that look like PEM but that OpenSSL refuses: the web config's fault, so a
// usage error too, not a node failure.
TEST_F(DaemonTest, ACertificateOpenSslRefusesAtStartIsAUsageError) {
  std::ofstream(dir_ / "cert.pem")
      << "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
  std::ofstream(dir_ / "key.pem")
      << "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
  std::ofstream(dir_ / "web.yml") << "tls_server_config:\n  cert_file: "
                                  << (dir_ / "cert.pem").string()
                                  << "\n  key_file: " << (dir_ / "key.pem").string() << "\n";
  config_.metrics.web_config_file = (dir_ / "web.yml").string();
  absl::Status s = StartDaemon();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("metrics.webConfigFile: cannot start HTTPS"));
  EXPECT_EQ(KeyOf(s), "metrics.webConfigFile");
  EXPECT_FALSE(fs::exists(Socket()));
}

TEST_F(DaemonTest, RewritesADeletedSpecOnItsOwn) {
  DaemonOptions options;
  options.file_check_interval = absl::Milliseconds(20);
  daemon_ = std::make_unique<Daemon>(Homelab(), config_, options);
  ASSERT_OK(daemon_->Start());
  fs::path spec = root_ / "var/run/cdi/gpulet.dev-gpu.yaml";
  ASSERT_TRUE(fs::exists(spec));
  fs::remove(spec);
  EXPECT_TRUE(Eventually([&] { return fs::exists(spec); }));
}

// The seed's lockup on a two-GPU node: the RTX 5090 runs hot, its PCIe link reports errors,
// then it falls off the bus, as it did once before in an earlier boot. The flight recorder
// writes its recording to the host, the verdict is hardware with that evidence, /status shows
// it, the RTX 3080 keeps serving, the second fault retires the card (health.retire on), and
// a restarted gpulet still shows the verdict and keeps the card out.
TEST_F(DaemonTest, AGpuThatLocksUpIsRecordedJudgedAndRememberedAcrossARestart) {
  const fs::path pci = root_ / "sys/devices/pci0000:00/0000:02:00.0";
  auto aer = [&](int fatal, int correctable) {
    std::ofstream(pci / "aer_dev_fatal")
        << "Undefined 0\nDLP " << fatal << "\nTOTAL_ERR_FATAL " << fatal << "\n";
    std::ofstream(pci / "aer_dev_correctable")
        << "RxErr " << correctable << "\nTOTAL_ERR_COR " << correctable << "\n";
    std::ofstream(pci / "current_link_width") << "16\n";
    std::ofstream(pci / "current_link_speed") << "32.0 GT/s PCIe\n";
  };
  aer(0, 0);
  // It locked up once before, in an earlier boot of the node; a second time retires it.
  const fs::path dir = root_ / "var/lib/gpulet/recorder";
  recorder::RecorderFiles files(dir.string(), "/var/lib/gpulet/recorder");
  recorder::RecorderDump before;
  before.uuid = testing::kRtx5090;
  before.pci_bus_id = "0000:02:00.0";
  before.boot_id = "an-earlier-boot";
  before.fault_ms = absl::ToUnixMillis(absl::Now() - absl::Hours(30));
  before.fault = "Unhealthy: XID 79";
  before.health = "Unhealthy";
  ASSERT_TRUE(files.Write(before).ok());
  fs::create_directories(root_ / "proc/sys/kernel/random");
  std::ofstream(root_ / "proc/sys/kernel/random/boot_id") << "this-boot\n";
  config_.health.retire.mode = config::RemediationMode::kOn;
  config_.health.retire.faults = 2;
  config_.metrics.sample_interval = absl::Milliseconds(100);
  config_.health.probe_interval = absl::Milliseconds(100);
  ASSERT_OK(StartDaemon());
  absl::SleepFor(absl::Milliseconds(300));
  // The thermal excursion of the thermal-hang script, the host's AER counters, then the
  // off-the-bus script's replays and XID 79.
  PlayFaultStep("thermal-hang", 0, testing::kRtx5090);
  absl::SleepFor(absl::Milliseconds(400));
  aer(2, 57);
  PlayFaultStep("off-the-bus", 0, testing::kRtx5090);
  absl::SleepFor(absl::Milliseconds(300));
  PlayFaultStep("off-the-bus", 1, testing::kRtx5090);

  ASSERT_TRUE(Eventually([&] { return files.LoadAll().size() == 2; }, absl::Seconds(20)));
  // One incident, one dump: the XID that made it Unhealthy does not get one of its own once
  // it has settled (kXidSettle).
  absl::SleepFor(recorder::kXidSettle + absl::Milliseconds(500));
  std::vector<recorder::RecorderFiles::Loaded> loaded = files.LoadAll();
  ASSERT_EQ(loaded.size(), 2u);
  ASSERT_TRUE(loaded[1].dump.ok()) << loaded[1].dump.status();
  const recorder::RecorderDump& dump = *loaded[1].dump;
  EXPECT_EQ(dump.uuid, testing::kRtx5090);
  EXPECT_THAT(dump.fault, HasSubstr("Unhealthy"));
  EXPECT_EQ(dump.node, "test-node");
  // It names pods and processes: not for every user of the node.
  EXPECT_EQ(
      fs::status(dir / fs::path(loaded[0].path).filename()).permissions() & fs::perms::others_read,
      fs::perms::none);
  EXPECT_EQ(dump.boot_id, "this-boot");
  recorder::Verdict v = recorder::Assess(dump, std::vector<recorder::RecorderDump>{before});
  EXPECT_EQ(v.cause, recorder::Cause::kHardware) << recorder::TimelineText(dump, v);
  std::string evidence;
  for (const recorder::Evidence& e : v.evidence) absl::StrAppend(&evidence, e.text, "\n");
  EXPECT_THAT(evidence, HasSubstr("94 °C"));
  EXPECT_THAT(evidence, HasSubstr("2 fatal PCIe (AER) errors"));
  EXPECT_THAT(evidence, HasSubstr("in 1 earlier boot of the node"));
  // Its second fault: retired, in the file that outlives the reboot.
  recorder::RetiredFile retired((root_ / "var/lib/gpulet/retired.json").string(), "retired.json");
  ASSERT_TRUE(Eventually(
      [&] { return retired.Load().ok() && retired.Load()->count(testing::kRtx5090) == 1; }));

  // /status: the verdict on the 5090; nothing on the 3080, which stays in service.
  absl::StatusOr<state::StatusReport> status;
  ASSERT_TRUE(Eventually([&] {
    status = state::StatusReport::FromJsonText(HttpGet(daemon_->metrics_port(), "/status"));
    return status.ok() && status->gpus.size() == 2 && status->gpus[1].last_fault.has_value() &&
           status->gpus[1].last_fault->at > absl::Now() - absl::Minutes(1);
  }));
  EXPECT_EQ(status->gpus[1].last_fault->verdict, "hardware");
  EXPECT_THAT(status->gpus[1].last_fault->file, HasSubstr("/var/lib/gpulet/recorder/GPU-8a41"));
  EXPECT_FALSE(status->gpus[0].last_fault.has_value());
  EXPECT_EQ(status->gpus[0].health, state::HealthState::kHealthy);

  // A restart (the simulator's faults cleared) reads the recording back.
  daemon_.reset();
  EditSimState([](sim::SimState* s) { sim::Reset(s); });
  ASSERT_OK(StartDaemon());
  ASSERT_TRUE(Eventually([&] {
    status = state::StatusReport::FromJsonText(HttpGet(daemon_->metrics_port(), "/status"));
    return status.ok() && status->gpus.size() == 2 && status->gpus[1].last_fault.has_value();
  }));
  EXPECT_EQ(status->gpus[1].last_fault->verdict, "hardware");
  // Still out after the restart: the card was retired, and says what to do about it.
  EXPECT_EQ(status->gpus[1].health, state::HealthState::kUnhealthy);
  EXPECT_THAT(status->gpus[1].reason.value_or(""), HasSubstr("retired: 2 faults"));
  EXPECT_EQ(status->gpus[0].health, state::HealthState::kHealthy);
  // `gpulet status` says it in a line a person reads.
  auto printed = testing::RunProgram(
      {gpulet::testing::GpuletBinary(), "status", "--address", Loopback(daemon_->metrics_port())});
  EXPECT_THAT(printed.out, HasSubstr("last fault: "));
  EXPECT_THAT(printed.out, HasSubstr("verdict hardware: the card, its slot"));
  EXPECT_THAT(printed.out, HasSubstr("(gpulet postmortem --gpu GPU-8a41"));
}

// A card retired before a reboot stays out after it, from the first answer gpulet gives; the
// other GPU serves; clearing the file brings it back within a file check.
TEST_F(DaemonTest, ARetiredCardStaysOutAcrossARestartAndComesBackWhenCleared) {
  recorder::RetiredFile file((root_ / "var/lib/gpulet/retired.json").string(),
                             "/var/lib/gpulet/retired.json");
  ASSERT_TRUE(
      file.Save({{testing::kRtx5090, {"0000:02:00.0", 1780000000, "3 faults within 168h"}}}).ok());
  // A recording cut short (the power went mid-write on another system) is skipped, not fatal.
  fs::create_directories(root_ / "var/lib/gpulet/recorder");
  std::ofstream(root_ / "var/lib/gpulet/recorder/GPU-x-1780000000000.json") << "{\"version\": 1,";
  DaemonOptions options;
  options.node_name = "test-node";
  options.file_check_interval = absl::Milliseconds(100);
  daemon_ = std::make_unique<Daemon>(Homelab(), config_, options);
  ASSERT_OK(daemon_->Start());
  const state::DeviceRecord* gpu = daemon_->store().Get()->FindByUuid(testing::kRtx5090);
  ASSERT_NE(gpu, nullptr);
  EXPECT_EQ(gpu->health.state, state::HealthState::kUnhealthy);
  EXPECT_THAT(gpu->health.reason, HasSubstr("retired: 3 faults within 168h"));
  EXPECT_EQ(daemon_->store().Get()->FindByUuid(testing::kRtx3080)->health.state,
            state::HealthState::kHealthy);
  ASSERT_TRUE(file.Save({}).ok());
  EXPECT_TRUE(Eventually([&] {
    return daemon_->store().Get()->FindByUuid(testing::kRtx5090)->health.state ==
           state::HealthState::kHealthy;
  }));
}

}  // namespace
}  // namespace gpulet::daemon
