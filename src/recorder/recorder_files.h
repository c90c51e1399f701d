// The flight recorder's files: a RecorderDump as JSON, and the directory on the host that
// keeps the newest dumps of each GPU across gpulet restarts and node reboots
// (health.recorder.dir, default /var/lib/gpulet/recorder).
//
// One file per fault, named <gpu>-<fault unix ms>.json, mode 0640 (it names pods and
// processes), written atomically and durably (fsync'd: the fault may be followed by a reboot
// at once). The JSON keeps the samples in columns:
//
//   {"version": 1, "gpu": {"uuid": "GPU-...", "name": "...", "pci_bus_id": "...", "index": 0},
//    "node": "...", "boot_id": "...", "driver_version": "...", "gpulet_version": "...",
//    "fault": {"at_ms": 1780000000000, "what": "Unhealthy: XID 79: ...", "health": "Unhealthy"},
//    "interval_ms": 1000,
//    "columns": ["at_ms", "answering", "nvml_ms", ...], "samples": [[1780000000000, 1, 2, ...]],
//    "events": [{"at_ms": ..., "kind": "xid", "xid": 79, "text": "NVRM: Xid (PCI:...): 79, ..."}]}
//
// Parsing is strict about what it knows (types, kinds, row widths) and names what is wrong;
// columns it does not know are skipped (a newer gpulet may add some), so an older
// `gpulet postmortem` still reads a newer file.
//
// Thread-safety: pure functions; RecorderFiles keeps no state but its directory.
#ifndef GPULET_RECORDER_RECORDER_FILES_H_
#define GPULET_RECORDER_RECORDER_FILES_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "recorder/recording.h"

namespace gpulet::recorder {

std::string DumpToJson(const RecorderDump& dump);
absl::StatusOr<RecorderDump> DumpFromJson(absl::string_view text);

// The largest recorder file read (a 30-minute recording at 1 s is about 150 KiB).
inline constexpr size_t kMaxRecorderFileBytes = size_t{16} << 20;
// Dumps kept per GPU; older ones are removed when a new one is written.
inline constexpr size_t kRecorderFilesPerGpu = 8;

class RecorderFiles {
 public:
  // `dir`: where this process reaches the directory (the host path under --host-root);
  // `shown`: the host path, for messages.
  RecorderFiles(std::string dir, std::string shown);

  // Writes `dump`, creating the directory, and removes the GPU's oldest files beyond
  // kRecorderFilesPerGpu. Returns the file's path. Errors name the file and what to do.
  absl::StatusOr<std::string> Write(const RecorderDump& dump) const;

  struct Loaded {
    std::string path;
    absl::StatusOr<RecorderDump> dump;  // the error names the file and says what to do
  };
  // Every *.json file in the directory, oldest fault first (by the file name's time; a
  // file that fails to parse sorts by name). A missing directory is no files.
  std::vector<Loaded> LoadAll() const;

  const std::string& shown() const { return shown_; }

 private:
  std::string dir_;
  std::string shown_;
};

// The file name of `dump`: "<gpu>-<fault_ms>.json", the GPU's name reduced to [A-Za-z0-9-]
// so that no UUID or bus id can leave the directory.
std::string DumpFileName(const RecorderDump& dump);

}  // namespace gpulet::recorder

#endif  // GPULET_RECORDER_RECORDER_FILES_H_
