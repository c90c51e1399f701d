#include "health/kmsg_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace gpulet::health {
namespace {

std::string ReadFixture(const std::string& name) {
  std::ifstream in(std::string(GPULET_SOURCE_DIR) + "/tests/fixtures/kmsg/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A fresh host root with a /dev directory; removed at the end of the test.
class HostRoot {
 public:
  HostRoot() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "gpulet-kmsg-XXXXXX").string();
    root_ = mkdtemp(tmpl.data());
    std::filesystem::create_directories(root_ + "/dev");
  }
  ~HostRoot() { std::filesystem::remove_all(root_); }
  const std::string& root() const { return root_; }
  std::string kmsg() const { return root_ + "/dev/kmsg"; }

 private:
  std::string root_;
};

// Writes all of `data` to a file descriptor.
void WriteAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    ASSERT_GT(n, 0) << std::strerror(errno);
    data.remove_prefix(static_cast<size_t>(n));
  }
}

std::vector<KmsgRecord> ReadAll(KernelLogSource& source) {
  std::vector<KmsgRecord> out;
  for (;;) {
    absl::StatusOr<std::optional<KmsgRecord>> r = source.ReadNext();
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok() || !r->has_value()) return out;
    out.push_back(**r);
  }
}

TEST(DevKmsgSourceTest, RegularFileUnderHostRoot) {
  HostRoot host;
  std::string records = absl::StrJoin(SplitKmsgRecords(ReadFixture("kmsg_records.txt")), "");
  ASSERT_FALSE(records.empty());
  {
    std::ofstream out(host.kmsg());
    out << records;
  }
  DevKmsgSource source(DevKmsgOptions{.host_root = host.root()});
  EXPECT_TRUE(absl::StrContains(source.Describe(), "/dev/kmsg"));
  EXPECT_TRUE(absl::StrContains(source.Describe(), host.root()));
  ASSERT_TRUE(source.Open().ok());
  std::vector<KmsgRecord> got = ReadAll(source);
  ASSERT_EQ(got.size(), 10u);
  EXPECT_EQ(got[0].seq, 1233u);
  EXPECT_EQ(got[4].dict.at("SUBSYSTEM"), "pci");
  EXPECT_EQ(std::count(got[4].text.begin(), got[4].text.end(), '\n'), 2);
  EXPECT_EQ(got[9].seq, 1310u);
  EXPECT_EQ(source.stats().records, 10u);
  // Gaps 1233 -> 1300 and 1307 -> 1310.
  EXPECT_EQ(source.stats().lost, 66u + 2u);
  EXPECT_EQ(source.stats().malformed, 0u);

  // At the end: Read times out without error, promptly.
  absl::Time start = absl::Now();
  absl::StatusOr<std::optional<KmsgRecord>> none = source.Read(absl::Milliseconds(120));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));

  // Appended records are picked up (like tail -f).
  {
    std::ofstream out(host.kmsg(), std::ios::app);
    out << "4,1311,8126000000,-;NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.\n";
  }
  absl::StatusOr<std::optional<KmsgRecord>> more = source.Read(absl::Seconds(2));
  ASSERT_TRUE(more.ok()) << more.status();
  ASSERT_TRUE(more->has_value());
  EXPECT_EQ((*more)->seq, 1311u);
}

TEST(DevKmsgSourceTest, StartAtEndSkipsExistingRecords) {
  HostRoot host;
  {
    std::ofstream out(host.kmsg());
    out << "6,1,1,-;old\n6,2,2,-;older\n";
  }
  DevKmsgSource source(DevKmsgOptions{.host_root = host.root(), .start_at_end = true});
  ASSERT_TRUE(source.Open().ok());
  EXPECT_TRUE(ReadAll(source).empty());
  {
    std::ofstream out(host.kmsg(), std::ios::app);
    out << "6,3,3,-;new\n";
  }
  std::vector<KmsgRecord> got = ReadAll(source);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].text, "new");
}

