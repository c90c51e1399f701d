#include "recorder/recorder_files.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/atomic_file.h"
#include "common/json_reader.h"
#include "common/read_file.h"
#include "common/versioned_json.h"
#include "nlohmann/json.hpp"

namespace gpulet::recorder {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kVersion = 1;

constexpr absl::string_view kWhat = "a flight recorder file";
// Times are milliseconds since 1970 before 2200: the postmortem's arithmetic on them cannot
// overflow, and a time outside is a damaged file, not a recording.
constexpr int64_t kLatestMillis = kLatestUnixSeconds * 1000;
constexpr absl::string_view kTimeRange = "a time in milliseconds since 1970";

std::string SafeName(absl::string_view gpu) {
  std::string out;
  for (char c : gpu) {
    bool ok =
        (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
    out.push_back(ok ? c : '-');
  }
  return out.empty() ? "gpu" : out.substr(0, 96);
}

// The fault time in a file name "<gpu>-<ms>.json"; nullopt when it has none.
std::optional<int64_t> TimeOfName(absl::string_view name) {
  if (!absl::ConsumeSuffix(&name, ".json")) return std::nullopt;
  size_t dash = name.rfind('-');
  int64_t ms = 0;
  if (dash == absl::string_view::npos || !absl::SimpleAtoi(name.substr(dash + 1), &ms)) {
    return std::nullopt;
  }
  return ms;
}

}  // namespace

std::string DumpToJson(const RecorderDump& d) {
  json gpu = {{"uuid", d.uuid}, {"name", d.name}, {"pci_bus_id", d.pci_bus_id}};
  if (d.index) gpu["index"] = *d.index;
  json columns = json::array({"at_ms"});
  for (const ColumnInfo& c : kColumns) columns.push_back(c.name);
  json samples = json::array();
  for (const RecordedSample& s : d.samples) {
    json row = json::array({s.at_ms});
    for (size_t i = 0; i < kColumnCount; ++i) {
      if (s.values[i] == RecordedSample::kAbsent) {
        row.push_back(nullptr);
      } else {
        row.push_back(s.values[i]);
      }
    }
    samples.push_back(std::move(row));
  }
  json events = json::array();
  for (const RecordedEvent& e : d.events) {
    json ev = {{"at_ms", e.at_ms}, {"kind", EventKindName(e.kind)}, {"text", e.text}};
    if (e.kind == EventKind::kXid) ev["xid"] = e.xid;
    if (e.kind == EventKind::kNvmlError && e.nvml_code >= 0) ev["nvml_code"] = e.nvml_code;
    if (e.pid != 0) ev["pid"] = e.pid;
    if (!e.pod.empty()) ev["pod"] = e.pod;
    events.push_back(std::move(ev));
  }
  json doc = {{"version", kVersion},
              {"gpu", std::move(gpu)},
              {"node", d.node},
              {"boot_id", d.boot_id},
              {"driver_version", d.driver_version},
              {"gpulet_version", d.gpulet_version},
              {"fault", {{"at_ms", d.fault_ms}, {"what", d.fault}, {"health", d.health}}},
              {"interval_ms", d.interval_ms},
              {"columns", std::move(columns)},
              {"samples", std::move(samples)},
              {"events", std::move(events)}};
  // One sample per line would be friendlier to read but costs a custom printer; compact
  // JSON is what tools read, and `gpulet postmortem` is what people read.
  return doc.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

absl::StatusOr<RecorderDump> DumpFromJson(absl::string_view text) {
  absl::StatusOr<json> parsed = ParseVersionedJson(text, kVersion, kWhat);
  if (!parsed.ok()) return parsed.status();
  const json& doc = *parsed;
  JsonFields top(doc, kWhat);
  RecorderDump d;
  absl::StatusOr<const json*> gpu_object = top.Object("gpu");
  if (!gpu_object.ok()) return gpu_object.status();
  JsonFields gpu(**gpu_object, kWhat, "gpu");
  if (absl::Status s = gpu.NonEmptyString("uuid", &d.uuid); !s.ok()) return s;
  for (auto [key, out] : {std::pair{"name", &d.name}, std::pair{"pci_bus_id", &d.pci_bus_id}}) {
    if (absl::Status s = gpu.String(key, out); !s.ok()) return s;
  }
  if (gpu.Has("index")) {
    unsigned index = 0;
    if (absl::Status s = gpu.Int("index", &index); !s.ok()) return s;
    d.index = index;
  }
  for (auto [key, out] : {std::pair{"node", &d.node}, std::pair{"boot_id", &d.boot_id},
                          std::pair{"driver_version", &d.driver_version},
                          std::pair{"gpulet_version", &d.gpulet_version}}) {
    if (absl::Status s = top.String(key, out); !s.ok()) return s;
  }
  absl::StatusOr<const json*> fault_object = top.Object("fault");
  if (!fault_object.ok()) return fault_object.status();
  JsonFields fault(**fault_object, kWhat, "fault");
  if (absl::Status s =
          fault.Int64("at_ms", 0, kLatestMillis, &d.fault_ms, Presence::kRequired, kTimeRange);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = fault.String("what", &d.fault); !s.ok()) return s;
  if (absl::Status s = fault.String("health", &d.health); !s.ok()) return s;
  if (absl::Status s = top.Int64("interval_ms", 0, 86'400'000, &d.interval_ms, Presence::kRequired,
                                 "from 0 to a day in milliseconds");
      !s.ok()) {
    return s;
  }
  absl::StatusOr<const json*> columns_list = top.Array("columns");
  if (!columns_list.ok()) return columns_list.status();
  const json& columns = **columns_list;
  if (columns.empty() || columns[0] != "at_ms") {
    return top.Bad("columns", "does not start with \"at_ms\"");
  }
  // Where each file column goes; -1 for a column this gpulet does not know.
  std::vector<int> slot;
  for (size_t i = 1; i < columns.size(); ++i) {
    const json& name = columns[i];
    if (!name.is_string()) return top.Bad(absl::StrCat("columns[", i, "]"), "is not a string");
    int found = -1;
    for (size_t c = 0; c < kColumnCount; ++c) {
      if (name == kColumns[c].name) found = static_cast<int>(c);
    }
    slot.push_back(found);
  }
  absl::StatusOr<const json*> samples_list = top.Array("samples");
  if (!samples_list.ok()) return samples_list.status();
  const json& samples = **samples_list;
  d.samples.reserve(samples.size());
  for (size_t r = 0; r < samples.size(); ++r) {
    const json& row = samples[r];
    const std::string where = absl::StrCat("samples[", r, "]");
    if (!row.is_array() || row.size() != columns.size()) {
      return top.Bad(where, absl::StrCat("is not a list of ", columns.size(), " values"));
    }
    RecordedSample s;
    if (!row[0].is_number_integer() || row[0].get<int64_t>() < 0 ||
        row[0].get<int64_t>() > kLatestMillis) {
      return top.Bad(absl::StrCat(where, "[0]"), absl::StrCat("is not ", kTimeRange));
    }
    s.at_ms = row[0].get<int64_t>();
    for (size_t i = 1; i < row.size(); ++i) {
      if (row[i].is_null() || slot[i - 1] < 0) continue;
      if (!row[i].is_number_integer()) {
        return top.Bad(absl::StrCat(where, "[", i, "]"), "is neither an integer nor null");
      }
      int64_t v = row[i].get<int64_t>();
      if (v <= std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
        return top.Bad(absl::StrCat(where, "[", i, "]"), "is out of range");
      }
      s.values[slot[i - 1]] = static_cast<int32_t>(v);
    }
    d.samples.push_back(s);
  }
  absl::StatusOr<const json*> events_list = top.Array("events");
  if (!events_list.ok()) return events_list.status();
  const json& events = **events_list;
  for (size_t i = 0; i < events.size(); ++i) {
    JsonFields e(events[i], kWhat, absl::StrCat("events[", i, "]"));
    RecordedEvent ev;
    std::string kind;
    if (absl::Status s =
            e.Int64("at_ms", 0, kLatestMillis, &ev.at_ms, Presence::kRequired, kTimeRange);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = e.String("kind", &kind); !s.ok()) return s;
    std::optional<EventKind> k = ParseEventKind(kind);
    if (!k) return e.Bad("kind", absl::StrCat("\"", kind, "\" is not one gpulet writes"));
    ev.kind = *k;
    if (absl::Status s = e.String("text", &ev.text); !s.ok()) return s;
    if (absl::Status s = e.String("pod", &ev.pod, Presence::kOptional); !s.ok()) return s;
    if (ev.kind == EventKind::kXid) {
      if (absl::Status s = e.Int("xid", &ev.xid, 1, 100000, Presence::kRequired, "an XID number");
          !s.ok()) {
        return s;
      }
    }
    // NVML's codes run from 0 to 999 (NVML_ERROR_UNKNOWN).
    if (ev.kind == EventKind::kNvmlError) {
      if (absl::Status s =
              e.Int("nvml_code", &ev.nvml_code, 0, 999, Presence::kOptional, "an NVML code");
          !s.ok()) {
        return s;
      }
    }
    if (absl::Status s =
            e.Int("pid", &ev.pid, 0u, 0xffffffffu, Presence::kOptional, "a process id");
        !s.ok()) {
      return s;
    }
    d.events.push_back(std::move(ev));
  }
  return d;
}

std::string DumpFileName(const RecorderDump& dump) {
  return absl::StrCat(SafeName(dump.uuid), "-", dump.fault_ms, ".json");
}

RecorderFiles::RecorderFiles(std::string dir, std::string shown)
    : dir_(std::move(dir)), shown_(std::move(shown)) {}

absl::StatusOr<std::string> RecorderFiles::Write(const RecorderDump& dump) const {
  const std::string name = DumpFileName(dump);
  const std::string path = (fs::path(dir_) / name).string();
  AtomicWriteOptions options;
  options.mode = 0640;
  options.create_parents = true;
  if (absl::Status s = WriteFileAtomically(path, DumpToJson(dump), options); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("writing the flight recorder of ", dump.uuid, " to ",
                                               shown_, "/", name, ": ", s.message(),
                                               "; the recording stays in memory only (check that "
                                               "health.recorder.dir is on a writable host mount)"));
  }
  // The GPU's own files, oldest first; remove all but the newest kRecorderFilesPerGpu.
  const std::string prefix = SafeName(dump.uuid) + "-";
  std::vector<std::pair<int64_t, fs::path>> mine;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir_, ec)) {
    std::string file = e.path().filename().string();
    if (!absl::StartsWith(file, prefix)) continue;
    std::optional<int64_t> ms = TimeOfName(file);
    // Another GPU whose safe name extends this one's ("GPU-1" and "GPU-1-2") is not ours.
    if (!ms || file != absl::StrCat(prefix, *ms, ".json")) continue;
    mine.emplace_back(*ms, e.path());
  }
  std::sort(mine.begin(), mine.end());
  for (size_t i = 0; i + kRecorderFilesPerGpu < mine.size(); ++i) fs::remove(mine[i].second, ec);
  return path;
}

