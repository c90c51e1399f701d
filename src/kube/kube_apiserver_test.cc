// The API client against the stand-in API server (testing/fake_apiserver.h) over real TLS on
// loopback: certificate checks, keep-alive, token rotation, strict field validation,
// conflicts, 429 storms, events, and watches with bookmarks, drops and 410 Gone.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kube/kube_client.h"
#include "kube/tls_transport.h"
#include "testing/fake_apiserver.h"
#include "testing/files.h"
#include "testing/simulated_clock.h"
#include "testing/test_pki.h"

namespace gpulet::kube {
namespace {

using nlohmann::json;
using ::testing::AllOf;
using ::testing::HasSubstr;
using Server = gpulet::testing::FakeApiServer;

json NodeObject(const std::string& name) {
  return {{"metadata", {{"name", name}, {"labels", {{"kubernetes.io/hostname", name}}}}},
          {"spec", {{"podCIDR", "10.244.0.0/24"}}},
          {"status",
           {{"conditions",
             json::array({{{"type", "Ready"}, {"status", "True"}, {"reason", "KubeletReady"}}})}}}};
}

class KubeApiServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.Start("token-1").ok());
    server_.AddNode(NodeObject("n1"));
    token_file_ = dir_.Write("sa/token", "token-1\n");
    chmod(token_file_.c_str(), 0600);
  }

  KubeConfig Config() {
    KubeConfig c;
    EXPECT_TRUE(ParseServerUrl(server_.url(), "test", &c).ok());
    c.ca_pem = server_.ca().cert_pem;
    c.ca_source = "the test CA";
    c.token_file = token_file_;
    c.source = "test";
    return c;
  }

  // Without a QPS limit unless `limited` (the tests of the limit use a simulated clock).
  std::unique_ptr<KubeClient> Client(KubeClientOptions o = {}, const Clock* clock = RealClock(),
                                     bool limited = false) {
    if (!limited) o.qps = 0;
    o.initial_backoff = absl::Milliseconds(5);
    absl::StatusOr<std::unique_ptr<KubeClient>> c = KubeClient::FromConfig(Config(), o, clock);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  // Replaces the token file as the kubelet does: a new file renamed over the old one.
  void RotateFile(const std::string& token) {
    const std::string tmp = dir_.Write("sa/token.new", token + "\n");
    ASSERT_EQ(rename(tmp.c_str(), token_file_.c_str()), 0);
  }

  gpulet::testing::ScratchDir dir_;
  Server server_;
  std::string token_file_;
};

// Joins a thread running a client call; after a failed assertion (the call still waiting),
// cancels the client first so that the test ends instead of hanging.
void Finish(KubeClient* client, std::thread* t) {
  if (!t->joinable()) return;
  client->Cancel();
  t->join();
}

TlsTransportOptions TransportOptions(const Server& server) {
  TlsTransportOptions t;
  t.host = "127.0.0.1";
  t.port = server.port();
  t.ca_pem = server.ca().cert_pem;
  t.ca_source = "the test CA";
  return t;
}

HttpRequest GetNodeRequest(const std::string& token) {
  return {"GET", "/api/v1/nodes/n1", {{"Authorization", "Bearer " + token}}, ""};
}

