// EventInbox: Node events that come from outside the DeviceStore (a VRAM slice reaching its
// quota, seen by the metrics sampler), handed to whichever NodeReporter runs now. The daemon
// owns it, so that a reporter or sampler rebuilt on reload never posts into or drains a
// freed queue. Bounded: past `max` events the oldest are dropped (the reporter's own queue
// bounds what waits for the API server).
//
// Thread-safety: Post and Drain may be called from any thread.
#ifndef GPULET_CLUSTER_EVENT_INBOX_H_
#define GPULET_CLUSTER_EVENT_INBOX_H_

#include <cstddef>
#include <deque>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "cluster/node_health.h"

namespace gpulet::cluster {

class EventInbox {
 public:
  explicit EventInbox(size_t max = 256) : max_(max) {}

  void Post(std::vector<NodeEvent> events) {
    absl::MutexLock lock(&mu_);
    for (NodeEvent& e : events) events_.push_back(std::move(e));
    while (events_.size() > max_) events_.pop_front();
  }

  std::vector<NodeEvent> Drain() {
    absl::MutexLock lock(&mu_);
    std::vector<NodeEvent> out(std::make_move_iterator(events_.begin()),
                               std::make_move_iterator(events_.end()));
    events_.clear();
    return out;
  }

 private:
  const size_t max_;
  absl::Mutex mu_;
  std::deque<NodeEvent> events_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpulet::cluster

#endif  // GPULET_CLUSTER_EVENT_INBOX_H_
