// The enforcement library's per-process state: the slice file this process counts against
// (src/vram/slice_format.h), its slot there, and the size of each allocation it counted,
// by handle, so that a free gives back exactly what its allocation took.
//
// Set up on first use, from GPULET_VRAM_SLICE; again in a child after fork (without exec)
// or clone, found by the PID changing: the child takes its own slot and starts with no
// allocations (a CUDA context does not survive fork). When the slice file is missing or
// corrupt the process fails closed: every counted allocation is refused, the memory
// queries report nothing free, and one line on stderr names the file and what to do.
//
// Thread-safety: every function may be called from any thread; an in-process spin lock
// orders the table and the slot claim, the slice file's own lock orders processes.
#ifndef GPULET_VRAMLIB_QUOTA_H_
#define GPULET_VRAMLIB_QUOTA_H_

#include <stdint.h>

namespace gpulet::vramlib {

// What a counted handle is, so that equal values of different kinds never meet.
enum class Kind : uint32_t {
  kDevicePtr = 1,      // cuMemAlloc*, cuMemAllocManaged, cuMemAlloc*Async
  kMemHandle = 2,      // cuMemCreate (VMM)
  kArray = 3,          // cuArrayCreate, cuArray3DCreate
  kMipmapped = 4,      // cuMipmappedArrayCreate
  kExternalMemory = 5  // cuImportExternalMemory
};

struct Ticket {
  bool granted = false;
  bool counted = false;  // false when the process fails closed (nothing to settle)
  uint64_t reserved = 0;
};

// Asks for `bytes` before an allocation call named `call` (for the refusal's message).
Ticket Admit(uint64_t bytes, const char* call);
// The allocation call returned: `used` bytes are held under (kind, key), or none (used 0:
// the driver refused).
void Admitted(const Ticket& ticket, uint64_t used, Kind kind, uint64_t key);

// Takes the entry for (kind, key) out before its free call; returns its size (0: not
// counted here, e.g. memory a graph allocated). Give it back with Returned or Restore.
uint64_t Take(Kind kind, uint64_t key);
// The free call succeeded: the slice gets `bytes` back.
void Returned(uint64_t bytes);
// The free call failed: the entry stands again.
void Restore(Kind kind, uint64_t key, uint64_t bytes);

// What the memory queries report: the quota, and the slice's use (all its processes).
struct View {
  bool enforced = false;     // a slice file is in use
  bool fail_closed = false;  // the library is loaded but the slice file is not usable
  uint64_t quota = 0;
  uint64_t in_use = 0;
};
View CurrentView();

// Clamps a driver's figures to the quota: total = min(quota, real total), free = min(total
// − the slice's use, real free). Leaves them when nothing is enforced; zero when failing
// closed.
void ClampMemory(const View& view, uint64_t* free_bytes, uint64_t* total_bytes);

// Whether the slice has a compute share (launch_pacing.h): the launch entry points are
// wrapped only then, so that a slice without one pays nothing per launch.
bool ComputeShareOn();
// Charges a launch of `cost` units to the slice and waits for its turn (a bounded sleep).
void PaceLaunch(uint64_t cost);

// Writes "gpulet-vram: <text>\n" to stderr when GPULET_VRAM_LOG is at least `level`
// (0: failures only, the default 1: also the first refusal, 2: every refusal and every
// entry point forwarded without counting).
void Log(int level, const char* format, ...) __attribute__((format(printf, 2, 3)));

}  // namespace gpulet::vramlib

#endif  // GPULET_VRAMLIB_QUOTA_H_