TEST_F(KubeApiServerTest, TlsVerifiesTheServerAndReusesTheConnection) {
  absl::StatusOr<std::unique_ptr<TlsTransport>> t = TlsTransport::Create(TransportOptions(server_));
  ASSERT_TRUE(t.ok()) << t.status();
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<HttpResponse> r = (*t)->RoundTrip(GetNodeRequest("token-1"), absl::Seconds(10));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(json::parse(r->body)["metadata"]["name"], "n1");
  }
  EXPECT_EQ((*t)->connections_opened(), 1) << "keep-alive connections must be reused";
  // Every certificate in the bundle is an anchor (as in client-go): here the server's own.
  TlsTransportOptions pinned = TransportOptions(server_);
  pinned.ca_pem = server_.server_cert().cert_pem;
  t = TlsTransport::Create(pinned);
  ASSERT_TRUE(t.ok());
  absl::StatusOr<HttpResponse> p = (*t)->RoundTrip(GetNodeRequest("token-1"), absl::Seconds(10));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->status, 200);
  // The DNS SAN works as well as the IP SAN.
  TlsTransportOptions by_name = TransportOptions(server_);
  by_name.host = "localhost";
  t = TlsTransport::Create(by_name);
  ASSERT_TRUE(t.ok());
  absl::StatusOr<HttpResponse> r = (*t)->RoundTrip(GetNodeRequest("token-1"), absl::Seconds(10));
  if (r.ok()) {
    EXPECT_EQ(r->status, 200);
  } else {
    // "localhost" may resolve to ::1 first where nothing listens; the IP check above holds.
    EXPECT_TRUE(absl::IsUnavailable(r.status())) << r.status();
  }
}

TEST_F(KubeApiServerTest, TlsFailsClosedOnAWrongCaOrName) {
  absl::StatusOr<gpulet::testing::TestCert> other = gpulet::testing::MakeTestCa("other-ca");
  ASSERT_TRUE(other.ok());
  TlsTransportOptions wrong_ca = TransportOptions(server_);
  wrong_ca.ca_pem = other->cert_pem;
  wrong_ca.ca_source = "/etc/other-ca.crt";
  absl::StatusOr<std::unique_ptr<TlsTransport>> t = TlsTransport::Create(wrong_ca);
  ASSERT_TRUE(t.ok());
  absl::Status s = (*t)->RoundTrip(GetNodeRequest("token-1"), absl::Seconds(10)).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("does not verify"), HasSubstr("/etc/other-ca.crt"),
                    HasSubstr("issuer is unknown")));

  TlsTransportOptions wrong_name = TransportOptions(server_);
  wrong_name.server_name = "kubernetes.default.svc";
  t = TlsTransport::Create(wrong_name);
  ASSERT_TRUE(t.ok());
  s = (*t)->RoundTrip(GetNodeRequest("token-1"), absl::Seconds(10)).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(
      std::string(s.message()),
      AllOf(HasSubstr("names (localhost, 127.0.0.1) do not include kubernetes.default.svc")));

  TlsTransportOptions wrong_ip = TransportOptions(server_);
  wrong_ip.server_name = "127.0.0.2";
  t = TlsTransport::Create(wrong_ip);
  ASSERT_TRUE(t.ok());
  s = (*t)->RoundTrip(GetNodeRequest("token-1"), absl::Seconds(10)).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;

  // Garbage for a CA is refused up front.
  TlsTransportOptions no_ca = TransportOptions(server_);
  no_ca.ca_pem = "not a certificate";
  EXPECT_TRUE(absl::IsInvalidArgument(TlsTransport::Create(no_ca).status()));
  // Nothing listening: Unavailable, which the client retries.
  TlsTransportOptions closed = TransportOptions(server_);
  closed.port = 1;
  t = TlsTransport::Create(closed);
  ASSERT_TRUE(t.ok());
  s = (*t)->RoundTrip(GetNodeRequest("token-1"), absl::Seconds(10)).status();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
}

TEST_F(KubeApiServerTest, ClientCertificateAndKeyMustMatch) {
  absl::StatusOr<gpulet::testing::TestCert> a =
      gpulet::testing::MakeTestCert(server_.ca(), "system:node:n1", {}, {}, /*client=*/true);
  absl::StatusOr<gpulet::testing::TestCert> b =
      gpulet::testing::MakeTestCert(server_.ca(), "other", {}, {}, /*client=*/true);
  ASSERT_TRUE(a.ok() && b.ok());
  TlsTransportOptions o = TransportOptions(server_);
  o.client_cert_pem = a->cert_pem;
  o.client_key_pem = a->key_pem;
  absl::StatusOr<std::unique_ptr<TlsTransport>> t = TlsTransport::Create(o);
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<HttpResponse> r = (*t)->RoundTrip(GetNodeRequest("token-1"), absl::Seconds(10));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  o.client_key_pem = b->key_pem;
  absl::Status s = TlsTransport::Create(o).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("does not match"));
  o.client_key_pem = "";
  EXPECT_THAT(std::string(TlsTransport::Create(o).status().message()), HasSubstr("give both"));
}

