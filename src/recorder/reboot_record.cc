#include "recorder/reboot_record.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/json_reader.h"
#include "common/versioned_json.h"
#include "nlohmann/json.hpp"
#include "recorder/host_state_file.h"
#include "recorder/recording.h"

namespace gpulet::recorder {
namespace {

using nlohmann::json;
constexpr int kRebootRecordVersion = 1;
constexpr absl::string_view kRebootRecordWhat = "a reboot record";

}  // namespace

std::string RebootRecordToJson(const std::vector<RebootRequest>& requests) {
  json all = json::array();
  for (const RebootRequest& r : requests) {
    all.push_back({{"at_unix", r.at_unix},
                   {"boot_id", r.boot_id},
                   {"reason", r.reason},
                   {"gpus", r.gpus},
                   {"outcome", r.outcome}});
  }
  return json{{"version", kRebootRecordVersion}, {"reboots", std::move(all)}}.dump(
             2, ' ', false, json::error_handler_t::replace) +
         "\n";
}

absl::StatusOr<std::vector<RebootRequest>> RebootRecordFromJson(absl::string_view text) {
  absl::StatusOr<json> parsed = ParseVersionedJson(text, kRebootRecordVersion, kRebootRecordWhat);
  if (!parsed.ok()) return parsed.status();
  JsonFields top(*parsed, kRebootRecordWhat);
  int64_t version = 0;
  if (absl::Status s = top.Int64("version", kRebootRecordVersion, kRebootRecordVersion, &version);
      !s.ok())
    return s;
  absl::StatusOr<const json*> list = top.Array("reboots");
  if (!list.ok()) return list.status();
  if (absl::Status s = top.NoOtherKeys(); !s.ok()) return s;
  std::vector<RebootRequest> out;
  for (size_t i = 0; i < (*list)->size(); ++i) {
    JsonFields one((**list)[i], kRebootRecordWhat, absl::StrCat("reboots[", i, "]"));
    RebootRequest r;
    if (absl::Status s = one.Int64("at_unix", 0, kLatestUnixSeconds, &r.at_unix,
                                   Presence::kRequired, "a time in seconds since 1970");
        !s.ok()) {
      return s;
    }
    for (auto [key, field] : {std::pair{"boot_id", &r.boot_id}, std::pair{"reason", &r.reason},
                              std::pair{"outcome", &r.outcome}}) {
      if (absl::Status s = one.String(key, field); !s.ok()) return s;
    }
    if (absl::Status s = one.StringList("gpus", &r.gpus); !s.ok()) return s;
    if (absl::Status s = one.NoOtherKeys(); !s.ok()) return s;
    out.push_back(std::move(r));
  }
  return out;
}

RebootRecord::RebootRecord(std::string path, std::string shown)
    : path_(std::move(path)), shown_(std::move(shown)) {}

absl::StatusOr<std::vector<RebootRequest>> RebootRecord::Load() const {
  return LoadHostStateFile<std::vector<RebootRequest>>(
      path_, shown_, "reboot record",
      "; no reboot is asked for until it is fixed (correct it, or remove it to start the "
      "budget afresh)",
      RebootRecordFromJson);
}

absl::Status RebootRecord::Save(const std::vector<RebootRequest>& requests) const {
  return SaveHostStateFile(path_, shown_, "the reboot record", RebootRecordToJson(requests));
}

}  // namespace gpulet::recorder
