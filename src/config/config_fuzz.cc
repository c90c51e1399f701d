// libFuzzer target for the daemon's config parser (config/config.h, ParseConfig): the file
// comes from whoever can write it, and a SIGHUP re-reads it in the running daemon, so any
// bytes must give a Config or an InvalidArgument error, never an exception, a crash or a
// hang. An accepted config must print (--print-config) and read back as itself.
//
// Built and run by scripts/fuzz.sh (the _fuzz.cc suffix keeps it out of the normal build).
//
// Thread-safety: libFuzzer calls LLVMFuzzerTestOneInput from one thread.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/status/statusor.h"
#include "config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1 << 16)) return 0;  // LoadConfig caps files at 1 MiB; keep runs fast
  std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<gpulet::config::Config> config =
      gpulet::config::ParseConfig(text, "fuzz.yaml", {});
  if (!config.ok()) {
    if (config.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    if (config.status().message().empty()) std::abort();
    return 0;
  }
  std::string printed = gpulet::config::ConfigToYaml(*config);
  absl::StatusOr<gpulet::config::Config> back = gpulet::config::ParseConfig(printed, "printed", {});
  if (!back.ok() || gpulet::config::ConfigToYaml(*back) != printed) std::abort();
  return 0;
}
