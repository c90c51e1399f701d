/* STAND-IN, NOT THE DRIVER: the simulated card both stand-ins (standin_cuda.c as
 * libcuda.so.1, standin_nvml.c as libnvidia-ml.so.1) count against: each process's use in a
 * shared file (GPULET_CUDA_STANDIN_STATE) under flock, dead processes not counted, as the
 * driver frees a dead process's memory. Included by each (its functions are static). */
#ifndef GPULET_TESTS_VRAM_STANDIN_CARD_H_
#define GPULET_TESTS_VRAM_STANDIN_CARD_H_

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MAX_PROCS 4096
struct card_entry {
  int32_t pid;
  uint32_t pad;
  uint64_t bytes;
  uint64_t busy_ns; /* SM time the process's kernels took (card_launch), as NVML's smUtil sees */
};
struct card {
  struct card_entry procs[MAX_PROCS];
};

static struct card* g_card;
static int g_card_fd = -1;

static uint64_t total_bytes(void) {
  const char* v = getenv("GPULET_CUDA_STANDIN_TOTAL_MIB");
  uint64_t mib = v != NULL ? strtoull(v, NULL, 10) : 16384;
  return mib << 20;
}

static int open_card(void) {
  if (g_card != NULL) return 1;
  const char* path = getenv("GPULET_CUDA_STANDIN_STATE");
  if (path == NULL) return 0;
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return 0;
  if (ftruncate(fd, sizeof(struct card)) != 0) {
    close(fd);
    return 0;
  }
  void* p = mmap(NULL, sizeof(struct card), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return 0;
  }
  g_card = p;
  g_card_fd = fd;
  return 1;
}

static int alive(pid_t pid) { return kill(pid, 0) == 0 || errno == EPERM; }

/* The card's use: live processes only (the driver frees a dead process's memory). */
static uint64_t card_used_locked(void) {
  uint64_t used = 0;
  for (int i = 0; i < MAX_PROCS; ++i) {
    struct card_entry* e = &g_card->procs[i];
    if (e->pid == 0) continue;
    if (!alive(e->pid)) {
      e->pid = 0;
      e->bytes = 0;
      e->busy_ns = 0;
      continue;
    }
    used += e->bytes;
  }
  return used;
}

static struct card_entry* own_entry_locked(void) {
  pid_t me = getpid();
  struct card_entry* free_entry = NULL;
  for (int i = 0; i < MAX_PROCS; ++i) {
    struct card_entry* e = &g_card->procs[i];
    if (e->pid == me) return e;
    if (e->pid == 0 && free_entry == NULL) free_entry = e;
  }
  if (free_entry != NULL) {
    free_entry->pid = me;
    free_entry->bytes = 0;
    free_entry->busy_ns = 0;
  }
  return free_entry;
}

/* Takes `bytes` of the card for this process; 0 when the card is full. */
__attribute__((unused)) static int card_take(uint64_t bytes) {
  if (!open_card()) return 0;
  flock(g_card_fd, LOCK_EX);
  uint64_t used = card_used_locked();
  int ok = used + bytes <= total_bytes();
  struct card_entry* e = ok ? own_entry_locked() : NULL;
  if (e != NULL) e->bytes += bytes;
  flock(g_card_fd, LOCK_UN);
  return e != NULL;
}

__attribute__((unused)) static void card_give(uint64_t bytes) {
  if (!open_card()) return;
  flock(g_card_fd, LOCK_EX);
  struct card_entry* e = own_entry_locked();
  if (e != NULL) e->bytes = e->bytes > bytes ? e->bytes - bytes : 0;
  flock(g_card_fd, LOCK_UN);
}

__attribute__((unused)) static uint64_t card_used(void) {
  if (!open_card()) return 0;
  flock(g_card_fd, LOCK_EX);
  uint64_t used = card_used_locked();
  flock(g_card_fd, LOCK_UN);
  return used;
}

static uint64_t mono_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* A kernel launch of `blocks` blocks, when GPULET_CUDA_STANDIN_NS_PER_BLOCK is set (else it
 * costs nothing): the simulated card runs the process's kernels one after another, each for
 * blocks × that many ns of SM time, counted in the process's busy_ns; its launch queue holds
 * 2 ms of work, and a launch into a full queue blocks until there is room, as the driver's
 * does. */
__attribute__((unused)) static void card_launch(uint64_t blocks) {
  static uint64_t free_at; /* when the card finishes this process's queued work */
  static struct card_entry* mine;
  const char* v = getenv("GPULET_CUDA_STANDIN_NS_PER_BLOCK");
  if (v == NULL || !open_card()) return;
  if (mine == NULL) {
    flock(g_card_fd, LOCK_EX);
    mine = own_entry_locked();
    flock(g_card_fd, LOCK_UN);
    if (mine == NULL) return;
  }
  const uint64_t cost = blocks * strtoull(v, NULL, 10);
  uint64_t now = mono_ns();
  if (free_at > now + 2000000) {
    const uint64_t wait = free_at - now - 2000000;
    struct timespec d = {(time_t)(wait / 1000000000ull), (long)(wait % 1000000000ull)};
    nanosleep(&d, NULL);
    now = mono_ns();
  }
  free_at = (free_at > now ? free_at : now) + cost;
  __atomic_fetch_add(&mine->busy_ns, cost, __ATOMIC_RELAXED);
}

#endif /* GPULET_TESTS_VRAM_STANDIN_CARD_H_ */
