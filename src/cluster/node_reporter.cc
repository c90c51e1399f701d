#include "cluster/node_reporter.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/log.h"
#include "common/periodic_worker.h"

namespace gpulet::cluster {
namespace {

// How long the thread waits for a store change before it looks at its own deadlines again;
// also bounds how long Stop waits for the thread.
constexpr absl::Duration kMaxWait = absl::Milliseconds(250);
constexpr int kTaintAttempts = 3;

// A write the API server refuses for what it is (400/422 invalid, 403 not allowed) rather than
// for the moment (5xx, 429, a dropped connection): the same write would fail again.
bool RejectedForGood(const absl::Status& s) {
  return absl::IsInvalidArgument(s) || absl::IsPermissionDenied(s);
}

// The label keys gpulet writes on a Node: its own and NVIDIA's, never anyone else's.
bool IsGpuletLabelKey(const std::string& key) {
  return absl::StartsWith(key, "nvidia.com/") || absl::StartsWith(key, "gpulet.dev/");
}

bool SameAsWritten(const std::vector<NodeConditionState>& a,
                   const std::vector<NodeConditionState>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].type != b[i].type || a[i].problem != b[i].problem || a[i].reason != b[i].reason ||
        a[i].message != b[i].message || a[i].last_transition != b[i].last_transition) {
      return false;
    }
  }
  return true;
}

}  // namespace

NodeReporter::NodeReporter(state::DeviceStore* store, kube::KubeClient* client, Options options,
                           const Clock* clock)
    : store_(store),
      client_(client),
      options_(std::move(options)),
      clock_(clock),
      gate_(options_.hold),
      aggregator_(options_.node_name, options_.event_window, options_.series_interval) {}

NodeReporter::~NodeReporter() { Stop(); }

void NodeReporter::Start() {
  thread_ = StartNamedThread("gpulet-kube", [this] { Run(); });
  if (options_.watch_node) {
    watch_thread_ = StartNamedThread("gpulet-watch", [this] { WatchNode(); });
  }
}

void NodeReporter::Stop() {
  stopping_.store(true);
  {
    absl::MutexLock lock(&mu_);
    stop_requested_ = true;
  }
  client_->Cancel();
  if (thread_.joinable()) thread_.join();
  if (watch_thread_.joinable()) watch_thread_.join();
}

void NodeReporter::WatchNode() {
  const std::string path =
      absl::StrCat("/api/v1/nodes?fieldSelector=metadata.name%3D", options_.node_name);
  while (!stopping_.load()) {
    // "" starts from the server's current state (an ADDED event first), also after a 410.
    absl::Status s = client_->Watch(path, "", [this](const kube::WatchEvent& ev) {
      if (ev.type == "ADDED" || ev.type == "MODIFIED") {
        {
          absl::MutexLock lock(&mu_);
          watched_node_ = ev.object;
          ++watched_version_;
        }
        Succeeded(Op::kWatch);
      }
      return !stopping_.load();
    });
    if (stopping_.load()) return;
    if (kube::IsResourceExpired(s)) continue;
    Failed(Op::kWatch,
           absl::StrCat("watching Node ", options_.node_name,
                        " (gpulet's conditions, taint and labels are restored only at the "
                        "next heartbeat while this fails)"),
           s);
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&stop_requested_), options_.retry_interval);
  }
}

