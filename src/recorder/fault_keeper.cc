#include "recorder/fault_keeper.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "recorder/postmortem.h"

namespace gpulet::recorder {

state::FaultStatus FaultStatusOf(const RecorderDump& dump, const std::string& file) {
  return state::FaultStatus{.at = absl::FromUnixMillis(dump.fault_ms),
                            .what = dump.fault,
                            .verdict = "",
                            .headline = "",
                            .file = file};
}

FaultKeeper::FaultKeeper(std::unique_ptr<RecorderFiles> files) : files_(std::move(files)) {}

size_t FaultKeeper::Load() {
  if (files_ == nullptr) return 0;
  size_t bad = 0;
  absl::MutexLock lock(&mu_);
  for (RecorderFiles::Loaded& loaded : files_->LoadAll()) {
    if (!loaded.dump.ok()) {
      GPULET_LOG_WARN("flight recorder: {}", loaded.dump.status().message());
      ++bad;
      continue;
    }
    Remember(*std::move(loaded.dump), loaded.path);
  }
  return bad;
}

state::FaultStatus FaultKeeper::Keep(RecorderDump dump) {
  std::string file;
  if (files_ != nullptr) {
    absl::StatusOr<std::string> written = files_->Write(dump);
    if (written.ok()) {
      file = files_->shown() + "/" + DumpFileName(dump);
    } else {
      GPULET_LOG_ERROR("flight recorder: {}", written.status().message());
    }
  }
  const std::string uuid = dump.uuid;
  absl::MutexLock lock(&mu_);
  state::FaultStatus status = Remember(std::move(dump), file);
  GPULET_LOG_WARN("flight recorder: {} fault: {}; verdict {}: {}; {}", uuid, status.what,
                  status.verdict, status.headline,
                  file.empty() ? std::string("kept in memory only")
                               : absl::StrCat("recording in ", file, " (gpulet postmortem)"));
  return status;
}

state::FaultStatus FaultKeeper::Remember(RecorderDump dump, const std::string& file) {
  std::vector<RecorderDump>& earlier = earlier_[dump.uuid];
  Verdict v = Assess(dump, earlier);
  state::FaultStatus status = FaultStatusOf(dump, file);
  status.verdict = CauseName(v.cause);
  status.headline = v.headline;
  auto latest = latest_.find(dump.uuid);
  if (latest == latest_.end() || latest->second.at <= status.at) latest_[dump.uuid] = status;
  dump.samples.clear();
  dump.samples.shrink_to_fit();
  earlier.push_back(std::move(dump));
  std::sort(earlier.begin(), earlier.end(),
            [](const RecorderDump& a, const RecorderDump& b) { return a.fault_ms < b.fault_ms; });
  if (earlier.size() > kRecorderFilesPerGpu) earlier.erase(earlier.begin());
  return status;
}

std::optional<state::FaultStatus> FaultKeeper::Latest(const std::string& uuid) const {
  absl::MutexLock lock(&mu_);
  auto it = latest_.find(uuid);
  if (it == latest_.end()) return std::nullopt;
  return it->second;
}

std::vector<RecorderDump> FaultKeeper::Faults(const std::string& uuid) const {
  absl::MutexLock lock(&mu_);
  auto it = earlier_.find(uuid);
  return it == earlier_.end() ? std::vector<RecorderDump>{} : it->second;
}

}  // namespace gpulet::recorder
