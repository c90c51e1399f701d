#include "daemon/compute_shares.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "vram/slice_file.h"
#include "vram/slice_format.h"

namespace gpulet::daemon {

void ComputeShares::Next(const std::vector<metrics::SliceSample>& slices, absl::Time now) {
  absl::MutexLock lock(&mu_);
  std::set<std::string> seen;
  for (const metrics::SliceSample& s : slices) {
    const vram::SliceUsage::Compute& c = s.usage.compute;
    if (c.share_permille == 0) continue;
    seen.insert(s.name);
    auto [it, inserted] = holders_.try_emplace(s.name);
    Holder& h = it->second;
    // New here (a gpulet restarted, a sampler rebuilt), or a counter below the last one (a
    // new file under the same name): start again from the file's rate.
    const bool fresh = inserted || c.launch_units < h.units;
    if (fresh) {
      h = Holder{};
      h.rule = vram::ComputeShareRule(c.launch_rate);
      h.written = c.launch_rate;
    }
    vram::ComputeRound round;
    round.share = c.share_permille / 1000.0;
    if (!fresh && s.device) {
      round.units = c.launch_units - h.units;
      round.seconds = absl::ToDoubleSeconds(now - h.at);
      for (const metrics::SliceDeviceUse::Process& p : s.device->processes) {
        if (!p.sm_percent) continue;
        round.measured = true;
        round.sm_busy += *p.sm_percent / 100.0;
      }
    }
    h.units = c.launch_units;
    h.at = now;
    const uint64_t rate = h.rule.Next(round);
    if (rate == h.written && rate == c.launch_rate) continue;
    const std::string path = absl::StrCat(slice_dir_, "/", s.name, "/", vram::kSliceFileName);
    if (absl::Status st = vram::SetSliceLaunchRate(path, rate); !st.ok()) {
      if (std::exchange(h.warned, true)) continue;
      GPULET_LOG_WARN("compute share of VRAM slice {}: cannot set its launch rate: {}", s.name,
                      st.message());
      continue;
    }
    h.written = rate;
  }
  for (auto it = holders_.begin(); it != holders_.end();) {
    it = seen.count(it->first) ? std::next(it) : holders_.erase(it);
  }
}

std::map<std::string, uint64_t> ComputeShares::rates() const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, uint64_t> out;
  for (const auto& [name, h] : holders_) out[name] = h.written;
  return out;
}

}  // namespace gpulet::daemon