NodeReporter::NodeDrift NodeReporter::Drift(const nlohmann::json& node) const {
  NodeDrift drift;
  const nlohmann::json status = node.value("status", nlohmann::json::object());
  const nlohmann::json conditions = status.value("conditions", nlohmann::json::array());
  for (const NodeConditionState& c : written_) {
    bool held = false;
    for (const nlohmann::json& have : conditions) {
      if (have.value("type", "") == c.type) {
        held = have.value("status", "") == (c.problem ? "True" : "False");
        break;
      }
    }
    if (!held) {
      drift.conditions = true;
      drift.what.push_back(absl::StrCat("condition ", c.type));
    }
  }
  if (taint_written_.has_value()) {
    const nlohmann::json spec = node.value("spec", nlohmann::json::object());
    bool has = false, has_as_written = false;
    for (const nlohmann::json& t : spec.value("taints", nlohmann::json::array())) {
      if (t.value("key", "") != kUnhealthyTaintKey) continue;
      has = true;
      has_as_written = t.value("effect", "") == options_.taint_effect;
    }
    if (*taint_written_ ? !has_as_written : has) {
      drift.taint = true;
      drift.what.push_back(absl::StrCat("taint ", kUnhealthyTaintKey));
    }
  }
  if (labels_done_ && options_.node_labels) {
    const nlohmann::json labels =
        node.value("metadata", nlohmann::json::object()).value("labels", nlohmann::json::object());
    for (const auto& [key, value] : labels_) {
      if (!IsGpuletLabelKey(key)) continue;
      if (labels.value(key, std::string("\x01")) != value) {
        drift.labels = true;
        drift.what.push_back(absl::StrCat("label ", key));
      }
    }
  }
  return drift;
}

void NodeReporter::CheckNode() {
  nlohmann::json node;
  {
    absl::MutexLock lock(&mu_);
    if (watched_version_ == node_checked_) return;
    node_checked_ = watched_version_;
    node = watched_node_;
  }
  if (Drift(node).what.empty()) return;
  // The watch may be behind gpulet's own last write: only the server's current copy counts.
  absl::StatusOr<nlohmann::json> fresh =
      client_->Get(absl::StrCat("/api/v1/nodes/", options_.node_name));
  if (!fresh.ok()) return;  // the next watch event, or the heartbeat, tries again
  const NodeDrift drift = Drift(*fresh);
  if (drift.what.empty()) return;
  if (drift.conditions) written_.clear();  // WriteConditions sees a change and rewrites
  if (drift.taint) taint_written_.reset();
  if (drift.labels) labels_done_ = false;
  GPULET_LOG_WARN("cluster reporting: someone else changed Node {}'s {}; restoring",
                  options_.node_name, absl::StrJoin(drift.what, ", "));
  absl::MutexLock lock(&mu_);
  ++stats_.restores;
}

NodeReporter::Stats NodeReporter::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

const char* NodeReporter::OpName(Op op) {
  switch (op) {
    case Op::kConditions:
      return "writing the GPU conditions";
    case Op::kEvents:
      return "writing Events";
    case Op::kTaint:
      return "writing the taint";
    case Op::kLabels:
      return "writing the GPU labels";
    case Op::kWatch:
      return "watching the Node";
  }
  return "?";
}

void NodeReporter::Failed(Op op, const std::string& what, const absl::Status& status) {
  if (stopping_.load()) return;  // Stop cancelled the call: not an API problem
  std::string error = absl::StrCat(what, ": ", status.message());
  bool repeat;
  {
    absl::MutexLock lock(&mu_);
    ++stats_.errors;
    stats_.last_error = error;
    // One line when an operation starts failing or fails another way (another status code),
    // not one per retry: an API server down for an hour is a line per operation, not 2000,
    // however the operations' retries interleave.
    auto [it, added] = failing_.emplace(op, status.code());
    repeat = !added && it->second == status.code();
    it->second = status.code();
  }
  if (!repeat) GPULET_LOG_WARN("cluster reporting: {} (kept, retried)", error);
}

void NodeReporter::Succeeded(Op op) {
  {
    absl::MutexLock lock(&mu_);
    if (failing_.erase(op) == 0) return;
  }
  GPULET_LOG_INFO("cluster reporting: {} works again", OpName(op));
}

