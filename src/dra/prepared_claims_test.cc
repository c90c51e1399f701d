#include "dra/prepared_claims.h"

#include <sys/stat.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/fake_claim_preparer.h"
#include "testing/files.h"

namespace gpulet::dra {
namespace {

using ::gpulet::testing::FakeClaimPreparer;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

ClaimRef Claim(const std::string& uid) {
  return ClaimRef{.ns = "ml", .uid = uid, .name = "claim-" + uid};
}

class PreparedClaimsTest : public ::testing::Test {
 protected:
  std::unique_ptr<PreparedClaims> Open() {
    absl::StatusOr<std::unique_ptr<PreparedClaims>> c = PreparedClaims::Open(path_, &preparer_);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  gpulet::testing::ScratchDir dir_;
  std::string path_ = dir_.path() + "/dra/checkpoint.json";
  FakeClaimPreparer preparer_;
};

TEST_F(PreparedClaimsTest, PrepareAnswersAndRecordsEveryClaim) {
  auto claims = Open();
  auto r = claims->Prepare({Claim("a"), Claim("b")});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r["a"].error, "");
  EXPECT_EQ(r["a"].devices, FakeClaimPreparer::DefaultDevices("a"));
  EXPECT_EQ(r["b"].devices, FakeClaimPreparer::DefaultDevices("b"));
  EXPECT_EQ(preparer_.prepare_calls(), 1);  // one call for the whole request
  absl::StatusOr<ClaimCheckpoint> saved = CheckpointFile(path_).Load();
  ASSERT_TRUE(saved.ok()) << saved.status();
  ASSERT_EQ(saved->size(), 2u);
  EXPECT_EQ(saved->at("a").ref, Claim("a"));
  EXPECT_EQ(saved->at("a").devices, FakeClaimPreparer::DefaultDevices("a"));
}

TEST_F(PreparedClaimsTest, RepeatedPrepareReturnsTheRecordedAnswerWithoutPreparingAgain) {
  auto claims = Open();
  preparer_.SetDevices("a", {PreparedDevice{.request_names = {"gpu"},
                                            .pool = "node-a",
                                            .device = "gpu-1",
                                            .cdi_device_ids = {"x.y/z=1", "x.y/z=2"},
                                            .share_id = "s1"}});
  auto first = claims->Prepare({Claim("a")});
  // The preparer would now answer differently; the recorded answer wins.
  preparer_.SetDevices("a", {});
  auto again = claims->Prepare({Claim("a"), Claim("a")});
  EXPECT_EQ(again, first);
  EXPECT_EQ(preparer_.prepare_calls(), 1);
  // A request mixing a prepared and a new claim prepares only the new one.
  auto mixed = claims->Prepare({Claim("a"), Claim("b")});
  EXPECT_EQ(mixed["a"], first["a"]);
  EXPECT_THAT(preparer_.prepared_uids_seen(), ElementsAre("a", "b"));
}

TEST_F(PreparedClaimsTest, UnprepareUndoesForgetsAndIsIdempotent) {
  auto claims = Open();
  claims->Prepare({Claim("a"), Claim("b")});
  auto r = claims->Unprepare({Claim("a")});
  EXPECT_EQ(r, (std::map<std::string, std::string>{{"a", ""}}));
  EXPECT_THAT(preparer_.made(), ElementsAre("b"));
  EXPECT_EQ(preparer_.unprepare_calls(), 1);
  // Again, and a claim never prepared here (e.g. deleted before its pod started): both done,
  // without asking the preparer.
  r = claims->Unprepare({Claim("a"), Claim("never")});
  EXPECT_EQ(r, (std::map<std::string, std::string>{{"a", ""}, {"never", ""}}));
  EXPECT_EQ(preparer_.unprepare_calls(), 1);
  EXPECT_THAT(claims->prepared(), ::testing::SizeIs(1));
  absl::StatusOr<ClaimCheckpoint> saved = CheckpointFile(path_).Load();
  ASSERT_TRUE(saved.ok());
  EXPECT_EQ(saved->count("a"), 0u);
  EXPECT_EQ(saved->count("b"), 1u);
}

// A new object on the same file is gpulet after a restart (or a kill -9) between prepare and
// unprepare.
TEST_F(PreparedClaimsTest, StateSurvivesARestart) {
  std::map<std::string, PrepareResult> before;
  {
    auto claims = Open();
    before = claims->Prepare({Claim("a")});
  }
  auto claims = Open();
  EXPECT_EQ(claims->Prepare({Claim("a")}), before);
  EXPECT_EQ(preparer_.prepare_calls(), 1);
  EXPECT_EQ(claims->Unprepare({Claim("a")})["a"], "");
  EXPECT_THAT(preparer_.unprepared_uids_seen(), ElementsAre("a"));
  EXPECT_THAT(preparer_.made(), IsEmpty());
  EXPECT_THAT(Open()->prepared(), IsEmpty());
}

TEST_F(PreparedClaimsTest, PerClaimFailuresAreAnsweredAndNotRecorded) {
  auto claims = Open();
  preparer_.FailPrepare("bad", "ResourceClaim ml/claim-bad is not allocated to this node");
  preparer_.OmitFromAnswer("lost");
  auto r = claims->Prepare(
      {Claim("ok"), Claim("bad"), Claim("lost"), ClaimRef{.ns = "", .uid = "u", .name = ""}});
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r["ok"].error, "");
  EXPECT_EQ(r["bad"].error, "ResourceClaim ml/claim-bad is not allocated to this node");
  EXPECT_THAT(r["lost"].error, HasSubstr("gave no result"));
  EXPECT_THAT(r["u"].error, HasSubstr("without its namespace and name"));
  EXPECT_THAT(preparer_.prepared_uids_seen(), ElementsAre("ok", "bad", "lost"));
  EXPECT_EQ(claims->prepared().size(), 1u);
  // Fixed: the kubelet's retry prepares it.
  preparer_.FailPrepare("bad", "");
  EXPECT_EQ(claims->Prepare({Claim("bad")})["bad"].error, "");
  EXPECT_EQ(claims->prepared().size(), 2u);
}

TEST_F(PreparedClaimsTest, AFailedUnprepareKeepsTheClaimForTheRetry) {
  auto claims = Open();
  claims->Prepare({Claim("a")});
  preparer_.FailUnprepare("a", "removing the CDI spec failed: read-only file system");
  EXPECT_THAT(claims->Unprepare({Claim("a")})["a"], HasSubstr("read-only"));
  EXPECT_EQ(claims->prepared().count("a"), 1u);
  preparer_.FailUnprepare("a", "");
  EXPECT_EQ(claims->Unprepare({Claim("a")})["a"], "");
  EXPECT_THAT(claims->prepared(), IsEmpty());
}

// Work that cannot be recorded is undone, so that no restart can forget it.
TEST_F(PreparedClaimsTest, ACheckpointThatCannotBeSavedUndoesThePrepare) {
  auto claims = Open();
  // Open made the directory (and the lock file in it, which stays open): replace it.
  std::filesystem::remove_all(dir_.path() + "/dra");
  dir_.Write("dra", "a file where the checkpoint's directory should be");
  auto r = claims->Prepare({Claim("a")});
  EXPECT_THAT(r["a"].error, HasSubstr("could not record it"));
  EXPECT_THAT(r["a"].error, HasSubstr(path_));
  EXPECT_THAT(preparer_.unprepared_uids_seen(), ElementsAre("a"));
  EXPECT_THAT(preparer_.made(), IsEmpty());
  EXPECT_THAT(claims->prepared(), IsEmpty());
}

// Two objects on one file are the old and the new gpulet pod of a rolling update: each call
// re-reads the checkpoint under the lock, so a claim one prepared is unprepared by the other
// with the devices the first recorded, and neither overwrites the other's records.
TEST_F(PreparedClaimsTest, TwoObjectsOnOneCheckpointSeeEachOthersClaims) {
  FakeClaimPreparer other_preparer;
  auto old_pod = Open();
  absl::StatusOr<std::unique_ptr<PreparedClaims>> opened =
      PreparedClaims::Open(path_, &other_preparer);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::unique_ptr<PreparedClaims> new_pod = std::move(*opened);
  const std::vector<PreparedDevice> devices = {PreparedDevice{.request_names = {"gpu"},
                                                              .pool = "node-a",
                                                              .device = "gpu-1",
                                                              .cdi_device_ids = {"x.y/z=a"},
                                                              .share_id = ""}};
  preparer_.SetDevices("a", devices);
  // Prepared through the old pod after the new one opened the file.
  EXPECT_EQ(old_pod->Prepare({Claim("a")})["a"].error, "");
  // The new pod knows it: a repeated prepare answers the record without preparing again...
  EXPECT_EQ(new_pod->Prepare({Claim("a")})["a"].devices, devices);
  EXPECT_EQ(other_preparer.prepare_calls(), 0);
  // ...its own claims are added to the old pod's, not written over them...
  EXPECT_EQ(new_pod->Prepare({Claim("b")})["b"].error, "");
  EXPECT_THAT(CheckpointFile(path_).Load().value(), ::testing::SizeIs(2));
  // ...and it unprepares the old pod's claim with what the old pod recorded.
  EXPECT_EQ(new_pod->Unprepare({Claim("a")})["a"], "");
  ASSERT_EQ(other_preparer.unprepared_claims_seen().size(), 1u);
  EXPECT_EQ(other_preparer.unprepared_claims_seen()[0].ref, Claim("a"));
  EXPECT_EQ(other_preparer.unprepared_claims_seen()[0].devices, devices);
  // The old pod sees it gone: its own unprepare has nothing left to undo.
  EXPECT_EQ(old_pod->Unprepare({Claim("a")})["a"], "");
  EXPECT_EQ(preparer_.unprepare_calls(), 0);
  EXPECT_EQ(old_pod->prepared().count("a"), 0u);
  EXPECT_EQ(old_pod->prepared().count("b"), 1u);
}

TEST_F(PreparedClaimsTest, TheLockFileBesideTheCheckpointIsMode0600) {
  auto claims = Open();
  EXPECT_EQ(claims->lock_path(), path_ + ".lock");
  struct stat st;
  ASSERT_EQ(stat(claims->lock_path().c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  claims->Prepare({Claim("a")});
  ASSERT_EQ(stat(claims->lock_path().c_str(), &st), 0);  // kept, not removed after a call
}

// A checkpoint damaged after the start fails the call instead of being guessed at.
TEST_F(PreparedClaimsTest, ACheckpointDamagedWhileServingFailsTheCall) {
  auto claims = Open();
  claims->Prepare({Claim("a")});
  dir_.Write("dra/checkpoint.json", "{\"kind\": \"GpuletDraCheckpoint\"");
  EXPECT_THAT(claims->Prepare({Claim("b")})["b"].error, HasSubstr(path_));
  EXPECT_THAT(claims->Unprepare({Claim("a")})["a"], HasSubstr(path_));
  EXPECT_EQ(preparer_.prepare_calls(), 1);
  EXPECT_EQ(preparer_.unprepare_calls(), 0);
}

TEST_F(PreparedClaimsTest, OpenRefusesACorruptCheckpoint) {
  dir_.Write("dra/checkpoint.json", "{\"kind\": \"GpuletDraCheckpoint\"");
  absl::StatusOr<std::unique_ptr<PreparedClaims>> c = PreparedClaims::Open(path_, &preparer_);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr(path_));
}

}  // namespace
}  // namespace gpulet::dra
