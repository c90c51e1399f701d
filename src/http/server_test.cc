// The event-driven metrics server (src/metrics/metrics_server.h) against misbehaving clients:
// slowloris connections, idle keep-alive connections, more connections than the cap, slow
// basic auth; and its HTTP surface: gzip, OpenMetrics, errors, addresses, Start/Stop.
#include "http/server.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "testing/bcrypt_hash.h"
#include "testing/http_clients.h"

namespace gpulet::http {
namespace {

using testing::BcryptHash;
using testing::Get;
using testing::HttpResponse;

// What the tests' servers serve: /metrics (a fixed exposition, made once and cached, as the
// metrics endpoint's), /healthz (open without auth) and /status (built each time); 404
// elsewhere.
Response ServeForTests(const Request& request) {
  static const auto kExposition = std::make_shared<const std::string>(
      "# TYPE gpulet_build_info gauge\ngpulet_build_info{version=\"test\"} 1\n" +
      std::string(4096, '#') + "\n");
  Response r;
  if (request.path == "/metrics") {
    r.body = kExposition;
    r.compress = true;
    r.cache_slot = 0;
  } else if (request.path == "/healthz") {
    r.body = std::make_shared<const std::string>("ok\n");
  } else if (request.path == "/status") {
    r.content_type = "application/json";
    r.body = std::make_shared<const std::string>(absl::StrCat(
        "{\"gpus\":[", std::string(2048, ' '), "],\"accept\":\"", request.accept, "\"}"));
    r.compress = true;
  } else {
    r.status = 404;
    r.body = std::make_shared<const std::string>("not found\n");
  }
  return r;
}

Options TestOptions(Limits limits = Limits(), WebConfig web = WebConfig()) {
  return Options{.name = "test server",
                 .address_flag = "--metrics-address",
                 .limits = limits,
                 .web = std::move(web),
                 .open_paths = {"/healthz"},
                 .cache_slots = 1,
                 .refused_write = {.body = std::make_shared<const std::string>("read-only\n")}};
}

class HttpServerTest : public ::testing::Test {
 protected:
  void StartServer(Limits limits = Limits(), WebConfig web = WebConfig()) {
    server_ = std::make_unique<Server>(ServeForTests, TestOptions(limits, std::move(web)));
    absl::Status s = server_->Start("127.0.0.1:0");
    ASSERT_TRUE(s.ok()) << s;
    port_ = server_->port();
  }

  // GET `path` answers 200 within `bound` and (for /metrics) carries the exposition.
  void ExpectAnswers(const std::string& path, absl::Duration bound = absl::Seconds(1)) {
    absl::Time t0 = absl::Now();
    std::optional<HttpResponse> r = Get(port_, path, bound);
    ASSERT_TRUE(r.has_value()) << path << " did not answer within " << bound << " (after "
                               << absl::Now() - t0 << ")";
    EXPECT_EQ(r->status, 200) << path;
    if (path == "/metrics") {
      EXPECT_TRUE(absl::StrContains(r->body, "gpulet_build_info"));
    }
    if (path == "/healthz") {
      EXPECT_EQ(r->body, "ok\n");
    }
  }

