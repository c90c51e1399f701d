#include "cluster/pod_eviction.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "kube/kube_client.h"
#include "nlohmann/json.hpp"
#include "testing/fake_apiserver.h"

namespace gpulet::cluster {
namespace {

using nlohmann::json;

EvictionOrder Order(const std::string& name, const std::string& gpu = "GPU-1",
                    const std::string& uid = "") {
  return {PodRef{"ai", name, uid}, gpu, gpu + " (GPU 0)", "XID 79: GPU has fallen off the bus"};
}

absl::Status ApiFailure(int code) {
  return kube::ApiError(
      "POST /api/v1/namespaces/ai/pods/p/eviction",
      kube::HttpResponse{code, "", {}, json{{"kind", "Status"}, {"code", code}}.dump()});
}

// The outcome is the API server's code, never its words.
TEST(EvictionQueueTest, AnOutcomeIsTheServersCode) {
  EXPECT_EQ(ClassifyEviction(absl::OkStatus()), EvictionResult::kEvicted);
  EXPECT_EQ(ClassifyEviction(ApiFailure(404)), EvictionResult::kGone);
  EXPECT_EQ(ClassifyEviction(ApiFailure(409)), EvictionResult::kGone);
  EXPECT_EQ(ClassifyEviction(ApiFailure(429)), EvictionResult::kBlocked);
  EXPECT_EQ(ClassifyEviction(ApiFailure(403)), EvictionResult::kForbidden);
  EXPECT_EQ(ClassifyEviction(ApiFailure(500)), EvictionResult::kFailed);
  // No answer at all (a transport error) is a failure to retry, whatever it says.
  EXPECT_EQ(ClassifyEviction(absl::UnavailableError("429 pod disruption budget")),
            EvictionResult::kFailed);
}

// A budget's refusal waits `retry` and says so once; an eviction ends the order with an
// Event about the pod; the counts follow every try.
TEST(EvictionQueueTest, ABlockedOrderIsRetriedAndToldOnceAndAnEvictionEndsIt) {
  EvictionQueue q(EvictionQueue::Options{absl::Seconds(30), absl::Minutes(5)});
  const absl::Time t0 = absl::FromUnixSeconds(1'800'000'000);
  q.Add(Order("llm"));
  q.Add(Order("llm"));  // the same pod again: one order
  ASSERT_EQ(q.Due(t0).size(), 1u);

  std::vector<NodeEvent> e = q.Done(Order("llm"), ApiFailure(429), t0);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].reason, "GpuEvictionBlocked");
  EXPECT_EQ(e[0].pod, (PodRef{"ai", "llm", ""}));
  EXPECT_TRUE(q.Due(t0 + absl::Seconds(29)).empty());
  ASSERT_EQ(q.Due(t0 + absl::Seconds(30)).size(), 1u);
  EXPECT_TRUE(q.Done(Order("llm"), ApiFailure(429), t0 + absl::Seconds(30)).empty());
  std::map<std::string, std::vector<state::EvictionStatus>> shown = q.ByGpu();
  ASSERT_EQ(shown["GPU-1"].size(), 1u);
  EXPECT_EQ(shown["GPU-1"][0].state, "blocked");
  EXPECT_EQ(shown["GPU-1"][0].tries, 2);

  e = q.Done(Order("llm"), absl::OkStatus(), t0 + absl::Seconds(60));
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].reason, "GpuPodEvicted");
  EXPECT_TRUE(absl::StrContains(e[0].note, "GPU-1 (GPU 0)")) << e[0].note;
  EXPECT_TRUE(q.ByGpu().empty());
  EXPECT_EQ(q.counts()["blocked"], 2u);
  EXPECT_EQ(q.counts()["evicted"], 1u);
  EXPECT_EQ(q.counts()["forbidden"], 0u);
}

// A refusal by RBAC is told once and retried less often (the fix needs no restart); a pod
// that is gone or was replaced ends its order quietly; a failure is retried.
TEST(EvictionQueueTest, ForbiddenGoneAndFailedOrders) {
  EvictionQueue q(EvictionQueue::Options{absl::Seconds(30), absl::Minutes(5)});
  const absl::Time t0 = absl::FromUnixSeconds(1'800'000'000);
  q.Add(Order("a"));
  q.Add(Order("b"));
  q.Add(Order("c"));
  ASSERT_EQ(q.Due(t0).size(), 3u);
  std::vector<NodeEvent> e = q.Done(Order("a"), ApiFailure(403), t0);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].reason, "GpuEvictionForbidden");
  EXPECT_TRUE(absl::StrContains(e[0].note, "(deploy/evict grants it)")) << e[0].note;
  EXPECT_TRUE(q.Done(Order("b"), ApiFailure(404), t0).empty());
  EXPECT_TRUE(q.Done(Order("c"), absl::UnavailableError("connection refused"), t0).empty());
  std::vector<EvictionOrder> due = q.Due(t0 + absl::Seconds(30));
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].pod.name, "c");
  EXPECT_EQ(q.Due(t0 + absl::Minutes(5)).size(), 2u);
  EXPECT_TRUE(q.Done(Order("a"), ApiFailure(403), t0 + absl::Minutes(5)).empty());  // told once
}

