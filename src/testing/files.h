// ReadTextFile: a whole file as a string ("" when it cannot be read), for tests that check
// what a command or the daemon wrote.
//
// Thread-safety: pure function.
#ifndef GPULET_TESTING_FILES_H_
#define GPULET_TESTING_FILES_H_

#include <fstream>
#include <sstream>
#include <string>

namespace gpulet::testing {

inline std::string ReadTextFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace gpulet::testing

#endif  // GPULET_TESTING_FILES_H_
