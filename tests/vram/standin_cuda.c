/* STAND-IN, NOT THE DRIVER: a CUDA driver library (libcuda.so.1) for tests of gpulet's VRAM
 * enforcement library on machines without a GPU. Built from the public driver API's
 * signatures and enum values (cuda.h 12.6, the driver API reference); it keeps real
 * accounting of one simulated card's memory shared by every process that loads it, and
 * answers cuGetProcAddress by name, version and stream flag as the driver documents.
 * The real-driver check is `make vram-device` (tests/vram/device_check.sh) on a GPU machine.
 *
 * Environment:
 *   GPULET_CUDA_STANDIN_STATE       file holding the card's use by process (required)
 *   GPULET_CUDA_STANDIN_TOTAL_MIB   the card's memory (default 16384)
 *   GPULET_CUDA_STANDIN_ALLOC_DELAY_MS  sleep inside each allocation (for kill tests)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

enum {
  SUCCESS = 0,
  INVALID_VALUE = 1,
  OUT_OF_MEMORY = 2,
  NOT_INITIALIZED = 3,
  INVALID_DEVICE = 101,
  NOT_FOUND = 500
};
enum { DRIVER_VERSION = 13000 };

#include "cuda_types.h"
#include "standin_card.h"

static int g_initialized;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

/* ---- this process's allocations --------------------------------------------------------- */

#define MAX_ALLOCS 65536
enum kind { K_PTR = 1, K_HANDLE, K_ARRAY, K_EXT, K_VA };
struct alloc {
  uint64_t key;
  uint64_t bytes;
  int kind;
};
static struct alloc g_allocs[MAX_ALLOCS];
static uint64_t g_next_va = 0x700000000000ull;
static uint64_t g_next_low = 0x10000000ull; /* v1 (32-bit) pointers */
static pid_t g_allocs_pid;

static void reset_after_fork_locked(void) {
  if (g_allocs_pid != getpid()) {
    memset(g_allocs, 0, sizeof(g_allocs));
    g_allocs_pid = getpid();
  }
}

static void delay(void) {
  const char* v = getenv("GPULET_CUDA_STANDIN_ALLOC_DELAY_MS");
  if (v == NULL) return;
  long ms = strtol(v, NULL, 10);
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static CUresult alloc_key(uint64_t bytes, int kind, int low, unsigned long long* key_out) {
  if (!g_initialized) return NOT_INITIALIZED;
  if (bytes == 0) return INVALID_VALUE;
  if (!card_take(bytes)) return OUT_OF_MEMORY;
  delay();
  pthread_mutex_lock(&g_mu);
  reset_after_fork_locked();
  uint64_t key = 0;
  for (int i = 0; i < MAX_ALLOCS; ++i) {
    if (g_allocs[i].kind == 0) {
      uint64_t* next = low ? &g_next_low : &g_next_va;
      key = *next;
      *next += (bytes + 0xfffff) & ~0xfffffull;
      g_allocs[i] = (struct alloc){key, bytes, kind};
      break;
    }
  }
  pthread_mutex_unlock(&g_mu);
  if (key == 0) {
    card_give(bytes);
    return OUT_OF_MEMORY;
  }
  *key_out = key;
  return SUCCESS;
}

static CUresult free_key(uint64_t key, int kind) {
  if (!g_initialized) return NOT_INITIALIZED;
  uint64_t bytes = 0;
  int found = 0;
  pthread_mutex_lock(&g_mu);
  reset_after_fork_locked();
  for (int i = 0; i < MAX_ALLOCS; ++i) {
    if (g_allocs[i].kind == kind && g_allocs[i].key == key) {
      bytes = g_allocs[i].bytes;
      g_allocs[i].kind = 0;
      found = 1;
      break;
    }
  }
  pthread_mutex_unlock(&g_mu);
  if (!found) return INVALID_VALUE;
  if (kind != K_VA) card_give(bytes);
  return SUCCESS;
}

/* ---- the API ----------------------------------------------------------------------------- */

EXPORT CUresult cuInit(unsigned int flags) {
  (void)flags;
  g_initialized = 1;
  return SUCCESS;
}
EXPORT CUresult cuDriverGetVersion(int* v) {
  if (v == NULL) return INVALID_VALUE;
  *v = DRIVER_VERSION;
  return SUCCESS;
}
EXPORT CUresult cuDeviceGetCount(int* n) {
  if (!g_initialized) return NOT_INITIALIZED;
  *n = 1;
  return SUCCESS;
}
EXPORT CUresult cuDeviceGet(int* dev, int ordinal) {
  if (!g_initialized) return NOT_INITIALIZED;
  if (ordinal != 0) return INVALID_DEVICE;
  *dev = 0;
  return SUCCESS;
}
EXPORT CUresult cuCtxCreate_v2(void** ctx, unsigned int flags, int dev) {
  (void)flags;
  if (!g_initialized) return NOT_INITIALIZED;
  if (dev != 0) return INVALID_DEVICE;
  *ctx = (void*)0x1;
  return SUCCESS;
}
EXPORT CUresult cuCtxSynchronize(void) { return g_initialized ? SUCCESS : NOT_INITIALIZED; }
EXPORT CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned shared, void* stream,
                               void** params, void** extra) {
  (void)bx, (void)by, (void)bz, (void)shared, (void)stream, (void)params, (void)extra;
  if (f == NULL) return INVALID_VALUE;
  card_launch((uint64_t)(gx ? gx : 1) * (gy ? gy : 1) * (gz ? gz : 1));
  return SUCCESS;
}

