#include "cluster/draining_rebooter.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "testing/fake_apiserver.h"
#include "testing/simulated_clock.h"

namespace gpulet::cluster {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

constexpr char kLeaseNs[] = "gpulet";
constexpr char kReason[] = "XID 79 (GPU_HAS_FALLEN_OFF_THE_BUS): the GPU has fallen off the bus";

// The inner rebooter (Talos' API in production): counts, and answers what it is told.
class FakeInner : public node::NodeRebooter {
 public:
  absl::Status Reboot(absl::string_view why, absl::string_view /*reason*/) override {
    asked.push_back(std::string(why));
    return result;
  }
  std::string Describe() const override { return "the test's Talos"; }
  std::vector<std::string> asked;
  absl::Status result = absl::OkStatus();
};

json Pod(const std::string& ns, const std::string& name, const std::string& node,
         json owner = nullptr) {
  json pod = {{"metadata", {{"namespace", ns}, {"name", name}}},
              {"spec", {{"nodeName", node}}},
              {"status", {{"phase", "Running"}}}};
  if (!owner.is_null()) pod["metadata"]["ownerReferences"] = json::array({owner});
  return pod;
}

class DrainingRebooterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.Start("token-1").ok());
    server_.AddNode({{"metadata", {{"name", "n1"}}}, {"spec", json::object()}});
    server_.AddNode({{"metadata", {{"name", "n2"}}}, {"spec", json::object()}});
    // What the seed's homelab node runs: ollama (a Deployment's), gpulet (a DaemonSet's), a
    // static pod, a finished Job's pod; and a pod on the other node.
    server_.PutPod(Pod("ai", "ollama-7d9f", "n1",
                       {{"kind", "ReplicaSet"}, {"name", "ollama-7d9f"}, {"controller", true}}));
    server_.PutPod(Pod("gpulet", "gpulet-x2k4", "n1",
                       {{"kind", "DaemonSet"}, {"name", "gpulet"}, {"controller", true}}));
    json mirror = Pod("kube-system", "kube-apiserver-n1", "n1");
    mirror["metadata"]["annotations"] = {{"kubernetes.io/config.mirror", "abc"}};
    server_.PutPod(mirror);
    json done = Pod("batch", "report-1", "n1");
    done["status"]["phase"] = "Succeeded";
    server_.PutPod(done);
    server_.PutPod(Pod("web", "shop", "n2"));
  }
  void TearDown() override { server_.Stop(); }

  // A rebooter for node n1 in boot `boot`; its inner rebooter is inner_ (not owned by it).
  std::unique_ptr<DrainingRebooter> Make(const std::string& boot, const std::string& node = "n1") {
    kube::KubeClientOptions o;
    o.qps = 0;
    o.max_attempts = 1;
    absl::StatusOr<std::unique_ptr<kube::KubeClient>> client =
        kube::KubeClient::FromConfig(server_.ClientConfig("token-1"), o, &clock_);
    EXPECT_TRUE(client.ok()) << client.status();
    DrainingRebooter::Options opts;
    opts.node_name = node;
    opts.lease_namespace = kLeaseNs;
    opts.boot_id = boot;
    opts.drain_timeout = absl::Minutes(15);
    auto inner = std::make_unique<Forward>(&inner_);
    return std::make_unique<DrainingRebooter>(*std::move(client), std::move(inner), opts, &clock_);
  }

  bool Unschedulable(const std::string& node) {
    return server_.Node(node)->value("spec", json::object()).value("unschedulable", false);
  }
  bool Annotated(const std::string& node) {
    return server_.Node(node)
        ->value("metadata", json::object())
        .value("annotations", json::object())
        .contains(kRebootCordonAnnotation);
  }
  std::optional<json> TheLease() {
    return server_.Lease(kLeaseNs, DrainingRebooter::LeaseName(kReason));
  }

  // Forwards to the test's FakeInner, which outlives the rebooters.
  class Forward : public node::NodeRebooter {
   public:
    explicit Forward(FakeInner* to) : to_(to) {}
    absl::Status Reboot(absl::string_view why, absl::string_view reason) override {
      return to_->Reboot(why, reason);
    }
    std::string Describe() const override { return to_->Describe(); }

   private:
    FakeInner* to_;
  };

  testing::FakeApiServer server_;
  testing::SimulatedClock clock_;
  FakeInner inner_;
};

