// gpulet-nvml-worker: runs NVML for gpulet in a process of its own, under the glibc the
// driver was built for.
//
// gpulet starts it through the host's dynamic loader (`ld-linux-x86-64.so.2 --library-path
// <driver glibc dir>:<driver lib dir> gpulet-nvml-worker ...`) when the host's
// libnvidia-ml.so.1 needs a newer glibc than gpulet's own (Talos ships the driver with a
// private glibc). glibc is backward compatible, so this binary, built on Debian 12, runs on
// that newer C library; it links libstdc++, libgcc and Abseil statically and needs nothing
// from the container but itself (see the gpulet-nvml-worker target in CMakeLists.txt).
//
// It loads NVML, initialises it, says hello over the socket it was given (fd --fd), then
// answers requests (src/nvml/nvml_worker_protocol.h) with an NvmlGpuLibrary, so every NVML
// call keeps the per-GPU deadlines of the in-process path. Each request runs on its own
// thread, so a GPU whose calls hang delays only its own answers; pings are answered by the
// reader thread itself, which is how gpulet tells a hung worker from a hung GPU. The worker
// dies with gpulet (PR_SET_PDEATHSIG, and end-of-file on the socket) and is never restarted
// by itself: gpulet does that.
//
// Usage (by gpulet only): gpulet-nvml-worker --fd N --nvml PATH --parent PID
//                         [--call-timeout-ms N]
// Thread-safety: one reader thread plus one short-lived thread per request; writes to the
// socket are serialised by a mutex.
#include <gnu/libc-version.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nvml/nvml_gpu_library.h"
#include "nvml/nvml_library.h"
#include "nvml/nvml_worker_protocol.h"

namespace {

namespace wire = gpulet::nvml;
using nlohmann::json;

// Requests running at once. The daemon keeps one in flight per GPU plus the system and
// event lanes, so this is only reached by a daemon gone wrong.
constexpr int kMaxInFlight = 64;

std::mutex write_mu;
std::atomic<int> in_flight{0};

[[noreturn]] void Die(int code, const std::string& message) {
  std::fprintf(stderr, "gpulet-nvml-worker: %s\n", message.c_str());
  std::fflush(stderr);
  // _exit, not exit: a thread may be stuck inside the driver, and running NVML's atexit
  // handlers or unloading it under that thread would crash.
  _exit(code);
}

void Send(int fd, const json& message) {
  const std::string frame = wire::EncodeFrame(message);
  std::lock_guard<std::mutex> lock(write_mu);
  size_t done = 0;
  while (done < frame.size()) {
    ssize_t n = write(fd, frame.data() + done, frame.size() - done);
    if (n < 0 && errno == EINTR) continue;
    // gpulet is gone or closed the socket: nobody is left to answer.
    if (n <= 0) _exit(0);
    done += static_cast<size_t>(n);
  }
}

json Answer(gpulet::gpu::GpuLibrary& gpus, const wire::Request& r) {
  switch (r.op) {
    case wire::Op::kPing:
      return wire::EncodeResult(r.id, json::object());
    case wire::Op::kSystemInfo: {
      auto v = gpus.GetSystemInfo();
      return v.ok() ? wire::EncodeResult(r.id, wire::ToJson(*v))
                    : wire::EncodeError(r.id, v.status());
    }
    case wire::Op::kDeviceCount: {
      auto v = gpus.GetDeviceCount();
      return v.ok() ? wire::EncodeResult(r.id, json{{"count", *v}})
                    : wire::EncodeError(r.id, v.status());
    }
    case wire::Op::kIdentity: {
      auto v = gpus.GetDeviceIdentity(r.index);
      return v.ok() ? wire::EncodeResult(r.id, wire::ToJson(*v))
                    : wire::EncodeError(r.id, v.status());
    }
    case wire::Op::kProbe: {
      auto v = gpus.Probe(r.index, r.timeout);
      return v.ok() ? wire::EncodeResult(r.id, wire::ToJson(*v))
                    : wire::EncodeError(r.id, v.status());
    }
    case wire::Op::kSample: {
      auto v = gpus.Sample(r.index, r.timeout);
      return v.ok() ? wire::EncodeResult(r.id, wire::ToJson(*v))
                    : wire::EncodeError(r.id, v.status());
    }
    case wire::Op::kMigLayout: {
      auto v = gpus.GetMigLayout(r.index, r.timeout);
      return v.ok() ? wire::EncodeResult(r.id, wire::ToJson(*v))
                    : wire::EncodeError(r.id, v.status());
    }
    case wire::Op::kSetMemoryLimit: {
      absl::Status s = gpus.SetMemoryLimit(r.index, r.cgroup, r.bytes, r.timeout);
      return s.ok() ? wire::EncodeResult(r.id, json::object()) : wire::EncodeError(r.id, s);
    }
    case wire::Op::kRegisterEvents: {
      absl::Status s = gpus.RegisterEvents(r.index);
      return s.ok() ? wire::EncodeResult(r.id, json::object()) : wire::EncodeError(r.id, s);
    }
    case wire::Op::kWaitEvent: {
      auto v = gpus.WaitEvent(r.timeout);
      return v.ok() ? wire::EncodeResult(r.id, wire::ToJson(*v))
                    : wire::EncodeError(r.id, v.status());
    }
  }
  return wire::EncodeError(r.id, absl::InvalidArgumentError("unknown op"));
}

}  // namespace

