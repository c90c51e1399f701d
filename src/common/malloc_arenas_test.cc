#include "common/malloc_arenas.h"

#include <gtest/gtest.h>
#include <malloc.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace gpulet {
namespace {

// The arenas glibc has made so far: one <heap nr="..."> element each in malloc_info's XML.
int Arenas() {
  char* buf = nullptr;
  size_t size = 0;
  FILE* out = open_memstream(&buf, &size);
  if (out == nullptr) return -1;
  malloc_info(0, out);
  std::fclose(out);
  const std::string xml(buf, size);
  std::free(buf);
  int n = 0;
  for (size_t at = xml.find("<heap nr="); at != std::string::npos;
       at = xml.find("<heap nr=", at + 1)) {
    ++n;
  }
  return n;
}

// Threads that allocate at the same time, each holding its blocks until all have some.
void AllocateFromThreads(int threads) {
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([] {
      std::vector<void*> blocks;
      for (int i = 0; i < 2000; ++i) blocks.push_back(std::malloc(64 + i % 512));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      for (void* b : blocks) std::free(b);
    });
  }
  for (std::thread& w : workers) w.join();
}

// In a freshly started copy of this test binary (a threadsafe death test re-executes it),
// so that no earlier test's arenas are counted.
TEST(MallocArenasTest, AllThreadsShareTheMainArena) {
#if GPULET_SANITIZED
  GTEST_SKIP() << "AddressSanitizer replaces glibc's malloc: no arenas to count";
#endif
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        unsetenv("GLIBC_TUNABLES");
        if (!UseOneMallocArena()) std::_Exit(2);
        AllocateFromThreads(8);
        std::_Exit(Arenas() == 1 ? 0 : 3);
      },
      ::testing::ExitedWithCode(0), "");
  // The control: without the limit, the same threads make arenas of their own.
  EXPECT_EXIT(
      {
        unsetenv("GLIBC_TUNABLES");
        AllocateFromThreads(8);
        std::_Exit(Arenas() > 1 ? 0 : 4);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(MallocArenasTest, AnOperatorsTunableWins) {
  setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=4", 1);
  EXPECT_FALSE(UseOneMallocArena());
  unsetenv("GLIBC_TUNABLES");
}

}  // namespace
}  // namespace gpulet