// A GPU back in service withdraws its orders, and only its own; a dry run's pods are shown
// and counted but never tried, and a real order for the same pod replaces one.
TEST(EvictionQueueTest, WithdrawAndDryRun) {
  EvictionQueue q;
  const absl::Time t0 = absl::FromUnixSeconds(1'800'000'000);
  q.Add(Order("a", "GPU-1"));
  q.Add(Order("b", "GPU-2"));
  q.AddDryRun(Order("c", "GPU-2"));
  EXPECT_EQ(q.Due(t0).size(), 2u);
  EXPECT_EQ(q.ByGpu()["GPU-2"].size(), 2u);
  EXPECT_EQ(q.counts()["dry_run"], 1u);
  q.Withdraw("GPU-2");
  ASSERT_EQ(q.Due(t0).size(), 1u);
  EXPECT_EQ(q.Due(t0)[0].pod.name, "a");
  EXPECT_TRUE(q.Done(Order("b", "GPU-2"), absl::OkStatus(), t0).empty());  // withdrawn meanwhile
  q.AddDryRun(Order("a", "GPU-1"));  // already ordered for real: stays an order
  EXPECT_EQ(q.ByGpu()["GPU-1"][0].state, "evicting");
  q.AddDryRun(Order("d", "GPU-1"));
  q.Add(Order("d", "GPU-1"));
  EXPECT_EQ(q.Due(t0).size(), 2u);
}

// EvictPod against the API server stand-in: the Eviction names the pod and its UID, and each
// answer the registry gives classifies as the queue expects.
class EvictPodTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.Start("token-1").ok());
    kube::KubeClientOptions o;
    o.qps = 0;
    o.max_attempts = 1;
    absl::StatusOr<std::unique_ptr<kube::KubeClient>> client =
        kube::KubeClient::FromConfig(server_.ClientConfig("token-1"), o, RealClock());
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
    for (const char* name : {"llm", "plates"}) {
      server_.PutPod(
          {{"metadata",
            {{"namespace", "ai"}, {"name", name}, {"uid", name + std::string("-uid")}}}});
    }
  }
  void TearDown() override {
    client_.reset();
    server_.Stop();
  }

  gpulet::testing::FakeApiServer server_;
  std::unique_ptr<kube::KubeClient> client_;
};

TEST_F(EvictPodTest, EachAnswerOfTheRegistryClassifies) {
  server_.BlockEvictions("ai", "llm", true);
  absl::Status blocked = EvictPod(*client_, {"ai", "llm", "llm-uid"});
  EXPECT_EQ(ClassifyEviction(blocked), EvictionResult::kBlocked) << blocked;
  EXPECT_TRUE(absl::StrContains(blocked.message(), "disruption budget")) << blocked;
  EXPECT_TRUE(server_.Pod("ai", "llm").has_value());

  // A pod replaced under the same name is not the one ordered out.
  absl::Status replaced = EvictPod(*client_, {"ai", "plates", "an-older-uid"});
  EXPECT_EQ(ClassifyEviction(replaced), EvictionResult::kGone) << replaced;
  EXPECT_TRUE(server_.Pod("ai", "plates").has_value());

  server_.BlockEvictions("ai", "llm", false);
  EXPECT_EQ(ClassifyEviction(EvictPod(*client_, {"ai", "llm", "llm-uid"})),
            EvictionResult::kEvicted);
  EXPECT_FALSE(server_.Pod("ai", "llm").has_value());
  EXPECT_EQ(ClassifyEviction(EvictPod(*client_, {"ai", "llm", "llm-uid"})), EvictionResult::kGone);

  server_.FailNext(1, 403, -1);
  EXPECT_EQ(ClassifyEviction(EvictPod(*client_, {"ai", "plates", ""})), EvictionResult::kForbidden);
  // Without a UID (pod attribution did not know it) the name alone is evicted.
  EXPECT_EQ(ClassifyEviction(EvictPod(*client_, {"ai", "plates", ""})), EvictionResult::kEvicted);

  std::vector<gpulet::testing::FakeApiServer::RecordedRequest> sent = server_.Requests();
  ASSERT_FALSE(sent.empty());
  const json body = json::parse(sent.front().body);
  EXPECT_EQ(sent.front().path, "/api/v1/namespaces/ai/pods/llm/eviction");
  EXPECT_EQ(body["apiVersion"], "policy/v1");
  EXPECT_EQ(body["kind"], "Eviction");
  EXPECT_EQ(body["deleteOptions"]["preconditions"]["uid"], "llm-uid");
}

}  // namespace
}  // namespace gpulet::cluster
