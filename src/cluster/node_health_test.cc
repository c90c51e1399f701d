#include "cluster/node_health.h"

#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/k8s_names.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gpulet::cluster {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1764770000);

state::Snapshot TwoGpus() {
  state::Snapshot snap;
  snap.nvml_ok = true;
  for (unsigned i = 0; i < 2; ++i) {
    state::DeviceRecord d;
    d.gpu.index = i;
    d.gpu.uuid = absl::StrCat("GPU-", i);
    d.gpu.name = i == 0 ? "NVIDIA GeForce RTX 3080" : "NVIDIA GeForce RTX 5090";
    d.gpu.bus_id = absl::StrCat("0000:0", i + 1, ":00.0");
    snap.devices.push_back(d);
  }
  return snap;
}

// GPU 1 hit XID 79: Unhealthy, and only a reboot brings it back.
void FallOffTheBus(state::Snapshot& snap) {
  state::GpuHealth& h = snap.devices[1].health;
  h.Raise("xid",
          {state::HealthState::kUnhealthy,
           "XID 79 (GPU_HAS_FALLEN_OFF_THE_BUS): the GPU fell off the bus",
           "drain and reboot the node", absl::InfinitePast(), /*reboot_required=*/true},
          kT0);
  h.last_xid = 79;
  h.last_xid_message = "the GPU fell off the bus";
  h.xid_counts[79] = 1;
}

TEST(NodeConditionsTest, AllFalseWhenEveryGpuIsHealthy) {
  std::vector<NodeConditionState> c = NodeConditionsFor(TwoGpus());
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].type, "GpuUnhealthy");
  EXPECT_EQ(c[1].type, "GpuNvmlUnavailable");
  EXPECT_EQ(c[2].type, "GpuRebootRequired");
  for (const NodeConditionState& s : c) EXPECT_FALSE(s.problem) << s.type;
  EXPECT_EQ(c[0].reason, "GpusHealthy");
  EXPECT_EQ(c[0].message, "all 2 GPUs are schedulable");
}

TEST(NodeConditionsTest, FatalXidNamesTheGpuCauseAndAction) {
  state::Snapshot snap = TwoGpus();
  FallOffTheBus(snap);
  std::vector<NodeConditionState> c = NodeConditionsFor(snap);
  EXPECT_TRUE(c[0].problem);
  EXPECT_EQ(c[0].reason, "XidCriticalError");
  EXPECT_EQ(c[0].message,
            "GPU 1 (NVIDIA GeForce RTX 5090, GPU-1): XID 79 (GPU_HAS_FALLEN_OFF_THE_BUS): the GPU "
            "fell off the bus. Action: drain and reboot the node.");
  EXPECT_FALSE(c[1].problem);
  EXPECT_TRUE(c[2].problem);
  EXPECT_EQ(c[2].reason, "GpuFaultNeedsReboot");
  EXPECT_TRUE(absl::StrContains(c[2].message, "GPU 1 (NVIDIA GeForce RTX 5090, GPU-1)"));

  // A GPU that stopped answering is named by its own reason; a degraded one is mentioned.
  snap = TwoGpus();
  snap.devices[0].health.Raise(
      "liveness", {state::HealthState::kUnhealthy, "GPU is lost", "reset the GPU"}, kT0);
  snap.devices[1].health.Raise(
      "row-remap", {state::HealthState::kDegraded, "row remapping pending", "reset the GPU"}, kT0);
  c = NodeConditionsFor(snap);
  EXPECT_EQ(c[0].reason, "GpuNotResponding");
  EXPECT_TRUE(absl::StrContains(c[0].message, "degraded but in service: GPU 1")) << c[0].message;
  EXPECT_FALSE(c[2].problem);
}

TEST(NodeConditionsTest, NvmlUnavailable) {
  state::Snapshot snap = TwoGpus();
  snap.nvml_ok = false;
  snap.nvml_error = "libnvidia-ml.so.1 not found";
  std::vector<NodeConditionState> c = NodeConditionsFor(snap);
  EXPECT_TRUE(c[1].problem);
  EXPECT_EQ(c[1].reason, "NvmlUnavailable");
  EXPECT_TRUE(absl::StrContains(c[1].message, "libnvidia-ml.so.1 not found"));
}

