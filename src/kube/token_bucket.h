// TokenBucket: client-side QPS and burst limits, as client-go's token-bucket rate limiter:
// tokens accrue at `qps` per second up to `burst`; each request takes one, and a request that
// finds none is given the time at which its token will have accrued. Reservations are made
// in order, so waiters are served first come, first served and the long-run rate never
// exceeds qps.
//
// Reserve() only computes; the caller sleeps on its own (cancellable) wait until the time it
// returns. Time is the injected Clock's monotonic reading, so tests drive it.
//
// Thread-safety: Reserve may be called from any thread.
#ifndef GPULET_KUBE_TOKEN_BUCKET_H_
#define GPULET_KUBE_TOKEN_BUCKET_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"

namespace gpulet::kube {

class TokenBucket {
 public:
  // qps > 0 and burst >= 1; a qps of 0 or less disables the limit.
  TokenBucket(double qps, int burst, const Clock* clock);

  // Takes a token and returns when it may be used: now, or later when the bucket is empty.
  MonoTime Reserve();

 private:
  const double qps_;
  const double burst_;
  const Clock* const clock_;
  absl::Mutex mu_;
  double tokens_ ABSL_GUARDED_BY(mu_);  // may go negative: tokens promised to waiters
  MonoTime last_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpulet::kube

#endif  // GPULET_KUBE_TOKEN_BUCKET_H_
