#include "node/os_release.h"

#include "gtest/gtest.h"
#include "testing/files.h"

namespace gpulet::node {
namespace {

TEST(OsReleaseTest, ParsesTalosVersions) {
  OsInfo os = ParseOsRelease(
      "NAME=\"Talos\"\nID=talos\nVERSION_ID=v1.12.6\n"
      "PRETTY_NAME=\"Talos (v1.12.6)\"\n");
  EXPECT_TRUE(os.talos);
  EXPECT_EQ(os.talos_major, 1);
  EXPECT_EQ(os.talos_minor, 12);
  EXPECT_EQ(os.pretty_name, "Talos (v1.12.6)");
  OsInfo debian = ParseOsRelease("ID=debian\nVERSION_ID=\"12\"\n");
  EXPECT_FALSE(debian.talos);
  EXPECT_EQ(debian.version_id, "12");
}

TEST(TalosVersionTest, Parses) {
  absl::StatusOr<TalosVersion> v = ParseTalosVersion("v1.12.6");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->major, 1);
  EXPECT_EQ(v->minor, 12);
  EXPECT_EQ(v->patch, 6);
  EXPECT_EQ(v->ToString(), "v1.12.6");
  EXPECT_EQ(ParseTalosVersion("1.13")->ToString(), "v1.13");
  EXPECT_EQ(ParseTalosVersion("v1.14.0-beta.1")->minor, 14);
  EXPECT_FALSE(ParseTalosVersion("latest").ok());
  EXPECT_FALSE(ParseTalosVersion("1").ok());
  EXPECT_TRUE(TalosAtLeast(*ParseTalosVersion("2.0"), 1, 14));
  EXPECT_FALSE(TalosAtLeast(*ParseTalosVersion("1.12"), 1, 13));
}

TEST(OsReleaseTest, QuotesCommentsAndFallbackFile) {
  OsInfo os = ParseOsRelease("# comment\n\nID='ubuntu'\nPRETTY_NAME=\"Ubuntu 24.04\"\nBROKEN\n");
  EXPECT_EQ(os.id, "ubuntu");
  EXPECT_EQ(os.pretty_name, "Ubuntu 24.04");
  EXPECT_FALSE(os.talos_version.has_value());
  OsInfo bad = ParseOsRelease("ID=talos\nVERSION_ID=latest\n");
  EXPECT_TRUE(bad.talos);
  EXPECT_FALSE(bad.talos_version.has_value());
  EXPECT_EQ(bad.talos_major, 0);

  testing::ScratchDir root;
  EXPECT_FALSE(ReadOsRelease(HostFs(root.path())).readable);
  root.Write("usr/lib/os-release", "ID=talos\nVERSION_ID=v1.13.2\n");
  OsInfo fallback = ReadOsRelease(HostFs(root.path()));
  EXPECT_TRUE(fallback.readable);
  ASSERT_TRUE(fallback.talos_version.has_value());
  EXPECT_EQ(fallback.talos_version->ToString(), "v1.13.2");
  root.Write("etc/os-release", "ID=debian\n");
  EXPECT_EQ(ReadOsRelease(HostFs(root.path())).id, "debian");
}

}  // namespace
}  // namespace gpulet::node
