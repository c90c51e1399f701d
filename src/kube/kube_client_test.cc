// KubeClient's retry, error and request-shaping rules against a scripted transport, on a
// simulated clock (the stand-in API server tests are in kube_apiserver_test.cc).
#include "kube/kube_client.h"

#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kube/token_bucket.h"
#include "testing/simulated_clock.h"

namespace gpulet::kube {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

HttpResponse Response(int status, const std::string& body, std::vector<HttpHeader> headers = {}) {
  HttpResponse r;
  r.status = status;
  r.reason = status == 200 ? "OK" : "Error";
  r.body = body;
  r.headers = std::move(headers);
  return r;
}

std::string StatusBody(int code, const std::string& reason, const std::string& message) {
  return nlohmann::json{{"kind", "Status"}, {"apiVersion", "v1"}, {"status", "Failure"},
                        {"code", code},     {"reason", reason},   {"message", message}}
      .dump();
}

// Answers requests from a script, records them.
class ScriptedTransport final : public HttpTransport {
 public:
  void Push(absl::StatusOr<HttpResponse> r) {
    absl::MutexLock lock(&mu_);
    script_.push_back(std::move(r));
  }
  std::vector<HttpRequest> requests() const {
    absl::MutexLock lock(&mu_);
    return requests_;
  }
  size_t count() const {
    absl::MutexLock lock(&mu_);
    return requests_.size();
  }

  absl::StatusOr<HttpResponse> RoundTrip(const HttpRequest& request, absl::Duration) override {
    absl::MutexLock lock(&mu_);
    requests_.push_back(request);
    if (script_.empty()) return absl::InternalError("script exhausted");
    absl::StatusOr<HttpResponse> r = std::move(script_.front());
    script_.pop_front();
    return r;
  }
  // Streams: each scripted response's body, delivered in 3-byte pieces.
  absl::StatusOr<HttpResponse> Stream(const HttpRequest& request, absl::Duration,
                                      const StreamOptions&, const BodySink& on_body) override {
    absl::StatusOr<HttpResponse> r = RoundTrip(request, absl::ZeroDuration());
    if (!r.ok() || r->status != 200) return r;
    for (size_t i = 0; i < r->body.size(); i += 3) {
      if (!on_body(absl::string_view(r->body).substr(i, 3))) break;
    }
    r->body.clear();
    return r;
  }

 private:
  mutable absl::Mutex mu_;
  std::deque<absl::StatusOr<HttpResponse>> script_ ABSL_GUARDED_BY(mu_);
  std::vector<HttpRequest> requests_ ABSL_GUARDED_BY(mu_);
};

struct Rig {
  explicit Rig(KubeClientOptions options = {}) {
    auto t = std::make_unique<ScriptedTransport>();
    transport = t.get();
    KubeConfig config;
    config.token = "t0k";
    config.base_path = "/prefix";
    if (!options.random) options.random = [] { return 0.5; };
    client = std::make_unique<KubeClient>(std::move(t), config, std::move(options), &clock);
  }
  gpulet::testing::SimulatedClock clock;
  ScriptedTransport* transport;
  std::unique_ptr<KubeClient> client;
};

KubeClientOptions Unlimited() {
  KubeClientOptions o;
  o.qps = 0;
  return o;
}

TEST(KubeClientTest, ShapesRequests) {
  Rig rig(Unlimited());
  for (int i = 0; i < 3; ++i) rig.transport->Push(Response(200, "{\"kind\":\"Node\"}"));
  absl::StatusOr<nlohmann::json> got = rig.client->Get("/api/v1/nodes/n1");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)["kind"], "Node");
  ASSERT_TRUE(rig.client
                  ->Patch("/api/v1/nodes/n1/status", PatchType::kStrategicMerge,
                          {{"status", {{"phase", "Running"}}}})
                  .ok());
  ASSERT_TRUE(rig.client->Patch("/api/v1/nodes/n1?x=1", PatchType::kMerge, {{"a", 1}}).ok());
  std::vector<HttpRequest> reqs = rig.transport->requests();
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(reqs[0].method, "GET");
  EXPECT_EQ(reqs[0].target, "/prefix/api/v1/nodes/n1");
  auto header = [](const HttpRequest& r, const std::string& name) {
    for (const HttpHeader& h : r.headers) {
      if (h.name == name) return h.value;
    }
    return std::string();
  };
  EXPECT_EQ(header(reqs[0], "Authorization"), "Bearer t0k");
  EXPECT_EQ(header(reqs[0], "Accept"), "application/json");
  EXPECT_EQ(header(reqs[0], "User-Agent"), "gpulet/" GPULET_VERSION);
  EXPECT_EQ(reqs[1].method, "PATCH");
  EXPECT_EQ(reqs[1].target, "/prefix/api/v1/nodes/n1/status?fieldValidation=Strict");
  EXPECT_EQ(header(reqs[1], "Content-Type"), "application/strategic-merge-patch+json");
  EXPECT_EQ(reqs[1].body, R"({"status":{"phase":"Running"}})");
  EXPECT_EQ(reqs[2].target, "/prefix/api/v1/nodes/n1?x=1&fieldValidation=Strict");
  EXPECT_EQ(header(reqs[2], "Content-Type"), "application/merge-patch+json");
}

