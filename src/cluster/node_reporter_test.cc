// NodeReporter against the stand-in API server (testing/fake_apiserver.h) over real TLS on
// loopback, with a real DeviceStore: the wiring from health verdicts to Node conditions,
// Events and the taint. The rules themselves are node_health_test.cc's.
#include "cluster/node_reporter.h"

#include <sys/stat.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kube/kube_client.h"
#include "kube/kube_config.h"
#include "testing/fake_apiserver.h"
#include "testing/files.h"
#include "testing/wait_for.h"

namespace gpulet::cluster {
namespace {

using nlohmann::json;

#if GPULET_SANITIZED
constexpr absl::Duration kPromptly = absl::Seconds(3);  // sanitizers slow TLS several-fold
#else
constexpr absl::Duration kPromptly = absl::Seconds(1);
#endif

using gpulet::testing::WaitFor;

gpu::Inventory TwoGpus() {
  gpu::Inventory inv;
  inv.nvml_status = absl::OkStatus();
  for (unsigned i = 0; i < 2; ++i) {
    gpu::Gpu g;
    g.index = i;
    g.uuid = absl::StrCat("GPU-", i);
    g.name = "NVIDIA H100 80GB HBM3";
    g.bus_id = absl::StrCat("0000:0", i + 1, ":00.0");
    g.in_nvml = true;
    g.on_pci = true;
    inv.gpus.push_back(g);
  }
  return inv;
}

// Options::labels that gives `labels` whatever the snapshot.
std::function<std::map<std::string, std::string>(const state::Snapshot&)> Fixed(
    std::map<std::string, std::string> labels) {
  return [labels](const state::Snapshot&) { return labels; };
}

class NodeReporterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.Start("token-1").ok());
    server_.AddNode(
        {{"metadata", {{"name", "node-1"}, {"uid", "uid-node-1"}}},
         {"spec",
          {{"taints",
            json::array({{{"key", "example.com/maintenance"}, {"effect", "NoSchedule"}}})}}},
         {"status",
          {{"conditions",
            json::array({{{"type", "Ready"}, {"status", "True"}, {"reason", "KubeletReady"}}})}}}});
    token_file_ = dir_.Write("token", "token-1\n");
    chmod(token_file_.c_str(), 0600);
    kube::KubeConfig c;
    ASSERT_TRUE(kube::ParseServerUrl(server_.url(), "test", &c).ok());
    c.ca_pem = server_.ca().cert_pem;
    c.ca_source = "the test CA";
    c.token_file = token_file_;
    c.source = "test";
    config_ = c;
    kube::KubeClientOptions o;
    o.qps = 0;
    o.initial_backoff = absl::Milliseconds(5);
    o.max_backoff = absl::Milliseconds(50);
    o.max_attempts = 2;
    absl::StatusOr<std::unique_ptr<kube::KubeClient>> client =
        kube::KubeClient::FromConfig(c, o, RealClock());
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
    store_.SetInventory(TwoGpus(), absl::Now());
  }

  void Start(NodeReporter::Options o = {}) {
    o.node_name = "node-1";
    o.instance = "gpulet-test";
    o.retry_interval = absl::Milliseconds(50);
    if (o.hold == absl::Minutes(5)) o.hold = absl::Milliseconds(300);
    if (o.series_interval == absl::Seconds(10)) o.series_interval = absl::Milliseconds(200);
    reporter_ = std::make_unique<NodeReporter>(&store_, client_.get(), o);
    reporter_->Start();
  }

  // The client goes before the server: its open keep-alive connection would hold the
  // server's stop for the keep-alive timeout.
  void TearDown() override {
    reporter_.reset();
    client_.reset();
    server_.Stop();
  }

  bool ConditionIs(const std::string& type, const std::string& status) {
    json c = server_.NodeCondition("node-1", type);
    return !c.is_null() && c.value("status", "") == status;
  }
  std::vector<json> EventsWithReason(const std::string& reason) {
    return server_.EventsWithReason(reason);
  }

  void Xid(const std::string& uuid, int xid, int times = 1) {
    store_.UpdateHealth(uuid, [&](state::GpuHealth& h) {
      h.last_xid = xid;
      h.last_xid_message = "the GPU fell off the bus";
      h.xid_counts[xid] += times;
      h.Raise("xid",
              {state::HealthState::kUnhealthy,
               absl::StrCat("XID ", xid, " (GPU_HAS_FALLEN_OFF_THE_BUS)"),
               "drain and reboot the node", absl::InfinitePast(), true},
              absl::Now());
    });
  }
  void Recover(const std::string& uuid) {
    store_.UpdateHealth(uuid, [&](state::GpuHealth& h) { h.Clear("xid", absl::Now()); });
  }

  gpulet::testing::ScratchDir dir_;
  gpulet::testing::FakeApiServer server_;
  std::string token_file_;
  kube::KubeConfig config_;
  std::unique_ptr<kube::KubeClient> client_;
  state::DeviceStore store_;
  std::unique_ptr<NodeReporter> reporter_;
};

