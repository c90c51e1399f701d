#include "recorder/host_state_file.h"

#include "common/atomic_file.h"
#include "common/read_file.h"

namespace gpulet::recorder {
namespace {

constexpr size_t kMaxHostStateFileBytes = size_t{1} << 20;

}  // namespace

absl::StatusOr<std::optional<std::string>> ReadHostStateFile(const std::string& path,
                                                             const std::string& shown,
                                                             const char* what,
                                                             absl::string_view fix) {
  absl::StatusOr<std::string> text = ReadRegularFile(path, kMaxHostStateFileBytes, what);
  if (absl::IsNotFound(text.status())) return std::nullopt;
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat(shown, ": ", text.status().message(), fix));
  }
  return *std::move(text);
}

absl::Status SaveHostStateFile(const std::string& path, const std::string& shown,
                               absl::string_view noun, absl::string_view content) {
  AtomicWriteOptions options;
  options.mode = 0644;
  options.create_parents = true;
  if (absl::Status s = WriteFileAtomically(path, content, options); !s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("saving ", noun, " to ", shown, ": ", s.message(),
                                     "; check that the directory is a writable host mount"));
  }
  return absl::OkStatus();
}

}  // namespace gpulet::recorder
