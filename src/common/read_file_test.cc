#include "common/read_file.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/files.h"

namespace gpulet {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr size_t kCap = 1024;

TEST(ReadRegularFileTest, ReadsARegularFileAndASymlinkToOne) {
  gpulet::testing::ScratchDir dir;
  const std::string path = dir.path() + "/config.yaml";
  std::ofstream(path) << "version: v1\n";
  absl::StatusOr<std::string> text = ReadRegularFile(path, kCap, "config file");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "version: v1\n");
  fs::create_symlink(path, dir.path() + "/link");
  text = ReadRegularFile(dir.path() + "/link", kCap, "config file");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "version: v1\n");
  // Exactly at the cap is fine; empty is fine.
  std::ofstream(path) << std::string(kCap, 'x');
  EXPECT_TRUE(ReadRegularFile(path, kCap).ok());
  std::ofstream(path, std::ios::trunc).close();
  text = ReadRegularFile(path, kCap);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "");
}

// Every kind of path that is not a small regular file is refused at once, with its kind.
TEST(ReadRegularFileTest, RefusesEveryOtherKindAtOnceNamingIt) {
  gpulet::testing::ScratchDir dir;
  const std::string fifo = dir.path() + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  const std::string subdir = dir.path() + "/dir";
  fs::create_directory(subdir);
  const std::string loop = dir.path() + "/loop";
  fs::create_symlink(dir.path() + "/loop2", loop);
  fs::create_symlink(loop, dir.path() + "/loop2");
  const std::string big = dir.path() + "/big";
  std::ofstream(big) << std::string(kCap + 1, 'x');
  const std::string sock = dir.path() + "/sock";
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, sock.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << std::strerror(errno);

  struct Case {
    std::string path;
    absl::StatusCode code;
    std::string message_has;
  };
  const Case kCases[] = {
      {fifo, absl::StatusCode::kInvalidArgument, "is a FIFO (named pipe), not a regular file"},
      {"/dev/zero", absl::StatusCode::kInvalidArgument, "is a character device"},
      {"/dev/null", absl::StatusCode::kInvalidArgument, "is a character device"},
      {subdir, absl::StatusCode::kInvalidArgument, "is a directory"},
      {sock, absl::StatusCode::kInvalidArgument, "is a socket"},
      {loop, absl::StatusCode::kInvalidArgument, "symlink loop"},
      {big, absl::StatusCode::kInvalidArgument, "1025 bytes, more than the limit of 1024"},
      {dir.path() + "/missing", absl::StatusCode::kNotFound, "does not exist"},
      {"", absl::StatusCode::kInvalidArgument, "the path is empty"},
  };
  for (const Case& c : kCases) {
    // A FIFO with no writer would block a plain open for ever: returning at all is the check.
    absl::StatusOr<std::string> got = ReadRegularFile(c.path, kCap, "config file");
    ASSERT_FALSE(got.ok()) << c.path;
    EXPECT_EQ(got.status().code(), c.code) << c.path << ": " << got.status();
    EXPECT_THAT(std::string(got.status().message()), HasSubstr(c.message_has)) << c.path;
    EXPECT_THAT(std::string(got.status().message()), HasSubstr("config file")) << c.path;
    EXPECT_THAT(std::string(got.status().message()), HasSubstr(c.path)) << c.path;
  }
  close(fd);
}

TEST(ReadRegularFileTest, AnUnreadableFileIsPermissionDenied) {
  if (geteuid() == 0) GTEST_SKIP() << "root reads every file";
  gpulet::testing::ScratchDir dir;
  const std::string path = dir.path() + "/secret";
  std::ofstream(path) << "x";
  chmod(path.c_str(), 0);
  absl::StatusOr<std::string> got = ReadRegularFile(path, kCap);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kPermissionDenied) << got.status();
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("permission denied"));
}

}  // namespace
}  // namespace gpulet