TEST_F(NodeReporterTest, XidMakesTheConditionTrueAndAnEventPromptly) {
  Start();
  ASSERT_NE(WaitFor([&] { return ConditionIs("GpuUnhealthy", "False"); }),
            absl::InfiniteDuration());
  EXPECT_TRUE(ConditionIs("GpuNvmlUnavailable", "False"));
  EXPECT_TRUE(ConditionIs("GpuRebootRequired", "False"));
  EXPECT_TRUE(ConditionIs("Ready", "True")) << "the kubelet's condition was touched";

  Xid("GPU-1", 79);
  absl::Duration took = WaitFor([&] {
    return ConditionIs("GpuUnhealthy", "True") && !EventsWithReason("GpuUnhealthy").empty() &&
           !EventsWithReason("GpuXid").empty();
  });
  EXPECT_LE(took, kPromptly);
  json c = server_.NodeCondition("node-1", "GpuUnhealthy");
  EXPECT_EQ(c["reason"], "XidCriticalError");
  EXPECT_NE(c["message"].get<std::string>().find("GPU 1 (NVIDIA H100 80GB HBM3, GPU-1)"),
            std::string::npos)
      << c;
  EXPECT_TRUE(ConditionIs("GpuRebootRequired", "True"));
  json e = EventsWithReason("GpuXid")[0];
  EXPECT_EQ(e["type"], "Warning");
  EXPECT_EQ(e["regarding"]["kind"], "Node");
  EXPECT_EQ(e["regarding"]["name"], "node-1");
  EXPECT_EQ(e["regarding"]["uid"], "uid-node-1");
  EXPECT_EQ(e["reportingInstance"], "gpulet-test");
}

// Events from outside the store (a VRAM slice at its quota, posted by the sampler) are
// written with the store's own.
TEST_F(NodeReporterTest, EventsPostedToTheInboxAreWritten) {
  NodeReporter::Options o;
  o.inbox = std::make_shared<EventInbox>();
  Start(o);
  o.inbox->Post(
      {NodeEvent{"Warning", "GpuVramQuotaReached", "ml/anpr-0/anpr reached its quota", 3}});
  ASSERT_NE(WaitFor([&] { return !EventsWithReason("GpuVramQuotaReached").empty(); }),
            absl::InfiniteDuration());
  json e = EventsWithReason("GpuVramQuotaReached")[0];
  EXPECT_EQ(e["type"], "Warning");
  EXPECT_EQ(e["note"], "ml/anpr-0/anpr reached its quota");
  EXPECT_EQ(e["regarding"]["kind"], "Node");
}

// An event about a pod regards the pod and is written in the pod's namespace.
TEST_F(NodeReporterTest, AnEventAboutAPodIsWrittenInItsNamespace) {
  NodeReporter::Options o;
  o.inbox = std::make_shared<EventInbox>();
  Start(o);
  NodeEvent e{"Warning", "GpuUnhealthy", "the GPU this pod holds is out of service", 1};
  e.pod = PodRef{"ml", "anpr-0", "uid-anpr"};
  o.inbox->Post({e});
  ASSERT_NE(WaitFor([&] { return !EventsWithReason("GpuUnhealthy").empty(); }),
            absl::InfiniteDuration());
  json got = EventsWithReason("GpuUnhealthy")[0];
  EXPECT_EQ(got["metadata"]["namespace"], "ml") << got;
  EXPECT_EQ(got["regarding"]["kind"], "Pod");
  EXPECT_EQ(got["regarding"]["namespace"], "ml");
  EXPECT_EQ(got["regarding"]["name"], "anpr-0");
  EXPECT_EQ(got["regarding"]["uid"], "uid-anpr");
}

