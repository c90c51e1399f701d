#include "daemon/lifecycle.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace gpulet::daemon {

Lifecycle::~Lifecycle() { Stop(); }

void Lifecycle::Add(std::unique_ptr<Component> component) {
  components_.push_back(std::move(component));
}

absl::Status Lifecycle::Start(const config::Config& config) {
  while (started_ < components_.size()) {
    absl::Status s = components_[started_]->Start(config);
    ++started_;
    if (!s.ok()) {
      Stop();
      return s;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> Lifecycle::Reload(const ReloadPlan& plan) {
  std::vector<Change> changes;
  changes.reserve(started_);
  for (size_t i = 0; i < started_; ++i) {
    absl::StatusOr<Change> change = components_[i]->Prepare(plan);
    if (!change.ok()) {
      // Roll back, last prepared first: a later change may have been built on top of an
      // earlier one (a new server sharing the running one's socket).
      while (!changes.empty()) changes.pop_back();
      return change.status();
    }
    changes.push_back(std::move(*change));
  }
  std::vector<std::string> actions;
  for (Change& change : changes) {
    if (change) std::move(change)(&actions);
  }
  return actions;
}

void Lifecycle::Stop() {
  while (started_ > 0) components_[--started_]->Stop();
}

}  // namespace gpulet::daemon
