// NvmlWorkerGpuLibrary: GpuLibrary answered by gpulet-nvml-worker, a helper process that runs
// the host's NVML under the host driver's own dynamic loader and C library.
//
// Why: gpulet's pod runs with the default container runtime and reads the host's driver
// through --host-root. On Talos the driver's libnvidia-ml.so.1 is built against a private,
// newer glibc than gpulet's (Debian 12, 2.36), so gpulet cannot dlopen it (elf_check.h). The
// worker is exec'd through that glibc's ld-linux with --library-path <glibc dir>:<driver
// dir>, loads NVML there, and answers over a socketpair (nvml_worker_protocol.h).
//
// Containment, reusing the mechanisms of the in-process path:
//   - per-GPU deadlines: inside the worker every call runs on the NvmlGpuLibrary's per-GPU
//     TimedLanes, each request on its own thread, so one hung GPU delays only its own
//     answers. gpulet keeps at most one request in flight per lane (each GPU, the system
//     calls, the events): callers take turns, and a lane whose answer is overdue fails fast
//     with DeadlineExceeded until the answer comes or the worker is replaced (as a wedged
//     TimedLane does).
//   - a supervisor thread reads every answer, pings the worker every ping_interval (answered
//     by its reader thread, not by NVML) and SIGKILLs it when a ping goes unanswered for
//     hang_timeout (a stopped or wholly stuck worker), when it sends a malformed frame, or
//     when its socket breaks. A dead worker is reaped and restarted with exponential backoff;
//     meanwhile every call fails at once with Unavailable naming the worker and why, so the
//     liveness monitor marks the GPUs unhealthy and the daemon keeps serving. NVML event
//     registration is replayed on the new worker at the next WaitEvent.
//   - the worker dies with gpulet: PR_SET_PDEATHSIG(SIGKILL), set by the supervisor thread
//     (which forks it and lives as long as this object) and by the worker itself.
// The worker's environment is built explicitly: only the simulator's GPULET_SIM_FIXTURE and
// GPULET_SIM_STATE pass through (WorkerEnvironment).
//
// Thread-safety: all GpuLibrary methods may be called concurrently (one request per lane at a
// time, as above). Destruction kills the worker and joins the supervisor.
#ifndef GPULET_NVML_NVML_WORKER_LIBRARY_H_
#define GPULET_NVML_NVML_WORKER_LIBRARY_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/host_fs.h"
#include "gpu/gpu_library.h"
#include "nvml/elf_check.h"
#include "nvml/nvml_worker_protocol.h"

namespace gpulet::nvml {

// How to start the worker. Every path is a path on this machine (under --host-root already).
struct NvmlWorkerCommand {
  std::string loader;                     // the host glibc's ld-linux-*.so.*
  std::vector<std::string> library_path;  // --library-path entries, in order
  std::string worker;                     // gpulet-nvml-worker
  std::string nvml;                       // libnvidia-ml.so.1 to load
  std::vector<std::string> env;           // the worker's whole environment, "NAME=value"
  // Shown as SystemInfo::library_path, so `gpulet list` and `doctor` say how NVML is used.
  std::string description;
};

// The worker's file name; it is installed beside gpulet.
inline constexpr char kNvmlWorkerName[] = "gpulet-nvml-worker";

// gpulet-nvml-worker in the directory of this process's executable (/proc/self/exe).
std::string DefaultNvmlWorkerPath();

// The environment given to the worker: the simulator's two variables when set, nothing else.
std::vector<std::string> WorkerEnvironment();

// The dynamic loader's file name for this process's machine ("ld-linux-x86-64.so.2").
std::string HostLoaderName();

// A host C library that can run a library needing a newer glibc than gpulet's.
struct DriverGlibc {
  std::string dir;       // local path of the directory holding both files
  std::string shown;     // that directory as the user sees it (HostFs::Describe)
  std::string loader;    // local path of ld-linux
  std::string libc;      // local path of libc.so.6
  GlibcVersion version;  // the newest GLIBC_x.y the libc defines
};

// One directory to look in: `local` is this machine's path, `shown` for messages. With
// `host_dir` (a path under the host root) the files in it are resolved through the HostFs,
// so a symlink there cannot lead out of --host-root.
struct GlibcDirCandidate {
  std::string local;
  std::string shown;
  std::string host_dir;
};

// The first candidate directory holding a libc.so.6 of this process's ELF class and machine
// that defines GLIBC_`needed` or newer, and the loader (there, or in the sibling lib64
// directory). NotFound listing each directory and why it did not fit.
absl::StatusOr<DriverGlibc> FindDriverGlibc(const std::vector<GlibcDirCandidate>& dirs,
                                            const GlibcVersion& needed,
                                            const HostFs* host = nullptr);

class NvmlWorkerGpuLibrary final : public gpu::GpuLibrary {
 public:
  struct Options {
    // Deadline of one system or identity call; passed to the worker's NvmlGpuLibrary too.
    absl::Duration call_timeout = absl::Seconds(10);
    // exec + dlopen + nvmlInit_v2 + hello.
    absl::Duration start_timeout = absl::Seconds(15);
    absl::Duration ping_interval = absl::Seconds(1);
    // No answer to a ping for this long: the worker is hung and is killed.
    absl::Duration hang_timeout = absl::Seconds(3);
    // Added to a call's own deadline for the round trip (the worker enforces the deadline).
    absl::Duration slack = absl::Milliseconds(500);
    absl::Duration backoff_initial = absl::Milliseconds(200);
    absl::Duration backoff_max = absl::Seconds(10);
    // Monotonic time for every deadline, ping and back-off; wall time for sample stamps.
    const Clock* clock = RealClock();
  };