EXPORT CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  if (!g_initialized) return NOT_INITIALIZED;
  if (free_bytes == NULL || total == NULL) return INVALID_VALUE;
  uint64_t t = total_bytes(), used = card_used();
  *total = t;
  *free_bytes = used < t ? t - used : 0;
  return SUCCESS;
}
EXPORT CUresult cuMemGetInfo(unsigned int* free_bytes, unsigned int* total) {
  size_t f, t;
  CUresult r = cuMemGetInfo_v2(&f, &t);
  if (r != SUCCESS) return r;
  *free_bytes = f > 0xffffffffu ? 0xffffffffu : (unsigned)f;
  *total = t > 0xffffffffu ? 0xffffffffu : (unsigned)t;
  return SUCCESS;
}
EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, int dev) {
  if (!g_initialized) return NOT_INITIALIZED;
  if (dev != 0) return INVALID_DEVICE;
  *bytes = total_bytes();
  return SUCCESS;
}
EXPORT CUresult cuDeviceTotalMem(unsigned int* bytes, int dev) {
  size_t b;
  CUresult r = cuDeviceTotalMem_v2(&b, dev);
  if (r == SUCCESS) *bytes = b > 0xffffffffu ? 0xffffffffu : (unsigned)b;
  return r;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) {
  if (p == NULL) return INVALID_VALUE;
  return alloc_key(bytes, K_PTR, 0, p);
}
EXPORT CUresult cuMemAlloc(CUdeviceptr_v1* p, unsigned int bytes) {
  unsigned long long k;
  if (p == NULL) return INVALID_VALUE;
  CUresult r = alloc_key(bytes, K_PTR, 1, &k);
  if (r == SUCCESS) *p = (CUdeviceptr_v1)k;
  return r;
}
EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* p, size_t* pitch, size_t width, size_t height,
                                   unsigned int elem) {
  if (p == NULL || pitch == NULL || (elem != 4 && elem != 8 && elem != 16)) return INVALID_VALUE;
  size_t row = (width + 255) & ~(size_t)255;
  CUresult r = alloc_key(row * height, K_PTR, 0, p);
  if (r == SUCCESS) *pitch = row;
  return r;
}
EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1* p, unsigned int* pitch, unsigned int width,
                                unsigned int height, unsigned int elem) {
  CUdeviceptr k;
  size_t pp;
  CUresult r = cuMemAllocPitch_v2(&k, &pp, width, height, elem);
  if (r == SUCCESS) {
    *p = (CUdeviceptr_v1)k;
    *pitch = (unsigned)pp;
  }
  return r;
}
EXPORT CUresult cuMemFree_v2(CUdeviceptr p) { return free_key(p, K_PTR); }
EXPORT CUresult cuMemFree(CUdeviceptr_v1 p) { return free_key(p, K_PTR); }
EXPORT CUresult cuMemAllocManaged(CUdeviceptr* p, size_t bytes, unsigned int flags) {
  if (p == NULL || (flags != 1 && flags != 2)) return INVALID_VALUE;
  return alloc_key(bytes, K_PTR, 0, p);
}
EXPORT CUresult cuMemAllocAsync(CUdeviceptr* p, size_t bytes, void* stream) {
  (void)stream;
  return p == NULL ? INVALID_VALUE : alloc_key(bytes, K_PTR, 0, p);
}
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* p, size_t bytes, void* stream) {
  return cuMemAllocAsync(p, bytes, stream);
}
EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* p, size_t bytes, void* pool, void* stream) {
  (void)stream;
  return p == NULL || pool == NULL ? INVALID_VALUE : alloc_key(bytes, K_PTR, 0, p);
}
EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* p, size_t bytes, void* pool,
                                             void* stream) {
  return cuMemAllocFromPoolAsync(p, bytes, pool, stream);
}
EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, void* stream) {
  (void)stream;
  return free_key(p, K_PTR);
}
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, void* stream) {
  return cuMemFreeAsync(p, stream);
}
EXPORT CUresult cuMemPoolTrimTo(void* pool, size_t keep) {
  (void)keep;
  return pool == NULL ? INVALID_VALUE : SUCCESS;
}

