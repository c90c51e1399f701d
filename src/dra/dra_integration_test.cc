// The DRA kubelet plugin against the kubelet stand-in (testing/fake_dra_kubelet.h), over real
// unix sockets: registration, kubelet restarts, lost sockets, prepare/unprepare in both API
// versions, a gpulet killed between prepare and unprepare, and the device-health stream.
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dra/dra_service.h"
#include "dra/kubelet_plugin.h"
#include "dra/prepared_claims.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "state/device_store.h"
#include "testing/fake_claim_preparer.h"
#include "testing/fake_dra_kubelet.h"
#include "testing/files.h"
#include "testing/wait_for.h"

namespace gpulet::dra {
namespace {

using ::gpulet::testing::FakeClaimPreparer;
using ::gpulet::testing::FakeDraKubelet;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kDriver[] = "gpu.gpulet.dev";
const absl::Duration kLimit = absl::Seconds(10);

unsigned ModeOf(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? st.st_mode & 0777 : 0;
}

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

// What a killed process leaves: a socket file nobody listens on.
void LeaveDeadSocket(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  unlink(path.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  close(fd);
}

class DraIntegrationTest : public ::testing::Test {
 protected:
  // gpulet's side: the claims (on the checkpoint) and the plugin serving them.
  // With `health`, the DRA socket serves DRAResourceHealth from it too.
  void StartGpulet(const state::DeviceStore* health = nullptr) {
    absl::StatusOr<std::unique_ptr<PreparedClaims>> c =
        PreparedClaims::Open(checkpoint_, &preparer_);
    ASSERT_TRUE(c.ok()) << c.status();
    claims_ = std::move(*c);
    plugin_ = std::make_unique<KubeletPlugin>(kDriver, dir_.path(), claims_.get(),
                                              absl::Milliseconds(50));
    if (health != nullptr) {
      HealthService::Options o;
      o.pool = "node-a";
      plugin_->SetHealthSource(health, o);
    }
    absl::Status s = plugin_->Start();
    ASSERT_TRUE(s.ok()) << s;
  }
  void StopGpulet() {
    plugin_.reset();
    claims_.reset();
  }

  static std::vector<testing::drapb::Claim> Claims(std::initializer_list<const char*> uids) {
    std::vector<testing::drapb::Claim> out;
    for (const char* uid : uids) {
      out.push_back(FakeDraKubelet::MakeClaim("ml", uid, std::string("claim-") + uid));
    }
    return out;
  }

  gpulet::testing::ScratchDir dir_;
  std::string checkpoint_ = dir_.path() + "/gpulet/dra-checkpoint.json";
  FakeClaimPreparer preparer_;
  FakeDraKubelet kubelet_{dir_.path()};
  std::unique_ptr<PreparedClaims> claims_;
  std::unique_ptr<KubeletPlugin> plugin_;
};

TEST_F(DraIntegrationTest, RegistersWithTheKubeletOverRealSockets) {
  ASSERT_NO_FATAL_FAILURE(StartGpulet());
  ASSERT_TRUE(kubelet_.Start().ok());
  ASSERT_TRUE(kubelet_.WaitForRegistrations(1, kLimit));
  std::optional<FakeDraKubelet::Plugin> p = kubelet_.plugin(kDriver);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->info.type(), "DRAPlugin");
  EXPECT_EQ(p->info.name(), kDriver);
  const DraPaths paths = DraPaths::For(dir_.path(), kDriver);
  EXPECT_EQ(p->socket, paths.registration_socket);
  EXPECT_EQ(p->info.endpoint(), paths.dra_socket);
  EXPECT_THAT(p->info.supported_versions(), ElementsAre("v1.DRAPlugin", "v1beta1.DRAPlugin"));
  EXPECT_EQ(p->version, "v1");
  ASSERT_TRUE(plugin_->registration().WaitForNotifications(1, kLimit));
  EXPECT_TRUE(plugin_->verdict().registered);
  EXPECT_EQ(ModeOf(paths.registration_socket), 0600u);
  EXPECT_EQ(ModeOf(paths.dra_socket), 0600u);
  EXPECT_EQ(ModeOf(paths.registry_dir), 0750u);
  EXPECT_EQ(ModeOf(paths.plugin_dir), 0750u);

  StopGpulet();
  EXPECT_FALSE(Exists(paths.registration_socket));
  EXPECT_FALSE(Exists(paths.dra_socket));
  EXPECT_TRUE(kubelet_.WaitForDeregistered(kDriver, kLimit));
}

TEST_F(DraIntegrationTest, ARefusalIsRecordedWithTheKubeletsReason) {
  kubelet_.set_versions({"v2"});
  ASSERT_TRUE(kubelet_.Start().ok());
  ASSERT_NO_FATAL_FAILURE(StartGpulet());
  ASSERT_TRUE(plugin_->registration().WaitForNotifications(1, kLimit));
  RegistrationServer::Verdict v = plugin_->verdict();
  EXPECT_FALSE(v.registered);
  EXPECT_THAT(v.error, HasSubstr("supports none of this kubelet's versions"));
  EXPECT_FALSE(kubelet_.Prepare(kDriver, Claims({"a"})).ok());
}

TEST_F(DraIntegrationTest, AKubeletRestartRegistersAgain) {
  ASSERT_TRUE(kubelet_.Start().ok());
  ASSERT_NO_FATAL_FAILURE(StartGpulet());
  ASSERT_TRUE(kubelet_.WaitForRegistrations(1, kLimit));
  ASSERT_TRUE(kubelet_.Restart().ok());
  ASSERT_TRUE(kubelet_.WaitForRegistrations(2, kLimit));
  ASSERT_TRUE(plugin_->registration().WaitForNotifications(2, kLimit));
  EXPECT_TRUE(plugin_->verdict().registered);
  EXPECT_EQ(plugin_->reserves(), 0);  // nothing to serve again: the sockets stayed
  auto r = kubelet_.Prepare(kDriver, Claims({"a"}));
  ASSERT_TRUE(r.ok()) << r.status();
}

TEST_F(DraIntegrationTest, ADeletedSocketIsServedAndRegisteredAgain) {
  ASSERT_TRUE(kubelet_.Start().ok());
  ASSERT_NO_FATAL_FAILURE(StartGpulet());
  ASSERT_TRUE(kubelet_.WaitForRegistrations(1, kLimit));
  const DraPaths& paths = plugin_->paths();
  ASSERT_EQ(unlink(paths.registration_socket.c_str()), 0);
  ASSERT_TRUE(kubelet_.WaitForRegistrations(2, kLimit));
  EXPECT_NE(testing::WaitFor([&] { return plugin_->reserves() >= 1; }), absl::InfiniteDuration());
  // The DRA service's socket too: the registration is renewed so the kubelet dials anew.
  ASSERT_EQ(unlink(paths.dra_socket.c_str()), 0);
  ASSERT_TRUE(kubelet_.WaitForRegistrations(3, kLimit));
  auto r = kubelet_.Prepare(kDriver, Claims({"a"}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->claims().at("a").error(), "");
}

TEST_F(DraIntegrationTest, PrepareUnprepareRoundTripInBothVersions) {
  for (const char* version : {"v1", "v1beta1"}) {
    SCOPED_TRACE(version);
    kubelet_.set_versions({version});
    ASSERT_TRUE(kubelet_.Restart().ok());
    if (!plugin_) {
      ASSERT_NO_FATAL_FAILURE(StartGpulet());
    }
    ASSERT_TRUE(testing::WaitFor([&] {
                  auto p = kubelet_.plugin(kDriver);
                  return p && p->registered && p->version == version;
                }) != absl::InfiniteDuration());
    const std::string uid = std::string("uid-") + version;
    preparer_.SetDevices(uid, {PreparedDevice{.request_names = {"gpu"},
                                              .pool = "node-a",
                                              .device = "gpu-1",
                                              .cdi_device_ids = {"gpulet.dev/claim=" + uid},
                                              .share_id = "share-1"}});
    auto prepared = kubelet_.Prepare(kDriver, Claims({uid.c_str()}));
    ASSERT_TRUE(prepared.ok()) << prepared.status();
    const auto& entry = prepared->claims().at(uid);
    EXPECT_EQ(entry.error(), "");
    ASSERT_EQ(entry.devices_size(), 1);
    EXPECT_THAT(entry.devices(0).request_names(), ElementsAre("gpu"));
    EXPECT_EQ(entry.devices(0).pool_name(), "node-a");
    EXPECT_EQ(entry.devices(0).device_name(), "gpu-1");
    EXPECT_THAT(entry.devices(0).cdi_device_ids(), ElementsAre("gpulet.dev/claim=" + uid));
    // v1beta1 has no share IDs.
    EXPECT_EQ(entry.devices(0).has_share_id(), std::string(version) == "v1");

    // Asked again (the kubelet retries after its own restart): the same answer, not prepared
    // twice.
    auto again = kubelet_.Prepare(kDriver, Claims({uid.c_str()}));
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->SerializeAsString(), prepared->SerializeAsString());

    auto un = kubelet_.Unprepare(kDriver, Claims({uid.c_str(), "never-prepared"}));
    ASSERT_TRUE(un.ok()) << un.status();
    ASSERT_EQ(un->claims_size(), 2);  // every claim answered, even with an empty entry
    EXPECT_EQ(un->claims().at(uid).error(), "");
    EXPECT_EQ(un->claims().at("never-prepared").error(), "");
    EXPECT_THAT(preparer_.made(), IsEmpty());
  }
  EXPECT_EQ(preparer_.prepare_calls(), 2);
  EXPECT_EQ(preparer_.unprepare_calls(), 2);
}

TEST_F(DraIntegrationTest, PerClaimErrorsReachTheKubelet) {
  ASSERT_TRUE(kubelet_.Start().ok());
  ASSERT_NO_FATAL_FAILURE(StartGpulet());
  ASSERT_TRUE(kubelet_.WaitForRegistrations(1, kLimit));
  preparer_.FailPrepare("b", "ResourceClaim ml/claim-b is allocated to another node");
  auto r = kubelet_.Prepare(kDriver, Claims({"a", "b"}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->claims().at("a").error(), "");
  EXPECT_EQ(r->claims().at("b").error(), "ResourceClaim ml/claim-b is allocated to another node");
  EXPECT_EQ(r->claims().at("b").devices_size(), 0);
}

// gpulet killed (no Stop, sockets left behind) between prepare and unprepare; a new gpulet on
// the same checkpoint answers the unprepare with what the first one prepared.
TEST_F(DraIntegrationTest, AKillBetweenPrepareAndUnprepareLosesNothing) {
  ASSERT_TRUE(kubelet_.Start().ok());
  ASSERT_NO_FATAL_FAILURE(StartGpulet());
  ASSERT_TRUE(kubelet_.WaitForRegistrations(1, kLimit));
  auto prepared = kubelet_.Prepare(kDriver, Claims({"a", "b"}));
  ASSERT_TRUE(prepared.ok()) << prepared.status();

  const DraPaths paths = plugin_->paths();
  StopGpulet();
  ASSERT_NO_FATAL_FAILURE(LeaveDeadSocket(paths.dra_socket));
  ASSERT_NO_FATAL_FAILURE(LeaveDeadSocket(paths.registration_socket));
  // The preparer's work (CDI specs, in a real one) is still there, as after a kill.
  EXPECT_THAT(preparer_.made(), ElementsAre("a", "b"));

  ASSERT_NO_FATAL_FAILURE(StartGpulet());
  ASSERT_TRUE(kubelet_.WaitForRegistrations(2, kLimit));
  auto again = kubelet_.Prepare(kDriver, Claims({"a"}));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->claims().at("a").SerializeAsString(),
            prepared->claims().at("a").SerializeAsString());
  EXPECT_EQ(preparer_.prepare_calls(), 1);

  auto un = kubelet_.Unprepare(kDriver, Claims({"a", "b"}));
  ASSERT_TRUE(un.ok()) << un.status();
  EXPECT_EQ(un->claims().at("a").error(), "");
  EXPECT_EQ(un->claims().at("b").error(), "");
  EXPECT_THAT(preparer_.unprepared_uids_seen(), ElementsAre("a", "b"));
  EXPECT_THAT(preparer_.made(), IsEmpty());
  EXPECT_THAT(claims_->prepared(), IsEmpty());
}

TEST_F(DraIntegrationTest, StartRefusesBadNamesAndPathsNamingThem) {
  absl::StatusOr<std::unique_ptr<PreparedClaims>> claims =
      PreparedClaims::Open(checkpoint_, &preparer_);
  ASSERT_TRUE(claims.ok());
  for (const char* driver :
       {"", "../etc", "GPU.example.com", "gpu..example.com", "-gpu.dev", "gpu/x"}) {
    SCOPED_TRACE(driver);
    KubeletPlugin plugin(driver, dir_.path(), claims->get());
    absl::Status s = plugin.Start();
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("is not a DNS subdomain"));
  }
  KubeletPlugin bad_instance(kDriver, dir_.path(), claims->get(), absl::Seconds(1), "../x");
  absl::Status bad = bad_instance.Start();
  EXPECT_TRUE(absl::IsInvalidArgument(bad)) << bad;
  EXPECT_THAT(std::string(bad.message()), HasSubstr("not a pod UID"));
  EXPECT_FALSE(bad_instance.service().running());
  EXPECT_TRUE(CheckDriverName("gpu.gpulet.dev").ok());
  EXPECT_TRUE(CheckDriverName("a-1.b").ok());
  // A kubelet directory so deep that the socket path cannot be a unix socket address.
  KubeletPlugin deep(kDriver, dir_.path() + "/" + std::string(100, 'k'), claims->get());
  absl::Status s = deep.Start();
  EXPECT_THAT(std::string(s.message()), HasSubstr("unix sockets allow at most 107"));
  EXPECT_FALSE(deep.service().running());
}

constexpr char kUidA[] = "aaaaaaaa-0000-4000-8000-00000000000a";
constexpr char kUidB[] = "bbbbbbbb-0000-4000-8000-00000000000b";

TEST(DraPathsTest, AnInstanceMakesTheSocketNamesUnique) {
  const DraPaths plain = DraPaths::For("/k", kDriver);
  EXPECT_EQ(plain.registration_socket, "/k/plugins_registry/gpu.gpulet.dev-reg.sock");
  EXPECT_EQ(plain.dra_socket, "/k/plugins/gpu.gpulet.dev/dra.sock");
  // The kubeletplugin helper's RollingUpdate(uid) names.
  const DraPaths a = DraPaths::For("/k", kDriver, kUidA);
  EXPECT_EQ(a.registry_dir, plain.registry_dir);
  EXPECT_EQ(a.plugin_dir, plain.plugin_dir);
  EXPECT_EQ(a.registration_socket,
            absl::StrCat("/k/plugins_registry/gpu.gpulet.dev-", kUidA, "-reg.sock"));
  EXPECT_EQ(a.dra_socket, absl::StrCat("/k/plugins/gpu.gpulet.dev/dra-", kUidA, ".sock"));
  EXPECT_TRUE(CheckInstanceName("").ok());
  EXPECT_TRUE(CheckInstanceName(kUidA).ok());
  for (const char* bad : {"a", "../x", "AAAAAAAA-0000-4000-8000-00000000000A",
                          "aaaaaaaa-0000-4000-8000-00000000000a/"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(CheckInstanceName(bad))) << bad;
  }
}

// A rolling update in one process: two instances of the driver, each with its own sockets and
// its own PreparedClaims on the shared checkpoint. The kubelet calls the newer one; when it
// goes, the older one again; each removes only its own sockets.
TEST_F(DraIntegrationTest, TwoInstancesServeSideBySideAndTheKubeletCallsTheNewest) {
  ASSERT_TRUE(kubelet_.Start().ok());
  auto open_claims = [&](FakeClaimPreparer* p) {
    absl::StatusOr<std::unique_ptr<PreparedClaims>> c = PreparedClaims::Open(checkpoint_, p);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  };
  FakeClaimPreparer preparer_b;
  std::unique_ptr<PreparedClaims> claims_a = open_claims(&preparer_);
  std::unique_ptr<PreparedClaims> claims_b = open_claims(&preparer_b);
  ASSERT_TRUE(claims_a && claims_b);
  auto a = std::make_unique<KubeletPlugin>(kDriver, dir_.path(), claims_a.get(),
                                           absl::Milliseconds(50), kUidA);
  ASSERT_TRUE(a->Start().ok());
  ASSERT_TRUE(kubelet_.WaitForInUse(kDriver, a->paths().registration_socket, kLimit));
  auto r = kubelet_.Prepare(kDriver, Claims({"x"}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(preparer_.prepare_calls(), 1);

  KubeletPlugin b(kDriver, dir_.path(), claims_b.get(), absl::Milliseconds(50), kUidB);
  ASSERT_TRUE(b.Start().ok());
  EXPECT_THAT(b.removed_stale(), IsEmpty());  // A is alive: its sockets are left alone
  ASSERT_TRUE(kubelet_.WaitForInUse(kDriver, b.paths().registration_socket, kLimit));
  EXPECT_EQ(kubelet_.instances(kDriver).size(), 2u);
  r = kubelet_.Prepare(kDriver, Claims({"y"}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(preparer_b.prepare_calls(), 1);

  // The newest goes: only its instance is deregistered, and the kubelet falls back to A.
  b.Stop();
  EXPECT_FALSE(Exists(b.paths().registration_socket));
  EXPECT_FALSE(Exists(b.paths().dra_socket));
  EXPECT_TRUE(Exists(a->paths().registration_socket));
  ASSERT_TRUE(kubelet_.WaitForInUse(kDriver, a->paths().registration_socket, kLimit));
  // A unprepares what B prepared, with B's record.
  auto un = kubelet_.Unprepare(kDriver, Claims({"y"}));
  ASSERT_TRUE(un.ok()) << un.status();
  EXPECT_EQ(un->claims().at("y").error(), "");
  EXPECT_THAT(preparer_.unprepared_uids_seen(), ElementsAre("y"));
  a.reset();
  EXPECT_TRUE(kubelet_.WaitForDeregistered(kDriver, kLimit));
}

// The kubelet picks the instance, then calls it: a pick made just before the registration
// went (in a rolling update, just before the new instance registered) sends its call after.
// Stop keeps serving until calls stop coming, so that call is answered, not refused.
TEST_F(DraIntegrationTest, StopServesACallPickedBeforeTheRegistrationWent) {
  ASSERT_NO_FATAL_FAILURE(StartGpulet());
  ASSERT_TRUE(kubelet_.Start().ok());
  const DraPaths paths = DraPaths::For(dir_.path(), kDriver);
  ASSERT_TRUE(kubelet_.WaitForInUse(kDriver, paths.registration_socket, kLimit));
  std::optional<FakeDraKubelet::Plugin> picked = kubelet_.plugin(kDriver);
  ASSERT_TRUE(picked.has_value());
  // Bounds far above a loaded machine's delays, so the late call below always lands in time.
  const absl::Duration quiet = absl::Seconds(2);
  plugin_->set_drain(quiet, absl::Seconds(20));
  absl::Time stopped;
  std::thread stopper([&] {
    plugin_->Stop();
    stopped = absl::Now();
  });
  ASSERT_NE(gpulet::testing::WaitFor([&] { return !Exists(paths.registration_socket); }),
            absl::InfiniteDuration());
  const absl::Time late_at = absl::Now();
  absl::StatusOr<testing::drapb::NodePrepareResourcesResponse> r =
      kubelet_.PrepareOn(*picked, Claims({"late"}));
  stopper.join();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->claims().at("late").error(), "");
  EXPECT_EQ(preparer_.prepare_calls(), 1);
  // The quiet period counts from the late call's arrival: Stop ended no sooner than `quiet`
  // after it was sent.
  EXPECT_GE(stopped, late_at + quiet);
  EXPECT_FALSE(Exists(paths.dra_socket));
  EXPECT_TRUE(kubelet_.WaitForDeregistered(kDriver, kLimit));
}

// The drain's bounds, on the DRA service alone: without calls it lasts `quiet`; with a kubelet
// that keeps calling it ends at `at_most` all the same.
TEST_F(DraIntegrationTest, TheDrainEndsAfterTheQuietPeriodOrAtItsLimit) {
  absl::StatusOr<std::unique_ptr<PreparedClaims>> c = PreparedClaims::Open(checkpoint_, &preparer_);
  ASSERT_TRUE(c.ok()) << c.status();
  DraPluginServer server(dir_.path() + "/plugins/" + kDriver + "/dra.sock", c->get());
  EXPECT_EQ(server.Drain(absl::Seconds(5), absl::Seconds(5)), 0);  // not serving: no wait
  ASSERT_TRUE(server.Start().ok());
  FakeDraKubelet::Plugin endpoint;
  endpoint.info.set_endpoint(server.socket_path());
  endpoint.version = "v1";

  absl::Time start = absl::Now();
  EXPECT_EQ(server.Drain(absl::Milliseconds(300), absl::Seconds(30)), 0);
  absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Milliseconds(300));
  EXPECT_LT(took, absl::Seconds(10));

  std::atomic<bool> stop{false};
  std::atomic<int> failed{0};
  std::thread caller([&] {
    for (int i = 0; !stop.load(); ++i) {
      auto r = kubelet_.PrepareOn(endpoint, Claims({i % 2 == 0 ? "a" : "b"}));
      if (!r.ok()) failed.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  start = absl::Now();
  const int served = server.Drain(absl::Seconds(1), absl::Seconds(2));
  took = absl::Now() - start;
  stop.store(true);
  caller.join();
  EXPECT_GT(served, 0);
  EXPECT_GE(took, absl::Seconds(1));
  EXPECT_LT(took, absl::Seconds(2) + absl::Seconds(3));  // the limit, plus one sleep's slack
  EXPECT_EQ(failed.load(), 0);
  server.Stop();
  EXPECT_FALSE(Exists(server.socket_path()));
}

TEST_F(DraIntegrationTest, StartRemovesOnlyStaleSocketsOfOtherInstances) {
  const DraPaths legacy = DraPaths::For(dir_.path(), kDriver);
  const DraPaths dead = DraPaths::For(dir_.path(), kDriver, kUidB);
  const std::string live_uid = "cccccccc-0000-4000-8000-00000000000c";
  const DraPaths live = DraPaths::For(dir_.path(), kDriver, live_uid);
  // Alive: an instance still serving (started first: it would clean up the dead ones).
  absl::StatusOr<std::unique_ptr<PreparedClaims>> live_claims =
      PreparedClaims::Open(checkpoint_, &preparer_);
  ASSERT_TRUE(live_claims.ok());
  KubeletPlugin serving(kDriver, dir_.path(), live_claims->get(), absl::Milliseconds(50), live_uid);
  ASSERT_TRUE(serving.Start().ok());
  for (const std::string& p :
       {legacy.registration_socket, legacy.dra_socket, dead.registration_socket, dead.dra_socket}) {
    ASSERT_NO_FATAL_FAILURE(LeaveDeadSocket(p));
  }
  // Dead, but not ours: another driver's, and a name that carries no pod UID.
  const std::string other_driver =
      absl::StrCat(legacy.registry_dir, "/other.example.com-", kUidB, "-reg.sock");
  const std::string not_an_instance = legacy.registry_dir + "/gpu.gpulet.dev-foo-reg.sock";
  ASSERT_NO_FATAL_FAILURE(LeaveDeadSocket(other_driver));
  ASSERT_NO_FATAL_FAILURE(LeaveDeadSocket(not_an_instance));

  absl::StatusOr<std::unique_ptr<PreparedClaims>> c = PreparedClaims::Open(checkpoint_, &preparer_);
  ASSERT_TRUE(c.ok());
  KubeletPlugin plugin(kDriver, dir_.path(), c->get(), absl::Milliseconds(50), kUidA);
  ASSERT_TRUE(plugin.Start().ok());
  std::vector<std::string> want = {legacy.dra_socket, dead.dra_socket, legacy.registration_socket,
                                   dead.registration_socket};
  std::vector<std::string> removed = plugin.removed_stale();
  std::sort(want.begin(), want.end());
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, want);
  for (const std::string& p : want) EXPECT_FALSE(Exists(p)) << p;
  EXPECT_TRUE(Exists(other_driver));
  EXPECT_TRUE(Exists(not_an_instance));
  EXPECT_TRUE(Exists(live.registration_socket));
  EXPECT_TRUE(Exists(live.dra_socket));
  EXPECT_TRUE(serving.registration().SocketIntact());
}

// The kubelet's health stream, collected on a thread of its own.
class HealthWatch {
 public:
  HealthWatch(FakeDraKubelet* kubelet, const std::string& driver) {
    thread_ = std::thread([this, kubelet, driver] {
      absl::Status s = kubelet->WatchHealth(
          driver,
          [this](const ::v1alpha1::NodeWatchResourcesResponse& m) {
            absl::MutexLock lock(&mu_);
            messages_.push_back(m);
            return true;
          },
          absl::Seconds(30));
      absl::MutexLock lock(&mu_);
      end_ = s;
    });
  }
  ~HealthWatch() {
    if (thread_.joinable()) thread_.join();
  }

  // The health in the latest message of `device` ("" when none yet).
  std::string Latest(const std::string& device) const {
    absl::MutexLock lock(&mu_);
    if (messages_.empty()) return "";
    for (const auto& d : messages_.back().devices()) {
      if (d.device().device_name() == device) return ::v1alpha1::HealthStatus_Name(d.health());
    }
    return "missing";
  }
  bool WaitFor(const std::string& device, const std::string& health) const {
    return gpulet::testing::WaitFor([&] { return Latest(device) == health; }, kLimit) !=
           absl::InfiniteDuration();
  }
  size_t count() const {
    absl::MutexLock lock(&mu_);
    return messages_.size();
  }
  ::v1alpha1::NodeWatchResourcesResponse last() const {
    absl::MutexLock lock(&mu_);
    return messages_.back();
  }
  // Waits for the stream's end; its status.
  absl::Status End() {
    thread_.join();
    absl::MutexLock lock(&mu_);
    return end_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<::v1alpha1::NodeWatchResourcesResponse> messages_ ABSL_GUARDED_BY(mu_);
  absl::Status end_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

gpu::Inventory TwoGpus() {
  gpu::Inventory inv;
  inv.nvml_status = absl::OkStatus();
  for (unsigned i = 0; i < 2; ++i) {
    gpu::Gpu g;
    g.index = i;
    g.uuid = "GPU-" + std::to_string(i);
    g.name = "NVIDIA H200";
    g.bus_id = "0000:0" + std::to_string(i + 1) + ":00.0";
    g.in_nvml = g.on_pci = true;
    inv.gpus.push_back(g);
  }
  return inv;
}

TEST_F(DraIntegrationTest, TheHealthStreamReportsAnXidAndTheRecovery) {
  state::DeviceStore store;
  store.SetInventory(TwoGpus(), absl::Now());
  ASSERT_NO_FATAL_FAILURE(StartGpulet(&store));
  ASSERT_TRUE(kubelet_.Start().ok());
  ASSERT_TRUE(kubelet_.WaitForRegistrations(1, kLimit));
  HealthWatch watch(&kubelet_, kDriver);
  ASSERT_TRUE(watch.WaitFor("gpu-0", "HEALTHY"));
  EXPECT_EQ(watch.Latest("gpu-1"), "HEALTHY");
  const ::v1alpha1::NodeWatchResourcesResponse first = watch.last();
  ASSERT_EQ(first.devices_size(), 2);
  EXPECT_EQ(first.devices(0).device().pool_name(), "node-a");
  EXPECT_NEAR(first.devices(0).last_updated_time(), absl::ToUnixSeconds(absl::Now()), 5);

  // A snapshot that changes no device's health sends nothing.
  const size_t sent = watch.count();
  store.UpdateHealth("GPU-1", [](state::GpuHealth& h) { h.xid_counts[13] += 1; });
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(watch.count(), sent);

  // XID 79 as the health policy raises it.
  store.UpdateHealth("GPU-0", [](state::GpuHealth& h) {
    h.last_xid = 79;
    h.Raise("xid", {state::HealthState::kUnhealthy, "XID 79", "reboot the node", absl::Now(), true},
            absl::Now());
  });
  ASSERT_TRUE(watch.WaitFor("gpu-0", "UNHEALTHY"));
  EXPECT_EQ(watch.Latest("gpu-1"), "HEALTHY");
  store.UpdateHealth("GPU-0", [](state::GpuHealth& h) { h.Clear("xid", absl::Now()); });
  ASSERT_TRUE(watch.WaitFor("gpu-0", "HEALTHY"));

  // gpulet going away ends the stream (promptly: not the server's grace period).
  const absl::Time before = absl::Now();
  StopGpulet();
  EXPECT_TRUE(absl::IsOutOfRange(watch.End())) << "the driver ends the stream";
  EXPECT_LT(absl::Now() - before, absl::Seconds(1));
}

TEST_F(DraIntegrationTest, WithoutAHealthSourceTheServiceIsUnimplemented) {
  ASSERT_NO_FATAL_FAILURE(StartGpulet());
  ASSERT_TRUE(kubelet_.Start().ok());
  ASSERT_TRUE(kubelet_.WaitForRegistrations(1, kLimit));
  absl::Status s = kubelet_.WatchHealth(kDriver, [](const auto&) { return true; });
  EXPECT_TRUE(absl::IsUnimplemented(s)) << s;
}

}  // namespace
}  // namespace gpulet::dra
