// SlicePublisher: keeps this node's ResourceSlices in the API server equal to
// BuildSliceSpecs(the DeviceStore's snapshot, options) (resource_slices.h), so the scheduler
// sees the node's GPUs and, within a second of a fault, their health taints.
//
// It runs on its own thread ("gpulet-dra-pub") and writes through kube::KubeClient, so an API
// server that is slow or unreachable delays nothing else; it is never fatal: failures are
// retried every `retry_interval`, level-triggered (each attempt writes the latest wanted
// state, so there is no queue to grow or replay).
//
// The rules it keeps:
//   - Names are deterministic, "<node>-<driver>-<i>" as a DNS subdomain (SliceName), so a
//     restart (or a rolling update's new instance) finds and updates its own slices instead
//     of creating a second set.
//   - One pool, named after the node. All slices of a pool carry the same pool.generation and
//     resourceSliceCount, and a consumer ignores slices of an older generation than the
//     newest it sees; so the generation is bumped on every change of content (never for an
//     unchanged spec, so a snapshot that only changed elsewhere writes nothing). At start it
//     lists the node's slices of the driver and continues from the highest generation found
//     + 1: generations never go backwards across restarts, which would hide the new slices
//     behind the old ones.
//   - Slices that exist by name are updated (PUT with their resourceVersion; a 409 re-reads
//     that slice and tries again), missing ones created, and extra ones deleted after the
//     others are written (more slices before than now, or leftovers of the driver on this
//     node under other names): a consumer that sees the new generation ignores the old
//     slices until they are gone.
//   - metadata.ownerReferences names the Node (controller), so the slices go with the Node.
//     When the Node cannot be read (404, or 403: no RBAC for nodes) they are published without
//     it, with one log line.
//   - The server's answer to each write is what it stored: fields it dropped (a feature gate
//     off on the API server drops device taints or consumable capacity without an error)
//     are logged once, naming the gate, and kept in stats().dropped_fields.
//   - Every `resync` it re-reads the Node (a Node created again has a new uid) and the
//     slices, and repairs what others changed or deleted.
// Stop leaves the slices in place: a rolling update's new instance takes them over, and the
// kubelet deletes a driver's slices when the driver deregisters.
//
// Thread-safety: Start and Stop from one owning thread; SetOptions, stats and
// WaitForPublished from any thread. `client`, `store` and `clock` must outlive the publisher.
// Stop does not Cancel the client (it may be shared with others): a call in flight finishes
// (bounded by the client's request timeout and attempts) before Stop returns, so at shutdown
// cancel the client first (KubeClient::Cancel) for Stop to return at once.
#ifndef GPULET_DRA_SLICE_PUBLISHER_H_
#define GPULET_DRA_SLICE_PUBLISHER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "dra/resource_slices.h"
#include "kube/kube_client.h"
#include "nlohmann/json.hpp"
#include "state/device_store.h"

namespace gpulet::dra {

inline constexpr char kResourceSlicesPath[] = "/apis/resource.k8s.io/v1/resourceslices";

struct SlicePublisherOptions {
  // driver, node_name, memory_shares, share_mib, no_execute_on_fatal; `generation` is
  // ignored: the publisher manages it.
  SliceOptions slices;
  // After a failed write or read, the next attempt.
  absl::Duration retry_interval = absl::Seconds(5);
  // Re-reads the server's copy even without a change, and repairs it.
  absl::Duration resync = absl::Minutes(5);
};

// The name of slice `index` of the pool: "<node>-<driver>-<index>" lowercased, with
// characters a DNS subdomain does not allow replaced by '-'; past 253 characters the prefix is
// cut and a hash of the whole keeps names distinct.
std::string SliceName(const std::string& node_name, const std::string& driver, size_t index);

// The fields of `sent` (a ResourceSlice) that `stored` (the server's answer) lacks, as paths
// with "[]" for list elements ("spec.devices[].taints"), each followed by the feature gate
// that serves it where known: " (feature gate DRADeviceTaints)". An API server whose gate for
// an alpha or beta field is off drops that field on write without an error.
std::vector<std::string> DroppedFields(const nlohmann::json& sent, const nlohmann::json& stored);

class SlicePublisher {
 public:
  struct Stats {
    uint64_t writes = 0;     // creates, updates and deletes that succeeded
    uint64_t conflicts = 0;  // 409s (a stale resourceVersion, a name taken): re-read, retried
    uint64_t errors = 0;     // passes that failed and were retried later
    int64_t generation = 0;  // the pool generation last written (0: none yet)
    // The store snapshot version whose slices the server holds (written, or found already
    // equal); 0 before the first success.
    uint64_t published_version = 0;
    std::string last_error;  // "" when none yet
    // Fields the server dropped from the last slice written (DroppedFields); empty: none.
    std::vector<std::string> dropped_fields;
  };