/* VMM: physical handles count; address reservations and mappings do not. */
#define GRANULARITY (2ull << 20)
EXPORT CUresult cuMemGetAllocationGranularity(size_t* g, const struct mem_prop* prop, int option) {
  (void)option;
  if (g == NULL || prop == NULL) return INVALID_VALUE;
  *g = GRANULARITY;
  return SUCCESS;
}
EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* h, size_t bytes,
                            const struct mem_prop* prop, unsigned long long flags) {
  if (h == NULL || prop == NULL || flags != 0 || bytes % GRANULARITY != 0) return INVALID_VALUE;
  if (prop->location.type == 1) return alloc_key(bytes, K_HANDLE, 0, h);
  if (prop->location.type == 2 || prop->location.type == 3) {
    /* host memory (CUDA 12.2+/13): not the card's */
    static uint64_t next_host = 0x1000;
    *h = __atomic_add_fetch(&next_host, 1, __ATOMIC_RELAXED);
    return SUCCESS;
  }
  return INVALID_VALUE;
}
EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
  if (h < 0x100000) return SUCCESS; /* a host handle */
  return free_key(h, K_HANDLE);
}
EXPORT CUresult cuMemAddressReserve(CUdeviceptr* p, size_t size, size_t align, CUdeviceptr addr,
                                    unsigned long long flags) {
  (void)align, (void)addr, (void)flags;
  if (p == NULL || size == 0 || size % GRANULARITY != 0) return INVALID_VALUE;
  pthread_mutex_lock(&g_mu);
  *p = g_next_va;
  g_next_va += size;
  pthread_mutex_unlock(&g_mu);
  return SUCCESS;
}
EXPORT CUresult cuMemAddressFree(CUdeviceptr p, size_t size) {
  (void)p;
  return size == 0 ? INVALID_VALUE : SUCCESS;
}
EXPORT CUresult cuMemMap(CUdeviceptr p, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                         unsigned long long flags) {
  (void)offset;
  return p == 0 || size == 0 || h == 0 || flags != 0 ? INVALID_VALUE : SUCCESS;
}
EXPORT CUresult cuMemUnmap(CUdeviceptr p, size_t size) {
  return p == 0 || size == 0 ? INVALID_VALUE : SUCCESS;
}
EXPORT CUresult cuMemSetAccess(CUdeviceptr p, size_t size, const void* desc, size_t count) {
  return p == 0 || size == 0 || desc == NULL || count == 0 ? INVALID_VALUE : SUCCESS;
}

