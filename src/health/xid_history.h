// XidHistory: what XidPolicy remembers about each GPU's past XIDs across gpulet restarts, so
// that an XID coming back after the reset or reboot NVIDIA recommends for it is recognised as
// a repeat (and escalated to a hardware inspection) even when gpulet itself restarted in
// between, as it does on every node reboot.
//
// The history is a small map, GPU (UUID, or bus id when NVML gives none) → XID → entry. An
// XidHistoryStore loads and saves it whole. FileXidHistoryStore keeps it as JSON in one file
// replaced atomically (common/atomic_file.h):
//
//   {"version": 1,
//    "gpus": {"GPU-5d1c...": {"79": {"count": 2, "last_seen_unix": 1780000000,
//                                    "boot_id": "0b6f...", "awaiting_recovery": true,
//                                    "recovery": "reboot-node", "recovered": false}}}}
//
// A file that is missing is an empty history. A file that cannot be used (not a regular
// file, unreadable, not JSON, wrong types, a newer version) is an error naming the path, what
// is wrong and what to do; XidPolicy then starts with an empty history and keeps working.
//
// Thread-safety: XidHistory is a value. A store is used by one XidPolicy, under its mutex.
#ifndef GPULET_HEALTH_XID_HISTORY_H_
#define GPULET_HEALTH_XID_HISTORY_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpulet::health {

struct XidHistoryEntry {
  int64_t count = 0;           // times seen (after de-duplication)
  int64_t last_seen_unix = 0;  // wall-clock seconds of the last one
  std::string boot_id;         // the node boot it was last seen in ("" when unknown)
  // The last one asked for a GPU reset or a node reboot that has not been seen done yet.
  bool awaiting_recovery = false;
  // Which recovery: "reset-gpu" or "reboot-node" (GpuActionName); "" when none.
  std::string recovery;
  // A GPU reset is assumed done once the GPU's XID condition cleared (its quiet period
  // passed); a reboot once the boot id changed.
  bool recovered = false;

  friend bool operator==(const XidHistoryEntry&, const XidHistoryEntry&) = default;
};

// GPU → XID → entry.
using XidHistory = std::map<std::string, std::map<int, XidHistoryEntry>>;

// The JSON form above, and its parser. Parse errors say what is wrong (the caller adds the
// path).
std::string XidHistoryToJson(const XidHistory& history);
absl::StatusOr<XidHistory> XidHistoryFromJson(absl::string_view text);

class XidHistoryStore {
 public:
  virtual ~XidHistoryStore() = default;
  // The saved history; an empty one when nothing was saved yet.
  virtual absl::StatusOr<XidHistory> Load() = 0;
  virtual absl::Status Save(const XidHistory& history) = 0;
  // Where the history lives, for messages ("/var/lib/gpulet/xid-history.json").
  virtual std::string Describe() const = 0;
};

// The history in one JSON file. The directory is created on the first save.
class FileXidHistoryStore final : public XidHistoryStore {
 public:
  explicit FileXidHistoryStore(std::string path);
  absl::StatusOr<XidHistory> Load() override;
  absl::Status Save(const XidHistory& history) override;
  std::string Describe() const override { return path_; }

 private:
  std::string path_;
};

// The largest history file gpulet reads (a few hundred bytes per GPU and XID is typical).
inline constexpr size_t kMaxXidHistoryBytes = size_t{4} << 20;

}  // namespace gpulet::health

#endif  // GPULET_HEALTH_XID_HISTORY_H_
