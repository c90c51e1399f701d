// libFuzzer target for the simulator's fixture reader (sim/fixture.h, ParseFixture, over
// sim/yaml_tree.h's libyaml loader): a fixture is whatever file GPULET_SIM_FIXTURE names,
// read inside nvmlInit, so any bytes must give a Fixture or a one-line error naming the
// file, never an exception, a crash or a hang.
//
// Built and run by scripts/fuzz.sh (the _fuzz.cc suffix keeps it out of the normal build);
// seeded with the bundled fixtures.
//
// Thread-safety: libFuzzer calls LLVMFuzzerTestOneInput from one thread.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "sim/fixture.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1 << 16)) return 0;  // the bundled fixtures are under 8 KiB; keep runs fast
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  gpulet::sim::Fixture fixture;
  std::string error;
  if (gpulet::sim::ParseFixture(text, "fuzz.yaml", &fixture, &error)) {
    if (fixture.gpus.empty() || fixture.driver_version.empty()) std::abort();
    return 0;
  }
  if (error.rfind("fuzz.yaml", 0) != 0 || error.find('\n') != std::string::npos) std::abort();
  return 0;
}
