#include "nvml/nvml_loader.h"

#include <sys/stat.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "gpu/nvml_errors.h"
#include "node/talos_releases.h"
#include "nvml/elf_check.h"
#include "nvml/nvml_probe.h"

namespace gpulet::nvml {
namespace {

constexpr char kSoname[] = "libnvidia-ml.so.1";

// How telling a failure is, for choosing which one to report: a library that exists and
// failed says more than a path where nothing was.
int Weight(gpu::NvmlLoadAttempt::Result r) {
  switch (r) {
    case gpu::NvmlLoadAttempt::Result::kAbsent:
      return 0;
    case gpu::NvmlLoadAttempt::Result::kRejected:
      return 2;
    case gpu::NvmlLoadAttempt::Result::kProbeFailed:
    case gpu::NvmlLoadAttempt::Result::kLoadFailed:
      return 3;
    case gpu::NvmlLoadAttempt::Result::kLoaded:
      return 4;
  }
  return 0;
}

// Where a driver's own glibc may be, besides the driver library's own directory: the
// layouts Talos has used for the glibc it ships with the NVIDIA extension.
constexpr const char* kDriverGlibcDirs[] = {
    "/usr/local/glibc/lib", "/usr/local/glibc/usr/lib", "/usr/local/glibc/lib64",
    "/usr/local/lib",       "/usr/local/lib64",
};

// `first` (the library's own directory), then each of kDriverGlibcDirs under the host root.
std::vector<GlibcDirCandidate> GlibcDirs(const HostFs& host, GlibcDirCandidate first) {
  std::vector<GlibcDirCandidate> dirs = {std::move(first)};
  for (const char* dir : kDriverGlibcDirs) {
    absl::StatusOr<std::string> local = host.Resolve(dir);
    if (!local.ok() || !host.IsDirectory(dir)) continue;
    bool seen = false;
    for (const GlibcDirCandidate& d : dirs) seen = seen || d.local == *local;
    if (!seen) dirs.push_back({*local, host.Describe(dir), dir});
  }
  return dirs;
}

std::string DirOf(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
}

// The reason for a ReadElfInfo error that proves the file cannot be loaded (see
// RefusedByReader).
gpu::NvmlLoadAttempt::Reason ReadFailureReason(const absl::Status& status) {
  if (absl::IsDataLoss(status)) return gpu::NvmlLoadAttempt::Reason::kDamaged;
  if (absl::IsInvalidArgument(status)) return gpu::NvmlLoadAttempt::Reason::kNotALibrary;
  return gpu::NvmlLoadAttempt::Reason::kIncompatible;
}

// True when the ELF reader's error proves the dynamic loader cannot load the file either:
// not a regular file or a symlink loop, not an ELF file, or truncated/corrupt. Such a file
// never reaches the probe: a FIFO would block dlopen() and a truncated library may crash
// it, which would be misread as a glibc mix-up.
bool RefusedByReader(const absl::Status& status) {
  return absl::IsInvalidArgument(status) || absl::IsDataLoss(status);
}

// Why gate 2 refused `file`: its glibc needs when the file would fit this process with any
// glibc, otherwise its ELF class or machine.
gpu::NvmlLoadAttempt::Reason RejectionReason(const std::string& file) {
  absl::StatusOr<ElfInfo> info = ReadElfInfo(file);
  if (!info.ok()) return ReadFailureReason(info.status());
  LoaderTarget any_glibc = ThisProcessTarget();
  any_glibc.glibc = GlibcVersion{};  // {0, 0}: not compared
  return CheckCompatible(*info, file, any_glibc).ok()
             ? gpu::NvmlLoadAttempt::Reason::kNeedsNewerGlibc
             : gpu::NvmlLoadAttempt::Reason::kIncompatible;
}

gpu::NvmlLoadAttempt::Reason ProbeReason(NvmlProbeResult::Outcome outcome) {
  using O = NvmlProbeResult::Outcome;
  using R = gpu::NvmlLoadAttempt::Reason;
  switch (outcome) {
    case O::kCrashed:
      return R::kCrashed;
    case O::kTimedOut:
      return R::kHung;
    case O::kInitFailed:
    case O::kCountFailed:
      return R::kDriverError;
    case O::kOk:
    case O::kLoadFailed:
    case O::kMissingSymbols:
    case O::kProbeError:
      break;
  }
  return R::kUnusable;
}

// A library refused at gate 2: when its glibc need is the only obstacle and the host has
// that glibc, loads it in gpulet-nvml-worker. Appends an attempt unless the worker does not
// apply at all (another incompatibility).
std::unique_ptr<NvmlWorkerGpuLibrary> TryWorker(const std::string& file, const std::string& shown,
                                                const std::string& note,
                                                const std::vector<GlibcDirCandidate>& glibc_dirs,
                                                const HostFs* host, const NvmlLoadOptions& options,
                                                std::vector<gpu::NvmlLoadAttempt>* attempts,
                                                int* nvml_code) {
  absl::StatusOr<ElfInfo> info = ReadElfInfo(file);
  if (!info.ok()) return nullptr;
  LoaderTarget any_glibc = ThisProcessTarget();
  any_glibc.glibc = GlibcVersion{};  // {0, 0}: not compared
  std::optional<GlibcVersion> needed = MaxGlibcNeeded(*info);
  if (!needed.has_value() || !CheckCompatible(*info, file, any_glibc).ok()) return nullptr;
  const std::string worker_shown = absl::StrCat(shown, " in gpulet-nvml-worker");
  absl::StatusOr<DriverGlibc> glibc = FindDriverGlibc(glibc_dirs, *needed, host);
  if (!glibc.ok()) {
    attempts->push_back({worker_shown, note, gpu::NvmlLoadAttempt::Result::kRejected,
                         glibc.status(), gpu::NvmlLoadAttempt::Reason::kNeedsNewerGlibc});
    return nullptr;
  }
  NvmlWorkerCommand command;
  command.loader = glibc->loader;
  command.library_path = {glibc->dir};
  if (DirOf(file) != glibc->dir) command.library_path.push_back(DirOf(file));
  command.worker = options.worker_path.empty() ? DefaultNvmlWorkerPath() : options.worker_path;
  command.nvml = file;
  command.env = WorkerEnvironment();
  const std::string how = absl::StrCat("gpulet-nvml-worker, with the driver's own glibc ",
                                       glibc->version.ToString(), " at ", glibc->shown);
  command.description = absl::StrCat(shown, " (in ", how, ")");
  NvmlWorkerGpuLibrary::Options worker_options = options.worker;
  worker_options.start_timeout = options.probe_timeout;
  absl::StatusOr<std::unique_ptr<NvmlWorkerGpuLibrary>> worker =
      NvmlWorkerGpuLibrary::Start(std::move(command), worker_options);
  if (!worker.ok()) {
    if (gpu::NvmlCodeOf(worker.status()) >= 0) *nvml_code = gpu::NvmlCodeOf(worker.status());
    attempts->push_back(
        {worker_shown, note, gpu::NvmlLoadAttempt::Result::kProbeFailed, worker.status(),
         absl::IsDeadlineExceeded(worker.status()) ? gpu::NvmlLoadAttempt::Reason::kHung
                                                   : gpu::NvmlLoadAttempt::Reason::kWorkerFailed});
    return nullptr;
  }
  attempts->push_back({shown, absl::StrCat(note, "; loaded in ", how),
                       gpu::NvmlLoadAttempt::Result::kLoaded, absl::OkStatus(),
                       gpu::NvmlLoadAttempt::Reason::kNone});
  return std::move(*worker);
}

// Vets and loads one library file; appends the attempt. A file that needs a newer glibc may
// instead be loaded in the worker (`*worker`), looking for that glibc in `glibc_dirs`.
std::unique_ptr<NvmlLibrary> TryCandidate(const std::string& local_path, const std::string& shown,
                                          const std::string& note, bool is_soname,
                                          const NvmlLoadOptions& options,
                                          const std::vector<GlibcDirCandidate>& glibc_dirs,
                                          const HostFs* host,
                                          std::unique_ptr<NvmlWorkerGpuLibrary>* worker,
                                          std::vector<gpu::NvmlLoadAttempt>* attempts,
                                          int* nvml_code) {
  gpu::NvmlLoadAttempt attempt{shown, note, gpu::NvmlLoadAttempt::Result::kAbsent, absl::OkStatus(),
                               gpu::NvmlLoadAttempt::Reason::kNotFound};
  std::string file = local_path;
  if (!is_soname) {
    // Only a file that cannot be loaded (not a regular ELF file, truncated or corrupt) or a
    // proven incompatibility (class, machine, glibc) is rejected here; another ELF reader
    // complaint (stripped section headers, say) is left to the child probe, since the
    // dynamic loader may still load it.
    absl::Status elf = CheckLoadable(file);
    if (RefusedByReader(elf)) {
      attempt.result = gpu::NvmlLoadAttempt::Result::kRejected;
      attempt.reason = ReadFailureReason(elf);
      attempt.status = elf;
      attempts->push_back(std::move(attempt));
      return nullptr;
    }
    if (absl::IsFailedPrecondition(elf)) {
      attempt.result = gpu::NvmlLoadAttempt::Result::kRejected;
      attempt.reason = RejectionReason(file);
      attempt.status = elf;
      attempts->push_back(std::move(attempt));
      if (options.allow_worker && worker != nullptr) {
        *worker = TryWorker(file, shown, note, glibc_dirs, host, options, attempts, nvml_code);
      }
      return nullptr;
    }
  }
  NvmlProbeResult probe = ProbeNvmlLibrary(file, options.probe_timeout);
  if (is_soname && probe.outcome == NvmlProbeResult::Outcome::kLoadFailed) {
    attempt.status = absl::NotFoundError(
        absl::StrCat("the dynamic loader found no ", kSoname, " (", probe.detail, ")"));
    attempts->push_back(std::move(attempt));
    return nullptr;
  }
  if (is_soname && !probe.loaded_path.empty()) {
    // The loader picked a file: vet it like any other before loading it in-process.
    attempt.candidate = absl::StrCat(probe.loaded_path, " (found by the dynamic loader)");
    absl::Status elf = CheckLoadable(probe.loaded_path);
    // A damaged file the probe could not use is named as damaged, not by how it crashed.
    const bool refused = RefusedByReader(elf) && probe.outcome != NvmlProbeResult::Outcome::kOk;
    if (absl::IsFailedPrecondition(elf) || refused) {
      attempt.result = gpu::NvmlLoadAttempt::Result::kRejected;
      attempt.reason = refused ? ReadFailureReason(elf) : RejectionReason(probe.loaded_path);
      attempt.status = elf;
      attempts->push_back(std::move(attempt));
      return nullptr;
    }
  }
  absl::Status probed = ProbeStatus(probe, file, options.probe_timeout);
  if (!probed.ok()) {
    attempt.result = gpu::NvmlLoadAttempt::Result::kProbeFailed;
    attempt.reason = ProbeReason(probe.outcome);
    attempt.status = probed;
    if (gpu::NvmlCodeOf(probed) >= 0) *nvml_code = gpu::NvmlCodeOf(probed);
    attempts->push_back(std::move(attempt));
    return nullptr;
  }
  absl::StatusOr<std::unique_ptr<NvmlLibrary>> lib = NvmlLibrary::Open(file);
  if (!lib.ok()) {
    attempt.result = gpu::NvmlLoadAttempt::Result::kLoadFailed;
    attempt.reason = gpu::NvmlCodeOf(lib.status()) >= 0 ? gpu::NvmlLoadAttempt::Reason::kDriverError
                                                        : gpu::NvmlLoadAttempt::Reason::kUnusable;
    attempt.status = lib.status();
    if (gpu::NvmlCodeOf(lib.status()) >= 0) *nvml_code = gpu::NvmlCodeOf(lib.status());
    attempts->push_back(std::move(attempt));
    return nullptr;
  }
  attempt.result = gpu::NvmlLoadAttempt::Result::kLoaded;
  attempt.reason = gpu::NvmlLoadAttempt::Reason::kNone;
  attempt.candidate = (*lib)->path();
  attempts->push_back(std::move(attempt));
  return std::move(*lib);
}

}  // namespace

const std::vector<NvmlSearchLocation>& NvmlSearchLocations() {
  static const auto* kLocations = new std::vector<NvmlSearchLocation>{
      {"", "the dynamic loader's search path (libraries injected by CDI or the nvidia runtime)"},
      {"/run/nvidia/driver/usr/lib/x86_64-linux-gnu", "GPU operator driver container"},
      {"/run/nvidia/driver/usr/lib64", "GPU operator driver container"},
      {"/run/nvidia/driver/usr/lib/aarch64-linux-gnu", "GPU operator driver container"},
      // Which Talos releases keep the driver there: from the release table.
      {"/usr/local/lib", node::ReleasesWithLibraryDir("/usr/local/lib")},
      {"/usr/local/glibc/usr/lib", node::ReleasesWithLibraryDir("/usr/local/glibc/usr/lib")},
      {"/usr/local/glibc/lib", node::ReleasesWithLibraryDir("/usr/local/glibc/lib")},
      {"/usr/lib/x86_64-linux-gnu", "Debian and Ubuntu packages"},
      {"/usr/lib64", "RHEL, Fedora and SUSE packages"},
      {"/usr/lib/aarch64-linux-gnu", "Debian and Ubuntu on arm64"},
      {"/usr/local/nvidia/lib64", "GKE-style driver installs"},
      {"/nvidia-libs", "a hostPath mount of the driver libraries"},
  };
  return *kLocations;
}

NvmlLoadResult LoadNvml(const HostFs& host, const NvmlLoadOptions& options) {
  NvmlLoadResult result;
  int nvml_code = -1;
  if (!options.explicit_path.empty()) {
    const std::string& path = options.explicit_path;
    // Only a missing file is "absent"; anything else that stops stat() (a symlink loop,
    // permissions) is reported by the ELF check, which names it.
    struct stat st;
    if (stat(path.c_str(), &st) != 0 && (errno == ENOENT || errno == ENOTDIR)) {
      result.attempts.push_back({path, "--nvml-lib", gpu::NvmlLoadAttempt::Result::kAbsent,
                                 absl::NotFoundError("no such file"),
                                 gpu::NvmlLoadAttempt::Reason::kNotFound});
    } else {
      result.library = TryCandidate(path, path, "--nvml-lib", false, options,
                                    GlibcDirs(host, {DirOf(path), DirOf(path), ""}), &host,
                                    &result.worker, &result.attempts, &nvml_code);
    }
  } else {
    for (const NvmlSearchLocation& loc : NvmlSearchLocations()) {
      if (loc.host_dir.empty()) {
        result.library =
            TryCandidate(kSoname, absl::StrCat(kSoname, " via the dynamic loader"), loc.note, true,
                         options, {}, nullptr, nullptr, &result.attempts, &nvml_code);
      } else {
        std::string host_path = JoinPath(loc.host_dir, kSoname);
        absl::StatusOr<std::string> local = host.Resolve(host_path);
        struct stat st;
        if ((!local.ok() && !absl::IsNotFound(local.status())) ||
            (local.ok() && stat(local->c_str(), &st) != 0 && errno == ELOOP)) {
          // Something is there but cannot be followed: say so, since "no such file" would
          // send a person looking in the wrong place.
          result.attempts.push_back(
              {host.Describe(host_path), loc.note, gpu::NvmlLoadAttempt::Result::kRejected,
               absl::InvalidArgumentError(absl::StrCat(
                   host.Describe(host_path), " is a symlink loop (",
                   local.ok() ? "too many levels of symbolic links" : local.status().message(),
                   "). Fix: make the link point at the driver's library file, or remove it")),
               gpu::NvmlLoadAttempt::Reason::kNotALibrary});
          continue;
        }
        if (!local.ok() || !host.Exists(host_path)) {
          result.attempts.push_back(
              {host.Describe(host_path), loc.note, gpu::NvmlLoadAttempt::Result::kAbsent,
               absl::NotFoundError("no such file"), gpu::NvmlLoadAttempt::Reason::kNotFound});
          continue;
        }
        result.library = TryCandidate(
            *local, host.Describe(host_path), loc.note, false, options,
            GlibcDirs(host, {DirOf(*local), host.Describe(loc.host_dir), loc.host_dir}), &host,
            &result.worker, &result.attempts, &nvml_code);
      }
      if (result.library || result.worker) break;
    }
  }
  result.nvml_code = nvml_code;
  if (result.library || result.worker) {
    result.status = absl::OkStatus();
    return result;
  }

  // Report the most telling failure first, then every attempt.
  const gpu::NvmlLoadAttempt* best = nullptr;
  for (const gpu::NvmlLoadAttempt& a : result.attempts) {
    if (best == nullptr || Weight(a.result) > Weight(best->result)) best = &a;
  }
  std::string headline;
  absl::StatusCode code = absl::StatusCode::kNotFound;
  if (best != nullptr && best->result != gpu::NvmlLoadAttempt::Result::kAbsent) {
    headline = absl::StrCat("NVML could not be used: ", best->status.message());
    code = best->status.code();
  } else if (!options.explicit_path.empty()) {
    headline = absl::StrCat(
        "the NVML library given with --nvml-lib does not exist: ", options.explicit_path,
        ". Fix: point --nvml-lib at the driver's ", kSoname, " (on ",
        node::ReleasesWithLibraryDir("/usr/local/glibc/lib"), " under /usr/local/glibc/lib, on ",
        node::ReleasesWithLibraryDir("/usr/local/lib"),
        " under /usr/local/lib, elsewhere usually /usr/lib/x86_64-linux-gnu), or leave "
        "--nvml-lib out so gpulet searches the usual places");
  } else {
    headline = absl::StrCat(
        "NVML library ", kSoname,
        " not found. Fix: install the NVIDIA driver's user-space "
        "libraries on the node (on Talos: the nvidia-container-toolkit-production extension), "
        "run gpulet with the nvidia runtime class or CDI so they are injected, mount the host "
        "at --host-root, or pass --nvml-lib PATH");
  }
  result.status =
      absl::Status(code, absl::StrCat(headline, "\nPaths tried (host root ", host.root(),
                                      "):", gpu::FormatAttempts(result.attempts)));
  return result;
}

}  // namespace gpulet::nvml
