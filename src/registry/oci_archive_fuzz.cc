// libFuzzer target for the OCI image archive reader (registry/oci_archive.h): the archive is
// a file a user hands `gpulet image-serve`, so any bytes must give an archive whose every
// image and manifest is served from inside it, or an error with a message, never an
// exception, a crash, a hang or a read past the end.
//
// Built and run by scripts/fuzz.sh (the _fuzz.cc suffix keeps it out of the normal build).
//
// Thread-safety: libFuzzer calls LLVMFuzzerTestOneInput from one thread.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/status/statusor.h"
#include "registry/oci_archive.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1 << 18)) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  gpulet::registry::ReadAt read = [&bytes](uint64_t offset, uint64_t n, std::string* out) {
    if (offset > bytes.size() || n > bytes.size() - offset) std::abort();  // must not happen
    *out = bytes.substr(offset, n);
    return absl::OkStatus();
  };
  absl::StatusOr<gpulet::registry::OciArchive> a =
      gpulet::registry::OciArchive::FromReader("fuzz.tar", bytes.size(), read);
  if (!a.ok()) {
    if (a.status().message().empty()) std::abort();
    return 0;
  }
  if (a->images().empty()) std::abort();
  for (const auto& [digest, d] : a->manifests()) {
    const gpulet::registry::TarEntry* blob = a->Blob(digest);
    if (blob == nullptr || blob->size != d.size || blob->offset + blob->size > bytes.size()) {
      std::abort();
    }
  }
  return 0;
}
