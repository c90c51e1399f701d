// libFuzzer target for the DRA checkpoint parser (dra/checkpoint.h). The file survives gpulet
// restarts and disk damage, so any bytes must give a checkpoint or an error, never a crash.
// Properties checked:
//  - whatever parses writes back to JSON that parses to the same checkpoint (so a loaded
//    checkpoint can always be saved and loaded again);
//  - every claim parsed has its UID as key and non-empty namespace, name, pools and devices.
// The first input byte, when it is '!', asks for the input to be wrapped as the claims of a
// valid envelope (right kind, version and checksum), so the fuzzer reaches the claim parser
// without having to find an FNV-1a checksum.
//
// Built and run by scripts/fuzz.sh (the _fuzz.cc suffix keeps it out of the normal build).
//
// Thread-safety: libFuzzer calls LLVMFuzzerTestOneInput from one thread.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "dra/checkpoint.h"
#include "nlohmann/json.hpp"

namespace {

using gpulet::dra::ClaimCheckpoint;

// The envelope CheckpointToJson writes, around `claims` (a JSON text), with the checksum
// computed as checkpoint.h documents it (the writer cannot help: it needs parsed claims).
std::string Envelope(const std::string& claims) {
  nlohmann::json parsed = nlohmann::json::parse(claims, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return claims;
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : parsed.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char sum[40];
  snprintf(sum, sizeof(sum), "fnv1a64:%016llx", static_cast<unsigned long long>(h));
  nlohmann::json doc = {
      {"kind", "GpuletDraCheckpoint"}, {"version", 1}, {"checksum", sum}, {"claims", parsed}};
  return doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 65536) return 0;
  std::string text(reinterpret_cast<const char*>(data), size);
  if (!text.empty() && text[0] == '!') text = Envelope(text.substr(1));
  absl::StatusOr<ClaimCheckpoint> parsed = gpulet::dra::CheckpointFromJson(text);
  if (!parsed.ok()) {
    if (parsed.status().message().empty()) std::abort();
    return 0;
  }
  for (const auto& [uid, claim] : *parsed) {
    if (uid.empty() || claim.ref.uid != uid || claim.ref.ns.empty() || claim.ref.name.empty()) {
      std::abort();
    }
    for (const auto& d : claim.devices) {
      if (d.pool.empty() || d.device.empty()) std::abort();
    }
  }
  absl::StatusOr<ClaimCheckpoint> again =
      gpulet::dra::CheckpointFromJson(gpulet::dra::CheckpointToJson(*parsed));
  if (!again.ok() || *again != *parsed) std::abort();
  return 0;
}
