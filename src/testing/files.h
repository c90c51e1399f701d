// Files for tests: ReadTextFile (a whole file as a string, "" when it cannot be read), and
// ScratchDir, a directory under /tmp removed with everything in it when the ScratchDir goes.
//
// Thread-safety: ReadTextFile is a pure function; a ScratchDir belongs to one test.
#ifndef GPULET_TESTING_FILES_H_
#define GPULET_TESTING_FILES_H_

#include <stdlib.h>

#include <filesystem>
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

class ScratchDir {
 public:
  ScratchDir() {
    char tmpl[] = "/tmp/gpulet-test-XXXXXX";
    const char* made = mkdtemp(tmpl);
    path_ = made != nullptr ? made : "";
  }
  ~ScratchDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }

  // Writes `text` to `rel` under the directory, creating its parent directories; returns
  // the full path.
  std::string Write(const std::string& rel, const std::string& text) const {
    std::filesystem::path p = std::filesystem::path(path_) / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }

 private:
  std::string path_;
};

}  // namespace gpulet::testing

#endif  // GPULET_TESTING_FILES_H_
