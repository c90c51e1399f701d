#include "vramlib/hooks.h"

#include <string.h>

#include "vram/launch_pacing.h"
#include "vramlib/cuda_abi.h"
#include "vramlib/elf_symbols.h"
#include "vramlib/quota.h"

namespace gpulet::vramlib {
namespace {

// X(symbol, base name, library, paced): every ABI variant the driver exports or
// cuGetProcAddress returns for a call that adds, frees or reports device memory (the `_v2`
// 64-bit forms, the unsuffixed 32-bit v1 forms, the per-thread-stream `_ptsz` forms), and
// cuGetProcAddress itself, which returns pointers to all of them; and, paced 1, the kernel
// and graph launches, which are wrapped only in a slice with a compute share.
#define GPULET_VRAM_HOOKS(X)                                             \
  X(cuGetProcAddress, cuGetProcAddress, kCuda, 0)                        \
  X(cuGetProcAddress_v2, cuGetProcAddress, kCuda, 0)                     \
  X(cuMemAlloc, cuMemAlloc, kCuda, 0)                                    \
  X(cuMemAlloc_v2, cuMemAlloc, kCuda, 0)                                 \
  X(cuMemAllocPitch, cuMemAllocPitch, kCuda, 0)                          \
  X(cuMemAllocPitch_v2, cuMemAllocPitch, kCuda, 0)                       \
  X(cuMemFree, cuMemFree, kCuda, 0)                                      \
  X(cuMemFree_v2, cuMemFree, kCuda, 0)                                   \
  X(cuMemAllocManaged, cuMemAllocManaged, kCuda, 0)                      \
  X(cuMemAllocAsync, cuMemAllocAsync, kCuda, 0)                          \
  X(cuMemAllocAsync_ptsz, cuMemAllocAsync, kCuda, 0)                     \
  X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, kCuda, 0)          \
  X(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync, kCuda, 0)     \
  X(cuMemFreeAsync, cuMemFreeAsync, kCuda, 0)                            \
  X(cuMemFreeAsync_ptsz, cuMemFreeAsync, kCuda, 0)                       \
  X(cuMemCreate, cuMemCreate, kCuda, 0)                                  \
  X(cuMemRelease, cuMemRelease, kCuda, 0)                                \
  X(cuArrayCreate, cuArrayCreate, kCuda, 0)                              \
  X(cuArrayCreate_v2, cuArrayCreate, kCuda, 0)                           \
  X(cuArray3DCreate, cuArray3DCreate, kCuda, 0)                          \
  X(cuArray3DCreate_v2, cuArray3DCreate, kCuda, 0)                       \
  X(cuMipmappedArrayCreate, cuMipmappedArrayCreate, kCuda, 0)            \
  X(cuArrayDestroy, cuArrayDestroy, kCuda, 0)                            \
  X(cuMipmappedArrayDestroy, cuMipmappedArrayDestroy, kCuda, 0)          \
  X(cuImportExternalMemory, cuImportExternalMemory, kCuda, 0)            \
  X(cuDestroyExternalMemory, cuDestroyExternalMemory, kCuda, 0)          \
  X(cuMemGetInfo, cuMemGetInfo, kCuda, 0)                                \
  X(cuMemGetInfo_v2, cuMemGetInfo, kCuda, 0)                             \
  X(cuDeviceTotalMem, cuDeviceTotalMem, kCuda, 0)                        \
  X(cuDeviceTotalMem_v2, cuDeviceTotalMem, kCuda, 0)                     \
  X(nvmlDeviceGetMemoryInfo, nvmlDeviceGetMemoryInfo, kNvml, 0)          \
  X(nvmlDeviceGetMemoryInfo_v2, nvmlDeviceGetMemoryInfo_v2, kNvml, 0)    \
  X(cuLaunchKernel, cuLaunchKernel, kCuda, 1)                            \
  X(cuLaunchKernel_ptsz, cuLaunchKernel, kCuda, 1)                       \
  X(cuLaunchKernelEx, cuLaunchKernelEx, kCuda, 1)                        \
  X(cuLaunchKernelEx_ptsz, cuLaunchKernelEx, kCuda, 1)                   \
  X(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel, kCuda, 1)      \
  X(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel, kCuda, 1) \
  X(cuGraphLaunch, cuGraphLaunch, kCuda, 1)                              \
  X(cuGraphLaunch_ptsz, cuGraphLaunch, kCuda, 1)

enum HookId : unsigned {
#define GPULET_VRAM_ID(symbol, base, lib, paced) k_##symbol,
  GPULET_VRAM_HOOKS(GPULET_VRAM_ID)
#undef GPULET_VRAM_ID
      kHookCount
};

void* g_real[kHookCount];

void* RealAddress(HookId id) { return __atomic_load_n(&g_real[id], __ATOMIC_ACQUIRE); }

// The driver's own function for a wrapper, typed as the wrapper.
#define REAL(symbol) reinterpret_cast<decltype(&Hook_##symbol)>(RealAddress(k_##symbol))
// A wrapper runs only after its real function was bound; 3 (NOT_INITIALIZED) otherwise.
#define CALL_REAL(symbol, ...) (RealAddress(k_##symbol) == nullptr ? 3 : REAL(symbol)(__VA_ARGS__))

// An allocation: admitted against the quota first, counted as `used()` bytes under `key()`
// when the driver succeeds.
template <typename Call, typename Used, typename Key>
CUresult Counted(uint64_t bytes, const char* call, Kind kind, Call real, Used used, Key key) {
  Ticket t = Admit(bytes, call);
  if (!t.granted) return kCudaErrorOutOfMemory;
  CUresult r = real();
  if (r == kCudaSuccess) {
    Admitted(t, used(), kind, key());
  } else {
    Admitted(t, 0, kind, 0);
  }
  return r;
}

template <typename Call>
CUresult CountedFree(Kind kind, uint64_t key, Call real) {
  uint64_t bytes = Take(kind, key);
  CUresult r = real();
  if (r == kCudaSuccess) {
    Returned(bytes);
  } else {
    Restore(kind, key, bytes);
  }
  return r;
}

// Bytes per element of a CUarray_format (cuda.h): 8-, 16- and 32-bit integers, half and
// float; 4 bytes per channel for any other format.
uint64_t FormatBytes(int format) {
  switch (format) {
    case 0x01:  // CU_AD_FORMAT_UNSIGNED_INT8
    case 0x08:  // CU_AD_FORMAT_SIGNED_INT8
      return 1;
    case 0x02:  // CU_AD_FORMAT_UNSIGNED_INT16
    case 0x09:  // CU_AD_FORMAT_SIGNED_INT16
    case 0x10:  // CU_AD_FORMAT_HALF
      return 2;
    default:  // 0x03, 0x0a, 0x20 (32-bit), and formats not listed
      return 4;
  }
}

uint64_t Dim(uint64_t d) { return d == 0 ? 1 : d; }

uint64_t ArrayBytes(uint64_t w, uint64_t h, uint64_t d, int format, unsigned channels) {
  return Dim(w) * Dim(h) * Dim(d) * FormatBytes(format) * (channels == 0 ? 1 : channels);
}

uint64_t MipmappedBytes(const CUDA_ARRAY3D_DESCRIPTOR* desc, unsigned levels) {
  uint64_t w = Dim(desc->Width), h = Dim(desc->Height), d = Dim(desc->Depth), total = 0;
  for (unsigned i = 0; i < (levels == 0 ? 1 : levels); ++i) {
    total += ArrayBytes(w, h, d, desc->Format, desc->NumChannels);
    w = w > 1 ? w / 2 : 1;
    h = h > 1 ? h / 2 : 1;
    d = d > 1 ? d / 2 : 1;
  }
  return total;
}

uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

template <typename T>
void ClampAs(T* free_out, T* total_out, uint64_t real_free, uint64_t real_total) {
  ClampMemory(CurrentView(), &real_free, &real_total);
  const uint64_t max = static_cast<T>(~T{0});
  if (free_out != nullptr) *free_out = static_cast<T>(real_free > max ? max : real_free);
  if (total_out != nullptr) *total_out = static_cast<T>(real_total > max ? max : real_total);
}

void* Redirect(const char* base, void* pfn);

// ---- cuGetProcAddress -------------------------------------------------------------------

CUresult Hook_cuGetProcAddress(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags) {
  CUresult r = CALL_REAL(cuGetProcAddress, symbol, pfn, cuda_version, flags);
  if (r == kCudaSuccess && symbol != nullptr && pfn != nullptr && *pfn != nullptr) {
    *pfn = Redirect(symbol, *pfn);
  }
  return r;
}

CUresult Hook_cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version,
                                  cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
  CUresult r = CALL_REAL(cuGetProcAddress_v2, symbol, pfn, cuda_version, flags, status);
  if (r == kCudaSuccess && symbol != nullptr && pfn != nullptr && *pfn != nullptr) {
    *pfn = Redirect(symbol, *pfn);
  }
  return r;
}