  std::unique_ptr<Server> server_;
  int port_ = 0;
};

// Threads of this process now.
int Threads() {
  return static_cast<int>(std::distance(std::filesystem::directory_iterator("/proc/self/task"),
                                        std::filesystem::directory_iterator()));
}

TEST_F(HttpServerTest, SlowlorisAndIdleKeepAliveDoNotBlockMetricsOrHealthz) {
  StartServer();
  const int threads_before = Threads();
  testing::IdleKeepAlive idle;
  ASSERT_TRUE(idle.Open(port_, 8, absl::Seconds(2)));
  testing::SlowClients slow;
  ASSERT_EQ(slow.Open(port_, 200, /*drip=*/true, absl::Seconds(1)), 200);
  // ~3 s of scrapes and probes while all 208 connections stay open and the 200 dribble a
  // header byte a second (each would hold a worker of a thread-per-connection server).
  absl::Time end = absl::Now() + absl::Seconds(3);
  int rounds = 0;
  while (absl::Now() < end) {
    ExpectAnswers("/metrics");
    ExpectAnswers("/healthz");
    ++rounds;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_GE(rounds, 10);
  // Connections cost the server no thread: the only new one is SlowClients' drip thread.
  EXPECT_EQ(Threads(), threads_before + 1);
  // They really were open all along (the header deadline is 10 s), and the idle
  // keep-alive connections still serve.
  EXPECT_EQ(slow.ClosedByServer(), 0);
  EXPECT_EQ(idle.Reuse(absl::Seconds(1)), 8);
}

TEST_F(HttpServerTest, HeaderDeadlineClosesSlowlorisAndIdleConnections) {
  Limits limits;
  limits.header_deadline = absl::Seconds(1);
  limits.idle_timeout = absl::Seconds(30);  // so the deadline, not inactivity, closes them
  StartServer(limits);
  testing::IdleKeepAlive idle;
  ASSERT_TRUE(idle.Open(port_, 4, absl::Seconds(2)));
  testing::SlowClients slow;
  ASSERT_EQ(slow.Open(port_, 20, /*drip=*/true, absl::Milliseconds(200)), 20);
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(slow.ClosedByServer(), 0) << "closed before the deadline";
  absl::Time end = absl::Now() + absl::Seconds(5);
  while (slow.ClosedByServer() < 20 && absl::Now() < end) absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(slow.ClosedByServer(), 20) << "dribbling a byte every 200 ms must not extend the "
                                          "1 s header deadline";
  EXPECT_EQ(idle.Reuse(absl::Milliseconds(500)), 0) << "idle keep-alive outlived the deadline";
  ExpectAnswers("/healthz");
}

TEST_F(HttpServerTest, ConnectionCapOverflowKeepsServing) {
  Limits limits;
  limits.max_connections = 50;
  limits.header_deadline = absl::Seconds(60);
  limits.idle_timeout = absl::Seconds(60);
  StartServer(limits);
  testing::SlowClients slow;
  ASSERT_EQ(slow.Open(port_, 150, /*drip=*/false), 150);
  for (int i = 0; i < 20; ++i) {
    ExpectAnswers("/healthz");
    ExpectAnswers("/metrics");
  }
  // Beyond the cap, the oldest connections still waiting for a header were closed.
  absl::Time end = absl::Now() + absl::Seconds(2);
  while (slow.ClosedByServer() < 100 && absl::Now() < end) absl::SleepFor(absl::Milliseconds(50));
  EXPECT_GE(slow.ClosedByServer(), 100);
}

TEST_F(HttpServerTest, SlowBasicAuthDoesNotBlockOtherConnections) {
  WebConfig web;
  web.users["prom"] = BcryptHash("s3cret", 13);  // ~0.5 s a check: far above a probe's bound
  StartServer(Limits(), web);
  const std::string auth = absl::StrCat("Authorization: Basic ", absl::Base64Escape("prom:s3cret"));
  std::atomic<int> authorized{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> scrapers;
  for (int i = 0; i < 2; ++i) {
    scrapers.emplace_back([&] {
      while (!stop) {
        std::optional<HttpResponse> r = Get(port_, "/metrics", absl::Seconds(20), {auth});
        if (r && r->status == 200) ++authorized;
      }
    });
  }
  absl::SleepFor(absl::Milliseconds(100));  // checks are running now
  std::vector<absl::Duration> probes;
  absl::Time end = absl::Now() + absl::Seconds(2);
  while (absl::Now() < end) {
    absl::Time t0 = absl::Now();
    ExpectAnswers("/healthz");
    probes.push_back(absl::Now() - t0);
    absl::SleepFor(absl::Milliseconds(20));
  }
  stop = true;
  for (std::thread& t : scrapers) t.join();
  EXPECT_GE(authorized.load(), 1);
  std::sort(probes.begin(), probes.end());
  // A probe waiting behind a bcrypt check would take its ~0.5 s; the median is far below.
  EXPECT_LT(probes[probes.size() / 2], absl::Milliseconds(200));
  // Without the password, still refused.
  std::optional<HttpResponse> r = Get(port_, "/metrics", absl::Seconds(5));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_TRUE(absl::StrContains(r->headers, "WWW-Authenticate: Basic realm=\"gpulet\""));
}

TEST_F(HttpServerTest, TooManyWaitingAuthChecksAreAnswered503) {
  WebConfig web;
  web.users["prom"] = BcryptHash("s3cret", 12);
  Limits limits;
  limits.auth_threads = 1;
  limits.max_pending_auth = 1;
  StartServer(limits, web);
  const std::string auth = absl::StrCat("Authorization: Basic ", absl::Base64Escape("prom:s3cret"));
  std::vector<int> status(4, 0);
  std::vector<std::thread> clients;
  for (int i = 0; i < 4; ++i) {
    clients.emplace_back([&, i] {
      std::optional<HttpResponse> r = Get(port_, "/metrics", absl::Seconds(20), {auth});
      status[i] = r ? r->status : 0;
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(std::count(status.begin(), status.end(), 0), 0);
  EXPECT_GE(std::count(status.begin(), status.end(), 200), 1);
  EXPECT_GE(std::count(status.begin(), status.end(), 503), 1);
}

TEST_F(HttpServerTest, StopWhileAuthChecksWaitIsPromptAndClean) {
  WebConfig web;
  web.users["prom"] = BcryptHash("s3cret", 12);  // ~0.25 s a check
  Limits limits;
  limits.auth_threads = 1;
  StartServer(limits, web);
  const std::string auth = absl::StrCat("Authorization: Basic ", absl::Base64Escape("prom:s3cret"));
  // One check's time on this machine now (a loaded CI machine under ASan is several times
  // slower than an idle one): the bound below is relative to it.
  const absl::Time c0 = absl::Now();
  ASSERT_TRUE(Get(port_, "/metrics", absl::Seconds(10), {auth}).has_value());
  const absl::Duration one_check = absl::Now() - c0;
  std::vector<std::thread> clients;
  for (int i = 0; i < 8; ++i) {
    clients.emplace_back([&] { (void)Get(port_, "/metrics", absl::Seconds(30), {auth}); });
  }
  absl::SleepFor(absl::Milliseconds(150));  // one check running, the rest suspended
  absl::Time t0 = absl::Now();
  server_->Stop();  // MHD aborts if a connection is still suspended at its stop
  // The running check finishes; the queued ones are refused without hashing: well under the
  // seven checks' time that hashing them would take.
  EXPECT_LT(absl::Now() - t0, std::max(absl::Seconds(1), 3 * one_check))
      << "one check took " << one_check;
  for (std::thread& t : clients) t.join();
  EXPECT_FALSE(Get(port_, "/healthz", absl::Milliseconds(500)).has_value());
}

// Compressible answers are gzipped for a client that allows it (and vary on it); the rest
// never are; a write is answered 405 without its body being read.
TEST_F(HttpServerTest, GzipWhereAllowedAndErrors) {
  StartServer();
  std::optional<HttpResponse> plain = Get(port_, "/metrics", absl::Seconds(2));
  ASSERT_TRUE(plain);
  EXPECT_TRUE(absl::StrContains(plain->headers, "Content-Type: text/plain")) << plain->headers;
  EXPECT_TRUE(absl::StrContains(plain->headers, "Vary: Accept-Encoding")) << plain->headers;
  EXPECT_FALSE(absl::StrContains(plain->headers, "Content-Encoding"));
  for (int i = 0; i < 3; ++i) {  // the cached response, each time
    std::optional<HttpResponse> gz =
        Get(port_, "/metrics", absl::Seconds(2), {"Accept-Encoding: gzip, deflate"});
    ASSERT_TRUE(gz);
    EXPECT_TRUE(absl::StrContains(gz->headers, "Content-Encoding: gzip")) << gz->headers;
    EXPECT_EQ(testing::Gunzip(gz->body), plain->body);
    EXPECT_LT(gz->body.size(), plain->body.size());
  }
  std::optional<HttpResponse> refused =
      Get(port_, "/metrics", absl::Seconds(2), {"Accept-Encoding: gzip;q=0, identity"});
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->body, plain->body);

  std::optional<HttpResponse> status =
      Get(port_, "/status", absl::Seconds(2), {"Accept-Encoding: gzip", "Accept: text/x-test"});
  ASSERT_TRUE(status);
  EXPECT_EQ(status->status, 200);
  EXPECT_TRUE(absl::StrContains(status->headers, "application/json"));
  EXPECT_TRUE(absl::StrContains(testing::Gunzip(status->body), "\"accept\":\"text/x-test\""))
      << testing::Gunzip(status->body);

  std::optional<HttpResponse> ok =
      Get(port_, "/healthz", absl::Seconds(2), {"Accept-Encoding: gzip"});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->body, "ok\n");
  EXPECT_FALSE(absl::StrContains(ok->headers, "Content-Encoding"));
  EXPECT_FALSE(absl::StrContains(ok->headers, "Vary"));

  std::optional<HttpResponse> missing = Get(port_, "/nope", absl::Seconds(2));
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  // A write with a body it never sends: answered at its header all the same.
  int fd = testing::ConnectLoopback(port_);
  ASSERT_GE(fd, 0);
  const char post[] = "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nabc";
  ASSERT_EQ(send(fd, post, sizeof(post) - 1, MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(post) - 1));
  std::optional<HttpResponse> bad = testing::ReadResponse(fd, absl::Now() + absl::Seconds(2));
  close(fd);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 405);
  EXPECT_EQ(bad->body, "read-only\n");
}

// A reload's new server starts beside the running one on the same address: it shares the
// listening socket, so a fixed port needs no second bind and never closes during the
// handover; once both stop, the port is free.
TEST(HttpServerAddressTest, AServerStartedBesideTheRunningOneSharesItsPort) {
  Server first(ServeForTests, TestOptions());
  ASSERT_TRUE(first.Start("127.0.0.1:0").ok());
  const std::string taken = absl::StrCat("127.0.0.1:", first.port());
  Server second(ServeForTests, TestOptions());
  absl::Status s = second.Start("127.0.0.1:0", &first);  // the same address as configured
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(second.port(), first.port());
  first.Stop();
  std::optional<HttpResponse> r = Get(second.port(), "/healthz", absl::Seconds(5));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200);
  // Still held: nothing else binds it in between.
  Server other(ServeForTests, TestOptions());
  EXPECT_TRUE(absl::IsUnavailable(other.Start(taken)));
  // Beside a server on another address, or one stopped, a server binds its own.
  Server third(ServeForTests, TestOptions());
  ASSERT_TRUE(third.Start("127.0.0.1:0", &first).ok());  // `first` is stopped
  EXPECT_NE(third.port(), second.port());
  second.Stop();
  Server again(ServeForTests, TestOptions());
  EXPECT_TRUE(again.Start(taken).ok());
}

TEST(HttpServerAddressTest, PortInUseIsNamedIpv6AndStartStopAnyOrder) {
  {
    Server never_started(ServeForTests, TestOptions());
    never_started.Stop();  // Stop before Start
  }
  Server first(ServeForTests, TestOptions());
  ASSERT_TRUE(first.Start("127.0.0.1:0").ok());
  const std::string taken = absl::StrCat("127.0.0.1:", first.port());
  Server second(ServeForTests, TestOptions());
  absl::Status s = second.Start(taken);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), taken)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "--metrics-address")) << s;
  first.Stop();
  first.Stop();  // idempotent

  // Stop right after Start, many times: never hangs, and the port is free again at once.
  for (int i = 0; i < 50; ++i) {
    Server quick(ServeForTests, TestOptions());
    ASSERT_TRUE(quick.Start(taken).ok()) << i;
    quick.Stop();
  }

  // IPv6 loopback, where the machine has it.
  int probe = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  bool v6 = probe >= 0 && bind(probe, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  if (probe >= 0) close(probe);
  if (!v6) GTEST_SKIP() << "no IPv6 loopback here";
  Server six(ServeForTests, TestOptions());
  ASSERT_TRUE(six.Start("[::1]:0").ok());
  int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  a.sin6_port = htons(static_cast<uint16_t>(six.port()));
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  const char req[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(req) - 1));
  std::optional<HttpResponse> r = testing::ReadResponse(fd, absl::Now() + absl::Seconds(2));
  close(fd);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

}  // namespace
}  // namespace gpulet::http
