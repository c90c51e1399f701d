#include "nvml/nvml_worker_library.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/periodic_worker.h"
#include "gpu/nvml_errors.h"

namespace gpulet::nvml {
namespace {

using nlohmann::json;

constexpr int kSystemLane = -1;
constexpr int kEventLane = -2;

std::string LaneName(int lane) {
  if (lane == kSystemLane) return "system calls";
  if (lane == kEventLane) return "NVML events";
  return absl::StrCat("GPU ", lane);
}

std::string DescribeWait(int status) {
  if (WIFSIGNALED(status)) {
    const char* name = sigabbrev_np(WTERMSIG(status));
    return absl::StrCat("was killed by SIG", name != nullptr ? name : "?", " (signal ",
                        WTERMSIG(status), ")");
  }
  if (WIFEXITED(status)) {
    if (WEXITSTATUS(status) == 127) {
      return "exited with status 127: the loader could not start gpulet-nvml-worker (see the "
             "log line above)";
    }
    return absl::StrCat("exited with status ", WEXITSTATUS(status));
  }
  return "ended";
}

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

std::string DefaultNvmlWorkerPath() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return kNvmlWorkerName;
  std::string exe(buf, static_cast<size_t>(n));
  size_t slash = exe.rfind('/');
  return slash == std::string::npos ? kNvmlWorkerName
                                    : absl::StrCat(exe.substr(0, slash + 1), kNvmlWorkerName);
}

std::vector<std::string> WorkerEnvironment() {
  std::vector<std::string> env;
  for (const char* name : {"GPULET_SIM_FIXTURE", "GPULET_SIM_STATE"}) {
    if (const char* value = std::getenv(name); value != nullptr) {
      env.push_back(absl::StrCat(name, "=", value));
    }
  }
  return env;
}

std::string HostLoaderName() {
#if defined(__aarch64__)
  return "ld-linux-aarch64.so.1";
#else
  return "ld-linux-x86-64.so.2";
#endif
}

absl::StatusOr<DriverGlibc> FindDriverGlibc(const std::vector<GlibcDirCandidate>& dirs,
                                            const GlibcVersion& needed, const HostFs* host) {
  const LoaderTarget target = ThisProcessTarget();
  std::vector<std::string> why;
  for (const GlibcDirCandidate& d : dirs) {
    // A file in the directory, as a path on this machine ("" when it cannot be resolved).
    auto file = [&](const std::string& dir_suffix, const std::string& name) -> std::string {
      if (host == nullptr || d.host_dir.empty()) return JoinPath(d.local + dir_suffix, name);
      absl::StatusOr<std::string> local = host->Resolve(JoinPath(d.host_dir + dir_suffix, name));
      return local.ok() ? *local : std::string();
    };
    const std::string libc = file("", "libc.so.6");
    std::string loader = file("", HostLoaderName());
    // glibc installs the x86_64 loader in lib64 beside lib under some prefixes.
    if (!IsRegularFile(loader) && absl::EndsWith(d.local, "/lib") &&
        IsRegularFile(file("64", HostLoaderName()))) {
      loader = file("64", HostLoaderName());
    }
    if (!IsRegularFile(libc) || !IsRegularFile(loader)) {
      why.push_back(absl::StrCat(d.shown, ": no libc.so.6 and ", HostLoaderName(), " pair"));
      continue;
    }
    absl::StatusOr<ElfInfo> info = ReadElfInfo(libc);
    if (!info.ok()) {
      why.push_back(absl::StrCat(d.shown, ": ", info.status().message()));
      continue;
    }
    if (info->elf_class != target.elf_class || info->machine != target.machine) {
      why.push_back(absl::StrCat(d.shown, ": libc.so.6 is for another machine"));
      continue;
    }
    std::optional<GlibcVersion> provided = MaxGlibcProvided(*info);
    if (!provided.has_value() || *provided < needed) {
      why.push_back(absl::StrCat(d.shown, ": libc.so.6 provides glibc ",
                                 provided ? provided->ToString() : "(no GLIBC_ versions)",
                                 ", older than the ", needed.ToString(), " needed"));
      continue;
    }
    return DriverGlibc{d.local, d.shown, loader, libc, *provided};
  }
  return absl::NotFoundError(absl::StrCat(
      "no C library of glibc ", needed.ToString(),
      " or newer with its dynamic loader was found beside the driver (", absl::StrJoin(why, "; "),
      "). Fix: install the driver together with its glibc (on Talos the "
      "nvidia-container-toolkit extension ships both), or run gpulet with the nvidia runtime "
      "class or CDI so the libraries are injected"));
}

NvmlWorkerGpuLibrary::NvmlWorkerGpuLibrary(NvmlWorkerCommand command, Options options)
    : command_(std::move(command)), options_(options) {
  backoff_ = options_.backoff_initial;
}

absl::StatusOr<std::unique_ptr<NvmlWorkerGpuLibrary>> NvmlWorkerGpuLibrary::Start(
    NvmlWorkerCommand command, Options options) {
  for (const std::string* path : {&command.loader, &command.worker}) {
    if (!IsRegularFile(*path)) {
      return absl::NotFoundError(absl::StrCat(
          *path, " does not exist or is not a file, so the NVML worker cannot be started. Fix: ",
          path == &command.worker
              ? "install gpulet-nvml-worker beside the gpulet executable (the container image "
                "has it in /usr/bin)"
              : "check the host's driver installation"));
    }
  }
  std::unique_ptr<NvmlWorkerGpuLibrary> lib(new NvmlWorkerGpuLibrary(std::move(command), options));
  if (pipe2(lib->wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::InternalError(absl::StrCat("pipe2 for the NVML worker: ", std::strerror(errno)));
  }
  lib->supervisor_ = StartNamedThread("gpulet-nvmlsup", [p = lib.get()] { p->Supervise(); });
  absl::Status status;
  {
    absl::MutexLock lock(&lib->mu_);
    options.clock->AwaitWithTimeout(&lib->mu_, absl::Condition(&lib->first_done_),
                                    options.start_timeout + absl::Seconds(2));
    status = lib->first_done_
                 ? lib->first_status_
                 : absl::DeadlineExceededError("the NVML worker's supervisor did not report");
  }
  if (!status.ok()) return status;  // the destructor kills the worker
  return lib;
}

NvmlWorkerGpuLibrary::~NvmlWorkerGpuLibrary() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  Wake();
  if (supervisor_.joinable()) supervisor_.join();
  if (wake_[0] >= 0) close(wake_[0]);
  if (wake_[1] >= 0) close(wake_[1]);
}

void NvmlWorkerGpuLibrary::Wake() {
  if (wake_[1] >= 0) {
    char c = 1;
    (void)!write(wake_[1], &c, 1);
  }
}

pid_t NvmlWorkerGpuLibrary::worker_pid() const {
  absl::MutexLock lock(&mu_);
  return phase_ == Phase::kReady ? pid_ : 0;
}

int NvmlWorkerGpuLibrary::restarts() const {
  absl::MutexLock lock(&mu_);
  return std::max(restarts_, 0);
}

void NvmlWorkerGpuLibrary::SpawnLocked() {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    last_failure_ = absl::StrCat("socketpair failed: ", std::strerror(errno));
    next_spawn_ = options_.clock->Monotonic() + backoff_;
    return;
  }
  // Everything the child needs is built before fork(): after it, only async-signal-safe
  // calls are allowed in a multi-threaded parent.
  const pid_t parent = getpid();
  std::vector<std::string> args = {command_.loader, "--inhibit-cache"};
  if (!command_.library_path.empty()) {
    args.push_back("--library-path");
    args.push_back(absl::StrJoin(command_.library_path, ":"));
  }
  for (std::string a : {command_.worker, std::string("--fd"), std::string("3"),
                        std::string("--nvml"), command_.nvml, std::string("--parent"),
                        absl::StrCat(parent), std::string("--call-timeout-ms"),
                        absl::StrCat(absl::ToInt64Milliseconds(options_.call_timeout))}) {
    args.push_back(std::move(a));
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env = command_.env;
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  const pid_t pid = fork();
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    if (sv[1] == 3) {
      fcntl(3, F_SETFD, 0);
    } else if (dup2(sv[1], 3) != 3) {
      _exit(127);
    }
    syscall(SYS_close_range, 4U, ~0U, 0U);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  close(sv[1]);
  if (pid < 0) {
    close(sv[0]);
    last_failure_ = absl::StrCat("fork failed: ", std::strerror(errno));
    next_spawn_ = options_.clock->Monotonic() + backoff_;
    return;
  }
  fd_ = sv[0];
  pid_ = pid;
  ++generation_;
  ++restarts_;
  phase_ = Phase::kStarting;
  started_at_ = options_.clock->Monotonic();
  ping_id_ = 0;
  decoder_ = nvml::FrameDecoder();
  GPULET_LOG_INFO("NVML worker started (pid {}): {} {}", pid, command_.loader,
                  absl::StrJoin(args.begin() + 1, args.end(), " "));
}

void NvmlWorkerGpuLibrary::KillLocked(const std::string& why, bool reaped) {
  const pid_t pid = pid_;
  if (pid > 0 && !reaped) {
    kill(pid, SIGKILL);
    zombies_.push_back(pid);
  }
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  pid_ = 0;
  const bool was_ready = phase_ == Phase::kReady;
  // A worker that ran well for a while starts the backoff from the beginning again.
  if (was_ready && options_.clock->Monotonic() - ready_at_ > absl::Seconds(30)) {
    backoff_ = options_.backoff_initial;
  }
  phase_ = Phase::kDown;
  last_failure_ = absl::StrCat("the NVML worker (pid ", pid, ") ", why);
  next_spawn_ = options_.clock->Monotonic() + backoff_;
  absl::Status down = absl::UnavailableError(
      absl::StrCat(last_failure_, "; gpulet restarts it in ", absl::FormatDuration(backoff_)));
  backoff_ = std::min(backoff_ * 2, options_.backoff_max);
  for (auto& [id, p] : pending_) {
    p->response.status = down;
    p->done = true;
  }
  pending_.clear();
  busy_lanes_.clear();
  ping_id_ = 0;
  if (!stop_) GPULET_LOG_WARN("{}", down.message());
  if (!first_done_) {
    first_done_ = true;
    first_status_ = absl::UnavailableError(absl::StrCat(
        "the NVML worker started through ", command_.loader, " ", why,
        " before it had loaded NVML. Fix: run `gpulet doctor`; the driver library may be "
        "damaged or the kernel driver stuck"));
  }
}

void NvmlWorkerGpuLibrary::KillDeadLocked(const std::string& fallback) {
  // The socket says the worker died. Give the kernel a moment to make it reapable so the
  // message can say how it died (killed by a signal, exit status); a worker that closed
  // its socket yet lives on is killed as usual.
  std::string how = fallback;
  bool reaped = false;
  for (int i = 0; i < 50 && pid_ > 0; ++i) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      how = DescribeWait(status);
      reaped = true;  // KillLocked must not signal or re-reap a pid that may be reused
      break;
    }
    mu_.Unlock();
    absl::SleepFor(absl::Milliseconds(5));
    mu_.Lock();
  }
  KillLocked(how, reaped);
}

