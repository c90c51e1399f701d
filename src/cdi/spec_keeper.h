// SpecKeeper: the CDI spec `gpulet serve` owns, kept on disk for as long as gpulet serves.
//
// Every CDI name in an Allocate answer ("gpulet.dev/gpu=GPU-…") must resolve in some spec
// the container runtime reads, or the pod fails with "unresolvable CDI devices". Nothing
// else writes specs of gpulet's kind (Talos writes nvidia.com/gpu only from 1.13, a plain
// containerd node has none), so the daemon writes one itself: at start, when the
// configuration changes (SIGHUP), and again whenever the file on disk is missing or differs
// from what gpulet last wrote (someone deleted or edited it). The file is replaced
// atomically (readers see the old or the whole new spec), never removed on shutdown:
// containers restart while gpulet is down and must still resolve their devices. When the
// kind or directory changes, the file gpulet wrote before is removed, so no stale spec of
// an old kind is left behind.
//
// The directory is a host path resolved under the host root (HostFs), so a symlinked
// /var/run -> /run on the host works and nothing is written outside the root.
//
// Thread-safety: not thread-safe; the daemon's main thread owns it.
#ifndef GPULET_CDI_SPEC_KEEPER_H_
#define GPULET_CDI_SPEC_KEEPER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cdi/generator.h"
#include "common/host_fs.h"
#include "gpu/gpu_model.h"

namespace gpulet::cdi {

struct SpecKeeperOptions {
  std::string spec_dir = "/var/run/cdi";  // host path; "" disables the keeper
  GeneratorOptions generator;             // kind, roots, hook path
};

// The spec file's name for a kind: "gpulet.dev/gpu" -> "gpulet.dev-gpu.yaml". One file per
// kind, so two kinds (a reconfiguration) never overwrite each other's file.
std::string SpecFileName(absl::string_view kind);

struct KeepResult {
  std::string host_path;              // where the spec is, as a host path ("/var/run/cdi/…yaml")
  bool written = false;               // false when the file already held exactly this spec
  std::vector<std::string> warnings;  // from the generator, and about the hook program
  std::vector<LeftOutDevice> left_out;  // from the generator
};

class SpecKeeper {
 public:
  explicit SpecKeeper(const HostFs* host) : host_(host) {}

  // Generates the spec for `inventory` with `options` and makes the file hold it. Errors
  // name the path and the fix (FailedPrecondition: nothing to describe; PermissionDenied /
  // Internal: the write failed). The previously written file of another kind or directory
  // is removed once the new one is in place.
  absl::StatusOr<KeepResult> Reconcile(const gpu::Inventory& inventory,
                                       const SpecKeeperOptions& options);

  // Rewrites the last spec when the file is missing or its bytes differ; no-op before the
  // first successful Reconcile. Returns whether it wrote.
  absl::StatusOr<bool> Verify();

  // Removes the file last written and stops keeping it (cdi.specDir set to "" on SIGHUP: a
  // spec nobody keeps would go stale). No-op when nothing was written.
  absl::Status Remove();

  // Host path of the file last written; "" before the first success.
  const std::string& host_path() const { return host_path_; }

 private:
  absl::StatusOr<std::string> LocalPath(const std::string& host_path) const;

  const HostFs* host_;
  std::string host_path_;  // last successful write
  std::string content_;    // its bytes
};

}  // namespace gpulet::cdi

#endif  // GPULET_CDI_SPEC_KEEPER_H_
