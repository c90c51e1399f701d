#include "dra/checkpoint.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/atomic_file.h"
#include "common/read_file.h"
#include "nlohmann/json.hpp"

namespace gpulet::dra {
namespace {

constexpr char kKind[] = "GpuletDraCheckpoint";
constexpr int kVersion = 1;

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("not a gpulet DRA checkpoint: ", what));
}

// Invalid UTF-8 (which a claim reference should never hold) becomes U+FFFD instead of an
// exception; the reader's text is then the same as the writer's, so the checksum still holds.
std::string Compact(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string Checksum(const nlohmann::json& claims) {
  // FNV-1a 64: no dependency, and enough to catch damage (this is not about tampering: whoever
  // can write the file can write a matching checksum).
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : Compact(claims)) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return absl::StrFormat("fnv1a64:%016x", h);
}

nlohmann::json Strings(const std::vector<std::string>& v) {
  nlohmann::json a = nlohmann::json::array();
  for (const std::string& s : v) a.push_back(s);
  return a;
}

// Checks that `obj` has exactly `keys`; names the first missing or unknown one.
absl::Status ExactKeys(const nlohmann::json& obj, std::initializer_list<const char*> keys,
                       const std::string& where) {
  for (const char* k : keys) {
    if (!obj.contains(k)) return Bad(absl::StrCat(where, ": \"", k, "\" is missing"));
  }
  for (const auto& [k, v] : obj.items()) {
    bool known = false;
    for (const char* want : keys) known |= k == want;
    if (!known) return Bad(absl::StrCat(where, ": unknown field \"", k, "\""));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> NonEmptyString(const nlohmann::json& obj, const char* key,
                                           const std::string& where) {
  const nlohmann::json& v = obj.at(key);
  if (!v.is_string() || v.get_ref<const std::string&>().empty()) {
    return Bad(absl::StrCat(where, ".", key, " is not a non-empty string"));
  }
  return v.get<std::string>();
}

absl::StatusOr<std::vector<std::string>> StringList(const nlohmann::json& obj, const char* key,
                                                    const std::string& where) {
  const nlohmann::json& v = obj.at(key);
  if (!v.is_array()) return Bad(absl::StrCat(where, ".", key, " is not a list"));
  std::vector<std::string> out;
  for (const nlohmann::json& s : v) {
    if (!s.is_string()) return Bad(absl::StrCat(where, ".", key, " holds a non-string"));
    out.push_back(s.get<std::string>());
  }
  return out;
}

absl::StatusOr<PreparedDevice> ParseDevice(const nlohmann::json& d, const std::string& where) {
  if (!d.is_object()) return Bad(absl::StrCat(where, " is not an object"));
  absl::Status keys =
      ExactKeys(d, {"requestNames", "pool", "device", "cdiDeviceIds", "shareId"}, where);
  if (!keys.ok()) return keys;
  PreparedDevice dev;
  absl::StatusOr<std::vector<std::string>> requests = StringList(d, "requestNames", where);
  absl::StatusOr<std::string> pool = NonEmptyString(d, "pool", where);
  absl::StatusOr<std::string> device = NonEmptyString(d, "device", where);
  absl::StatusOr<std::vector<std::string>> cdi = StringList(d, "cdiDeviceIds", where);
  for (const absl::Status& s : {requests.status(), pool.status(), device.status(), cdi.status()}) {
    if (!s.ok()) return s;
  }
  if (!d.at("shareId").is_string()) return Bad(absl::StrCat(where, ".shareId is not a string"));
  dev.request_names = std::move(*requests);
  dev.pool = std::move(*pool);
  dev.device = std::move(*device);
  dev.cdi_device_ids = std::move(*cdi);
  dev.share_id = d.at("shareId").get<std::string>();
  return dev;
}

}  // namespace

std::string CheckpointToJson(const ClaimCheckpoint& checkpoint) {
  nlohmann::json claims = nlohmann::json::object();
  for (const auto& [uid, claim] : checkpoint) {
    nlohmann::json devices = nlohmann::json::array();
    for (const PreparedDevice& d : claim.devices) {
      devices.push_back({{"requestNames", Strings(d.request_names)},
                         {"pool", d.pool},
                         {"device", d.device},
                         {"cdiDeviceIds", Strings(d.cdi_device_ids)},
                         {"shareId", d.share_id}});
    }
    claims[uid] = {
        {"namespace", claim.ref.ns}, {"name", claim.ref.name}, {"devices", std::move(devices)}};
  }
  nlohmann::json doc = {{"kind", kKind},
                        {"version", kVersion},
                        {"checksum", Checksum(claims)},
                        {"claims", std::move(claims)}};
  return doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

absl::StatusOr<ClaimCheckpoint> CheckpointFromJson(absl::string_view text) {
  nlohmann::json doc = nlohmann::json::parse(text.begin(), text.end(), nullptr,
                                             /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Bad("the file is not valid JSON");
  if (!doc.is_object()) return Bad("the top level is not a JSON object");
  auto kind = doc.find("kind");
  if (kind == doc.end() || !kind->is_string() || *kind != kKind) {
    return Bad(absl::StrCat("\"kind\" is missing or not \"", kKind,
                            "\" (is this another program's file?)"));
  }
  auto version = doc.find("version");
  if (version == doc.end() || !version->is_number_integer()) {
    return Bad("\"version\" is missing or not an integer");
  }
  if (version->get<int64_t>() != kVersion) {
    return Bad(absl::StrCat("version ", version->dump(), " is not ", kVersion,
                            " (written by another gpulet version)"));
  }
  absl::Status keys = ExactKeys(doc, {"kind", "version", "checksum", "claims"}, "the file");
  if (!keys.ok()) return keys;
  const nlohmann::json& claims = doc.at("claims");
  if (!claims.is_object()) return Bad("\"claims\" is not an object");
  const nlohmann::json& checksum = doc.at("checksum");
  if (!checksum.is_string()) return Bad("\"checksum\" is not a string");
  std::string want = Checksum(claims);
  if (checksum.get_ref<const std::string&>() != want) {
    return Bad(absl::StrCat("the checksum ", checksum.dump(), " does not match the claims (", want,
                            "): the file was damaged or edited"));
  }
  ClaimCheckpoint out;
  for (const auto& [uid, c] : claims.items()) {
    if (uid.empty()) return Bad("a claim UID is empty");
    std::string where = absl::StrCat("claims.", uid);
    if (!c.is_object()) return Bad(absl::StrCat(where, " is not an object"));
    keys = ExactKeys(c, {"namespace", "name", "devices"}, where);
    if (!keys.ok()) return keys;
    absl::StatusOr<std::string> ns = NonEmptyString(c, "namespace", where);
    if (!ns.ok()) return ns.status();
    absl::StatusOr<std::string> name = NonEmptyString(c, "name", where);
    if (!name.ok()) return name.status();
    const nlohmann::json& devices = c.at("devices");
    if (!devices.is_array()) return Bad(absl::StrCat(where, ".devices is not a list"));
    PreparedClaim claim;
    claim.ref = ClaimRef{.ns = std::move(*ns), .uid = uid, .name = std::move(*name)};
    for (size_t i = 0; i < devices.size(); ++i) {
      absl::StatusOr<PreparedDevice> d =
          ParseDevice(devices[i], absl::StrCat(where, ".devices[", i, "]"));
      if (!d.ok()) return d.status();
      claim.devices.push_back(std::move(*d));
    }
    out.emplace(uid, std::move(claim));
  }
  return out;
}

CheckpointFile::CheckpointFile(std::string path) : path_(std::move(path)) {}

absl::StatusOr<ClaimCheckpoint> CheckpointFile::Load() const {
  absl::StatusOr<std::string> text =
      ReadRegularFile(path_, kMaxCheckpointBytes, "DRA checkpoint file");
  if (absl::IsNotFound(text.status())) return ClaimCheckpoint{};  // nothing prepared yet
  // Guessing would be worse than stopping: a forgotten claim is never unprepared, and a wrong
  // one is unprepared under a running pod.
  const std::string kFix =
      "; the prepared claims it records cannot be trusted. Move the file away only after "
      "checking that no pod on this node uses a DRA claim of this driver (gpulet then starts "
      "with no prepared claims)";
  if (!text.ok()) {
    return absl::Status(text.status().code(), absl::StrCat("DRA checkpoint ", path_, ": ",
                                                           text.status().message(), kFix));
  }
  absl::StatusOr<ClaimCheckpoint> checkpoint = CheckpointFromJson(*text);
  if (!checkpoint.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("DRA checkpoint ", path_, ": ", checkpoint.status().message(), kFix));
  }
  return checkpoint;
}

absl::Status CheckpointFile::Save(const ClaimCheckpoint& checkpoint) const {
  AtomicWriteOptions options;
  options.mode = 0600;
  options.create_parents = true;
  absl::Status s = WriteFileAtomically(path_, CheckpointToJson(checkpoint), options);
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("saving the DRA checkpoint: ", s.message(),
                                               "; check that the directory is writable (the "
                                               "mount and its permissions)"));
  }
  return absl::OkStatus();
}

}  // namespace gpulet::dra