TEST(DevKmsgSourceTest, MalformedAndOversizedInputIsSkippedAndCounted) {
  HostRoot host;
  {
    std::ofstream out(host.kmsg());
    out << "garbage line\n6,1,1,-;good\n"
        << std::string(100 * 1024, 'a') << "\n"
        << "6,2,2,-;also good\n"
        << "6,3,3,-;last line without newline";
  }
  DevKmsgSource source(DevKmsgOptions{.host_root = host.root()});
  ASSERT_TRUE(source.Open().ok());
  std::vector<KmsgRecord> got = ReadAll(source);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].text, "good");
  EXPECT_EQ(got[1].text, "also good");
  EXPECT_EQ(got[2].text, "last line without newline");
  EXPECT_GE(source.stats().malformed, 2u);
}

TEST(DevKmsgSourceTest, FifoDeliversRecordsAsWritten) {
  HostRoot host;
  ASSERT_EQ(mkfifo(host.kmsg().c_str(), 0600), 0) << std::strerror(errno);
  DevKmsgSource source(DevKmsgOptions{.host_root = host.root()});
  // Opening for reading does not wait for a writer (O_NONBLOCK).
  ASSERT_TRUE(source.Open().ok());
  int writer = open(host.kmsg().c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(writer, 0) << std::strerror(errno);

  // Nothing yet: a short wait times out.
  absl::StatusOr<std::optional<KmsgRecord>> none = source.Read(absl::Milliseconds(50));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());

  // A record with dictionary lines, written at once.
  WriteAll(writer,
           "3,10,100,-;NVRM: GPU 0000:18:00.0: GPU has fallen off the bus.\n"
           " SUBSYSTEM=pci\n DEVICE=+pci:0000:18:00.0\n");
  absl::StatusOr<std::optional<KmsgRecord>> r = source.Read(absl::Seconds(5));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->seq, 10u);
  EXPECT_EQ((*r)->dict.size(), 2u);

  // A partial record is held back until its newline arrives.
  WriteAll(writer, "6,11,101,-;par");
  none = source.Read(absl::Milliseconds(50));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  WriteAll(writer, "tial\n");
  r = source.Read(absl::Seconds(5));
  ASSERT_TRUE(r.ok() && r->has_value());
  EXPECT_EQ((*r)->text, "partial");

  // A writer on another thread wakes a blocked Read.
  std::thread late([writer] {
    absl::SleepFor(absl::Milliseconds(100));
    WriteAll(writer, "6,12,102,-;late\n");
  });
  absl::Time start = absl::Now();
  r = source.Read(absl::Seconds(10));
  late.join();
  ASSERT_TRUE(r.ok() && r->has_value());
  EXPECT_EQ((*r)->text, "late");
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));

  // The writer goes away: reads end quietly, waits do not spin or fail.
  close(writer);
  r = source.Read(absl::Milliseconds(100));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->has_value());
  EXPECT_EQ(source.stats().records, 3u);
}

TEST(DevKmsgSourceTest, MissingDeviceSaysHowToMountIt) {
  HostRoot host;
  DevKmsgSource source(DevKmsgOptions{.host_root = host.root()});
  absl::Status status = source.Open();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(status.message(), "/dev/kmsg")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), host.root())) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "hostPath")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "privileged")) << status;
}