TEST_F(KubeApiServerTest, ConcurrentCallsShareOneClient) {
  std::unique_ptr<KubeClient> client = Client();
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      for (int j = 0; j < 5; ++j) {
        json patch = {
            {"metadata", {{"labels", {{absl::StrCat("gpulet.dev/t", i), absl::StrCat(j)}}}}}};
        if (client->Patch("/api/v1/nodes/n1", PatchType::kMerge, patch).ok() &&
            client->Get("/api/v1/nodes/n1").ok()) {
          ++ok;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok.load(), 20);
  json labels = server_.Node("n1")->at("metadata").at("labels");
  for (int i = 0; i < 4; ++i) EXPECT_EQ(labels[absl::StrCat("gpulet.dev/t", i)], "4");
}

TEST_F(KubeApiServerTest, TransportDeadlinesAndSizeCap) {
  // A listener that never accepts: the TCP connect succeeds (the backlog), the TLS handshake
  // never does, and the round trip ends at its deadline.
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  absl::Cleanup close_fd = [fd] { close(fd); };
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 4), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  TlsTransportOptions silent = TransportOptions(server_);
  silent.port = ntohs(addr.sin_port);
  absl::StatusOr<std::unique_ptr<TlsTransport>> t = TlsTransport::Create(silent);
  ASSERT_TRUE(t.ok());
  const absl::Time start = absl::Now();
  absl::Status s = (*t)->RoundTrip(GetNodeRequest("token-1"), absl::Milliseconds(300)).status();
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));

  // A response over the size cap is refused, not buffered.
  TlsTransportOptions small = TransportOptions(server_);
  small.limits.max_body_bytes = 64;
  t = TlsTransport::Create(small);
  ASSERT_TRUE(t.ok());
  s = (*t)->RoundTrip(GetNodeRequest("token-1"), absl::Seconds(10)).status();
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("over the limit of 64"));
}

TEST_F(KubeApiServerTest, TokenRotationMidRun) {
  std::unique_ptr<KubeClient> client = Client();
  ASSERT_TRUE(client->Get("/api/v1/nodes/n1").ok());
  // The kubelet rotates the token: the server accepts only the new one, the file has it.
  server_.SetToken("token-2");
  RotateFile("token-2");
  absl::StatusOr<json> node = client->Get("/api/v1/nodes/n1");
  ASSERT_TRUE(node.ok()) << node.status();
  std::vector<Server::RecordedRequest> reqs = server_.Requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[1].authorization, "Bearer token-2");
  EXPECT_EQ(reqs[1].status, 200) << "the change is seen before sending, not after a 401";

  // Rewritten in place with the same size and mtime (unseen by stat): the 401 makes the
  // client re-read the file and retry once.
  struct stat before;
  ASSERT_EQ(stat(token_file_.c_str(), &before), 0);
  std::ofstream(token_file_, std::ios::trunc) << "token-3\n";
  const struct timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(utimensat(AT_FDCWD, token_file_.c_str(), times, 0), 0);
  server_.SetToken("token-3");
  node = client->Get("/api/v1/nodes/n1");
  ASSERT_TRUE(node.ok()) << node.status();
  reqs = server_.Requests();
  ASSERT_EQ(reqs.size(), 4u);
  EXPECT_EQ(reqs[2].status, 401);
  EXPECT_EQ(reqs[3].authorization, "Bearer token-3");
}

