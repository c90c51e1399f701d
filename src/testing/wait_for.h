// WaitFor: polls a condition in real time, for tests that watch another process or thread
// (a daemon, a server) reach a state. Returns how long it took, so a test can assert a bound
// on it separately from the generous overall limit that only guards against a hang.
//
// Thread-safety: none needed; `done` runs on the calling thread.
#ifndef GPULET_TESTING_WAIT_FOR_H_
#define GPULET_TESTING_WAIT_FOR_H_

#include <chrono>
#include <functional>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace gpulet::testing {

// Polls `done` every 10 ms until it holds or `limit` passes; the time it took, or
// InfiniteDuration when it never held.
inline absl::Duration WaitFor(const std::function<bool()>& done,
                              absl::Duration limit = absl::Seconds(20)) {
  const absl::Time start = absl::Now();
  while (absl::Now() - start < limit) {
    if (done()) return absl::Now() - start;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return absl::InfiniteDuration();
}

}  // namespace gpulet::testing

#endif  // GPULET_TESTING_WAIT_FOR_H_
