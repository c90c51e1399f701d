// Operations on a mapped slice file (slice_format.h): claim a process's slot, grant or
// refuse an allocation against the quota, settle and give back, find dead processes.
//
// Written against libc alone (no libstdc++, no allocation), because the enforcement library
// that runs inside users' containers links it (src/vramlib/); gpulet's daemon reads the
// same files through slice_file.h.
//
// Accounting: the slice's use is the sum over slots of used + reserved. A grant happens
// under the file's lock word, so two processes cannot both take the last bytes; the real
// allocation then runs without the lock, and Settle moves the grant to `used` (or drops it
// when the driver refused). A process that dies at any point leaves only its own slot,
// which the next refusal (or the next claim of that slot) finds unlocked and zeroes.
//
// Thread-safety: the cross-process lock excludes processes, not threads: callers must hold
// their own in-process lock around Reserve, ClaimSlot and ReclaimDead (the library does).
// Settle, Release and the readers are atomic and need no lock.
#ifndef GPULET_VRAM_SLICE_TABLE_H_
#define GPULET_VRAM_SLICE_TABLE_H_

#include <stddef.h>
#include <stdint.h>

#include "vram/slice_format.h"

namespace gpulet::vram {

inline constexpr uint32_t kNoSlot = UINT32_MAX;

struct SliceMap {
  SliceHeader* header = nullptr;
  SliceSlot* slots = nullptr;
  int fd = -1;
};

// Why a slice file cannot be used; the message names the file and what to do.
enum class SliceError : int {
  kOk = 0,
  kNotSet,       // the variable naming the file is unset or empty
  kOpen,         // open(2) failed (missing, permission)
  kTooSmall,     // shorter than the layout needs (truncated, not a slice file)
  kBadMagic,     // not a slice file
  kNewerFormat,  // a newer major version than this reader knows
  kBadLayout,    // header sizes disagree with the known layout, or no quota
  kMap,          // mmap(2) failed
  kNoSlot,       // every slot is held by a live process
};

// Opens and validates `path`, read-write (the library) or read-only (the daemon), and maps
// it shared. On failure writes a one-line message (NUL-terminated, truncated to msg_size)
// naming the file, what is wrong and what to do, and leaves `out` closed.
SliceError OpenSlice(const char* path, bool writable, SliceMap* out, char* msg, size_t msg_size);
void CloseSlice(SliceMap* map);

// Validates a header already in memory (the first kSliceHeaderSize bytes of a file of
// `file_size` bytes); the message as OpenSlice's.
SliceError CheckSliceHeader(const SliceHeader& header, size_t file_size, const char* path,
                            char* msg, size_t msg_size);

// Fills a new file's header; a compute share of 0 leaves launches unpaced.
void FormatSliceHeader(SliceHeader* header, uint64_t quota_bytes, const char* gpu_uuid,
                       const char* owner, uint32_t compute_share_permille = 0);

// Takes a slot no live process holds (POSIX write lock on its first byte), giving back a
// dead owner's figures, and records `pid` in it.
SliceError ClaimSlot(SliceMap* map, int32_t pid, uint32_t* slot);

struct Grant {
  bool granted = false;
  uint64_t in_use = 0;  // the slice's use before this request
  uint64_t quota = 0;
};

// Grants `bytes` to `slot` if the slice's use stays within its quota (dead processes'
// memory is reclaimed first when it would not); counts a refusal otherwise.
Grant Reserve(SliceMap* map, uint32_t slot, uint64_t bytes);

// The allocation granted `reserved` finished: `used` bytes are now held (0 when the driver
// refused; more than `reserved` when the driver chose a larger size, e.g. a pitch).
void Settle(SliceMap* map, uint32_t slot, uint64_t reserved, uint64_t used);

// `bytes` the slot held are freed.
void Release(SliceMap* map, uint32_t slot, uint64_t bytes);

// The slice's use now: used + reserved over the slots in use, live or not yet reclaimed.
uint64_t InUse(const SliceMap& map);

// Zeroes the slots (other than `self`) whose process is gone; returns how many.
uint32_t ReclaimDead(SliceMap* map, uint32_t self);

// Whether a live process holds `slot`; its PID as this process's namespace sees it (0 when
// the holder is in a namespace this one cannot see) goes to *holder_pid. A process's own
// lock does not count (POSIX: a process never conflicts with itself).
bool SlotHeld(const SliceMap& map, uint32_t slot, int32_t* holder_pid);

}  // namespace gpulet::vram

#endif  // GPULET_VRAM_SLICE_TABLE_H_
