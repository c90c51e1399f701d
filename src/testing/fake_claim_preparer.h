// FakeClaimPreparer: a ClaimPreparer (dra/prepared_claims.h) for tests and benchmarks. It
// keeps the set of claims it has "made" (what a real preparer's CDI spec files would be), so a
// test can check that prepare and unprepare left nothing behind, and records every call.
//
// By default preparing claim UID u gives one device: pool "node-a", device "gpu-0", CDI ID
// "gpulet.dev/claim=u-gpu-0", no request names. Tests can script per-claim devices, errors
// and missing answers.
//
// Thread-safety: all methods are thread-safe.
#ifndef GPULET_TESTING_FAKE_CLAIM_PREPARER_H_
#define GPULET_TESTING_FAKE_CLAIM_PREPARER_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "dra/prepared_claims.h"

namespace gpulet::testing {

class FakeClaimPreparer final : public dra::ClaimPreparer {
 public:
  std::map<std::string, dra::PrepareResult> Prepare(
      const std::vector<dra::ClaimRef>& claims) override;
  std::map<std::string, std::string> Unprepare(
      const std::vector<dra::PreparedClaim>& claims) override;

  // Scripting, per claim UID.
  void SetDevices(const std::string& uid, std::vector<dra::PreparedDevice> devices);
  void FailPrepare(const std::string& uid, std::string error);    // "" clears
  void FailUnprepare(const std::string& uid, std::string error);  // "" clears
  void OmitFromAnswer(const std::string& uid);  // Prepare leaves the claim out of its answer

  // The devices `uid` gets by default.
  static std::vector<dra::PreparedDevice> DefaultDevices(const std::string& uid);

  int prepare_calls() const;
  int unprepare_calls() const;
  // Every claim UID passed to Prepare / Unprepare, in order.
  std::vector<std::string> prepared_uids_seen() const;
  std::vector<std::string> unprepared_uids_seen() const;
  // Every claim passed to Unprepare, with the devices it was given, in order.
  std::vector<dra::PreparedClaim> unprepared_claims_seen() const;
  // The claims made and not yet undone.
  std::set<std::string> made() const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, std::vector<dra::PreparedDevice>> devices_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> prepare_errors_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> unprepare_errors_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> omitted_ ABSL_GUARDED_BY(mu_);
  int prepare_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int unprepare_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> prepared_seen_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> unprepared_seen_ ABSL_GUARDED_BY(mu_);
  std::vector<dra::PreparedClaim> unprepared_claims_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> made_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpulet::testing

#endif  // GPULET_TESTING_FAKE_CLAIM_PREPARER_H_
