// XidPolicy: turns XIDs (from NVML events and the kernel log) into GPU health in the
// DeviceStore, and brings GPUs back when they have been quiet long enough.
//
// Each XID is counted (gpulet_gpu_xid_errors_total, last XID). Application-level XIDs
// (configurable; 13, 31, 43, 45, 68, 94 by default) never take a GPU out. Others follow the
// catalogue (xid.h AssessXid): fatal ones raise an Unhealthy "xid" condition with the
// meaning and the action, warnings a Degraded one. The condition clears after the quiet
// period passes with no new such XID. The same XID reported by both sources within two
// seconds is counted once.
//
// XID 154 ("GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)")
// is the driver announcing what the XIDs before it need, and that announcement overrides
// the catalogue: a reset or reboot makes the GPU Unhealthy with that action, "Drain P2P"
// Degraded, and "None" (the driver's all-clear after a recovery) clears the condition.
//
// Repeats escalate as NVIDIA recommends: an XID whose action is a GPU reset or a node reboot
// that comes back on the same GPU after that recovery is a hardware fault, so the GPU gets
// "inspect-hardware" instead. A reboot counts as done when the boot id differs from the one
// the XID was last seen in; a reset when the GPU's condition cleared after its quiet period
// (it was back in service) or the driver announced "None". This history survives gpulet
// restarts through an XidHistoryStore (xid_history.h); without one it lives in memory. A
// history that cannot be loaded or saved is logged and reported by HistoryStatus(); the
// policy goes on with what it has (an empty history after a bad file).
//
// Thread-safety: all methods are thread-safe (one mutex); the store has its own lock.
#ifndef GPULET_HEALTH_XID_POLICY_H_
#define GPULET_HEALTH_XID_POLICY_H_

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "health/xid.h"
#include "health/xid_history.h"
#include "state/device_store.h"

namespace gpulet::health {

struct XidPolicyOptions {
  // Keeps the repeat history across restarts (not owned; must outlive the policy). nullptr:
  // in memory only.
  XidHistoryStore* history = nullptr;
  // This boot's id (/proc/sys/kernel/random/boot_id); a different one in the history means
  // the node rebooted since. "" when unknown: then reboots are not recognised.
  std::string boot_id;
  // Told of every XID the policy accepted (a known GPU, not a duplicate), after the store
  // was updated: the GPU (its UUID, else its bus id), the XID, its text (the kernel log's
  // line or NVML's event) and when it came. Called on OnXid's thread with no lock held; may
  // be empty. The flight recorder keeps them as evidence.
  std::function<void(const std::string& gpu, int xid, const std::string& text, absl::Time at)>
      on_xid = nullptr;
};

class XidPolicy {
 public:
  XidPolicy(state::DeviceStore* store, std::set<int> application_xids, absl::Duration quiet_period,
            XidPolicyOptions options = {});

  // Applies one XID for the GPU named by UUID, bus id (any form) or "index:N". `source` is
  // "nvml" or "kmsg". `gpu_instance`: the MIG GPU instance the XID names ("GPU-I:05" in the
  // kernel log, the event's gpuInstanceId); when that instance exists, the XID's condition
  // is raised on that MIG device alone, and the GPU's other MIG devices keep working. An XID
  // naming no instance (or one that does not exist) is the whole GPU's: every MIG device of
  // it goes out with it. Counts are the GPU's either way.
  // Returns false when the GPU is unknown or the XID was a duplicate.
  bool OnXid(const std::string& gpu, int xid, const std::string& message, const std::string& source,
             absl::Time now, std::optional<unsigned> gpu_instance = std::nullopt);

  // Clears "xid" conditions whose quiet period has passed.
  void Tick(absl::Time now);

  // The GPU (UUID or bus id) was reset (the reset rung): the resets its XIDs asked for are
  // done, so the same XID after it is a repeat that escalates to inspect-hardware.
  void NoteReset(const std::string& gpu);

  // Takes over `old`'s memory of recent XIDs (their de-duplication, each GPU's last fatal XID
  // and when it came), so that a GPU `old` took out comes back after this policy's quiet
  // period: a reload that rebuilds the policy while a GPU is out loses nothing. The repeat
  // history comes from this policy's own store when it has one, else from `old`. No XID may
  // reach either policy meanwhile (the event monitor is stopped).
  void AdoptFrom(const XidPolicy& old);

  // OK, or the last error loading or saving the history (it names the file and the fix).
  absl::Status HistoryStatus() const;
  // A copy of the repeat history (GPU → XID → entry).
  XidHistory History() const;

 private:
  // OnXid without telling on_xid; sets `*key` to the GPU's key when it is known.
  bool Apply(const std::string& gpu, int xid, const std::string& message, const std::string& source,
             absl::Time now, std::optional<unsigned> gpu_instance, std::string* key);
  // Marks the resets GPU `key`'s XIDs asked for as done, and saves.
  void MarkResetDoneLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Saves history_ when a store is set; records a failure in history_status_.
  void SaveHistoryLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  state::DeviceStore* store_;
  std::set<int> application_xids_;
  absl::Duration quiet_period_;
  XidHistoryStore* history_store_;
  std::string boot_id_;
  std::function<void(const std::string&, int, const std::string&, absl::Time)> on_xid_;
  mutable absl::Mutex mu_;
  XidHistory history_ ABSL_GUARDED_BY(mu_);
  absl::Status history_status_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> last_xid_ ABSL_GUARDED_BY(mu_);  // gpu → last non-app, non-154 XID
  // Last time each (gpu, xid) was seen, and by which source, for de-duplication.
  std::map<std::pair<std::string, int>, std::pair<absl::Time, std::string>> seen_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, absl::Time> last_bad_ ABSL_GUARDED_BY(mu_);  // gpu → last non-app XID
  // (gpu, GPU instance) → last non-app XID naming that MIG instance.
  std::map<std::pair<std::string, unsigned>, absl::Time> last_bad_mig_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpulet::health

#endif  // GPULET_HEALTH_XID_POLICY_H_
