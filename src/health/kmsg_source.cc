#include "health/kmsg_source.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/host_fs.h"

namespace gpulet::health {
namespace {

// Stream mode keeps at most this much of an unfinished record; a longer "line" is not a
// kernel log record (the kernel's own records are far smaller) and is dropped.
constexpr size_t kMaxStreamRecord = 64 * 1024;

// While the far end of a file or FIFO is at end of file, poll() cannot tell when more data
// arrives (a regular file is always "readable", a FIFO without writers always "hung up"), so
// Wait re-checks at this interval instead (still waking at once on Interrupt).
constexpr absl::Duration kEofRecheck = absl::Milliseconds(50);

int PollTimeoutMs(absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) return -1;
  if (timeout <= absl::ZeroDuration()) return 0;
  int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(timeout, absl::Milliseconds(1)));
  return static_cast<int>(std::min<int64_t>(ms, std::numeric_limits<int>::max()));
}

}  // namespace

absl::StatusOr<std::optional<KmsgRecord>> KernelLogSource::Read(absl::Duration timeout) {
  // Real monotonic time: the waits below are the kernel's (see the header).
  const Clock* clock = RealClock();
  const MonoTime deadline = clock->DeadlineIn(timeout);
  for (;;) {
    absl::StatusOr<std::optional<KmsgRecord>> record = ReadNext();
    if (!record.ok() || record->has_value()) return record;
    absl::Duration left =
        deadline.IsInfinite() ? absl::InfiniteDuration() : deadline - clock->Monotonic();
    if (left <= absl::ZeroDuration()) return std::nullopt;
    absl::StatusOr<bool> ready = Wait(left);
    if (!ready.ok()) return ready.status();
    if (!*ready) return std::nullopt;
  }
}

std::optional<KmsgRecord> KernelLogSource::Accept(absl::string_view raw) {
  absl::StatusOr<KmsgRecord> record = ParseKmsgRecord(raw);
  if (!record.ok()) {
    ++stats_.malformed;
    return std::nullopt;
  }
  // Sequence numbers grow by one per record, so a jump counts the records the kernel
  // overwrote before we got to them (after an EPIPE, or while gpulet was not reading).
  if (last_seq_ && record->seq > *last_seq_ + 1) stats_.lost += record->seq - *last_seq_ - 1;
  if (!last_seq_ || record->seq > *last_seq_) last_seq_ = record->seq;
  ++stats_.records;
  return *std::move(record);
}

// --- DevKmsgSource ------------------------------------------------------------------------

DevKmsgSource::DevKmsgSource(DevKmsgOptions options) : options_(std::move(options)) {
  description_ = HostFs(options_.host_root).Describe(options_.path);
  interrupt_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

DevKmsgSource::~DevKmsgSource() {
  if (fd_ >= 0) close(fd_);
  if (interrupt_fd_ >= 0) close(interrupt_fd_);
}

void DevKmsgSource::Interrupt() {
  if (interrupt_fd_ < 0) return;
  // Never read back: the eventfd stays readable, so every later Wait returns at once too.
  uint64_t one = 1;
  ssize_t n = write(interrupt_fd_, &one, sizeof(one));
  (void)n;
}

std::string DevKmsgSource::Describe() const { return description_; }

absl::Status DevKmsgSource::Open() {
  if (fd_ >= 0) return absl::OkStatus();
  HostFs fs(options_.host_root);
  absl::StatusOr<std::string> local = fs.Resolve(options_.path);
  if (!local.ok()) {
    return absl::Status(local.status().code(),
                        absl::StrCat("cannot read the kernel log: ", local.status().message()));
  }
  int fd = open(local->c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    std::string what =
        absl::StrCat("cannot open the kernel log ", description_, ": ", std::strerror(err), ". ");
    if (err == EPERM || err == EACCES) {
      return absl::PermissionDeniedError(absl::StrCat(
          what,
          "Reading it needs CAP_SYSLOG when kernel.dmesg_restrict=1 (the usual setting): run "
          "gpulet as a privileged container or add the SYSLOG capability "
          "(securityContext.capabilities.add: [\"SYSLOG\"]); without it gpulet sees no XIDs "
          "from the kernel log"));
    }
    if (err == ENOENT || err == ENOTDIR) {
      return absl::NotFoundError(absl::StrCat(
          what,
          "Containers do not get /dev/kmsg by default: mount the host's /dev/kmsg (a hostPath "
          "volume of type CharDevice at /dev/kmsg) or run gpulet privileged"));
    }
    return absl::InternalError(what);
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot read the kernel log ", description_,
        ": it is not a character device, file or FIFO (expected the kernel's /dev/kmsg)"));
  }
  fd_ = fd;
  record_mode_ = S_ISCHR(st.st_mode);
  if (options_.start_at_end && !S_ISFIFO(st.st_mode)) {
    // On /dev/kmsg SEEK_END moves past the newest record; on a file, to its end.
    if (lseek(fd_, 0, SEEK_END) < 0) {
      int err = errno;
      return absl::InternalError(absl::StrCat("cannot skip to the end of the kernel log ",
                                              description_, ": ", std::strerror(err)));
    }
  }
  return absl::OkStatus();
}

