/* Test applications for gpulet's VRAM enforcement library, each reaching the CUDA driver the
 * way a real framework does (tests/vram/README.md). Against the stand-in driver in CI, and
 * the real driver in tests/vram/device_check.sh. Prints one line of key=value results.
 *
 *   vram_app fill RESOLVE CHUNK_MIB   allocate until refused; RESOLVE: proc (as the static
 *                                     CUDA runtime: dlopen + cuGetProcAddress_v2 with
 *                                     versions), dlsym, dlvsym, next (RTLD_NEXT), v1 (the
 *                                     32-bit ABI), ptds (per-thread stream), future (a
 *                                     version newer than the library knows), direct (linked)
 *   vram_app ggml CHUNK_MIB           ggml's VMM pool: reserve, create and map chunks
 *   vram_app torch                    a caching allocator: read free, big blocks, halve on OOM
 *   vram_app fork N MIB               N forked workers (no exec) allocate MIB each
 *   vram_app hold MIB CHUNK_MIB       allocate, print "ready", wait to be killed
 *   vram_app race CHUNK_MIB           allocate until refused, print, wait to be killed
 *   vram_app paths QUOTA_MIB          every allocation path: refused past the quota, counted,
 *                                     given back
 *   vram_app nvml                     NVML's memory info, both struct versions
 *   vram_app bench N                  ns per allocation pair, cuGetProcAddress, launch
 *   vram_app compute SECONDS BLOCKS   kernels of BLOCKS blocks back to back, as a training
 *                                     loop: print "ready", then launches= and wrapped= (the
 *                                     launch entry point is the library's)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cuda_types.h"

typedef unsigned long long Handle;
enum { OOM = 2 };
#define MIB (1ull << 20)

#ifdef VRAM_APP_DIRECT
CUresult cuInit(unsigned);
CUresult cuMemGetInfo_v2(size_t*, size_t*);
CUresult cuDeviceTotalMem_v2(size_t*, int);
CUresult cuMemAlloc_v2(CUdeviceptr*, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
/* Calls through the PLT, as a program linked with -lcuda makes them. */
static CUresult direct_init(unsigned f) { return cuInit(f); }
static CUresult direct_get_info(size_t* f, size_t* t) { return cuMemGetInfo_v2(f, t); }
static CUresult direct_total_mem(size_t* b, int d) { return cuDeviceTotalMem_v2(b, d); }
static CUresult direct_alloc(CUdeviceptr* p, size_t n) { return cuMemAlloc_v2(p, n); }
static CUresult direct_free(CUdeviceptr p) { return cuMemFree_v2(p); }
#endif

typedef CUresult (*GetProc)(const char*, void**, int, unsigned long long, int*);
struct api {
  CUresult (*init)(unsigned);
  CUresult (*get_info)(size_t*, size_t*);
  CUresult (*total_mem)(size_t*, int);
  CUresult (*alloc)(CUdeviceptr*, size_t);
  CUresult (*free)(CUdeviceptr);
  CUresult (*alloc_v1)(unsigned*, unsigned);
  CUresult (*free_v1)(unsigned);
  GetProc get_proc;
  void* lib;
};

static void* must(void* p, const char* what) {
  if (p == NULL) {
    fprintf(stderr, "vram_app: cannot resolve %s: %s\n", what, dlerror());
    exit(1);
  }
  return p;
}

static void* proc(GetProc gp, const char* name, int version, unsigned long long flags) {
  void* fn = NULL;
  int status = -1;
  if (gp(name, &fn, version, flags, &status) != 0 || fn == NULL) {
    fprintf(stderr, "vram_app: cuGetProcAddress(%s, %d) failed (status %d)\n", name, version,
            status);
    exit(1);
  }
  return fn;
}

