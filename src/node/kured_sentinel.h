// KuredSentinel: asks kured (kubereboot/kured) to reboot this node by creating its sentinel
// file, the way a package manager asks for a reboot after an update. kured, already trusted
// by the cluster's owner to reboot nodes, does the rest: its lock (one node at a time, by an
// annotation on its DaemonSet), cordon, drain (PodDisruptionBudgets hold), reboot and
// uncordon. kured checks the sentinel every `--period` (60 minutes by default) and reboots
// when it exists (`--reboot-sentinel`, default /var/run/reboot-required; kured 1.23.0,
// cmd/kured/main.go). /var/run is a tmpfs on the host, so the file goes with the reboot.
//
// The file is created under the host root (HostFs: its directory's links are followed inside
// the root), never through a link at its own name, and holds one line saying who asked and
// why. One that exists already is a request already made: left as it is.
//
// Thread-safety: Reboot may be called from any thread; it holds no state.
#ifndef GPULET_NODE_KURED_SENTINEL_H_
#define GPULET_NODE_KURED_SENTINEL_H_

#include <string>
#include <utility>

#include "common/host_fs.h"
#include "node/rebooter.h"

namespace gpulet::node {

inline constexpr char kKuredDefaultSentinel[] = "/var/run/reboot-required";

class KuredSentinel : public NodeRebooter {
 public:
  // `host` must outlive it; `sentinel`: the host path kured watches.
  KuredSentinel(const HostFs* host, std::string sentinel)
      : host_(host), sentinel_(std::move(sentinel)) {}
  absl::Status Reboot(absl::string_view why, absl::string_view reason) override;
  std::string Describe() const override;

 private:
  const HostFs* host_;
  std::string sentinel_;
};

}  // namespace gpulet::node

#endif  // GPULET_NODE_KURED_SENTINEL_H_