// A problem shows at once; it clears no sooner than `hold` after it appeared, so a GPU that
// answers and stops answering every second does not make the condition flap.
TEST(ConditionGateTest, ReportsAtOnceAndHoldsTheClearing) {
  const absl::Duration hold = absl::Minutes(5);
  ConditionGate gate(hold);
  state::Snapshot good = TwoGpus(), bad = TwoGpus();
  FallOffTheBus(bad);
  std::vector<NodeConditionState> c = gate.Apply(NodeConditionsFor(good), kT0);
  EXPECT_FALSE(c[0].problem);
  EXPECT_EQ(c[0].last_transition, kT0);
  EXPECT_EQ(gate.NextChange(), absl::InfiniteFuture());

  c = gate.Apply(NodeConditionsFor(bad), kT0 + absl::Seconds(10));
  EXPECT_TRUE(c[0].problem);
  EXPECT_EQ(c[0].last_transition, kT0 + absl::Seconds(10));
  EXPECT_EQ(gate.NextChange(), kT0 + absl::Seconds(10) + hold);

  c = gate.Apply(NodeConditionsFor(good), kT0 + absl::Seconds(11));
  EXPECT_TRUE(c[0].problem) << "cleared a second after it appeared";
  // A problem that outlasts its hold is no longer a deadline: nothing would change then.
  ConditionGate lasting(hold);
  lasting.Apply(NodeConditionsFor(bad), kT0);
  EXPECT_EQ(lasting.NextChange(), kT0 + hold);
  lasting.Apply(NodeConditionsFor(bad), kT0 + hold + absl::Seconds(1));
  EXPECT_EQ(lasting.NextChange(), absl::InfiniteFuture());
  EXPECT_EQ(c[0].reason, "XidCriticalError");
  c = gate.Apply(NodeConditionsFor(good), kT0 + absl::Seconds(10) + hold);
  EXPECT_FALSE(c[0].problem);
  EXPECT_EQ(c[0].last_transition, kT0 + absl::Seconds(10) + hold);
  // The unchanged False keeps its transition time; a new problem is again immediate.
  c = gate.Apply(NodeConditionsFor(good), kT0 + absl::Minutes(30));
  EXPECT_EQ(c[0].last_transition, kT0 + absl::Seconds(10) + hold);
  c = gate.Apply(NodeConditionsFor(bad), kT0 + absl::Minutes(31));
  EXPECT_TRUE(c[0].problem);
  EXPECT_EQ(c[0].last_transition, kT0 + absl::Minutes(31));
}

TEST(NodeEventsTest, TransitionsAndNewXids) {
  state::Snapshot good = TwoGpus(), bad = TwoGpus();
  FallOffTheBus(bad);
  EXPECT_TRUE(NodeEventsBetween(nullptr, good).empty());
  std::vector<NodeEvent> e = NodeEventsBetween(&good, bad);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].type, "Warning");
  EXPECT_EQ(e[0].reason, "GpuXid");
  EXPECT_EQ(e[0].note,
            "XID 79 on GPU 1 (NVIDIA GeForce RTX 5090, GPU-1): the GPU fell off the bus. "
            "`gpulet explain xid 79` says what it means and what to do.");
  EXPECT_EQ(e[1].reason, "GpuUnhealthy");
  EXPECT_TRUE(absl::StrContains(e[1].note, "Action: drain and reboot the node.")) << e[1].note;

  // 40 more of the same XID in one snapshot step: one event standing for 40.
  state::Snapshot storm = bad;
  storm.devices[1].health.xid_counts[79] = 41;
  e = NodeEventsBetween(&bad, storm);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].count, 40u);

  e = NodeEventsBetween(&storm, good);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].type, "Normal");
  EXPECT_EQ(e[0].reason, "GpuRecovered");

  // The first snapshot reports what is already wrong.
  e = NodeEventsBetween(nullptr, bad);
  EXPECT_EQ(e.size(), 2u);
  state::Snapshot no_nvml = good;
  no_nvml.nvml_ok = false;
  no_nvml.nvml_error = "driver not loaded";
  e = NodeEventsBetween(&good, no_nvml);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].reason, "NvmlUnavailable");
  e = NodeEventsBetween(&no_nvml, good);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].reason, "NvmlReady");
}

