// The slice file: one per slice holder (a container's memory slices of one GPU), created by
// gpulet in the allocation's own directory and mapped, shared, by every process of that
// container that loads the enforcement library (src/vramlib/). It holds the quota and one
// slot per live process; the quota holds across all of them.
//
// Layout (little-endian, fixed offsets, so that a library and a daemon of different builds
// read one another's files): a 4 KiB header page, then `slot_count` slots of `slot_size`
// bytes. A process owns its slot while it holds a POSIX write lock (fcntl F_SETLK) on the
// slot's first byte: the kernel drops the lock when the process dies however it dies
// (crash, SIGKILL), so a slot with usage and no lock belongs to a dead process and its
// memory is given back. The lock is per file, not per PID, so it holds across the PID
// namespaces of a pod's containers; a daemon in the host's namespace reads the holder's
// host PID from F_GETLK.
//
// Versions: `major` changes when an older reader would misread the file (a library refuses
// a newer major and fails closed); `minor` when fields are appended within the reserved
// space (readers ignore what they do not know).
//
// Thread-safety: the header's `lock` word and the slots' counters are accessed only
// atomically (slice_table.h); the other header fields are written once, before the file
// is renamed into place, and never change.
#ifndef GPULET_VRAM_SLICE_FORMAT_H_
#define GPULET_VRAM_SLICE_FORMAT_H_

#include <stddef.h>
#include <stdint.h>

namespace gpulet::vram {

inline constexpr char kSliceMagic[8] = {'G', 'P', 'U', 'L', 'V', 'R', 'A', 'M'};
inline constexpr uint32_t kSliceFormatMajor = 1;
inline constexpr uint32_t kSliceFormatMinor = 1;  // 1: the compute share (launch pacing)
inline constexpr uint32_t kSliceHeaderSize = 4096;
inline constexpr uint32_t kSliceSlotSize = 64;
// Processes that can hold memory on one slice at once (a container's workers, a pod's
// containers). The 1025th is refused every allocation, with a message saying so.
inline constexpr uint32_t kSliceSlotCount = 1024;
inline constexpr size_t kSliceFileSize =
    size_t{kSliceHeaderSize} + size_t{kSliceSlotSize} * kSliceSlotCount;

// Name of the slice file in the allocation's directory, and where that directory appears
// inside the container.
inline constexpr char kSliceFileName[] = "slice";
inline constexpr char kSliceContainerDir[] = "/run/gpulet/vram";
// The variable that tells the library where the slice file is.
inline constexpr char kSliceEnv[] = "GPULET_VRAM_SLICE";

struct SliceHeader {
  char magic[8];
  uint32_t major;
  uint32_t minor;
  uint32_t header_size;  // kSliceHeaderSize
  uint32_t slot_size;    // kSliceSlotSize
  uint32_t slot_count;   // kSliceSlotCount
  uint32_t lock;         // 0 free, else 1 + the slot index of the holder (atomic)
  uint64_t quota_bytes;  // the slice holder's limit
  // One past the highest slot ever claimed, so that a sum reads only slots in use (atomic).
  uint32_t slots_in_use;
  uint32_t reserved0;
  uint64_t peak_bytes;     // highest total granted (atomic)
  uint64_t refused_total;  // allocations refused at the quota, all processes (atomic)
  uint64_t refused_bytes;  // the size of the last refused allocation (atomic)
  char gpu_uuid[96];       // the GPU the slices are on, NUL-terminated
  char owner[256];         // who holds the slices ("<pod uid>/<container>" or the claim)
  // Minor 1: the compute share (docs/sharing.md, "Compute share"). Zero in a minor-0 file,
  // which reads as no share: launches are not paced.
  //
  // The holder's share of the GPU's SM time in thousandths, written once at creation; 0: no
  // share, and the library leaves kernel launches unwrapped.
  uint32_t compute_share_permille;
  uint32_t reserved2;
  // Launch cost units (a kernel's blocks; launch_pacing.h) per second the holder may launch,
  // set by gpulet each sampling round from the holder's measured SM time; 0: not paced (yet).
  uint64_t launch_rate;  // atomic
  // The pacing clock: CLOCK_MONOTONIC nanoseconds at which the holder's launches so far are
  // paid for (a virtual finish time shared by all its processes; atomic).
  uint64_t launch_paid_until_ns;
  uint64_t launch_units;    // cost units launched, all processes (atomic)
  uint64_t launch_waits;    // launches that waited for their turn (atomic)
  uint64_t launch_wait_ns;  // the time they waited, summed (atomic)
};
static_assert(sizeof(SliceHeader) <= kSliceHeaderSize);
static_assert(offsetof(SliceHeader, quota_bytes) == 32);
static_assert(offsetof(SliceHeader, compute_share_permille) == 424);
static_assert(offsetof(SliceHeader, launch_rate) == 432);
static_assert(offsetof(SliceHeader, launch_wait_ns) == 464);

// Slot states.
inline constexpr uint32_t kSlotFree = 0;
inline constexpr uint32_t kSlotActive = 1;

struct SliceSlot {
  uint64_t used_bytes;      // memory the process holds (atomic)
  uint64_t reserved_bytes;  // granted, allocation call in flight (atomic)
  uint64_t peak_bytes;      // the process's own highest use (atomic)
  uint64_t refused;         // allocations refused to this process (atomic)
  uint64_t allocations;     // allocations counted (atomic)
  int32_t pid;              // the process's PID in its own namespace (diagnostics)
  uint32_t state;           // kSlotFree / kSlotActive (atomic)
  uint64_t claims;          // times the slot was claimed (atomic)
  uint64_t reserved1;
};
static_assert(sizeof(SliceSlot) == kSliceSlotSize);

}  // namespace gpulet::vram

#endif  // GPULET_VRAM_SLICE_FORMAT_H_
