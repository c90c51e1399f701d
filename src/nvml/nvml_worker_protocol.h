// The wire format between gpulet and gpulet-nvml-worker, the helper process that runs NVML
// under the driver's own glibc (nvml_worker_library.h).
//
// A stream of frames over a Unix socketpair, both directions alike: a 4-byte big-endian
// length, then that many bytes of one JSON object. Every object carries "v" (the protocol
// version, kProtocolVersion) and "id". Requests name an "op" and its arguments; a response
// repeats the request's id and holds either "result" or "error" ({"code", "message",
// "nvml"}, an absl status code, its message and the NVML return code or -1). The worker
// sends one unsolicited response first, id 0 (the hello), once NVML has initialised.
//
// The daemon treats the worker as untrusted: a frame over kMaxFrameBytes, bytes that are not
// JSON, a wrong version or a field of the wrong type yield an error status (and the daemon
// then kills the worker), never a crash (nvml_worker_protocol_fuzz.cc).
//
// Thread-safety: FrameDecoder is single-owner; every free function is thread-safe.
#ifndef GPULET_NVML_NVML_WORKER_PROTOCOL_H_
#define GPULET_NVML_NVML_WORKER_PROTOCOL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpu/gpu_library.h"
#include "nlohmann/json.hpp"

namespace gpulet::nvml {

inline constexpr int kProtocolVersion = 1;
// Far above any real message (a sample with a few hundred processes is ~30 KiB) and small
// enough that a garbage length cannot make the reader allocate much.
inline constexpr uint32_t kMaxFrameBytes = 1 << 20;
inline constexpr size_t kFrameHeaderBytes = 4;

// The header plus the compact JSON text of `message`.
std::string EncodeFrame(const nlohmann::json& message);

// Cuts a byte stream into messages. After the first error every call fails: a stream that
// lost its framing cannot be resynchronised.
class FrameDecoder {
 public:
  void Append(std::string_view bytes);
  // The next whole message, nullopt when more bytes are needed. DataLoss for an oversize
  // length, text that is not a JSON object, or a "v" other than kProtocolVersion.
  absl::StatusOr<std::optional<nlohmann::json>> Next();
  // Bytes received but not yet returned as a message.
  size_t buffered() const { return buffer_.size() - pos_; }

 private:
  std::string buffer_;
  size_t pos_ = 0;
  absl::Status failed_;
};

enum class Op {
  kPing,            // answered by the worker's reader thread: proves it is not stuck
  kSystemInfo,      // GetSystemInfo
  kDeviceCount,     // GetDeviceCount
  kIdentity,        // GetDeviceIdentity(index)
  kProbe,           // Probe(index, timeout)
  kSample,          // Sample(index, timeout)
  kRegisterEvents,  // RegisterEvents(index = count)
  kWaitEvent,       // WaitEvent(timeout)
  kMigLayout,       // GetMigLayout(index, timeout)
  kSetMemoryLimit,  // SetMemoryLimit(index, cgroup, bytes, timeout)
};

struct Request {
  uint64_t id = 0;
  Op op = Op::kPing;
  unsigned index = 0;
  absl::Duration timeout = absl::ZeroDuration();
  std::string cgroup;  // kSetMemoryLimit: the cgroup's directory (at most PATH_MAX bytes)
  uint64_t bytes = 0;  // kSetMemoryLimit: the hard limit
};

std::string_view OpName(Op op);
nlohmann::json EncodeRequest(const Request& request);
absl::StatusOr<Request> DecodeRequest(const nlohmann::json& message);

// A response: `result` when status is OK.
struct Response {
  uint64_t id = 0;
  absl::Status status;
  nlohmann::json result;
};

nlohmann::json EncodeResult(uint64_t id, nlohmann::json result);
// Keeps the NVML code of an NvmlError status (NvmlCodeOf) across the process boundary.
nlohmann::json EncodeError(uint64_t id, const absl::Status& status);
// DataLoss when the message is not a well-formed response. A decoded error response is
// returned as a Response whose status is that error, with its NVML code restored.
absl::StatusOr<Response> DecodeResponse(const nlohmann::json& message);

// The values GpuLibrary returns, as JSON objects. Absent optionals are left out.
nlohmann::json ToJson(const gpu::SystemInfo& v);
nlohmann::json ToJson(const gpu::DeviceIdentity& v);
nlohmann::json ToJson(const gpu::ProbeAnswer& v);
nlohmann::json ToJson(const gpu::DeviceSample& v);
nlohmann::json ToJson(const std::optional<gpu::GpuEvent>& v);  // null for "no event"
nlohmann::json ToJson(const gpu::MigLayout& v);

// The reverse; DataLoss naming the field when a field has the wrong type or range.
absl::StatusOr<gpu::SystemInfo> SystemInfoFromJson(const nlohmann::json& j);
absl::StatusOr<unsigned> CountFromJson(const nlohmann::json& j);
absl::StatusOr<gpu::DeviceIdentity> IdentityFromJson(const nlohmann::json& j);
absl::StatusOr<gpu::ProbeAnswer> ProbeAnswerFromJson(const nlohmann::json& j);
absl::StatusOr<gpu::DeviceSample> SampleFromJson(const nlohmann::json& j);
absl::StatusOr<std::optional<gpu::GpuEvent>> EventFromJson(const nlohmann::json& j);
absl::StatusOr<gpu::MigLayout> MigLayoutFromJson(const nlohmann::json& j);

// The worker's hello (response id 0): who it is and what it loaded.
struct Hello {
  int64_t pid = 0;
  std::string glibc;    // gnu_get_libc_version() inside the worker
  std::string library;  // the NVML file it loaded
};
nlohmann::json ToJson(const Hello& v);
absl::StatusOr<Hello> HelloFromJson(const nlohmann::json& j);

}  // namespace gpulet::nvml

#endif  // GPULET_NVML_NVML_WORKER_PROTOCOL_H_
