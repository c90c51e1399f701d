#include "vramlib/quota.h"

#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "vram/launch_pacing.h"
#include "vram/slice_table.h"

namespace gpulet::vramlib {
namespace {

using vram::SliceError;
using vram::SliceMap;

class SpinLock {
 public:
  void Lock() {
    while (__atomic_exchange_n(&word_, 1u, __ATOMIC_ACQUIRE) != 0) sched_yield();
  }
  void Unlock() { __atomic_store_n(&word_, 0u, __ATOMIC_RELEASE); }

 private:
  uint32_t word_ = 0;
};

class Locked {
 public:
  explicit Locked(SpinLock* lock) : lock_(lock) { lock_->Lock(); }
  ~Locked() { lock_->Unlock(); }
  Locked(const Locked&) = delete;
  Locked& operator=(const Locked&) = delete;

 private:
  SpinLock* lock_;
};

// Allocation sizes by (kind, handle): open addressing in anonymous pages (no malloc: the
// library runs in the audit namespace beside the application's allocator), doubling when
// three quarters full.
struct Entry {
  uint64_t key;
  uint64_t bytes;
  uint32_t kind;
  uint32_t state;  // 0 empty, 1 full, 2 deleted
};

class SizeTable {
 public:
  void Clear() {
    if (entries_ != nullptr) memset(entries_, 0, capacity_ * sizeof(Entry));
    used_ = 0;
    full_ = 0;
  }

  bool Put(Kind kind, uint64_t key, uint64_t bytes) {
    if ((used_ + 1) * 4 >= capacity_ * 3 && !Grow()) return false;
    size_t i = Slot(kind, key);
    size_t tomb = SIZE_MAX;
    for (;; i = (i + 1) & (capacity_ - 1)) {
      Entry& e = entries_[i];
      if (e.state == 0) break;
      if (e.state == 2 && tomb == SIZE_MAX) tomb = i;
      if (e.state == 1 && e.key == key && e.kind == static_cast<uint32_t>(kind)) {
        e.bytes += bytes;  // the driver reused a handle we missed the free of
        return true;
      }
    }
    if (tomb != SIZE_MAX) {
      i = tomb;
    } else {
      ++used_;
    }
    entries_[i] = Entry{key, bytes, static_cast<uint32_t>(kind), 1};
    ++full_;
    return true;
  }

  uint64_t Take(Kind kind, uint64_t key) {
    if (entries_ == nullptr) return 0;
    for (size_t i = Slot(kind, key);; i = (i + 1) & (capacity_ - 1)) {
      Entry& e = entries_[i];
      if (e.state == 0) return 0;
      if (e.state == 1 && e.key == key && e.kind == static_cast<uint32_t>(kind)) {
        e.state = 2;
        --full_;
        return e.bytes;
      }
    }
  }

 private:
  size_t Slot(Kind kind, uint64_t key) const {
    uint64_t h = (key ^ (static_cast<uint64_t>(kind) << 56)) * 0x9E3779B97F4A7C15ull;
    return static_cast<size_t>(h >> 20) & (capacity_ - 1);
  }

