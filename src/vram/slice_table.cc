#include "vram/slice_table.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

namespace gpulet::vram {
namespace {

template <typename T>
T Load(const T* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
template <typename T>
void Store(T* p, T v) {
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
uint64_t Add(uint64_t* p, uint64_t v) { return __atomic_add_fetch(p, v, __ATOMIC_ACQ_REL); }
// Saturating: a counter never wraps below zero, whatever a caller's bug.
void Sub(uint64_t* p, uint64_t v) {
  uint64_t cur = Load(p);
  while (!__atomic_compare_exchange_n(p, &cur, cur > v ? cur - v : 0, true, __ATOMIC_ACQ_REL,
                                      __ATOMIC_ACQUIRE)) {
  }
}
void Max(uint64_t* p, uint64_t v) {
  uint64_t cur = Load(p);
  while (cur < v &&
         !__atomic_compare_exchange_n(p, &cur, v, true, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
  }
}

off_t SlotOffset(uint32_t slot) {
  return static_cast<off_t>(kSliceHeaderSize) + static_cast<off_t>(slot) * kSliceSlotSize;
}

// The lock word: 1 + the holder's slot. A holder that died inside the (short) critical
// section is found by its slot's POSIX lock being gone, and the lock is taken over.
void LockSlice(SliceMap* map, uint32_t self) {
  uint32_t* word = &map->header->lock;
  const uint32_t me = self + 1;
  for (uint32_t spins = 1;; ++spins) {
    uint32_t expected = 0;
    if (__atomic_compare_exchange_n(word, &expected, me, false, __ATOMIC_ACQUIRE,
                                    __ATOMIC_RELAXED)) {
      return;
    }
    // A holder that is gone, or a word no holder could have written (a corrupt file): taken
    // over, so that no content of the file can make an application wait forever.
    if (spins % 64 == 0 && expected != 0) {
      const bool corrupt = expected - 1 >= map->header->slot_count;
      if ((corrupt || !SlotHeld(*map, expected - 1, nullptr)) &&
          __atomic_compare_exchange_n(word, &expected, me, false, __ATOMIC_ACQUIRE,
                                      __ATOMIC_RELAXED)) {
        return;
      }
    }
    sched_yield();
  }
}
void UnlockSlice(SliceMap* map) { __atomic_store_n(&map->header->lock, 0u, __ATOMIC_RELEASE); }

uint64_t SlotUse(const SliceSlot& s) { return Load(&s.used_bytes) + Load(&s.reserved_bytes); }

void ZeroSlot(SliceSlot* s) {
  Store(&s->used_bytes, uint64_t{0});
  Store(&s->reserved_bytes, uint64_t{0});
  Store(&s->peak_bytes, uint64_t{0});
  Store(&s->refused, uint64_t{0});
  Store(&s->allocations, uint64_t{0});
  Store(&s->pid, int32_t{0});
  Store(&s->state, kSlotFree);
}

}  // namespace

SliceError CheckSliceHeader(const SliceHeader& h, size_t file_size, const char* path, char* msg,
                            size_t msg_size) {
  if (file_size < kSliceHeaderSize) {
    snprintf(msg, msg_size,
             "slice file %s is %zu bytes, shorter than a slice file's header (%u): it is "
             "truncated or not a slice file; gpulet recreates it when the container is "
             "allocated again (delete the pod)",
             path, file_size, kSliceHeaderSize);
    return SliceError::kTooSmall;
  }
  if (memcmp(h.magic, kSliceMagic, sizeof(kSliceMagic)) != 0) {
    snprintf(msg, msg_size,
             "%s is not a gpulet slice file (no GPULVRAM magic): something other than "
             "gpulet wrote it; delete the pod so that gpulet allocates it again",
             path);
    return SliceError::kBadMagic;
  }
  if (h.major > kSliceFormatMajor) {
    snprintf(msg, msg_size,
             "slice file %s has format %u.%u, newer than this library's %u.%u: the "
             "container holds an older gpulet-vram library than the daemon that allocated "
             "it; restart the pod so that it gets the node's current library",
             path, h.major, h.minor, kSliceFormatMajor, kSliceFormatMinor);
    return SliceError::kNewerFormat;
  }
  if (h.major == 0 || h.header_size != kSliceHeaderSize || h.slot_size != kSliceSlotSize ||
      h.slot_count == 0 || h.slot_count > kSliceSlotCount ||
      file_size < size_t{h.header_size} + size_t{h.slot_size} * h.slot_count) {
    snprintf(msg, msg_size,
             "slice file %s is corrupt (format %u, header %u bytes, %u slots of %u bytes, "
             "file %zu bytes); delete the pod so that gpulet allocates it again",
             path, h.major, h.header_size, h.slot_count, h.slot_size, file_size);
    return SliceError::kBadLayout;
  }
  if (h.quota_bytes == 0) {
    snprintf(msg, msg_size,
             "slice file %s holds no quota (0 bytes): it is corrupt; delete the pod so that "
             "gpulet allocates it again",
             path);
    return SliceError::kBadLayout;
  }
  return SliceError::kOk;
}

SliceError OpenSlice(const char* path, bool writable, SliceMap* out, char* msg, size_t msg_size) {
  *out = SliceMap{};
  if (path == nullptr || path[0] == '\0') {
    snprintf(msg, msg_size,
             "%s is not set: the container was given the gpulet-vram library without its "
             "slice file; gpulet's device plugin or DRA driver sets both (check the pod's "
             "CDI devices and environment)",
             kSliceEnv);
    return SliceError::kNotSet;
  }
  int fd = open(path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    int err = errno;
    snprintf(msg, msg_size,
             "cannot open slice file %s: %s; gpulet creates it in the allocation's directory "
             "(check that the directory is mounted at %s and writable)",
             path, strerror(err), kSliceContainerDir);
    return SliceError::kOpen;
  }
  off_t end = lseek(fd, 0, SEEK_END);
  size_t size = end < 0 ? 0 : static_cast<size_t>(end);
  SliceHeader header{};
  // A file shorter than the header page fails the size check before its fields are read.
  if (size >= kSliceHeaderSize &&
      pread(fd, &header, sizeof(header), 0) != static_cast<ssize_t>(sizeof(header))) {
    size = 0;
  }
  SliceError e = CheckSliceHeader(header, size, path, msg, msg_size);
  if (e != SliceError::kOk) {
    close(fd);
    return e;
  }
  const size_t map_size = size_t{header.header_size} + size_t{header.slot_size} * header.slot_count;
  void* p =
      mmap(nullptr, map_size, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    snprintf(msg, msg_size, "cannot map slice file %s: %s", path, strerror(err));
    close(fd);
    return SliceError::kMap;
  }
  out->header = static_cast<SliceHeader*>(p);
  out->slots = reinterpret_cast<SliceSlot*>(static_cast<char*>(p) + header.header_size);
  out->fd = fd;
  return SliceError::kOk;
}

void CloseSlice(SliceMap* map) {
  if (map->header != nullptr) {
    munmap(map->header, size_t{map->header->header_size} +
                            size_t{map->header->slot_size} * map->header->slot_count);
  }
  if (map->fd >= 0) close(map->fd);
  *map = SliceMap{};
}

void FormatSliceHeader(SliceHeader* h, uint64_t quota_bytes, const char* gpu_uuid,
                       const char* owner, uint32_t compute_share_permille) {
  memset(h, 0, sizeof(*h));
  memcpy(h->magic, kSliceMagic, sizeof(kSliceMagic));
  h->major = kSliceFormatMajor;
  h->minor = kSliceFormatMinor;
  h->header_size = kSliceHeaderSize;
  h->slot_size = kSliceSlotSize;
  h->slot_count = kSliceSlotCount;
  h->quota_bytes = quota_bytes;
  h->compute_share_permille = compute_share_permille > 1000 ? 1000 : compute_share_permille;
  snprintf(h->gpu_uuid, sizeof(h->gpu_uuid), "%s", gpu_uuid != nullptr ? gpu_uuid : "");
  snprintf(h->owner, sizeof(h->owner), "%s", owner != nullptr ? owner : "");
}

bool SlotHeld(const SliceMap& map, uint32_t slot, int32_t* holder_pid) {
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = SlotOffset(slot);
  fl.l_len = 1;
  if (fcntl(map.fd, F_GETLK, &fl) != 0) return true;  // cannot tell: never reclaim
  if (holder_pid != nullptr) *holder_pid = fl.l_type == F_UNLCK ? 0 : fl.l_pid;
  return fl.l_type != F_UNLCK;
}

SliceError ClaimSlot(SliceMap* map, int32_t pid, uint32_t* slot) {
  const uint32_t count = map->header->slot_count;
  for (uint32_t i = 0; i < count; ++i) {
    struct flock fl {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = SlotOffset(i);
    fl.l_len = 1;
    if (fcntl(map->fd, F_SETLK, &fl) != 0) continue;  // a live process holds it
    LockSlice(map, i);
    SliceSlot* s = &map->slots[i];
    ZeroSlot(s);  // a dead owner's figures, if any
    Store(&s->pid, pid);
    Store(&s->state, kSlotActive);
    Add(&s->claims, 1);
    uint32_t in_use = Load(&map->header->slots_in_use);
    while (in_use < i + 1 &&
           !__atomic_compare_exchange_n(&map->header->slots_in_use, &in_use, i + 1, true,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    }
    UnlockSlice(map);
    *slot = i;
    return SliceError::kOk;
  }
  return SliceError::kNoSlot;
}

uint64_t InUse(const SliceMap& map) {
  uint32_t n = Load(&map.header->slots_in_use);
  if (n > map.header->slot_count) n = map.header->slot_count;
  uint64_t total = 0;
  for (uint32_t i = 0; i < n; ++i) total += SlotUse(map.slots[i]);
  return total;
}

uint32_t ReclaimDead(SliceMap* map, uint32_t self) {
  uint32_t n = Load(&map->header->slots_in_use);
  if (n > map->header->slot_count) n = map->header->slot_count;
  uint32_t reclaimed = 0;
  for (uint32_t i = 0; i < n; ++i) {
    SliceSlot* s = &map->slots[i];
    if (i == self || (Load(&s->state) == kSlotFree && SlotUse(*s) == 0)) continue;
    if (SlotHeld(*map, i, nullptr)) continue;
    ZeroSlot(s);
    ++reclaimed;
  }
  return reclaimed;
}

Grant Reserve(SliceMap* map, uint32_t slot, uint64_t bytes) {
  Grant g;
  g.quota = map->header->quota_bytes;
  LockSlice(map, slot);
  g.in_use = InUse(*map);
  auto fits = [&g, bytes] { return bytes <= g.quota && g.in_use <= g.quota - bytes; };
  if (!fits() && ReclaimDead(map, slot) > 0) g.in_use = InUse(*map);
  g.granted = fits();
  SliceSlot* s = &map->slots[slot];
  if (g.granted) {
    Add(&s->reserved_bytes, bytes);
    Max(&map->header->peak_bytes, g.in_use + bytes);
  } else {
    Add(&s->refused, 1);
    Add(&map->header->refused_total, 1);
    Store(&map->header->refused_bytes, bytes);
  }
  UnlockSlice(map);
  return g;
}

void Settle(SliceMap* map, uint32_t slot, uint64_t reserved, uint64_t used) {
  SliceSlot* s = &map->slots[slot];
  // `used` first: a sum taken in between counts the bytes twice (a refusal too many at
  // worst), never not at all (which could let the quota be exceeded).
  if (used > 0) {
    uint64_t now = Add(&s->used_bytes, used);
    Max(&s->peak_bytes, now);
    Add(&s->allocations, 1);
  }
  Sub(&s->reserved_bytes, reserved);
  if (used > reserved) Max(&map->header->peak_bytes, InUse(*map));
}

void Release(SliceMap* map, uint32_t slot, uint64_t bytes) {
  Sub(&map->slots[slot].used_bytes, bytes);
}

}  // namespace gpulet::vram
