// NodeReporter: writes what the cluster should see of this node's GPU health (node_health.h)
// to the API server through kube::KubeClient: the Node's GPU conditions (a strategic merge
// patch of nodes/<name>/status, merged by condition type so the kubelet's own conditions are
// left alone), Events on the Node (events.k8s.io/v1, repeats folded into series), and the
// optional taint gpulet.dev/gpu-unhealthy.
//
// It runs on its own thread ("gpulet-kube") and reads the DeviceStore's snapshots, so an API
// server that is slow or unreachable delays nothing else: the device plugin, health and
// metrics never wait for it. What it could not write it keeps and writes later: conditions
// are level-triggered (the latest wanted state is written when the server answers again,
// and re-sent every `heartbeat`), Events wait in a bounded queue (the oldest dropped, with
// a log line, past `max_pending_events`).
//
// Node labels (with `node_labels`): the GPU labels are merged into metadata.labels, and the
// keys gpulet wrote are listed in the annotation gpulet.dev/node-labels, so that a key gpulet
// no longer writes (or all of them, once turned off) is removed without touching labels
// others set. Only keys under nvidia.com/ and gpulet.dev/ are written. The labels are
// computed from the store's snapshot whenever it changes, so that what changes under a
// running gpulet (a MIG layout an operator re-partitions) reaches the Node.
//
// The taint is gpulet's alone: only the taint with key gpulet.dev/gpu-unhealthy is added or
// removed, through a read-modify-write of spec.taints guarded by the Node's resourceVersion
// (a 409 re-reads and tries again), so taints others set are never touched. With the taint
// disabled, one that an earlier gpulet left is removed.
//
// What it wrote stays written: a second thread ("gpulet-watch", with `watch_node`) watches
// this Node, and when someone else removes or changes gpulet's conditions, taint or labels
// (a `kubectl label --overwrite`, a script that rewrites spec.taints, a kubelet that drops
// conditions it does not know) the reporter reads the Node afresh and, if the change is
// real, writes them again with one log line naming what was restored. A watch event that is
// only older than gpulet's own write (events are delivered after the write returns) is not a
// change: the fresh read settles it.
//
// Thread-safety: Start and Stop from one thread; stats() from any thread.
#ifndef GPULET_CLUSTER_NODE_REPORTER_H_
#define GPULET_CLUSTER_NODE_REPORTER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cluster/event_inbox.h"
#include "cluster/node_health.h"
#include "common/clock.h"
#include "kube/kube_client.h"
#include "state/device_store.h"

namespace gpulet::cluster {

inline constexpr char kUnhealthyTaintKey[] = "gpulet.dev/gpu-unhealthy";
inline constexpr char kNodeLabelsAnnotation[] = "gpulet.dev/node-labels";

class NodeReporter {
 public:
  struct Options {
    std::string node_name;
    std::string instance;  // reportingInstance of the Events: the pod, else the host name
    std::string events_namespace = "default";  // where the kubelet puts Node events too
    absl::Duration heartbeat = absl::Minutes(1);
    absl::Duration hold = absl::Minutes(5);  // the health policy's quiet period
    absl::Duration event_window = absl::Minutes(10);
    absl::Duration series_interval = absl::Seconds(10);
    absl::Duration retry_interval = absl::Seconds(5);
    size_t max_pending_events = 256;
    bool taint = false;
    std::string taint_effect = "NoSchedule";  // NoSchedule, PreferNoSchedule or NoExecute
    // The share of the node's GPUs that must be Unhealthy for the taint (1: all of them).
    double taint_share = 1.0;
    bool events = true;
    bool node_labels = false;
    // The GPU labels for a snapshot, written when node_labels (null: none). Called on the
    // reporter's thread each time the store's version changes.
    std::function<std::map<std::string, std::string>(const state::Snapshot&)> labels;
    // Events from outside the store (a VRAM slice at its quota), written with the store's
    // own when `events` is on; may be null.
    std::shared_ptr<EventInbox> inbox;
    // Watch this Node and restore what others remove (above).
    bool watch_node = true;
  };

