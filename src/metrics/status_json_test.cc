// The /status document on the wire: byte for byte what `gpulet serve` sends (and what
// `gpulet status` and users' scripts read), for a snapshot that sets every field.
#include <string>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "metrics/metrics_server.h"
#include "state/status_report.h"

namespace gpulet::metrics {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);  // 2023-11-14T22:13:20+00:00

state::DeviceRecord Record(unsigned index, std::string uuid, std::string name, std::string bus) {
  state::DeviceRecord d;
  d.gpu.index = index;
  d.gpu.uuid = std::move(uuid);
  d.gpu.name = std::move(name);
  d.gpu.bus_id = std::move(bus);
  d.gpu.in_nvml = d.gpu.on_pci = true;
  return d;
}

void FillEverything(state::Snapshot* snap, SampleSet* samples) {
  snap->nvml_ok = true;
  state::DeviceRecord a = Record(0, "GPU-a", "NVIDIA GeForce RTX 3080", "0000:01:00.0");
  a.gpu.memory_total_bytes = uint64_t{10} << 30;
  a.health.since = kT0;
  a.health.last_xid = 13;
  a.health.xid_counts = {{13, 2}};
  state::DeviceRecord b = Record(1, "GPU-b", "NVIDIA GeForce RTX 5090", "0000:02:00.0");
  b.health.Raise(
      "xid", {state::HealthState::kUnhealthy, "XID 79: fallen off the bus", "reboot the node", kT0},
      kT0 + absl::Seconds(60));
  b.health.last_xid = 79;
  b.health.xid_counts = {{79, 1}, {8, 3}};  // "79" sorts before "8" on the wire
  state::DeviceRecord c = Record(2, "", "GA102", "0000:03:00.0");  // PCI only: nothing else known
  c.gpu.index.reset();
  snap->devices = {a, b, c};

  GpuSampleState& sa = samples->by_uuid["GPU-a"];
  sa.answering = true;
  gpu::DeviceSample s;
  s.taken = kT0 + absl::Seconds(10);
  s.gpu_util = 42;
  s.fb_used_bytes = uint64_t{1} << 30;
  s.gpu_temp_c = 55;
  s.power_w = 250.5;
  s.processes = {{4242, uint64_t{512} << 20, std::nullopt, std::nullopt, std::nullopt},
                 {5120, std::nullopt, std::nullopt, std::nullopt, std::nullopt},
                 {77, uint64_t{1} << 20, std::nullopt, std::nullopt, std::nullopt}};
  sa.last = s;
  sa.processes[4242] = {"ollama", CgroupPod{"uid-1", ""}};
  sa.processes[5120] = {"python3", std::nullopt};
  GpuSampleState& sb = samples->by_uuid["GPU-b"];
  sb.answering = false;
  sb.error = "not answering: NVML call timed out after 1s";
  sb.last = s;
  auto pods = std::make_shared<PodMap>();
  pods->ok = true;
  pods->by_gpu["GPU-a"] = {{{"ai", "ollama-0", "ollama"}, "nvidia.com/gpu", "GPU-a", ""}};
  pods->pods_by_uid["uid-1"] = {"ai", "ollama-0", {"ollama"}};
  samples->pods = pods;
}

constexpr char kWire[] = R"({
  "gpus": [
    {
      "allocations": [
        {
          "container": "ollama",
          "device_id": "GPU-a",
          "namespace": "ai",
          "pod": "ollama-0",
          "resource": "nvidia.com/gpu"
        }
      ],
      "answering": true,
      "health": "Healthy",
      "index": 0,
      "last_xid": 13,
      "memory_total_bytes": 10737418240,
      "memory_used_bytes": 1073741824,
      "name": "NVIDIA GeForce RTX 3080",
      "pci_bus_id": "0000:01:00.0",
      "power_w": 250.5,
      "processes": [
        {
          "container": "ollama",
          "name": "ollama",
          "namespace": "ai",
          "pid": 4242,
          "pod": "ollama-0",
          "used_bytes": 536870912
        },
        {
          "name": "python3",
          "pid": 5120
        },
        {
          "pid": 77,
          "used_bytes": 1048576
        }
      ],
      "sample_age_seconds": 2.5,
      "since": "2023-11-14T22:13:20+00:00",
      "temperature_c": 55,
      "utilization_percent": 42,
      "uuid": "GPU-a",
      "xid_counts": {
        "13": 2
      }
    },
    {
      "action": "reboot the node",
      "allocations": [],
      "answering": false,
      "health": "Unhealthy",
      "index": 1,
      "last_xid": 79,
      "name": "NVIDIA GeForce RTX 5090",
      "pci_bus_id": "0000:02:00.0",
      "reason": "XID 79: fallen off the bus",
      "sample_age_seconds": 2.5,
      "sample_error": "not answering: NVML call timed out after 1s",
      "since": "2023-11-14T22:14:20+00:00",
      "uuid": "GPU-b",
      "xid_counts": {
        "79": 1,
        "8": 3
      }
    },
    {
      "allocations": [],
      "health": "Healthy",
      "name": "GA102",
      "pci_bus_id": "0000:03:00.0",
      "uuid": ""
    }
  ],
  "nvml_ok": true
}
)";

// The samples were taken 2.5 s before "now".
const absl::Time kNow = kT0 + absl::Milliseconds(12500);

TEST(StatusJsonTest, WireFormatIsUnchanged) {
  state::Snapshot snap;
  SampleSet samples;
  FillEverything(&snap, &samples);
  EXPECT_EQ(MetricsServer::StatusJson(snap, samples, kNow), kWire);
}

TEST(StatusJsonTest, NvmlDownAndNoPodAttribution) {
  state::Snapshot snap;
  snap.nvml_ok = false;
  snap.nvml_error = "driver not loaded";
  EXPECT_EQ(
      MetricsServer::StatusJson(snap, SampleSet()),
      "{\n  \"gpus\": [],\n  \"nvml_error\": \"driver not loaded\",\n  \"nvml_ok\": false\n}\n");
}

// What the server sends, `gpulet status` reads back to the same report.
TEST(StatusJsonTest, TheClientReadsWhatTheServerSends) {
  state::Snapshot snap;
  SampleSet samples;
  FillEverything(&snap, &samples);
  std::string wire = MetricsServer::StatusJson(snap, samples, kNow);
  absl::StatusOr<state::StatusReport> parsed = state::StatusReport::FromJsonText(wire);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->ToJsonText(), wire);
  ASSERT_EQ(parsed->gpus.size(), 3u);
  const state::GpuStatus& a = parsed->gpus[0];
  EXPECT_EQ(a.Value(gpu::ValueId::kGpuUtil), 42);
  ASSERT_TRUE(a.processes.has_value());
  ASSERT_EQ(a.processes->size(), 3u);
  EXPECT_EQ((*a.processes)[0].pod, "ollama-0");
  EXPECT_EQ(parsed->gpus[1].health, state::HealthState::kUnhealthy);
  EXPECT_EQ(parsed->gpus[1].answering, false);
  EXPECT_EQ(parsed->gpus[1].processes, std::nullopt) << "no sample fields while not answering";
  EXPECT_EQ(parsed->gpus[2].index, std::nullopt);
}

}  // namespace
}  // namespace gpulet::metrics