// ---- linear allocations -----------------------------------------------------------------

CUresult Hook_cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  return Counted(
      bytes, "cuMemAlloc", Kind::kDevicePtr, [&] { return CALL_REAL(cuMemAlloc_v2, dptr, bytes); },
      [&] { return bytes; }, [&] { return *dptr; });
}

CUresult Hook_cuMemAlloc(CUdeviceptr_v1* dptr, unsigned int bytes) {
  return Counted(
      bytes, "cuMemAlloc", Kind::kDevicePtr, [&] { return CALL_REAL(cuMemAlloc, dptr, bytes); },
      [&] { return uint64_t{bytes}; }, [&] { return uint64_t{*dptr}; });
}

// The pitch is the driver's choice (a row aligned to at most 512 bytes): the grant covers
// that, and the allocation counts pitch × height.
CUresult Hook_cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                                 unsigned int element_bytes) {
  return Counted(
      RoundUp(width, 512) * height, "cuMemAllocPitch", Kind::kDevicePtr,
      [&] { return CALL_REAL(cuMemAllocPitch_v2, dptr, pitch, width, height, element_bytes); },
      [&] { return uint64_t{*pitch} * height; }, [&] { return *dptr; });
}

CUresult Hook_cuMemAllocPitch(CUdeviceptr_v1* dptr, unsigned int* pitch, unsigned int width,
                              unsigned int height, unsigned int element_bytes) {
  return Counted(
      RoundUp(width, 512) * height, "cuMemAllocPitch", Kind::kDevicePtr,
      [&] { return CALL_REAL(cuMemAllocPitch, dptr, pitch, width, height, element_bytes); },
      [&] { return uint64_t{*pitch} * height; }, [&] { return uint64_t{*dptr}; });
}

