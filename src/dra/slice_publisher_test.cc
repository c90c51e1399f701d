// SlicePublisher against the stand-in API server (testing/fake_apiserver.h, which validates
// every slice as the real server does) over real TLS on loopback, with a real DeviceStore and
// a simulated clock for the retry interval: the wiring from the store to the pool's slices.
// The slice contents themselves are resource_slices_test.cc's.
#include "dra/slice_publisher.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kube/kube_client.h"
#include "kube/kube_config.h"
#include "testing/fake_apiserver.h"
#include "testing/simulated_clock.h"
#include "testing/wait_for.h"

namespace gpulet::dra {
namespace {

using nlohmann::json;
using ::testing::IsEmpty;
using ::testing::SizeIs;

#if GPULET_SANITIZED
constexpr absl::Duration kPromptly = absl::Seconds(3);  // sanitizers slow TLS several-fold
#else
constexpr absl::Duration kPromptly = absl::Seconds(1);
#endif
constexpr absl::Duration kLimit = absl::Seconds(10);  // a guard against a hang only

constexpr char kDriver[] = "gpu.gpulet.dev";
constexpr char kNode[] = "node-a";

gpu::Inventory Gpus(unsigned n) {
  gpu::Inventory inv;
  inv.nvml_status = absl::OkStatus();
  for (unsigned i = 0; i < n; ++i) {
    gpu::Gpu g;
    g.index = i;
    g.minor = i;
    g.uuid = absl::StrCat("GPU-", i);
    g.name = "NVIDIA H200";
    g.bus_id = absl::StrFormat("0000:%02x:00.0", i + 1);
    g.memory_total_bytes = 143771ull << 20;
    g.in_nvml = g.on_pci = true;
    inv.gpus.push_back(g);
  }
  return inv;
}

class SlicePublisherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.Start("token-1").ok());
    server_.AddNode({{"metadata", {{"name", kNode}, {"uid", "uid-node-a"}}}});
    client_ = NewClient();
    store_.SetInventory(Gpus(2), absl::Now());
  }

  // The publisher and the clients go before the server: an open keep-alive connection would
  // hold the server's stop for the keep-alive timeout.
  void TearDown() override {
    publisher_.reset();
    client_.reset();
    other_.reset();
    server_.Stop();
  }

  std::unique_ptr<kube::KubeClient> NewClient() {
    const kube::KubeConfig c = server_.ClientConfig("token-1");
    kube::KubeClientOptions o;
    o.qps = 0;
    o.max_attempts = 1;  // the publisher's own retry is under test
    absl::StatusOr<std::unique_ptr<kube::KubeClient>> client =
        kube::KubeClient::FromConfig(c, o, RealClock());
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  SlicePublisherOptions Options() {
    SlicePublisherOptions o;
    o.slices.driver = kDriver;
    o.slices.node_name = kNode;
    return o;
  }

  void Start(SlicePublisherOptions o) {
    publisher_ = std::make_unique<SlicePublisher>(client_.get(), &store_, std::move(o), &clock_);
    ASSERT_TRUE(publisher_->Start().ok());
  }
  void Start() { Start(Options()); }

  // Waits until the slices of the store's current version are in the server.
  void ExpectPublished() {
    ASSERT_TRUE(publisher_->WaitForPublished(store_.Get()->version, kLimit))
        << publisher_->stats().last_error;
  }

  std::vector<json> Slices() { return server_.ResourceSlices(); }
  json Slice(size_t i) {
    std::optional<json> s = server_.ResourceSlice(SliceName(kNode, kDriver, i));
    return s.has_value() ? *s : json();
  }
  // The first device's taints in slice 0 (null when none).
  json Gpu0Taints() { return Slice(0)["spec"]["devices"][0].value("taints", json()); }
  size_t Writes() {
    size_t n = 0;
    for (const auto& r : server_.Requests()) {
      n += r.method == "POST" || r.method == "PUT" || r.method == "DELETE";
    }
    return n;
  }

  void Xid79(const std::string& uuid) {
    store_.UpdateHealth(uuid, [](state::GpuHealth& h) {
      h.last_xid = 79;
      h.xid_counts[79] += 1;
      h.Raise("xid",
              {state::HealthState::kUnhealthy, "XID 79 (GPU_HAS_FALLEN_OFF_THE_BUS)",
               "reboot the node", absl::InfinitePast(), true},
              absl::Now());
    });
  }
  void Recover(const std::string& uuid) {
    store_.UpdateHealth(uuid, [](state::GpuHealth& h) { h.Clear("xid", absl::Now()); });
  }

  gpulet::testing::FakeApiServer server_;
  gpulet::testing::SimulatedClock clock_;
  std::unique_ptr<kube::KubeClient> client_;
  std::unique_ptr<kube::KubeClient> other_;  // someone else writing slices
  state::DeviceStore store_;
  std::unique_ptr<SlicePublisher> publisher_;
};

