// The entry points the enforcement library replaces, one table of (symbol, the base name
// cuGetProcAddress knows it by, library, wrapper), and the two ways a caller reaches them:
// a binding the loader makes (direct link, dlsym, dlvsym; audit.cc) and a pointer the
// driver's cuGetProcAddress returns, matched by address to the exact ABI variant the driver
// chose for the caller's version and stream flags. A variant the table lacks (a newer
// `_v3`) is returned untouched: it works, uncounted, and GPULET_VRAM_LOG=2 says so.
//
// Thread-safety: NoteLibrary runs under the loader's lock; the rest may run on any thread
// (the real addresses are atomics, written once per library load).
#ifndef GPULET_VRAMLIB_HOOKS_H_
#define GPULET_VRAMLIB_HOOKS_H_

#include <link.h>
#include <stddef.h>

namespace gpulet::vramlib {

enum class Library : unsigned { kNone = 0, kCuda = 1, kNvml = 2 };

// The library a loaded object is, by its file name (libcuda.so*, libnvidia-ml.so*).
Library LibraryOf(const char* path);

// Resolves the real addresses of `lib`'s hooked symbols in the object just loaded.
void NoteLibrary(Library lib, const struct link_map* map);

// The address the loader should bind `symbol` of `lib` to: the wrapper when the table has
// one (recording `real`), else `real`.
void* Bind(Library lib, const char* symbol, void* real);

// For tests: the wrapper for a symbol, or nullptr.
void* WrapperFor(const char* symbol);
size_t HookCount();

}  // namespace gpulet::vramlib

#endif  // GPULET_VRAMLIB_HOOKS_H_
