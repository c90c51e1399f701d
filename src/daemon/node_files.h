// NodeFiles: the two files `gpulet serve` keeps on the node through --host-root: its CDI spec
// (cdi/spec_keeper.h) and the node-feature-discovery feature file holding the node's GPU
// labels (cluster/labels.h). Reconcile writes both for a config (at start and on reload);
// Check (the daemon calls it every 10 s) rewrites the labels file when it went missing or was
// changed on disk, and generates the spec again, writing it when the file differs from what
// the node's device nodes and driver files now call for (or keeping the last good one when
// nothing can be generated). Failures are logged, never fatal: the daemon keeps serving (envvar
// answers and metrics work without a spec) and `gpulet doctor` reports them; a check that fails the
// same way every time says so once (ErrorOnce). On the bundled simulator fixture root (data, not a
// node) nothing is written.
//
// A GPU or MIG device the spec leaves out (a device node it needs is missing) would be
// handed out by the device plugin under a CDI name no spec defines, and the pod would fail
// at container creation ("unresolvable CDI devices"). While the plugin's answers name CDI
// devices (plugin.deviceListStrategy cdi-annotations or cdi-cri), such a device is
// Unhealthy in the store under the condition source "cdi-spec", with what is missing and the
// command that creates it: the kubelet schedules nothing onto it, and Allocate refuses it
// by name. The condition clears at the first check after the node appears.
//
// Thread-safety: not thread-safe; the daemon serialises Reconcile and Check with a mutex.
#ifndef GPULET_DAEMON_NODE_FILES_H_
#define GPULET_DAEMON_NODE_FILES_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "cdi/spec_keeper.h"
#include "common/clock.h"
#include "common/host_fs.h"
#include "config/config.h"
#include "gpu/gpu_model.h"
#include "state/device_store.h"

namespace gpulet::daemon {

// Logs an error once for as long as it stays the same: a check that fails the same way every
// interval says so once, and again only when the error changes or after it cleared.
class ErrorOnce {
 public:
  void Report(const std::string& error);
  void Clear() { last_.clear(); }

 private:
  std::string last_;
};

// Keeps the node-feature-discovery feature file holding this node's GPU labels, so that
// the node's labels follow what gpulet found (NFD's worker reads the file). Writes only when
// the file is missing or differs; errors are logged once each, never fatal.
class LabelsFile {
 public:
  // `host` and `inventory` must outlive this.
  LabelsFile(const HostFs* host, const gpu::Inventory* inventory);

  // The labels for `config` (NodeGpuLabels, as `gpulet labels --config` prints them: the
  // sharing labels follow sharing.timeSlicing).
  void SetConfig(const config::Config& config);

  // Makes `host_path` hold the labels; "" writes nothing.
  void Keep(const std::string& host_path);

 private:
  const HostFs* host_;
  const gpu::Inventory* inventory_;
  std::string text_;
  ErrorOnce errors_;
};

// The store's condition source for a device the CDI spec leaves out.
inline constexpr char kCdiSpecSource[] = "cdi-spec";

// Makes the store's "cdi-spec" conditions match `left_out`: every GPU and MIG device in it
// Unhealthy, every other one's condition cleared. Publishes a snapshot only for what changes
// (the plugin re-sends its device list on each, DRA its ResourceSlices).
void SyncLeftOutHealth(const std::vector<cdi::LeftOutDevice>& left_out, absl::Time now,
                       state::DeviceStore* store);

class NodeFiles {
 public:
  // `host`, `inventory`, `store` and `clock` must outlive this. `bundled_fixture_root`: write
  // nothing.
  NodeFiles(const HostFs* host, const gpu::Inventory* inventory, bool bundled_fixture_root,
            state::DeviceStore* store, const Clock* clock);

  // Writes the CDI spec and the labels file as `config` says (removing the spec when
  // cdi.specDir became empty).
  void Reconcile(const config::Config& config);

  // Rewrites the labels file when missing or changed on disk; generates the spec again and
  // writes it when the file differs (the node's device nodes may have changed).
  void Check();

  // Writes both again for the last Reconcile's config: the inventory changed (a MIG layout).
  void Refresh();

  // Host path of the spec last written; "" when none.
  const std::string& spec_path() const { return spec_.host_path(); }

 private:
  // Generates and writes the spec, and syncs the left-out devices' health. `from_check`:
  // logs only what changed (the check runs every 10 s) and leaves the error to the caller.
  absl::Status KeepCdiSpec(const config::Config& config, bool from_check);

  const HostFs* host_;
  const gpu::Inventory* inventory_;
  const bool bundled_fixture_root_;
  state::DeviceStore* const store_;
  const Clock* const clock_;
  std::vector<std::string> spec_warnings_;  // of the last spec generated
  bool told_bundled_ = false;
  cdi::SpecKeeper spec_;
  LabelsFile labels_;
  std::string labels_path_;               // "" until Reconcile, and on the bundled root
  std::optional<config::Config> config_;  // of the last Reconcile
  ErrorOnce spec_errors_;
};

}  // namespace gpulet::daemon

#endif  // GPULET_DAEMON_NODE_FILES_H_
