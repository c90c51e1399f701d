// libFuzzer target for ReadElfInfo: the ELF reader runs on whatever file sits where
// libnvidia-ml.so.1 is expected on a host, so it must turn any bytes into an ElfInfo or an
// error status, never a crash, hang or runaway allocation. Each input is written to a
// memfd (no disk traffic, no temp-file clean-up) and read back through /proc/self/fd,
// the same open()/pread() path a real library takes. The result is also run through
// MaxGlibcNeeded and CheckCompatible, which consume what the reader produced.
//
// Build (not part of the normal build; the _fuzz.cc suffix keeps it out):
//   clang++-14 -std=c++20 -g -O1 -fsanitize=fuzzer,address -Isrc src/nvml/elf_check_fuzz.cc
//     src/nvml/elf_check.cc -lelf -labsl_status -labsl_statusor -labsl_strings
//     -labsl_str_format_internal -labsl_raw_logging_internal -o elf_check_fuzz
// A useful seed corpus is a handful of real shared libraries (e.g. /lib/x86_64-linux-gnu).
//
// Thread-safety: libFuzzer calls LLVMFuzzerTestOneInput from one thread.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/status/statusor.h"
#include "nvml/elf_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // One memfd for the whole run, truncated and rewritten per input, so the fuzzer does
  // not spend its time creating files.
  static const int fd = memfd_create("elf_check_fuzz", MFD_CLOEXEC);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (fd < 0) std::abort();
  if (ftruncate(fd, 0) != 0) std::abort();
  size_t written = 0;
  while (written < size) {
    ssize_t n = pwrite(fd, data + written, size - written, static_cast<off_t>(written));
    if (n <= 0) std::abort();
    written += static_cast<size_t>(n);
  }

  absl::StatusOr<gpulet::nvml::ElfInfo> info = gpulet::nvml::ReadElfInfo(path);
  if (info.ok()) {
    (void)gpulet::nvml::MaxGlibcNeeded(*info);
    (void)gpulet::nvml::CheckCompatible(*info, path, gpulet::nvml::ThisProcessTarget());
  }
  return 0;
}
