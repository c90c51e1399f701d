#include "nvml/nvml_worker_protocol.h"

#include <cmath>
#include <limits>
#include <type_traits>
#include <variant>

#include "absl/strings/str_cat.h"
#include "gpu/nvml_errors.h"
#include "gpu/sample_values.h"

namespace gpulet::nvml {
namespace {

using nlohmann::json;

// A field that is missing or of the wrong kind. Thrown only inside this file and turned into
// a DataLoss status at each public entry point, so it never crosses the module boundary.
struct FieldError {
  std::string message;
};

[[noreturn]] void Bad(const char* key, const char* wanted) {
  throw FieldError{absl::StrCat("field \"", key, "\" is not ", wanted)};
}

void RequireObject(const json& j, const char* what) {
  if (!j.is_object()) throw FieldError{absl::StrCat(what, " is not a JSON object")};
}

const json* Find(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

template <typename T>
std::optional<T> OptUnsigned(const json& j, const char* key) {
  const json* v = Find(j, key);
  if (v == nullptr) return std::nullopt;
  // A JSON parser stores 5 as unsigned; a value built in memory may hold it as signed.
  if (!v->is_number_integer() || (!v->is_number_unsigned() && v->get<int64_t>() < 0)) {
    Bad(key, "an unsigned integer");
  }
  const uint64_t u = v->get<uint64_t>();
  if (u > std::numeric_limits<T>::max()) Bad(key, "in range");
  return static_cast<T>(u);
}

template <typename T>
std::optional<T> OptSigned(const json& j, const char* key) {
  const json* v = Find(j, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number_integer()) Bad(key, "an integer");
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<T>::max())) Bad(key, "in range");
    return static_cast<T>(u);
  }
  const int64_t i = v->get<int64_t>();
  if (i < std::numeric_limits<T>::min() || i > std::numeric_limits<T>::max()) Bad(key, "in range");
  return static_cast<T>(i);
}

std::optional<double> OptDouble(const json& j, const char* key) {
  const json* v = Find(j, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) Bad(key, "a number");
  const double d = v->get<double>();
  if (!std::isfinite(d)) Bad(key, "finite");
  return d;
}

std::optional<bool> OptBool(const json& j, const char* key) {
  const json* v = Find(j, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) Bad(key, "a boolean");
  return v->get<bool>();
}

std::optional<std::string> OptString(const json& j, const char* key) {
  const json* v = Find(j, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) Bad(key, "a string");
  return v->get<std::string>();
}

template <typename T>
T Required(std::optional<T> v, const char* key) {
  if (!v.has_value()) throw FieldError{absl::StrCat("field \"", key, "\" is missing")};
  return *std::move(v);
}

template <typename T>
void Put(json& j, const char* key, const std::optional<T>& v) {
  if (v.has_value()) j[key] = *v;
}

absl::Status Loss(absl::string_view what, const FieldError& e) {
  return absl::DataLossError(
      absl::StrCat("gpulet-nvml-worker sent a malformed ", what, ": ", e.message,
                   ". Fix: the worker beside gpulet must come from the same gpulet build; "
                   "reinstall gpulet"));
}

// Runs `parse` and turns a FieldError or a JSON exception into DataLoss.
template <typename T, typename F>
absl::StatusOr<T> Guard(absl::string_view what, F parse) {
  try {
    return parse();
  } catch (const FieldError& e) {
    return Loss(what, e);
  } catch (const json::exception& e) {
    return Loss(what, FieldError{e.what()});
  }
}

constexpr struct {
  Op op;
  std::string_view name;
} kOps[] = {
    {Op::kPing, "ping"},
    {Op::kSystemInfo, "system_info"},
    {Op::kDeviceCount, "device_count"},
    {Op::kIdentity, "identity"},
    {Op::kProbe, "probe"},
    {Op::kSample, "sample"},
    {Op::kRegisterEvents, "register_events"},
    {Op::kWaitEvent, "wait_event"},
    {Op::kMigLayout, "mig_layout"},
    {Op::kSetMemoryLimit, "set_memory_limit"},
};

}  // namespace

std::string EncodeFrame(const json& message) {
  std::string body = message.dump(-1, ' ', false, json::error_handler_t::replace);
  const uint32_t n = static_cast<uint32_t>(body.size());
  std::string out;
  out.reserve(kFrameHeaderBytes + body.size());
  out.push_back(static_cast<char>((n >> 24) & 0xff));
  out.push_back(static_cast<char>((n >> 16) & 0xff));
  out.push_back(static_cast<char>((n >> 8) & 0xff));
  out.push_back(static_cast<char>(n & 0xff));
  out += body;
  return out;
}

