#include "common/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

extern char** environ;

namespace gpulet {
namespace {

using SteadyClock = std::chrono::steady_clock;

// A descriptor closed on scope exit.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Reset(); }
  int get() const { return fd_; }
  void Reset(int fd = -1) {
    if (fd_ >= 0) close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// Moves `fd` above the standard descriptors, so that the child's dup2 onto 0-2 never
// clobbers one of its own sources (gpulet may run with a standard descriptor closed).
int AboveStdio(int fd) {
  if (fd < 0 || fd > 2) return fd;
  int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  close(fd);
  return moved;
}

absl::Status MakePipe(Fd* read_end, Fd* write_end) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("cannot create a pipe: ", strerror(errno)));
  }
  read_end->Reset(AboveStdio(fds[0]));
  write_end->Reset(AboveStdio(fds[1]));
  if (read_end->get() < 0 || write_end->get() < 0) {
    return absl::InternalError(absl::StrCat("cannot create a pipe: ", strerror(errno)));
  }
  return absl::OkStatus();
}

// The first steps of every child, before anything else runs there. Async-signal-safe only.
void ChildCommonSetup(pid_t parent) {
  // SIGKILL when the forking thread (and so gpulet) dies; if gpulet died between fork and
  // here, the child has already been re-parented and must go now.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);
  // Its own process group, so that a deadline kills whatever it started as well.
  setpgid(0, 0);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  signal(SIGPIPE, SIG_DFL);
}

// argv[0] as a path to execute: itself when it names a path, else the first executable
// match in $PATH.
absl::StatusOr<std::string> ResolveProgram(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string search = path != nullptr && *path != '\0' ? path : "/usr/local/bin:/usr/bin:/bin";
  for (absl::string_view dir : absl::StrSplit(search, ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(dir, "/", name);
    struct stat st;
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return absl::NotFoundError(
      absl::StrCat("cannot run '", name, "': no such program in $PATH (", search, ")"));
}

absl::Status ExecError(const std::string& program, int err) {
  std::string message = absl::StrCat("cannot run ", program, ": ", strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    default:
      return absl::FailedPreconditionError(message);
  }
}

// One output stream being collected.
struct Stream {
  Fd fd;
  std::string* into = nullptr;
};

// When a child started and when it must be done (time_point::max() without a deadline).
struct Timing {
  bool finite = false;
  SteadyClock::time_point start, deadline;
};

Timing StartTiming(const SubprocessOptions& options) {
  Timing t;
  t.finite = options.deadline != absl::InfiniteDuration();
  t.start = SteadyClock::now();
  t.deadline =
      t.finite
          ? t.start + absl::ToChronoNanoseconds(std::max(options.deadline, absl::ZeroDuration()))
          : SteadyClock::time_point::max();
  return t;
}

// Reads `streams` until each reaches end of file or `deadline` passes; returns false on
// the deadline.
bool Collect(std::array<Stream, 2>& streams, size_t count, SteadyClock::time_point deadline,
             bool finite, size_t max_bytes, bool* truncated) {
  while (true) {
    std::array<pollfd, 2> fds{};
    nfds_t n = 0;
    std::array<Stream*, 2> polled{};
    for (size_t i = 0; i < count; ++i) {
      if (streams[i].fd.get() < 0) continue;
      fds[n] = {streams[i].fd.get(), POLLIN, 0};
      polled[n++] = &streams[i];
    }
    if (n == 0) return true;
    int timeout_ms = -1;
    if (finite) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - SteadyClock::now());
      if (left.count() <= 0) return false;
      timeout_ms = static_cast<int>(std::min<int64_t>(left.count(), 1 << 30));
    }
    int r = poll(fds.data(), n, timeout_ms);
    if (r < 0 && errno != EINTR) return true;  // cannot wait: treat as done, then reap
    if (r <= 0) continue;
    for (nfds_t i = 0; i < n; ++i) {
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      char buf[8192];
      ssize_t got = read(fds[i].fd, buf, sizeof(buf));
      if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (got <= 0) {
        polled[i]->fd.Reset();
        continue;
      }
      std::string& into = *polled[i]->into;
      size_t keep =
          std::min(static_cast<size_t>(got), max_bytes - std::min(max_bytes, into.size()));
      into.append(buf, keep);
      if (keep < static_cast<size_t>(got)) *truncated = true;
    }
  }
}

void Kill(pid_t pid) {
  kill(-pid, SIGKILL);  // its process group, when setpgid ran
  kill(pid, SIGKILL);
}