void NodeReporter::Run() {
  uint64_t seen = 0;
  std::shared_ptr<const state::Snapshot> before;
  while (!stopping_.load()) {
    const absl::Duration until = NextDue() - clock_->Now();
    const absl::Duration wait = std::clamp(until, absl::ZeroDuration(), kMaxWait);
    std::shared_ptr<const state::Snapshot> snap = store_->WaitForChange(seen, wait);
    if (stopping_.load() || store_->shut_down()) break;
    const absl::Time now = clock_->Now();
    if (snap->version != seen && options_.events) {
      for (const NodeEvent& e : NodeEventsBetween(before.get(), *snap)) {
        for (EventWrite& w : aggregator_.Record(e, now)) pending_.push_back(std::move(w));
      }
    }
    if (options_.inbox != nullptr) {
      for (const NodeEvent& e : options_.inbox->Drain()) {
        if (!options_.events) continue;
        for (EventWrite& w : aggregator_.Record(e, now)) pending_.push_back(std::move(w));
      }
    }
    before = snap;
    seen = snap->version;
    Pass(*snap, now);
  }
}

absl::Time NodeReporter::NextDue() const {
  // The heartbeat waits for the retry time too: while the API server fails, a heartbeat
  // already due must not make every wait zero.
  absl::Time due = std::max(last_condition_write_ + options_.heartbeat, conditions_retry_at_);
  due = std::min(due, gate_.NextChange());
  due = std::min(due, aggregator_.NextFlush());
  if (!pending_.empty()) due = std::min(due, events_retry_at_);
  if (taint_written_ == std::nullopt) due = std::min(due, taint_retry_at_);
  if (!labels_done_) due = std::min(due, labels_retry_at_);
  return due;
}

void NodeReporter::Pass(const state::Snapshot& snap, absl::Time now) {
  for (EventWrite& w : aggregator_.Flush(now)) pending_.push_back(std::move(w));
  while (pending_.size() > options_.max_pending_events) {
    pending_.pop_front();
    absl::MutexLock lock(&mu_);
    ++stats_.events_dropped;
  }
  if (options_.node_labels && options_.labels && snap.version != labels_version_) {
    labels_version_ = snap.version;
    if (std::map<std::string, std::string> wanted = options_.labels(snap); wanted != labels_) {
      labels_ = std::move(wanted);
      labels_done_ = false;
    }
  }
  CheckNode();
  WriteConditions(snap, now);
  WriteEvents(now);
  ReconcileTaint(snap, now);
  ReconcileLabels(now);
}

void NodeReporter::WriteConditions(const state::Snapshot& snap, absl::Time now) {
  std::vector<NodeConditionState> wanted = gate_.Apply(NodeConditionsFor(snap), now);
  const bool changed = !SameAsWritten(wanted, written_);
  const bool heartbeat_due = now >= last_condition_write_ + options_.heartbeat;
  if (!changed && !heartbeat_due) return;
  if (now < conditions_retry_at_) return;
  const std::string path = absl::StrCat("/api/v1/nodes/", options_.node_name, "/status");
  absl::StatusOr<nlohmann::json> node =
      client_->Patch(path, kube::PatchType::kStrategicMerge, NodeConditionsPatch(wanted, now));
  if (!node.ok()) {
    conditions_retry_at_ = now + options_.retry_interval;
    std::string what = "writing the GPU conditions";
    if (absl::IsNotFound(node.status())) {
      absl::StrAppend(&what, " (no Node is named ", options_.node_name,
                      ": NODE_NAME must be the pod's spec.nodeName, as deploy/base sets it)");
    }
    Failed(Op::kConditions, what, node.status());
    return;
  }
  Succeeded(Op::kConditions);
  if (node->contains("metadata") && (*node)["metadata"].contains("uid")) {
    node_uid_ = (*node)["metadata"]["uid"].get<std::string>();
  }
  written_ = std::move(wanted);
  last_condition_write_ = now;
  absl::MutexLock lock(&mu_);
  ++stats_.condition_writes;
}

