#include "dra/checkpoint.h"

#include <sys/stat.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/files.h"

namespace gpulet::dra {
namespace {

using ::testing::HasSubstr;

ClaimCheckpoint Sample() {
  ClaimCheckpoint c;
  c["uid-1"] =
      PreparedClaim{.ref = ClaimRef{.ns = "ml", .uid = "uid-1", .name = "ollama-gpu"},
                    .devices = {PreparedDevice{.request_names = {"gpu"},
                                               .pool = "node-a",
                                               .device = "gpu-0",
                                               .cdi_device_ids = {"gpulet.dev/claim=uid-1-gpu-0"},
                                               .share_id = ""},
                                PreparedDevice{.request_names = {},
                                               .pool = "node-a",
                                               .device = "gpu-1",
                                               .cdi_device_ids = {"a.b/c=d", "a.b/c=e"},
                                               .share_id = "share-7"}}};
  c["uid-2"] =
      PreparedClaim{.ref = ClaimRef{.ns = "anpr", .uid = "uid-2", .name = "cam"}, .devices = {}};
  return c;
}

TEST(DraCheckpointTest, RoundTripsThroughJson) {
  ClaimCheckpoint c = Sample();
  absl::StatusOr<ClaimCheckpoint> back = CheckpointFromJson(CheckpointToJson(c));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, c);
  absl::StatusOr<ClaimCheckpoint> empty = CheckpointFromJson(CheckpointToJson({}));
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->empty());
}

TEST(DraCheckpointTest, WritesKindVersionAndChecksum) {
  nlohmann::json doc = nlohmann::json::parse(CheckpointToJson(Sample()));
  EXPECT_EQ(doc["kind"], "GpuletDraCheckpoint");
  EXPECT_EQ(doc["version"], 1);
  EXPECT_THAT(doc["checksum"].get<std::string>(), ::testing::StartsWith("fnv1a64:"));
  EXPECT_EQ(doc["claims"]["uid-1"]["devices"][1]["shareId"], "share-7");
}

// Each damaged or foreign file is refused with a message saying what is wrong.
TEST(DraCheckpointTest, RefusesCorruptOrForeignFiles) {
  const std::string good = CheckpointToJson(Sample());
  nlohmann::json doc = nlohmann::json::parse(good);
  auto edit = [&](auto&& change) {
    nlohmann::json d = doc;
    change(d);
    return d.dump();
  };
  struct Case {
    const char* name;
    std::string text;
    const char* message;
  };
  const Case cases[] = {
      {"empty", "", "not valid JSON"},
      {"truncated", good.substr(0, good.size() / 2), "not valid JSON"},
      {"array", "[]", "the top level must be an object"},
      {"a key twice", "{\"version\": 1, " + good.substr(1), "\"version\" appears twice"},
      {"foreign kind", edit([](auto& d) { d["kind"] = "CheckpointData"; }),
       "kind is missing or not"},
      {"kubelet's own checkpoint", R"({"Data":"{}","Checksum":1})", "kind is missing or not"},
      {"newer version", edit([](auto& d) { d["version"] = 2; }), "version is 2, not 1"},
      {"version as string", edit([](auto& d) { d["version"] = "1"; }),
       "version must be an integer, not the string"},
      {"unknown top-level field", edit([](auto& d) { d["extra"] = 1; }),
       "extra is not a field gpulet knows here"},
      {"edited claims", edit([](auto& d) { d["claims"]["uid-2"]["name"] = "other"; }),
       "does not match"},
      {"checksum missing", edit([](auto& d) { d.erase("checksum"); }),
       "checksum is missing (a string)"},
      {"claims not an object", edit([](auto& d) { d["claims"] = nlohmann::json::array(); }),
       "claims must be an object, not a list"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<ClaimCheckpoint> r = CheckpointFromJson(c.text);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr("not a gpulet DRA checkpoint"));
    EXPECT_THAT(r.status().message(), HasSubstr(c.message));
  }
}