bool NvmlWorkerGpuLibrary::SendLocked(const json& message) {
  if (fd_ < 0) return false;
  const std::string frame = nvml::EncodeFrame(message);
  size_t done = 0;
  while (done < frame.size()) {
    ssize_t n = send(fd_, frame.data() + done, frame.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
        // The worker is gone: the supervisor reaps it and says how it died.
        peer_gone_ = true;
        kill_request_ = "closed its socket";
      } else {
        // A full socket means the worker stopped reading; a partial frame cannot be resumed.
        kill_request_ = absl::StrCat("stopped taking requests (", std::strerror(errno), ")");
      }
      Wake();
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

std::string NvmlWorkerGpuLibrary::DownMessageLocked() const {
  if (phase_ == Phase::kStarting) {
    return absl::StrCat("the NVML worker (pid ", pid_, ") is starting after: ", last_failure_);
  }
  return absl::StrCat(last_failure_.empty() ? "the NVML worker is not running" : last_failure_,
                      "; gpulet restarts it in ",
                      absl::FormatDuration(std::max(absl::ZeroDuration(),
                                                    next_spawn_ - options_.clock->Monotonic())));
}

void NvmlWorkerGpuLibrary::HandleMessageLocked(const json& message) {
  absl::StatusOr<nvml::Response> r = nvml::DecodeResponse(message);
  if (!r.ok()) {
    KillLocked(absl::StrCat("sent garbage: ", r.status().message()));
    return;
  }
  if (phase_ == Phase::kStarting) {
    if (r->id != 0) {
      KillLocked("answered before saying hello");
      return;
    }
    if (!r->status.ok()) {
      absl::Status why = r->status;
      if (!first_done_) {
        first_done_ = true;
        first_status_ = why;
      }
      KillLocked(absl::StrCat("could not load NVML: ", why.message()));
      return;
    }
    absl::StatusOr<nvml::Hello> hello = nvml::HelloFromJson(r->result);
    if (!hello.ok()) {
      KillLocked(absl::StrCat("sent garbage: ", hello.status().message()));
      return;
    }
    phase_ = Phase::kReady;
    ready_at_ = options_.clock->Monotonic();
    last_pong_ = ready_at_;
    GPULET_LOG_INFO("NVML worker ready (pid {}, glibc {}, {})", hello->pid, hello->glibc,
                    hello->library);
    if (!first_done_) {
      first_done_ = true;
      first_status_ = absl::OkStatus();
    }
    return;
  }
  if (ping_id_ != 0 && r->id == ping_id_) {
    ping_id_ = 0;
    last_pong_ = options_.clock->Monotonic();
    return;
  }
  auto it = pending_.find(r->id);
  if (it == pending_.end()) {
    KillLocked(absl::StrCat("answered request ", r->id, ", which gpulet never sent"));
    return;
  }
  const uint64_t id = it->first;
  it->second->response = *std::move(r);
  it->second->done = true;
  pending_.erase(it);
  for (auto lane = busy_lanes_.begin(); lane != busy_lanes_.end(); ++lane) {
    if (lane->second.first == id) {
      busy_lanes_.erase(lane);
      break;
    }
  }
}

void NvmlWorkerGpuLibrary::TickLocked() {
  const MonoTime now = options_.clock->Monotonic();
  for (auto it = zombies_.begin(); it != zombies_.end();) {
    // WNOHANG: a worker stuck in the driver (D state) cannot die yet; try again next tick.
    if (waitpid(*it, nullptr, WNOHANG) != 0) {
      it = zombies_.erase(it);
    } else {
      ++it;
    }
  }
  if (!kill_request_.empty()) {
    std::string why = std::move(kill_request_);
    kill_request_.clear();
    const bool gone = peer_gone_;
    peer_gone_ = false;
    if (phase_ != Phase::kDown) {
      if (gone) {
        KillDeadLocked(why);
      } else {
        KillLocked(why);
      }
    }
  }
  if (phase_ == Phase::kStarting && now - started_at_ > options_.start_timeout) {
    if (!first_done_) {
      first_done_ = true;
      first_status_ = absl::DeadlineExceededError(absl::StrCat(
          "the NVML worker started through ", command_.loader, " did not load ", command_.nvml,
          " within ", absl::FormatDuration(options_.start_timeout),
          " (nvmlInit_v2 hung?). Fix: check the kernel log for NVIDIA errors (gpulet doctor)"));
    }
    KillLocked(
        absl::StrCat("did not load NVML within ", absl::FormatDuration(options_.start_timeout)));
  }
  if (phase_ == Phase::kReady) {
    if (ping_id_ != 0 && now - ping_sent_ > options_.hang_timeout) {
      KillLocked(absl::StrCat("did not answer a ping within ",
                              absl::FormatDuration(options_.hang_timeout), ": it is hung"));
    } else if (ping_id_ == 0 && now - last_pong_ >= options_.ping_interval) {
      nvml::Request ping;
      ping.id = next_id_++;
      ping.op = nvml::Op::kPing;
      if (SendLocked(nvml::EncodeRequest(ping))) {
        ping_id_ = ping.id;
        ping_sent_ = now;
      }
    }
  }
  if (phase_ == Phase::kDown && !stop_ && now >= next_spawn_ &&
      (first_status_.ok() || !first_done_)) {
    SpawnLocked();
  }
}

void NvmlWorkerGpuLibrary::Supervise() {
  char buf[65536];
  while (true) {
    int fd;
    {
      absl::MutexLock lock(&mu_);
      if (stop_) break;
      TickLocked();
      fd = fd_;
    }
    pollfd fds[2] = {{wake_[0], POLLIN, 0}, {fd, POLLIN, 0}};
    int ready = poll(fds, fd >= 0 ? 2 : 1, 100);
    if (ready <= 0) continue;
    if (fds[0].revents != 0) {
      while (read(wake_[0], buf, sizeof(buf)) > 0) {
      }
    }
    if (fd < 0 || fds[1].revents == 0) continue;
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    absl::MutexLock lock(&mu_);
    if (fd != fd_) continue;  // replaced meanwhile
    if (n <= 0) {
      KillDeadLocked("closed its socket");
      continue;
    }
    decoder_.Append(std::string_view(buf, static_cast<size_t>(n)));
    while (fd_ == fd) {
      absl::StatusOr<std::optional<json>> message = decoder_.Next();
      if (!message.ok()) {
        KillLocked(absl::StrCat("sent garbage: ", message.status().message()));
        break;
      }
      if (!message->has_value()) break;
      HandleMessageLocked(**message);
    }
  }
  absl::MutexLock lock(&mu_);
  if (phase_ != Phase::kDown) KillLocked("was stopped because gpulet is stopping");
  for (int i = 0; i < 20 && !zombies_.empty(); ++i) {
    TickLocked();
    if (zombies_.empty()) break;
    mu_.Unlock();
    absl::SleepFor(absl::Milliseconds(10));
    mu_.Lock();
  }
}

absl::StatusOr<json> NvmlWorkerGpuLibrary::Call(int lane, nvml::Request request,
                                                absl::Duration wait, const std::string& what) {
  std::shared_ptr<Pending> p = std::make_shared<Pending>();
  absl::MutexLock lock(&mu_);
  if (phase_ != Phase::kReady) {
    return absl::UnavailableError(absl::StrCat(what, " not asked: ", DownMessageLocked()));
  }
  const MonoTime deadline = options_.clock->Monotonic() + wait;
  // Callers take turns on a lane, as on a TimedLane. A call whose own deadline has passed
  // without an answer leaves its lane wedged: later calls fail fast instead of queueing
  // behind a GPU (or worker) that does not answer.
  auto lane_free = [this, lane]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto busy = busy_lanes_.find(lane);
    return phase_ != Phase::kReady || busy == busy_lanes_.end() ||
           options_.clock->Monotonic() > busy->second.second;
  };
  options_.clock->AwaitWithDeadline(&mu_, absl::Condition(&lane_free), deadline);
  if (phase_ != Phase::kReady) {
    return absl::UnavailableError(absl::StrCat(what, " not asked: ", DownMessageLocked()));
  }
  if (auto busy = busy_lanes_.find(lane); busy != busy_lanes_.end()) {
    const absl::Duration late = options_.clock->Monotonic() - busy->second.second;
    return absl::DeadlineExceededError(absl::StrCat(
        what, " not asked: the NVML worker (pid ", pid_, ") ",
        late > absl::ZeroDuration()
            ? absl::StrCat("has not answered the previous call on ", LaneName(lane),
                           ", which was due ", absl::FormatDuration(late), " ago")
            : absl::StrCat("was still busy with the previous call on ", LaneName(lane))));
  }
  request.id = next_id_++;
  if (!SendLocked(nvml::EncodeRequest(request))) {
    return absl::UnavailableError(
        absl::StrCat(what, " not asked: the NVML worker (pid ", pid_, ") ", kill_request_));
  }
  pending_[request.id] = p;
  busy_lanes_[lane] = {request.id, deadline};
  options_.clock->AwaitWithDeadline(&mu_, absl::Condition(&p->done), deadline);
  if (!p->done) {
    // The lane stays busy until the answer arrives or the worker is replaced.
    return absl::DeadlineExceededError(absl::StrCat("no answer from the NVML worker (pid ", pid_,
                                                    ") to ", what, " within ",
                                                    absl::FormatDuration(wait)));
  }
  if (!p->response.status.ok()) return p->response.status;
  return std::move(p->response.result);
}

absl::StatusOr<gpu::SystemInfo> NvmlWorkerGpuLibrary::GetSystemInfo() {
  nvml::Request r;
  r.op = nvml::Op::kSystemInfo;
  auto result =
      Call(kSystemLane, r, options_.call_timeout + options_.slack, "nvmlSystemGetDriverVersion");
  if (!result.ok()) return result.status();
  absl::StatusOr<gpu::SystemInfo> info = nvml::SystemInfoFromJson(*result);
  if (info.ok() && !command_.description.empty()) info->library_path = command_.description;
  return info;
}

absl::StatusOr<unsigned> NvmlWorkerGpuLibrary::GetDeviceCount() {
  nvml::Request r;
  r.op = nvml::Op::kDeviceCount;
  auto result =
      Call(kSystemLane, r, options_.call_timeout + options_.slack, "nvmlDeviceGetCount_v2");
  if (!result.ok()) return result.status();
  return nvml::CountFromJson(*result);
}

absl::StatusOr<gpu::DeviceIdentity> NvmlWorkerGpuLibrary::GetDeviceIdentity(unsigned index) {
  nvml::Request r;
  r.op = nvml::Op::kIdentity;
  r.index = index;
  auto result = Call(static_cast<int>(index), r, options_.call_timeout + options_.slack,
                     absl::StrCat("identity queries for GPU ", index));
  if (!result.ok()) return result.status();
  return nvml::IdentityFromJson(*result);
}

absl::StatusOr<gpu::ProbeAnswer> NvmlWorkerGpuLibrary::Probe(unsigned index,
                                                             absl::Duration timeout) {
  nvml::Request r;
  r.op = nvml::Op::kProbe;
  r.index = index;
  r.timeout = timeout;
  auto result = Call(static_cast<int>(index), r, timeout + options_.slack,
                     absl::StrCat("liveness probe of GPU ", index));
  if (!result.ok()) return result.status();
  return nvml::ProbeAnswerFromJson(*result);
}

absl::StatusOr<gpu::DeviceSample> NvmlWorkerGpuLibrary::Sample(unsigned index,
                                                               absl::Duration timeout) {
  nvml::Request r;
  r.op = nvml::Op::kSample;
  r.index = index;
  r.timeout = timeout;
  auto result = Call(static_cast<int>(index), r, timeout + options_.slack,
                     absl::StrCat("sampling GPU ", index));
  if (!result.ok()) return result.status();
  absl::StatusOr<gpu::DeviceSample> sample = nvml::SampleFromJson(*result);
  if (sample.ok()) sample->taken = options_.clock->Now();
  return sample;
}

absl::StatusOr<gpu::MigLayout> NvmlWorkerGpuLibrary::GetMigLayout(unsigned index,
                                                                  absl::Duration timeout) {
  nvml::Request r;
  r.op = nvml::Op::kMigLayout;
  r.index = index;
  r.timeout = timeout;
  auto result = Call(static_cast<int>(index), r, timeout + options_.slack,
                     absl::StrCat("reading the MIG layout of GPU ", index));
  if (!result.ok()) return result.status();
  return nvml::MigLayoutFromJson(*result);
}

absl::Status NvmlWorkerGpuLibrary::SetMemoryLimit(unsigned index, const std::string& cgroup,
                                                  uint64_t hard_bytes, absl::Duration timeout) {
  nvml::Request r;
  r.op = nvml::Op::kSetMemoryLimit;
  r.index = index;
  r.timeout = timeout;
  r.cgroup = cgroup;
  r.bytes = hard_bytes;
  auto result = Call(static_cast<int>(index), r, timeout + options_.slack,
                     absl::StrCat("setting the VRAM limit of ", cgroup, " on GPU ", index));
  return result.status();
}

absl::Status NvmlWorkerGpuLibrary::RegisterEvents(unsigned count) {
  uint64_t generation;
  {
    absl::MutexLock lock(&mu_);
    events_count_ = count;
    generation = generation_;
  }
  nvml::Request r;
  r.op = nvml::Op::kRegisterEvents;
  r.index = count;
  auto result =
      Call(kEventLane, r, options_.call_timeout + options_.slack, "nvmlDeviceRegisterEvents");
  absl::MutexLock lock(&mu_);
  // Registered on this worker, even if partly (NVML's own refusal, its code attached): do not
  // replay it on every wait. Only a worker that did not answer (Unavailable, no NVML code)
  // leaves it to the replay.
  if (result.ok() || !absl::IsUnavailable(result.status()) ||
      gpu::NvmlCodeOf(result.status()) >= 0) {
    events_generation_ = generation;
  }
  return result.status();
}

absl::StatusOr<std::optional<gpu::GpuEvent>> NvmlWorkerGpuLibrary::WaitEvent(
    absl::Duration timeout) {
  bool replay = false;
  unsigned count = 0;
  {
    absl::MutexLock lock(&mu_);
    replay = events_count_ > 0 && phase_ == Phase::kReady && events_generation_ != generation_;
    count = events_count_;
  }
  if (replay) {
    absl::Status s = RegisterEvents(count);
    if (!s.ok()) GPULET_LOG_WARN("after the NVML worker restarted: {}", s.message());
  }
  nvml::Request r;
  r.op = nvml::Op::kWaitEvent;
  r.timeout = timeout;
  auto result = Call(kEventLane, r, timeout + options_.slack, "nvmlEventSetWait_v2");
  if (!result.ok()) return result.status();
  return nvml::EventFromJson(*result);
}

}  // namespace gpulet::nvml