void NodeReporter::WriteEvents(absl::Time now) {
  if (now < events_retry_at_) return;
  while (!pending_.empty() && !stopping_.load()) {
    const EventWrite& w = pending_.front();
    // An event about a pod lives in the pod's namespace.
    const std::string base = absl::StrCat(
        "/apis/events.k8s.io/v1/namespaces/",
        w.event.pod ? w.event.pod->namespace_name : options_.events_namespace, "/events");
    absl::Status status;
    if (w.kind == EventWrite::Kind::kCreate) {
      status =
          client_->Create(base, EventObject(w, options_.node_name, node_uid_, options_.instance))
              .status();
      // A retried create whose first attempt landed: the event is there.
      if (absl::IsAlreadyExists(status)) status = absl::OkStatus();
    } else {
      status =
          client_
              ->Patch(absl::StrCat(base, "/", w.name), kube::PatchType::kMerge, EventSeriesPatch(w))
              .status();
      // The event is gone (expired, deleted): its series ends; later repeats start another.
      if (absl::IsNotFound(status)) status = absl::OkStatus();
    }
    if (!status.ok() && !RejectedForGood(status)) {
      events_retry_at_ = now + options_.retry_interval;
      Failed(Op::kEvents, absl::StrCat("writing event ", w.name), status);
      return;
    }
    Succeeded(Op::kEvents);
    {
      absl::MutexLock lock(&mu_);
      if (!status.ok()) {
        ++stats_.events_rejected;
      } else {
        ++(w.kind == EventWrite::Kind::kCreate ? stats_.events_created : stats_.series_updates);
      }
    }
    if (!status.ok()) {
      // The same write would be refused again: retrying it forever would hold every event
      // queued behind it. Say so once per event and go on with the next.
      GPULET_LOG_ERROR(
          "cluster reporting: the API server refused event {} ({} {}): {}; dropped, not retried "
          "(a 403 means the ClusterRole lacks events.k8s.io create/patch: apply deploy/base)",
          w.name, w.event.reason, w.event.pod ? "about a pod" : "about the Node", status.message());
    }
    pending_.pop_front();
  }
}

void NodeReporter::ReconcileTaint(const state::Snapshot& snap, absl::Time now) {
  size_t unhealthy = 0;
  for (const state::DeviceRecord& d : snap.devices)
    unhealthy += d.health.state == state::HealthState::kUnhealthy;
  const size_t needed = static_cast<size_t>(
      std::max(1.0, std::ceil(options_.taint_share * static_cast<double>(snap.devices.size()))));
  const bool want = options_.taint && !snap.devices.empty() && unhealthy >= needed;
  if (taint_written_ == want || now < taint_retry_at_) return;
  const std::string path = absl::StrCat("/api/v1/nodes/", options_.node_name);
  absl::Status last;
  for (int attempt = 0; attempt < kTaintAttempts && !stopping_.load(); ++attempt) {
    absl::StatusOr<nlohmann::json> node = client_->Get(path);
    if (!node.ok()) {
      last = node.status();
      break;
    }
    // Keep every taint but gpulet's; add gpulet's when wanted.
    nlohmann::json taints = nlohmann::json::array();
    bool had = false, had_as_wanted = false;
    const nlohmann::json spec = node->value("spec", nlohmann::json::object());
    for (const nlohmann::json& t : spec.value("taints", nlohmann::json::array())) {
      if (t.value("key", "") == kUnhealthyTaintKey) {
        had = true;
        had_as_wanted = t.value("effect", "") == options_.taint_effect;
        continue;
      }
      taints.push_back(t);
    }
    if (want) {
      taints.push_back({{"key", kUnhealthyTaintKey},
                        {"effect", options_.taint_effect},
                        {"timeAdded", ApiTime(now)}});
    }
    if ((!want && !had) || (want && had_as_wanted)) {  // already as wanted
      taint_written_ = want;
      absl::MutexLock lock(&mu_);
      stats_.tainted = want;
      return;
    }
    const std::string rv = (*node)["metadata"].value("resourceVersion", "");
    nlohmann::json patch = {{"metadata", {{"resourceVersion", rv}}},
                            {"spec", {{"taints", taints}}}};
    absl::StatusOr<nlohmann::json> done = client_->Patch(path, kube::PatchType::kMerge, patch);
    if (done.ok()) {
      taint_written_ = want;
      Succeeded(Op::kTaint);
      absl::MutexLock lock(&mu_);
      ++stats_.taint_writes;
      stats_.tainted = want;
      return;
    }
    last = done.status();
    if (!kube::IsConflict(last)) break;  // someone else wrote the Node: read it again
  }
  taint_retry_at_ = now + options_.retry_interval;
  Failed(Op::kTaint, absl::StrCat(want ? "adding" : "removing", " the taint ", kUnhealthyTaintKey),
         last);
}

}  // namespace gpulet::cluster

