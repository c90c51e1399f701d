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
// Thread- and process-safety: PreparedClaims is safe to call from many threads (gRPC's);
// calls are serialized under one mutex, so its preparer is never called concurrently. A
// ClaimPreparer must be safe to call from any one thread at a time. It is also safe across
// processes sharing one checkpoint (the old and the new gpulet pod of a rolling update, which
// the kubelet may call in turn): each Prepare and Unprepare holds an exclusive flock(2) on
// <checkpoint>.lock (mode 0600, created by Open and never removed) from start to end, and
// re-reads the checkpoint under it first, so a claim another process prepared or unprepared
// meanwhile is known (and unprepared with what that process recorded). A checkpoint that
// cannot be read then fails the call (every claim gets the error; the kubelet retries)
// rather than being guessed at.
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
  // Creates the checkpoint's directory (mode 0755) and its lock file when missing, and loads
  // the checkpoint at `checkpoint_path` (a missing file: nothing prepared yet). Fails with
  // CheckpointFile's error when the file cannot be trusted (better not to serve than to
  // forget a claim that is in use), or naming the lock file when it cannot be opened.
  // `preparer` must outlive the object.
  static absl::StatusOr<std::unique_ptr<PreparedClaims>> Open(std::string checkpoint_path,
                                                              ClaimPreparer* preparer);
  PreparedClaims(const PreparedClaims&) = delete;
  PreparedClaims& operator=(const PreparedClaims&) = delete;
  ~PreparedClaims();  // closes the lock file

  // NodePrepareResources: an entry per distinct claim UID of `claims`. A claim reference
  // missing its namespace, UID or name gets an error (keyed by its UID, "" when that is the
  // missing part).
  std::map<std::string, PrepareResult> Prepare(const std::vector<ClaimRef>& claims);

  // NodeUnprepareResources: an error text per distinct claim UID of `claims`, "" when done.
  std::map<std::string, std::string> Unprepare(const std::vector<ClaimRef>& claims);

  // What was recorded at the end of the last call (a copy), for tests and status; another
  // process may have changed the file since.
  ClaimCheckpoint prepared() const;
  const std::string& checkpoint_path() const { return file_.path(); }
  std::string lock_path() const { return file_.path() + ".lock"; }

 private:
  class FileLock;
  PreparedClaims(CheckpointFile file, ClaimCheckpoint loaded, ClaimPreparer* preparer, int lock_fd);
  // Under the file lock: the checkpoint as the file holds it now, into claims_.
  absl::Status Reload() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reload, after taking the file lock failed with `lock_error` (errno) or not (0).
  absl::Status ReloadLocked(int lock_error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CheckpointFile file_;
  ClaimPreparer* const preparer_;
  const int lock_fd_;  // <checkpoint>.lock, open for the object's life

  mutable absl::Mutex mu_;
  ClaimCheckpoint claims_ ABSL_GUARDED_BY(mu_);  // what the file held at the last call's end
};

}  // namespace gpulet::dra

#endif  // GPULET_DRA_PREPARED_CLAIMS_H_
