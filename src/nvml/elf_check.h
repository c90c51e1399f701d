// ElfCheck: decides, before gpulet dlopen()s a shared library (libnvidia-ml.so.1 and the
// libraries it pulls in), whether this process can load it at all.
//
// dlopen() of a library built against a newer glibc than the one gpulet runs with does not
// always fail cleanly: a field report showed a segfault when a Talos host's NVIDIA
// libraries were bind-mounted into gpulet's (older-glibc) container. Reading the library's
// ELF headers first lets gpulet refuse with a message that names the library, the glibc
// version it needs, the glibc version gpulet has, and what to change. The same check
// refuses a library for the wrong ELF class or machine (the driver's 32-bit compatibility
// copy, or an aarch64 library on an x86_64 node).
//
// The reader uses elfutils' libelf on a file descriptor (never mmap, so a file truncated
// underneath us cannot raise SIGBUS) and treats the file as hostile: a truncated or corrupt
// file yields an error status, never a crash (see elf_check_fuzz.cc).
//
// Thread-safety: every function is safe to call concurrently; none keeps state besides
// libelf's one-time version handshake, which is done under a function-local static.
#ifndef GPULET_NVML_ELF_CHECK_H_
#define GPULET_NVML_ELF_CHECK_H_

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gpulet::nvml {

// One entry of .gnu.version_r: the versions a library needs from one of its dependencies,
// e.g. {"libc.so.6", {"GLIBC_2.2.5", "GLIBC_2.34"}}.
struct VersionNeed {
  std::string file;
  // Every version name, in file order.
  std::vector<std::string> versions;
  // The subset of `versions` flagged VER_FLG_WEAK. ld.so only warns when a weak version
  // is missing, so these never make a library unloadable. Almost always empty.
  std::vector<std::string> weak_versions;
};

// What gpulet needs to know about a shared library's dynamic linking.
struct ElfInfo {
  int elf_class = 0;                // 32 or 64
  uint16_t machine = 0;             // e_machine, e.g. EM_X86_64 (62) or EM_AARCH64 (183)
  std::string soname;               // DT_SONAME; empty when absent
  std::vector<std::string> needed;  // DT_NEEDED, in order
  std::vector<VersionNeed> version_needs;
  // .gnu.version_d: the versions this file defines, in file order (for libc.so.6:
  // "libc.so.6", "GLIBC_2.2.5", ..., "GLIBC_2.36", "GLIBC_PRIVATE"). Empty when it defines
  // none. Read so gpulet can tell which glibc a host's libc.so.6 provides without loading it.
  std::vector<std::string> version_definitions;
};

// Reads `path`'s ELF header, dynamic section and version needs. Errors:
//   NotFound          the file does not exist;
//   PermissionDenied  it cannot be opened;
//   InvalidArgument   it is not a regular file (the message names the kind: FIFO, socket,
//                     device, directory), a symlink loop, or not an ELF file (e.g. a linker
//                     script). A FIFO or device is never read: the file is opened with
//                     O_NONBLOCK and refused after fstat, so the call does not block;
//   DataLoss          it starts like an ELF file but is truncated or corrupt;
//   FailedPrecondition  it has no dynamic section (a static executable or an object file),
//                     so it cannot be loaded with dlopen();
//   Unimplemented     its section headers were stripped (sstrip), which this reader needs.
absl::StatusOr<ElfInfo> ReadElfInfo(const std::string& path);

// A glibc release, e.g. 2.36. A third component ("GLIBC_2.2.5") is accepted and ignored:
// glibc only used three-part names for the 2.0-2.3 era baselines, and every glibc that
// can run gpulet is far newer, so it never changes a comparison that matters.
struct GlibcVersion {
  int major = 0;
  int minor = 0;

  // Parses "GLIBC_2.34", "2.36" or "GLIBC_2.2.5". nullopt for anything else, including the
  // non-numeric symbol versions GLIBC_PRIVATE and GLIBC_ABI_DT_RELR.
  static std::optional<GlibcVersion> Parse(std::string_view text);

  // "2.36".
  std::string ToString() const;

  friend auto operator<=>(const GlibcVersion&, const GlibcVersion&) = default;
};

// The glibc this process runs with, from gnu_get_libc_version(); {0, 0} if that string is
// not "X.Y[.Z]" (then no glibc comparison is made).
GlibcVersion RunningGlibcVersion();

// The highest GLIBC_X.Y version `info` needs from any dependency (libc.so.6, libm.so.6,
// libpthread.so.0, ld-linux..., any file whose versions are named GLIBC_*), ignoring
// weak needs, GLIBC_PRIVATE and GLIBC_ABI_*. nullopt when it needs none.
std::optional<GlibcVersion> MaxGlibcNeeded(const ElfInfo& info);

// The highest GLIBC_X.Y version `info` defines (a libc.so.6 defines one per release it is
// compatible with, so this is the glibc release it provides). nullopt when it defines none.
std::optional<GlibcVersion> MaxGlibcProvided(const ElfInfo& info);

// The ELF class, machine and glibc of a process that wants to load a library.
struct LoaderTarget {
  int elf_class = 0;     // 32 or 64
  uint16_t machine = 0;  // EM_NONE (0): unknown, not compared
  GlibcVersion glibc;    // {0, 0}: unknown, not compared
};

// This process: class and machine from how gpulet was compiled, glibc from
// RunningGlibcVersion().
LoaderTarget ThisProcessTarget();

// OK when a library described by `info` (read from `path`, which is only used in messages)
// can be loaded by `target`; otherwise FailedPrecondition with a message that names the
// library, what it needs, what the target has, and the fix. Split from CheckLoadable so
// tests can pose as another machine or glibc.
absl::Status CheckCompatible(const ElfInfo& info, std::string_view path,
                             const LoaderTarget& target);

// ReadElfInfo(path) then CheckCompatible(..., ThisProcessTarget()). Returns ReadElfInfo's
// error unchanged when the file cannot be read, so FailedPrecondition means "do not
// dlopen this" and other codes mean "could not tell".
absl::Status CheckLoadable(const std::string& path);

}  // namespace gpulet::nvml

#endif  // GPULET_NVML_ELF_CHECK_H_