CUresult Hook_cuMemFree_v2(CUdeviceptr dptr) {
  return CountedFree(Kind::kDevicePtr, dptr, [&] { return CALL_REAL(cuMemFree_v2, dptr); });
}

CUresult Hook_cuMemFree(CUdeviceptr_v1 dptr) {
  return CountedFree(Kind::kDevicePtr, dptr, [&] { return CALL_REAL(cuMemFree, dptr); });
}

// Managed memory counts at its full size: the driver may place all of it in VRAM.
CUresult Hook_cuMemAllocManaged(CUdeviceptr* dptr, size_t bytes, unsigned int flags) {
  return Counted(
      bytes, "cuMemAllocManaged", Kind::kDevicePtr,
      [&] { return CALL_REAL(cuMemAllocManaged, dptr, bytes, flags); }, [&] { return bytes; },
      [&] { return *dptr; });
}

// Stream-ordered allocations count from the call until their free is enqueued.
CUresult Hook_cuMemAllocAsync(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  return Counted(
      bytes, "cuMemAllocAsync", Kind::kDevicePtr,
      [&] { return CALL_REAL(cuMemAllocAsync, dptr, bytes, stream); }, [&] { return bytes; },
      [&] { return *dptr; });
}

CUresult Hook_cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  return Counted(
      bytes, "cuMemAllocAsync", Kind::kDevicePtr,
      [&] { return CALL_REAL(cuMemAllocAsync_ptsz, dptr, bytes, stream); }, [&] { return bytes; },
      [&] { return *dptr; });
}

CUresult Hook_cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                                      CUstream stream) {
  return Counted(
      bytes, "cuMemAllocFromPoolAsync", Kind::kDevicePtr,
      [&] { return CALL_REAL(cuMemAllocFromPoolAsync, dptr, bytes, pool, stream); },
      [&] { return bytes; }, [&] { return *dptr; });
}

CUresult Hook_cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                                           CUstream stream) {
  return Counted(
      bytes, "cuMemAllocFromPoolAsync", Kind::kDevicePtr,
      [&] { return CALL_REAL(cuMemAllocFromPoolAsync_ptsz, dptr, bytes, pool, stream); },
      [&] { return bytes; }, [&] { return *dptr; });
}

CUresult Hook_cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  return CountedFree(Kind::kDevicePtr, dptr,
                     [&] { return CALL_REAL(cuMemFreeAsync, dptr, stream); });
}

