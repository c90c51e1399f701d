// Test helper: runs a program (no shell) with extra environment variables and captures its
// exit code, stdout and stderr, for tests and benchmarks that drive the gpulet binary. A thin
// wrapper over the production helper, common/subprocess.h (so the child also dies with the
// test), in the shape tests assert on.
//
// Thread-safety: each call is independent.
#ifndef GPULET_TESTING_SUBPROCESS_H_
#define GPULET_TESTING_SUBPROCESS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/subprocess.h"

namespace gpulet::testing {

struct RunResult {
  int exit_code = -1;  // -1 when killed by a signal, timed out, or not started
  int signal = 0;
  bool timed_out = false;
  std::string out;
  std::string err;  // stderr; when the program could not be started, why
  double seconds = 0;
};

inline RunResult RunProgram(const std::vector<std::string>& argv,
                            const std::map<std::string, std::string>& env = {},
                            int timeout_ms = 60000) {
  SubprocessOptions options;
  options.env = env;
  options.deadline = absl::Milliseconds(timeout_ms);
  absl::StatusOr<SubprocessResult> r = RunSubprocess(argv, options);
  RunResult result;
  if (!r.ok()) {
    result.err = std::string(r.status().message());
    return result;
  }
  result.exit_code = r->exited ? r->exit_code : -1;
  result.signal = r->signal;
  result.timed_out = r->timed_out;
  result.out = std::move(r->out);
  result.err = std::move(r->err);
  result.seconds = absl::ToDoubleSeconds(r->elapsed);
  return result;
}

}  // namespace gpulet::testing

#endif  // GPULET_TESTING_SUBPROCESS_H_
