// DaemonProcess: starts a long-running program (gpulet serve) in the background for
// integration tests and benchmarks, with its stderr captured to a file, and stops it with a
// signal. No shell is involved.
//
// Thread-safety: one owner.
#ifndef GPULET_TESTING_DAEMON_PROCESS_H_
#define GPULET_TESTING_DAEMON_PROCESS_H_

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace gpulet::testing {

class DaemonProcess {
 public:
  DaemonProcess() = default;
  ~DaemonProcess();
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  // The next Start runs the program with SIGTERM, SIGINT and SIGHUP blocked (for tests of
  // a signal at any moment of the program's own life, from before its main() on).
  void BlockStopSignalsAtStart() { block_stop_signals_ = true; }
  // Starts argv[0] with `argv`, extra environment `env`, stdout and stderr to `log_file`.
  bool Start(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
             const std::string& log_file);
  // Sends `sig` and waits up to `timeout`; then SIGKILL. Returns the exit code (-1 if killed
  // or not started).
  int Stop(int sig, absl::Duration timeout);
  bool Running();
  pid_t pid() const { return pid_; }
  // Open file descriptors and threads of the process (from /proc).
  int CountFds() const;
  int CountThreads() const;
  std::string Log() const;

 private:
  pid_t pid_ = -1;
  std::string log_file_;
  int exit_code_ = -1;
  bool block_stop_signals_ = false;
};

}  // namespace gpulet::testing

#endif  // GPULET_TESTING_DAEMON_PROCESS_H_
