// FakeXidHistoryStore: an in-memory XidHistoryStore for XidPolicy tests. It holds what was
// saved (so a second policy over the same fake sees it, as after a gpulet restart), counts
// saves, and fails loads or saves when a test says so.
//
// Thread-safety: used under XidPolicy's mutex and by the test between calls; not for
// concurrent use of its own.
#ifndef GPULET_TESTING_FAKE_XID_HISTORY_STORE_H_
#define GPULET_TESTING_FAKE_XID_HISTORY_STORE_H_

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "health/xid_history.h"

namespace gpulet::testing {

class FakeXidHistoryStore final : public health::XidHistoryStore {
 public:
  absl::StatusOr<health::XidHistory> Load() override {
    if (!load_error.ok()) return load_error;
    return saved;
  }
  absl::Status Save(const health::XidHistory& history) override {
    ++saves;
    if (!save_error.ok()) return save_error;
    saved = history;
    return absl::OkStatus();
  }
  std::string Describe() const override { return "fake XID history"; }

  health::XidHistory saved;
  int saves = 0;
  absl::Status load_error;
  absl::Status save_error;
};

}  // namespace gpulet::testing

#endif  // GPULET_TESTING_FAKE_XID_HISTORY_STORE_H_
