#include "vram/compute_share.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace gpulet::vram {

uint32_t ComputeSharePermille(uint64_t quota_bytes, uint64_t gpu_memory_bytes) {
  if (gpu_memory_bytes == 0) return 0;
  return static_cast<uint32_t>(std::min<uint64_t>(1000, quota_bytes * 1000 / gpu_memory_bytes));
}

uint64_t ComputeShareRule::Next(const ComputeRound& r) {
  if (r.share <= 0 || r.share >= 1) return rate_ = 0;  // no share, or the whole card
  if (!r.measured || r.units == 0 || r.seconds <= 0) return rate_;
  const double busy = std::clamp(r.sm_busy, 0.0, 1.0);
  if (busy <= 0) return rate_;  // launched, but NVML saw no SM time: nothing learned
  if (rate_ == 0 && busy <= r.share) return 0;  // within its share: not paced yet
  // SM-seconds one unit costs, and the rate at which the holder's units fill its share.
  const double unit_cost = busy * r.seconds / static_cast<double>(r.units);
  const double target = r.share / unit_cost;
  const double next = rate_ == 0 ? target : std::sqrt(static_cast<double>(rate_) * target);
  const double max = static_cast<double>(std::numeric_limits<uint32_t>::max()) * 1e3;
  rate_ = static_cast<uint64_t>(std::llround(std::clamp(next, static_cast<double>(kMinRate), max)));
  return rate_;
}

}  // namespace gpulet::vram