TEST(SliceNameTest, IsADnsSubdomainAndStaysDistinctWhenCut) {
  EXPECT_EQ(SliceName("node-a", "gpu.gpulet.dev", 0), "node-a-gpu.gpulet.dev-0");
  EXPECT_EQ(SliceName("Node_A", "GPU.gpulet.dev", 3), "node-a-gpu.gpulet.dev-3");
  const std::string node(250, 'n');
  const std::string a = SliceName(node + "a", kDriver, 1);
  const std::string b = SliceName(node + "b", kDriver, 1);
  EXPECT_LE(a.size(), 253u);
  EXPECT_NE(a, b);
  EXPECT_TRUE(absl::EndsWith(a, "-1"));
  // The stand-in's check is the API server's.
  for (const std::string& name : {a, SliceName("x.-y", kDriver, 0)}) {
    json slice = {
        {"apiVersion", "resource.k8s.io/v1"},
        {"kind", "ResourceSlice"},
        {"metadata", {{"name", name}}},
        {"spec", BuildSliceSpecs(state::Snapshot(),
                                 {kDriver, kNode, 1, false, 1024, false, {"all"}, "", ""})[0]}};
    EXPECT_THAT(gpulet::testing::ValidateResourceSlice(slice, nullptr), IsEmpty()) << name;
  }
}

TEST_F(SlicePublisherTest, FirstPublishWritesThePoolOwnedByTheNode) {
  Start();
  ExpectPublished();
  ASSERT_THAT(Slices(), SizeIs(1));
  const json slice = Slice(0);
  EXPECT_EQ(slice["spec"]["driver"], kDriver);
  EXPECT_EQ(slice["spec"]["nodeName"], kNode);
  EXPECT_EQ(slice["spec"]["pool"]["name"], kNode);
  EXPECT_EQ(slice["spec"]["pool"]["generation"], 1);
  EXPECT_EQ(slice["spec"]["pool"]["resourceSliceCount"], 1);
  EXPECT_THAT(slice["spec"]["devices"], SizeIs(2));
  EXPECT_EQ(slice["metadata"]["ownerReferences"], json::array({{{"apiVersion", "v1"},
                                                                {"kind", "Node"},
                                                                {"name", kNode},
                                                                {"uid", "uid-node-a"},
                                                                {"controller", true}}}));
  const SlicePublisher::Stats s = publisher_->stats();
  EXPECT_EQ(s.writes, 1u);
  EXPECT_EQ(s.generation, 1);
  EXPECT_EQ(s.errors, 0u);
  EXPECT_EQ(s.published_version, store_.Get()->version);
}

TEST_F(SlicePublisherTest, WithoutTheNodeItPublishesWithoutAnOwner) {
  // A node name the API server does not know (404): the slices still go out.
  SlicePublisherOptions o = Options();
  o.slices.node_name = "node-b";
  Start(o);
  ExpectPublished();
  std::optional<json> slice = server_.ResourceSlice(SliceName("node-b", kDriver, 0));
  ASSERT_TRUE(slice.has_value());
  EXPECT_FALSE((*slice)["metadata"].contains("ownerReferences"));
}

