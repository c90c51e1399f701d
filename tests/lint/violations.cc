// Deliberate violations of .clang-tidy's rules, one per function: the clang_lint_config test
// (scripts/clang_lint.py --self-test) runs clang-tidy with the project's configuration on this
// file and fails unless every check named in a `// expect:` comment reports its line. Never
// compiled into gpulet.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <numeric>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

struct Counter {
  absl::Mutex mu;
  int n ABSL_GUARDED_BY(mu) = 0;
  int Read() { return n; }  // expect: clang-diagnostic-thread-safety-analysis
};

std::string UseAfterMove(std::string s) {
  std::string t = std::move(s);
  return s + t;  // expect: bugprone-use-after-move
}

std::string_view Dangling() {
  std::string_view v = std::string("temporary");  // expect: clang-diagnostic-dangling-gsl
  return v;
}

std::string_view ReturnsATemporary() {
  return std::string("temporary");  // expect: clang-diagnostic-return-stack-address
}

std::string MoveConst(const std::string& s) {
  return std::move(s);  // expect: performance-move-const-arg
}

std::string SwappedArguments() {
  return std::string('x', 10);  // expect: bugprone-string-constructor
}

void MemsetSwapped(char* buf) {
  std::memset(buf, sizeof(buf), 0);  // expect: bugprone-suspicious-memset-usage
}

struct Undelegated {
  explicit Undelegated(int) {}
  Undelegated() {
    Undelegated(1);  // expect: bugprone-undelegated-constructor
  }
};

void Sink(std::string);
template <typename T>
void Forward(T&& t) {
  Sink(std::move(t));  // expect: bugprone-move-forwarding-reference
}

size_t SizeofSizeof() {
  return sizeof(sizeof(int));  // expect: bugprone-sizeof-expression
}

int FoldInto(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0);  // expect: bugprone-fold-init-type
}

void InaccurateErase(std::vector<int>& v) {
  v.erase(std::remove(v.begin(), v.end(), 1));  // expect: bugprone-inaccurate-erase
}
