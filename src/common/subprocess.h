// Subprocess: the one way gpulet starts a child process and waits for its answer.
//
// RunSubprocess runs a program from an argv vector (never through a shell: no quoting, no
// globbing, no injection) and returns its exit status and captured stdout/stderr.
// RunInChild forks and runs a function in the child instead of a program (the NVML probe
// loads a library there that may crash or hang), collecting what it writes to a pipe.
// Both share the rules a node agent needs:
//   - the child dies with the thread that started it (PR_SET_PDEATHSIG, SIGKILL), and exits
//     at once if gpulet died before that took effect, so no child outlives gpulet;
//   - an optional deadline after which the child's process group is SIGKILLed and reaped
//     (the result says timed_out);
//   - the child starts with an empty signal mask and SIGPIPE at its default (gpulet serve
//     blocks signals for sigtimedwait; a mask survives exec);
//   - RunSubprocess: stdin is /dev/null, every descriptor but 0-2 is closed in the child,
//     and gpulet's own pipe ends are close-on-exec, so a child inherits nothing by accident;
//   - a program that cannot be started (missing, not executable) is an error naming it, not
//     an exit code.
// Captured output is capped (SubprocessOptions::max_output_bytes); the rest is read and
// dropped so that the child never blocks on a full pipe.
//
// Thread-safety: each call is independent and may run on any thread. The calling thread
// blocks until the child is reaped; PR_SET_PDEATHSIG follows the thread, which is why the
// call never returns before the child is gone.
#ifndef GPULET_COMMON_SUBPROCESS_H_
#define GPULET_COMMON_SUBPROCESS_H_

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace gpulet {

struct SubprocessOptions {
  // How long the child may run; then it is killed and the result says timed_out.
  absl::Duration deadline = absl::InfiniteDuration();
  // Variables set (or replaced) in the environment the child inherits from gpulet.
  std::map<std::string, std::string> env;
  // Captured bytes kept per stream; more is read and dropped (`truncated`).
  size_t max_output_bytes = 16 << 20;
};

struct SubprocessResult {
  bool exited = false;     // exited normally: exit_code is valid
  int exit_code = -1;      // -1 unless exited
  int signal = 0;          // the signal that killed it, when it did not exit
  bool timed_out = false;  // the deadline passed and gpulet killed it
  bool truncated = false;  // output beyond max_output_bytes was dropped
  std::string out;         // stdout (RunInChild: what the child wrote to its pipe)
  std::string err;         // stderr (RunInChild: empty; the child shares gpulet's)
  absl::Duration elapsed;

  // Exited with status 0 before the deadline.
  bool ok() const { return exited && exit_code == 0 && !timed_out; }
  // "exit status 3", "killed by SIGSEGV", "killed after the 2s deadline", for messages.
  std::string Describe() const;
};

// Runs argv[0] with arguments argv[1..]. argv[0] without a '/' is looked up in $PATH.
// Errors: InvalidArgument for an empty argv; NotFound / PermissionDenied (and the like)
// naming the program when it cannot be executed; Internal when pipes or fork fail. A program
// that runs and fails is not an error: look at the result.
absl::StatusOr<SubprocessResult> RunSubprocess(const std::vector<std::string>& argv,
                                               const SubprocessOptions& options = {});

// Forks; the child runs child(fd), where fd is the write end of a pipe whose contents become
// the result's `out`, then _exit(0)s if `child` returns. The child shares gpulet's
// stdout/stderr (a library's chatter does not corrupt the pipe) and must not return into
// gpulet's code paths: after fork only the forking thread exists, so `child` should do
// little besides the work it is there for and write(2). `options.env` is ignored.
absl::StatusOr<SubprocessResult> RunInChild(const std::function<void(int fd)>& child,
                                            const SubprocessOptions& options = {});

// The name of a signal ("SIGSEGV"), or "signal N".
std::string SignalName(int sig);

}  // namespace gpulet

#endif  // GPULET_COMMON_SUBPROCESS_H_
