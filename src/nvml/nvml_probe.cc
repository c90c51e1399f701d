#include "nvml/nvml_probe.h"

#include <dlfcn.h>
#include <link.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/subprocess.h"
#include "gpu/nvml_errors.h"
#include "nvml/nvml_library.h"

namespace gpulet::nvml {
namespace {

// Child side: writes "key value\n" records. Only async-signal-safe-ish calls plus the
// library under test; everything is formatted into a stack buffer.
void Emit(int fd, absl::string_view key, absl::string_view value) {
  std::string line = absl::StrCat(key, " ", value, "\n");
  size_t off = 0;
  while (off < line.size()) {
    ssize_t n = write(fd, line.data() + off, line.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

[[noreturn]] void ChildMain(int fd, const std::string& path) {
  // Let a crash in the library kill the child with its real signal, rather than being
  // caught by handlers inherited from gpulet (or a sanitizer runtime).
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) signal(sig, SIG_DFL);
  Emit(fd, "stage", "dlopen");
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    Emit(fd, "loaderror", err != nullptr ? err : "unknown dlopen error");
    _exit(0);
  }
  struct link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr) {
    Emit(fd, "path", map->l_name);
  }
  std::vector<std::string> missing;
  NvmlFunctions fn = NvmlLibrary::Resolve(handle, &missing, nullptr);
  if (!missing.empty()) {
    Emit(fd, "missing", absl::StrJoin(missing, ","));
    _exit(0);
  }
  Emit(fd, "stage", "nvmlInit_v2");
  int ret = fn.init();
  Emit(fd, "init", absl::StrCat(ret));
  if (ret != 0) _exit(0);
  Emit(fd, "stage", "nvmlDeviceGetCount_v2");
  unsigned count = 0;
  ret = fn.device_get_count(&count);
  Emit(fd, "count", absl::StrCat(ret, " ", count));
  Emit(fd, "stage", "nvmlShutdown");
  fn.shutdown();
  Emit(fd, "done", "1");
  _exit(0);
}

}  // namespace

NvmlProbeResult ProbeNvmlLibrary(const std::string& path, absl::Duration timeout) {
  NvmlProbeResult result;
  // The child runs the library under test and reports over a pipe; RunInChild kills it at
  // the deadline and gives it PR_SET_PDEATHSIG, so a probe never outlives gpulet.
  SubprocessOptions options;
  options.deadline = timeout;
  absl::StatusOr<SubprocessResult> child =
      RunInChild([&path](int fd) { ChildMain(fd, path); }, options);
  if (!child.ok()) {
    result.detail = std::string(child.status().message());
    return result;
  }
  const std::string& buffer = child->out;
  const bool timed_out = child->timed_out;

  bool got_done = false, got_init = false, got_count = false;
  for (absl::string_view line : absl::StrSplit(buffer, '\n', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(line, absl::MaxSplits(' ', 1));
    if (kv.first == "stage") {
      result.stage = std::string(kv.second);
    } else if (kv.first == "path") {
      result.loaded_path = std::string(kv.second);
    } else if (kv.first == "loaderror") {
      result.outcome = NvmlProbeResult::Outcome::kLoadFailed;
      result.detail = std::string(kv.second);
      return result;
    } else if (kv.first == "missing") {
      result.outcome = NvmlProbeResult::Outcome::kMissingSymbols;
      result.detail = std::string(kv.second);
      return result;
    } else if (kv.first == "init") {
      got_init = absl::SimpleAtoi(kv.second, &result.nvml_code);
    } else if (kv.first == "count") {
      std::pair<absl::string_view, absl::string_view> rc = absl::StrSplit(kv.second, ' ');
      int ret = 0;
      got_count =
          absl::SimpleAtoi(rc.first, &ret) && absl::SimpleAtoi(rc.second, &result.device_count);
      result.nvml_code = ret;
    } else if (kv.first == "done") {
      got_done = true;
    }
  }
  if (timed_out) {
    result.outcome = NvmlProbeResult::Outcome::kTimedOut;
  } else if (!child->exited) {
    result.outcome = NvmlProbeResult::Outcome::kCrashed;
    result.signal = child->signal;
  } else if (got_init && result.nvml_code != 0 && !got_count) {
    result.outcome = NvmlProbeResult::Outcome::kInitFailed;
  } else if (got_count && result.nvml_code != 0) {
    result.outcome = NvmlProbeResult::Outcome::kCountFailed;
  } else if (got_done || (got_count && result.nvml_code == 0)) {
    result.outcome = NvmlProbeResult::Outcome::kOk;
  } else {
    result.outcome = NvmlProbeResult::Outcome::kProbeError;
    result.detail = absl::StrCat("the probe process exited with status ", child->exit_code,
                                 " during ", result.stage.empty() ? "start-up" : result.stage);
  }
  return result;
}

absl::Status ProbeStatus(const NvmlProbeResult& r, const std::string& path,
                         absl::Duration timeout) {
  const std::string& where = r.loaded_path.empty() ? path : r.loaded_path;
  using O = NvmlProbeResult::Outcome;
  switch (r.outcome) {
    case O::kOk:
      return absl::OkStatus();
    case O::kLoadFailed:
      return absl::NotFoundError(absl::StrCat("cannot load ", where, ": ", r.detail));
    case O::kMissingSymbols:
      return absl::FailedPreconditionError(absl::StrCat(
          where, " is not a usable NVML library: it lacks ", r.detail,
          ". It may be a stub or a library from a very old driver; point --nvml-lib at the "
          "libnvidia-ml.so.1 of the installed driver"));
    case O::kInitFailed:
      return gpu::NvmlError(r.nvml_code, "nvmlInit_v2", where);
    case O::kCountFailed:
      return gpu::NvmlError(r.nvml_code, "nvmlDeviceGetCount_v2", where);
    case O::kCrashed:
      return absl::InternalError(absl::StrCat(
          where, " crashed the probe process with ", SignalName(r.signal), " during ",
          r.stage.empty() ? "loading" : r.stage,
          ". Likely cause: the library was built against a different C library than gpulet "
          "runs with, or two glibc builds are mixed in one process (a hostPath mount of the "
          "host's driver library directory, as on Talos). Fix: let the container runtime "
          "inject the driver libraries (CDI, or runtimeClassName: nvidia) instead of "
          "bind-mounting a library directory, or point --nvml-lib at a libnvidia-ml.so.1 that "
          "matches this system. gpulet itself is unaffected: the probe ran in a child "
          "process"));
    case O::kTimedOut:
      return absl::DeadlineExceededError(absl::StrCat(
          where, " did not return from ", r.stage.empty() ? "loading" : r.stage, " within ",
          absl::FormatDuration(timeout),
          ". Likely cause: the driver is wedged (a hung or fallen-off GPU, see XID 79/119 in "
          "the kernel log) or the nvidia module is still initialising. Fix: run `gpulet "
          "doctor`, check `dmesg | grep NVRM`; reset the GPU or reboot the node. gpulet "
          "stopped the probe process and did not hang"));
    case O::kProbeError:
      break;
  }
  return absl::InternalError(absl::StrCat("probing ", where, " failed: ", r.detail));
}

}  // namespace gpulet::nvml