int main(int argc, char** argv) {
  // Die with gpulet even while a thread is stuck in the driver and nobody reads the socket.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  signal(SIGPIPE, SIG_IGN);

  int fd = -1;
  long parent = 0;
  int64_t call_timeout_ms = 10000;
  std::string nvml;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* value = argv[i + 1];
    bool ok = true;
    if (flag == "--fd") {
      ok = absl::SimpleAtoi(value, &fd) && fd >= 0;
    } else if (flag == "--parent") {
      ok = absl::SimpleAtoi(value, &parent) && parent > 0;
    } else if (flag == "--call-timeout-ms") {
      ok = absl::SimpleAtoi(value, &call_timeout_ms) && call_timeout_ms > 0;
    } else if (flag == "--nvml") {
      nvml = value;
    } else {
      ok = false;
    }
    if (!ok)
      Die(64,
          absl::StrCat("bad argument ", flag, " ", value, "; this program is started by gpulet"));
  }
  if (fd < 0 || nvml.empty() || parent == 0 || argc % 2 != 1) {
    Die(64,
        "usage: gpulet-nvml-worker --fd N --nvml PATH --parent PID [--call-timeout-ms N] "
        "(started by gpulet, not by hand)");
  }
  // The parent may have died before PR_SET_PDEATHSIG took effect.
  if (getppid() != parent) Die(0, "gpulet exited before the worker started");

  auto library = gpulet::nvml::NvmlLibrary::Open(nvml);
  if (!library.ok()) {
    Send(fd, wire::EncodeError(0, library.status()));
    Die(1, std::string(library.status().message()));
  }
  wire::Hello hello;
  hello.pid = getpid();
  hello.glibc = gnu_get_libc_version();
  hello.library = (*library)->path();
  gpulet::nvml::NvmlGpuLibrary::Options options;
  options.call_timeout = absl::Milliseconds(call_timeout_ms);
  // Never destroyed: the process ends with _exit, possibly with a call stuck in NVML.
  auto* gpus = new gpulet::nvml::NvmlGpuLibrary(
      std::shared_ptr<gpulet::nvml::NvmlLibrary>(std::move(*library)), options);
  Send(fd, wire::EncodeResult(0, wire::ToJson(hello)));

  wire::FrameDecoder decoder;
  char buf[16384];
  while (true) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) _exit(0);  // gpulet closed the socket: done
    if (n < 0) Die(2, absl::StrCat("reading requests: ", std::strerror(errno)));
    decoder.Append(std::string_view(buf, static_cast<size_t>(n)));
    while (true) {
      auto message = decoder.Next();
      if (!message.ok()) Die(2, std::string(message.status().message()));
      if (!message->has_value()) break;
      auto request = wire::DecodeRequest(**message);
      if (!request.ok()) Die(2, std::string(request.status().message()));
      if (request->op == wire::Op::kPing) {
        Send(fd, Answer(*gpus, *request));
        continue;
      }
      if (in_flight.load() >= kMaxInFlight) {
        Send(fd, wire::EncodeError(request->id, absl::ResourceExhaustedError(absl::StrCat(
                                                    kMaxInFlight,
                                                    " NVML requests already running in the "
                                                    "worker; try again later"))));
        continue;
      }
      in_flight.fetch_add(1);
      std::thread([gpus, fd, r = *request] {
        json answer = Answer(*gpus, r);
        Send(fd, answer);
        in_flight.fetch_sub(1);
      }).detach();
    }
  }
}
