// MachineApiRebooter against tests/talos/apid_standin.go: a stand-in for Talos' apid and
// machined built from Talos' machinery module (its generated machine API, its role package,
// and the talosconfig and certificates Talos' ServiceAccount controller makes, with the
// Ed25519 key label as Talos writes it), served by grpc-go with the TLS settings of Talos'
// crypto library (TLS 1.3, ALPN h2, client certificates required). A real Talos node is the
// real-component check it stands in for; the tests cannot have one.
#include "talos/machine_client.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "talos/talosconfig.h"
#include "testing/files.h"
#include "testing/real_tools.h"

namespace gpulet::talos {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

// The stand-in, started with `args` in a scratch directory; stopped (stdin closed, then
// SIGTERM) at the end.
class StandIn {
 public:
  bool Start(const std::string& tool, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {tool, "--dir", dir_.path()};
    argv.insert(argv.end(), args.begin(), args.end());
    int in[2];
    if (pipe2(in, O_CLOEXEC) != 0) return false;
    const std::string log = absl::StrCat(dir_.path(), "/stderr.log");
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      dup2(in[0], 0);
      const int err = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (err >= 0) {
        dup2(err, 1);
        dup2(err, 2);
      }
      std::vector<char*> cargv;
      for (std::string& a : argv) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      execv(cargv[0], cargv.data());
      _exit(127);
    }
    close(in[0]);
    stdin_ = in[1];
    for (int i = 0; i < 600 && !fs::exists(path("addr")); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return fs::exists(path("addr"));
  }
  ~StandIn() {
    if (stdin_ >= 0) close(stdin_);
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
  }
  std::string path(const std::string& name) const { return absl::StrCat(dir_.path(), "/", name); }
  std::string addr() const { return testing::ReadTextFile(path("addr")); }
  std::string reboots() const { return testing::ReadTextFile(path("reboots.jsonl")); }
  std::string log() const { return testing::ReadTextFile(path("stderr.log")); }

 private:
  testing::ScratchDir dir_;
  pid_t pid_ = -1;
  int stdin_ = -1;
};

class TalosMachineApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tool_ = testing::RealTool("talos-apid-standin");
    GPULET_REQUIRE_REAL_TOOL(tool_, "talos-apid-standin");
    ASSERT_TRUE(
        standin_.Start(tool_, {"--node", "10.0.0.7", "--client", "config=os:operator", "--client",
                               "reader=os:reader", "--foreign-client", "foreign"}))
        << standin_.log();
  }

  MachineApiOptions Options(const std::string& client, const std::string& node = "10.0.0.7") {
    MachineApiOptions o;
    o.talosconfig = standin_.path(client);
    o.node = node;
    o.dial = standin_.addr();  // talos.default is a cluster name; the certificate carries it
    o.timeout = absl::Seconds(20);
    return o;
  }

  std::string tool_;
  StandIn standin_;
};

// Talos' own talosconfig, read as Talos wrote it: the Ed25519 key under Talos' label, the
// role in the certificate's Organization.
TEST_F(TalosMachineApiTest, ReadsTheTalosconfigTalosWrites) {
  const std::string text = testing::ReadTextFile(standin_.path("config"));
  absl::StatusOr<Talosconfig> c = ParseTalosconfig(text, standin_.path("config"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->host, "talos.default");
  EXPECT_EQ(c->port, kApidPort);
  EXPECT_THAT(c->key_pem, HasSubstr("-----BEGIN PRIVATE KEY-----"));
  EXPECT_EQ(CertificateRoles(c->crt_pem), std::vector<std::string>{"os:operator"});
  EXPECT_EQ(CertificateRoles(
                ParseTalosconfig(testing::ReadTextFile(standin_.path("reader")), "r")->crt_pem),
            std::vector<std::string>{"os:reader"});
}

// os:operator reboots the node the metadata names, not the control-plane node that answered.
TEST_F(TalosMachineApiTest, AnOperatorRebootsTheNodeItNames) {
  MachineApiRebooter rebooter(Options("config"));
  absl::Status s = rebooter.Reboot("GPU-5090 (GPU 1): XID 79", "XID 79");
  ASSERT_TRUE(s.ok()) << s << "\n" << standin_.log();
  const std::string reboots = standin_.reboots();
  EXPECT_THAT(reboots, HasSubstr("\"node\":\"10.0.0.7\""));
  EXPECT_THAT(reboots, HasSubstr("\"mode\":\"DEFAULT\""));
  EXPECT_THAT(reboots, HasSubstr("os:operator"));
  EXPECT_THAT(reboots, ::testing::Not(HasSubstr("controlplane-1")));
  EXPECT_THAT(rebooter.Describe(), HasSubstr("node 10.0.0.7"));
  // Twice on one rebooter: each call has its own connection.
  ASSERT_TRUE(rebooter.Reboot("again", "XID 79").ok());
  MachineApiOptions power = Options("config");
  power.mode = RebootMode::kPowercycle;
  ASSERT_TRUE(MachineApiRebooter(power).Reboot("power", "XID 79").ok());
  EXPECT_THAT(standin_.reboots(), HasSubstr("\"mode\":\"POWERCYCLE\""));
}

// os:reader may not reboot: refused before any call, naming the roles and the fix.
TEST_F(TalosMachineApiTest, AReaderIsRefusedNamingTheRoleToGrant) {
  absl::Status s = MachineApiRebooter(Options("reader")).Reboot("x", "XID 79");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_THAT(s.message(), HasSubstr("os:reader"));
  EXPECT_THAT(s.message(), HasSubstr("kubernetesTalosAPIAccess"));
  EXPECT_EQ(standin_.reboots(), "");
}

// A node apid cannot reach: Unavailable (asked again later), naming the node.
TEST_F(TalosMachineApiTest, AnUnreachableNodeIsUnavailable) {
  absl::Status s = MachineApiRebooter(Options("config", "10.0.0.9")).Reboot("x", "XID 79");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("10.0.0.9"));
  EXPECT_EQ(standin_.reboots(), "");
}

// A client certificate from another CA: the server refuses it in the handshake; nothing is
// rebooted.
TEST_F(TalosMachineApiTest, AForeignCertificateRebootsNothing) {
  absl::Status s = MachineApiRebooter(Options("foreign")).Reboot("x", "XID 79");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("CA is unknown")) << s.message();
  EXPECT_EQ(standin_.reboots(), "");
}

// What gpulet checks of the server: its certificate must chain to the talosconfig's CA and
// carry the endpoint's name.
TEST_F(TalosMachineApiTest, AServerThatIsNotTalosIsRefused) {
  // The stand-in's certificate names talos.default, not "talos.example".
  const std::string text = testing::ReadTextFile(standin_.path("config"));
  std::string renamed = text;
  const size_t at = renamed.find("talos.default");
  ASSERT_NE(at, std::string::npos);
  renamed.replace(at, 13, "talos.example");
  const std::string path = standin_.path("renamed");
  std::ofstream(path) << renamed;
  absl::Status s = MachineApiRebooter(Options("renamed")).Reboot("x", "XID 79");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("talos.example"));
  EXPECT_EQ(standin_.reboots(), "");
}

TEST_F(TalosMachineApiTest, MissingPiecesAreNamed) {
  MachineApiOptions o = Options("config");
  o.node = "";
  absl::Status s = MachineApiRebooter(o).Reboot("x", "XID 79");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("GPULET_NODE_IP"));
  s = MachineApiRebooter(Options("absent")).Reboot("x", "XID 79");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("talos.dev ServiceAccount"));
}

}  // namespace
}  // namespace gpulet::talos
