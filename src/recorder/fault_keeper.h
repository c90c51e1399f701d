// FaultKeeper: what `gpulet serve` does with the flight recorder's dumps. It writes each to
// the host (RecorderFiles), judges it against the GPU's earlier faults (postmortem.h's
// Assess: repeats across reboots and workloads need them), and remembers each GPU's latest
// fault and verdict for /status and `gpulet status`. At start it reads the directory back,
// so the verdict on the fault that preceded a reboot is still shown after it.
//
// Earlier faults are kept without their samples (the verdict needs their boot, driver,
// XIDs and processes, not their curves), at most kRecorderFilesPerGpu per GPU.
//
// Thread-safety: thread-safe (one mutex): Keep runs on the sampler's thread, Latest on any.
#ifndef GPULET_RECORDER_FAULT_KEEPER_H_
#define GPULET_RECORDER_FAULT_KEEPER_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "recorder/flight_recorder.h"
#include "recorder/recorder_files.h"
#include "state/status_report.h"

namespace gpulet::recorder {

class FaultKeeper {
 public:
  // `files`: where recordings are written and read back; null keeps them in memory only.
  explicit FaultKeeper(std::unique_ptr<RecorderFiles> files);

  // Reads the recordings already on the host; one that cannot be read is logged (naming
  // the file and what to do) and skipped. Returns how many could not be read.
  size_t Load();

  // Writes `dump` (a failure is logged: the verdict is kept in memory all the same), judges
  // it and makes it its GPU's latest fault. Returns what /status shows for it.
  state::FaultStatus Keep(RecorderDump dump);

  // The GPU's latest fault; nullopt when none was recorded.
  std::optional<state::FaultStatus> Latest(const std::string& uuid) const;

  // The GPU's recorded faults (without their samples), oldest first.
  std::vector<RecorderDump> Faults(const std::string& uuid) const;

 private:
  state::FaultStatus Remember(RecorderDump dump, const std::string& file)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::unique_ptr<RecorderFiles> files_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::vector<RecorderDump>> earlier_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, state::FaultStatus> latest_ ABSL_GUARDED_BY(mu_);
};

// The /status form of a verdict on `dump`, written to `file` ("" when not written).
state::FaultStatus FaultStatusOf(const RecorderDump& dump, const std::string& file);

}  // namespace gpulet::recorder

#endif  // GPULET_RECORDER_FAULT_KEEPER_H_
