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
// Thread-safety: all methods are thread-safe (one mutex); the store has its own lock.
#ifndef GPULET_HEALTH_XID_POLICY_H_
#define GPULET_HEALTH_XID_POLICY_H_

#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "health/xid.h"
#include "state/device_store.h"

namespace gpulet {

class XidPolicy {
 public:
  XidPolicy(DeviceStore* store, std::set<int> application_xids, absl::Duration quiet_period);

  // Applies one XID for the GPU named by UUID, bus id (any form) or "index:N". `source` is
  // "nvml" or "kmsg".
  // Returns false when the GPU is unknown or the XID was a duplicate.
  bool OnXid(const std::string& gpu, int xid, const std::string& message, const std::string& source,
             absl::Time now);

  // Clears "xid" conditions whose quiet period has passed.
  void Tick(absl::Time now);

 private:
  DeviceStore* store_;
  std::set<int> application_xids_;
  absl::Duration quiet_period_;
  absl::Mutex mu_;
  // Last time each (gpu, xid) was seen, and by which source, for de-duplication.
  std::map<std::pair<std::string, int>, std::pair<absl::Time, std::string>> seen_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, absl::Time> last_bad_ ABSL_GUARDED_BY(mu_);  // gpu → last non-app XID
};

}  // namespace gpulet

#endif  // GPULET_HEALTH_XID_POLICY_H_
