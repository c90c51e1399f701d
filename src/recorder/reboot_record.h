// RebootRecord: the reboot rung's record on the host (daemon/reboot_rung.h;
// health.reboot.file, default /var/lib/gpulet/reboots.json): each reboot it asked for, with the
// boot that asked, so that its budget and what became of each request survive the reboot. A
// JSON state file as the retired-GPU file is (recorder/retirement.h): versioned, read
// strictly (a person may edit or remove it), written atomically and fsync'd.
//
// Thread-safety: the functions are pure; a RebootRecord holds only its paths.
#ifndef GPULET_RECORDER_REBOOT_RECORD_H_
#define GPULET_RECORDER_REBOOT_RECORD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpulet::recorder {

// One reboot asked for, as the record on the host keeps it.
struct RebootRequest {
  int64_t at_unix = 0;
  std::string boot_id;            // the boot that asked
  std::string reason;             // the fault, in words
  std::vector<std::string> gpus;  // the GPUs out for it, by UUID
  std::string outcome;            // "asked", "failed: ...", "rebooted"

  bool operator==(const RebootRequest&) const = default;
};

std::string RebootRecordToJson(const std::vector<RebootRequest>& requests);
// Strict: a misspelt key or a wrong type is an error naming it.
absl::StatusOr<std::vector<RebootRequest>> RebootRecordFromJson(absl::string_view text);

// The record's file. `path`: where this process reaches it; `shown`: the host path.
class RebootRecord {
 public:
  RebootRecord(std::string path, std::string shown);
  // The requests; none when the file does not exist yet.
  absl::StatusOr<std::vector<RebootRequest>> Load() const;
  absl::Status Save(const std::vector<RebootRequest>& requests) const;
  const std::string& shown() const { return shown_; }

 private:
  std::string path_, shown_;
};

}  // namespace gpulet::recorder

#endif  // GPULET_RECORDER_REBOOT_RECORD_H_
