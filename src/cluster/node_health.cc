#include "cluster/node_health.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/utf8.h"
#include "nlohmann/json.hpp"

namespace gpulet::cluster {
namespace {

constexpr size_t kMaxNote = 1024;  // events.k8s.io/v1 Event.note
// The API server's limits on an Event (kubernetes pkg/apis/core/validation/events.go:
// NameIsDNSSubdomain, ReportingInstanceLengthLimit).
constexpr size_t kMaxEventName = 253;
constexpr size_t kMaxReportingInstance = 128;
constexpr size_t kMaxMessage = 32768;  // what gpulet allows itself in a condition message

// "GPU 1 (NVIDIA GeForce RTX 5090, GPU-8a41…)", or the bus id for a GPU NVML cannot see.
std::string GpuName(const gpu::Gpu& g) {
  std::string id = g.uuid.empty() ? g.bus_id : g.uuid;
  if (g.index) return absl::StrCat("GPU ", *g.index, " (", g.name, ", ", id, ")");
  return absl::StrCat("GPU ", g.bus_id, " (", g.name, ")");
}

// Cuts `text` to `limit` bytes on a UTF-8 boundary, marking the cut.
std::string Truncate(std::string text, size_t limit) {
  return CutUtf8(std::move(text), limit, "...");
}

// The CamelCase reason for a GPU's worst condition, by the health source that raised it.
std::string UnhealthyReason(const state::GpuHealth& h) {
  for (const auto& [source, c] : h.conditions) {
    if (c.severity != state::HealthState::kUnhealthy) continue;
    if (source == "xid") return "XidCriticalError";
    if (source == "liveness") return "GpuNotResponding";
    if (source == "row-remap") return "GpuMemoryFailing";
    if (source == "recovery-action") return "DriverRecoveryRequired";
    if (source == "nvml") return "GpuNotVisibleToNvml";
  }
  return "GpuUnhealthy";
}

std::string Sentence(const std::string& text) {
  if (text.empty() || text.back() == '.') return text;
  return text + ".";
}

}  // namespace

std::vector<NodeConditionState> NodeConditionsFor(const state::Snapshot& snap) {
  NodeConditionState unhealthy{kConditionGpuUnhealthy, false, "GpusHealthy", ""};
  NodeConditionState nvml{kConditionNvmlUnavailable, false, "NvmlReady", "NVML is usable"};
  NodeConditionState reboot{kConditionRebootRequired, false, "NoRebootRequired",
                            "no GPU fault needs a node reboot"};

  std::vector<std::string> out, degraded, needs_reboot;
  for (const state::DeviceRecord& d : snap.devices) {
    const state::GpuHealth& h = d.health;
    if (h.state == state::HealthState::kUnhealthy) {
      if (out.empty()) unhealthy.reason = UnhealthyReason(h);
      out.push_back(
          absl::StrCat(GpuName(d.gpu), ": ", Sentence(h.reason), " Action: ", Sentence(h.action)));
    } else if (h.state == state::HealthState::kDegraded) {
      degraded.push_back(GpuName(d.gpu));
    }
    for (const auto& [source, c] : h.conditions) {
      if (!c.reboot_required) continue;
      needs_reboot.push_back(absl::StrCat(GpuName(d.gpu), ": ", Sentence(c.reason)));
      break;
    }
  }
  if (!out.empty()) {
    unhealthy.problem = true;
    unhealthy.message = absl::StrJoin(out, " ");
  } else {
    unhealthy.message = absl::StrCat("all ", snap.devices.size(), " GPUs are schedulable");
  }
  if (!degraded.empty()) {
    absl::StrAppend(&unhealthy.message,
                    "; degraded but in service: ", absl::StrJoin(degraded, ", "));
  }
  unhealthy.message = Truncate(unhealthy.message, kMaxMessage);
  if (!snap.nvml_ok) {
    nvml.problem = true;
    nvml.reason = "NvmlUnavailable";
    nvml.message = Truncate(absl::StrCat("NVML cannot be used, so no GPU on the node can be "
                                         "vouched for: ",
                                         snap.nvml_error, ". Run `gpulet doctor` on the node."),
                            kMaxMessage);
  }
  if (!needs_reboot.empty()) {
    reboot.problem = true;
    reboot.reason = "GpuFaultNeedsReboot";
    reboot.message =
        Truncate(absl::StrCat(absl::StrJoin(needs_reboot, " "), " Drain the node and reboot it."),
                 kMaxMessage);
  }
  return {unhealthy, nvml, reboot};
}

std::vector<NodeConditionState> ConditionGate::Apply(const std::vector<NodeConditionState>& wanted,
                                                     absl::Time now) {
  std::vector<NodeConditionState> result;
  for (const NodeConditionState& w : wanted) {
    auto it = published_.find(w.type);
    if (it == published_.end()) {
      NodeConditionState first = w;
      first.last_transition = now;
      it = published_.emplace(w.type, first).first;
    } else {
      NodeConditionState& p = it->second;
      const bool held = p.problem && !w.problem && now < p.last_transition + hold_;
      if (!held) {
        const absl::Time since = p.problem == w.problem ? p.last_transition : now;
        p = w;
        p.last_transition = since;
      }
    }
    // Its hold runs from the moment it turned True until `hold_` later; once that moment
    // has passed it can no longer change by itself, so it stops being a deadline.
    const NodeConditionState& p = it->second;
    const absl::Time until = p.last_transition + hold_;
    if (p.problem && now < until) {
      hold_until_[w.type] = until;
    } else {
      hold_until_.erase(w.type);
    }
    result.push_back(p);
  }
  return result;
}

absl::Time ConditionGate::NextChange() const {
  absl::Time next = absl::InfiniteFuture();
  for (const auto& [type, until] : hold_until_) next = std::min(next, until);
  return next;
}

std::vector<NodeEvent> NodeEventsBetween(const state::Snapshot* before,
                                         const state::Snapshot& after) {
  std::vector<NodeEvent> events;
  const bool nvml_before = before == nullptr || before->nvml_ok;
  if (nvml_before && !after.nvml_ok) {
    events.push_back({"Warning", "NvmlUnavailable",
                      Truncate(absl::StrCat("NVML cannot be used: ", after.nvml_error,
                                            ". Run `gpulet doctor` on the node."),
                               kMaxNote)});
  } else if (before != nullptr && !before->nvml_ok && after.nvml_ok) {
    events.push_back({"Normal", "NvmlReady", "NVML is usable again"});
  }
  for (const state::DeviceRecord& d : after.devices) {
    const state::DeviceRecord* prev =
        before == nullptr ? nullptr
                          : before->FindByUuid(d.gpu.uuid.empty() ? d.gpu.bus_id : d.gpu.uuid);
    const state::HealthState was =
        prev != nullptr ? prev->health.state : state::HealthState::kHealthy;
    // New XIDs first: they usually are the cause of the transition that follows.
    for (const auto& [xid, count] : d.health.xid_counts) {
      uint64_t seen = 0;
      if (prev != nullptr) {
        auto it = prev->health.xid_counts.find(xid);
        if (it != prev->health.xid_counts.end()) seen = it->second;
      }
      if (count <= seen) continue;
      std::string meaning = xid == d.health.last_xid && !d.health.last_xid_message.empty()
                                ? absl::StrCat(": ", d.health.last_xid_message)
                                : "";
      events.push_back({"Warning", "GpuXid",
                        Truncate(absl::StrCat("XID ", xid, " on ", GpuName(d.gpu), meaning,
                                              ". `gpulet explain xid ", xid,
                                              "` says what it means and what to do."),
                                 kMaxNote),
                        count - seen});
    }
    if (d.health.state == was) continue;
    switch (d.health.state) {
      case state::HealthState::kUnhealthy:
        events.push_back({"Warning", "GpuUnhealthy",
                          Truncate(absl::StrCat(GpuName(d.gpu), " is out of scheduling: ",
                                                Sentence(d.health.reason),
                                                " Action: ", Sentence(d.health.action)),
                                   kMaxNote)});
        break;
      case state::HealthState::kDegraded:
        events.push_back({"Warning", "GpuDegraded",
                          Truncate(absl::StrCat(GpuName(d.gpu), " is degraded but in service: ",
                                                Sentence(d.health.reason),
                                                " Action: ", Sentence(d.health.action)),
                                   kMaxNote)});
        break;
      case state::HealthState::kHealthy:
        events.push_back({"Normal", "GpuRecovered",
                          Truncate(absl::StrCat(GpuName(d.gpu), " is healthy again"), kMaxNote)});
        break;
    }
  }
  return events;
}

std::string EventName(absl::string_view object_name, uint64_t nanos) {
  const std::string suffix = absl::StrFormat(".%x", nanos);
  // A Node's name may be 253 characters itself: cut it so the whole is a valid name, and
  // never leave a '-' or '.' before the suffix's dot (a label must end in a letter or digit).
  absl::string_view head = object_name.substr(0, kMaxEventName - suffix.size());
  while (!head.empty() && (head.back() == '-' || head.back() == '.')) head.remove_suffix(1);
  if (head.empty()) head = "gpulet";
  return absl::StrCat(head, suffix);
}

std::vector<EventWrite> EventAggregator::Record(const NodeEvent& event, absl::Time now) {
  // Forget series that ended: a repeat after the window starts a new object.
  for (auto it = series_.begin(); it != series_.end();) {
    if (now - it->second.last > window_ && it->second.count == it->second.written_count) {
      it = series_.erase(it);
    } else {
      ++it;
    }
  }
  const Key key{event.type, event.reason,
                event.pod
                    ? absl::StrCat(event.pod->namespace_name, "/", event.pod->name, " ", event.note)
                    : event.note};
  auto it = series_.find(key);
  if (it == series_.end()) {
    Series s;
    // client-go names events <object>.<hex UnixNano>; nanoseconds keep names unique here.
    // Two events recorded at the same instant still get distinct names.
    last_name_nanos_ = std::max(last_name_nanos_ + 1, absl::ToUnixNanos(now));
    s.name = EventName(node_name_, static_cast<uint64_t>(last_name_nanos_));
    s.event = event;
    s.count = event.count;
    s.written_count = event.count;
    s.first = s.last = s.last_write = now;
    series_.emplace(key, s);
    EventWrite w{EventWrite::Kind::kCreate, s.name, event, s.count, now, now};
    return {w};
  }
  Series& s = it->second;
  s.count += event.count;
  s.last = now;
  if (now - s.last_write < series_interval_) return {};
  s.last_write = now;
  s.written_count = s.count;
  return {EventWrite{EventWrite::Kind::kUpdateSeries, s.name, s.event, s.count, s.first, s.last}};
}

std::vector<EventWrite> EventAggregator::Flush(absl::Time now) {
  std::vector<EventWrite> writes;
  for (auto& [key, s] : series_) {
    if (s.count == s.written_count || now - s.last_write < series_interval_) continue;
    s.last_write = now;
    s.written_count = s.count;
    writes.push_back(
        EventWrite{EventWrite::Kind::kUpdateSeries, s.name, s.event, s.count, s.first, s.last});
  }
  return writes;
}

absl::Time EventAggregator::NextFlush() const {
  absl::Time next = absl::InfiniteFuture();
  for (const auto& [key, s] : series_) {
    if (s.count != s.written_count) next = std::min(next, s.last_write + series_interval_);
  }
  return next;
}

std::string ApiMicroTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", t, absl::UTCTimeZone());
}