CUresult Hook_cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) {
  return CountedFree(Kind::kDevicePtr, dptr,
                     [&] { return CALL_REAL(cuMemFreeAsync_ptsz, dptr, stream); });
}

// ---- virtual memory management ----------------------------------------------------------

// Physical memory counts when created on a device; host and host-NUMA locations (CUDA 12.2
// and 13) are system memory and pass untouched. Mapping adds nothing: the memory was
// counted when created, however many times it is mapped.
CUresult Hook_cuMemCreate(CUmemGenericAllocationHandle* handle, size_t bytes,
                          const CUmemAllocationProp* prop, unsigned long long flags) {
  if (prop == nullptr || prop->location.type != kMemLocationDevice) {
    return CALL_REAL(cuMemCreate, handle, bytes, prop, flags);
  }
  return Counted(
      bytes, "cuMemCreate", Kind::kMemHandle,
      [&] { return CALL_REAL(cuMemCreate, handle, bytes, prop, flags); }, [&] { return bytes; },
      [&] { return *handle; });
}

CUresult Hook_cuMemRelease(CUmemGenericAllocationHandle handle) {
  return CountedFree(Kind::kMemHandle, handle, [&] { return CALL_REAL(cuMemRelease, handle); });
}

// ---- arrays -----------------------------------------------------------------------------

CUresult Hook_cuArrayCreate_v2(CUarray* array, const CUDA_ARRAY_DESCRIPTOR* desc) {
  if (desc == nullptr) return CALL_REAL(cuArrayCreate_v2, array, desc);
  const uint64_t bytes = ArrayBytes(desc->Width, desc->Height, 1, desc->Format, desc->NumChannels);
  return Counted(
      bytes, "cuArrayCreate", Kind::kArray,
      [&] { return CALL_REAL(cuArrayCreate_v2, array, desc); }, [&] { return bytes; },
      [&] { return reinterpret_cast<uint64_t>(*array); });
}

CUresult Hook_cuArrayCreate(CUarray* array, const CUDA_ARRAY_DESCRIPTOR_v1* desc) {
  if (desc == nullptr) return CALL_REAL(cuArrayCreate, array, desc);
  const uint64_t bytes = ArrayBytes(desc->Width, desc->Height, 1, desc->Format, desc->NumChannels);
  return Counted(
      bytes, "cuArrayCreate", Kind::kArray, [&] { return CALL_REAL(cuArrayCreate, array, desc); },
      [&] { return bytes; }, [&] { return reinterpret_cast<uint64_t>(*array); });
}

CUresult Hook_cuArray3DCreate_v2(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  if (desc == nullptr) return CALL_REAL(cuArray3DCreate_v2, array, desc);
  const uint64_t bytes =
      ArrayBytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels);
  return Counted(
      bytes, "cuArray3DCreate", Kind::kArray,
      [&] { return CALL_REAL(cuArray3DCreate_v2, array, desc); }, [&] { return bytes; },
      [&] { return reinterpret_cast<uint64_t>(*array); });
}

CUresult Hook_cuArray3DCreate(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR_v1* desc) {
  if (desc == nullptr) return CALL_REAL(cuArray3DCreate, array, desc);
  const uint64_t bytes =
      ArrayBytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels);
  return Counted(
      bytes, "cuArray3DCreate", Kind::kArray,
      [&] { return CALL_REAL(cuArray3DCreate, array, desc); }, [&] { return bytes; },
      [&] { return reinterpret_cast<uint64_t>(*array); });
}

CUresult Hook_cuMipmappedArrayCreate(CUmipmappedArray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                     unsigned int levels) {
  if (desc == nullptr) return CALL_REAL(cuMipmappedArrayCreate, array, desc, levels);
  const uint64_t bytes = MipmappedBytes(desc, levels);
  return Counted(
      bytes, "cuMipmappedArrayCreate", Kind::kMipmapped,
      [&] { return CALL_REAL(cuMipmappedArrayCreate, array, desc, levels); }, [&] { return bytes; },
      [&] { return reinterpret_cast<uint64_t>(*array); });
}

CUresult Hook_cuArrayDestroy(CUarray array) {
  return CountedFree(Kind::kArray, reinterpret_cast<uint64_t>(array),
                     [&] { return CALL_REAL(cuArrayDestroy, array); });
}

CUresult Hook_cuMipmappedArrayDestroy(CUmipmappedArray array) {
  return CountedFree(Kind::kMipmapped, reinterpret_cast<uint64_t>(array),
                     [&] { return CALL_REAL(cuMipmappedArrayDestroy, array); });
}

