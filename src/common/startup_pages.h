// ReleaseStartupCode: gives back the resident pages of gpulet's own code that only start-up
// used.
//
// Why: a page of the executable that start-up touched (command-line and configuration
// parsing, discovery, gRPC's and GnuTLS's initialisation, static initialisers) stays
// mapped, and counts as resident, for the life of the process; the kernel also maps the
// neighbours of every page faulted in (fault-around), so a few functions run once keep whole
// runs of the binary resident. About a third of the executable's resident pages after
// start-up are never touched again by a serving daemon. MADV_PAGEOUT drops the executable's
// read-only mappings (code, read-only data, unwind tables) from the process and reclaims
// the pages nothing else maps; what the daemon goes on to run is faulted back in from the
// file as it is needed. Behaviour is unchanged: only the first later use of a cold path
// (a reload, a kubelet restart) pays a page fault. Pages that another process maps too (a
// second gpulet of the same binary, e.g. a `gpulet status` running at that moment) are
// left alone by the kernel and stay resident.
//
// Thread-safety: safe from any thread; other threads keep running through it.
#ifndef GPULET_COMMON_STARTUP_PAGES_H_
#define GPULET_COMMON_STARTUP_PAGES_H_

#include <cstddef>

#include "absl/status/statusor.h"

namespace gpulet {

// MADV_PAGEOUT over every read-only mapping of /proc/self/exe. Returns the bytes advised.
// Unimplemented on kernels before 5.4 (no MADV_PAGEOUT); Internal if /proc/self cannot be
// read.
absl::StatusOr<size_t> ReleaseStartupCode();

}  // namespace gpulet

#endif  // GPULET_COMMON_STARTUP_PAGES_H_
