// What the cluster should see of this node's GPUs: the Node conditions and the Events that
// gpulet's health verdicts (the DeviceStore's snapshots) call for, as plain values.
//
// Conditions follow node-problem-detector's convention: status True means the problem is
// present. One condition per concern, always all of them (False when fine), so a cluster
// tool can tell "fine" from "not reported":
//   GpuUnhealthy        a GPU is out of scheduling (fatal XID, not answering, failing memory,
//                       the driver's recovery action, not visible to NVML);
//   GpuNvmlUnavailable  NVML cannot be used on the node, so no GPU can be vouched for;
//   GpuRebootRequired   only a node reboot clears a GPU's fault (the XID catalogue or the
//                       driver says so).
// Reasons are CamelCase; messages name the GPUs (index, product, UUID), the cause and the
// action, in the health verdict's own words.
//
// ConditionGate keeps conditions from flapping: a problem is reported at once, but a
// condition that turned True goes back to False no sooner than `hold` (the health policy's
// quiet period) after it turned True. It also keeps each condition's lastTransitionTime.
//
// Events (events.k8s.io/v1, regarding the Node): one per GPU health transition and per batch
// of new XIDs on a GPU, and one when NVML comes or goes. EventAggregator folds repeats of
// the same event (same type, reason and note) within `window` into one series, as the
// kubelet's event recorder does: the first is created, later ones update its series count
// no more often than every `series_interval`, so an XID storm makes one series, not
// thousands of objects.
//
// Thread-safety: the functions are pure; ConditionGate and EventAggregator are not
// thread-safe (the cluster reporter's thread owns them).
#ifndef GPULET_CLUSTER_NODE_HEALTH_H_
#define GPULET_CLUSTER_NODE_HEALTH_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "state/device_store.h"

namespace gpulet::cluster {

inline constexpr char kConditionGpuUnhealthy[] = "GpuUnhealthy";
inline constexpr char kConditionNvmlUnavailable[] = "GpuNvmlUnavailable";
inline constexpr char kConditionRebootRequired[] = "GpuRebootRequired";

// One Node condition as gpulet wants it (core/v1 NodeCondition).
struct NodeConditionState {
  std::string type;
  bool problem = false;  // status "True"
  std::string reason;    // CamelCase
  std::string message;
  absl::Time last_transition = absl::InfinitePast();  // set by ConditionGate
};

// The conditions `snap` calls for, in the order of the constants above.
std::vector<NodeConditionState> NodeConditionsFor(const state::Snapshot& snap);

class ConditionGate {
 public:
  explicit ConditionGate(absl::Duration hold) : hold_(hold) {}

  // The conditions to publish at `now` for the wanted ones: a True that arrived less than
  // `hold` ago stays True (with its last message) even if `wanted` says False; every
  // condition carries the time its published status last changed.
  std::vector<NodeConditionState> Apply(const std::vector<NodeConditionState>& wanted,
                                        absl::Time now);

  // When a True condition's hold ends, the earliest of those still ahead at the last Apply
  // (InfiniteFuture when none is): the moment a held clearing may publish without a store
  // change. A condition that stays True past its hold is no longer a deadline, so a reporter
  // waiting on this does not wake again and again while a GPU stays out.
  absl::Time NextChange() const;

 private:
  absl::Duration hold_;
  std::map<std::string, NodeConditionState> published_;  // by type
  std::map<std::string, absl::Time> hold_until_;         // True conditions inside their hold
};

// One Event about the Node.
// A pod an event is about instead of the Node (a pod holding a GPU that went out).
struct PodRef {
  std::string namespace_name;
  std::string name;
  std::string uid;  // "" when unknown

  friend bool operator==(const PodRef&, const PodRef&) = default;
};

struct NodeEvent {
  std::string type;    // "Normal" or "Warning"
  std::string reason;  // CamelCase: GpuUnhealthy, GpuDegraded, GpuRecovered, GpuXid, ...
  std::string note;    // human-readable, at most 1 KiB (the API's limit)
  uint64_t count = 1;  // occurrences it stands for (an XID batch)
  // Set: the event regards this pod, in its namespace; unset: the Node.
  std::optional<PodRef> pod = std::nullopt;
};

// The events between two snapshots (`before` may be null: the first snapshot, which only
// reports what is already wrong).
std::vector<NodeEvent> NodeEventsBetween(const state::Snapshot* before,
                                         const state::Snapshot& after);

// The name of a new Event about `object_name` first seen at `nanos` (Unix nanoseconds):
// "<object>.<hex nanos>", as client-go names them, with the object's part cut so the whole is a
// DNS subdomain of at most 253 characters for every valid Node name.
std::string EventName(absl::string_view object_name, uint64_t nanos);

// How one event reaches the API server.
struct EventWrite {
  enum class Kind { kCreate, kUpdateSeries } kind = Kind::kCreate;
  std::string name;  // the Event object's name (<node>.<hex nanoseconds>, as client-go)
  NodeEvent event;
  uint64_t count = 1;  // the series count so far (1 for a new event)
  absl::Time first = absl::InfinitePast();
  absl::Time last = absl::InfinitePast();
};

class EventAggregator {
 public:
  EventAggregator(std::string node_name, absl::Duration window, absl::Duration series_interval)
      : node_name_(std::move(node_name)), window_(window), series_interval_(series_interval) {}

  // Records occurrences of `event` at `now`; returns the write to make now, if any (a repeat
  // within `series_interval` of the last write is held for Flush).
  std::vector<EventWrite> Record(const NodeEvent& event, absl::Time now);
  // The series updates held back that are due at `now`.
  std::vector<EventWrite> Flush(absl::Time now);
  // When the next held update falls due (InfiniteFuture when none).
  absl::Time NextFlush() const;

 private:
  struct Series {
    std::string name;
    NodeEvent event;
    uint64_t count = 0;
    uint64_t written_count = 0;
    absl::Time first, last, last_write;
  };
  using Key = std::tuple<std::string, std::string, std::string>;  // type, reason, note

  std::string node_name_;
  absl::Duration window_, series_interval_;
  std::map<Key, Series> series_;
  int64_t last_name_nanos_ = 0;
};

// The events.k8s.io/v1 Event object for a create, and the merge patch for a series update.
// `node_uid` may be empty.
nlohmann::json EventObject(const EventWrite& write, const std::string& node_name,
                           const std::string& node_uid, const std::string& instance);
nlohmann::json EventSeriesPatch(const EventWrite& write);

// The strategic merge patch of the Node's status for `conditions` (merged by type, so the
// kubelet's and other agents' conditions are left alone), with `heartbeat` as
// lastHeartbeatTime.
nlohmann::json NodeConditionsPatch(const std::vector<NodeConditionState>& conditions,
                                   absl::Time heartbeat);

// RFC 3339 with microseconds, UTC, as the API's MicroTime ("2026-12-03T13:59:00.123456Z"),
// and with seconds for metav1.Time.
std::string ApiMicroTime(absl::Time t);
std::string ApiTime(absl::Time t);

}  // namespace gpulet::cluster

#endif  // GPULET_CLUSTER_NODE_HEALTH_H_