// The condition clears no sooner than the hold after it appeared, and a recovery Event says so.
TEST_F(NodeReporterTest, RecoveryClearsTheConditionAfterTheHold) {
  NodeReporter::Options o;
  o.hold = absl::Milliseconds(400);
  Start(o);
  Xid("GPU-0", 79);
  ASSERT_NE(WaitFor([&] { return ConditionIs("GpuUnhealthy", "True"); }), absl::InfiniteDuration());
  const absl::Time true_at = absl::Now();
  Recover("GPU-0");
  ASSERT_NE(WaitFor([&] { return ConditionIs("GpuUnhealthy", "False"); }),
            absl::InfiniteDuration());
  EXPECT_GE(absl::Now() - true_at, absl::Milliseconds(300));
  EXPECT_NE(WaitFor([&] { return !EventsWithReason("GpuRecovered").empty(); }),
            absl::InfiniteDuration());
}

// While the API server fails every call, the store (what the device plugin and metrics read)
// is never held up; when it answers again, the conditions and events catch up.
TEST_F(NodeReporterTest, AnUnreachableApiServerDelaysNothingAndIsCaughtUpAfter) {
  Start();
  ASSERT_NE(WaitFor([&] { return ConditionIs("GpuUnhealthy", "False"); }),
            absl::InfiniteDuration());
  server_.FailNext(1000000, 503, -1);
  const absl::Time before = absl::Now();
  Xid("GPU-1", 79);
  EXPECT_LT(absl::Now() - before, absl::Milliseconds(100)) << "a store write waited";
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_TRUE(ConditionIs("GpuUnhealthy", "False")) << "written through a failing server?";
  EXPECT_GT(reporter_->stats().errors, 0u);
  server_.FailNext(0, 503, -1);
  EXPECT_NE(WaitFor([&] {
              return ConditionIs("GpuUnhealthy", "True") && !EventsWithReason("GpuXid").empty();
            }),
            absl::InfiniteDuration());
}

