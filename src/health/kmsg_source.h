// Where kernel log records come from: the KernelLogSource interface, DevKmsgSource (the
// host's /dev/kmsg, read through --host-root) and FakeKernelLogSource (tests).
//
// gpulet reads the kernel log to see XIDs (health/xid.h). /dev/kmsg is the right interface:
// every read() returns exactly one whole record with a sequence number, a fresh reader
// starts at the oldest record still in the kernel's ring buffer (so XIDs logged before gpulet
// started still count), and a reader that falls behind is told so (EPIPE) instead of
// silently missing records. DevKmsgSource reads it non-blocking and waits with poll() on the
// log and an eventfd, so a reader blocked with no timeout still stops at once: another
// thread calls Interrupt().
//
// DevKmsgSource also accepts a regular file or a FIFO at the path (tests, or a log captured
// with `cat /dev/kmsg > file`). These deliver bytes, not records, so it splits them: a record
// is a line plus the lines after it that begin with a space. A record is complete once the
// next record's first line has arrived, at end of file, or when the writer pauses (read()
// reports no more data) with the buffer ending in a newline; so a writer must write each
// record, dictionary lines included, in one write().
//
// Waits are on real time (poll() and the kernel's clock); a simulated clock cannot drive
// them, so tests feed FakeKernelLogSource and end waits with Push or Interrupt.
//
// Thread-safety: a source is used by one reader thread (Open, ReadNext, Wait, Read, stats).
// Interrupt, and FakeKernelLogSource::Push, may be called from any thread while the reader
// waits.
#ifndef GPULET_HEALTH_KMSG_SOURCE_H_
#define GPULET_HEALTH_KMSG_SOURCE_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "health/kmsg.h"

namespace gpulet::health {

struct KernelLogStats {
  uint64_t records = 0;    // records returned
  uint64_t overruns = 0;   // times the kernel overwrote records before we read them (EPIPE)
  uint64_t lost = 0;       // records known lost: gaps in the sequence numbers
  uint64_t malformed = 0;  // records skipped because they did not parse
};

class KernelLogSource {
 public:
  virtual ~KernelLogSource() = default;

  // Opens the source; must succeed before reading. The error says what to fix.
  virtual absl::Status Open() = 0;

  // The next record if one is available now, nullopt when there is none yet. Never blocks.
  // Malformed records are skipped (and counted), overwritten ones are skipped (and counted);
  // an error status means the source itself failed.
  virtual absl::StatusOr<std::optional<KmsgRecord>> ReadNext() = 0;

  // Blocks until a record may be available or `timeout` passes: true when ReadNext is worth
  // calling, false on timeout. absl::InfiniteDuration() waits forever.
  virtual absl::StatusOr<bool> Wait(absl::Duration timeout) = 0;

  // Ends a Wait in progress and makes every later Wait return false at once, so the
  // reader's thread can be stopped without a timeout. Thread-safe; cannot be undone.
  virtual void Interrupt() = 0;

  // Where the records come from, for messages ("/dev/kmsg (read as /host/dev/kmsg)").
  virtual std::string Describe() const = 0;

  // ReadNext, waiting up to `timeout` for a record; nullopt when none came in time.
  absl::StatusOr<std::optional<KmsgRecord>> Read(absl::Duration timeout);

  const KernelLogStats& stats() const { return stats_; }

 protected:
  // Parses a raw record and updates the statistics; nullopt (counted as malformed) when it
  // does not parse.
  std::optional<KmsgRecord> Accept(absl::string_view raw);

  KernelLogStats stats_;

 private:
  std::optional<uint64_t> last_seq_;
};

struct DevKmsgOptions {
  std::string host_root = "/";     // --host-root
  std::string path = "/dev/kmsg";  // host path
  bool start_at_end = false;       // skip the records already in the buffer
};

class DevKmsgSource final : public KernelLogSource {
 public:
  explicit DevKmsgSource(DevKmsgOptions options = {});
  ~DevKmsgSource() override;
  DevKmsgSource(const DevKmsgSource&) = delete;
  DevKmsgSource& operator=(const DevKmsgSource&) = delete;

  absl::Status Open() override;
  absl::StatusOr<std::optional<KmsgRecord>> ReadNext() override;
  absl::StatusOr<bool> Wait(absl::Duration timeout) override;
  void Interrupt() override;
  std::string Describe() const override;

  // The largest record the kernel hands out fits; gpud uses the same size.
  static constexpr size_t kReadBufferSize = 8192;

 private:
  absl::StatusOr<std::optional<KmsgRecord>> ReadRecordMode();
  absl::StatusOr<std::optional<KmsgRecord>> ReadStreamMode();
  // Removes and returns the first whole record in stream_buffer_; `pause` says the writer
  // has nothing more for now (or has closed), so a record ending at the buffer's end is whole.
  std::optional<std::string> TakeStreamRecord(bool pause);
  absl::Status ReadError(int err) const;

  DevKmsgOptions options_;
  std::string description_;
  int fd_ = -1;
  int interrupt_fd_ = -1;      // eventfd written by Interrupt(); polled with fd_
  bool record_mode_ = false;   // a character device: one read() = one record
  bool at_eof_ = false;        // stream mode: the last read() returned 0
  std::string stream_buffer_;  // stream mode: bytes not yet returned as records
};

class FakeKernelLogSource final : public KernelLogSource {
 public:
  FakeKernelLogSource() = default;
  // `raw_records` in /dev/kmsg format, one record each ("6,1,100,-;text").
  explicit FakeKernelLogSource(std::vector<std::string> raw_records);

  // Appends a record; wakes a reader blocked in Wait. Thread-safe.
  void Push(std::string raw_record);
  // Makes Open() fail with `status` (tests of callers' error paths).
  void SetOpenError(absl::Status status) { open_error_ = std::move(status); }

  absl::Status Open() override;
  absl::StatusOr<std::optional<KmsgRecord>> ReadNext() override;
  absl::StatusOr<bool> Wait(absl::Duration timeout) override;
  void Interrupt() override;
  std::string Describe() const override { return "fake kernel log"; }

  // Waits (real time, at most `limit`) until every pushed record has been taken and the
  // reader is back in Wait, i.e. it has handled them. False on the limit.
  bool AwaitIdle(absl::Duration limit = absl::Seconds(10)) const;

 private:
  absl::Status open_error_;
  bool opened_ = false;
  mutable absl::Mutex mu_;
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);
  bool interrupted_ ABSL_GUARDED_BY(mu_) = false;
  bool waiting_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace gpulet::health

#endif  // GPULET_HEALTH_KMSG_SOURCE_H_
