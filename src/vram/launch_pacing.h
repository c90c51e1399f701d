// Launch pacing: how the enforcement library holds a slice holder to its compute share
// (slice_format.h's minor-1 fields; docs/sharing.md, "Compute share").
//
// gpulet sets a launch rate (cost units per second) in the slice file each sampling round,
// from the holder's SM time as NVML measures it (vram/compute_share.h); the library charges
// each kernel launch its cost and makes it wait for its turn. The turn is a virtual clock in
// the slice file that every process of the holder advances with one compare-and-swap, so the
// rate holds across all of them, and a process that dies mid-wait leaves nothing to repair.
// After an idle spell the holder may launch kLaunchBurstNs worth of work at once.
//
// Written against libc alone (no libstdc++, no allocation): the library links it.
//
// Thread-safety: every function may be called from any thread and process; the header's
// launch fields are accessed only atomically.
#ifndef GPULET_VRAM_LAUNCH_PACING_H_
#define GPULET_VRAM_LAUNCH_PACING_H_

#include <stdint.h>

#include "vram/slice_format.h"

namespace gpulet::vram {

// The work a holder may launch at once after an idle spell, as time at its rate.
inline constexpr uint64_t kLaunchBurstNs = 20'000'000;  // 20 ms
// The most one launch waits, however low the rate and large the launch: pacing slows a
// holder, it never stalls one.
inline constexpr uint64_t kLaunchMaxWaitNs = 100'000'000;  // 100 ms
// What a CUDA graph launch costs, in units (its kernels are not visible at the call): the
// cost of a kernel of this many blocks. The rate gpulet sets is fitted to the holder's own
// mix of launches, so a constant cost per graph is enough for the share to hold.
inline constexpr uint64_t kGraphLaunchCost = 1024;

// A kernel's cost: its blocks (grid x × y × z; a zero dimension counts as 1), at most 2^32.
uint64_t KernelLaunchCost(unsigned grid_x, unsigned grid_y, unsigned grid_z);

// Charges a launch of `cost` units to the holder and returns how long the caller must wait
// before launching (0: at once). Counts the units, and the waits, in the header. No rate set:
// 0, only the units counted, and the clock (`now_ns`: CLOCK_MONOTONIC nanoseconds) is not read.
uint64_t PaceLaunch(SliceHeader* header, uint64_t cost, uint64_t (*now_ns)());

// gpulet's side: sets the rate (0: not paced).
void SetLaunchRate(SliceHeader* header, uint64_t units_per_second);

}  // namespace gpulet::vram

#endif  // GPULET_VRAM_LAUNCH_PACING_H_