// The whole of a request: the turn, the cordon, the drain as kubectl drain does it, the
// reboot; and in the next boot, the cordon and the turn given back.
TEST_F(DrainingRebooterTest, TakesItsTurnCordonsDrainsThenRebootsAndUndoesItAfter) {
  std::unique_ptr<DrainingRebooter> r = Make("boot-1");
  ASSERT_TRUE(r->Reboot("GPU-5090 (GPU 1): XID 79", kReason).ok());
  EXPECT_EQ(r->Reboot("again", kReason).code(), absl::StatusCode::kFailedPrecondition);
  r->Step();
  // The turn is n1's, the node cordoned, ollama evicted; the DaemonSet's, the static and the
  // finished pods stay, as does the other node's.
  std::optional<json> lease = TheLease();
  ASSERT_TRUE(lease.has_value());
  EXPECT_EQ((*lease)["spec"]["holderIdentity"], "n1");
  EXPECT_EQ((*lease)["spec"]["leaseDurationSeconds"], 1800);
  EXPECT_EQ((*lease)["metadata"]["labels"][kRebootLeaseLabel], "true");
  EXPECT_TRUE(Unschedulable("n1"));
  EXPECT_TRUE(Annotated("n1"));
  EXPECT_FALSE(Unschedulable("n2"));
  EXPECT_FALSE(server_.Pod("ai", "ollama-7d9f").has_value());
  EXPECT_TRUE(server_.Pod("gpulet", "gpulet-x2k4").has_value());
  EXPECT_TRUE(server_.Pod("kube-system", "kube-apiserver-n1").has_value());
  EXPECT_TRUE(server_.Pod("batch", "report-1").has_value());
  EXPECT_TRUE(server_.Pod("web", "shop").has_value());
  EXPECT_TRUE(inner_.asked.empty());  // the pass that evicted still counted ollama
  r->Step();
  ASSERT_EQ(inner_.asked.size(), 1u);
  EXPECT_THAT(r->Progress(), HasSubstr("took the request"));
  EXPECT_TRUE(r->TakeLateFailure().ok());
  // Still cordoned, still its turn: the reboot comes.
  EXPECT_TRUE(Unschedulable("n1"));
  EXPECT_TRUE(TheLease().has_value());

  // The next boot: uncordoned, the Lease given back.
  r.reset();
  std::unique_ptr<DrainingRebooter> after = Make("boot-2");
  after->Step();
  EXPECT_FALSE(Unschedulable("n1"));
  EXPECT_FALSE(Annotated("n1"));
  EXPECT_FALSE(TheLease().has_value());
  EXPECT_TRUE(after->TakeLateFailure().ok());
}

// A PodDisruptionBudget that never allows the eviction: the drain fails at its timeout,
// says which pod, and everything is undone; nothing is rebooted.
TEST_F(DrainingRebooterTest, ABudgetThatHoldsFailsTheDrainAtItsTimeoutAndUndoesIt) {
  server_.BlockEvictions("ai", "ollama-7d9f", true);
  std::unique_ptr<DrainingRebooter> r = Make("boot-1");
  ASSERT_TRUE(r->Reboot("GPU-5090: XID 79", kReason).ok());
  r->Step();
  EXPECT_TRUE(Unschedulable("n1"));
  EXPECT_THAT(r->Progress(), HasSubstr("PodDisruptionBudget"));
  EXPECT_THAT(r->Progress(), HasSubstr("ai/ollama-7d9f"));
  clock_.Advance(absl::Minutes(14));
  r->Step();
  EXPECT_TRUE(r->TakeLateFailure().ok());
  clock_.Advance(absl::Minutes(1));
  r->Step();
  absl::Status late = r->TakeLateFailure();
  EXPECT_EQ(late.code(), absl::StatusCode::kDeadlineExceeded) << late;
  EXPECT_THAT(late.message(), HasSubstr("within 15m"));
  EXPECT_THAT(late.message(), HasSubstr("ai/ollama-7d9f"));
  EXPECT_TRUE(r->TakeLateFailure().ok());  // once
  EXPECT_TRUE(inner_.asked.empty());
  EXPECT_FALSE(Unschedulable("n1"));
  EXPECT_FALSE(Annotated("n1"));
  EXPECT_FALSE(TheLease().has_value());
  EXPECT_TRUE(server_.Pod("ai", "ollama-7d9f").has_value());
  // Asked again later, it starts over.
  server_.BlockEvictions("ai", "ollama-7d9f", false);
  ASSERT_TRUE(r->Reboot("GPU-5090: XID 79", kReason).ok());
  r->Step();
  r->Step();
  EXPECT_EQ(inner_.asked.size(), 1u);
}