  bool Grow() {
    size_t capacity = capacity_ == 0 ? 1024 : capacity_ * 2;
    void* p = mmap(nullptr, capacity * sizeof(Entry), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return false;
    Entry* old = entries_;
    size_t old_capacity = capacity_;
    entries_ = static_cast<Entry*>(p);
    capacity_ = capacity;
    used_ = 0;
    full_ = 0;
    for (size_t i = 0; i < old_capacity; ++i) {
      if (old[i].state == 1) Put(static_cast<Kind>(old[i].kind), old[i].key, old[i].bytes);
    }
    if (old != nullptr) munmap(old, old_capacity * sizeof(Entry));
    return true;
  }

  Entry* entries_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;  // full + deleted
  size_t full_ = 0;
};

struct Process {
  SpinLock lock;
  pid_t pid = 0;           // whose state this is; another PID means a child after fork
  pid_t unlocked_for = 0;  // the child whose inherited lock was cleared
  bool fail_closed = false;
  bool refusal_logged = false;
  SliceMap map;
  uint32_t slot = vram::kNoSlot;
  SizeTable sizes;
  char error[768] = {};
};

Process g_process;

int LogLevel() {
  static int level = -1;
  int l = __atomic_load_n(&level, __ATOMIC_RELAXED);
  if (l < 0) {
    const char* v = getenv("GPULET_VRAM_LOG");
    l = (v != nullptr && v[0] >= '0' && v[0] <= '9') ? v[0] - '0' : 1;
    __atomic_store_n(&level, l, __ATOMIC_RELAXED);
  }
  return l;
}

void FailClosed(Process* p) {
  p->fail_closed = true;
  Log(0, "%s; every device memory allocation of this process is refused (fail closed)", p->error);
}

// Called with p->lock held: makes `p` this process's state.
void SetUpLocked(Process* p, pid_t pid) {
  const bool child = p->pid != 0;
  p->pid = pid;
  p->sizes.Clear();
  p->slot = vram::kNoSlot;
  if (p->fail_closed) return;  // a child of a failed parent fails the same way
  if (!child || p->map.header == nullptr) {
    if (OpenSlice(getenv(vram::kSliceEnv), true, &p->map, p->error, sizeof(p->error)) !=
        SliceError::kOk) {
      FailClosed(p);
      return;
    }
  }
  if (ClaimSlot(&p->map, static_cast<int32_t>(pid), &p->slot) != SliceError::kOk) {
    snprintf(p->error, sizeof(p->error),
             "all %u process slots of slice file %s are held by live processes",
             p->map.header->slot_count, getenv(vram::kSliceEnv));
    FailClosed(p);
  }
}

// This process's state, set up on first use or after a fork.
Process* Self() {
  Process* p = &g_process;
  const pid_t pid = getpid();
  const pid_t owner = __atomic_load_n(&p->pid, __ATOMIC_ACQUIRE);
  if (owner != pid) {
    // A child of fork has one thread: a lock some other thread of the parent held at the
    // fork has no holder here, and is cleared once.
    if (owner != 0 && __atomic_exchange_n(&p->unlocked_for, pid, __ATOMIC_ACQ_REL) != pid) {
      p->lock.Unlock();
    }
    Locked l(&p->lock);
    if (p->pid != pid) SetUpLocked(p, pid);
  }
  return p;
}

uint64_t MonotonicNs() {
  struct timespec now {};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(now.tv_nsec);
}

double GiB(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024 * 1024); }

}  // namespace

void Log(int level, const char* format, ...) {
  if (LogLevel() < level) return;
  char line[1024];
  int n = snprintf(line, sizeof(line), "gpulet-vram[%d]: ", static_cast<int>(getpid()));
  va_list args;
  va_start(args, format);
  int m = vsnprintf(line + n, sizeof(line) - static_cast<size_t>(n) - 1, format, args);
  va_end(args);
  size_t len = static_cast<size_t>(n) + (m < 0 ? 0 : static_cast<size_t>(m));
  if (len > sizeof(line) - 2) len = sizeof(line) - 2;
  line[len++] = '\n';
  ssize_t ignored = write(2, line, len);
  (void)ignored;
}

Ticket Admit(uint64_t bytes, const char* call) {
  Process* p = Self();
  Ticket t;
  Locked l(&p->lock);
  if (p->fail_closed) return t;
  vram::Grant g = Reserve(&p->map, p->slot, bytes);
  if (!g.granted) {
    const int level = p->refusal_logged ? 2 : 1;
    p->refusal_logged = true;
    Log(level,
        "%s of %.2f GiB refused with CUDA_ERROR_OUT_OF_MEMORY: the slice uses %.2f GiB of "
        "its %.2f GiB quota (slice file %s, GPU %s)",
        call, GiB(bytes), GiB(g.in_use), GiB(g.quota), getenv(vram::kSliceEnv),
        p->map.header->gpu_uuid);
    return t;
  }
  t.granted = true;
  t.counted = true;
  t.reserved = bytes;
  return t;
}

void Admitted(const Ticket& ticket, uint64_t used, Kind kind, uint64_t key) {
  if (!ticket.counted) return;
  Process* p = Self();
  Locked l(&p->lock);
  if (p->slot == vram::kNoSlot) return;
  if (used > 0 && !p->sizes.Put(kind, key, used)) {
    // No memory for the table: count nothing we could not give back later.
    used = 0;
    Log(0, "no memory to record an allocation; it is not counted");
  }
  Settle(&p->map, p->slot, ticket.reserved, used);
}

uint64_t Take(Kind kind, uint64_t key) {
  Process* p = Self();
  Locked l(&p->lock);
  return p->slot == vram::kNoSlot ? 0 : p->sizes.Take(kind, key);
}

void Returned(uint64_t bytes) {
  if (bytes == 0) return;
  Process* p = Self();
  if (p->slot != vram::kNoSlot) Release(&p->map, p->slot, bytes);
}

void Restore(Kind kind, uint64_t key, uint64_t bytes) {
  if (bytes == 0) return;
  Process* p = Self();
  Locked l(&p->lock);
  if (p->slot != vram::kNoSlot) p->sizes.Put(kind, key, bytes);
}

View CurrentView() {
  Process* p = Self();
  View v;
  if (p->fail_closed) {
    v.fail_closed = true;
    return v;
  }
  v.enforced = true;
  v.quota = p->map.header->quota_bytes;
  v.in_use = InUse(p->map);
  return v;
}

bool ComputeShareOn() {
  Process* p = Self();
  return !p->fail_closed && p->map.header != nullptr && p->map.header->compute_share_permille > 0;
}

void PaceLaunch(uint64_t cost) {
  // Launches need the slice's header, not this process's slot: a process set up once (or a
  // child of one, which shares the mapping) skips Self() and its getpid() on every launch.
  Process* p = &g_process;
  if (__atomic_load_n(&p->pid, __ATOMIC_ACQUIRE) == 0 ||
      __atomic_load_n(&p->map.header, __ATOMIC_ACQUIRE) == nullptr) {
    p = Self();
  }
  vram::SliceHeader* header = __atomic_load_n(&p->map.header, __ATOMIC_ACQUIRE);
  if (header == nullptr || __atomic_load_n(&p->fail_closed, __ATOMIC_RELAXED)) return;
  const uint64_t wait = vram::PaceLaunch(header, cost, MonotonicNs);
  if (wait == 0) return;
  struct timespec left {
    static_cast<time_t>(wait / 1'000'000'000u), static_cast<long>(wait % 1'000'000'000u)
  };
  while (nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
}

void ClampMemory(const View& view, uint64_t* free_bytes, uint64_t* total_bytes) {
  if (view.fail_closed) {
    if (free_bytes != nullptr) *free_bytes = 0;
    if (total_bytes != nullptr) *total_bytes = 0;
    return;
  }
  if (!view.enforced) return;
  uint64_t total = view.quota;
  if (total_bytes != nullptr && *total_bytes < total) total = *total_bytes;
  uint64_t free = total > view.in_use ? total - view.in_use : 0;
  if (free_bytes != nullptr && *free_bytes < free) free = *free_bytes;
  if (total_bytes != nullptr) *total_bytes = total;
  if (free_bytes != nullptr) *free_bytes = free;
}

}  // namespace gpulet::vramlib