// Waits for `pid` to exit, killing it when `deadline` passes (at once when `late`), and
// fills the status fields of `result`.
void Reap(pid_t pid, SteadyClock::time_point deadline, bool finite, bool late,
          SubprocessResult* result) {
  int status = 0;
  bool reaped = false;
  if (late) {
    result->timed_out = true;
    Kill(pid);
  } else if (finite) {
    // A child may close its output and keep running: the deadline still holds. A pidfd
    // wakes the wait at the exit; kernels before 5.3 fall back to polling every 5 ms.
    Fd pidfd(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
    while (true) {
      pid_t w = waitpid(pid, &status, WNOHANG);
      if (w == pid) {
        reaped = true;
        break;
      }
      if (w < 0 && errno != EINTR) break;
      auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - SteadyClock::now());
      if (left.count() <= 0) {
        result->timed_out = true;
        Kill(pid);
        break;
      }
      int wait_ms = static_cast<int>(std::min<int64_t>(left.count(), 1 << 30));
      if (pidfd.get() >= 0) {
        pollfd p = {pidfd.get(), POLLIN, 0};
        poll(&p, 1, wait_ms);
      } else {
        poll(nullptr, 0, std::min(wait_ms, 5));
      }
    }
  }
  if (!reaped) {
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  result->exited = !result->timed_out && WIFEXITED(status);
  result->exit_code = result->exited ? WEXITSTATUS(status) : -1;
  result->signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

}  // namespace

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? absl::StrCat("SIG", abbrev) : absl::StrCat("signal ", sig);
}

std::string SubprocessResult::Describe() const {
  if (timed_out) {
    return absl::StrCat("killed after the ", absl::FormatDuration(elapsed), " deadline");
  }
  if (exited) return absl::StrCat("exit status ", exit_code);
  return absl::StrCat("killed by ", SignalName(signal));
}

absl::StatusOr<SubprocessResult> RunSubprocess(const std::vector<std::string>& argv,
                                               const SubprocessOptions& options) {
  if (argv.empty() || argv[0].empty()) {
    return absl::InvalidArgumentError("RunSubprocess: no program to run");
  }
  absl::StatusOr<std::string> program = ResolveProgram(argv[0]);
  if (!program.ok()) return program.status();

  // Everything the child touches is built now: after fork it may not allocate.
  std::vector<std::string> env_strings;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    absl::string_view entry = *e;
    std::string key(entry.substr(0, entry.find('=')));
    if (options.env.count(key) == 0) env_strings.emplace_back(entry);
  }
  for (const auto& [key, value] : options.env) env_strings.push_back(absl::StrCat(key, "=", value));
  std::vector<char*> envp, args;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (std::string& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

  std::array<Stream, 2> streams;
  Fd out_w, err_w, exec_r, exec_w;
  SubprocessResult result;
  streams[0].into = &result.out;
  streams[1].into = &result.err;
  for (absl::Status s : {MakePipe(&streams[0].fd, &out_w), MakePipe(&streams[1].fd, &err_w),
                         MakePipe(&exec_r, &exec_w)}) {
    if (!s.ok()) return s;
  }
  Fd devnull(AboveStdio(open("/dev/null", O_RDONLY | O_CLOEXEC)));
  if (devnull.get() < 0) {
    return absl::InternalError(absl::StrCat("cannot open /dev/null: ", strerror(errno)));
  }

  const Timing timing = StartTiming(options);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  if (pid == 0) {
    ChildCommonSetup(parent);
    if (dup2(devnull.get(), 0) < 0 || dup2(out_w.get(), 1) < 0 || dup2(err_w.get(), 2) < 0) {
      _exit(127);
    }
    // The exec-error pipe goes to 3 (close-on-exec: it closes when the program starts) and
    // everything above it is closed, so the program inherits exactly 0-2.
    int report = exec_w.get();
    if (report != 3) {
      report = dup3(report, 3, O_CLOEXEC);
      if (report < 0) _exit(127);
    }
    close_range(4, ~0U, 0);  // best effort: kernels before 5.9 lack it
    execve(program->c_str(), args.data(), envp.data());
    int err = errno;
    (void)!write(report, &err, sizeof(err));
    _exit(127);
  }
  out_w.Reset();
  err_w.Reset();
  exec_w.Reset();
  devnull.Reset();

  bool in_time = Collect(streams, 2, timing.deadline, timing.finite, options.max_output_bytes,
                         &result.truncated);
  Reap(pid, timing.deadline, timing.finite, !in_time, &result);
  result.elapsed = absl::FromChrono(SteadyClock::now() - timing.start);
  // The child has been reaped, so the exec-error pipe holds its errno or is at end of file.
  int exec_errno = 0;
  ssize_t got;
  do {
    got = read(exec_r.get(), &exec_errno, sizeof(exec_errno));
  } while (got < 0 && errno == EINTR);
  if (got == static_cast<ssize_t>(sizeof(exec_errno))) return ExecError(*program, exec_errno);
  return result;
}

absl::StatusOr<SubprocessResult> RunInChild(const std::function<void(int fd)>& child,
                                            const SubprocessOptions& options) {
  std::array<Stream, 2> streams;
  Fd out_w;
  SubprocessResult result;
  streams[0].into = &result.out;
  if (absl::Status s = MakePipe(&streams[0].fd, &out_w); !s.ok()) return s;
  const Timing timing = StartTiming(options);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  if (pid == 0) {
    ChildCommonSetup(parent);
    close(streams[0].fd.get());
    child(out_w.get());
    _exit(0);
  }
  out_w.Reset();
  bool in_time = Collect(streams, 1, timing.deadline, timing.finite, options.max_output_bytes,
                         &result.truncated);
  Reap(pid, timing.deadline, timing.finite, !in_time, &result);
  result.elapsed = absl::FromChrono(SteadyClock::now() - timing.start);
  return result;
}

}  // namespace gpulet
