// Component and Lifecycle: the one shape of every part of `gpulet serve` that the Daemon
// starts, reloads and stops.
//
// A Component starts with the configuration and stops. For a reload it prepares a Change
// beside what runs: everything that can fail (building, binding an address, starting a
// server in a new directory, reading a file) is done there, and nothing running is touched.
// A Change is then either committed, which swaps in what was prepared and cannot fail, or
// dropped: destroying it uncommitted is the rollback, and frees (stops) whatever it built.
//
// Lifecycle runs components in the order they were added:
// - Start starts each in turn; on the first error it stops that one and those started before
//   it, last first, and returns the error.
// - Reload prepares every component's change, first to last. On the first error it drops the
//   changes prepared so far, last first, and returns the error: nothing running changed.
//   Otherwise it commits every change, first to last, and returns what they did.
// - Stop stops every started component, last first. Idempotent.
//
// Thread-safety: a Lifecycle, and its components' Start, Prepare, Stop and their changes,
// are used from one thread (the Daemon's caller); components run their own threads inside.
#ifndef GPULET_DAEMON_LIFECYCLE_H_
#define GPULET_DAEMON_LIFECYCLE_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "config/config.h"

namespace gpulet::daemon {

// What a reload changes: the running and the next configuration, the keys that differ (in
// ConfigKeys() order) and their ReloadEffect bits (daemon/reload_table.h).
struct ReloadPlan {
  const config::Config& running;
  const config::Config& next;
  std::vector<std::string> changed_keys = {};
  unsigned effects = 0;
};

// A prepared reload of one component. Called once to commit; it appends what it did, in
// words, to `actions` ("metrics rebuilt on :9400"). An empty Change: nothing to do. Dropping
// one uncommitted rolls it back (what it captured is destroyed unused).
using Change = absl::AnyInvocable<void(std::vector<std::string>* actions) &&>;

class Component {
 public:
  virtual ~Component() = default;
  // Starts with `config`. An error says what to fix (the key, where the config has one).
  virtual absl::Status Start(const config::Config& config) = 0;
  // Prepares `plan` beside what runs, touching nothing running. Errors say what to fix; an
  // empty Change when the component has nothing to do.
  virtual absl::StatusOr<Change> Prepare(const ReloadPlan& plan) = 0;
  // Stops what Start started and every commit since. Called once after Start, also after a
  // Start that failed part-way (so Start need not undo its own steps).
  virtual void Stop() = 0;
};

class Lifecycle {
 public:
  Lifecycle() = default;
  ~Lifecycle();  // Stop()
  Lifecycle(const Lifecycle&) = delete;
  Lifecycle& operator=(const Lifecycle&) = delete;

  // Adds a component after those added before. Only before Start.
  void Add(std::unique_ptr<Component> component);

  absl::Status Start(const config::Config& config);
  // The actions of every committed change, in component order.
  absl::StatusOr<std::vector<std::string>> Reload(const ReloadPlan& plan);
  void Stop();

  size_t started() const { return started_; }

 private:
  std::vector<std::unique_ptr<Component>> components_;
  size_t started_ = 0;  // components_[0, started_) had Start called and not Stop
};

}  // namespace gpulet::daemon

#endif  // GPULET_DAEMON_LIFECYCLE_H_
