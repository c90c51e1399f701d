// TimedLane: runs calls that may hang (NVML on a wedged driver) on a worker thread and
// gives up waiting after a deadline.
//
// A call stuck inside the driver cannot be cancelled: the thread sits in uninterruptible
// sleep until the driver lets go, maybe forever. So each lane owns one worker thread; when a
// call overruns, the caller gets DeadlineExceeded at once and the lane is marked *wedged*.
// While wedged, further calls fail fast (no new thread piles up behind the stuck one); when
// the stuck call finally returns, the lane recovers by itself. gpulet keeps one lane per
// GPU, so one hung GPU never delays calls to the others.
//
// Work given to Run() must own everything it touches (capture shared_ptrs, not references
// to the caller's stack): after a timeout the caller has returned while the work may still
// run later.
//
// Deadlines and the "stuck for" age run on the injected clock's monotonic time. The worker
// thread is named "lane <tail of the lane's name>" (15 characters at most), so a thread
// stuck in the driver can be told apart in top -H or gdb.
//
// Thread-safety: Run() may be called from several threads; calls on one lane are serialised.
// Destroying a wedged lane detaches its worker, which exits when the stuck call returns.
#ifndef GPULET_COMMON_TIMED_CALL_H_
#define GPULET_COMMON_TIMED_CALL_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace gpulet {

class TimedLane {
 public:
  // `name` appears in messages ("GPU 0000:01:00.0").
  explicit TimedLane(std::string name, const Clock* clock = RealClock());
  ~TimedLane();
  TimedLane(const TimedLane&) = delete;
  TimedLane& operator=(const TimedLane&) = delete;

  // Runs `work` on the lane's thread and waits up to `timeout` for it. `what` names the call
  // for messages. Returns OK when the work finished in time; DeadlineExceeded when it did
  // not (the lane is then wedged) or when the lane was already wedged by an earlier call.
  absl::Status Run(std::function<void()> work, absl::Duration timeout, absl::string_view what);

  // True while a call that overran its deadline has not returned.
  bool wedged() const;

  // What is stuck and since when, for messages; empty when not wedged.
  std::string WedgedDescription() const;

  const std::string& name() const { return name_; }

 private:
  struct State;
  std::string name_;
  const Clock* clock_;
  std::shared_ptr<State> state_;
};

}  // namespace gpulet

#endif  // GPULET_COMMON_TIMED_CALL_H_