absl::Status DevKmsgSource::ReadError(int err) const {
  if (err == EINVAL && record_mode_) {
    return absl::InternalError(absl::StrCat(
        "reading the kernel log ", description_, " failed: a record is larger than the ",
        kReadBufferSize, "-byte buffer (EINVAL); this kernel is not supported, please report it"));
  }
  return absl::InternalError(
      absl::StrCat("reading the kernel log ", description_, " failed: ", std::strerror(err)));
}

absl::StatusOr<std::optional<KmsgRecord>> DevKmsgSource::ReadNext() {
  if (fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the kernel log ", description_, " is not open (call Open first)"));
  }
  return record_mode_ ? ReadRecordMode() : ReadStreamMode();
}

absl::StatusOr<std::optional<KmsgRecord>> DevKmsgSource::ReadRecordMode() {
  char buffer[kReadBufferSize];
  for (;;) {
    ssize_t n = read(fd_, buffer, sizeof(buffer));
    if (n > 0) {
      std::optional<KmsgRecord> record = Accept(absl::string_view(buffer, static_cast<size_t>(n)));
      if (record) return record;
      continue;  // malformed: counted, try the next one
    }
    if (n == 0) return std::nullopt;  // not /dev/kmsg behaviour, but harmless
    int err = errno;
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) return std::nullopt;
    if (err == EPIPE) {
      // The kernel overwrote records we had not read; it has moved us to the oldest one
      // left. The sequence gap tells how many were lost.
      ++stats_.overruns;
      continue;
    }
    return ReadError(err);
  }
}

std::optional<std::string> DevKmsgSource::TakeStreamRecord(bool pause) {
  size_t start = stream_buffer_.find_first_not_of('\n');
  if (start == std::string::npos) {
    stream_buffer_.clear();
    return std::nullopt;
  }
  if (start > 0) stream_buffer_.erase(0, start);
  auto take = [this](size_t end) {
    std::string raw = stream_buffer_.substr(0, end);
    stream_buffer_.erase(0, end);
    return raw;
  };
  size_t newline = stream_buffer_.find('\n');
  if (newline == std::string::npos) {
    // An unfinished first line: whole only when the writer is gone for good.
    if (pause && at_eof_) return take(stream_buffer_.size());
    if (stream_buffer_.size() > kMaxStreamRecord) {
      stream_buffer_.clear();
      ++stats_.malformed;
    }
    return std::nullopt;
  }
  size_t end = newline + 1;
  while (end < stream_buffer_.size()) {
    if (stream_buffer_[end] != ' ') return take(end);  // the next record has begun
    size_t next = stream_buffer_.find('\n', end);
    if (next == std::string::npos) {
      if (pause && at_eof_) return take(stream_buffer_.size());
      if (stream_buffer_.size() > kMaxStreamRecord) {
        ++stats_.malformed;
        stream_buffer_.clear();
      }
      return std::nullopt;
    }
    end = next + 1;
  }
  if (pause) return take(end);
  return std::nullopt;
}

