#include "dra/checkpoint.h"

#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/atomic_file.h"
#include "common/json_reader.h"
#include "common/read_file.h"
#include "nlohmann/json.hpp"

namespace gpulet::dra {
namespace {

constexpr char kKind[] = "GpuletDraCheckpoint";
constexpr int kVersion = 1;

constexpr char kWhat[] = "a gpulet DRA checkpoint";

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

absl::StatusOr<PreparedDevice> ParseDevice(const nlohmann::json& d, std::string path) {
  JsonFields f(d, kWhat, std::move(path));
  PreparedDevice dev;
  for (const absl::Status& s :
       {f.StringList("requestNames", &dev.request_names), f.NonEmptyString("pool", &dev.pool),
        f.NonEmptyString("device", &dev.device), f.StringList("cdiDeviceIds", &dev.cdi_device_ids),
        f.String("shareId", &dev.share_id), f.NoOtherKeys()}) {
    if (!s.ok()) return s;
  }
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
  absl::StatusOr<nlohmann::json> doc =
      ParseStrictJson(text, kWhat, {.max_bytes = kMaxCheckpointBytes});
  if (!doc.ok()) return doc.status();
  JsonFields top(*doc, kWhat);
  // The kind first: another program's file is told as such, not by its first odd field.
  if (!doc->is_object()) return top.BadHere("must be an object (is this another program's file?)");
  std::string kind;
  if (!top.String("kind", &kind).ok() || kind != kKind) {
    return top.Bad("kind", absl::StrCat("is missing or not \"", kKind,
                                        "\" (is this another program's file?)"));
  }
  int64_t version = 0;
  if (absl::Status s = top.Int64("version", std::numeric_limits<int64_t>::min(),
                                 std::numeric_limits<int64_t>::max(), &version, Presence::kRequired,
                                 "an integer");
      !s.ok()) {
    return s;
  }
  if (version != kVersion) {
    return top.Bad("version", absl::StrCat("is ", version, ", not ", kVersion,
                                           " (written by another gpulet version)"));
  }
  std::string checksum;
  absl::StatusOr<const nlohmann::json*> claims = top.Object("claims");
  for (const absl::Status& s :
       {top.String("checksum", &checksum), claims.status(), top.NoOtherKeys()}) {
    if (!s.ok()) return s;
  }
  std::string want = Checksum(**claims);
  if (checksum != want) {
    return top.Bad("checksum", absl::StrCat("\"", checksum, "\" does not match the claims (", want,
                                            "): the file was damaged or edited"));
  }
  ClaimCheckpoint out;
  for (const auto& [uid, c] : (*claims)->items()) {
    if (uid.empty()) return top.Bad("claims", "holds a claim whose UID is empty");
    JsonFields f(c, kWhat, absl::StrCat("claims.", uid));
    PreparedClaim claim;
    claim.ref.uid = uid;
    absl::StatusOr<const nlohmann::json*> devices = f.Array("devices");
    for (const absl::Status& s :
         {f.NonEmptyString("namespace", &claim.ref.ns), f.NonEmptyString("name", &claim.ref.name),
          devices.status(), f.NoOtherKeys()}) {
      if (!s.ok()) return s;
    }
    for (size_t i = 0; i < (*devices)->size(); ++i) {
      absl::StatusOr<PreparedDevice> d =
          ParseDevice((**devices)[i], absl::StrCat(f.PathOf("devices"), "[", i, "]"));
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