static struct api load(const char* how) {
  struct api a;
  memset(&a, 0, sizeof(a));
#ifdef VRAM_APP_DIRECT
  (void)how;
  a.init = direct_init;
  a.get_info = direct_get_info;
  a.total_mem = direct_total_mem;
  a.alloc = direct_alloc;
  a.free = direct_free;
  return a;
#else
  a.lib = must(dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL), "libcuda.so.1");
  if (strcmp(how, "dlsym") == 0 || strcmp(how, "v1") == 0) {
    a.init = must(dlsym(a.lib, "cuInit"), "cuInit");
    a.get_info = must(dlsym(a.lib, "cuMemGetInfo_v2"), "cuMemGetInfo_v2");
    a.total_mem = must(dlsym(a.lib, "cuDeviceTotalMem_v2"), "cuDeviceTotalMem_v2");
    a.alloc = must(dlsym(a.lib, "cuMemAlloc_v2"), "cuMemAlloc_v2");
    a.free = must(dlsym(a.lib, "cuMemFree_v2"), "cuMemFree_v2");
    a.alloc_v1 = must(dlsym(a.lib, "cuMemAlloc"), "cuMemAlloc");
    a.free_v1 = must(dlsym(a.lib, "cuMemFree"), "cuMemFree");
  } else if (strcmp(how, "dlvsym") == 0) {
    /* the versioned stand-in (tests/vram/standin_versioned.map) */
    a.init = must(dlvsym(a.lib, "cuInit", "CUDA_STANDIN_1"), "cuInit");
    a.get_info = must(dlvsym(a.lib, "cuMemGetInfo_v2", "CUDA_STANDIN_1"), "cuMemGetInfo_v2");
    a.total_mem = must(dlvsym(a.lib, "cuDeviceTotalMem_v2", "CUDA_STANDIN_1"), "total");
    a.alloc = must(dlvsym(a.lib, "cuMemAlloc_v2", "CUDA_STANDIN_1"), "cuMemAlloc_v2");
    a.free = must(dlvsym(a.lib, "cuMemFree_v2", "CUDA_STANDIN_1"), "cuMemFree_v2");
  } else if (strcmp(how, "next") == 0) {
    a.init = must(dlsym(RTLD_NEXT, "cuInit"), "cuInit");
    a.get_info = must(dlsym(RTLD_NEXT, "cuMemGetInfo_v2"), "cuMemGetInfo_v2");
    a.total_mem = must(dlsym(RTLD_NEXT, "cuDeviceTotalMem_v2"), "cuDeviceTotalMem_v2");
    a.alloc = must(dlsym(RTLD_NEXT, "cuMemAlloc_v2"), "cuMemAlloc_v2");
    a.free = must(dlsym(RTLD_NEXT, "cuMemFree_v2"), "cuMemFree_v2");
  } else {
    /* As the CUDA runtime does: one dlsym, then every entry point by name and version. */
    const int version = strcmp(how, "future") == 0 ? 13000 : 12060;
    const unsigned long long flags = strcmp(how, "ptds") == 0 ? 2 : 0;
    a.get_proc = must(dlsym(a.lib, "cuGetProcAddress_v2"), "cuGetProcAddress_v2");
    a.init = proc(a.get_proc, "cuInit", version, flags);
    a.get_info = proc(a.get_proc, "cuMemGetInfo", version, flags);
    a.total_mem = proc(a.get_proc, "cuDeviceTotalMem", version, flags);
    if (flags != 0) {
      a.alloc = NULL; /* set below: the per-thread async form */
    } else {
      a.alloc = proc(a.get_proc, "cuMemAlloc", version, flags);
      a.free = proc(a.get_proc, "cuMemFree", version, flags);
    }
  }
  return a;
#endif
}

static void init(struct api* a) {
  CUresult r = a->init(0);
  if (r != 0) {
    fprintf(stderr, "vram_app: cuInit failed: %d\n", r);
    exit(1);
  }
}

static void print_info(struct api* a) {
  size_t f = 0, t = 0, total = 0;
  CUresult r1 = a->get_info(&f, &t);
  CUresult r2 = a->total_mem(&total, 0);
  printf("info_rc=%d total_mib=%llu free_mib=%llu device_total_mib=%llu device_rc=%d ", r1,
         (unsigned long long)(t / MIB), (unsigned long long)(f / MIB),
         (unsigned long long)(total / MIB), r2);
}

/* Per-thread-stream async allocation, as code built with --default-stream per-thread. */
static CUresult (*g_alloc_async)(CUdeviceptr*, size_t, void*);
static CUresult (*g_free_async)(CUdeviceptr, void*);
static CUresult alloc_ptds(CUdeviceptr* p, size_t n) { return g_alloc_async(p, n, NULL); }
static CUresult free_ptds(CUdeviceptr p) { return g_free_async(p, NULL); }

#define MAX_PTRS 100000
static CUdeviceptr g_ptrs[MAX_PTRS];

