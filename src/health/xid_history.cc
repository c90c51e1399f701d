#include "health/xid_history.h"

#include <limits>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/json_reader.h"
#include "common/read_file.h"
#include "common/versioned_json.h"
#include "nlohmann/json.hpp"

namespace gpulet::health {
namespace {

constexpr int kVersion = 1;

constexpr absl::string_view kWhat = "an XID history";

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
  absl::StatusOr<nlohmann::json> parsed = ParseVersionedJson(text, kVersion, kWhat);
  if (!parsed.ok()) return parsed.status();
  JsonFields top(*parsed, kWhat);
  absl::StatusOr<const nlohmann::json*> gpus = top.Object("gpus");
  if (!gpus.ok()) return gpus.status();
  XidHistory history;
  for (const auto& [gpu, xids] : (*gpus)->items()) {
    JsonFields per_gpu(xids, kWhat, absl::StrCat("gpus.", gpu));
    if (gpu.empty()) return per_gpu.BadHere("is keyed by an empty GPU name");
    if (!xids.is_object()) return per_gpu.BadHere("must be an object of XIDs");
    for (const auto& [key, e] : xids.items()) {
      JsonFields f(e, kWhat, per_gpu.PathOf(key));
      int xid = 0;
      if (!absl::SimpleAtoi(key, &xid) || xid <= 0) {
        return f.BadHere("is keyed by a name that is not a positive XID number");
      }
      XidHistoryEntry entry;
      if (absl::Status s = f.Int64("count", 0, std::numeric_limits<int64_t>::max(), &entry.count,
                                   Presence::kRequired, "a count (0 or more)");
          !s.ok()) {
        return s;
      }
      if (absl::Status s = f.Int64("last_seen_unix", std::numeric_limits<int64_t>::min(),
                                   std::numeric_limits<int64_t>::max(), &entry.last_seen_unix,
                                   Presence::kRequired, "an integer (seconds since 1970)");
          !s.ok()) {
        return s;
      }
      if (absl::Status s = f.String("boot_id", &entry.boot_id); !s.ok()) return s;
      if (absl::Status s = f.Bool("awaiting_recovery", &entry.awaiting_recovery); !s.ok()) {
        return s;
      }
      if (absl::Status s = f.Bool("recovered", &entry.recovered); !s.ok()) return s;
      if (absl::Status s = f.String("recovery", &entry.recovery); !s.ok()) return s;
      if (entry.recovery != "" && entry.recovery != "reset-gpu" &&
          entry.recovery != "reboot-node") {
        return f.Bad("recovery", "must be \"\", \"reset-gpu\" or \"reboot-node\"");
      }
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

}  // namespace gpulet::health
