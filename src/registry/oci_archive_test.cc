#include "registry/oci_archive.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/oci_builder.h"

namespace gpulet::registry {
namespace {

using ::testing::HasSubstr;

const char kFixture[] = GPULET_SOURCE_DIR "/tests/fixtures/oci/podman-tiny.oci.tar";
const char kFixtureManifest[] =
    "sha256:0ad6bfdb7ba72787655c641a42468bed37b82547e0685cb1dd8fcdcd79c1dddf";

TEST(OciArchiveTest, OpensWhatPodmanSaves) {
  absl::StatusOr<OciArchive> a = OciArchive::Open(kFixture);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->images().size(), 1u);
  EXPECT_EQ(a->images()[0].ref_name, "localhost/gpulet-fixture:1");
  EXPECT_EQ(a->images()[0].manifest.digest, kFixtureManifest);
  EXPECT_EQ(a->images()[0].manifest.size, 344u);
  ASSERT_EQ(a->manifests().count(kFixtureManifest), 1u);
  // The manifest, its config and its layer are all served.
  const TarEntry* m = a->Blob(kFixtureManifest);
  ASSERT_NE(m, nullptr);
  absl::StatusOr<std::string> text = a->ReadBlob(*m);
  ASSERT_TRUE(text.ok());
  nlohmann::json j = nlohmann::json::parse(*text);
  EXPECT_NE(a->Blob(j["config"]["digest"].get<std::string>()), nullptr);
  EXPECT_NE(a->Blob(j["layers"][0]["digest"].get<std::string>()), nullptr);
  EXPECT_GE(a->fd(), 0);
}

TEST(OciArchiveTest, AMissingFileSaysWhereTheArchiveComesFrom) {
  absl::StatusOr<OciArchive> a = OciArchive::Open("/nonexistent/gpulet.oci.tar");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(a.status().message(), HasSubstr("/nonexistent/gpulet.oci.tar"));
  EXPECT_THAT(a.status().message(), HasSubstr("make image"));
}

TEST(OciArchiveTest, ReadsPaxPathsAndSizesAndGnuLongNames) {
  testing::TarWriter tar;
  tar.Pax({{"path", "./very/long/" + std::string(120, 'p')}, {"size", "5"}});
  tar.File("short-name-ignored", "hello");
  tar.GnuLongName("gnu/" + std::string(150, 'g'));
  tar.File("ignored-too", "xy");
  tar.Directory("adir/");
  tar.File("./plain.txt", "abc");
  absl::StatusOr<std::vector<TarEntry>> entries = IndexTar(tar.bytes().size(), tar.reader());
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 3u);
  EXPECT_EQ((*entries)[0].path, "very/long/" + std::string(120, 'p'));
  EXPECT_EQ((*entries)[0].size, 5u);
  EXPECT_EQ(tar.bytes().substr((*entries)[0].offset, 5), "hello");
  EXPECT_EQ((*entries)[1].path, "gnu/" + std::string(150, 'g'));
  EXPECT_EQ((*entries)[2].path, "plain.txt");
}

TEST(OciArchiveTest, BadTarsAreRefusedWithTheByteOffset) {
  testing::TarWriter good;
  good.File("a", "1234");
  {
    std::string bytes = good.bytes();
    bytes[100] ^= 1;  // the mode field: the checksum no longer matches
    absl::StatusOr<std::vector<TarEntry>> r = IndexTar(bytes.size(), testing::StringReader(bytes));
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(r.status().message(), HasSubstr("tar header at byte 0"));
    EXPECT_THAT(r.status().message(), HasSubstr("checksum"));
  }
  {
    std::string bytes = good.bytes().substr(0, 300);  // cut inside the first header
    testing::TarWriter one;
    one.File("a", std::string(1000, 'x'));
    std::string cut = one.bytes().substr(0, 700);
    absl::StatusOr<std::vector<TarEntry>> r = IndexTar(cut.size(), testing::StringReader(cut));
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(r.status().message(), HasSubstr("truncated"));
    r = IndexTar(bytes.size(), testing::StringReader(bytes));
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(r.status().message(), HasSubstr("ends inside a header"));
  }
  {
    testing::TarWriter pax;
    pax.Pax({{"path", "x"}});
    std::string bytes = pax.bytes();
    ASSERT_EQ(bytes.substr(512, 9), "9 path=x\n");
    bytes[512] = '7';  // the record's stated length no longer ends at its newline
    // (the header's checksum covers only the header, so it still matches)
    absl::StatusOr<std::vector<TarEntry>> r = IndexTar(bytes.size(), testing::StringReader(bytes));
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(r.status().message(), HasSubstr("PAX record"));
  }
}

TEST(OciArchiveTest, AnArchiveWhoseBlobWasChangedIsRefusedAsDamaged) {
  testing::OciArchiveBuilder b;
  b.Image("localhost/gpulet:1", "layer bytes");
  std::string bytes = b.Build();
  absl::StatusOr<OciArchive> ok =
      OciArchive::FromReader("a.tar", bytes.size(), testing::StringReader(bytes));
  ASSERT_TRUE(ok.ok()) << ok.status();
  size_t at = bytes.find("layer bytes");
  ASSERT_NE(at, std::string::npos);
  bytes[at] = 'L';
  absl::StatusOr<OciArchive> bad =
      OciArchive::FromReader("a.tar", bytes.size(), testing::StringReader(bytes));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(bad.status().message(), HasSubstr("does not match its digest"));
  EXPECT_THAT(bad.status().message(), HasSubstr("a.tar"));
}

