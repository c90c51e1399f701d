// Looks a defined symbol up in a loaded object's dynamic symbol table, by the object's
// link_map, without dlsym: the audit interface hands the library link_maps, and a dlsym
// from the audit namespace into the application's would itself be audited.
//
// Reads DT_GNU_HASH (or DT_HASH) as the ELF gABI and the GNU hash section define it. Skips
// undefined, hidden-version and IFUNC entries (an IFUNC's address is its resolver).
//
// Thread-safety: reads only the mapped object, which the loader no longer changes.
#ifndef GPULET_VRAMLIB_ELF_SYMBOLS_H_
#define GPULET_VRAMLIB_ELF_SYMBOLS_H_

#include <link.h>

namespace gpulet::vramlib {

// The address of `name` defined in `map`'s object, or nullptr.
void* FindDefinedSymbol(const struct link_map* map, const char* name);

// Whether `map`'s object lists `soname_prefix` (e.g. "libcuda.so") among its DT_NEEDED.
bool NeedsLibrary(const struct link_map* map, const char* soname_prefix);

}  // namespace gpulet::vramlib

#endif  // GPULET_VRAMLIB_ELF_SYMBOLS_H_