static int fill(int argc, char** argv) {
  if (argc < 4) return 1;
  const char* how = argv[2];
  uint64_t chunk = strtoull(argv[3], NULL, 10) * MIB;
  struct api a = load(how);
  init(&a);
  if (a.alloc == NULL) {
    g_alloc_async = proc(a.get_proc, "cuMemAllocAsync", 12060, 2);
    g_free_async = proc(a.get_proc, "cuMemFreeAsync", 12060, 2);
    a.alloc = alloc_ptds;
    a.free = free_ptds;
  }
  print_info(&a);
  int n = 0;
  CUresult r = 0;
  const int v1 = strcmp(how, "v1") == 0;
  while (n < MAX_PTRS) {
    if (v1) {
      unsigned p32 = 0;
      r = a.alloc_v1(&p32, (unsigned)chunk);
      g_ptrs[n] = p32;
    } else {
      r = a.alloc(&g_ptrs[n], chunk);
    }
    if (r != 0) break;
    ++n;
  }
  printf("allocated_mib=%llu last_rc=%d ", (unsigned long long)(n * chunk / MIB), r);
  int free_errors = 0;
  for (int i = 0; i < n; ++i) {
    free_errors += (v1 ? a.free_v1((unsigned)g_ptrs[i]) : a.free(g_ptrs[i])) != 0;
  }
  size_t f = 0, t = 0;
  a.get_info(&f, &t);
  printf("free_errors=%d free_after_mib=%llu\n", free_errors, (unsigned long long)(f / MIB));
  return 0;
}

static int ggml(int argc, char** argv) {
  if (argc < 3) return 1;
  uint64_t chunk = strtoull(argv[2], NULL, 10) * MIB;
  struct api a = load("proc");
  init(&a);
  CUresult (*reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long) =
      proc(a.get_proc, "cuMemAddressReserve", 12060, 0);
  CUresult (*create)(Handle*, size_t, const struct mem_prop*, unsigned long long) =
      proc(a.get_proc, "cuMemCreate", 12060, 0);
  CUresult (*map)(CUdeviceptr, size_t, size_t, Handle, unsigned long long) =
      proc(a.get_proc, "cuMemMap", 12060, 0);
  CUresult (*unmap)(CUdeviceptr, size_t) = proc(a.get_proc, "cuMemUnmap", 12060, 0);
  CUresult (*release)(Handle) = proc(a.get_proc, "cuMemRelease", 12060, 0);
  print_info(&a);
  /* ggml-cuda's pool: one large virtual range, grown by mapping physical chunks. */
  const uint64_t va_size = 1ull << 40;
  CUdeviceptr base = 0;
  if (reserve(&base, va_size, 0, 0, 0) != 0) return 1;
  struct mem_prop p;
  memset(&p, 0, sizeof(p));
  p.type = 1;          /* CU_MEM_ALLOCATION_TYPE_PINNED */
  p.location.type = 1; /* CU_MEM_LOCATION_TYPE_DEVICE */
  Handle handles[4096];
  int n = 0;
  CUresult r = 0;
  while (n < 4096) {
    r = create(&handles[n], chunk, &p, 0);
    if (r != 0) break;
    if (map(base + n * chunk, chunk, 0, handles[n], 0) != 0) return 1;
    ++n;
  }
  /* a host-located allocation (CUDA 13) is system memory: never refused by the quota */
  struct mem_prop host = p;
  host.location.type = 2;
  Handle h = 0;
  CUresult host_rc = create(&h, chunk, &host, 0);
  if (host_rc == 0) release(h);
  printf("allocated_mib=%llu last_rc=%d host_rc=%d ", (unsigned long long)(n * chunk / MIB), r,
         host_rc);
  for (int i = 0; i < n; ++i) {
    unmap(base + i * chunk, chunk);
    release(handles[i]);
  }
  size_t f = 0, t = 0;
  a.get_info(&f, &t);
  printf("free_after_mib=%llu\n", (unsigned long long)(f / MIB));
  return 0;
}

