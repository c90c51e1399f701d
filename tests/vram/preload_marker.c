/* An image's own LD_PRELOAD library (tests/vram): says it was loaded, so that a test sees
 * it still is when gpulet's enforcement library is loaded too. */
#include <unistd.h>

__attribute__((constructor)) static void announce(void) {
  static const char kLine[] = "preload-marker loaded\n";
  ssize_t ignored = write(2, kLine, sizeof(kLine) - 1);
  (void)ignored;
}
