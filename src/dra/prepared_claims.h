// ClaimPreparer and PreparedClaims: what NodePrepareResources and NodeUnprepareResources do,
// apart from gRPC.
//
// ClaimPreparer is the seam for the real work (reading each ResourceClaim from the API server,
// checking that its allocation is for this driver and node, writing a CDI spec for it, and
// undoing that); FakeClaimPreparer (src/testing/fake_claim_preparer.h) stands in for it in
// tests. PreparedClaims wraps a preparer with what the kubelet's contract asks of every DRA
// driver, kept in one place:
//  - idempotency: preparing a claim UID already prepared returns what was recorded, without
//    calling the preparer; unpreparing a UID that is not recorded (never prepared here, or
//    already unprepared) succeeds without calling it, also for claims already deleted from the
//    API server;
//  - durability: a claim is recorded in the checkpoint (checkpoint.h) before its prepare is
//    answered, and forgotten only after the preparer undid it, so state survives a restart (a
//    new PreparedClaims opening the same file) or a kill -9 anywhere in between;
//  - one answer per claim: every claim of a request gets an entry, an error when anything
//    about it failed (the kubelet retries those).
//
// Thread-safety: PreparedClaims is safe to call from many threads (gRPC's); calls are
// serialized under one mutex, so its preparer is never called concurrently. A ClaimPreparer
// must be safe to call from any one thread at a time.
#ifndef GPULET_DRA_PREPARED_CLAIMS_H_
#define GPULET_DRA_PREPARED_CLAIMS_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "dra/checkpoint.h"

namespace gpulet::dra {

// The outcome of preparing one claim: its devices, or why not.
struct PrepareResult {
  std::vector<PreparedDevice> devices;  // ignored when error is set
  std::string error;                    // "" on success

  friend bool operator==(const PrepareResult&, const PrepareResult&) = default;
};

class ClaimPreparer {
 public:
  virtual ~ClaimPreparer() = default;

  // Prepares each claim (none already prepared, no UID twice). Returns an entry per claim
  // UID; a claim without an entry counts as failed. Must be idempotent per claim: a claim
  // prepared but not recorded (gpulet killed in between) is asked for again.
  virtual std::map<std::string, PrepareResult> Prepare(const std::vector<ClaimRef>& claims) = 0;

  // Undoes what Prepare made for each claim, given what it returned then. Returns an error
  // text per claim UID that could not be undone (absent or "" means done). Must succeed for a
  // claim whose work is already undone (gpulet killed before forgetting it).
  virtual std::map<std::string, std::string> Unprepare(
      const std::vector<PreparedClaim>& claims) = 0;
};

class PreparedClaims {
 public:
  // Loads the checkpoint at `checkpoint_path` (a missing file: nothing prepared yet). Fails
  // with CheckpointFile's error when the file cannot be trusted: better not to serve than to
  // forget a claim that is in use. `preparer` must outlive the object.
  static absl::StatusOr<std::unique_ptr<PreparedClaims>> Open(std::string checkpoint_path,
                                                              ClaimPreparer* preparer);
  PreparedClaims(const PreparedClaims&) = delete;
  PreparedClaims& operator=(const PreparedClaims&) = delete;

  // NodePrepareResources: an entry per distinct claim UID of `claims`. A claim reference
  // missing its namespace, UID or name gets an error (keyed by its UID, "" when that is the
  // missing part).
  std::map<std::string, PrepareResult> Prepare(const std::vector<ClaimRef>& claims);

  // NodeUnprepareResources: an error text per distinct claim UID of `claims`, "" when done.
  std::map<std::string, std::string> Unprepare(const std::vector<ClaimRef>& claims);

  // What is recorded now (a copy), for tests and status.
  ClaimCheckpoint prepared() const;
  const std::string& checkpoint_path() const { return file_.path(); }

 private:
  PreparedClaims(CheckpointFile file, ClaimCheckpoint loaded, ClaimPreparer* preparer);

  const CheckpointFile file_;
  ClaimPreparer* const preparer_;

  mutable absl::Mutex mu_;
  ClaimCheckpoint claims_ ABSL_GUARDED_BY(mu_);  // always what the file holds
};

}  // namespace gpulet::dra

#endif  // GPULET_DRA_PREPARED_CLAIMS_H_