TEST_F(SlicePublisherTest, AnXidTaintsTheGpuWithinASecondAndRecoveryRemovesIt) {
  Start();
  ExpectPublished();
  EXPECT_TRUE(Gpu0Taints().is_null());

  const absl::Time before = absl::Now();
  Xid79("GPU-0");
  absl::Duration took = gpulet::testing::WaitFor([&] { return !Gpu0Taints().is_null(); }, kLimit);
  EXPECT_LT(took, kPromptly) << "the taint took " << took;
  const json taint = Gpu0Taints()[0];
  EXPECT_EQ(taint["key"], kUnhealthyTaintKey);
  EXPECT_EQ(taint["value"], "xid-79");
  EXPECT_LT(absl::Now() - before, kPromptly);
  EXPECT_EQ(Slice(0)["spec"]["pool"]["generation"], 2);
  EXPECT_FALSE(Slice(0)["spec"]["devices"][1].contains("taints")) << "GPU 1 is healthy";

  Recover("GPU-0");
  took = gpulet::testing::WaitFor([&] { return Gpu0Taints().is_null(); }, kLimit);
  EXPECT_LT(took, kPromptly);
  EXPECT_EQ(Slice(0)["spec"]["pool"]["generation"], 3);
  ExpectPublished();
  EXPECT_EQ(publisher_->stats().generation, 3);
  EXPECT_EQ(publisher_->stats().writes, 3u);
}

TEST_F(SlicePublisherTest, AnUnchangedSpecWritesNothing) {
  Start();
  ExpectPublished();
  const size_t writes = Writes();
  // A new snapshot whose slices are the same (an XID that does not take the GPU out).
  store_.UpdateHealth("GPU-1", [](state::GpuHealth& h) { h.xid_counts[13] += 1; });
  ExpectPublished();
  EXPECT_EQ(Writes(), writes);
  EXPECT_EQ(publisher_->stats().writes, 1u);
  EXPECT_EQ(Slice(0)["spec"]["pool"]["generation"], 1);
}

TEST_F(SlicePublisherTest, ARestartContinuesTheGenerationAndUpdatesInPlace) {
  Start();
  ExpectPublished();
  Xid79("GPU-0");
  ExpectPublished();
  EXPECT_EQ(Slice(0)["spec"]["pool"]["generation"], 2);
  const std::string uid = Slice(0)["metadata"]["uid"];
  publisher_.reset();
  // Stop left the slices in place.
  ASSERT_THAT(Slices(), SizeIs(1));

  Start();
  ExpectPublished();
  ASSERT_THAT(Slices(), SizeIs(1));
  EXPECT_EQ(Slice(0)["spec"]["pool"]["generation"], 3) << "never backwards across restarts";
  EXPECT_EQ(Slice(0)["metadata"]["uid"], uid) << "updated, not re-created";
  EXPECT_EQ(publisher_->stats().generation, 3);
}

TEST_F(SlicePublisherTest, AConflictReReadsTheSliceAndWritesAgain) {
  Start();
  ExpectPublished();
  // Someone else rewrites the slice: the publisher's resourceVersion is stale now.
  other_ = NewClient();
  json theirs = Slice(0);
  theirs["metadata"].erase("resourceVersion");
  theirs["spec"]["devices"] = json::array();
  ASSERT_TRUE(
      other_->Update(absl::StrCat(kResourceSlicesPath, "/", SliceName(kNode, kDriver, 0)), theirs)
          .ok());
  Xid79("GPU-0");
  ExpectPublished();
  EXPECT_GE(publisher_->stats().conflicts, 1u);
  EXPECT_EQ(publisher_->stats().errors, 0u);
  ASSERT_THAT(Slice(0)["spec"]["devices"], SizeIs(2));
  EXPECT_EQ(Gpu0Taints()[0]["value"], "xid-79");
}