TEST(DevKmsgSourceTest, UnreadableDeviceNamesCapSyslog) {
  HostRoot host;
  { std::ofstream out(host.kmsg()); }
  ASSERT_EQ(chmod(host.kmsg().c_str(), 0), 0);
  ASSERT_EQ(chmod(host.root().c_str(), 0755), 0);
  DevKmsgSource source(DevKmsgOptions{.host_root = host.root()});
  auto check = [&source]() {
    absl::Status status = source.Open();
    return status.code() == absl::StatusCode::kPermissionDenied &&
           absl::StrContains(status.message(), "CAP_SYSLOG") &&
           absl::StrContains(status.message(), "dmesg_restrict") &&
           absl::StrContains(status.message(), "/dev/kmsg");
  };
  if (geteuid() != 0) {
    EXPECT_TRUE(check()) << source.Open();
    return;
  }
  // Root may open anything, so the check runs in a child that drops to nobody.
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
    _exit(check() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "3: could not drop privileges, 1: wrong error";
}

TEST(DevKmsgSourceTest, DirectoryIsRejected) {
  HostRoot host;
  std::filesystem::create_directories(host.kmsg());
  DevKmsgSource source(DevKmsgOptions{.host_root = host.root()});
  absl::Status status = source.Open();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
}

TEST(DevKmsgSourceTest, ReadingBeforeOpenFails) {
  DevKmsgSource source;
  EXPECT_EQ(source.ReadNext().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(source.Wait(absl::ZeroDuration()).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// The real kernel log, when this machine lets us read it: records come one per read() and
// all parse. Skipped in containers without /dev/kmsg or without CAP_SYSLOG.
TEST(DevKmsgSourceTest, RealDevKmsgWhenReadable) {
  DevKmsgSource source;
  absl::Status status = source.Open();
  if (!status.ok()) {
    GTEST_SKIP() << status;
  }
  int count = 0;
  uint64_t previous = 0;
  for (; count < 200; ++count) {
    absl::StatusOr<std::optional<KmsgRecord>> r = source.ReadNext();
    ASSERT_TRUE(r.ok()) << r.status();
    if (!r->has_value()) break;
    if (count > 0) {
      EXPECT_GT((*r)->seq, previous);
    }
    previous = (*r)->seq;
  }
  EXPECT_GT(count, 0) << "a readable /dev/kmsg is never empty after boot";
  EXPECT_EQ(source.stats().malformed, 0u);
  // Waiting briefly on the live log works (whether or not something new is logged).
  EXPECT_TRUE(source.Wait(absl::Milliseconds(10)).ok());
}

TEST(FakeKernelLogSourceTest, DeliversInOrderAndSkipsMalformed) {
  FakeKernelLogSource source({"6,1,1,-;one", "not a record", "6,2,2,-;two\n KEY=V\n"});
  EXPECT_EQ(source.ReadNext().status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(source.Open().ok());
  std::vector<KmsgRecord> got = ReadAll(source);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].text, "one");
  EXPECT_EQ(got[1].dict.at("KEY"), "V");
  EXPECT_EQ(source.stats().malformed, 1u);
  EXPECT_EQ(source.stats().records, 2u);
}

TEST(FakeKernelLogSourceTest, PushWakesWaitingReader) {
  FakeKernelLogSource source;
  ASSERT_TRUE(source.Open().ok());
  absl::StatusOr<bool> ready = source.Wait(absl::Milliseconds(10));
  ASSERT_TRUE(ready.ok());
  EXPECT_FALSE(*ready);
  std::thread pusher([&source] {
    absl::SleepFor(absl::Milliseconds(50));
    source.Push("6,5,5,-;pushed");
  });
  absl::StatusOr<std::optional<KmsgRecord>> r = source.Read(absl::Seconds(10));
  pusher.join();
  ASSERT_TRUE(r.ok() && r->has_value());
  EXPECT_EQ((*r)->text, "pushed");
}

TEST(DevKmsgSourceTest, InterruptEndsAWaitWithoutTimeout) {
  HostRoot host;
  ASSERT_EQ(mkfifo(host.kmsg().c_str(), 0600), 0) << std::strerror(errno);
  // A writer that stays open and silent: poll() on the FIFO would block forever.
  int writer = open(host.kmsg().c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(writer, 0) << std::strerror(errno);
  DevKmsgSource source(DevKmsgOptions{.host_root = host.root()});
  ASSERT_TRUE(source.Open().ok());
  std::thread interrupter([&source] { source.Interrupt(); });
  absl::StatusOr<std::optional<KmsgRecord>> r = source.Read(absl::InfiniteDuration());
  interrupter.join();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->has_value());
  // Sticky: later waits return at once too.
  absl::StatusOr<bool> ready = source.Wait(absl::InfiniteDuration());
  ASSERT_TRUE(ready.ok());
  EXPECT_FALSE(*ready);
  close(writer);
}

TEST(FakeKernelLogSourceTest, InterruptEndsAWaitWithoutTimeout) {
  FakeKernelLogSource source;
  ASSERT_TRUE(source.Open().ok());
  std::thread interrupter([&source] { source.Interrupt(); });
  absl::StatusOr<bool> ready = source.Wait(absl::InfiniteDuration());
  interrupter.join();
  ASSERT_TRUE(ready.ok());
  EXPECT_FALSE(*ready);
}

TEST(FakeKernelLogSourceTest, OpenErrorIsReturned) {
  FakeKernelLogSource source;
  source.SetOpenError(absl::PermissionDeniedError("no CAP_SYSLOG"));
  EXPECT_EQ(source.Open().code(), absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace gpulet::health
