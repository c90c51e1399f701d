#include "common/malloc_arenas.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>

namespace gpulet {

bool UseOneMallocArena() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.arena_max") != nullptr) {
    return false;
  }
  return mallopt(M_ARENA_MAX, 1) == 1;
}

}  // namespace gpulet