absl::StatusOr<std::optional<KmsgRecord>> DevKmsgSource::ReadStreamMode() {
  char buffer[kReadBufferSize];
  for (;;) {
    while (std::optional<std::string> raw = TakeStreamRecord(/*pause=*/false)) {
      if (std::optional<KmsgRecord> record = Accept(*raw)) return record;
    }
    ssize_t n = read(fd_, buffer, sizeof(buffer));
    if (n > 0) {
      at_eof_ = false;
      stream_buffer_.append(buffer, static_cast<size_t>(n));
      continue;
    }
    int err = n == 0 ? 0 : errno;
    if (err == EINTR) continue;
    if (n == 0 || err == EAGAIN || err == EWOULDBLOCK) {
      if (n == 0) at_eof_ = true;
      // The writer has paused or gone: what is buffered up to a newline is whole.
      while (std::optional<std::string> raw = TakeStreamRecord(/*pause=*/true)) {
        if (std::optional<KmsgRecord> record = Accept(*raw)) return record;
      }
      return std::nullopt;
    }
    return ReadError(err);
  }
}

absl::StatusOr<bool> DevKmsgSource::Wait(absl::Duration timeout) {
  if (fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the kernel log ", description_, " is not open (call Open first)"));
  }
  // At end of a file or FIFO only the interrupt can be polled; re-check after kEofRecheck.
  const bool recheck = !record_mode_ && at_eof_;
  const absl::Duration wait = recheck ? std::min(timeout, kEofRecheck) : timeout;
  const Clock* clock = RealClock();
  const MonoTime deadline = clock->DeadlineIn(wait);
  for (;;) {
    struct pollfd pfds[2] = {{interrupt_fd_, POLLIN, 0}, {recheck ? -1 : fd_, POLLIN, 0}};
    int left_ms = deadline.IsInfinite() ? -1 : PollTimeoutMs(deadline - clock->Monotonic());
    int rc = poll(pfds, 2, left_ms);
    if (rc > 0) {
      if (pfds[0].revents != 0) return false;  // interrupted
      return true;  // POLLIN, or POLLERR/POLLPRI when records were overwritten
    }
    if (rc == 0) return recheck && timeout >= kEofRecheck;
    int err = errno;
    if (err == EINTR) continue;
    return absl::InternalError(
        absl::StrCat("waiting for the kernel log ", description_, " failed: ", std::strerror(err)));
  }
}

// --- FakeKernelLogSource ------------------------------------------------------------------

FakeKernelLogSource::FakeKernelLogSource(std::vector<std::string> raw_records) {
  absl::MutexLock lock(&mu_);
  for (std::string& r : raw_records) queue_.push_back(std::move(r));
}

void FakeKernelLogSource::Push(std::string raw_record) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(raw_record));
}

absl::Status FakeKernelLogSource::Open() {
  if (!open_error_.ok()) return open_error_;
  opened_ = true;
  return absl::OkStatus();
}

absl::StatusOr<std::optional<KmsgRecord>> FakeKernelLogSource::ReadNext() {
  if (!opened_) return absl::FailedPreconditionError("fake kernel log: Open was not called");
  for (;;) {
    std::string raw;
    {
      absl::MutexLock lock(&mu_);
      if (queue_.empty()) return std::nullopt;
      raw = std::move(queue_.front());
      queue_.pop_front();
    }
    if (std::optional<KmsgRecord> record = Accept(raw)) return record;
  }
}

absl::StatusOr<bool> FakeKernelLogSource::Wait(absl::Duration timeout) {
  if (!opened_) return absl::FailedPreconditionError("fake kernel log: Open was not called");
  absl::MutexLock lock(&mu_);
  auto ready = [this]()
                   ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return interrupted_ || !queue_.empty(); };
  waiting_ = true;
  RealClock()->AwaitWithTimeout(&mu_, absl::Condition(&ready), timeout);
  waiting_ = false;
  return !interrupted_ && !queue_.empty();
}

void FakeKernelLogSource::Interrupt() {
  absl::MutexLock lock(&mu_);
  interrupted_ = true;
}

bool FakeKernelLogSource::AwaitIdle(absl::Duration limit) const {
  absl::MutexLock lock(&mu_);
  // Wait clears waiting_ before it returns and records leave the queue only after that, so
  // an empty queue with the reader waiting means the reader has handled what it took.
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return waiting_ && queue_.empty(); };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), limit);
}

}  // namespace gpulet::health