TEST(KubeClientTest, ErrorsCarryTheApiServersStatusAndAreNotRetried) {
  Rig rig(Unlimited());
  struct Case {
    int http;
    const char* reason;
    absl::StatusCode code;
  } cases[] = {
      {400, "BadRequest", absl::StatusCode::kInvalidArgument},
      {403, "Forbidden", absl::StatusCode::kPermissionDenied},
      {404, "NotFound", absl::StatusCode::kNotFound},
      {409, "Conflict", absl::StatusCode::kAborted},
      {409, "AlreadyExists", absl::StatusCode::kAlreadyExists},
      {422, "Invalid", absl::StatusCode::kInvalidArgument},
  };
  for (const Case& c : cases) {
    const size_t before = rig.transport->count();
    rig.transport->Push(Response(c.http, StatusBody(c.http, c.reason, "the words")));
    absl::Status s = rig.client->Create("/apis/x", {{"a", 1}}).status();
    EXPECT_EQ(s.code(), c.code) << s;
    EXPECT_EQ(rig.transport->count(), before + 1) << c.http << " must not be retried";
    EXPECT_THAT(std::string(s.message()),
                AllOf(HasSubstr("POST /apis/x"), HasSubstr(absl::StrCat(c.http)),
                      HasSubstr("the words"), HasSubstr(absl::StrCat("reason ", c.reason))));
    std::optional<ApiStatus> st = GetApiStatus(s);
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->code, c.http);
    EXPECT_EQ(st->reason, c.reason);
    EXPECT_EQ(st->message, "the words");
    EXPECT_EQ(IsConflict(s), c.code == absl::StatusCode::kAborted);
  }
  // A body that is not a Status (a proxy's page) still makes a clear error.
  rig.transport->Push(Response(403, "<html>denied</html>"));
  absl::Status s = rig.client->Get("/api").status();
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("<html>denied"));
  EXPECT_FALSE(GetApiStatus(absl::InternalError("x")).has_value());
}

TEST(KubeClientTest, DeleteSendsNoBodyAndMapsStatuses) {
  Rig rig(Unlimited());
  rig.transport->Push(Response(200, "{\"kind\":\"ResourceSlice\"}"));
  rig.transport->Push(Response(202, "{\"kind\":\"ResourceSlice\"}"));
  rig.transport->Push(Response(404, StatusBody(404, "NotFound", "resourceslices \"s\" not found")));
  rig.transport->Push(Response(403, StatusBody(403, "Forbidden", "no")));
  rig.transport->Push(Response(503, StatusBody(503, "ServiceUnavailable", "busy")));
  rig.transport->Push(Response(200, ""));
  const std::string path = "/apis/resource.k8s.io/v1/resourceslices/s";
  EXPECT_TRUE(rig.client->Delete(path).ok());
  EXPECT_TRUE(rig.client->Delete(path).ok()) << "202: accepted, finalizers pending";
  absl::Status s = rig.client->Delete(path);
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("DELETE " + path));
  EXPECT_TRUE(absl::IsPermissionDenied(rig.client->Delete(path)));
  // 503 is retried like any other call; the retry's empty 200 is success.
  std::thread t([&] { EXPECT_TRUE(rig.client->Delete(path).ok()); });
  ASSERT_TRUE(rig.clock.AwaitSleepers(1));
  rig.clock.Advance(absl::Seconds(1));
  t.join();
  std::vector<HttpRequest> reqs = rig.transport->requests();
  ASSERT_EQ(reqs.size(), 6u);
  for (const HttpRequest& r : reqs) {
    EXPECT_EQ(r.method, "DELETE");
    EXPECT_EQ(r.target, "/prefix" + path) << "no fieldValidation without a body";
    EXPECT_TRUE(r.body.empty());
  }
}