TEST_F(KubeApiServerTest, AStaleTokenIsAnErrorNamingTheTokenFile) {
  std::unique_ptr<KubeClient> client = Client();
  server_.SetToken("token-9");  // rotated out; the file still has token-1
  absl::Status s = client->Get("/api/v1/nodes/n1").status();
  EXPECT_TRUE(absl::IsUnauthenticated(s)) << s;
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("GET /api/v1/nodes/n1: 401"), HasSubstr(token_file_),
                    HasSubstr("expired or been revoked")));
  EXPECT_EQ(GetApiStatus(s)->reason, "Unauthorized");
  // The file was re-read after the 401, but it holds the same token: no second try.
  EXPECT_EQ(server_.Requests().size(), 1u);
  RotateFile("token-9");
  EXPECT_TRUE(client->Get("/api/v1/nodes/n1").ok());
}

TEST_F(KubeApiServerTest, StandInRejectsAnUnknownField) {
  std::unique_ptr<KubeClient> client = Client();
  absl::Status s =
      client->Patch("/api/v1/nodes/n1", PatchType::kMerge, {{"spec", {{"foo", "bar"}}}}).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("strict decoding error: unknown field \"spec.foo\""));
  EXPECT_EQ(GetApiStatus(s)->code, 400);
  EXPECT_EQ(GetApiStatus(s)->reason, "BadRequest");
  // In a list item of the status subresource, and on an Event.
  s = client
          ->Patch(
              "/api/v1/nodes/n1/status", PatchType::kStrategicMerge,
              {{"status",
                {{"conditions",
                  json::array(
                      {{{"type", "GpuUnhealthy"}, {"status", "True"}, {"severity", "high"}}})}}}})
          .status();
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("unknown field \"status.conditions[0].severity\""));
  s = client
          ->Create("/apis/events.k8s.io/v1/namespaces/default/events",
                   {{"metadata", {{"name", "e1"}}}, {"count", 3}})
          .status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("unknown field \"count\""));
  EXPECT_FALSE(server_.Node("n1")->contains("foo"));
  // Without Strict (the server's default, Warn) the field is dropped with a warning.
  KubeClientOptions lax;
  lax.strict_field_validation = false;
  ASSERT_TRUE(
      Client(lax)->Patch("/api/v1/nodes/n1", PatchType::kMerge, {{"spec", {{"foo", "bar"}}}}).ok());
  EXPECT_FALSE(server_.Node("n1")->at("spec").contains("foo"));
}

TEST_F(KubeApiServerTest, ResourceVersionConflictIsSurfaced) {
  std::unique_ptr<KubeClient> client = Client();
  absl::StatusOr<json> node = client->Get("/api/v1/nodes/n1");
  ASSERT_TRUE(node.ok());
  const std::string rv = (*node)["metadata"]["resourceVersion"];
  json patch = {{"metadata", {{"resourceVersion", rv}, {"labels", {{"gpulet.dev/a", "1"}}}}}};
  absl::StatusOr<json> patched = client->Patch("/api/v1/nodes/n1", PatchType::kMerge, patch);
  ASSERT_TRUE(patched.ok()) << patched.status();
  EXPECT_NE((*patched)["metadata"]["resourceVersion"], rv);
  EXPECT_EQ((*patched)["metadata"]["labels"]["gpulet.dev/a"], "1");
  // The same resourceVersion again is stale now.
  absl::Status s = client->Patch("/api/v1/nodes/n1", PatchType::kMerge, patch).status();
  EXPECT_TRUE(absl::IsAborted(s)) << s;
  EXPECT_TRUE(IsConflict(s));
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("409"), HasSubstr("the object has been modified"),
                    HasSubstr("reason Conflict")));
  // Update (PUT) with a stale resourceVersion too.
  json put = *node;
  s = client->Update("/api/v1/nodes/n1", put).status();
  EXPECT_TRUE(IsConflict(s)) << s;
  put["metadata"]["resourceVersion"] = server_.Node("n1")->at("metadata").at("resourceVersion");
  put["spec"]["unschedulable"] = true;
  absl::StatusOr<json> updated = client->Update("/api/v1/nodes/n1", put);
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_EQ((*updated)["spec"]["unschedulable"], true);
}

