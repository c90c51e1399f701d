// The real peers `make test` builds from their Go modules (scripts/e2e/build.sh --tools links
// them into <cache>/bin: kustomize, helm, talos-validate-v1.N), found for the tests that
// compare gpulet's output with what those tools make of it.
//
// Thread-safety: pure functions of the environment.
#ifndef GPULET_TESTING_REAL_TOOLS_H_
#define GPULET_TESTING_REAL_TOOLS_H_

#include <cstdlib>
#include <string>

namespace gpulet::testing {

// The path of `program` on PATH, or "" when it is not there.
std::string FindOnPath(const std::string& program);

// <cache>/bin/NAME when it is executable (cache: $GPULET_E2E_CACHE, else
// ${XDG_CACHE_HOME:-$HOME/.cache}/gpulet-e2e), else NAME on PATH; "" when neither is there.
std::string RealTool(const std::string& name);

// True under CI=true, where a missing tool is a failure, not a skip.
inline bool InCi() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

}  // namespace gpulet::testing

// Fails (in CI, where `make test` has built the tool) or skips the test when `path` is "".
#define GPULET_REQUIRE_REAL_TOOL(path, name)                                                    \
  do {                                                                                          \
    if ((path).empty()) {                                                                       \
      if (::gpulet::testing::InCi()) {                                                          \
        FAIL() << "no " << (name) << ": `make test` builds it (scripts/e2e/build.sh --tools)";  \
      }                                                                                         \
      GTEST_SKIP() << "no " << (name) << ": run scripts/e2e/build.sh --tools (make test does)"; \
    }                                                                                           \
  } while (0)

#endif  // GPULET_TESTING_REAL_TOOLS_H_
