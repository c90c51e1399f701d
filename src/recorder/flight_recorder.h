// FlightRecorder: per GPU, the last minutes of what gpulet samples anyway, kept in memory at
// a fixed cost and handed out as a RecorderDump when the GPU faults, so that the evidence of
// a lockup is written to the host before the reboot it may cause (recorder_files.h) and read
// back by `gpulet postmortem` (postmortem.h).
//
// What is kept, per GPU:
//  - the columns of kColumns (temperature, power and its limit, clocks and throttle reasons,
//    PCIe link and replay/AER counters, row remapping, memory, the NVML call's latency, ...)
//    of every sampler round (every metrics.sampleInterval) for the last kFineSpan, and, for the
//    rest of health.recorder.window, one sample per kCoarseStep folding the rounds it stands
//    for (each column keeps its worst: the hottest, the slowest clock, every slowdown bit,
//    the highest counter; recording.h's Fold). Two rings of fixed capacity, allocated whole
//    when the window is set: 30 minutes at 1 s is 300 + 50 samples of 96 bytes, about 33 KiB
//    a GPU, resident from the start and flat after it;
//  - up to kMaxEvents RecordedEvents: XIDs with their kernel-log or NVML text, health
//    transitions, NVML errors, processes starting and stopping with their pods; each text at
//    most kMaxEventText bytes.
//
// A fault is a GPU going Unhealthy, or an XID (any XID: an application's XIDs are the
// evidence that clears the card). Record() returns a dump for each GPU with a fault in the
// round; an XID-only fault is dumped at most once per kXidDumpGap per GPU so that an
// application spraying XID 13 does not churn the disk; a GPU going Unhealthy always is.
// An XID-only fault waits kXidSettle after its XID before it is dumped: the XID policy marks
// the GPU Unhealthy just after it reports the XID (XID 79 and the like), and within that time
// the incident is one dump, the Unhealthy one, with the XID among its events, not an XID dump
// without the verdict followed by a second one a round later.
//
// Time: sample and event times are wall-clock milliseconds since the Unix epoch (the
// sampler's clock and the XID stamps); nothing here reads a clock.
//
// Thread-safety: thread-safe (one mutex): Record runs on the sampler's thread, AddXid on the
// event monitor's, Dump and MemoryBytes anywhere.
#ifndef GPULET_RECORDER_FLIGHT_RECORDER_H_
#define GPULET_RECORDER_FLIGHT_RECORDER_H_

#include <array>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "metrics/sampler.h"
#include "recorder/pci_link.h"
#include "recorder/recording.h"
#include "state/device_store.h"

namespace gpulet::recorder {

inline constexpr absl::Duration kXidDumpGap = absl::Minutes(1);
inline constexpr absl::Duration kXidSettle = absl::Seconds(2);
// The most recent part of the window kept at the sampler's own resolution, and the step of
// the folded part before it.
inline constexpr absl::Duration kFineSpan = absl::Minutes(5);
inline constexpr absl::Duration kCoarseStep = absl::Seconds(30);
// The most samples either ring keeps per GPU whatever the window and interval (5 minutes at
// 100 ms is 3000; 24 hours in 30 s steps 2870).
inline constexpr size_t kMaxSamples = 3000;

class FlightRecorder {
 public:
  struct Options {
    std::string node;
    std::string boot_id;
    std::string driver_version;
  };
  explicit FlightRecorder(Options options);

  // What one sampler round adds: `set` and `snap` are the round's, `pci` the GPUs' PCIe
  // readings by UUID (missing for a GPU whose sysfs could not be read), `window` how much to
  // keep (0: record nothing and drop what was kept), `interval` the sampler's. Returns the
  // dumps of the GPUs that faulted in this round (see the header comment).
  std::vector<RecorderDump> Record(const metrics::SampleSet& set, const state::Snapshot& snap,
                                   const std::map<std::string, PciLinkReading>& pci,
                                   absl::Duration window, absl::Duration interval, absl::Time now);

  // An XID for the GPU `uuid` (the policy's key: the UUID, or the bus id without one);
  // `text` is the kernel log's line or NVML's event. Dumped with the next round.
  void AddXid(const std::string& uuid, int xid, const std::string& text, absl::Time at);

  // The GPU's recording now, with `fault` as its cause; nullopt for a GPU never recorded.
  std::optional<RecorderDump> Dump(const std::string& uuid, const std::string& fault,
                                   absl::Time at) const;

  // The memory held for recordings (rings and event texts), for `make bench`.
  size_t MemoryBytes() const;

 private:
  // A ring of samples of fixed capacity, oldest first.
  class Ring {
   public:
    size_t capacity() const { return items_.size(); }
    size_t size() const { return count_; }
    // Keeps the newest `capacity` samples.
    void Resize(size_t capacity);
    // Adds `s`; returns the oldest sample it pushed out, if any.
    std::optional<RecordedSample> Push(const RecordedSample& s);
    void AppendTo(std::vector<RecordedSample>* out) const;
    size_t MemoryBytes() const { return items_.capacity() * sizeof(RecordedSample); }

   private:
    // Allocated and written whole when sized, so its memory is resident from the start and
    // does not grow as it fills; `next_` is where the next sample goes.
    std::vector<RecordedSample> items_;
    size_t count_ = 0;
    size_t next_ = 0;
  };

  struct Gpu {
    Ring fine;                             // every round of the last kFineSpan
    Ring coarse;                           // one folded sample per kCoarseStep before that
    std::optional<RecordedSample> bucket;  // the coarse sample being folded
    int64_t bucket_start_ms = 0;
    std::deque<RecordedEvent> events;
    // What the last round saw, to find changes.
    std::optional<state::HealthState> health;
    std::optional<bool> answering;
    std::map<unsigned, std::string> processes;  // pid → pod ("" when unknown)
    std::string identity_name, bus_id;
    std::optional<unsigned> index;
    std::string state;
    // A fault waiting for the next round's dump, and when the last XID-only dump was.
    std::optional<std::pair<int64_t, std::string>> pending;
    bool pending_forced = false;
    absl::Time last_xid_dump = absl::InfinitePast();
  };
  void AddEventLocked(Gpu& gpu, RecordedEvent event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  RecorderDump DumpLocked(const std::string& uuid, const Gpu& gpu, int64_t fault_ms,
                          const std::string& fault) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  std::map<std::string, Gpu> gpus_ ABSL_GUARDED_BY(mu_);
  int64_t interval_ms_ ABSL_GUARDED_BY(mu_) = 0;
};

// Milliseconds since the Unix epoch.
int64_t UnixMillis(absl::Time t);

}  // namespace gpulet::recorder

#endif  // GPULET_RECORDER_FLIGHT_RECORDER_H_