TEST_F(KubeApiServerTest, StrategicMergeKeepsOtherConditions) {
  std::unique_ptr<KubeClient> client = Client();
  json cond = {{"type", "GpuUnhealthy"},
               {"status", "True"},
               {"reason", "XidCritical"},
               {"message", "GPU 0: XID 79"}};
  absl::StatusOr<json> r = client->Patch("/api/v1/nodes/n1/status", PatchType::kStrategicMerge,
                                         {{"status", {{"conditions", json::array({cond})}}}});
  ASSERT_TRUE(r.ok()) << r.status();
  json conds = (*r)["status"]["conditions"];
  ASSERT_EQ(conds.size(), 2u);
  EXPECT_EQ(conds[0]["type"], "Ready");
  EXPECT_EQ(conds[1]["reason"], "XidCritical");
  // The status subresource does not change spec.
  r = client->Patch("/api/v1/nodes/n1/status", PatchType::kMerge,
                    {{"spec", {{"unschedulable", true}}}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE((*r)["spec"].contains("unschedulable"));
}

TEST_F(KubeApiServerTest, EventsCreateAndPatch) {
  std::unique_ptr<KubeClient> client = Client();
  const std::string path = "/apis/events.k8s.io/v1/namespaces/default/events";
  json ev = {{"apiVersion", "events.k8s.io/v1"},
             {"kind", "Event"},
             {"metadata", {{"name", "n1.gpu0.xid79"}, {"namespace", "default"}}},
             {"eventTime", "2026-12-03T13:00:00.000000Z"},
             {"reportingController", "gpulet.dev/gpulet"},
             {"reportingInstance", "gpulet-n1"},
             {"action", "HealthCheck"},
             {"reason", "XidCritical"},
             {"type", "Warning"},
             {"note", "GPU 0 fell off the bus (XID 79)"},
             {"regarding", {{"kind", "Node"}, {"name", "n1"}, {"apiVersion", "v1"}}}};
  absl::StatusOr<json> created = client->Create(path, ev);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_FALSE((*created)["metadata"]["resourceVersion"].get<std::string>().empty());
  absl::Status s = client->Create(path, ev).status();
  EXPECT_TRUE(absl::IsAlreadyExists(s)) << s;
  json bad = ev;
  bad["metadata"]["name"] = "other";
  bad.erase("reportingController");
  s = client->Create(path, bad).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("reportingController: Required value"));
  absl::StatusOr<json> patched = client->Patch(
      path + "/n1.gpu0.xid79", PatchType::kMerge,
      {{"series", {{"count", 2}, {"lastObservedTime", "2026-12-03T13:00:05.000000Z"}}}});
  ASSERT_TRUE(patched.ok()) << patched.status();
  EXPECT_EQ((*patched)["series"]["count"], 2);
  EXPECT_EQ(server_.Events().size(), 1u);
}

TEST_F(KubeApiServerTest, A429StormIsRespected) {
  gpulet::testing::SimulatedClock clock;
  KubeClientOptions o;
  o.qps = 5;
  o.burst = 1;
  std::unique_ptr<KubeClient> client = Client(o, &clock, /*limited=*/true);
  server_.FailNext(3, 429, /*retry_after_seconds=*/2);
  absl::StatusOr<json> result;
  std::thread t([&] { result = client->Get("/api/v1/nodes/n1"); });
  absl::Cleanup join = [&] { Finish(client.get(), &t); };
  for (size_t n = 1; n <= 3; ++n) {
    // Asleep after the n-th 429, for exactly Retry-After.
    ASSERT_TRUE(clock.AwaitSleepers(1));
    EXPECT_EQ(server_.Requests().size(), n);
    EXPECT_EQ(server_.Requests().back().status, 429);
    clock.Advance(absl::Milliseconds(1999));
    ASSERT_TRUE(clock.AwaitSleepers(1));
    EXPECT_EQ(server_.Requests().size(), n) << "retried before Retry-After";
    clock.Advance(absl::Milliseconds(1));
  }
  t.join();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(server_.Requests().size(), 4u);

  // Retry-After: 0 with the client's own QPS limit: the retries still wait for tokens. The
  // bucket (burst 1) is empty at first: the last request took its token at this instant.
  server_.FailNext(3, 429, /*retry_after_seconds=*/0);
  std::thread t2([&] { result = client->Get("/api/v1/nodes/n1"); });
  absl::Cleanup join2 = [&] { Finish(client.get(), &t2); };
  for (size_t n = 4; n <= 7; ++n) {
    ASSERT_TRUE(clock.AwaitSleepers(1));
    EXPECT_EQ(server_.Requests().size(), n);
    clock.Advance(absl::Milliseconds(199));
    ASSERT_TRUE(clock.AwaitSleepers(1));
    EXPECT_EQ(server_.Requests().size(), n) << "over the QPS limit";
    clock.Advance(absl::Milliseconds(1));
  }
  t2.join();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(server_.Requests().size(), 8u);
}

// Collects watch events for a test thread to wait on.
class EventLog {
 public:
  bool Add(const WatchEvent& ev) {
    absl::MutexLock lock(&mu_);
    events_.push_back(ev);
    return !(ev.type == "MODIFIED" && ev.object["metadata"]["labels"].contains("stop"));
  }
  bool AwaitCount(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return events_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(10));
  }
  std::vector<WatchEvent> events() {
    absl::MutexLock lock(&mu_);
    return events_;
  }

 private:
  absl::Mutex mu_;
  std::vector<WatchEvent> events_ ABSL_GUARDED_BY(mu_);
};

