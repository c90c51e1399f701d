// WriteFileAtomically: the one way gpulet replaces a file that others read while it runs
// (the CDI spec, the node-feature-discovery labels file, `gpulet cdi`/`labels` output, the
// simulator's state): readers see the old file or the whole new one, never a part.
//
// How: a temporary file in the same directory (hidden, and ending in neither .yaml nor
// .json, so CDI and NFD scanners that watch the directory skip it), written in full,
// chmod to `mode`, fsync'd (unless `durable` is off), renamed over the target, and the
// directory fsync'd. On any failure the temporary file is removed and the target is left
// as it was.
//
// Errors name the target, the failing step and errno's text, with a code callers can act
// on: NotFound when the directory is missing (and create_parents is off), PermissionDenied
// for EACCES, EPERM and EROFS, InvalidArgument for a path that names a directory, Internal
// otherwise. Callers add what to do in their own context.
//
// Thread-safety: safe to call concurrently, also for one path (the last rename wins).
#ifndef GPULET_COMMON_ATOMIC_FILE_H_
#define GPULET_COMMON_ATOMIC_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gpulet {

struct AtomicWriteOptions {
  unsigned mode = 0644;
  // Create missing parent directories (mode 0755), as `mkdir -p` would.
  bool create_parents = false;
  // fsync the file and the directory. Off only where a power cut losing the write is
  // harmless and fsync's latency is not (the simulator's state file under test load).
  bool durable = true;
};

absl::Status WriteFileAtomically(const std::string& path, absl::string_view content,
                                 const AtomicWriteOptions& options = {});

}  // namespace gpulet

#endif  // GPULET_COMMON_ATOMIC_FILE_H_