/* Arrays: the size the enforcement library computes from the descriptor. */
static uint64_t fmt_bytes(int f) {
  return f == 1 || f == 8 ? 1 : (f == 2 || f == 9 || f == 0x10) ? 2 : 4;
}
static uint64_t dim(uint64_t v) { return v == 0 ? 1 : v; }
EXPORT CUresult cuArrayCreate_v2(void** a, const struct desc2* d) {
  unsigned long long k;
  if (a == NULL || d == NULL) return INVALID_VALUE;
  CUresult r = alloc_key(dim(d->w) * dim(d->h) * fmt_bytes(d->format) * d->ch, K_ARRAY, 0, &k);
  if (r == SUCCESS) *a = (void*)k;
  return r;
}
EXPORT CUresult cuArray3DCreate_v2(void** a, const struct desc3* d) {
  unsigned long long k;
  if (a == NULL || d == NULL) return INVALID_VALUE;
  CUresult r =
      alloc_key(dim(d->w) * dim(d->h) * dim(d->d) * fmt_bytes(d->format) * d->ch, K_ARRAY, 0, &k);
  if (r == SUCCESS) *a = (void*)k;
  return r;
}
EXPORT CUresult cuMipmappedArrayCreate(void** a, const struct desc3* d, unsigned levels) {
  unsigned long long k;
  uint64_t total = 0, w = dim(d->w), h = dim(d->h), z = dim(d->d);
  if (a == NULL || d == NULL) return INVALID_VALUE;
  for (unsigned i = 0; i < (levels == 0 ? 1 : levels); ++i) {
    total += w * h * z * fmt_bytes(d->format) * d->ch;
    w = w > 1 ? w / 2 : 1;
    h = h > 1 ? h / 2 : 1;
    z = z > 1 ? z / 2 : 1;
  }
  CUresult r = alloc_key(total, K_ARRAY, 0, &k);
  if (r == SUCCESS) *a = (void*)k;
  return r;
}
EXPORT CUresult cuArrayDestroy(void* a) { return free_key((uint64_t)a, K_ARRAY); }
EXPORT CUresult cuMipmappedArrayDestroy(void* a) { return free_key((uint64_t)a, K_ARRAY); }

EXPORT CUresult cuImportExternalMemory(void** m, const struct ext_desc* d) {
  unsigned long long k;
  if (m == NULL || d == NULL || d->size == 0) return INVALID_VALUE;
  CUresult r = alloc_key(d->size, K_EXT, 0, &k);
  if (r == SUCCESS) *m = (void*)k;
  return r;
}
EXPORT CUresult cuDestroyExternalMemory(void* m) { return free_key((uint64_t)m, K_EXT); }

/* A variant no released header has: what a future driver may return for a newer
 * cudaVersion. Not exported by name, so the enforcement library cannot know it. */
static CUresult future_cuMemAlloc(CUdeviceptr* p, size_t bytes) { return cuMemAlloc_v2(p, bytes); }

/* For tests: the card's use as the stand-in counts it. */
EXPORT uint64_t gpuletStandinCardUsed(void) { return card_used(); }

/* ---- cuGetProcAddress -------------------------------------------------------------------- */

enum { FLAG_LEGACY = 1, FLAG_PTDS = 2 };
enum { SYMBOL_SUCCESS = 0, SYMBOL_NOT_FOUND = 1, VERSION_NOT_SUFFICIENT = 2 };
struct proc {
  const char* name;
  int since;
  int ptds; /* 1: the per-thread-default-stream form */
  void* fn;
};
EXPORT CUresult cuGetProcAddress_v2(const char*, void**, int, unsigned long long, int*);
EXPORT CUresult cuGetProcAddress(const char*, void**, int, unsigned long long);
#define P(n, v, t, f) \
  { n, v, t, (void*)(f) }
