#include "recorder/retirement.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/json_reader.h"
#include "common/versioned_json.h"
#include "nlohmann/json.hpp"
#include "recorder/host_state_file.h"

namespace gpulet::recorder {
namespace {

using nlohmann::json;
constexpr int kRetiredVersion = 1;

constexpr absl::string_view kRetiredWhat = "a retired-GPU file";

}  // namespace

std::string RetiredToJson(const RetiredGpus& gpus) {
  json all = json::object();
  for (const auto& [uuid, g] : gpus) {
    all[uuid] = {{"pci_bus_id", g.pci_bus_id}, {"since_unix", g.since_unix}, {"reason", g.reason}};
  }
  return json{{"version", kRetiredVersion}, {"gpus", std::move(all)}}.dump(
             2, ' ', false, json::error_handler_t::replace) +
         "\n";
}

absl::StatusOr<RetiredGpus> RetiredFromJson(absl::string_view text) {
  absl::StatusOr<json> parsed = ParseVersionedJson(text, kRetiredVersion, kRetiredWhat);
  if (!parsed.ok()) return parsed.status();
  // A person edits this file (to return a GPU): a misspelt key is an error, not ignored.
  JsonFields top(*parsed, kRetiredWhat);
  int64_t version = 0;
  absl::StatusOr<const json*> gpus = top.Object("gpus");
  if (absl::Status s = top.Int64("version", kRetiredVersion, kRetiredVersion, &version); !s.ok())
    return s;
  if (!gpus.ok()) return gpus.status();
  if (absl::Status s = top.NoOtherKeys(); !s.ok()) return s;
  RetiredGpus out;
  for (const auto& [uuid, g] : (*gpus)->items()) {
    JsonFields gpu(g, kRetiredWhat, absl::StrCat("gpus.", uuid));
    if (uuid.rfind("GPU-", 0) != 0 || uuid.size() < 5) {
      return gpu.BadHere("is keyed by a name that is not a GPU UUID (GPU-...)");
    }
    RetiredGpu r;
    if (absl::Status s = gpu.NonEmptyString("pci_bus_id", &r.pci_bus_id); !s.ok()) return s;
    if (absl::Status s = gpu.Int64("since_unix", 0, kLatestUnixSeconds, &r.since_unix,
                                   Presence::kRequired, "a time in seconds since 1970");
        !s.ok()) {
      return s;
    }
    if (absl::Status s = gpu.String("reason", &r.reason); !s.ok()) return s;
    if (absl::Status s = gpu.NoOtherKeys(); !s.ok()) return s;
    out[uuid] = std::move(r);
  }
  return out;
}

RetiredFile::RetiredFile(std::string path, std::string shown)
    : path_(std::move(path)), shown_(std::move(shown)) {}

absl::StatusOr<RetiredGpus> RetiredFile::Load() const {
  return LoadHostStateFile<RetiredGpus>(
      path_, shown_, "retired-GPU file",
      "; no GPU is kept out by it until it is fixed (correct it, or remove it to return every "
      "GPU it lists to service)",
      RetiredFromJson);
}

absl::Status RetiredFile::Save(const RetiredGpus& gpus) const {
  return SaveHostStateFile(path_, shown_, "the retired GPUs", RetiredToJson(gpus));
}

std::optional<std::string> RetireReason(std::span<const RecorderDump> faults, int max_faults,
                                        absl::Duration window, absl::Time now) {
  std::vector<const RecorderDump*> recent;
  const int64_t since = absl::ToUnixMillis(now - window);
  for (const RecorderDump& d : faults) {
    if (d.uuid.empty() || d.pci_bus_id.empty()) return std::nullopt;
    if (d.health == "Unhealthy" && d.fault_ms >= since) recent.push_back(&d);
  }
  if (recent.size() < static_cast<size_t>(std::max(max_faults, 1))) return std::nullopt;
  std::sort(recent.begin(), recent.end(),
            [](const RecorderDump* a, const RecorderDump* b) { return a->fault_ms < b->fault_ms; });
  return absl::StrCat(recent.size(), " faults within ", absl::FormatDuration(window),
                      ", the last: ", recent.back()->fault);
}

}  // namespace gpulet::recorder