std::vector<RecorderFiles::Loaded> RecorderFiles::LoadAll() const {
  std::vector<std::pair<std::pair<int64_t, std::string>, std::string>> files;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir_, ec)) {
    std::string file = e.path().filename().string();
    if (!absl::EndsWith(file, ".json") || file[0] == '.') continue;
    files.push_back({{TimeOfName(file).value_or(0), file}, e.path().string()});
  }
  std::sort(files.begin(), files.end());
  std::vector<Loaded> out;
  for (const auto& [key, path] : files) {
    const std::string shown = absl::StrCat(shown_, "/", key.second);
    absl::StatusOr<std::string> text =
        ReadRegularFile(path, kMaxRecorderFileBytes, "flight recorder file");
    if (!text.ok()) {
      out.push_back({shown, absl::Status(text.status().code(),
                                         absl::StrCat(shown, ": ", text.status().message()))});
      continue;
    }
    absl::StatusOr<RecorderDump> dump = DumpFromJson(*text);
    if (!dump.ok()) {
      out.push_back({shown, absl::InvalidArgumentError(absl::StrCat(
                                shown, ": ", dump.status().message(),
                                "; it is skipped (move it away to keep it, or delete it)"))});
      continue;
    }
    out.push_back({shown, std::move(*dump)});
  }
  return out;
}

}  // namespace gpulet::recorder
