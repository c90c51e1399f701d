// NodeFiles: the two files `gpulet serve` keeps on the node through --host-root: its CDI spec
// (cdi/spec_keeper.h) and the node-feature-discovery feature file holding the node's GPU
// labels (cluster/labels.h). Reconcile writes both for a config (at start and on reload);
// Check rewrites whichever went missing or was changed on disk (the daemon calls it every
// 10 s). Failures are logged, never fatal: the daemon keeps serving (envvar answers and
// metrics work without a spec) and `gpulet doctor` reports them; a check that fails the same
// way every time says so once (ErrorOnce). On the bundled simulator fixture root (data, not
// a node) nothing is written.
//
// Thread-safety: not thread-safe; the daemon serialises Reconcile and Check with a mutex.
#ifndef GPULET_DAEMON_NODE_FILES_H_
#define GPULET_DAEMON_NODE_FILES_H_

#include <optional>
#include <string>

#include "cdi/spec_keeper.h"
#include "common/host_fs.h"
#include "config/config.h"
#include "gpu/gpu_model.h"

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

class NodeFiles {
 public:
  // `host` and `inventory` must outlive this. `bundled_fixture_root`: write nothing.
  NodeFiles(const HostFs* host, const gpu::Inventory* inventory, bool bundled_fixture_root);

  // Writes the CDI spec and the labels file as `config` says (removing the spec when
  // cdi.specDir became empty).
  void Reconcile(const config::Config& config);

  // Rewrites the spec or labels file when missing or changed on disk.
  void Check();

  // Writes both again for the last Reconcile's config: the inventory changed (a MIG layout).
  void Refresh();

  // Host path of the spec last written; "" when none.
  const std::string& spec_path() const { return spec_.host_path(); }

 private:
  void KeepCdiSpec(const config::Config& config);

  const HostFs* host_;
  const gpu::Inventory* inventory_;
  const bool bundled_fixture_root_;
  bool told_bundled_ = false;
  cdi::SpecKeeper spec_;
  LabelsFile labels_;
  std::string labels_path_;               // "" until Reconcile, and on the bundled root
  std::optional<config::Config> config_;  // of the last Reconcile
  ErrorOnce spec_errors_;
};

}  // namespace gpulet::daemon

#endif  // GPULET_DAEMON_NODE_FILES_H_
