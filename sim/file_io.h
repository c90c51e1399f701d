// The simulator's file I/O: a size-capped read of a regular file and an atomic replace,
// with plain error strings.
//
// Why not common/read_file.h and common/atomic_file.h: those return absl::Status, and the
// simulator library links no Abseil. It is dlopen'ed in place of libnvidia-ml.so.1 and
// linked self-contained; Abseil's archives cannot go into a shared library (their
// thread-locals use the local-exec model), and its shared libraries are what the simulator
// stopped mapping into gpulet. The rules are the same: a FIFO, device or directory at the
// path is refused at once (opened non-blocking, then checked), never read.
//
// Thread-safety: no state; safe from any thread.
#ifndef GPULET_SIM_FILE_IO_H_
#define GPULET_SIM_FILE_IO_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace gpulet::sim {

enum class ReadResult { kOk, kMissing, kError };

// Reads the regular file at `path` whole into `text`, refusing one over `max_bytes`. On
// kMissing (no such file) and kError, `error` says what failed, naming `what` and the path.
ReadResult ReadCappedRegularFile(const std::string& path, size_t max_bytes, const char* what,
                                 std::string* text, std::string* error);

// Writes `content` to a temporary file beside `path` (mode 0644) and renames it over
// `path`: readers see the old file or the new one, never a part. Not fsync'ed: the
// simulator's readers need rename's atomicity, not survival of a power cut.
bool ReplaceFile(const std::string& path, std::string_view content, std::string* error);

}  // namespace gpulet::sim

#endif  // GPULET_SIM_FILE_IO_H_
