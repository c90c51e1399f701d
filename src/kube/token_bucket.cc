#include "kube/token_bucket.h"

#include <algorithm>

namespace gpulet::kube {

TokenBucket::TokenBucket(double qps, int burst, const Clock* clock)
    : qps_(qps),
      burst_(std::max(1, burst)),
      clock_(clock),
      tokens_(std::max(1, burst)),
      last_(clock->Monotonic()) {}

MonoTime TokenBucket::Reserve() {
  const MonoTime now = clock_->Monotonic();
  if (qps_ <= 0) return now;
  absl::MutexLock lock(&mu_);
  if (now > last_) {
    tokens_ = std::min(burst_, tokens_ + absl::ToDoubleSeconds(now - last_) * qps_);
    last_ = now;
  }
  tokens_ -= 1;
  if (tokens_ >= 0) return now;
  // -tokens_ tokens are owed; this one accrues when they all have.
  return now + absl::Seconds(-tokens_ / qps_);
}

}  // namespace gpulet::kube
