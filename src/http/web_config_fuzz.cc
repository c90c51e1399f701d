// libFuzzer target for the metrics web-config parser (http/web_config.h, ParseWebConfig):
// any bytes must give a WebConfig or an InvalidArgument error, never an exception or a crash,
// and an accepted one must fail closed: TLS only with both files, every user a bcrypt hash,
// and at least one of the two.
//
// Built and run by scripts/fuzz.sh (the _fuzz.cc suffix keeps it out of the normal build).
//
// Thread-safety: libFuzzer calls LLVMFuzzerTestOneInput from one thread.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/status/statusor.h"
#include "http/web_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1 << 16)) return 0;
  std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<gpulet::http::WebConfig> web = gpulet::http::ParseWebConfig(text, "fuzz.yml");
  if (!web.ok()) {
    if (web.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  if (web->cert_file.empty() != web->key_file.empty()) std::abort();
  if (web->cert_file.empty() && web->users.empty()) std::abort();
  for (const auto& [user, hash] : web->users) {
    if (user.empty() || !gpulet::http::IsBcryptHash(hash)) std::abort();
  }
  return 0;
}
