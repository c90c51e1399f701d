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
#include "common/read_file.h"
#include "common/versioned_json.h"
#include "nlohmann/json.hpp"

namespace gpulet {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kVersion = 1;

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("not a flight recorder file: ", what));
}

// The string at `key` of `obj`; "" when absent and `optional`.
absl::Status GetString(const json& obj, const char* where, const char* key, std::string* out,
                       bool optional = false) {
  auto it = obj.find(key);
  if (it == obj.end() && optional) return absl::OkStatus();
  if (it == obj.end() || !it->is_string()) {
    return Bad(absl::StrCat(where, key, " is missing or not a string"));
  }
  *out = it->get<std::string>();
  return absl::OkStatus();
}

absl::Status GetInt(const json& obj, const char* where, const char* key, int64_t* out) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_integer()) {
    return Bad(absl::StrCat(where, key, " is missing or not an integer"));
  }
  *out = it->get<int64_t>();
  return absl::OkStatus();
}

// Times are milliseconds since 1970 before 2200: the postmortem's arithmetic on them cannot
// overflow, and a time outside is a damaged file, not a recording.
constexpr int64_t kLatestMillis = int64_t{7258118400} * 1000;

absl::Status GetTime(const json& obj, const char* where, const char* key, int64_t* out) {
  if (absl::Status s = GetInt(obj, where, key, out); !s.ok()) return s;
  if (*out < 0 || *out > kLatestMillis) {
    return Bad(absl::StrCat(where, key, " is not a time in milliseconds since 1970"));
  }
  return absl::OkStatus();
}

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
  absl::StatusOr<json> parsed = ParseVersionedJson(text, kVersion, "a flight recorder file");
  if (!parsed.ok()) return parsed.status();
  const json& doc = *parsed;
  RecorderDump d;
  auto gpu = doc.find("gpu");
  if (gpu == doc.end() || !gpu->is_object()) return Bad("gpu is missing or not an object");
  for (auto [key, out] : {std::pair{"uuid", &d.uuid}, std::pair{"name", &d.name},
                          std::pair{"pci_bus_id", &d.pci_bus_id}}) {
    if (absl::Status s = GetString(*gpu, "gpu.", key, out); !s.ok()) return s;
  }
  if (d.uuid.empty()) return Bad("gpu.uuid is empty");
  if (auto index = gpu->find("index"); index != gpu->end()) {
    if (!index->is_number_unsigned()) return Bad("gpu.index is not a non-negative integer");
    d.index = index->get<unsigned>();
  }
  for (auto [key, out] : {std::pair{"node", &d.node}, std::pair{"boot_id", &d.boot_id},
                          std::pair{"driver_version", &d.driver_version},
                          std::pair{"gpulet_version", &d.gpulet_version}}) {
    if (absl::Status s = GetString(doc, "", key, out); !s.ok()) return s;
  }
  auto fault = doc.find("fault");
  if (fault == doc.end() || !fault->is_object()) return Bad("fault is missing or not an object");
  if (absl::Status s = GetTime(*fault, "fault.", "at_ms", &d.fault_ms); !s.ok()) return s;
  if (absl::Status s = GetString(*fault, "fault.", "what", &d.fault); !s.ok()) return s;
  if (absl::Status s = GetString(*fault, "fault.", "health", &d.health); !s.ok()) return s;
  if (absl::Status s = GetInt(doc, "", "interval_ms", &d.interval_ms); !s.ok()) return s;
  if (d.interval_ms < 0 || d.interval_ms > 86'400'000) {
    return Bad("interval_ms is not from 0 to a day");
  }
  auto columns = doc.find("columns");
  if (columns == doc.end() || !columns->is_array() || columns->empty() ||
      (*columns)[0] != "at_ms") {
    return Bad("columns is missing, not an array, or does not start with \"at_ms\"");
  }
  // Where each file column goes; -1 for a column this gpulet does not know.
  std::vector<int> slot;
  for (size_t i = 1; i < columns->size(); ++i) {
    const json& name = (*columns)[i];
    if (!name.is_string()) return Bad(absl::StrCat("columns[", i, "] is not a string"));
    int found = -1;
    for (size_t c = 0; c < kColumnCount; ++c) {
      if (name == kColumns[c].name) found = static_cast<int>(c);
    }
    slot.push_back(found);
  }
  auto samples = doc.find("samples");
  if (samples == doc.end() || !samples->is_array())
    return Bad("samples is missing or not an array");
  d.samples.reserve(samples->size());
  for (size_t r = 0; r < samples->size(); ++r) {
    const json& row = (*samples)[r];
    if (!row.is_array() || row.size() != columns->size()) {
      return Bad(absl::StrCat("samples[", r, "] is not an array of ", columns->size(), " values"));
    }
    RecordedSample s;
    if (!row[0].is_number_integer() || row[0].get<int64_t>() < 0 ||
        row[0].get<int64_t>() > kLatestMillis) {
      return Bad(absl::StrCat("samples[", r, "][0] is not a time in milliseconds since 1970"));
    }
    s.at_ms = row[0].get<int64_t>();
    for (size_t i = 1; i < row.size(); ++i) {
      if (row[i].is_null() || slot[i - 1] < 0) continue;
      if (!row[i].is_number_integer()) {
        return Bad(absl::StrCat("samples[", r, "][", i, "] is neither an integer nor null"));
      }
      int64_t v = row[i].get<int64_t>();
      if (v <= std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
        return Bad(absl::StrCat("samples[", r, "][", i, "] is out of range"));
      }
      s.values[slot[i - 1]] = static_cast<int32_t>(v);
    }
    d.samples.push_back(s);
  }
  auto events = doc.find("events");
  if (events == doc.end() || !events->is_array()) return Bad("events is missing or not an array");
  for (size_t i = 0; i < events->size(); ++i) {
    const json& e = (*events)[i];
    std::string where = absl::StrCat("events[", i, "].");
    if (!e.is_object()) return Bad(absl::StrCat("events[", i, "] is not an object"));
    RecordedEvent ev;
    std::string kind;
    if (absl::Status s = GetTime(e, where.c_str(), "at_ms", &ev.at_ms); !s.ok()) return s;
    if (absl::Status s = GetString(e, where.c_str(), "kind", &kind); !s.ok()) return s;
    std::optional<EventKind> k = ParseEventKind(kind);
    if (!k) return Bad(absl::StrCat(where, "kind \"", kind, "\" is not one gpulet writes"));
    ev.kind = *k;
    if (absl::Status s = GetString(e, where.c_str(), "text", &ev.text); !s.ok()) return s;
    if (absl::Status s = GetString(e, where.c_str(), "pod", &ev.pod, /*optional=*/true); !s.ok()) {
      return s;
    }
    if (ev.kind == EventKind::kXid) {
      int64_t xid = 0;
      if (absl::Status s = GetInt(e, where.c_str(), "xid", &xid); !s.ok()) return s;
      if (xid <= 0 || xid > 100000) return Bad(absl::StrCat(where, "xid is not an XID number"));
      ev.xid = static_cast<int>(xid);
    }
    if (ev.kind == EventKind::kNvmlError && e.contains("nvml_code")) {
      int64_t code = 0;
      if (absl::Status s = GetInt(e, where.c_str(), "nvml_code", &code); !s.ok()) return s;
      // NVML's codes run from 0 to 999 (NVML_ERROR_UNKNOWN).
      if (code < 0 || code > 999) return Bad(absl::StrCat(where, "nvml_code is not an NVML code"));
      ev.nvml_code = static_cast<int>(code);
    }
    if (auto pid = e.find("pid"); pid != e.end()) {
      if (!pid->is_number_unsigned() || pid->get<uint64_t>() > 0xffffffffu) {
        return Bad(absl::StrCat(where, "pid is not a process id"));
      }
      ev.pid = pid->get<unsigned>();
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

}  // namespace gpulet
