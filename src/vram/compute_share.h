// The compute share's rule (docs/sharing.md, "Compute share"): the launch rate that holds a
// slice holder to its share of the GPU's SM time.
//
// The library can count what a holder launches (cost units: a kernel's blocks;
// launch_pacing.h) but not how long the GPU runs it; NVML measures the second per process
// (smUtil) but cannot slow anything. Each sampling round joins the two: the holder's SM time
// over the units it launched is what one unit costs on this GPU for this holder's kernels,
// and the rate that buys exactly its share is the share over that cost. The rate moves to it
// by the geometric mean of old and new (half the error, in ratio, each round), so one noisy
// sample does not swing it; a holder that launched nothing, or whose SM time NVML did not
// measure, teaches nothing and keeps its rate. A holder is not paced until a round measures
// it over its share.
//
// The share is a cap, not a reservation: a holder with a quarter of the card gets at most a
// quarter of its SM time, even when the rest of the card is idle, and at least nothing.
//
// Thread-safety: a ComputeShareRule is a value; callers serialise its use.
#ifndef GPULET_VRAM_COMPUTE_SHARE_H_
#define GPULET_VRAM_COMPUTE_SHARE_H_

#include <cstdint>

namespace gpulet::vram {

// A holder's compute share in thousandths of its GPU's SM time: its quota over the GPU's
// memory, at most the whole card; 0 (no share) when the GPU's memory is unknown.
uint32_t ComputeSharePermille(uint64_t quota_bytes, uint64_t gpu_memory_bytes);

struct ComputeRound {
  double share = 0;       // the holder's share, 0..1
  double sm_busy = 0;     // its SM time this round as a fraction of the round (NVML), 0..1
  bool measured = false;  // NVML sampled the holder's processes this round
  uint64_t units = 0;     // cost units its processes launched this round
  double seconds = 0;     // the round's length
};

class ComputeShareRule {
 public:
  // The least rate the rule sets, whatever it measures: one unit per millisecond. The library
  // caps each launch's wait (kLaunchMaxWaitNs), so a holder is slowed, never stopped.
  static constexpr uint64_t kMinRate = 1000;

  // `rate`: the rate in force (a restarted gpulet goes on from the slice file's).
  ComputeShareRule() = default;
  explicit ComputeShareRule(uint64_t rate) : rate_(rate) {}

  // The rate for the next round, in units per second; 0: not paced.
  uint64_t Next(const ComputeRound& round);

  uint64_t rate() const { return rate_; }

 private:
  uint64_t rate_ = 0;
};

}  // namespace gpulet::vram

#endif  // GPULET_VRAM_COMPUTE_SHARE_H_