std::vector<Server::RecordedRequest> Watches(const Server& server) {
  std::vector<Server::RecordedRequest> out;
  for (const auto& r : server.Requests()) {
    auto w = r.params.find("watch");
    if (w != r.params.end() && w->second == "true") out.push_back(r);
  }
  return out;
}

std::string Param(const Server::RecordedRequest& r, const std::string& key) {
  auto it = r.params.find(key);
  return it == r.params.end() ? "" : it->second;
}

TEST_F(KubeApiServerTest, WatchGetsBookmarksSurvivesADropAndResumes) {
  std::unique_ptr<KubeClient> client = Client();
  EventLog log;
  absl::Status result;
  std::thread t([&] {
    result = client->Watch("/api/v1/nodes?fieldSelector=metadata.name%3Dn1", "",
                           [&](const WatchEvent& ev) { return log.Add(ev); });
  });
  absl::Cleanup join = [&] { Finish(client.get(), &t); };
  ASSERT_TRUE(log.AwaitCount(1));
  EXPECT_EQ(log.events()[0].type, "ADDED");
  std::vector<Server::RecordedRequest> w = Watches(server_);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(Param(w[0], "allowWatchBookmarks"), "true");
  EXPECT_EQ(Param(w[0], "fieldSelector"), "metadata.name=n1");
  EXPECT_EQ(Param(w[0], "resourceVersion"), "");

  server_.AddNode(NodeObject("other"));  // not selected: no event, but the version moves
  server_.SendBookmarks();
  ASSERT_TRUE(log.AwaitCount(2));
  const WatchEvent bookmark = log.events()[1];
  EXPECT_EQ(bookmark.type, "BOOKMARK");
  const std::string bookmark_rv = bookmark.object["metadata"]["resourceVersion"];
  EXPECT_EQ(bookmark_rv, absl::StrCat(server_.resource_version()));

  // The connection drops; a change happens meanwhile.
  server_.DropWatches();
  json changed = NodeObject("n1");
  changed["metadata"]["labels"]["gpulet.dev/changed"] = "1";
  server_.AddNode(changed);
  ASSERT_TRUE(log.AwaitCount(3));
  w = Watches(server_);
  ASSERT_GE(w.size(), 2u);
  EXPECT_EQ(Param(w[1], "resourceVersion"), bookmark_rv) << "resumes from the bookmark";
  std::vector<WatchEvent> evs = log.events();
  EXPECT_EQ(evs[2].type, "MODIFIED");
  EXPECT_EQ(evs[2].object["metadata"]["labels"]["gpulet.dev/changed"], "1");

  // The handler ends the watch.
  changed["metadata"]["labels"]["stop"] = "1";
  server_.AddNode(changed);
  t.join();
  EXPECT_TRUE(result.ok()) << result;
  EXPECT_EQ(log.events().size(), 4u) << "no event twice, none lost";
}