TEST(KubeClientTest, RetriesConnectionErrorsAndServerErrorsWithJitteredBackoff) {
  KubeClientOptions o = Unlimited();
  o.initial_backoff = absl::Milliseconds(200);
  Rig rig(o);  // jitter pinned at 0.5
  rig.transport->Push(absl::UnavailableError("connection refused"));
  rig.transport->Push(Response(503, StatusBody(503, "ServiceUnavailable", "busy")));
  rig.transport->Push(Response(500, StatusBody(500, "InternalError", "oops")));
  rig.transport->Push(Response(200, "{}"));
  absl::StatusOr<nlohmann::json> result;
  std::thread t([&] { result = rig.client->Get("/api/v1/nodes/n1"); });
  absl::Cleanup join = [&] {
    if (!t.joinable()) return;
    rig.client->Cancel();
    t.join();
  };
  // Backoff caps 200, 400, 800 ms; half of each with the jitter pinned.
  for (absl::Duration wait :
       {absl::Milliseconds(100), absl::Milliseconds(200), absl::Milliseconds(400)}) {
    ASSERT_TRUE(rig.clock.AwaitSleepers(1));
    const size_t n = rig.transport->count();
    rig.clock.Advance(wait - absl::Milliseconds(1));
    ASSERT_TRUE(rig.clock.AwaitSleepers(1));
    EXPECT_EQ(rig.transport->count(), n) << "retried before the backoff " << wait;
    rig.clock.Advance(absl::Milliseconds(1));
  }
  t.join();
  EXPECT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(rig.transport->count(), 4u);
}

TEST(KubeClientTest, FullJitterStaysUnderTheCapAndGivesUp) {
  KubeClientOptions o = Unlimited();
  o.max_attempts = 3;
  o.random = [] { return 0.0; };  // no wait at all: the test needs no clock moves
  Rig rig(o);
  for (int i = 0; i < 3; ++i)
    rig.transport->Push(Response(504, StatusBody(504, "Timeout", "slow")));
  absl::Status s = rig.client->Get("/api").status();
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("gave up after 3 attempts"));
  // The last answer's Status stays attached, for callers that decide by its code.
  ASSERT_TRUE(GetApiStatus(s).has_value());
  EXPECT_EQ(GetApiStatus(s)->code, 504);
  EXPECT_EQ(rig.transport->count(), 3u);
  // TLS verification failures are configuration errors: never retried.
  rig.transport->Push(absl::FailedPreconditionError("certificate verify failed"));
  s = rig.client->Get("/api").status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_EQ(rig.transport->count(), 4u);
}

TEST(KubeClientTest, RetryAfterIsHonouredAndCapped) {
  KubeClientOptions o = Unlimited();
  o.max_retry_after = absl::Seconds(10);
  Rig rig(o);
  rig.transport->Push(
      Response(429, StatusBody(429, "TooManyRequests", "slow down"), {{"Retry-After", "3"}}));
  rig.transport->Push(
      Response(429, StatusBody(429, "TooManyRequests", "slow down"), {{"Retry-After", "3600"}}));
  rig.transport->Push(Response(200, "{}"));
  absl::StatusOr<nlohmann::json> result;
  std::thread t([&] { result = rig.client->Get("/api"); });
  absl::Cleanup join = [&] {
    if (!t.joinable()) return;
    rig.client->Cancel();
    t.join();
  };
  for (absl::Duration wait : {absl::Seconds(3), absl::Seconds(10)}) {
    ASSERT_TRUE(rig.clock.AwaitSleepers(1));
    const size_t n = rig.transport->count();
    rig.clock.Advance(wait - absl::Milliseconds(1));
    ASSERT_TRUE(rig.clock.AwaitSleepers(1));
    EXPECT_EQ(rig.transport->count(), n);
    rig.clock.Advance(absl::Milliseconds(1));
  }
  t.join();
  EXPECT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(rig.transport->count(), 3u);
}