// 1,000 XIDs in 10 s, one at a time: one Event object, its series count updated at most
// every series interval, and the total right after the last flush.
TEST(EventAggregatorTest, AnXidStormMakesOneSeries) {
  EventAggregator agg("node-1", absl::Minutes(10), absl::Seconds(5));
  NodeEvent xid{"Warning", "GpuXid", "XID 79 on GPU 1", 1};
  int creates = 0, updates = 0;
  std::string name;
  uint64_t last_count = 0;
  for (int i = 0; i < 1000; ++i) {
    absl::Time now = kT0 + absl::Milliseconds(10 * i);
    std::vector<EventWrite> writes = agg.Record(xid, now);
    std::vector<EventWrite> flushed = agg.Flush(now);
    writes.insert(writes.end(), flushed.begin(), flushed.end());
    for (const EventWrite& w : writes) {
      if (w.kind == EventWrite::Kind::kCreate) {
        ++creates;
        name = w.name;
      } else {
        ++updates;
        EXPECT_EQ(w.name, name);
        EXPECT_GT(w.count, last_count);
      }
      last_count = w.count;
    }
  }
  EXPECT_EQ(creates, 1);
  EXPECT_LE(updates, 2);  // 10 s of repeats, one update per 5 s at most
  EXPECT_LT(last_count, 1000u);
  ASSERT_NE(agg.NextFlush(), absl::InfiniteFuture());
  std::vector<EventWrite> tail = agg.Flush(agg.NextFlush());
  ASSERT_EQ(tail.size(), 1u);
  EXPECT_EQ(tail[0].count, 1000u);
  EXPECT_EQ(tail[0].first, kT0);
  EXPECT_EQ(agg.NextFlush(), absl::InfiniteFuture());

  // The same event after the window: a new object; a different note: its own series.
  std::vector<EventWrite> later = agg.Record(xid, kT0 + absl::Minutes(30));
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].kind, EventWrite::Kind::kCreate);
  EXPECT_NE(later[0].name, name);
  NodeEvent other{"Warning", "GpuXid", "XID 48 on GPU 0", 1};
  std::vector<EventWrite> same_instant = agg.Record(other, kT0 + absl::Minutes(30));
  ASSERT_EQ(same_instant.size(), 1u);
  EXPECT_EQ(same_instant[0].kind, EventWrite::Kind::kCreate);
  EXPECT_NE(same_instant[0].name, later[0].name) << "two events at one instant share a name";
}

TEST(NodeHealthJsonTest, AnEventAboutAPodRegardsThePodAndKeepsItsOwnSeries) {
  NodeEvent e{"Warning", "GpuUnhealthy", "the GPU is out", 1};
  e.pod = PodRef{"ml", "anpr-0", ""};
  EventWrite w{EventWrite::Kind::kCreate, "node-1.1", e, 1, kT0, kT0};
  nlohmann::json o = EventObject(w, "node-1", "uid-1", "gpulet-abc");
  EXPECT_EQ(o["regarding"],
            (nlohmann::json{
                {"apiVersion", "v1"}, {"kind", "Pod"}, {"namespace", "ml"}, {"name", "anpr-0"}}));
  // The same note about two pods is two events, not one series.
  EventAggregator agg("node-1", absl::Minutes(10), absl::Seconds(30));
  EXPECT_EQ(agg.Record(e, kT0).size(), 1u);
  NodeEvent other = e;
  other.pod->name = "anpr-1";
  std::vector<EventWrite> second = agg.Record(other, kT0);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].kind, EventWrite::Kind::kCreate);
}

