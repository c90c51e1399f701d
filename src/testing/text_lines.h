// LineStartingWith: the first line of a text (a /metrics body, a log) that contains
// `prefix`, from that point to the end of its line; "" when none does. For tests that pick
// one series out of an exposition.
//
// Thread-safety: pure function.
#ifndef GPULET_TESTING_TEXT_LINES_H_
#define GPULET_TESTING_TEXT_LINES_H_

#include <string>

namespace gpulet::testing {

inline std::string LineStartingWith(const std::string& text, const std::string& prefix) {
  size_t at = text.find(prefix);
  return at == std::string::npos ? std::string() : text.substr(at, text.find('\n', at) - at);
}

}  // namespace gpulet::testing

#endif  // GPULET_TESTING_TEXT_LINES_H_