// A storm of XIDs on one GPU makes one Event object whose series counts them all.
TEST_F(NodeReporterTest, AnXidStormMakesOneEventSeries) {
  Start();
  for (int i = 0; i < 1000; ++i) {
    Xid("GPU-1", 79);
    if (i % 100 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_NE(WaitFor([&] {
              std::vector<json> xids = EventsWithReason("GpuXid");
              return xids.size() == 1 && xids[0].contains("series") &&
                     xids[0]["series"].value("count", 0) == 1000;
            }),
            absl::InfiniteDuration())
      << json(EventsWithReason("GpuXid")).dump();
  EXPECT_EQ(EventsWithReason("GpuUnhealthy").size(), 1u);
}

// The taint: only when every GPU is out, with the configured effect; other taints are kept;
// removed when a GPU returns.
TEST_F(NodeReporterTest, TaintOnlyWhenEveryGpuIsOutAndOnlyGpuletsOwn) {
  NodeReporter::Options o;
  o.taint = true;
  o.taint_effect = "NoExecute";
  o.hold = absl::Milliseconds(50);
  Start(o);
  auto taints = [&] { return (*server_.Node("node-1"))["spec"].value("taints", json::array()); };
  auto has_ours = [&] {
    for (const json& t : taints()) {
      if (t.value("key", "") == kUnhealthyTaintKey) return t.value("effect", "") == "NoExecute";
    }
    return false;
  };
  Xid("GPU-0", 79);
  ASSERT_NE(WaitFor([&] { return ConditionIs("GpuUnhealthy", "True"); }), absl::InfiniteDuration());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(has_ours()) << "tainted with one GPU of two out";
  Xid("GPU-1", 79);
  ASSERT_NE(WaitFor(has_ours), absl::InfiniteDuration()) << taints().dump();
  EXPECT_EQ(taints().size(), 2u);
  Recover("GPU-1");
  ASSERT_NE(WaitFor([&] { return !has_ours(); }), absl::InfiniteDuration());
  ASSERT_EQ(taints().size(), 1u);
  EXPECT_EQ(taints()[0]["key"], "example.com/maintenance");
}

// With the taint off, a taint an earlier gpulet left is removed; others stay.
TEST_F(NodeReporterTest, ATaintLeftBehindIsRemovedWhenTheTaintIsOff) {
  json node = *server_.Node("node-1");
  node["spec"]["taints"].push_back({{"key", kUnhealthyTaintKey}, {"effect", "NoSchedule"}});
  server_.AddNode(node);
  Start();
  auto taints = [&] { return (*server_.Node("node-1"))["spec"].value("taints", json::array()); };
  ASSERT_NE(WaitFor([&] { return taints().size() == 1; }), absl::InfiniteDuration())
      << taints().dump();
  EXPECT_EQ(taints()[0]["key"], "example.com/maintenance");
}

// Node labels: written with the annotation that lists them; a gpulet with them off removes
// exactly those, and labels others set stay, the user's nvidia.com/gpu.present=true (which
// the DaemonSet selects nodes by) included, though gpulet's labels have the same key and
// value (found by the e2e suite: a gpulet with labels off took it away, and the DaemonSet
// then removed gpulet from the node).
TEST_F(NodeReporterTest, NodeLabelsAreWrittenAndOnlyGpuletsAreRemoved) {
  json node = *server_.Node("node-1");
  node["metadata"]["labels"] = {
      {"kubernetes.io/hostname", "node-1"}, {"team", "ml"}, {"nvidia.com/gpu.present", "true"}};
  server_.AddNode(node);
  NodeReporter::Options o;
  o.node_labels = true;
  o.labels = Fixed({{"nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"},
                    {"nvidia.com/gpu.present", "true"},
                    {"gpulet.dev/kernel-module-flavor", "open"},
                    {"example.com/not-ours", "x"}});
  Start(o);
  auto labels = [&] {
    return (*server_.Node("node-1"))["metadata"].value("labels", json::object());
  };
  ASSERT_NE(WaitFor([&] { return labels().contains("nvidia.com/gpu.product"); }),
            absl::InfiniteDuration());
  EXPECT_EQ(labels()["gpulet.dev/kernel-module-flavor"], "open");
  EXPECT_FALSE(labels().contains("example.com/not-ours")) << "a key outside gpulet's prefixes";
  EXPECT_EQ((*server_.Node("node-1"))["metadata"]["annotations"][kNodeLabelsAnnotation],
            "gpulet.dev/kernel-module-flavor,nvidia.com/gpu.product");

  reporter_->Stop();
  NodeReporter::Options off;
  off.node_name = "node-1";
  off.retry_interval = absl::Milliseconds(50);
  auto client = kube::KubeClient::FromConfig(config_, kube::KubeClientOptions(), RealClock());
  ASSERT_TRUE(client.ok());
  NodeReporter again(&store_, client->get(), off);
  again.Start();
  ASSERT_NE(WaitFor([&] { return !labels().contains("nvidia.com/gpu.product"); }),
            absl::InfiniteDuration());
  again.Stop();
  EXPECT_FALSE(labels().contains("gpulet.dev/kernel-module-flavor"));
  EXPECT_EQ(labels()["team"], "ml");
  EXPECT_EQ(labels()["kubernetes.io/hostname"], "node-1");
  EXPECT_EQ(labels()["nvidia.com/gpu.present"], "true");
  EXPECT_FALSE((*server_.Node("node-1"))["metadata"]
                   .value("annotations", json::object())
                   .contains(kNodeLabelsAnnotation));
}

// The labels follow the store: a MIG layout changed under gpulet (the MIG watcher's
// SetMigLayout) is on the Node without a new reporter (found by make e2e's mig scenario,
// where the Node kept the labels of the layout gpulet started with); a key the new snapshot
// no longer gives is removed.
TEST_F(NodeReporterTest, LabelsFollowTheStoresSnapshot) {
  NodeReporter::Options o;
  o.node_labels = true;
  o.labels = [](const state::Snapshot& snap) {
    std::map<std::string, std::string> labels;
    for (const gpu::MigDeviceInfo& m : snap.devices[0].gpu.mig_devices) {
      std::string& count = labels[absl::StrCat("nvidia.com/mig-", m.profile, ".count")];
      count = absl::StrCat(count.empty() ? 1 : std::stoi(count) + 1);
    }
    return labels;
  };
  Start(o);
  auto label = [&](const std::string& key) {
    return (*server_.Node("node-1"))["metadata"].value("labels", json::object()).value(key, "");
  };
  auto layout = [](std::vector<std::string> profiles) {
    gpu::MigLayout l;
    l.enabled = l.pending_enabled = true;
    for (size_t i = 0; i < profiles.size(); ++i) {
      gpu::MigDeviceInfo m;
      m.index = static_cast<unsigned>(i);
      m.gpu_instance_id = static_cast<unsigned>(i + 1);
      m.profile = profiles[i];
      m.uuid = absl::StrCat("MIG-", i);
      l.devices.push_back(m);
    }
    return l;
  };
  ASSERT_TRUE(store_.SetMigLayout("GPU-0", layout({"3g.40gb", "1g.10gb", "1g.10gb"})));
  ASSERT_NE(WaitFor([&] { return label("nvidia.com/mig-1g.10gb.count") == "2"; }),
            absl::InfiniteDuration());
  EXPECT_EQ(label("nvidia.com/mig-3g.40gb.count"), "1");

  ASSERT_TRUE(store_.SetMigLayout("GPU-0", layout(std::vector<std::string>(7, "1g.10gb"))));
  ASSERT_NE(WaitFor([&] { return label("nvidia.com/mig-1g.10gb.count") == "7"; }),
            absl::InfiniteDuration());
  EXPECT_EQ(label("nvidia.com/mig-3g.40gb.count"), "") << "a profile that went stays labelled";
  EXPECT_EQ((*server_.Node("node-1"))["metadata"]["annotations"][kNodeLabelsAnnotation],
            "nvidia.com/mig-1g.10gb.count");
}

// Someone else removes gpulet's condition, taint and labels: they come back, and keys that
// are not gpulet's stay as that someone left them.
TEST_F(NodeReporterTest, RestoresWhatSomeoneElseRemoves) {
  NodeReporter::Options o;
  o.taint = true;
  o.hold = absl::Milliseconds(50);
  o.node_labels = true;
  o.labels = Fixed({{"nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"}});
  Start(o);
  auto node = [&] { return *server_.Node("node-1"); };
  auto has_taint = [&] {
    for (const json& t : node()["spec"].value("taints", json::array())) {
      if (t.value("key", "") == kUnhealthyTaintKey) return true;
    }
    return false;
  };
  auto all_there = [&] {
    return ConditionIs("GpuUnhealthy", "True") && has_taint() &&
           node()["metadata"].value("labels", json::object()).value("nvidia.com/gpu.product", "") ==
               "NVIDIA-H100-80GB-HBM3";
  };
  Xid("GPU-0", 79);
  Xid("GPU-1", 79);
  ASSERT_NE(WaitFor(all_there), absl::InfiniteDuration()) << node().dump();
  EXPECT_EQ(reporter_->stats().restores, 0u);

  json changed = node();
  changed["metadata"]["labels"] = {{"team", "ml"}};
  changed["spec"]["taints"] =
      json::array({{{"key", "example.com/maintenance"}, {"effect", "NoSchedule"}}});
  changed["status"]["conditions"] =
      json::array({{{"type", "Ready"}, {"status", "True"}, {"reason", "KubeletReady"}}});
  server_.AddNode(changed);
  ASSERT_NE(WaitFor(all_there), absl::InfiniteDuration()) << node().dump();
  EXPECT_GE(reporter_->stats().restores, 1u);
  EXPECT_EQ(node()["metadata"]["labels"]["team"], "ml");
  EXPECT_EQ(node()["spec"]["taints"].size(), 2u) << node().dump();
  EXPECT_TRUE(ConditionIs("Ready", "True"));
}

// An Event the API server refuses as invalid is logged and dropped: never retried, and the
// events queued behind it still go out.
TEST_F(NodeReporterTest, ARefusedEventIsDroppedAndTheOnesBehindItGoOut) {
  NodeReporter::Options o;
  o.inbox = std::make_shared<EventInbox>();
  Start(o);
  o.inbox->Post({NodeEvent{"Warning", std::string(200, 'R'), "a reason past 128 characters", 1},
                 NodeEvent{"Warning", "GpuVramQuotaReached", "ml/anpr-0/anpr at its quota", 1}});
  ASSERT_NE(WaitFor([&] { return !EventsWithReason("GpuVramQuotaReached").empty(); }),
            absl::InfiniteDuration());
  EXPECT_EQ(reporter_->stats().events_rejected, 1u);
  EXPECT_TRUE(EventsWithReason(std::string(200, 'R')).empty());
}

}  // namespace
}  // namespace gpulet::cluster