static int torch(void) {
  struct api a = load("proc");
  init(&a);
  size_t f0 = 0, t0 = 0;
  a.get_info(&f0, &t0);
  printf("total_mib=%llu free_mib=%llu ", (unsigned long long)(t0 / MIB),
         (unsigned long long)(f0 / MIB));
  /* A caching allocator sizes its first blocks from what is free, and on OOM retries with
   * smaller blocks until 2 MiB (its smallest large-block size). */
  uint64_t block = f0 / 4 / (2 * MIB) * (2 * MIB);
  if (block < 2 * MIB) block = 2 * MIB;
  uint64_t held = 0;
  int ooms = 0, n = 0;
  while (block >= 2 * MIB && n < MAX_PTRS) {
    if (a.alloc(&g_ptrs[n], block) == 0) {
      held += block;
      ++n;
    } else {
      ++ooms;
      block /= 2;
    }
  }
  printf("held_mib=%llu ooms=%d ", (unsigned long long)(held / MIB), ooms);
  for (int i = 0; i < n; ++i) a.free(g_ptrs[i]);
  a.get_info(&f0, &t0);
  printf("free_after_mib=%llu\n", (unsigned long long)(f0 / MIB));
  return 0;
}

static int forked(int argc, char** argv) {
  if (argc < 4) return 1;
  int children = atoi(argv[2]);
  uint64_t bytes = strtoull(argv[3], NULL, 10) * MIB;
  struct api a = load("proc");
  init(&a);
  int ok = 0, oom = 0, other = 0;
  for (int i = 0; i < children; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      /* a worker: initialises CUDA itself, as fork-based data loaders and servers do */
      init(&a);
      CUdeviceptr p;
      CUresult r = a.alloc(&p, bytes);
      _exit(r == 0 ? 0 : r == OOM ? 2 : 3);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 3;
    ok += code == 0;
    oom += code == 2;
    other += code != 0 && code != 2;
  }
  /* every worker's memory came back when it exited */
  CUdeviceptr p;
  CUresult r = a.alloc(&p, bytes);
  printf("ok=%d oom=%d other=%d parent_rc=%d\n", ok, oom, other, r);
  return 0;
}

static void wait_forever(void) {
  fflush(stdout);
  for (;;) pause();
}

static int hold(int argc, char** argv) {
  if (argc < 4) return 1;
  uint64_t want = strtoull(argv[2], NULL, 10) * MIB;
  uint64_t chunk = strtoull(argv[3], NULL, 10) * MIB;
  struct api a = load("proc");
  init(&a);
  uint64_t got = 0;
  int n = 0;
  while (got < want && n < MAX_PTRS && a.alloc(&g_ptrs[n], chunk) == 0) {
    got += chunk;
    ++n;
  }
  printf("ready allocated_mib=%llu\n", (unsigned long long)(got / MIB));
  wait_forever();
  return 0;
}

static int race(int argc, char** argv) {
  if (argc < 3) return 1;
  uint64_t chunk = strtoull(argv[2], NULL, 10) * MIB;
  struct api a = load("proc");
  init(&a);
  int n = 0;
  while (n < MAX_PTRS && a.alloc(&g_ptrs[n], chunk) == 0) ++n;
  printf("ready allocated_mib=%llu\n", (unsigned long long)(n * chunk / MIB));
  wait_forever();
  return 0;
}

static size_t used_now(struct api* a) {
  size_t f = 0, t = 0;
  a->get_info(&f, &t);
  return t - f;
}

/* One allocation path: past the quota refused with OOM, within it counted (free drops by
 * the size), given back on free. */
#define PATH(name, big_call, small_call, free_call)         \
  do {                                                      \
    size_t before_ = used_now(&a);                          \
    CUresult big_ = (big_call);                             \
    CUresult small_ = (small_call);                         \
    size_t during_ = used_now(&a);                          \
    CUresult free_ = (free_call);                           \
    printf("%s=%d/%d/%llu/%d ", name, big_, small_,         \
           (unsigned long long)((during_ - before_) / MIB), \
           used_now(&a) == before_ && free_ == 0);          \
  } while (0)

