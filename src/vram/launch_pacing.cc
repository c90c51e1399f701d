#include "vram/launch_pacing.h"

namespace gpulet::vram {

uint64_t KernelLaunchCost(unsigned grid_x, unsigned grid_y, unsigned grid_z) {
  auto dim = [](unsigned d) { return d == 0 ? uint64_t{1} : uint64_t{d}; };
  uint64_t blocks = 0;
  if (__builtin_mul_overflow(dim(grid_x), dim(grid_y), &blocks) ||
      __builtin_mul_overflow(blocks, dim(grid_z), &blocks) || blocks > UINT32_MAX) {
    return UINT32_MAX;
  }
  return blocks;
}

uint64_t PaceLaunch(SliceHeader* h, uint64_t cost, uint64_t (*clock)()) {
  __atomic_fetch_add(&h->launch_units, cost, __ATOMIC_RELAXED);
  const uint64_t rate = __atomic_load_n(&h->launch_rate, __ATOMIC_RELAXED);
  if (rate == 0) return 0;
  const uint64_t now_ns = clock();
  // The launch's share of the holder's time at its rate, capped so that one launch never
  // waits more than kLaunchMaxWaitNs behind the launches before it.
  // (No 128-bit division: the library links no libgcc. A cost is at most 2^32, so the
  // product fits in 64 bits.)
  const uint64_t units = cost > UINT32_MAX ? UINT32_MAX : cost;
  const uint64_t exact = units * 1'000'000'000u / rate;
  const uint64_t interval = exact > kLaunchMaxWaitNs ? kLaunchMaxWaitNs : exact;
  const uint64_t earliest = now_ns > kLaunchBurstNs ? now_ns - kLaunchBurstNs : 0;
  uint64_t paid = __atomic_load_n(&h->launch_paid_until_ns, __ATOMIC_RELAXED);
  uint64_t start;
  do {
    // Idle time is credit up to the burst; the launch starts when those before it are paid.
    start = paid > earliest ? paid : earliest;
    // Queued behind more than the cap (many threads, or a rate just lowered): the wait is
    // capped, and the clock does not run further ahead than that.
    if (start > now_ns + kLaunchMaxWaitNs) start = now_ns + kLaunchMaxWaitNs;
  } while (!__atomic_compare_exchange_n(&h->launch_paid_until_ns, &paid, start + interval, true,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  if (start <= now_ns) return 0;
  const uint64_t wait = start - now_ns;
  __atomic_fetch_add(&h->launch_waits, 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&h->launch_wait_ns, wait, __ATOMIC_RELAXED);
  return wait;
}

void SetLaunchRate(SliceHeader* h, uint64_t units_per_second) {
  __atomic_store_n(&h->launch_rate, units_per_second, __ATOMIC_RELAXED);
}

}  // namespace gpulet::vram