  // Starts the worker and waits for it to load NVML. Fails with the worker's own error (NVML
  // code kept: NvmlCodeOf), Unavailable when it died (with the signal), or
  // DeadlineExceeded when it did not answer within start_timeout.
  static absl::StatusOr<std::unique_ptr<NvmlWorkerGpuLibrary>> Start(NvmlWorkerCommand command,
                                                                     Options options);
  ~NvmlWorkerGpuLibrary() override;
  NvmlWorkerGpuLibrary(const NvmlWorkerGpuLibrary&) = delete;
  NvmlWorkerGpuLibrary& operator=(const NvmlWorkerGpuLibrary&) = delete;

  absl::StatusOr<gpu::SystemInfo> GetSystemInfo() override;
  absl::StatusOr<unsigned> GetDeviceCount() override;
  absl::StatusOr<gpu::DeviceIdentity> GetDeviceIdentity(unsigned index) override;
  absl::StatusOr<gpu::ProbeAnswer> Probe(unsigned index, absl::Duration timeout) override;
  absl::StatusOr<gpu::DeviceSample> Sample(unsigned index, absl::Duration timeout) override;
  absl::StatusOr<gpu::MigLayout> GetMigLayout(unsigned index, absl::Duration timeout) override;
  absl::Status SetMemoryLimit(unsigned index, const std::string& cgroup, uint64_t hard_bytes,
                              absl::Duration timeout) override;
  absl::Status RegisterEvents(unsigned count) override;
  absl::StatusOr<std::optional<gpu::GpuEvent>> WaitEvent(absl::Duration timeout) override;

  // The running worker's pid, 0 while none is up (tests, diagnostics).
  pid_t worker_pid() const;
  // Workers started after the first one.
  int restarts() const;

 private:
  enum class Phase { kDown, kStarting, kReady };
  struct Pending {
    bool done = false;
    nvml::Response response;
  };

  NvmlWorkerGpuLibrary(NvmlWorkerCommand command, Options options);
  void Supervise();
  void SpawnLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void KillLocked(const std::string& why, bool reaped = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The worker's socket closed: reaps it (waiting briefly) and kills with how it died, or
  // with `fallback` when it cannot be reaped yet. Releases mu_ while it waits.
  void KillDeadLocked(const std::string& fallback) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HandleMessageLocked(const nlohmann::json& message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TickLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool SendLocked(const nlohmann::json& message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string DownMessageLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Wake();
  // Sends one request on `lane` and waits `wait` for its answer.
  absl::StatusOr<nlohmann::json> Call(int lane, nvml::Request request, absl::Duration wait,
                                      const std::string& what);

  const NvmlWorkerCommand command_;
  const Options options_;
  int wake_[2] = {-1, -1};  // self-pipe that interrupts the supervisor's poll()
  std::thread supervisor_;
  // Read by the supervisor thread only, reset for each worker.
  nvml::FrameDecoder decoder_;

  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  Phase phase_ ABSL_GUARDED_BY(mu_) = Phase::kDown;
  pid_t pid_ ABSL_GUARDED_BY(mu_) = 0;
  int fd_ ABSL_GUARDED_BY(mu_) = -1;  // closed only by the supervisor
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  MonoTime started_at_ ABSL_GUARDED_BY(mu_);
  MonoTime ready_at_ ABSL_GUARDED_BY(mu_);
  MonoTime next_spawn_ ABSL_GUARDED_BY(mu_);  // the origin: at once
  absl::Duration backoff_ ABSL_GUARDED_BY(mu_);
  std::string last_failure_ ABSL_GUARDED_BY(mu_);
  std::string kill_request_ ABSL_GUARDED_BY(mu_);  // set by callers, acted on by the supervisor
  // kill_request_ comes from a send that found the socket closed: the worker is dead.
  bool peer_gone_ ABSL_GUARDED_BY(mu_) = false;
  bool first_done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status first_status_ ABSL_GUARDED_BY(mu_);
  int restarts_ ABSL_GUARDED_BY(mu_) = -1;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t ping_id_ ABSL_GUARDED_BY(mu_) = 0;  // 0: no ping outstanding
  MonoTime ping_sent_ ABSL_GUARDED_BY(mu_);
  MonoTime last_pong_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::shared_ptr<Pending>> pending_ ABSL_GUARDED_BY(mu_);
  // Lane -> the request in flight on it and that request's deadline.
  std::map<int, std::pair<uint64_t, MonoTime>> busy_lanes_ ABSL_GUARDED_BY(mu_);
  std::vector<pid_t> zombies_ ABSL_GUARDED_BY(mu_);
  unsigned events_count_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t events_generation_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gpulet::nvml

#endif  // GPULET_NVML_NVML_WORKER_LIBRARY_H_
