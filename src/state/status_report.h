// StatusReport: the /status document, as one typed value shared by both ends.
//
// `gpulet serve` answers GET /status with it (metrics/metrics_server: the DeviceStore snapshot,
// plus what the sampler and pod attribution know); `gpulet status` reads it back and prints
// a table. Both sides go through ToJson/FromJson here, so a key renamed on one side cannot
// silently vanish on the other.
//
// Wire format (unchanged from before this type existed; tests check it byte for byte):
// a JSON object, keys in sorted order, pretty-printed with two spaces and a final newline.
// Optional fields are left out when absent. FromJson ignores keys it does not know (a newer
// daemon may add some) and fails, naming the key path ("gpus[1].health"), when a required key
// is missing or any known key has the wrong type or value.
//
// Thread-safety: plain values and pure functions.
#ifndef GPULET_STATE_STATUS_REPORT_H_
#define GPULET_STATE_STATUS_REPORT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gpu/sample_values.h"
#include "nlohmann/json.hpp"
#include "state/device_store.h"

namespace gpulet::state {

// A pod container holding a device of this GPU (pod attribution).
struct AllocationStatus {
  std::string namespace_name;  // "namespace"
  std::string pod;
  std::string container;
  std::string resource;   // "nvidia.com/gpu"
  std::string device_id;  // the advertised ID, e.g. "GPU-…::2"

  bool operator==(const AllocationStatus&) const = default;
};

// A process using the GPU.
struct ProcessStatus {
  unsigned pid = 0;
  std::optional<std::string> name;  // comm, when gpulet could read it
  // Its pod, when attribution found one (all three set together).
  std::optional<std::string> namespace_name, pod, container;
  std::optional<uint64_t> used_bytes;

  bool operator==(const ProcessStatus&) const = default;
};

// A VRAM slice holder on this GPU (docs/sharing.md), as its slice file says.
struct SliceStatus {
  std::string slice;  // the allocation directory
  std::string owner;  // the slices' IDs, or the DRA claim
  uint64_t quota_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t peak_bytes = 0;
  uint64_t refused = 0;
  unsigned processes = 0;
  // Its memory as the driver counts it (CUDA contexts included); absent when NVML did not
  // answer for the GPU.
  std::optional<uint64_t> device_used_bytes;
  // The container holding it, when pod attribution knows (all three set together).
  std::optional<std::string> namespace_name, pod, container;

  bool operator==(const SliceStatus&) const = default;
};

// The latest fault the flight recorder wrote for a GPU, with the postmortem's verdict
// (recorder/postmortem.h); `gpulet postmortem` shows the whole timeline.
struct FaultStatus {
  absl::Time at = absl::InfinitePast();  // whole seconds on the wire (RFC 3339, UTC)
  std::string what;                      // the fault: "Unhealthy: XID 79: ..."
  std::string verdict;                   // "hardware", "driver-or-configuration", ...
  std::string headline;                  // the verdict in one line
  std::string file;                      // the recording's host path; "" when not written

  bool operator==(const FaultStatus&) const = default;
};

// A pod the eviction rung named for this GPU (cluster/pod_eviction.h): ordered out and not
// evicted yet, or named by a dry run.
struct EvictionStatus {
  std::string namespace_name;
  std::string pod;
  std::string state;  // "would-evict" (dry run), "evicting", "blocked", "forbidden", "failed"
  int tries = 0;
  std::string last;  // the last try's result and the API server's message; "" before one

  bool operator==(const EvictionStatus&) const = default;
};

// What a remediation rung that acts on the GPU itself or its node (daemon/reset_rung.h,
// daemon/reboot_rung.h) is doing about this GPU.
struct RungStatus {
  // The reset rung: "would-reset" (a dry run), "waiting" (something holds it), "resetting",
  // "reset" (out for the quiet period after a reset), "failed", "budget-spent". The reboot
  // rung: "would-reboot", "waiting", "asked" (kured has the request), "failed",
  // "budget-spent".
  std::string state;
  std::string detail;  // why it waits, when it acted, what failed
  int tries = 0;       // within the rung's budget window

  bool operator==(const RungStatus&) const = default;
};

struct GpuStatus {
  // From the DeviceStore.
  std::optional<unsigned> index;
  std::string uuid;
  std::string name;
  std::string pci_bus_id;
  HealthState health = HealthState::kHealthy;
  std::optional<std::string> reason;  // of the worst condition
  std::optional<std::string> action;
  std::optional<absl::Time> since;  // whole seconds on the wire (RFC 3339, UTC)
  std::optional<int> last_xid;
  std::map<int, uint64_t> xid_counts;  // left out when empty
  std::optional<uint64_t> memory_total_bytes;
  // Pod attribution: present (maybe empty) when it is on.
  std::optional<std::vector<AllocationStatus>> allocations;
  // The sampler: present once it has tried this GPU.
  std::optional<bool> answering;
  std::optional<std::string> sample_error;
  std::optional<double> sample_age_seconds;
  // The latest sample's values that the value table (gpu/sample_values.h) gives a /status
  // key, each under that key; present only while the GPU answers.
  std::map<gpu::ValueId, double> values;
  std::optional<std::vector<ProcessStatus>> processes;
  // VRAM slices held on this GPU: present when the sampler reads slice files and finds one.
  std::optional<std::vector<SliceStatus>> vram_slices;
  // What holds its containers' VRAM quotas ("driver", "library", "none", "refused");
  // absent: none.
  std::optional<std::string> vram_enforcement;
  // The flight recorder's latest fault on this GPU; absent when none was recorded.
  std::optional<FaultStatus> last_fault;
  // The eviction rung's pods for this GPU; absent when none.
  std::optional<std::vector<EvictionStatus>> evictions;
  // The reset and reboot rungs' word on this GPU; absent when they have none.
  std::optional<RungStatus> reset;
  std::optional<RungStatus> reboot;

  // One of `values`; none when absent.
  std::optional<double> Value(gpu::ValueId id) const;

  bool operator==(const GpuStatus&) const = default;
};

struct StatusReport {
  bool nvml_ok = false;
  std::string nvml_error;  // on the wire only when !nvml_ok
  std::vector<GpuStatus> gpus;

  bool operator==(const StatusReport&) const = default;

  nlohmann::json ToJson() const;
  // ToJson, as the server sends it.
  std::string ToJsonText() const;

  static absl::StatusOr<StatusReport> FromJson(const nlohmann::json& doc);
  // Parses the server's text; also fails when it is not JSON at all.
  static absl::StatusOr<StatusReport> FromJsonText(absl::string_view text);
};

// The store's part of the report: NVML state, identity and health of every GPU, in
// inventory order. The sampler's and pod attribution's fields are left absent.
StatusReport StatusFromSnapshot(const Snapshot& snap);

// Parses a HealthStateName() back; nullopt for anything else.
std::optional<HealthState> ParseHealthState(absl::string_view name);

}  // namespace gpulet::state

#endif  // GPULET_STATE_STATUS_REPORT_H_
