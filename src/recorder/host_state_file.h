// The JSON state files the remediation rungs keep on the host (the retired-GPU file,
// recorder/retirement.h; the reboot record, recorder/reboot_record.h): read with
// ReadRegularFile (at most 1 MiB), parsed strictly, replaced atomically (fsync'd, mode 0644,
// the directory made when missing). A file that does not exist is an empty one; any other
// error names the host path and ends with what the caller says follows until it is fixed.
//
// Thread-safety: plain functions; concurrent calls on one file are the caller's to avoid.
#ifndef GPULET_RECORDER_HOST_STATE_FILE_H_
#define GPULET_RECORDER_HOST_STATE_FILE_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gpulet::recorder {

// The file's text; nullopt when it does not exist. `what` names it for ReadRegularFile
// ("reboot record"); errors read "<shown>: <why><fix>".
absl::StatusOr<std::optional<std::string>> ReadHostStateFile(const std::string& path,
                                                             const std::string& shown,
                                                             const char* what,
                                                             absl::string_view fix);

// Replaces the file with `content`; errors read "saving <noun> to <shown>: <why>; check...".
absl::Status SaveHostStateFile(const std::string& path, const std::string& shown,
                               absl::string_view noun, absl::string_view content);

// ReadHostStateFile, then `parse` (text -> absl::StatusOr<T>): T{} when the file does not
// exist; a parse error is InvalidArgument, worded as the read errors are.
template <typename T, typename Parse>
absl::StatusOr<T> LoadHostStateFile(const std::string& path, const std::string& shown,
                                    const char* what, absl::string_view fix, Parse parse) {
  absl::StatusOr<std::optional<std::string>> text = ReadHostStateFile(path, shown, what, fix);
  if (!text.ok()) return text.status();
  if (!*text) return T{};
  absl::StatusOr<T> parsed = parse(**text);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(shown, ": ", parsed.status().message(), fix));
  }
  return parsed;
}

}  // namespace gpulet::recorder

#endif  // GPULET_RECORDER_HOST_STATE_FILE_H_