// ---- imports ----------------------------------------------------------------------------

// Memory another API allocated (Vulkan, OpenGL, a dma-buf) and imported here counts at the
// size the import names: CUDA's own allocations never saw it.
CUresult Hook_cuImportExternalMemory(CUexternalMemory* mem,
                                     const CUDA_EXTERNAL_MEMORY_HANDLE_DESC* desc) {
  if (desc == nullptr) return CALL_REAL(cuImportExternalMemory, mem, desc);
  return Counted(
      desc->size, "cuImportExternalMemory", Kind::kExternalMemory,
      [&] { return CALL_REAL(cuImportExternalMemory, mem, desc); },
      [&] { return uint64_t{desc->size}; }, [&] { return reinterpret_cast<uint64_t>(*mem); });
}

CUresult Hook_cuDestroyExternalMemory(CUexternalMemory mem) {
  return CountedFree(Kind::kExternalMemory, reinterpret_cast<uint64_t>(mem),
                     [&] { return CALL_REAL(cuDestroyExternalMemory, mem); });
}

// ---- what the application sees ----------------------------------------------------------

CUresult Hook_cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  size_t f = 0, t = 0;
  CUresult r = CALL_REAL(cuMemGetInfo_v2, &f, &t);
  if (r == kCudaSuccess) ClampAs(free_bytes, total_bytes, f, t);
  return r;
}

CUresult Hook_cuMemGetInfo(unsigned int* free_bytes, unsigned int* total_bytes) {
  unsigned int f = 0, t = 0;
  CUresult r = CALL_REAL(cuMemGetInfo, &f, &t);
  if (r == kCudaSuccess) ClampAs(free_bytes, total_bytes, f, t);
  return r;
}

CUresult Hook_cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  CUresult r = CALL_REAL(cuDeviceTotalMem_v2, bytes, dev);
  if (r == kCudaSuccess && bytes != nullptr) ClampAs<size_t>(nullptr, bytes, 0, *bytes);
  return r;
}

CUresult Hook_cuDeviceTotalMem(unsigned int* bytes, CUdevice dev) {
  CUresult r = CALL_REAL(cuDeviceTotalMem, bytes, dev);
  if (r == kCudaSuccess && bytes != nullptr) ClampAs<unsigned int>(nullptr, bytes, 0, *bytes);
  return r;
}

// NVML inside the container reports the same as the driver API (Ollama sizes from NVML):
// total the quota, free what the slice has left, used the rest (with nothing "reserved" in
// the v2 struct: the driver's reserve is outside the quota).
template <typename Memory>
void ClampNvml(Memory* memory) {
  View v = CurrentView();
  if (!v.enforced && !v.fail_closed) return;
  uint64_t f = memory->free, t = memory->total;
  ClampMemory(v, &f, &t);
  memory->total = t;
  memory->free = f;
  memory->used = t - f;
  if constexpr (requires { memory->reserved; }) memory->reserved = 0;
}

nvmlReturn_t Hook_nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  nvmlReturn_t r = CALL_REAL(nvmlDeviceGetMemoryInfo, device, memory);
  if (r == kNvmlSuccess && memory != nullptr) ClampNvml(memory);
  return r;
}

nvmlReturn_t Hook_nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  nvmlReturn_t r = CALL_REAL(nvmlDeviceGetMemoryInfo_v2, device, memory);
  if (r == kNvmlSuccess && memory != nullptr) ClampNvml(memory);
  return r;
}

// ---- kernel launches (compute share) -----------------------------------------------------

// Each launch waits for its turn at the slice's launch rate (vram/launch_pacing.h), then goes
// to the driver unchanged.
CUresult Hook_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                             unsigned by, unsigned bz, unsigned shared, CUstream stream,
                             void** params, void** extra) {
  PaceLaunch(vram::KernelLaunchCost(gx, gy, gz));
  return CALL_REAL(cuLaunchKernel, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra);
}

CUresult Hook_cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                  unsigned by, unsigned bz, unsigned shared, CUstream stream,
                                  void** params, void** extra) {
  PaceLaunch(vram::KernelLaunchCost(gx, gy, gz));
  return CALL_REAL(cuLaunchKernel_ptsz, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra);
}

uint64_t ConfigCost(const CUlaunchConfig* config) {
  return config == nullptr
             ? 1
             : vram::KernelLaunchCost(config->gridDimX, config->gridDimY, config->gridDimZ);
}

