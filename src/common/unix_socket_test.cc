#include "common/unix_socket.h"

#include <stdio.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "testing/files.h"

namespace gpulet {
namespace {

int Bind(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  return fd;
}

TEST(ProbeUnixSocketTest, TellsServedFromRefusedFromAbsent) {
  gpulet::testing::ScratchDir dir;
  const std::string dead = dir.path() + "/dead.sock";
  close(Bind(dead));  // what a killed process leaves
  EXPECT_EQ(ProbeUnixSocket(dead, absl::ZeroDuration()), SocketProbe::kRefused);
  const std::string live = dir.path() + "/live.sock";
  const int fd = Bind(live);
  ASSERT_EQ(listen(fd, 1), 0);
  EXPECT_EQ(ProbeUnixSocket(live), SocketProbe::kServed);
  close(fd);
  EXPECT_EQ(ProbeUnixSocket(dir.path() + "/absent.sock"), SocketProbe::kAbsent);
  EXPECT_EQ(ProbeUnixSocket(dir.Write("file.sock", "x")), SocketProbe::kNotSocket);
}

// Bound but not yet listening (a server starting) is refused for a moment only.
TEST(ProbeUnixSocketTest, ASocketAboutToListenIsNotTakenForDead) {
  gpulet::testing::ScratchDir dir;
  const std::string path = dir.path() + "/starting.sock";
  const int fd = Bind(path);
  std::thread listener([fd] {
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    listen(fd, 1);
  });
  EXPECT_EQ(ProbeUnixSocket(path, absl::Seconds(2)), SocketProbe::kServed);
  listener.join();
  close(fd);
}

}  // namespace
}  // namespace gpulet
