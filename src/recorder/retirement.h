// Retirement: the last rung of the remediation ladder (docs/remediation.md). A GPU that went
// Unhealthy again and again, each time after it had recovered (a reset, a reboot, a quiet
// period), is kept out of service across gpulet restarts and node reboots, with a condition
// that says to reseat or replace the card, while the node keeps working on its other GPUs.
//
// The rule counts the GPU's Unhealthy faults in the flight recorder's files (each is one
// episode: the recorder writes one when the GPU goes Unhealthy, and a GPU goes Unhealthy again
// only after it came back), and retires it at `faults` within `window`. It acts only on a GPU
// it can identify by both UUID and PCI address.
//
// The retired GPUs live in one JSON file on the host (health.retire.file), replaced
// atomically, read back at start and every file check, so `gpulet retired --clear` (or an
// edit) returns a card to service without a restart:
//
//   {"version": 1, "gpus": {"GPU-8a41...": {"pci_bus_id": "0000:02:00.0",
//     "since_unix": 1780000000, "reason": "3 faults within 168h: ..."}}}
//
// A file that cannot be used is an error naming the path, what is wrong and what to do; the
// daemon then retires nothing from it (it says so in the log) and keeps working.
//
// Thread-safety: pure functions and a stateless file.
#ifndef GPULET_RECORDER_RETIREMENT_H_
#define GPULET_RECORDER_RETIREMENT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "recorder/recording.h"

namespace gpulet::recorder {

struct RetiredGpu {
  std::string pci_bus_id;
  int64_t since_unix = 0;
  std::string reason;

  friend bool operator==(const RetiredGpu&, const RetiredGpu&) = default;
};
using RetiredGpus = std::map<std::string, RetiredGpu>;  // by UUID

std::string RetiredToJson(const RetiredGpus& gpus);
absl::StatusOr<RetiredGpus> RetiredFromJson(absl::string_view text);

class RetiredFile {
 public:
  // `path`: where this process reaches it; `shown`: the host path, for messages.
  RetiredFile(std::string path, std::string shown);
  // The retired GPUs; none when the file does not exist yet.
  absl::StatusOr<RetiredGpus> Load() const;
  absl::Status Save(const RetiredGpus& gpus) const;
  const std::string& shown() const { return shown_; }

 private:
  std::string path_, shown_;
};

// Why the GPU whose recordings are `faults` (any order; XID-only dumps are not faults) must
// be retired at `now`; nullopt when it keeps its place. Never for a recording without both a
// UUID and a PCI address.
std::optional<std::string> RetireReason(std::span<const RecorderDump> faults, int max_faults,
                                        absl::Duration window, absl::Time now);

}  // namespace gpulet::recorder

#endif  // GPULET_RECORDER_RETIREMENT_H_