  struct Stats {
    uint64_t condition_writes = 0;
    uint64_t events_created = 0;
    uint64_t series_updates = 0;
    uint64_t events_dropped = 0;   // queue overflow: the oldest went
    uint64_t events_rejected = 0;  // refused as invalid or forbidden: logged, not retried
    uint64_t taint_writes = 0;
    uint64_t label_writes = 0;
    uint64_t restores = 0;  // times someone else's change to gpulet's fields was undone
    uint64_t errors = 0;
    std::optional<bool> tainted;  // as last written or read; nullopt before
    std::string last_error;
  };

  NodeReporter(state::DeviceStore* store, kube::KubeClient* client, Options options,
               const Clock* clock = RealClock());
  ~NodeReporter();
  NodeReporter(const NodeReporter&) = delete;
  NodeReporter& operator=(const NodeReporter&) = delete;

  void Start();
  // Cancels the client's calls in flight and joins the thread. Idempotent.
  void Stop();

  Stats stats() const;

 private:
  void Run();
  // One round at `now` on the latest snapshot: conditions, queued events, taint.
  void Pass(const state::Snapshot& snap, absl::Time now);
  void WriteConditions(const state::Snapshot& snap, absl::Time now);
  void WriteEvents(absl::Time now);
  void ReconcileTaint(const state::Snapshot& snap, absl::Time now);
  void ReconcileLabels(absl::Time now);
  // The watch thread's loop.
  void WatchNode();
  // On the reporter's thread: when the watch saw a newer Node, what of gpulet's it lacks;
  // marks those for rewriting (after a fresh read confirms it).
  void CheckNode();
  // What of gpulet's conditions, taint and labels `node` does not hold as last written.
  struct NodeDrift {
    bool conditions = false, taint = false, labels = false;
    std::vector<std::string> what;  // for the log line: "condition GpuUnhealthy", ...
  };
  NodeDrift Drift(const nlohmann::json& node) const;
  // The next moment a pass is due without a store change.
  absl::Time NextDue() const;
  // What a failure is about: each logs one line when it starts failing (or fails another
  // way) and one when it works again.
  enum class Op { kConditions, kEvents, kTaint, kLabels, kWatch };
  static const char* OpName(Op op);
  void Failed(Op op, const std::string& what, const absl::Status& status);
  void Succeeded(Op op);

  state::DeviceStore* const store_;
  kube::KubeClient* const client_;
  const Options options_;
  const Clock* const clock_;
  std::thread thread_;
  std::thread watch_thread_;
  std::atomic<bool> stopping_{false};

  // Owned by the reporter's thread.
  ConditionGate gate_;
  EventAggregator aggregator_;
  std::vector<NodeConditionState> written_;  // as last written successfully
  absl::Time last_condition_write_ = absl::InfinitePast();
  absl::Time conditions_retry_at_ = absl::InfinitePast();
  std::deque<EventWrite> pending_;
  absl::Time events_retry_at_ = absl::InfinitePast();
  std::optional<bool> taint_written_;
  absl::Time taint_retry_at_ = absl::InfinitePast();
  std::map<std::string, std::string> labels_;  // options_.labels of the latest snapshot
  std::optional<uint64_t> labels_version_;     // the snapshot labels_ is of
  bool labels_done_ = false;
  absl::Time labels_retry_at_ = absl::InfinitePast();
  std::string node_uid_;

  uint64_t node_checked_ = 0;  // the watched version CheckNode last looked at

  mutable absl::Mutex mu_;
  Stats stats_ ABSL_GUARDED_BY(mu_);
  // From the watch thread: the Node as last seen, and a count of sightings.
  nlohmann::json watched_node_ ABSL_GUARDED_BY(mu_);
  uint64_t watched_version_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_requested_ ABSL_GUARDED_BY(mu_) = false;
  std::map<Op, absl::StatusCode> failing_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpulet::cluster

#endif  // GPULET_CLUSTER_NODE_REPORTER_H_