namespace gpulet::cluster {

void NodeReporter::ReconcileLabels(absl::Time now) {
  if (labels_done_ || now < labels_retry_at_) return;
  const std::string path = absl::StrCat("/api/v1/nodes/", options_.node_name);
  absl::StatusOr<nlohmann::json> node = client_->Get(path);
  if (!node.ok()) {
    labels_retry_at_ = now + options_.retry_interval;
    Failed(Op::kLabels, "reading the Node for its GPU labels", node.status());
    return;
  }
  const nlohmann::json meta = node->value("metadata", nlohmann::json::object());
  const nlohmann::json annotations = meta.value("annotations", nlohmann::json::object());
  const nlohmann::json current = meta.value("labels", nlohmann::json::object());
  std::set<std::string> before;  // the keys an earlier gpulet wrote
  for (absl::string_view key :
       absl::StrSplit(annotations.value(kNodeLabelsAnnotation, ""), ',', absl::SkipEmpty())) {
    before.insert(std::string(key));
  }
  nlohmann::json labels = nlohmann::json::object();
  std::vector<std::string> written;
  bool changed = false;
  if (options_.node_labels) {
    for (const auto& [key, value] : labels_) {
      if (!IsGpuletLabelKey(key)) continue;
      const bool same = current.value(key, std::string("\x01")) == value;
      // A label someone else set to gpulet's value stays theirs: gpulet does not list it as
      // its own, so it never removes it (the user's nvidia.com/gpu.present=true, which
      // gpulet's DaemonSet selects nodes by, outlives gpulet's labels being turned off).
      if (same && !before.contains(key)) continue;
      written.push_back(key);
      if (!same) {
        labels[key] = value;
        changed = true;
      }
    }
  }
  for (const std::string& key : before) {
    if (std::find(written.begin(), written.end(), key) != written.end()) continue;
    if (current.contains(key)) {
      labels[key] = nullptr;  // merge patch: remove
      changed = true;
    }
  }
  const std::string list = absl::StrJoin(written, ",");
  const bool annotation_changed = annotations.value(kNodeLabelsAnnotation, "") != list;
  if (!changed && !annotation_changed) {
    labels_done_ = true;
    return;
  }
  nlohmann::json patch = {{"metadata",
                           {{"labels", labels},
                            {"annotations",
                             {{kNodeLabelsAnnotation, written.empty() ? nlohmann::json(nullptr)
                                                                      : nlohmann::json(list)}}}}}};
  absl::StatusOr<nlohmann::json> done = client_->Patch(path, kube::PatchType::kMerge, patch);
  if (!done.ok()) {
    labels_retry_at_ = now + options_.retry_interval;
    Failed(Op::kLabels, "writing the GPU labels", done.status());
    return;
  }
  Succeeded(Op::kLabels);
  labels_done_ = true;
  absl::MutexLock lock(&mu_);
  ++stats_.label_writes;
}

}  // namespace gpulet::cluster
