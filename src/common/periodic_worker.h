// PeriodicWorker: one named thread that runs a callback every interval, measured on an
// injected Clock's monotonic time, until stopped.
//
// Stop() wakes the thread at once (it sleeps on a condition, not in sleep/poll slices) and
// joins it; a tick already running is finished first. Wake() runs the next tick now, for
// work that is both periodic and triggered. Intervals run from the start of one tick to the
// start of the next; a tick that overruns is followed by the next one at once, never by a
// burst of catch-up ticks.
//
// Also here: SetCurrentThreadName and StartNamedThread, so that every thread gpulet creates
// shows up by name in top -H, gdb and /proc/<pid>/task/*/comm. They are inline because the
// statically linked gpulet-nvml-worker uses them without the rest of the core library.
//
// Thread-safety: Start, Stop and Wake may be called from any thread except the worker's
// own (Stop from inside the callback would join itself); the callback runs on the worker
// thread only, never twice at once. Destruction stops the worker.
#ifndef GPULET_COMMON_PERIODIC_WORKER_H_
#define GPULET_COMMON_PERIODIC_WORKER_H_

#include <pthread.h>
#include <signal.h>

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace gpulet {

// Names the calling thread; Linux keeps at most 15 characters, so longer names are cut.
inline void SetCurrentThreadName(absl::string_view name) {
  std::string cut(name.substr(0, 15));
  pthread_setname_np(pthread_self(), cut.c_str());
}

// A std::thread that names itself `name` before running `body`. It starts with every
// signal blocked, so that process signals (SIGTERM, SIGHUP) reach only the thread that
// waits for them, never a worker that happens to have them unblocked.
inline std::thread StartNamedThread(std::string name, std::function<void()> body) {
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &previous);  // the new thread inherits this mask
  std::thread thread([name = std::move(name), body = std::move(body)] {
    SetCurrentThreadName(name);
    body();
  });
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  return thread;
}

class PeriodicWorker {
 public:
  struct Options {
    std::string name;  // thread name, at most 15 characters ("gpulet-liveness")
    absl::Duration interval = absl::Seconds(1);
    const Clock* clock = RealClock();
    bool tick_at_start = true;  // first tick at Start; otherwise one interval later
  };

  PeriodicWorker(Options options, std::function<void()> tick);
  ~PeriodicWorker();
  PeriodicWorker(const PeriodicWorker&) = delete;
  PeriodicWorker& operator=(const PeriodicWorker&) = delete;

  // Starts the thread; once.
  void Start();
  // Wakes the thread, lets a running tick finish, joins. Idempotent.
  void Stop();
  // Makes the next tick start now instead of at its deadline.
  void Wake();

  // Ticks completed so far.
  uint64_t ticks() const;
  const Options& options() const { return options_; }

 private:
  void Run();

  const Options options_;
  const std::function<void()> tick_;
  std::thread thread_;  // Start/Stop only
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t ticks_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gpulet

#endif  // GPULET_COMMON_PERIODIC_WORKER_H_