static int paths(int argc, char** argv) {
  if (argc < 3) return 1;
  const uint64_t quota = strtoull(argv[2], NULL, 10) * MIB;
  const uint64_t big = quota + 64 * MIB, small = 64 * MIB;
  struct api a = load("proc");
  init(&a);
  GetProc gp = a.get_proc;
  CUdeviceptr p = 0, q = 0;
  size_t pitch = 0;
  void* arr = NULL;
  void* arr2 = NULL;
  Handle h = 0, h2 = 0;

  PATH("cuMemAlloc", a.alloc(&q, big), a.alloc(&p, small), a.free(p));
  CUresult (*managed)(CUdeviceptr*, size_t, unsigned) = proc(gp, "cuMemAllocManaged", 12060, 0);
  PATH("cuMemAllocManaged", managed(&q, big, 1), managed(&p, small, 1), a.free(p));
  CUresult (*pitched)(CUdeviceptr*, size_t*, size_t, size_t, unsigned) =
      proc(gp, "cuMemAllocPitch", 12060, 0);
  PATH("cuMemAllocPitch", pitched(&q, &pitch, 1 * MIB, big / MIB, 4),
       pitched(&p, &pitch, 1 * MIB, 64, 4), a.free(p));
  CUresult (*async)(CUdeviceptr*, size_t, void*) = proc(gp, "cuMemAllocAsync", 12060, 0);
  CUresult (*free_async)(CUdeviceptr, void*) = proc(gp, "cuMemFreeAsync", 12060, 0);
  PATH("cuMemAllocAsync", async(&q, big, NULL), async(&p, small, NULL), free_async(p, NULL));
  CUresult (*pool_async)(CUdeviceptr*, size_t, void*, void*) =
      proc(gp, "cuMemAllocFromPoolAsync", 12060, 0);
  void* pool = (void*)0x1;
  PATH("cuMemAllocFromPoolAsync", pool_async(&q, big, pool, NULL),
       pool_async(&p, small, pool, NULL), free_async(p, NULL));
  CUresult (*create)(Handle*, size_t, const struct mem_prop*, unsigned long long) =
      proc(gp, "cuMemCreate", 12060, 0);
  CUresult (*release)(Handle) = proc(gp, "cuMemRelease", 12060, 0);
  struct mem_prop pr;
  memset(&pr, 0, sizeof(pr));
  pr.type = 1;
  pr.location.type = 1;
  PATH("cuMemCreate", create(&h2, big, &pr, 0), create(&h, small, &pr, 0), release(h));
  CUresult (*array)(void**, const struct desc2*) = proc(gp, "cuArrayCreate", 12060, 0);
  CUresult (*array3d)(void**, const struct desc3*) = proc(gp, "cuArray3DCreate", 12060, 0);
  CUresult (*mipmapped)(void**, const struct desc3*, unsigned) =
      proc(gp, "cuMipmappedArrayCreate", 12060, 0);
  CUresult (*destroy)(void*) = proc(gp, "cuArrayDestroy", 12060, 0);
  CUresult (*destroy_mip)(void*) = proc(gp, "cuMipmappedArrayDestroy", 12060, 0);
  /* float4 texels (16 bytes): 64 MiB is 2048 x 2048 */
  struct desc2 d_big = {4096, big / MIB * 64, 0x20, 4}, d_small = {2048, 2048, 0x20, 4};
  PATH("cuArrayCreate", array(&arr2, &d_big), array(&arr, &d_small), destroy(arr));
  struct desc3 d3_big = {4096, 4096, big / (256 * MIB) + 1, 0x20, 4, 0};
  struct desc3 d3_small = {1024, 1024, 4, 0x20, 4, 0};
  PATH("cuArray3DCreate", array3d(&arr2, &d3_big), array3d(&arr, &d3_small), destroy(arr));
  struct desc3 m_small = {2048, 2048, 0, 0x20, 4, 0}; /* 64 MiB + 16 + 4 + ... */
  PATH("cuMipmappedArrayCreate", mipmapped(&arr2, &d3_big, 1), mipmapped(&arr, &m_small, 1),
       destroy_mip(arr));
  CUresult (*import)(void**, const struct ext_desc*) = proc(gp, "cuImportExternalMemory", 12060, 0);
  CUresult (*destroy_ext)(void*) = proc(gp, "cuDestroyExternalMemory", 12060, 0);
  struct ext_desc e_big, e_small;
  memset(&e_big, 0, sizeof(e_big));
  e_big.type = 1; /* CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD */
  e_big.size = big;
  e_small = e_big;
  e_small.size = small;
  PATH("cuImportExternalMemory", import(&arr2, &e_big), import(&arr, &e_small), destroy_ext(arr));
  printf("\n");
  return 0;
}