TEST(KubeClientTest, CancelEndsAWaitingCall) {
  Rig rig(Unlimited());
  rig.transport->Push(
      Response(503, StatusBody(503, "ServiceUnavailable", "busy"), {{"Retry-After", "30"}}));
  absl::Status s;
  std::thread t([&] { s = rig.client->Get("/api").status(); });
  absl::Cleanup join = [&] {
    if (!t.joinable()) return;
    rig.client->Cancel();
    t.join();
  };
  ASSERT_TRUE(rig.clock.AwaitSleepers(1));
  rig.client->Cancel();
  t.join();
  EXPECT_TRUE(absl::IsCancelled(s)) << s;
  EXPECT_TRUE(absl::IsCancelled(rig.client->Get("/api").status()));
}

TEST(KubeClientTest, WatchDecodesEventsSplitAnywhereAndSeesExpiry) {
  Rig rig(Unlimited());
  const std::string events =
      R"({"type":"ADDED","object":{"metadata":{"name":"n1","resourceVersion":"5"}}})"
      "\n\n"
      R"({"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}})"
      "\n";
  rig.transport->Push(Response(200, events));  // then the stream ends: resume from 9
  rig.transport->Push(Response(
      200, absl::StrCat(R"({"type":"ERROR","object":)",
                        StatusBody(410, "Expired", "too old resource version: 9 (12)"), "}\n")));
  std::vector<std::string> seen;
  absl::Status s = rig.client->Watch("/api/v1/nodes?fieldSelector=metadata.name%3Dn1", "",
                                     [&](const WatchEvent& ev) {
                                       seen.push_back(ev.type);
                                       return true;
                                     });
  EXPECT_TRUE(IsResourceExpired(s)) << s;
  EXPECT_TRUE(absl::IsOutOfRange(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("too old resource version"));
  EXPECT_THAT(seen, ::testing::ElementsAre("ADDED", "BOOKMARK"));
  std::vector<HttpRequest> reqs = rig.transport->requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].target,
            "/prefix/api/v1/nodes?fieldSelector=metadata.name%3Dn1&watch=true&"
            "allowWatchBookmarks=true");
  EXPECT_EQ(reqs[1].target,
            "/prefix/api/v1/nodes?fieldSelector=metadata.name%3Dn1&watch=true&"
            "allowWatchBookmarks=true&resourceVersion=9");
}

TEST(KubeTokenBucketTest, BurstThenQps) {
  gpulet::testing::SimulatedClock clock;
  TokenBucket bucket(/*qps=*/5, /*burst=*/2, &clock);
  const MonoTime t0 = clock.Monotonic();
  EXPECT_EQ(bucket.Reserve(), t0);
  EXPECT_EQ(bucket.Reserve(), t0);
  EXPECT_EQ(bucket.Reserve(), t0 + absl::Milliseconds(200));
  EXPECT_EQ(bucket.Reserve(), t0 + absl::Milliseconds(400));
  // A long idle refills only up to the burst.
  clock.Advance(absl::Seconds(10));
  const MonoTime t1 = clock.Monotonic();
  EXPECT_EQ(bucket.Reserve(), t1);
  EXPECT_EQ(bucket.Reserve(), t1);
  EXPECT_EQ(bucket.Reserve(), t1 + absl::Milliseconds(200));
  TokenBucket off(0, 1, &clock);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(off.Reserve(), t1);
}

TEST(KubeClientTest, QueryEscape) {
  EXPECT_EQ(QueryEscape("metadata.name=n1"), "metadata.name%3Dn1");
  EXPECT_EQ(QueryEscape("a b/c~_-"), "a%20b%2Fc~_-");
}

}  // namespace
}  // namespace gpulet::kube