// Claims with wrong shapes, behind a valid checksum (so the claim checks themselves are seen).
TEST(DraCheckpointTest, RefusesBadClaimsBehindAValidChecksum) {
  auto with_claims = [](const std::string& claims_json) {
    // Round-trip an empty checkpoint, then swap in the claims and recompute the checksum the
    // way the format documents it.
    nlohmann::json claims = nlohmann::json::parse(claims_json);
    uint64_t h = 14695981039346656037ull;
    for (unsigned char ch : claims.dump()) {
      h ^= ch;
      h *= 1099511628211ull;
    }
    char sum[40];
    snprintf(sum, sizeof(sum), "fnv1a64:%016llx", static_cast<unsigned long long>(h));
    nlohmann::json d = nlohmann::json::parse(CheckpointToJson({}));
    d["claims"] = claims;
    d["checksum"] = sum;
    return d.dump();
  };
  struct Case {
    const char* claims;
    const char* message;
  };
  const Case cases[] = {
      {R"({"":{"namespace":"a","name":"b","devices":[]}})",
       "claims holds a claim whose UID is empty"},
      {R"({"u":[]})", "claims.u must be an object, not a list"},
      {R"({"u":{"namespace":"a","devices":[]}})", "claims.u.name is missing"},
      {R"({"u":{"namespace":"","name":"b","devices":[]}})", "claims.u.namespace is empty"},
      {R"({"u":{"namespace":"a","name":"b","devices":{}}})",
       "claims.u.devices must be a list, not an object"},
      {R"({"u":{"namespace":"a","name":"b","devices":[],"x":1}})",
       "claims.u.x is not a field gpulet knows here"},
      {R"({"u":{"namespace":"a","name":"b","devices":[{"requestNames":[],"pool":"p",
          "device":"d","cdiDeviceIds":[1],"shareId":""}]}})",
       "claims.u.devices[0].cdiDeviceIds[0] must be a string, not 1"},
      {R"({"u":{"namespace":"a","name":"b","devices":[{"requestNames":[],"pool":"p",
          "device":"","cdiDeviceIds":[],"shareId":""}]}})",
       "claims.u.devices[0].device is empty"},
      {R"({"u":{"namespace":"a","name":"b","devices":[{"requestNames":[],"pool":"p",
          "device":"d","cdiDeviceIds":[],"shareId":null}]}})",
       "claims.u.devices[0].shareId must be a string, not null"},
  };
  // The helper itself must produce an acceptable file.
  ASSERT_TRUE(
      CheckpointFromJson(with_claims(R"({"u":{"namespace":"a","name":"b","devices":[]}})")).ok());
  for (const Case& c : cases) {
    SCOPED_TRACE(c.claims);
    absl::StatusOr<ClaimCheckpoint> r = CheckpointFromJson(with_claims(c.claims));
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(r.status().message(), HasSubstr(c.message));
  }
}

TEST(DraCheckpointTest, FileMissingIsEmptyAndSaveLoadKeepsEverything) {
  gpulet::testing::ScratchDir dir;
  CheckpointFile file(dir.path() + "/state/dra/checkpoint.json");
  absl::StatusOr<ClaimCheckpoint> none = file.Load();
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
  ASSERT_TRUE(file.Save(Sample()).ok());
  struct stat st;
  ASSERT_EQ(stat(file.path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  absl::StatusOr<ClaimCheckpoint> loaded = CheckpointFile(file.path()).Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, Sample());
}

TEST(DraCheckpointTest, LoadErrorsNameThePathAndWhatToDo) {
  gpulet::testing::ScratchDir dir;
  const std::string path = dir.Write("cp.json", "{\"kind\": \"GpuletDraCheckpoint\", \"vers");
  absl::StatusOr<ClaimCheckpoint> r = CheckpointFile(path).Load();
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr(path));
  EXPECT_THAT(r.status().message(), HasSubstr("not valid JSON"));
  EXPECT_THAT(r.status().message(), HasSubstr("Move the file away only after"));
  // A directory where the file should be.
  absl::StatusOr<ClaimCheckpoint> d = CheckpointFile(dir.path()).Load();
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(d.status().message(), HasSubstr("directory"));
}

TEST(DraCheckpointTest, SaveErrorNamesThePath) {
  gpulet::testing::ScratchDir dir;
  std::string blocker = dir.Write("file", "x");
  absl::Status s = CheckpointFile(blocker + "/cp.json").Save(Sample());
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(blocker));
  EXPECT_THAT(s.message(), HasSubstr("saving the DRA checkpoint"));
}

}  // namespace
}  // namespace gpulet::dra