static int nvml(void) {
  void* lib = must(dlopen("libnvidia-ml.so.1", RTLD_NOW), "libnvidia-ml.so.1");
  int (*init)(void) = must(dlsym(lib, "nvmlInit_v2"), "nvmlInit_v2");
  int (*handle)(unsigned, void**) = must(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"), "handle");
  int (*info)(void*, unsigned long long*) = must(dlsym(lib, "nvmlDeviceGetMemoryInfo"), "info");
  int (*info2)(void*, void*) = must(dlsym(lib, "nvmlDeviceGetMemoryInfo_v2"), "info_v2");
  void* dev = NULL;
  if (init() != 0 || handle(0, &dev) != 0) return 1;
  unsigned long long m[3] = {0, 0, 0}; /* total, free, used */
  struct {
    unsigned version;
    unsigned long long total, reserved, free, used;
  } m2;
  memset(&m2, 0, sizeof(m2));
  m2.version = (unsigned)(sizeof(m2) | (2u << 24));
  int r1 = info(dev, m), r2 = info2(dev, &m2);
  printf(
      "nvml_rc=%d nvml_total_mib=%llu nvml_free_mib=%llu nvml_used_mib=%llu nvml2_rc=%d "
      "nvml2_total_mib=%llu nvml2_free_mib=%llu\n",
      r1, m[0] / MIB, m[1] / MIB, m[2] / MIB, r2, m2.total / MIB, m2.free / MIB);
  return 0;
}

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp_double(const void* x, const void* y) {
  double a = *(const double*)x, b = *(const double*)y;
  return a < b ? -1 : a > b;
}

#define MEDIAN_OF(n, body)                           \
  ({                                                 \
    static double samples[n];                        \
    for (int i_ = 0; i_ < (n); ++i_) {               \
      double t0_ = now_ns();                         \
      body;                                          \
      samples[i_] = now_ns() - t0_;                  \
    }                                                \
    qsort(samples, (n), sizeof(double), cmp_double); \
    samples[(n) / 2];                                \
  })

typedef CUresult (*Launch)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, void*, void**, void**);

static int compute(int argc, char** argv) {
  if (argc < 4) return 64;
  const double seconds = atof(argv[2]);
  const unsigned blocks = (unsigned)strtoul(argv[3], NULL, 10);
  struct api a = load("proc");
  init(&a);
  Launch launch = (Launch)proc(a.get_proc, "cuLaunchKernel", 12060, 0);
  Dl_info info;
  const int wrapped = dladdr((void*)launch, &info) != 0 && info.dli_fname != NULL &&
                      strstr(info.dli_fname, "gpulet-vram") != NULL;
  printf("ready\n");
  fflush(stdout);
  unsigned long long launches = 0;
  const double start = now_ns();
  while (now_ns() - start < seconds * 1e9) {
    if (launch((void*)1, blocks, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL) != 0) return 1;
    ++launches;
  }
  printf("launches=%llu wrapped=%d\n", launches, wrapped);
  return 0;
}

/* Medians, each over many batches of 100 calls, in ns per call. */
static int bench(int argc, char** argv) {
  (void)argc, (void)argv;
  struct api a = load("proc");
  init(&a);
  CUresult (*launch)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                     void*, void**, void**) = proc(a.get_proc, "cuLaunchKernel", 12060, 0);
  CUdeviceptr p;
  void* fn = NULL;
  double alloc_ns = MEDIAN_OF(
                        2001,
                        for (int k = 0; k < 100; ++k) {
                          a.alloc(&p, MIB);
                          a.free(p);
                        }) /
                    100;
  double proc_ns =
      MEDIAN_OF(
          2001, for (int k = 0; k < 100; ++k) { a.get_proc("cuMemAlloc", &fn, 12060, 0, NULL); }) /
      100;
  double launch_ns =
      MEDIAN_OF(
          2001, for (int k = 0; k < 100;
                     ++k) { launch((void*)1, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL); }) /
      100;
  printf("alloc_free_ns=%.1f get_proc_ns=%.1f launch_ns=%.1f\n", alloc_ns, proc_ns, launch_ns);
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2) return 1;
  const char* mode = argv[1];
  if (strcmp(mode, "fill") == 0) return fill(argc, argv);
  if (strcmp(mode, "ggml") == 0) return ggml(argc, argv);
  if (strcmp(mode, "torch") == 0) return torch();
  if (strcmp(mode, "fork") == 0) return forked(argc, argv);
  if (strcmp(mode, "hold") == 0) return hold(argc, argv);
  if (strcmp(mode, "race") == 0) return race(argc, argv);
  if (strcmp(mode, "paths") == 0) return paths(argc, argv);
  if (strcmp(mode, "nvml") == 0) return nvml();
  if (strcmp(mode, "bench") == 0) return bench(argc, argv);
  if (strcmp(mode, "compute") == 0) return compute(argc, argv);
  fprintf(stderr, "vram_app: unknown mode %s\n", mode);
  return 1;
}