TEST_F(SlicePublisherTest, AnUnavailableServerIsRetriedEveryRetryInterval) {
  Start();
  ExpectPublished();
  // The API server fails the next three requests: the write, and two retries.
  server_.FailNext(3, 503, -1);
  Xid79("GPU-0");
  for (uint64_t errors = 1; errors <= 3; ++errors) {
    ASSERT_NE(
        gpulet::testing::WaitFor([&] { return publisher_->stats().errors >= errors; }, kLimit),
        absl::InfiniteDuration());
    ASSERT_TRUE(clock_.AwaitSleepers(1));
    EXPECT_TRUE(Gpu0Taints().is_null());
    // Not before the retry interval.
    clock_.Advance(absl::Seconds(4));
    EXPECT_FALSE(publisher_->WaitForPublished(store_.Get()->version, absl::Milliseconds(20)));
    clock_.Advance(absl::Seconds(1));
  }
  ExpectPublished();
  EXPECT_EQ(Gpu0Taints()[0]["value"], "xid-79");
  EXPECT_EQ(publisher_->stats().errors, 3u);
  EXPECT_EQ(Slice(0)["spec"]["pool"]["generation"], 2) << "one change, one generation";
  EXPECT_THAT(publisher_->stats().last_error, IsEmpty());
}

TEST_F(SlicePublisherTest, AResyncRepairsADeletedSliceAndFollowsANewNodeUid) {
  Start();
  ExpectPublished();
  other_ = NewClient();
  ASSERT_TRUE(
      other_->Delete(absl::StrCat(kResourceSlicesPath, "/", SliceName(kNode, kDriver, 0))).ok());
  // The Node deleted and created again: a new uid.
  server_.AddNode({{"metadata", {{"name", kNode}, {"uid", "uid-node-a-2"}}}});
  const size_t writes = Writes();
  // Nothing changed in the store: nothing is written before the resync.
  clock_.Advance(absl::Minutes(4));
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(Writes(), writes);
  EXPECT_THAT(Slices(), IsEmpty());
  clock_.Advance(absl::Minutes(1));
  ASSERT_NE(gpulet::testing::WaitFor([&] { return !Slice(0).is_null(); }, kLimit),
            absl::InfiniteDuration());
  EXPECT_EQ(Slice(0)["metadata"]["ownerReferences"][0]["uid"], "uid-node-a-2");
  EXPECT_EQ(Slice(0)["spec"]["pool"]["generation"], 1) << "the same content";
}

TEST_F(SlicePublisherTest, MoreThan64DevicesSplitAndFewerDeleteTheExtraSlice) {
  store_.SetInventory(Gpus(70), absl::Now());
  Start();
  ExpectPublished();
  ASSERT_THAT(Slices(), SizeIs(2));
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(Slice(i)["spec"]["pool"]["resourceSliceCount"], 2);
    EXPECT_EQ(Slice(i)["spec"]["pool"]["generation"], 1);
  }
  EXPECT_THAT(Slice(1)["spec"]["devices"], SizeIs(6));

  store_.SetInventory(Gpus(3), absl::Now());
  ExpectPublished();
  ASSERT_THAT(Slices(), SizeIs(1));
  EXPECT_EQ(Slice(0)["spec"]["pool"]["resourceSliceCount"], 1);
  EXPECT_EQ(Slice(0)["spec"]["pool"]["generation"], 2);
  EXPECT_THAT(Slice(0)["spec"]["devices"], SizeIs(3));
}

TEST_F(SlicePublisherTest, LeftoversOfTheDriverGoAndOtherDriversStay) {
  other_ = NewClient();
  auto slice = [](const std::string& name, const std::string& driver, int64_t generation) {
    json spec = BuildSliceSpecs(
        state::Snapshot(), {driver, kNode, generation, false, 1024, false, {"all"}, "", ""})[0];
    return json{{"apiVersion", "resource.k8s.io/v1"},
                {"kind", "ResourceSlice"},
                {"metadata", {{"name", name}}},
                {"spec", spec}};
  };
  ASSERT_TRUE(other_->Create(kResourceSlicesPath, slice("node-a-old-name", kDriver, 7)).ok());
  ASSERT_TRUE(
      other_->Create(kResourceSlicesPath, slice("node-a-other", "other.example.com", 40)).ok());
  Start();
  ExpectPublished();
  EXPECT_FALSE(server_.ResourceSlice("node-a-old-name").has_value());
  EXPECT_TRUE(server_.ResourceSlice("node-a-other").has_value());
  EXPECT_EQ(Slice(0)["spec"]["pool"]["generation"], 8) << "past the leftovers' generation";
}