TEST(NodeHealthJsonTest, EventAndConditionObjectsUseTheApiFields) {
  EventWrite w{EventWrite::Kind::kCreate, "node-1.187e", {"Warning", "GpuXid", "XID 79", 1}, 3, kT0,
               kT0 + absl::Seconds(2)};
  nlohmann::json e = EventObject(w, "node-1", "uid-1", "gpulet-abc");
  EXPECT_EQ(e["apiVersion"], "events.k8s.io/v1");
  EXPECT_EQ(e["metadata"]["name"], "node-1.187e");
  EXPECT_EQ(e["regarding"]["kind"], "Node");
  EXPECT_EQ(e["regarding"]["uid"], "uid-1");
  EXPECT_EQ(e["eventTime"], ApiMicroTime(kT0));
  EXPECT_EQ(e["series"]["count"], 3);
  EXPECT_EQ(e["reportingController"], "gpulet.dev/gpulet");
  EXPECT_EQ(e["action"], "GpuHealthCheck");
  EXPECT_EQ(ApiMicroTime(kT0 + absl::Microseconds(12)), "2025-12-03T13:53:20.000012Z");
  nlohmann::json p = EventSeriesPatch(w);
  EXPECT_EQ(p["series"]["count"], 3);

  state::Snapshot bad = TwoGpus();
  FallOffTheBus(bad);
  ConditionGate gate(absl::Minutes(5));
  nlohmann::json s =
      NodeConditionsPatch(gate.Apply(NodeConditionsFor(bad), kT0), kT0 + absl::Seconds(1));
  const nlohmann::json& list = s["status"]["conditions"];
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0]["type"], "GpuUnhealthy");
  EXPECT_EQ(list[0]["status"], "True");
  EXPECT_EQ(list[0]["lastTransitionTime"], "2025-12-03T13:53:20Z");
  EXPECT_EQ(list[0]["lastHeartbeatTime"], "2025-12-03T13:53:21Z");
  EXPECT_EQ(list[1]["status"], "False");
}

TEST(NodeHealthJsonTest, EventNamesAreValidForEveryValidNodeName) {
  // A Node may be named with 253 characters, in labels of any length; the Event's name is the
  // node's plus ".<hex nanoseconds>" and must still be a DNS subdomain of at most 253.
  const std::string labels = absl::StrCat(std::string(62, 'a'), ".", std::string(61, 'b'), "-c.");
  std::vector<std::string> nodes = {"node-1", std::string(253, 'n'),
                                    absl::StrCat(std::string(236, 'x'), "-y.z-0123456789ab"),
                                    absl::StrCat(labels, labels).substr(0, 253)};
  // Cuts that would end on a '-' or a '.' for every suffix length.
  for (size_t dash = 230; dash < 252; ++dash) {
    std::string n(253, 'k');
    n[dash] = dash % 2 ? '-' : '.';
    nodes.push_back(n);
  }
  for (const std::string& node : nodes) {
    ASSERT_TRUE(IsDnsSubdomain(node)) << node;
    for (uint64_t nanos : {uint64_t{1}, uint64_t{0x187e}, uint64_t{1764770000123456789},
                           std::numeric_limits<uint64_t>::max()}) {
      const std::string name = EventName(node, nanos);
      EXPECT_TRUE(IsDnsSubdomain(name)) << name;
      EXPECT_TRUE(absl::EndsWith(name, absl::StrFormat(".%x", nanos))) << name;
    }
  }
  EXPECT_EQ(EventName("node-1", 0x187e), "node-1.187e");  // short names are client-go's
  // Distinct instants stay distinct names however long the node's name.
  EXPECT_NE(EventName(std::string(253, 'n'), 1), EventName(std::string(253, 'n'), 2));
}

TEST(NodeHealthJsonTest, EventFieldsStayWithinTheApiServersLimits) {
  NodeEvent e{"Warning", "GpuXid", std::string(5000, 'x'), 1};
  EventWrite w{EventWrite::Kind::kCreate, "node-1.1", e, 1, kT0, kT0};
  nlohmann::json o = EventObject(w, "node-1", "", std::string(300, 'p'));
  EXPECT_LE(o["note"].get<std::string>().size(), 1024u);
  EXPECT_EQ(o["reportingInstance"].get<std::string>().size(), 128u);
}

}  // namespace
}  // namespace gpulet::cluster
