// libFuzzer target for the NVML worker protocol decoder: gpulet reads whatever bytes its
// worker process writes, and a worker running a misbehaving driver library may write
// anything, so every input must become messages or an error status, never a crash, hang or
// runaway allocation. The input is fed to a FrameDecoder in two pieces (split at its first
// byte's value) to exercise reassembly, and each decoded message goes through every
// response and value parser, as the daemon would apply them.
//
// Built and run by scripts/fuzz.sh (the _fuzz.cc suffix keeps it out of the normal build).
//
// Thread-safety: libFuzzer calls LLVMFuzzerTestOneInput from one thread.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "nvml/nvml_worker_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace wire = gpulet::nvml;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const size_t split = size == 0 ? 0 : std::min<size_t>(data[0], size);
  wire::FrameDecoder decoder;
  decoder.Append(bytes.substr(0, split));
  for (int piece = 0; piece < 2; ++piece) {
    if (piece == 1) decoder.Append(bytes.substr(split));
    while (true) {
      auto message = decoder.Next();
      if (!message.ok() || !message->has_value()) break;
      const nlohmann::json& j = **message;
      (void)wire::DecodeRequest(j);
      auto response = wire::DecodeResponse(j);
      if (response.ok() && response->status.ok()) {
        const nlohmann::json& r = response->result;
        (void)wire::SystemInfoFromJson(r);
        (void)wire::CountFromJson(r);
        (void)wire::IdentityFromJson(r);
        (void)wire::ProbeAnswerFromJson(r);
        (void)wire::SampleFromJson(r);
        (void)wire::EventFromJson(r);
        (void)wire::MigLayoutFromJson(r);
        (void)wire::HelloFromJson(r);
      }
    }
  }
  return 0;
}
