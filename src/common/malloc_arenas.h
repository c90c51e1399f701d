// UseOneMallocArena: makes every thread of the process allocate from glibc's main arena.
//
// Why: glibc gives threads that allocate at the same moment arenas of their own (up to 8
// per core), and memory freed in one arena is reused only by the threads that land on it.
// In `gpulet serve` a dozen threads each allocate a little (the sampler's round, a scrape's
// response, gRPC's timers), so pages freed in one arena sit idle while another grows:
// measured on dgx8, private memory grew about 430 KiB over six minutes with the default
// arenas and stayed flat with one (`GLIBC_TUNABLES=glibc.malloc.arena_max=1`). gpulet
// allocates rarely enough that one arena's lock is never contended in a way that shows.
//
// An operator's own GLIBC_TUNABLES setting of glibc.malloc.arena_max wins: then nothing is
// changed.
//
// Thread-safety: call once, early (before most threads start); safe from any thread.
#ifndef GPULET_COMMON_MALLOC_ARENAS_H_
#define GPULET_COMMON_MALLOC_ARENAS_H_

namespace gpulet {

// True when the limit was set; false when GLIBC_TUNABLES already sets one or mallopt fails.
bool UseOneMallocArena();

}  // namespace gpulet

#endif  // GPULET_COMMON_MALLOC_ARENAS_H_