void FrameDecoder::Append(std::string_view bytes) {
  if (!failed_.ok()) return;
  // Drop what was consumed before growing, so a long-lived stream does not grow forever.
  if (pos_ > 0 && pos_ == buffer_.size()) {
    buffer_.clear();
    pos_ = 0;
  } else if (pos_ > 64 * 1024) {
    buffer_.erase(0, pos_);
    pos_ = 0;
  }
  buffer_.append(bytes.data(), bytes.size());
}

absl::StatusOr<std::optional<json>> FrameDecoder::Next() {
  if (!failed_.ok()) return failed_;
  if (buffered() < kFrameHeaderBytes) return std::optional<json>();
  const auto* p = reinterpret_cast<const unsigned char*>(buffer_.data() + pos_);
  const uint32_t n =
      (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
  if (n > kMaxFrameBytes) {
    failed_ =
        absl::DataLossError(absl::StrCat("NVML worker frame of ", n, " bytes is over the limit of ",
                                         kMaxFrameBytes, ": the stream is corrupt"));
    return failed_;
  }
  if (buffered() < kFrameHeaderBytes + n) return std::optional<json>();
  std::string_view body(buffer_.data() + pos_ + kFrameHeaderBytes, n);
  pos_ += kFrameHeaderBytes + n;
  json message = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (message.is_discarded() || !message.is_object()) {
    failed_ = absl::DataLossError("NVML worker frame is not a JSON object: the stream is corrupt");
    return failed_;
  }
  auto v = message.find("v");
  if (v == message.end() || !v->is_number_integer() || v->get<int64_t>() != kProtocolVersion) {
    failed_ = absl::DataLossError(absl::StrCat(
        "NVML worker frame has protocol version ", v == message.end() ? "none" : v->dump(),
        ", gpulet speaks ", kProtocolVersion,
        ". Fix: install the gpulet-nvml-worker from the same gpulet build beside gpulet"));
    return failed_;
  }
  return std::optional<json>(std::move(message));
}

std::string_view OpName(Op op) {
  for (const auto& o : kOps) {
    if (o.op == op) return o.name;
  }
  return "?";
}

json EncodeRequest(const Request& r) {
  json j = {{"v", kProtocolVersion}, {"id", r.id}, {"op", std::string(OpName(r.op))}};
  if (r.op == Op::kIdentity || r.op == Op::kProbe || r.op == Op::kSample ||
      r.op == Op::kRegisterEvents || r.op == Op::kMigLayout || r.op == Op::kSetMemoryLimit) {
    j["index"] = r.index;
  }
  if (r.op == Op::kProbe || r.op == Op::kSample || r.op == Op::kWaitEvent ||
      r.op == Op::kMigLayout || r.op == Op::kSetMemoryLimit) {
    j["timeout_ms"] = absl::ToInt64Milliseconds(r.timeout);
  }
  if (r.op == Op::kSetMemoryLimit) {
    j["cgroup"] = r.cgroup;
    j["bytes"] = r.bytes;
  }
  return j;
}

absl::StatusOr<Request> DecodeRequest(const json& message) {
  return Guard<Request>("request", [&] {
    RequireObject(message, "the request");
    Request r;
    r.id = Required(OptUnsigned<uint64_t>(message, "id"), "id");
    const std::string op = Required(OptString(message, "op"), "op");
    bool known = false;
    for (const auto& o : kOps) {
      if (o.name == op) {
        r.op = o.op;
        known = true;
      }
    }
    if (!known) throw FieldError{absl::StrCat("unknown op \"", op, "\"")};
    r.index = OptUnsigned<unsigned>(message, "index").value_or(0);
    // A day at most: a longer deadline is a corrupt request, not a patient caller.
    const int64_t ms = OptSigned<int64_t>(message, "timeout_ms").value_or(0);
    if (ms < 0 || ms > 86'400'000) Bad("timeout_ms", "between 0 and 86400000");
    r.timeout = absl::Milliseconds(ms);
    if (r.op == Op::kSetMemoryLimit) {
      r.cgroup = Required(OptString(message, "cgroup"), "cgroup");
      if (r.cgroup.empty() || r.cgroup.size() > 4096 || r.cgroup.find('\0') != std::string::npos) {
        Bad("cgroup", "a path of 1 to 4096 bytes without NUL");
      }
      r.bytes = Required(OptUnsigned<uint64_t>(message, "bytes"), "bytes");
    }
    return r;
  });
}

json EncodeResult(uint64_t id, json result) {
  return {{"v", kProtocolVersion}, {"id", id}, {"result", std::move(result)}};
}

json EncodeError(uint64_t id, const absl::Status& status) {
  return {{"v", kProtocolVersion},
          {"id", id},
          {"error",
           {{"code", static_cast<int>(status.code())},
            {"message", std::string(status.message())},
            {"nvml", gpu::NvmlCodeOf(status)}}}};
}

absl::StatusOr<Response> DecodeResponse(const json& message) {
  return Guard<Response>("response", [&] {
    RequireObject(message, "the response");
    Response r;
    r.id = Required(OptUnsigned<uint64_t>(message, "id"), "id");
    const json* error = Find(message, "error");
    // A null result is an answer ("no event"), so presence is what counts here.
    auto result_it = message.find("result");
    const json* result = result_it == message.end() ? nullptr : &*result_it;
    if ((error == nullptr) == (result == nullptr)) {
      throw FieldError{"a response needs exactly one of \"result\" and \"error\""};
    }
    if (result != nullptr) {
      r.result = *result;
      return r;
    }
    RequireObject(*error, "\"error\"");
    const int code = Required(OptSigned<int>(*error, "code"), "code");
    if (code <= 0 || code > static_cast<int>(absl::StatusCode::kUnauthenticated)) {
      Bad("code", "an error status code (1-16)");
    }
    const int nvml = OptSigned<int>(*error, "nvml").value_or(-1);
    r.status = gpu::WithNvmlCode(absl::Status(static_cast<absl::StatusCode>(code),
                                              OptString(*error, "message").value_or("")),
                                 nvml);
    return r;
  });
}

json ToJson(const gpu::SystemInfo& v) {
  return {{"driver_version", v.driver_version},
          {"nvml_version", v.nvml_version},
          {"cuda_driver_version", v.cuda_driver_version},
          {"library_path", v.library_path}};
}

absl::StatusOr<gpu::SystemInfo> SystemInfoFromJson(const json& j) {
  return Guard<gpu::SystemInfo>("system info", [&] {
    RequireObject(j, "the system info");
    gpu::SystemInfo v;
    v.driver_version = OptString(j, "driver_version").value_or("");
    v.nvml_version = OptString(j, "nvml_version").value_or("");
    v.cuda_driver_version = OptSigned<int>(j, "cuda_driver_version").value_or(0);
    v.library_path = OptString(j, "library_path").value_or("");
    return v;
  });
}

absl::StatusOr<unsigned> CountFromJson(const json& j) {
  return Guard<unsigned>("device count", [&] {
    RequireObject(j, "the device count");
    return Required(OptUnsigned<unsigned>(j, "count"), "count");
  });
}

json ToJson(const gpu::DeviceIdentity& v) {
  json j = {{"index", v.index},
            {"uuid", v.uuid},
            {"name", v.name},
            {"bus_id", v.bus_id},
            {"pci_device_id", v.pci_device_id},
            {"pci_subsystem_id", v.pci_subsystem_id}};
  Put(j, "minor", v.minor);
  Put(j, "memory_total_bytes", v.memory_total_bytes);
  Put(j, "memory_reserved_bytes", v.memory_reserved_bytes);
  Put(j, "cc_major", v.cc_major);
  Put(j, "cc_minor", v.cc_minor);
  Put(j, "nvml_architecture", v.nvml_architecture);
  Put(j, "brand", v.brand);
  Put(j, "serial", v.serial);
  Put(j, "vbios_version", v.vbios_version);
  Put(j, "persistence_mode", v.persistence_mode);
  Put(j, "mig_capable", v.mig_capable);
  Put(j, "virtualization_mode", v.virtualization_mode);
  return j;
}

absl::StatusOr<gpu::DeviceIdentity> IdentityFromJson(const json& j) {
  return Guard<gpu::DeviceIdentity>("device identity", [&] {
    RequireObject(j, "the device identity");
    gpu::DeviceIdentity v;
    v.index = Required(OptUnsigned<unsigned>(j, "index"), "index");
    v.uuid = Required(OptString(j, "uuid"), "uuid");
    v.name = OptString(j, "name").value_or("");
    v.bus_id = OptString(j, "bus_id").value_or("");
    v.pci_device_id = OptUnsigned<uint32_t>(j, "pci_device_id").value_or(0);
    v.pci_subsystem_id = OptUnsigned<uint32_t>(j, "pci_subsystem_id").value_or(0);
    v.minor = OptUnsigned<unsigned>(j, "minor");
    v.memory_total_bytes = OptUnsigned<uint64_t>(j, "memory_total_bytes");
    v.memory_reserved_bytes = OptUnsigned<uint64_t>(j, "memory_reserved_bytes");
    v.cc_major = OptSigned<int>(j, "cc_major");
    v.cc_minor = OptSigned<int>(j, "cc_minor");
    v.nvml_architecture = OptUnsigned<unsigned>(j, "nvml_architecture");
    v.brand = OptSigned<int>(j, "brand");
    v.serial = OptString(j, "serial");
    v.vbios_version = OptString(j, "vbios_version");
    v.persistence_mode = OptBool(j, "persistence_mode");
    v.mig_capable = OptBool(j, "mig_capable");
    v.virtualization_mode = OptSigned<int>(j, "virtualization_mode");
    return v;
  });
}

json ToJson(const gpu::ProbeAnswer& v) {
  json j = {{"uuid", v.uuid}};
  Put(j, "remap_pending", v.remap_pending);
  Put(j, "remap_failure", v.remap_failure);
  Put(j, "recovery_action", v.recovery_action);
  return j;
}

absl::StatusOr<gpu::ProbeAnswer> ProbeAnswerFromJson(const json& j) {
  return Guard<gpu::ProbeAnswer>("probe answer", [&] {
    RequireObject(j, "the probe answer");
    gpu::ProbeAnswer v;
    v.uuid = Required(OptString(j, "uuid"), "uuid");
    v.remap_pending = OptBool(j, "remap_pending");
    v.remap_failure = OptBool(j, "remap_failure");
    v.recovery_action = OptUnsigned<unsigned>(j, "recovery_action");
    return v;
  });
}

// Whether T points to a std::optional member of C (a value table row that C stores).
template <typename T, typename C>
constexpr bool kIsMemberOf = false;
template <typename T, typename C>
requires gpu::StoredMember<T>
constexpr bool kIsMemberOf<T, C> = std::is_same_v<typename gpu::MemberValue<T>::owner, C>;

template <typename X>
std::optional<X> OptValue(const json& j, const char* key) {
  if constexpr (std::is_same_v<X, bool>) {
    return OptBool(j, key);
  } else if constexpr (std::is_same_v<X, double>) {
    return OptDouble(j, key);
  } else if constexpr (std::is_signed_v<X>) {
    return OptSigned<X>(j, key);
  } else {
    return OptUnsigned<X>(j, key);
  }
}

// The value table's rows that C (DeviceSample, or its ProfilingSample) stores, by their keys.
template <typename C>
void PutValues(json& j, const C& v) {
  for (const gpu::SampleValue& row : gpu::SampleValues()) {
    std::visit(
        [&](auto m) {
          if constexpr (kIsMemberOf<decltype(m), C>) Put(j, row.key, v.*m);
        },
        row.member);
  }
}

template <typename C>
void GetValues(const json& j, C* v) {
  for (const gpu::SampleValue& row : gpu::SampleValues()) {
    std::visit(
        [&](auto m) {
          using T = decltype(m);
          if constexpr (kIsMemberOf<T, C>) {
            v->*m = OptValue<typename gpu::MemberValue<T>::type>(j, row.key);
          }
        },
        row.member);
  }
}

json ProfilingToJson(const gpu::ProfilingSample& p) {
  json pj = json::object();
  PutValues(pj, p);
  return pj;
}

gpu::ProfilingSample ProfilingFromJson(const json& pj) {
  RequireObject(pj, "the profiling values");
  gpu::ProfilingSample p;
  GetValues(pj, &p);
  return p;
}

json ToJson(const gpu::DeviceSample& v) {
  json j = json::object();
  PutValues(j, v);
  json procs = json::array();
  for (const gpu::GpuProcess& p : v.processes) {
    json pj = {{"pid", p.pid}};
    Put(pj, "used_bytes", p.used_bytes);
    Put(pj, "gpu_instance_id", p.gpu_instance_id);
    Put(pj, "compute_instance_id", p.compute_instance_id);
    Put(pj, "sm_percent", p.sm_percent);
    procs.push_back(std::move(pj));
  }
  j["processes"] = std::move(procs);
  if (v.profiling) j["profiling"] = ProfilingToJson(*v.profiling);
  if (!v.nvlinks.empty()) {
    json links = json::array();
    for (const gpu::NvLinkSample& l : v.nvlinks) {
      json lj = {{"link", l.link}, {"active", l.active}};
      Put(lj, "remote_type", l.remote_type);
      Put(lj, "replay_errors", l.replay_errors);
      Put(lj, "recovery_errors", l.recovery_errors);
      Put(lj, "crc_flit_errors", l.crc_flit_errors);
      Put(lj, "crc_data_errors", l.crc_data_errors);
      links.push_back(std::move(lj));
    }
    j["nvlinks"] = std::move(links);
  }
  if (!v.mig.empty()) {
    json instances = json::array();
    for (const gpu::MigInstanceSample& m : v.mig) {
      json mj = {{"gpu_instance_id", m.gpu_instance_id},
                 {"compute_instance_id", m.compute_instance_id}};
      Put(mj, "fb_used_bytes", m.fb_used_bytes);
      Put(mj, "fb_free_bytes", m.fb_free_bytes);
      if (m.profiling) mj["profiling"] = ProfilingToJson(*m.profiling);
      instances.push_back(std::move(mj));
    }
    j["mig"] = std::move(instances);
  }
  return j;
}

absl::StatusOr<gpu::DeviceSample> SampleFromJson(const json& j) {
  return Guard<gpu::DeviceSample>("sample", [&] {
    RequireObject(j, "the sample");
    gpu::DeviceSample v;
    GetValues(j, &v);
    if (const json* procs = Find(j, "processes"); procs != nullptr) {
      if (!procs->is_array()) Bad("processes", "an array");
      for (const json& pj : *procs) {
        RequireObject(pj, "a process");
        gpu::GpuProcess p;
        p.pid = Required(OptUnsigned<unsigned>(pj, "pid"), "pid");
        p.used_bytes = OptUnsigned<uint64_t>(pj, "used_bytes");
        p.gpu_instance_id = OptUnsigned<unsigned>(pj, "gpu_instance_id");
        p.compute_instance_id = OptUnsigned<unsigned>(pj, "compute_instance_id");
        p.sm_percent = OptUnsigned<unsigned>(pj, "sm_percent");
        v.processes.push_back(p);
      }
    }
    if (const json* pj = Find(j, "profiling"); pj != nullptr) v.profiling = ProfilingFromJson(*pj);
    if (const json* links = Find(j, "nvlinks"); links != nullptr) {
      if (!links->is_array()) Bad("nvlinks", "an array");
      for (const json& lj : *links) {
        RequireObject(lj, "an NVLink");
        gpu::NvLinkSample l;
        l.link = Required(OptUnsigned<unsigned>(lj, "link"), "link");
        l.active = Required(OptBool(lj, "active"), "active");
        l.remote_type = OptSigned<int>(lj, "remote_type");
        l.replay_errors = OptUnsigned<uint64_t>(lj, "replay_errors");
        l.recovery_errors = OptUnsigned<uint64_t>(lj, "recovery_errors");
        l.crc_flit_errors = OptUnsigned<uint64_t>(lj, "crc_flit_errors");
        l.crc_data_errors = OptUnsigned<uint64_t>(lj, "crc_data_errors");
        v.nvlinks.push_back(l);
      }
    }
    if (const json* instances = Find(j, "mig"); instances != nullptr) {
      if (!instances->is_array()) Bad("mig", "an array");
      for (const json& mj : *instances) {
        RequireObject(mj, "a MIG device's sample");
        gpu::MigInstanceSample m;
        m.gpu_instance_id =
            Required(OptUnsigned<unsigned>(mj, "gpu_instance_id"), "gpu_instance_id");
        m.compute_instance_id =
            Required(OptUnsigned<unsigned>(mj, "compute_instance_id"), "compute_instance_id");
        m.fb_used_bytes = OptUnsigned<uint64_t>(mj, "fb_used_bytes");
        m.fb_free_bytes = OptUnsigned<uint64_t>(mj, "fb_free_bytes");
        if (const json* pj = Find(mj, "profiling"); pj != nullptr) {
          m.profiling = ProfilingFromJson(*pj);
        }
        v.mig.push_back(std::move(m));
      }
    }
    return v;
  });
}

json ToJson(const std::optional<gpu::GpuEvent>& v) {
  if (!v.has_value()) return nullptr;
  json j = {{"index", v->index}, {"type", v->type}, {"data", v->data}};
  Put(j, "gpu_instance_id", v->gpu_instance_id);
  Put(j, "compute_instance_id", v->compute_instance_id);
  return j;
}

absl::StatusOr<std::optional<gpu::GpuEvent>> EventFromJson(const json& j) {
  return Guard<std::optional<gpu::GpuEvent>>("event", [&]() -> std::optional<gpu::GpuEvent> {
    if (j.is_null()) return std::nullopt;
    RequireObject(j, "the event");
    gpu::GpuEvent e;
    e.index = Required(OptUnsigned<unsigned>(j, "index"), "index");
    e.type = Required(OptUnsigned<unsigned long long>(j, "type"), "type");
    e.data = Required(OptUnsigned<unsigned long long>(j, "data"), "data");
    e.gpu_instance_id = OptUnsigned<unsigned>(j, "gpu_instance_id");
    e.compute_instance_id = OptUnsigned<unsigned>(j, "compute_instance_id");
    return e;
  });
}

json ToJson(const gpu::MigLayout& v) {
  json devices = json::array();
  for (const gpu::MigDeviceInfo& d : v.devices) {
    devices.push_back({{"index", d.index},
                       {"uuid", d.uuid},
                       {"gpu_instance_id", d.gpu_instance_id},
                       {"compute_instance_id", d.compute_instance_id},
                       {"gpu_instance_slices", d.gpu_instance_slices},
                       {"compute_instance_slices", d.compute_instance_slices},
                       {"memory_bytes", d.memory_bytes},
                       {"sm_count", d.sm_count},
                       {"copy_engines", d.copy_engines},
                       {"decoders", d.decoders},
                       {"encoders", d.encoders},
                       {"jpeg_engines", d.jpeg_engines},
                       {"ofa_engines", d.ofa_engines},
                       {"profile", d.profile}});
  }
  return {{"enabled", v.enabled}, {"pending_enabled", v.pending_enabled}, {"devices", devices}};
}

absl::StatusOr<gpu::MigLayout> MigLayoutFromJson(const json& j) {
  return Guard<gpu::MigLayout>("MIG layout", [&] {
    RequireObject(j, "the MIG layout");
    gpu::MigLayout v;
    v.enabled = Required(OptBool(j, "enabled"), "enabled");
    v.pending_enabled = Required(OptBool(j, "pending_enabled"), "pending_enabled");
    const json* devices = Find(j, "devices");
    if (devices == nullptr || !devices->is_array()) Bad("devices", "an array");
    for (const json& dj : *devices) {
      RequireObject(dj, "a MIG device");
      gpu::MigDeviceInfo d;
      auto u = [&](const char* key) { return Required(OptUnsigned<unsigned>(dj, key), key); };
      d.index = u("index");
      d.uuid = Required(OptString(dj, "uuid"), "uuid");
      d.gpu_instance_id = u("gpu_instance_id");
      d.compute_instance_id = u("compute_instance_id");
      d.gpu_instance_slices = u("gpu_instance_slices");
      d.compute_instance_slices = u("compute_instance_slices");
      d.memory_bytes = Required(OptUnsigned<uint64_t>(dj, "memory_bytes"), "memory_bytes");
      d.sm_count = u("sm_count");
      d.copy_engines = u("copy_engines");
      d.decoders = u("decoders");
      d.encoders = u("encoders");
      d.jpeg_engines = u("jpeg_engines");
      d.ofa_engines = u("ofa_engines");
      d.profile = Required(OptString(dj, "profile"), "profile");
      v.devices.push_back(std::move(d));
    }
    return v;
  });
}

json ToJson(const Hello& v) { return {{"pid", v.pid}, {"glibc", v.glibc}, {"library", v.library}}; }

absl::StatusOr<Hello> HelloFromJson(const json& j) {
  return Guard<Hello>("hello", [&] {
    RequireObject(j, "the hello");
    Hello h;
    h.pid = Required(OptSigned<int64_t>(j, "pid"), "pid");
    if (h.pid <= 0) Bad("pid", "a process id");
    h.glibc = OptString(j, "glibc").value_or("");
    h.library = OptString(j, "library").value_or("");
    return h;
  });
}

}  // namespace gpulet::nvml