static const struct proc kProcs[] = {
    P("cuInit", 2000, 0, cuInit),
    P("cuDriverGetVersion", 2020, 0, cuDriverGetVersion),
    P("cuDeviceGet", 2000, 0, cuDeviceGet),
    P("cuDeviceGetCount", 2000, 0, cuDeviceGetCount),
    P("cuCtxCreate", 3020, 0, cuCtxCreate_v2),
    P("cuCtxSynchronize", 2000, 0, cuCtxSynchronize),
    P("cuLaunchKernel", 4000, 0, cuLaunchKernel),
    P("cuGetProcAddress", 11030, 0, cuGetProcAddress),
    P("cuGetProcAddress", 12000, 0, cuGetProcAddress_v2),
    P("cuMemGetInfo", 2000, 0, cuMemGetInfo),
    P("cuMemGetInfo", 3020, 0, cuMemGetInfo_v2),
    P("cuDeviceTotalMem", 2000, 0, cuDeviceTotalMem),
    P("cuDeviceTotalMem", 3020, 0, cuDeviceTotalMem_v2),
    P("cuMemAlloc", 2000, 0, cuMemAlloc),
    P("cuMemAlloc", 3020, 0, cuMemAlloc_v2),
    P("cuMemAlloc", 13000, 0, future_cuMemAlloc),
    P("cuMemAllocPitch", 2000, 0, cuMemAllocPitch),
    P("cuMemAllocPitch", 3020, 0, cuMemAllocPitch_v2),
    P("cuMemFree", 2000, 0, cuMemFree),
    P("cuMemFree", 3020, 0, cuMemFree_v2),
    P("cuMemAllocManaged", 6000, 0, cuMemAllocManaged),
    P("cuMemAllocAsync", 11020, 0, cuMemAllocAsync),
    P("cuMemAllocAsync", 11020, 1, cuMemAllocAsync_ptsz),
    P("cuMemAllocFromPoolAsync", 11020, 0, cuMemAllocFromPoolAsync),
    P("cuMemAllocFromPoolAsync", 11020, 1, cuMemAllocFromPoolAsync_ptsz),
    P("cuMemFreeAsync", 11020, 0, cuMemFreeAsync),
    P("cuMemFreeAsync", 11020, 1, cuMemFreeAsync_ptsz),
    P("cuMemPoolTrimTo", 11020, 0, cuMemPoolTrimTo),
    P("cuMemGetAllocationGranularity", 10020, 0, cuMemGetAllocationGranularity),
    P("cuMemCreate", 10020, 0, cuMemCreate),
    P("cuMemRelease", 10020, 0, cuMemRelease),
    P("cuMemAddressReserve", 10020, 0, cuMemAddressReserve),
    P("cuMemAddressFree", 10020, 0, cuMemAddressFree),
    P("cuMemMap", 10020, 0, cuMemMap),
    P("cuMemUnmap", 10020, 0, cuMemUnmap),
    P("cuMemSetAccess", 10020, 0, cuMemSetAccess),
    P("cuArrayCreate", 3020, 0, cuArrayCreate_v2),
    P("cuArray3DCreate", 3020, 0, cuArray3DCreate_v2),
    P("cuMipmappedArrayCreate", 5000, 0, cuMipmappedArrayCreate),
    P("cuArrayDestroy", 2000, 0, cuArrayDestroy),
    P("cuMipmappedArrayDestroy", 5000, 0, cuMipmappedArrayDestroy),
    P("cuImportExternalMemory", 10000, 0, cuImportExternalMemory),
    P("cuDestroyExternalMemory", 10000, 0, cuDestroyExternalMemory),
};

EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                                    unsigned long long flags, int* status) {
  if (symbol == NULL || pfn == NULL || (flags & ~3ull) != 0) return INVALID_VALUE;
  if (version > DRIVER_VERSION) return INVALID_VALUE;
  const int ptds = (flags & FLAG_PTDS) != 0;
  const struct proc* best = NULL;
  int seen = 0;
  for (size_t i = 0; i < sizeof(kProcs) / sizeof(kProcs[0]); ++i) {
    const struct proc* p = &kProcs[i];
    if (strcmp(p->name, symbol) != 0) continue;
    seen = 1;
    if (p->since > version || (p->ptds && !ptds)) continue;
    /* the newest form; at one version the per-thread form when it was asked for */
    if (best == NULL || p->since > best->since || (p->since == best->since && p->ptds)) {
      best = p;
    }
  }
  *pfn = best != NULL ? best->fn : NULL;
  if (status != NULL) {
    *status = best != NULL ? SYMBOL_SUCCESS : seen ? VERSION_NOT_SUFFICIENT : SYMBOL_NOT_FOUND;
  }
  return SUCCESS;
}

EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version,
                                 unsigned long long flags) {
  return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}
