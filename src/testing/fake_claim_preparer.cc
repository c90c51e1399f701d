#include "testing/fake_claim_preparer.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace gpulet::testing {

std::vector<dra::PreparedDevice> FakeClaimPreparer::DefaultDevices(const std::string& uid) {
  return {dra::PreparedDevice{.request_names = {},
                              .pool = "node-a",
                              .device = "gpu-0",
                              .cdi_device_ids = {absl::StrCat("gpulet.dev/claim=", uid, "-gpu-0")},
                              .share_id = ""}};
}

std::map<std::string, dra::PrepareResult> FakeClaimPreparer::Prepare(
    const std::vector<dra::ClaimRef>& claims) {
  absl::MutexLock lock(&mu_);
  ++prepare_calls_;
  std::map<std::string, dra::PrepareResult> out;
  for (const dra::ClaimRef& c : claims) {
    prepared_seen_.push_back(c.uid);
    if (omitted_.contains(c.uid)) continue;
    if (auto e = prepare_errors_.find(c.uid); e != prepare_errors_.end()) {
      out[c.uid].error = e->second;
      continue;
    }
    auto d = devices_.find(c.uid);
    out[c.uid].devices = d != devices_.end() ? d->second : DefaultDevices(c.uid);
    made_.insert(c.uid);
  }
  return out;
}

std::map<std::string, std::string> FakeClaimPreparer::Unprepare(
    const std::vector<dra::PreparedClaim>& claims) {
  absl::MutexLock lock(&mu_);
  ++unprepare_calls_;
  std::map<std::string, std::string> out;
  for (const dra::PreparedClaim& c : claims) {
    unprepared_seen_.push_back(c.ref.uid);
    unprepared_claims_.push_back(c);
    if (auto e = unprepare_errors_.find(c.ref.uid); e != unprepare_errors_.end()) {
      out[c.ref.uid] = e->second;
      continue;
    }
    made_.erase(c.ref.uid);  // undoing what is already undone is fine, as the contract asks
  }
  return out;
}

void FakeClaimPreparer::SetDevices(const std::string& uid,
                                   std::vector<dra::PreparedDevice> devices) {
  absl::MutexLock lock(&mu_);
  devices_[uid] = std::move(devices);
}

void FakeClaimPreparer::FailPrepare(const std::string& uid, std::string error) {
  absl::MutexLock lock(&mu_);
  if (error.empty()) {
    prepare_errors_.erase(uid);
  } else {
    prepare_errors_[uid] = std::move(error);
  }
}

void FakeClaimPreparer::FailUnprepare(const std::string& uid, std::string error) {
  absl::MutexLock lock(&mu_);
  if (error.empty()) {
    unprepare_errors_.erase(uid);
  } else {
    unprepare_errors_[uid] = std::move(error);
  }
}

void FakeClaimPreparer::OmitFromAnswer(const std::string& uid) {
  absl::MutexLock lock(&mu_);
  omitted_.insert(uid);
}

int FakeClaimPreparer::prepare_calls() const {
  absl::MutexLock lock(&mu_);
  return prepare_calls_;
}

int FakeClaimPreparer::unprepare_calls() const {
  absl::MutexLock lock(&mu_);
  return unprepare_calls_;
}

std::vector<std::string> FakeClaimPreparer::prepared_uids_seen() const {
  absl::MutexLock lock(&mu_);
  return prepared_seen_;
}

std::vector<dra::PreparedClaim> FakeClaimPreparer::unprepared_claims_seen() const {
  absl::MutexLock lock(&mu_);
  return unprepared_claims_;
}

std::vector<std::string> FakeClaimPreparer::unprepared_uids_seen() const {
  absl::MutexLock lock(&mu_);
  return unprepared_seen_;
}

std::set<std::string> FakeClaimPreparer::made() const {
  absl::MutexLock lock(&mu_);
  return made_;
}

}  // namespace gpulet::testing
