// The enforcement library's entry points: the dynamic loader's audit interface (rtld-audit,
// LD_AUDIT), which the container's environment names. The loader asks it about every
// object it loads and every symbol it binds into libcuda and libnvidia-ml, whether by
// direct link, dlsym, dlvsym or RTLD_NEXT, with glibc's own lookup rules; the library
// answers with its wrappers (hooks.h). LD_AUDIT leaves LD_PRELOAD and /etc/ld.so.preload to
// the image.
//
// Thread-safety: the loader calls these under its own lock.
#include <link.h>
#include <stdint.h>

#include "vramlib/elf_symbols.h"
#include "vramlib/hooks.h"

using gpulet::vramlib::Bind;
using gpulet::vramlib::Library;
using gpulet::vramlib::LibraryOf;
using gpulet::vramlib::NeedsLibrary;
using gpulet::vramlib::NoteLibrary;

extern "C" {

__attribute__((visibility("default"))) unsigned int la_version(unsigned int version) {
  return version < LAV_CURRENT ? version : LAV_CURRENT;
}

// libcuda and libnvidia-ml are bound *to* (their symbols pass through la_symbind); an
// object that links either directly is bound *from*, so that its PLT entries for them do
// too. Everything else is left alone, at no cost.
__attribute__((visibility("default"))) unsigned int la_objopen(struct link_map* map, Lmid_t lmid,
                                                               uintptr_t* cookie) {
  if (lmid != LM_ID_BASE) return 0;
  Library lib = LibraryOf(map->l_name);
  *cookie = static_cast<uintptr_t>(lib);
  unsigned int flags = 0;
  if (lib != Library::kNone) {
    NoteLibrary(lib, map);
    flags |= LA_FLG_BINDTO;
  }
  if (NeedsLibrary(map, "libcuda.so") || NeedsLibrary(map, "libnvidia-ml.so")) {
    flags |= LA_FLG_BINDFROM;
  }
  return flags;
}

__attribute__((visibility("default"))) uintptr_t la_symbind64(Elf64_Sym* sym, unsigned int,
                                                              uintptr_t*, uintptr_t* defcook,
                                                              unsigned int* flags,
                                                              const char* name) {
  // No per-call PLT callbacks: the binding is the whole cost.
  *flags |= LA_SYMB_NOPLTENTER | LA_SYMB_NOPLTEXIT;
  auto lib = static_cast<Library>(*defcook);
  if (lib == Library::kNone) return sym->st_value;
  return reinterpret_cast<uintptr_t>(Bind(lib, name, reinterpret_cast<void*>(sym->st_value)));
}

}  // extern "C"
