#include "health/xid_history.h"

#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/read_file.h"
#include "common/versioned_json.h"
#include "nlohmann/json.hpp"

namespace gpulet {
namespace {

constexpr int kVersion = 1;

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("not an XID history: ", what));
}

}  // namespace

std::string XidHistoryToJson(const XidHistory& history) {
  nlohmann::json gpus = nlohmann::json::object();
  for (const auto& [gpu, xids] : history) {
    nlohmann::json per_gpu = nlohmann::json::object();
    for (const auto& [xid, e] : xids) {
      per_gpu[std::to_string(xid)] = {
          {"count", e.count},       {"last_seen_unix", e.last_seen_unix},
          {"boot_id", e.boot_id},   {"awaiting_recovery", e.awaiting_recovery},
          {"recovery", e.recovery}, {"recovered", e.recovered}};
    }
    gpus[gpu] = std::move(per_gpu);
  }
  nlohmann::json doc = {{"version", kVersion}, {"gpus", std::move(gpus)}};
  return doc.dump(2) + "\n";
}

absl::StatusOr<XidHistory> XidHistoryFromJson(absl::string_view text) {
  absl::StatusOr<nlohmann::json> parsed = ParseVersionedJson(text, kVersion, "an XID history");
  if (!parsed.ok()) return parsed.status();
  const nlohmann::json& doc = *parsed;
  auto gpus = doc.find("gpus");
  if (gpus == doc.end() || !gpus->is_object()) return Bad("\"gpus\" is missing or not an object");
  XidHistory history;
  for (const auto& [gpu, xids] : gpus->items()) {
    if (gpu.empty()) return Bad("a GPU key is empty");
    if (!xids.is_object()) return Bad(absl::StrCat("\"gpus.", gpu, "\" is not an object"));
    for (const auto& [key, e] : xids.items()) {
      std::string where = absl::StrCat("\"gpus.", gpu, ".", key, "\"");
      int xid = 0;
      if (!absl::SimpleAtoi(key, &xid) || xid <= 0) {
        return Bad(absl::StrCat(where, ": the key is not a positive XID number"));
      }
      if (!e.is_object()) return Bad(absl::StrCat(where, " is not an object"));
      XidHistoryEntry entry;
      auto count = e.find("count");
      auto last = e.find("last_seen_unix");
      auto boot = e.find("boot_id");
      auto awaiting = e.find("awaiting_recovery");
      auto recovered = e.find("recovered");
      auto recovery = e.find("recovery");
      if (count == e.end() || !count->is_number_integer() || count->get<int64_t>() < 0) {
        return Bad(absl::StrCat(where, ".count is missing or not a non-negative integer"));
      }
      if (last == e.end() || !last->is_number_integer()) {
        return Bad(absl::StrCat(where, ".last_seen_unix is missing or not an integer"));
      }
      if (boot == e.end() || !boot->is_string()) {
        return Bad(absl::StrCat(where, ".boot_id is missing or not a string"));
      }
      if (awaiting == e.end() || !awaiting->is_boolean()) {
        return Bad(absl::StrCat(where, ".awaiting_recovery is missing or not a boolean"));
      }
      if (recovered == e.end() || !recovered->is_boolean()) {
        return Bad(absl::StrCat(where, ".recovered is missing or not a boolean"));
      }
      if (recovery == e.end() || !recovery->is_string() ||
          (*recovery != "" && *recovery != "reset-gpu" && *recovery != "reboot-node")) {
        return Bad(absl::StrCat(where,
                                ".recovery is missing or not \"\", \"reset-gpu\" or "
                                "\"reboot-node\""));
      }
      entry.recovery = recovery->get<std::string>();
      entry.count = count->get<int64_t>();
      entry.last_seen_unix = last->get<int64_t>();
      entry.boot_id = boot->get<std::string>();
      entry.awaiting_recovery = awaiting->get<bool>();
      entry.recovered = recovered->get<bool>();
      history[gpu][xid] = std::move(entry);
    }
  }
  return history;
}

FileXidHistoryStore::FileXidHistoryStore(std::string path) : path_(std::move(path)) {}

absl::StatusOr<XidHistory> FileXidHistoryStore::Load() {
  absl::StatusOr<std::string> text =
      ReadRegularFile(path_, kMaxXidHistoryBytes, "XID history file");
  if (absl::IsNotFound(text.status())) return XidHistory{};  // nothing saved yet
  const std::string kFix =
      "; gpulet starts with an empty XID history (repeats seen before are forgotten) and "
      "replaces the file on the next XID; move the file away to keep it for inspection";
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("XID history ", path_, ": ", text.status().message(), kFix));
  }
  absl::StatusOr<XidHistory> history = XidHistoryFromJson(*text);
  if (!history.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("XID history ", path_, ": ", history.status().message(), kFix));
  }
  return history;
}

absl::Status FileXidHistoryStore::Save(const XidHistory& history) {
  AtomicWriteOptions options;
  options.mode = 0644;
  options.create_parents = true;
  absl::Status s = WriteFileAtomically(path_, XidHistoryToJson(history), options);
  if (!s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("saving the XID history: ", s.message(),
                                     "; repeats will not survive a gpulet restart until the "
                                     "directory is writable (check the mount and its "
                                     "permissions)"));
  }
  return absl::OkStatus();
}

}  // namespace gpulet