  SlicePublisher(kube::KubeClient* client, const state::DeviceStore* store,
                 SlicePublisherOptions options, const Clock* clock = RealClock());
  ~SlicePublisher();  // Stop()
  SlicePublisher(const SlicePublisher&) = delete;
  SlicePublisher& operator=(const SlicePublisher&) = delete;

  // Starts the thread and returns at once: an unreachable API server is retried, never
  // fatal. InvalidArgument without a driver or node name; FailedPrecondition when started.
  absl::Status Start();
  // Joins the thread. Idempotent. Leaves the slices in place (see above).
  void Stop();

  // A reload: the next pass republishes when the built specs differ. A new driver or node
  // name starts over (list, owner), leaving the old name's slices to the kubelet's cleanup.
  void SetOptions(SlicePublisherOptions options);

  Stats stats() const;

  // Blocks (real time) until the slices for store version >= `store_version` are in the
  // server, or `timeout`; for tests.
  bool WaitForPublished(uint64_t store_version, absl::Duration timeout) const;

 private:
  // One slice as this publisher knows it.
  struct Known {
    nlohmann::json object;  // as the server last returned it (resourceVersion inside)
    // The ownerReferences and spec this publisher wrote into `object` (null: not written by
    // this publisher): a server that adds defaults to the spec then causes no rewrite.
    nlohmann::json sent;
  };

  void Run();
  // Makes the server's slices those of `snap`; an error means "retry later".
  absl::Status Reconcile(const state::Snapshot& snap, const SlicePublisherOptions& options);
  absl::Status ResolveOwner(const std::string& node_name);
  absl::Status List(const SliceOptions& slices);
  // Creates or updates slice `name` to `want` (metadata and spec, no resourceVersion).
  absl::Status Ensure(const std::string& name, const nlohmann::json& want);
  void Failed(const absl::Status& status);
  // Compares what was sent with what the server stored; logs a change in what it drops.
  void NoteDropped(const std::string& name, const nlohmann::json& sent,
                   const nlohmann::json& stored);

  kube::KubeClient* const client_;
  const state::DeviceStore* const store_;
  const Clock* const clock_;
  std::thread thread_;

  // Owned by the publisher's thread.
  std::optional<SliceOptions> active_;  // the slice options of the last pass
  bool owner_resolved_ = false;
  nlohmann::json owner_refs_;     // array, or null: no owner reference
  bool warned_no_owner_ = false;  // logged once until the Node is found
  bool listed_ = false;
  std::map<std::string, Known> known_;  // the driver's slices on this node, by name
  int64_t generation_ = 0;
  std::optional<std::vector<nlohmann::json>> generation_content_;  // specs, generation 0

  mutable absl::Mutex mu_;
  SlicePublisherOptions options_ ABSL_GUARDED_BY(mu_);
  bool options_changed_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpulet::dra

#endif  // GPULET_DRA_SLICE_PUBLISHER_H_