std::string ApiTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone());
}

nlohmann::json EventObject(const EventWrite& write, const std::string& node_name,
                           const std::string& node_uid, const std::string& instance) {
  nlohmann::json regarding = {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node_name}};
  if (!node_uid.empty()) regarding["uid"] = node_uid;
  if (const std::optional<PodRef>& pod = write.event.pod) {
    regarding = {{"apiVersion", "v1"},
                 {"kind", "Pod"},
                 {"namespace", pod->namespace_name},
                 {"name", pod->name}};
    if (!pod->uid.empty()) regarding["uid"] = pod->uid;
  }
  nlohmann::json event = {
      {"apiVersion", "events.k8s.io/v1"},
      {"kind", "Event"},
      {"metadata", {{"name", write.name}}},
      {"eventTime", ApiMicroTime(write.first)},
      {"reportingController", "gpulet.dev/gpulet"},
      {"reportingInstance", instance.substr(0, kMaxReportingInstance)},
      {"action", "GpuHealthCheck"},
      {"reason", write.event.reason},
      {"type", write.event.type},
      {"note", Truncate(write.event.note, kMaxNote)},
      {"regarding", regarding},
  };
  if (write.count > 1) {
    event["series"] = {{"count", write.count}, {"lastObservedTime", ApiMicroTime(write.last)}};
  }
  return event;
}

nlohmann::json EventSeriesPatch(const EventWrite& write) {
  return {{"series", {{"count", write.count}, {"lastObservedTime", ApiMicroTime(write.last)}}}};
}

nlohmann::json NodeConditionsPatch(const std::vector<NodeConditionState>& conditions,
                                   absl::Time heartbeat) {
  nlohmann::json list = nlohmann::json::array();
  for (const NodeConditionState& c : conditions) {
    list.push_back({{"type", c.type},
                    {"status", c.problem ? "True" : "False"},
                    {"reason", c.reason},
                    {"message", c.message},
                    {"lastHeartbeatTime", ApiTime(heartbeat)},
                    {"lastTransitionTime", ApiTime(c.last_transition)}});
  }
  return {{"status", {{"conditions", list}}}};
}

}  // namespace gpulet::cluster
