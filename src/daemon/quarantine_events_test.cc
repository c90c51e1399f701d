#include "daemon/quarantine_events.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/rung_pods.h"

namespace gpulet::daemon {
namespace {

using ::testing::HasSubstr;

state::Snapshot TwoGpus(state::HealthState second) {
  state::Snapshot s;
  for (auto [uuid, index] : {std::pair{"GPU-3080", 0u}, std::pair{"GPU-5090", 1u}}) {
    state::DeviceRecord d;
    d.gpu.uuid = uuid;
    d.gpu.index = index;
    s.devices.push_back(d);
  }
  s.devices[1].health.state = second;
  s.devices[1].health.reason = "XID 79: GPU has fallen off the bus";
  return s;
}

TEST(QuarantineEventsTest, AGpuGoingOutIsAnEventOnEachPodHoldingItOnce) {
  QuarantineEvents q;
  metrics::PodMap pods = testing::RungPods();
  EXPECT_TRUE(q.Next(TwoGpus(state::HealthState::kHealthy), &pods).empty());  // learns
  std::vector<cluster::NodeEvent> e = q.Next(TwoGpus(state::HealthState::kUnhealthy), &pods);
  ASSERT_EQ(e.size(), 2u);  // two pods; ollama-0's two containers are one pod
  EXPECT_EQ(e[0].reason, "GpuUnhealthy");
  EXPECT_EQ(e[0].type, "Warning");
  ASSERT_TRUE(e[0].pod.has_value());
  EXPECT_EQ(*e[0].pod, (cluster::PodRef{"ai", "ollama-0", "uid-ollama"}));
  EXPECT_EQ(*e[1].pod, (cluster::PodRef{"anpr", "reader-7", ""}));
  EXPECT_THAT(e[0].note, HasSubstr("GPU-5090 (GPU 1), is out of service: XID 79"));
  EXPECT_THAT(e[0].note, HasSubstr("evict or delete the pod"));
  // Still out: nothing more; back and out again: told again.
  EXPECT_TRUE(q.Next(TwoGpus(state::HealthState::kUnhealthy), &pods).empty());
  EXPECT_TRUE(q.Next(TwoGpus(state::HealthState::kHealthy), &pods).empty());
  EXPECT_EQ(q.Next(TwoGpus(state::HealthState::kUnhealthy), &pods).size(), 2u);
}

TEST(QuarantineEventsTest, NothingAtStartOrWithoutPodAttribution) {
  QuarantineEvents q;
  metrics::PodMap pods = testing::RungPods();
  EXPECT_TRUE(
      q.Next(TwoGpus(state::HealthState::kUnhealthy), &pods).empty());  // already out at start
  QuarantineEvents blind;
  blind.Next(TwoGpus(state::HealthState::kHealthy), nullptr);
  EXPECT_TRUE(blind.Next(TwoGpus(state::HealthState::kUnhealthy), nullptr).empty());
  // A degraded GPU still serves: no pod is told.
  QuarantineEvents d;
  d.Next(TwoGpus(state::HealthState::kHealthy), &pods);
  EXPECT_TRUE(d.Next(TwoGpus(state::HealthState::kDegraded), &pods).empty());
}

}  // namespace
}  // namespace gpulet::daemon