TEST_F(KubeApiServerTest, ASilentWatchIsReopenedFromItsResourceVersion) {
  KubeClientOptions o;
  o.watch_idle_timeout = absl::Milliseconds(300);  // the real default is minutes
  std::unique_ptr<KubeClient> client = Client(o);
  EventLog log;
  absl::Status result;
  std::thread t([&] {
    result = client->Watch("/api/v1/nodes?fieldSelector=metadata.name%3Dn1", "",
                           [&](const WatchEvent& ev) { return log.Add(ev); });
  });
  absl::Cleanup join = [&] { Finish(client.get(), &t); };
  ASSERT_TRUE(log.AwaitCount(1));
  const std::string rv = log.events()[0].object["metadata"]["resourceVersion"];
  // No bookmark, no event: past the idle timeout the client opens a new watch.
  ASSERT_TRUE(server_.AwaitRequests(2));
  std::vector<Server::RecordedRequest> w = Watches(server_);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(Param(w[1], "resourceVersion"), rv);
  json changed = NodeObject("n1");
  changed["metadata"]["labels"]["stop"] = "1";
  server_.AddNode(changed);
  t.join();
  EXPECT_TRUE(result.ok()) << result;
  EXPECT_EQ(log.events().size(), 2u);
}

TEST_F(KubeApiServerTest, AnExpiredResourceVersionIsReportedForARelist) {
  std::unique_ptr<KubeClient> client = Client();
  const int64_t old_rv = server_.resource_version();
  server_.AddNode(NodeObject("n1"));
  server_.Compact(server_.resource_version());
  std::vector<std::string> seen;
  absl::Status s = client->Watch("/api/v1/nodes?fieldSelector=metadata.name%3Dn1",
                                 absl::StrCat(old_rv), [&](const WatchEvent& ev) {
                                   seen.push_back(ev.type);
                                   return true;
                                 });
  EXPECT_TRUE(IsResourceExpired(s)) << s;
  EXPECT_EQ(GetApiStatus(s)->code, 410);
  EXPECT_THAT(std::string(s.message()), HasSubstr("too old resource version"));
  EXPECT_TRUE(seen.empty());
  // The relist: a List gives the version to watch from.
  absl::StatusOr<json> list = client->Get("/api/v1/nodes?fieldSelector=metadata.name%3Dn1");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ((*list)["items"].size(), 1u);
  EXPECT_EQ((*list)["metadata"]["resourceVersion"], absl::StrCat(server_.resource_version()));
}

TEST_F(KubeApiServerTest, CancelEndsAWatch) {
  std::unique_ptr<KubeClient> client = Client();
  EventLog log;
  absl::Status result;
  std::thread t([&] {
    result = client->Watch("/api/v1/nodes", "", [&](const WatchEvent& ev) { return log.Add(ev); });
  });
  absl::Cleanup join = [&] { Finish(client.get(), &t); };
  ASSERT_TRUE(log.AwaitCount(1));
  client->Cancel();
  t.join();
  EXPECT_TRUE(absl::IsCancelled(result)) << result;
}

}  // namespace
}  // namespace gpulet::kube
