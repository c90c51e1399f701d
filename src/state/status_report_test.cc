#include "state/status_report.h"

#include <functional>
#include <string>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpulet::state {
namespace {

using ::testing::HasSubstr;

StatusReport Everything() {
  StatusReport r;
  r.nvml_ok = true;
  GpuStatus a;
  a.index = 0;
  a.uuid = "GPU-a";
  a.name = "NVIDIA GeForce RTX 3080";
  a.pci_bus_id = "0000:01:00.0";
  a.health = HealthState::kDegraded;
  a.reason = "row remapping pending";
  a.action = "reset the GPU";
  a.since = absl::FromUnixSeconds(1'700'000'000);  // whole seconds: the wire's precision
  a.last_xid = 13;
  a.xid_counts = {{13, 2}, {79, 1}};
  a.memory_total_bytes = uint64_t{10} << 30;
  a.allocations =
      std::vector<AllocationStatus>{{"ai", "ollama-0", "ollama", "nvidia.com/gpu", "GPU-a::1"}};
  a.answering = true;
  a.sample_error = "a transient error";
  a.sample_age_seconds = 0.25;
  a.values = {{gpu::ValueId::kGpuUtil, 42},
              {gpu::ValueId::kFbUsed, static_cast<double>(uint64_t{1} << 30)},
              {gpu::ValueId::kGpuTemp, 55},
              {gpu::ValueId::kPower, 250.5}};
  ProcessStatus p;
  p.pid = 4242;
  p.name = "ollama";
  p.namespace_name = "ai";
  p.pod = "ollama-0";
  p.container = "ollama";
  p.used_bytes = uint64_t{512} << 20;
  ProcessStatus bare;
  bare.pid = 77;
  a.processes = std::vector<ProcessStatus>{p, bare};
  SliceStatus held{"GPU-a--mem0",
                   "nvidia.com/gpu-memory GPU-a::mem0",
                   uint64_t{4} << 30,
                   uint64_t{3} << 30,
                   uint64_t{4} << 30,
                   2,
                   1,
                   uint64_t{5} << 30,
                   "ai",
                   "anpr-0",
                   "anpr"};
  SliceStatus claim{"claim-u1", "claim ai/ollama", uint64_t{8} << 30, 0, 0, 0, 0, {}, {}, {}, {}};
  a.vram_slices = std::vector<SliceStatus>{held, claim};
  a.vram_enforcement = "library";
  a.evictions = std::vector<EvictionStatus>{
      {"ai", "ollama-0", "blocked", 2,
       "blocked: Cannot evict pod as it would violate the pod's disruption budget."},
      {"anpr", "reader-7", "would-evict", 0, ""}};
  a.reset = RungStatus{"waiting", "1 process runs on it (pid 4242)", 1};
  a.reboot = RungStatus{"asked", "asked at 2026-12-07T01:00:00Z (kured)", 1};
  GpuStatus b;  // the least a GPU can say
  b.uuid = "";
  b.name = "GA102";
  b.pci_bus_id = "0000:03:00.0";
  b.health = HealthState::kUnhealthy;
  r.gpus = {a, b};
  return r;
}

TEST(StatusReportTest, RoundTrip) {
  for (const StatusReport& report : {Everything(), StatusReport(), [] {
                                       StatusReport down;
                                       down.nvml_error = "driver not loaded";
                                       return down;
                                     }()}) {
    absl::StatusOr<StatusReport> back = StatusReport::FromJsonText(report.ToJsonText());
    ASSERT_TRUE(back.ok()) << back.status() << "\n" << report.ToJsonText();
    EXPECT_EQ(*back, report) << report.ToJsonText();
    EXPECT_EQ(back->ToJsonText(), report.ToJsonText());
  }
}

TEST(StatusReportTest, AbsentFieldsAreLeftOut) {
  nlohmann::json j = Everything().ToJson();
  const nlohmann::json& b = j["gpus"][1];
  for (const char* key :
       {"index", "reason", "action", "since", "last_xid", "xid_counts", "memory_total_bytes",
        "allocations", "answering", "processes", "power_w", "evictions", "reset", "reboot"}) {
    EXPECT_FALSE(b.contains(key)) << key;
  }
  EXPECT_FALSE(j.contains("nvml_error")) << "only when NVML is down";
  // Present-but-empty lists stay: "attribution on, nothing allocated" differs from "off".
  StatusReport r = Everything();
  r.gpus[1].allocations.emplace();
  EXPECT_EQ(r.ToJson()["gpus"][1]["allocations"], nlohmann::json::array());
}

TEST(StatusReportTest, FromSnapshot) {
  Snapshot snap;
  snap.nvml_ok = false;
  snap.nvml_error = "driver not loaded";
  DeviceRecord d;
  d.gpu.index = 3;
  d.gpu.uuid = "GPU-x";
  d.gpu.name = "H200";
  d.gpu.bus_id = "0000:1b:00.0";
  d.gpu.memory_total_bytes = 1234;
  d.health.Raise("nvml", {HealthState::kUnhealthy, "NVML unavailable", "run doctor"},
                 absl::FromUnixSeconds(100));
  d.health.last_xid = 48;
  d.health.xid_counts = {{48, 1}};
  DeviceRecord healthy;
  healthy.gpu.uuid = "GPU-y";
  snap.devices = {d, healthy};
  StatusReport r = StatusFromSnapshot(snap);
  EXPECT_FALSE(r.nvml_ok);
  EXPECT_EQ(r.nvml_error, "driver not loaded");
  ASSERT_EQ(r.gpus.size(), 2u);
  EXPECT_EQ(r.gpus[0].index, 3u);
  EXPECT_EQ(r.gpus[0].pci_bus_id, "0000:1b:00.0");
  EXPECT_EQ(r.gpus[0].health, HealthState::kUnhealthy);
  EXPECT_EQ(r.gpus[0].reason, "NVML unavailable");
  EXPECT_EQ(r.gpus[0].action, "run doctor");
  EXPECT_EQ(r.gpus[0].since, absl::FromUnixSeconds(100));
  EXPECT_EQ(r.gpus[0].last_xid, 48);
  EXPECT_EQ(r.gpus[0].memory_total_bytes, 1234u);
  EXPECT_EQ(r.gpus[1].reason, std::nullopt);
  EXPECT_EQ(r.gpus[1].since, std::nullopt);
  EXPECT_EQ(r.gpus[1].last_xid, std::nullopt);
  EXPECT_EQ(r.gpus[1].answering, std::nullopt) << "the sampler's fields are not the store's";
}

TEST(StatusReportTest, MalformedDocumentsAreErrorsNamingTheKey) {
  struct Case {
    std::string text;
    std::string names;
  };
  auto with = [](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = Everything().ToJson();
    edit(j);
    return j.dump();
  };
  const Case kCases[] = {
      {"", "not valid JSON"},
      {"<html>502 Bad Gateway</html>", "not valid JSON"},
      {"{\"gpus\": [", "not valid JSON"},
      {"[]", "an object"},
      {"{\"nvml_ok\": true, \"nvml_ok\": false, \"gpus\": []}", "\"nvml_ok\" appears twice"},
      {"{}", "nvml_ok is missing"},
      {"{\"nvml_ok\": true}", "gpus is missing"},
      {"{\"nvml_ok\": \"yes\", \"gpus\": []}", "nvml_ok must be true or false"},
      {"{\"nvml_ok\": true, \"gpus\": {}}", "gpus must be a list"},
      {"{\"nvml_ok\": true, \"gpus\": [1]}", "gpus[0] must be an object, not 1"},
      {with([](auto& j) { j["gpus"][1].erase("uuid"); }), "gpus[1].uuid is missing"},
      {with([](auto& j) { j["gpus"][0].erase("health"); }), "gpus[0].health is missing"},
      {with([](auto& j) { j["gpus"][0]["health"] = "Sick"; }),
       "gpus[0].health must be Healthy, Degraded or Unhealthy, not the string \"Sick\""},
      {with([](auto& j) { j["gpus"][0]["index"] = -1; }),
       "gpus[0].index must be a non-negative integer, not -1"},
      {with([](auto& j) { j["gpus"][0]["index"] = "0"; }), "gpus[0].index"},
      {with([](auto& j) { j["gpus"][0]["last_xid"] = 1.5; }), "gpus[0].last_xid"},
      {with([](auto& j) { j["gpus"][0]["since"] = "yesterday"; }),
       "gpus[0].since must be an RFC 3339"},
      {with([](auto& j) { j["gpus"][0]["power_w"] = "250W"; }),
       "gpus[0].power_w must be a finite number"},
      {with([](auto& j) { j["gpus"][0]["xid_counts"]["x"] = 1; }), "gpus[0].xid_counts.x"},
      {with([](auto& j) { j["gpus"][0]["xid_counts"]["79"] = -1; }), "gpus[0].xid_counts.79"},
      {with([](auto& j) { j["gpus"][0]["allocations"] = "none"; }),
       "gpus[0].allocations must be a list"},
      {with([](auto& j) { j["gpus"][0]["allocations"][0].erase("pod"); }),
       "gpus[0].allocations[0].pod is missing"},
      {with([](auto& j) { j["gpus"][0]["processes"][1]["pid"] = "77"; }),
       "gpus[0].processes[1].pid"},
      {with([](auto& j) { j["gpus"][0]["processes"][0]["used_bytes"] = true; }),
       "gpus[0].processes[0].used_bytes"},
      {with([](auto& j) { j["gpus"][0]["utilization_percent"] = 5000000000; }),
       "gpus[0].utilization_percent"},
      {with([](auto& j) { j["gpus"][0]["vram_slices"][1].erase("quota_bytes"); }),
       "gpus[0].vram_slices[1].quota_bytes is missing"},
      {with([](auto& j) { j["gpus"][0]["vram_slices"] = 3; }),
       "gpus[0].vram_slices must be a list"},
      {with([](auto& j) { j["gpus"][0]["evictions"][0].erase("state"); }),
       "gpus[0].evictions[0].state is missing"},
      {with([](auto& j) { j["gpus"][0]["evictions"][1]["tries"] = "none"; }),
       "gpus[0].evictions[1].tries"},
      {with([](auto& j) { j["gpus"][0]["reset"].erase("detail"); }),
       "gpus[0].reset.detail is missing"},
      {with([](auto& j) { j["gpus"][0]["reset"] = "busy"; }), "gpus[0].reset"},
      {with([](auto& j) { j["gpus"][0]["reboot"].erase("state"); }),
       "gpus[0].reboot.state is missing"},
  };
  for (const Case& c : kCases) {
    absl::StatusOr<StatusReport> r = StatusReport::FromJsonText(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.names)) << c.text;
  }
}

TEST(StatusReportTest, UnknownKeysAreIgnored) {
  nlohmann::json j = Everything().ToJson();
  j["added_later"] = 1;
  j["gpus"][0]["fan_percent"] = 30;
  absl::StatusOr<StatusReport> r = StatusReport::FromJson(j);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, Everything());
}

TEST(StatusReportTest, HealthStateNames) {
  for (HealthState s : {HealthState::kHealthy, HealthState::kDegraded, HealthState::kUnhealthy}) {
    EXPECT_EQ(ParseHealthState(HealthStateName(s)), s);
  }
  EXPECT_EQ(ParseHealthState("healthy"), std::nullopt);
  EXPECT_EQ(ParseHealthState(""), std::nullopt);
}

}  // namespace
}  // namespace gpulet::state
