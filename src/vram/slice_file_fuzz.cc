// libFuzzer target for the slice file readers (vram/slice_table.h, vram/slice_file.h): a
// slice file is written by gpulet but lives in a directory every process of a container may
// write, so the library and the daemon must take any content, of any length, as an error
// that names the file or as figures, never a crash. A file whose header passes is also used
// as the library uses it: a slot claimed, an allocation granted or refused, settled, freed.
//
// Built and run by scripts/fuzz.sh; it seeds itself from the slice file gpulet writes.
//
// Thread-safety: libFuzzer calls LLVMFuzzerTestOneInput from one thread.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "vram/slice_file.h"
#include "vram/slice_format.h"
#include "vram/slice_table.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpulet::vram;  // NOLINT(google-build-using-namespace): a fuzz target
  static const std::string path = "/tmp/gpulet-slice-fuzz-" + std::to_string(getpid());
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return 0;
  if (size > 0 && write(fd, data, size) != static_cast<ssize_t>(size)) {
    close(fd);
    return 0;
  }
  close(fd);
  absl::StatusOr<SliceUsage> usage = ReadSliceUsage(path);
  if (!usage.ok() && usage.status().message().find(path) == std::string::npos) std::abort();
  if (usage.ok() && usage->in_use_bytes > 0 && usage->quota_bytes == 0) std::abort();

  SliceMap map;
  char msg[768];
  if (OpenSlice(path.c_str(), true, &map, msg, sizeof(msg)) != SliceError::kOk) {
    if (std::strstr(msg, path.c_str()) == nullptr) std::abort();
    return 0;
  }
  uint32_t slot = kNoSlot;
  if (ClaimSlot(&map, 1, &slot) == SliceError::kOk) {
    uint64_t bytes = size > 0 ? uint64_t{data[0]} << 24 : 1;
    Grant g = Reserve(&map, slot, bytes);
    if (g.granted) {
      Settle(&map, slot, bytes, bytes);
      Release(&map, slot, bytes);
    }
    (void)InUse(map);
    (void)ReclaimDead(&map, slot);
  }
  CloseSlice(&map);
  return 0;
}