// Never two nodes at once for the same reason: n2's turn is waited out, and an expired turn
// is taken over. Another reason is another turn.
TEST_F(DrainingRebooterTest, AnotherNodesTurnForTheSameReasonIsWaitedOut) {
  std::unique_ptr<DrainingRebooter> n2 = Make("boot-9", "n2");
  ASSERT_TRUE(n2->Reboot("GPU-3090: XID 79", kReason).ok());
  n2->Step();
  EXPECT_EQ((*TheLease())["spec"]["holderIdentity"], "n2");

  std::unique_ptr<DrainingRebooter> r = Make("boot-1");
  ASSERT_TRUE(r->Reboot("GPU-5090: XID 79", kReason).ok());
  r->Step();
  EXPECT_FALSE(Unschedulable("n1"));
  EXPECT_TRUE(server_.Pod("ai", "ollama-7d9f").has_value());
  EXPECT_THAT(r->Progress(), HasSubstr("node n2 reboots for the same reason"));
  // Another reason is another Lease: it does not wait for n2's.
  const std::string thermal = "XID 48: double-bit ECC error";
  EXPECT_NE(DrainingRebooter::LeaseName(thermal), DrainingRebooter::LeaseName(kReason));
  // n2 never came back: its turn ends with its Lease (30 minutes), and n1 takes over.
  clock_.Advance(absl::Minutes(31));
  r->Step();
  EXPECT_EQ((*TheLease())["spec"]["holderIdentity"], "n1");
  EXPECT_TRUE(Unschedulable("n1"));
}

// A node a person cordoned stays cordoned, through the drain, the reboot and after.
TEST_F(DrainingRebooterTest, ACordonThatIsNotGpuletsIsLeftAlone) {
  server_.AddNode({{"metadata", {{"name", "n1"}}}, {"spec", {{"unschedulable", true}}}});
  std::unique_ptr<DrainingRebooter> r = Make("boot-1");
  ASSERT_TRUE(r->Reboot("GPU-5090: XID 79", kReason).ok());
  r->Step();
  r->Step();
  EXPECT_EQ(inner_.asked.size(), 1u);
  EXPECT_FALSE(Annotated("n1"));
  r.reset();
  Make("boot-2")->Step();
  EXPECT_TRUE(Unschedulable("n1"));
  EXPECT_FALSE(TheLease().has_value());
}

// gpulet restarted in the middle of its drain (same boot): the cordon and the turn are given
// back, and the request that was under way failed.
TEST_F(DrainingRebooterTest, ARestartMidDrainUndoesItAndFailsTheRequest) {
  server_.BlockEvictions("ai", "ollama-7d9f", true);
  std::unique_ptr<DrainingRebooter> r = Make("boot-1");
  ASSERT_TRUE(r->Reboot("GPU-5090: XID 79", kReason).ok());
  r->Step();
  ASSERT_TRUE(Unschedulable("n1"));
  r.reset();
  std::unique_ptr<DrainingRebooter> again = Make("boot-1");
  again->Step();
  EXPECT_FALSE(Unschedulable("n1"));
  EXPECT_FALSE(TheLease().has_value());
  absl::Status late = again->TakeLateFailure();
  EXPECT_EQ(late.code(), absl::StatusCode::kAborted) << late;
  EXPECT_THAT(late.message(), HasSubstr("restarted while it drained"));
}

// An API server that does not answer at first: the check for what to undo is tried again at
// the next step, and a request waits for it.
TEST_F(DrainingRebooterTest, AnUnansweredCheckAfterARebootIsTriedAgain) {
  server_.AddNode(
      {{"metadata", {{"name", "n1"}, {"annotations", {{kRebootCordonAnnotation, "boot-0"}}}}},
       {"spec", {{"unschedulable", true}}}});
  std::unique_ptr<DrainingRebooter> r = Make("boot-1");
  ASSERT_TRUE(r->Reboot("GPU-5090: XID 79", kReason).ok());
  server_.FailNext(1, 503, -1);
  r->Step();
  EXPECT_THAT(r->Progress(), HasSubstr("could not yet check"));
  EXPECT_TRUE(Unschedulable("n1"));
  EXPECT_FALSE(TheLease().has_value());
  r->Step();  // the undo, then the request: its turn, its own cordon, the drain
  EXPECT_TRUE(TheLease().has_value());
  EXPECT_TRUE(Annotated("n1"));
  EXPECT_EQ((*server_.Node("n1"))["metadata"]["annotations"][kRebootCordonAnnotation], "boot-1");
}

// Talos' API unreachable: tried 3 times, then the request fails and the drain is undone.
TEST_F(DrainingRebooterTest, ARebootThatCannotBeAskedFailsAfterThreeTriesAndUndoes) {
  inner_.result = absl::UnavailableError("Talos' API at talos.default:50000: no route to host");
  std::unique_ptr<DrainingRebooter> r = Make("boot-1");
  ASSERT_TRUE(r->Reboot("GPU-5090: XID 79", kReason).ok());
  r->Step();
  r->Step();
  r->Step();
  EXPECT_TRUE(r->TakeLateFailure().ok());
  EXPECT_THAT(r->Progress(), HasSubstr("try 2 of 3"));
  r->Step();
  absl::Status late = r->TakeLateFailure();
  EXPECT_EQ(late.code(), absl::StatusCode::kUnavailable) << late;
  EXPECT_EQ(inner_.asked.size(), 3u);
  EXPECT_FALSE(Unschedulable("n1"));
  EXPECT_FALSE(TheLease().has_value());
}

}  // namespace
}  // namespace gpulet::cluster