CUresult Hook_cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params,
                               void** extra) {
  PaceLaunch(ConfigCost(config));
  return CALL_REAL(cuLaunchKernelEx, config, f, params, extra);
}

CUresult Hook_cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params,
                                    void** extra) {
  PaceLaunch(ConfigCost(config));
  return CALL_REAL(cuLaunchKernelEx_ptsz, config, f, params, extra);
}

CUresult Hook_cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                        unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                        CUstream stream, void** params) {
  PaceLaunch(vram::KernelLaunchCost(gx, gy, gz));
  return CALL_REAL(cuLaunchCooperativeKernel, f, gx, gy, gz, bx, by, bz, shared, stream, params);
}

CUresult Hook_cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                             unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                             CUstream stream, void** params) {
  PaceLaunch(vram::KernelLaunchCost(gx, gy, gz));
  return CALL_REAL(cuLaunchCooperativeKernel_ptsz, f, gx, gy, gz, bx, by, bz, shared, stream,
                   params);
}

CUresult Hook_cuGraphLaunch(CUgraphExec graph, CUstream stream) {
  PaceLaunch(vram::kGraphLaunchCost);
  return CALL_REAL(cuGraphLaunch, graph, stream);
}

CUresult Hook_cuGraphLaunch_ptsz(CUgraphExec graph, CUstream stream) {
  PaceLaunch(vram::kGraphLaunchCost);
  return CALL_REAL(cuGraphLaunch_ptsz, graph, stream);
}

struct Hook {
  const char* symbol;
  const char* base;
  Library library;
  bool paced;  // a launch: wrapped only when the slice has a compute share
  void* wrapper;
};

// The wrapper a caller gets for hook `h`, whose real function is `real`.
void* WrapperOrReal(const Hook& h, void* real) {
  return h.paced && !ComputeShareOn() ? real : h.wrapper;
}

const Hook kHooks[kHookCount] = {
#define GPULET_VRAM_ENTRY(symbol, base, lib, paced) \
  {#symbol, #base, Library::lib, paced != 0, reinterpret_cast<void*>(&Hook_##symbol)},
    GPULET_VRAM_HOOKS(GPULET_VRAM_ENTRY)
#undef GPULET_VRAM_ENTRY
};

void* Redirect(const char* base, void* pfn) {
  bool known_base = false;
  for (unsigned i = 0; i < kHookCount; ++i) {
    if (kHooks[i].library != Library::kCuda || strcmp(kHooks[i].base, base) != 0) continue;
    known_base = true;
    if (RealAddress(static_cast<HookId>(i)) == pfn) return WrapperOrReal(kHooks[i], pfn);
  }
  if (known_base) {
    Log(2,
        "cuGetProcAddress(\"%s\") returned an ABI variant this library does not know; "
        "it is forwarded untouched and not counted",
        base);
  }
  return pfn;
}

bool EndsWithFile(const char* path, const char* prefix) {
  const char* slash = strrchr(path, '/');
  const char* file = slash != nullptr ? slash + 1 : path;
  return strncmp(file, prefix, strlen(prefix)) == 0;
}

}  // namespace

Library LibraryOf(const char* path) {
  if (path == nullptr) return Library::kNone;
  if (EndsWithFile(path, "libcuda.so")) return Library::kCuda;
  if (EndsWithFile(path, "libnvidia-ml.so")) return Library::kNvml;
  return Library::kNone;
}

void NoteLibrary(Library lib, const struct link_map* map) {
  for (unsigned i = 0; i < kHookCount; ++i) {
    if (kHooks[i].library != lib) continue;
    void* real = FindDefinedSymbol(map, kHooks[i].symbol);
    __atomic_store_n(&g_real[i], real, __ATOMIC_RELEASE);
  }
}

void* Bind(Library lib, const char* symbol, void* real) {
  for (unsigned i = 0; i < kHookCount; ++i) {
    if (kHooks[i].library != lib || strcmp(kHooks[i].symbol, symbol) != 0) continue;
    __atomic_store_n(&g_real[i], real, __ATOMIC_RELEASE);
    return WrapperOrReal(kHooks[i], real);
  }
  return real;
}

void* WrapperFor(const char* symbol) {
  for (const Hook& h : kHooks) {
    if (strcmp(h.symbol, symbol) == 0) return h.wrapper;
  }
  return nullptr;
}

size_t HookCount() { return kHookCount; }

}  // namespace gpulet::vramlib
