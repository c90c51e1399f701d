// FileKindName: what a file of a given mode is, in the words gpulet's messages use.
//
// Header-only and free of Abseil, so that the NVML simulator library, which links neither
// `gpulet_common` nor Abseil (sim/file_io.h), names file kinds the same way
// common/read_file.h does.
//
// Thread-safety: a pure function; safe from any thread.
#ifndef GPULET_COMMON_FILE_KIND_H_
#define GPULET_COMMON_FILE_KIND_H_

#include <sys/stat.h>

namespace gpulet {

// "a regular file", "a directory", "a FIFO (named pipe)", "a socket", "a character device",
// "a block device" or "not a regular file".
inline const char* FileKindName(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

}  // namespace gpulet

#endif  // GPULET_COMMON_FILE_KIND_H_
