#include "vramlib/elf_symbols.h"

#include <elf.h>
#include <stdint.h>
#include <string.h>

namespace gpulet::vramlib {
namespace {

struct DynamicInfo {
  const ElfW(Sym) * symtab = nullptr;
  const char* strtab = nullptr;
  const uint32_t* gnu_hash = nullptr;
  const ElfW(Word) * sysv_hash = nullptr;
  const ElfW(Half) * versym = nullptr;
};

// Before relocation a dynamic entry holds an offset from the load address, after it the
// address (where the loader relocates .dynamic in place); an offset is below l_addr.
uintptr_t Address(const struct link_map* map, ElfW(Addr) p) {
  return p < map->l_addr ? map->l_addr + p : p;
}

DynamicInfo ReadDynamic(const struct link_map* map) {
  DynamicInfo info;
  if (map == nullptr || map->l_ld == nullptr) return info;
  for (const ElfW(Dyn)* d = map->l_ld; d->d_tag != DT_NULL; ++d) {
    uintptr_t p = Address(map, d->d_un.d_ptr);
    switch (d->d_tag) {
      case DT_SYMTAB:
        info.symtab = reinterpret_cast<const ElfW(Sym)*>(p);
        break;
      case DT_STRTAB:
        info.strtab = reinterpret_cast<const char*>(p);
        break;
      case DT_GNU_HASH:
        info.gnu_hash = reinterpret_cast<const uint32_t*>(p);
        break;
      case DT_HASH:
        info.sysv_hash = reinterpret_cast<const ElfW(Word)*>(p);
        break;
      case DT_VERSYM:
        info.versym = reinterpret_cast<const ElfW(Half)*>(p);
        break;
      default:
        break;
    }
  }
  return info;
}

uint32_t GnuHash(const char* s) {
  uint32_t h = 5381;
  for (; *s != '\0'; ++s) h = h * 33 + static_cast<unsigned char>(*s);
  return h;
}

uint32_t SysvHash(const char* s) {
  uint32_t h = 0;
  for (; *s != '\0'; ++s) {
    h = (h << 4) + static_cast<unsigned char>(*s);
    uint32_t g = h & 0xf0000000u;
    if (g != 0) h ^= g >> 24;
    h &= ~g;
  }
  return h;
}

bool Matches(const DynamicInfo& info, uint32_t index, const char* name) {
  const ElfW(Sym)& sym = info.symtab[index];
  if (sym.st_shndx == SHN_UNDEF || sym.st_value == 0) return false;
  const int type = ELF64_ST_TYPE(sym.st_info);
  if (type != STT_FUNC && type != STT_OBJECT && type != STT_NOTYPE) return false;
  if (info.versym != nullptr && (info.versym[index] & 0x8000) != 0) return false;
  return strcmp(info.strtab + sym.st_name, name) == 0;
}

}  // namespace

void* FindDefinedSymbol(const struct link_map* map, const char* name) {
  DynamicInfo info = ReadDynamic(map);
  if (info.symtab == nullptr || info.strtab == nullptr) return nullptr;
  auto at = [map, &info](uint32_t index) -> void* {
    return reinterpret_cast<void*>(map->l_addr + info.symtab[index].st_value);
  };
  if (info.gnu_hash != nullptr) {
    const uint32_t nbuckets = info.gnu_hash[0];
    const uint32_t symoffset = info.gnu_hash[1];
    const uint32_t bloom_size = info.gnu_hash[2];
    if (nbuckets == 0) return nullptr;
    const auto* bloom = reinterpret_cast<const ElfW(Addr)*>(info.gnu_hash + 4);
    const auto* buckets = reinterpret_cast<const uint32_t*>(bloom + bloom_size);
    const uint32_t* chain = buckets + nbuckets;
    const uint32_t h = GnuHash(name);
    uint32_t index = buckets[h % nbuckets];
    if (index < symoffset) return nullptr;
    for (;; ++index) {
      const uint32_t ch = chain[index - symoffset];
      if ((ch | 1u) == (h | 1u) && Matches(info, index, name)) return at(index);
      if ((ch & 1u) != 0) break;
    }
    return nullptr;
  }
  if (info.sysv_hash != nullptr) {
    const uint32_t nbucket = info.sysv_hash[0];
    if (nbucket == 0) return nullptr;
    const ElfW(Word)* bucket = info.sysv_hash + 2;
    const ElfW(Word)* chain = bucket + nbucket;
    for (uint32_t i = bucket[SysvHash(name) % nbucket]; i != STN_UNDEF; i = chain[i]) {
      if (Matches(info, i, name)) return at(i);
    }
  }
  return nullptr;
}

bool NeedsLibrary(const struct link_map* map, const char* soname_prefix) {
  DynamicInfo info = ReadDynamic(map);
  if (info.strtab == nullptr) return false;
  const size_t n = strlen(soname_prefix);
  for (const ElfW(Dyn)* d = map->l_ld; d->d_tag != DT_NULL; ++d) {
    if (d->d_tag == DT_NEEDED && strncmp(info.strtab + d->d_un.d_val, soname_prefix, n) == 0) {
      return true;
    }
  }
  return false;
}

}  // namespace gpulet::vramlib