TEST_F(SlicePublisherTest, NewOptionsRepublish) {
  Start();
  ExpectPublished();
  SlicePublisherOptions o = Options();
  o.slices.memory_shares = true;
  publisher_->SetOptions(o);
  ASSERT_NE(gpulet::testing::WaitFor(
                [&] { return Slice(0)["spec"]["devices"][0].contains("allowMultipleAllocations"); },
                kLimit),
            absl::InfiniteDuration());
  EXPECT_EQ(Slice(0)["spec"]["pool"]["generation"], 2);
}

TEST_F(SlicePublisherTest, StartNeedsTheDriverAndNodeAndStopIsIdempotent) {
  SlicePublisher p(client_.get(), &store_, SlicePublisherOptions(), &clock_);
  EXPECT_TRUE(absl::IsInvalidArgument(p.Start()));
  Start();
  EXPECT_FALSE(publisher_->Start().ok());
  publisher_->Stop();
  publisher_->Stop();
}

}  // namespace
TEST(DroppedFieldsTest, NamesEachDroppedFieldOnceWithItsGate) {
  const json sent = {
      {"spec",
       {{"driver", "gpu.gpulet.dev"},
        {"devices",
         json::array({{{"name", "gpu-0"},
                       {"allowMultipleAllocations", true},
                       {"capacity",
                        {{"memory", {{"value", "80Gi"}, {"requestPolicy", {{"default", "1Gi"}}}}}}},
                       {"taints", json::array({{{"key", "k"}, {"effect", "NoSchedule"}}})}},
                      {{"name", "gpu-1"}, {"taints", json::array({{{"key", "k"}}})}}})}}}};
  EXPECT_TRUE(DroppedFields(sent, sent).empty());
  json stored = sent;
  stored["metadata"] = {{"resourceVersion", "7"}};  // what the server adds is not a drop
  for (json& d : stored["spec"]["devices"]) d.erase("taints");
  EXPECT_EQ(DroppedFields(sent, stored),
            std::vector<std::string>{"spec.devices[].taints (feature gate DRADeviceTaints)"});
  stored["spec"]["devices"][0].erase("allowMultipleAllocations");
  stored["spec"]["devices"][0]["capacity"]["memory"].erase("requestPolicy");
  stored["spec"].erase("driver");
  EXPECT_EQ(DroppedFields(sent, stored),
            (std::vector<std::string>{
                "spec.devices[].allowMultipleAllocations (feature gate DRAConsumableCapacity)",
                "spec.devices[].capacity.memory.requestPolicy (feature gate DRAConsumableCapacity)",
                "spec.devices[].taints (feature gate DRADeviceTaints)", "spec.driver"}));
}

// An API server with the DRADeviceTaints gate off stores the slice without the taint and says
// nothing: gpulet notices from the answer, keeps the finding in its stats, and does not
// rewrite the slice in a loop.
TEST_F(SlicePublisherTest, ATaintTheServerDropsIsNoticedAndNotRewrittenInALoop) {
  server_.SetDraGatesOff(/*device_taints=*/true, /*consumable_capacity=*/false);
  Start();
  ExpectPublished();
  EXPECT_TRUE(publisher_->stats().dropped_fields.empty());
  Xid79("GPU-0");
  ExpectPublished();
  EXPECT_TRUE(Gpu0Taints().is_null()) << "the stand-in kept a taint its gate drops";
  EXPECT_EQ(publisher_->stats().dropped_fields,
            std::vector<std::string>{"spec.devices[].taints (feature gate DRADeviceTaints)"});
  const size_t writes = Writes();
  store_.UpdateHealth("GPU-1", [](state::GpuHealth& h) { h.xid_counts[13] += 1; });
  ExpectPublished();
  EXPECT_EQ(Writes(), writes) << "the slice was rewritten though nothing changed";
  Recover("GPU-0");
  ExpectPublished();
  EXPECT_TRUE(publisher_->stats().dropped_fields.empty());
}

}  // namespace gpulet::dra
