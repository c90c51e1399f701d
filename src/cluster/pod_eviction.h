// The eviction rung of the remediation ladder (docs/remediation.md), its cluster half: the
// evictions ordered (daemon/eviction_rung.h decides which pods, when, within what budget)
// and the worker that carries them out through the API server's Eviction API, so that
// PodDisruptionBudgets hold and the pods' controllers reschedule them onto a healthy GPU.
//
// EvictionQueue holds the orders and how each stands. The daemon owns it, so that a
// cluster client rebuilt on reload takes over the orders in flight, and a sampler rebuilt on
// reload adds to the same queue. An order ends when the pod is evicted, when it is gone
// (404, or 409: the UID precondition names a pod that was replaced), or when it is
// withdrawn (its GPU is back in service). Until then it is tried again every `retry`: a
// PodDisruptionBudget that allows no disruption now (429) may allow one later, and an API
// server that was unreachable may answer. A refusal (403: the ServiceAccount may not evict)
// is tried again too, less often, since the fix (deploy/evict) needs no restart.
// Each outcome is a log line and a count (gpulet_gpu_pod_evictions_total{result}); an
// eviction, the first refusal by a budget and the first 403 of an order are Events about
// the pod, in its namespace.
//
// PodEvictor is the worker: a thread, "gpulet-evict", that every `interval` takes the due
// orders and POSTs each one's Eviction (policy/v1) with the pod's UID as a precondition,
// so a pod replaced under the same name (a StatefulSet's) is never evicted by mistake.
//
// A dry run's pods are kept too (never tried), so that /status shows what `on` would do.
//
// Thread-safety: EvictionQueue's methods may be called from any thread. PodEvictor: Start
// and Stop from one thread.
#ifndef GPULET_CLUSTER_POD_EVICTION_H_
#define GPULET_CLUSTER_POD_EVICTION_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cluster/event_inbox.h"
#include "cluster/node_health.h"
#include "common/clock.h"
#include "common/periodic_worker.h"
#include "kube/kube_client.h"
#include "state/status_report.h"

namespace gpulet::cluster {

struct EvictionOrder {
  PodRef pod;
  std::string gpu;          // the GPU's UUID
  std::string gpu_text;     // for messages: "GPU-8a41... (GPU 1)"
  std::string gpu_problem;  // the GPU's health reason: "XID 79: GPU has fallen off the bus"
};

// What one try came to.
enum class EvictionResult { kEvicted, kGone, kBlocked, kForbidden, kFailed };
const char* EvictionResultName(EvictionResult result);  // "evicted", "gone", ...
// The result a try's status stands for (the API server's code, never its words).
EvictionResult ClassifyEviction(const absl::Status& status);

class EvictionQueue {
 public:
  struct Options {
    // As `kubectl drain` retries a budget's refusal; an unreachable server too.
    absl::Duration retry = absl::Seconds(5);
    absl::Duration forbidden_retry = absl::Minutes(5);  // the RBAC is not granted
  };
  EvictionQueue() : EvictionQueue(Options()) {}
  explicit EvictionQueue(Options options) : options_(options) {}

  // A new order; one for a pod already waiting is ignored.
  void Add(EvictionOrder order);
  // The GPU is back: its orders end untried (a log line each).
  void Withdraw(const std::string& gpu);
  // The orders due at `now`: new ones and those whose retry time has come.
  std::vector<EvictionOrder> Due(absl::Time now);
  // Records how the try of `order` ended (`status` from EvictPod) and returns the Events
  // to write about it.
  std::vector<NodeEvent> Done(const EvictionOrder& order, const absl::Status& status,
                              absl::Time now);
  // A pod a dry run would have evicted: counted with the tries (result "dry_run") and shown
  // in /status ("would-evict") until its GPU is back; never tried.
  void AddDryRun(EvictionOrder order);

  // The pods named, by GPU UUID, as /status shows them.
  std::map<std::string, std::vector<state::EvictionStatus>> ByGpu() const;
  // Tries by result, "dry_run" included; every result is present (0 before the first).
  std::map<std::string, uint64_t> counts() const;

 private:
  struct Entry {
    EvictionOrder order;
    absl::Time due = absl::InfinitePast();
    int tries = 0;
    std::string last;
    std::string state = "evicting";  // as /status shows it (state::EvictionStatus)
    bool dry_run = false;
    bool blocked_told = false;
    bool forbidden_told = false;
  };
  static std::string Key(const PodRef& pod) { return pod.namespace_name + "/" + pod.name; }

  const Options options_;
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);  // by namespace/name
  std::map<std::string, uint64_t> counts_ ABSL_GUARDED_BY(mu_);
};

// POST /api/v1/namespaces/<ns>/pods/<name>/eviction: OK when the pod is evicted (201); the
// API server's error otherwise (its Status object, for ClassifyEviction).
absl::Status EvictPod(kube::KubeClient& client, const PodRef& pod);

class PodEvictor {
 public:
  // `client` should not retry on its own (max_attempts 1): a 429 is a budget's answer,
  // which the queue's retry waits out without holding up the other orders.
  PodEvictor(EvictionQueue* queue, kube::KubeClient* client, EventInbox* inbox,
             absl::Duration interval, const Clock* clock = RealClock());
  void Start() { worker_.Start(); }
  void Stop() { worker_.Stop(); }

 private:
  void Tick();

  EvictionQueue* const queue_;
  kube::KubeClient* const client_;
  EventInbox* const inbox_;
  const Clock* const clock_;
  PeriodicWorker worker_;
};

}  // namespace gpulet::cluster

#endif  // GPULET_CLUSTER_POD_EVICTION_H_