TEST(OciArchiveTest, IncompleteAndForeignArchivesSayWhatIsWrong) {
  {
    testing::OciArchiveBuilder b;
    b.Image("localhost/gpulet:1", "layer");
    b.DropLayers();
    std::string bytes = b.Build();
    absl::StatusOr<OciArchive> a =
        OciArchive::FromReader("a.tar", bytes.size(), testing::StringReader(bytes));
    ASSERT_FALSE(a.ok());
    EXPECT_THAT(a.status().message(), HasSubstr("is missing (the archive is incomplete"));
  }
  {
    // A docker-archive (podman save's default format) has manifest.json, no oci-layout.
    testing::TarWriter tar;
    tar.File("manifest.json", "[]");
    absl::StatusOr<OciArchive> a =
        OciArchive::FromReader("d.tar", tar.bytes().size(), tar.reader());
    ASSERT_FALSE(a.ok());
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(a.status().message(), HasSubstr("docker-archive"));
    EXPECT_THAT(a.status().message(), HasSubstr("--format oci-archive"));
  }
  {
    testing::TarWriter tar;
    tar.File("oci-layout", R"({"imageLayoutVersion":"1.0.0"})");
    tar.File("index.json", R"({"manifests":[{"mediaType":"text/plain","digest":"sha256:)" +
                               std::string(64, 'a') + R"(","size":1}]})");
    absl::StatusOr<OciArchive> a =
        OciArchive::FromReader("t.tar", tar.bytes().size(), tar.reader());
    ASSERT_FALSE(a.ok());
    EXPECT_THAT(a.status().message(), HasSubstr("not an image manifest"));
  }
  {
    testing::TarWriter tar;
    tar.File("oci-layout", R"({"imageLayoutVersion":"1.0.0"})");
    tar.File("index.json", R"({"manifests":[{"digest":"md5:abc","size":1}]})");
    absl::StatusOr<OciArchive> a =
        OciArchive::FromReader("t.tar", tar.bytes().size(), tar.reader());
    ASSERT_FALSE(a.ok());
    EXPECT_THAT(a.status().message(), HasSubstr("is not sha256:<64 lowercase hex>"));
  }
  // Each field of the archive's own documents is named by its place, and a key twice (two
  // readers could take different ones) is refused.
  struct Case {
    const char* index;
    const char* message;
  };
  const std::string digest = "sha256:" + std::string(64, 'a');
  const Case cases[] = {
      {R"({"manifests":[{"digest":"DIGEST","size":-1}]})",
       "index.json: not an OCI descriptor: manifests[0].size must be a size in bytes, not -1"},
      {R"({"manifests":[{"digest":"DIGEST","size":1,"mediaType":7}]})",
       "manifests[0].mediaType must be a string, not 7"},
      {R"({"manifests":{}})", "manifests must be a list, not an object"},
      {R"({"manifests":[]})", "index.json lists no manifests"},
      {R"({"manifests":[{"digest":"DIGEST","digest":"DIGEST","size":1}]})",
       "not valid JSON in index.json: the key \"digest\" appears twice"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.index);
    testing::TarWriter tar;
    tar.File("oci-layout", R"({"imageLayoutVersion":"1.0.0"})");
    tar.File("index.json", absl::StrReplaceAll(c.index, {{"DIGEST", digest}}));
    absl::StatusOr<OciArchive> a =
        OciArchive::FromReader("t.tar", tar.bytes().size(), tar.reader());
    ASSERT_FALSE(a.ok());
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(a.status().message(), HasSubstr(c.message));
  }
}

TEST(OciArchiveTest, ReferencesSplitIntoRepositoryAndTag) {
  EXPECT_EQ(SplitReference("localhost/gpulet:0.1.0").repository, "gpulet");
  EXPECT_EQ(SplitReference("localhost/gpulet:0.1.0").tag, "0.1.0");
  EXPECT_EQ(SplitReference("reg.example:5000/team/gpulet:1").repository, "team/gpulet");
  EXPECT_EQ(SplitReference("reg.example:5000/team/gpulet:1").tag, "1");
  EXPECT_EQ(SplitReference("team/gpulet").repository, "team/gpulet");
  EXPECT_EQ(SplitReference("team/gpulet").tag, "");
  EXPECT_EQ(SplitReference("127.0.0.1:5000/gpulet@sha256:abc").repository, "gpulet");
  EXPECT_EQ(SplitReference("127.0.0.1:5000/gpulet@sha256:abc").tag, "");
  EXPECT_TRUE(IsSha256Digest(kFixtureManifest));
  EXPECT_FALSE(IsSha256Digest("sha256:ABC"));
  EXPECT_FALSE(IsSha256Digest(absl::StrCat("sha512:", std::string(64, 'a'))));
}

}  // namespace
}  // namespace gpulet::registry
