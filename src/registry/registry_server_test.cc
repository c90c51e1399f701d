#include "registry/registry_server.h"

#include <csignal>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "testing/daemon_process.h"
#include "testing/files.h"
#include "testing/free_port.h"
#include "testing/homelab.h"
#include "testing/oci_builder.h"
#include "testing/real_tools.h"
#include "testing/subprocess.h"
#include "testing/wait_for.h"

namespace gpulet::registry {
namespace {

using ::testing::HasSubstr;

const char kFixture[] = GPULET_SOURCE_DIR "/tests/fixtures/oci/podman-tiny.oci.tar";
const char kManifest[] = "sha256:0ad6bfdb7ba72787655c641a42468bed37b82547e0685cb1dd8fcdcd79c1dddf";

class RegistryServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<OciArchive> a = OciArchive::Open(kFixture);
    ASSERT_TRUE(a.ok()) << a.status();
    archive_ = std::make_unique<OciArchive>(std::move(*a));
    server_ = std::make_unique<RegistryServer>(
        archive_.get(), ServerOptions{.repository = "gpulet-fixture", .access_log = false});
    ASSERT_TRUE(server_->Start("127.0.0.1:0").ok());
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
  }

  std::unique_ptr<OciArchive> archive_;
  std::unique_ptr<RegistryServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

// The pull half of the distribution API, as a client walks it: /v2/, the manifest by tag
// (HEAD then GET), then its blobs by digest, each with its digest header.
TEST_F(RegistryServerTest, ServesTheManifestByTagAndDigestAndItsBlobs) {
  httplib::Result base = client_->Get("/v2/");
  ASSERT_TRUE(base);
  EXPECT_EQ(base->status, 200);
  EXPECT_EQ(base->get_header_value("Docker-Distribution-API-Version"), "registry/2.0");

  httplib::Result head = client_->Head("/v2/gpulet-fixture/manifests/1");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->get_header_value("Docker-Content-Digest"), kManifest);
  EXPECT_EQ(head->get_header_value("Content-Length"), "344");
  EXPECT_EQ(head->get_header_value("Content-Type"), "application/vnd.oci.image.manifest.v1+json");

  httplib::Result by_tag = client_->Get("/v2/gpulet-fixture/manifests/1");
  httplib::Result by_digest =
      client_->Get(absl::StrCat("/v2/gpulet-fixture/manifests/", kManifest));
  ASSERT_TRUE(by_tag && by_digest);
  EXPECT_EQ(by_tag->body, by_digest->body);
  EXPECT_EQ(testing::Sha256Digest(by_tag->body), kManifest);

  nlohmann::json m = nlohmann::json::parse(by_tag->body);
  for (const nlohmann::json& d : {m["config"], m["layers"][0]}) {
    std::string digest = d["digest"];
    httplib::Result blob = client_->Get(absl::StrCat("/v2/gpulet-fixture/blobs/", digest));
    ASSERT_TRUE(blob);
    EXPECT_EQ(blob->status, 200);
    EXPECT_EQ(blob->body.size(), d["size"].get<size_t>());
    EXPECT_EQ(testing::Sha256Digest(blob->body), digest);
    EXPECT_EQ(blob->get_header_value("Docker-Content-Digest"), digest);
  }
  httplib::Result tags = client_->Get("/v2/gpulet-fixture/tags/list");
  ASSERT_TRUE(tags);
  EXPECT_EQ(nlohmann::json::parse(tags->body)["tags"], nlohmann::json::array({"1"}));
  EXPECT_EQ(server_->requests(), 7u);
}

// What is not there is a 404 with the distribution spec's error code; nothing can be
// written; only the archive's own blobs are reachable.
TEST_F(RegistryServerTest, UnknownNamesAndWritesAreRefusedWithTheSpecsCodes) {
  auto code = [](const httplib::Result& r) {
    return nlohmann::json::parse(r->body)["errors"][0]["code"].get<std::string>();
  };
  httplib::Result other = client_->Get("/v2/other/manifests/1");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);
  EXPECT_EQ(code(other), "NAME_UNKNOWN");
  EXPECT_THAT(other->body, HasSubstr("this serves 'gpulet-fixture'"));

  httplib::Result tag = client_->Get("/v2/gpulet-fixture/manifests/2");
  ASSERT_TRUE(tag);
  EXPECT_EQ(tag->status, 404);
  EXPECT_EQ(code(tag), "MANIFEST_UNKNOWN");

  httplib::Result blob =
      client_->Get(absl::StrCat("/v2/gpulet-fixture/blobs/sha256:", std::string(64, '0')));
  ASSERT_TRUE(blob);
  EXPECT_EQ(blob->status, 404);
  EXPECT_EQ(code(blob), "BLOB_UNKNOWN");

  httplib::Result escape = client_->Get("/v2/gpulet-fixture/blobs/../../../etc/passwd");
  ASSERT_TRUE(escape);
  EXPECT_EQ(escape->status, 404);

  httplib::Result put = client_->Put("/v2/gpulet-fixture/manifests/1", "{}", "application/json");
  ASSERT_TRUE(put);
  EXPECT_EQ(put->status, 405);
  EXPECT_EQ(code(put), "UNSUPPORTED");
  EXPECT_EQ(put->get_header_value("Allow"), "GET, HEAD");
}

TEST_F(RegistryServerTest, ASecondStartAndABadAddressSayWhy) {
  absl::Status again = server_->Start("127.0.0.1:0");
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition);
  RegistryServer other(archive_.get(), ServerOptions{.repository = "x"});
  absl::Status bad = other.Start("no-port", "--address");
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("--address 'no-port' needs a port"));
}

// An archive holding images of two repositories serves the tags of the one it serves only.
TEST(RegistryServerTagsTest, ATagNamesAnImageOfTheServedRepositoryOnly) {
  testing::OciArchiveBuilder b;
  const std::string ours = b.Image("localhost/gpulet:1", "ours");
  b.Image("localhost/other:2", "theirs");
  std::string bytes = b.Build();
  absl::StatusOr<OciArchive> a =
      OciArchive::FromReader("two.tar", bytes.size(), testing::StringReader(bytes));
  ASSERT_TRUE(a.ok()) << a.status();
  RegistryServer server(&*a, ServerOptions{.repository = "gpulet", .access_log = false});
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  httplib::Client client("127.0.0.1", server.port());
  httplib::Result tag = client.Get("/v2/gpulet/manifests/1");
  ASSERT_TRUE(tag);
  EXPECT_EQ(tag->status, 200);
  EXPECT_EQ(tag->get_header_value("Docker-Content-Digest"), ours);
  httplib::Result other = client.Get("/v2/gpulet/manifests/2");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);
  httplib::Result tags = client.Get("/v2/gpulet/tags/list");
  ASSERT_TRUE(tags);
  EXPECT_EQ(nlohmann::json::parse(tags->body)["tags"], nlohmann::json::array({"1"}));
}

// The real clients: skopeo (containers/image, the library podman and CRI-O pull with) reads
// the image from `gpulet image-serve` by tag and by digest, and the copy it writes has the
// digest the archive had, which is what a pod's pinned reference checks.
TEST(ImageServeCommandTest, SkopeoPullsTheImageByDigestAndTheDigestHolds) {
  std::string skopeo = testing::FindOnPath("skopeo");
  if (skopeo.empty()) {
    if (testing::InCi()) FAIL() << "no skopeo: scripts/deps.sh test installs it";
    GTEST_SKIP() << "no skopeo: run scripts/deps.sh test";
  }
  testing::ScratchDir dir;
  const int port = testing::FreeLoopbackPort();
  const std::string host_port = absl::StrCat("127.0.0.1:", port);
  testing::DaemonProcess serve;
  ASSERT_TRUE(serve.Start({testing::GpuletBinary(), "image-serve", kFixture, "--address", host_port,
                           "--talos-patch", dir.path() + "/patch.yaml"},
                          {}, dir.path() + "/serve.log"));
  ASSERT_NE(testing::WaitFor([&] {
              return serve.Log().find("Ctrl-C stops it") != std::string::npos || !serve.Running();
            }),
            absl::InfiniteDuration());
  ASSERT_TRUE(serve.Running()) << serve.Log();
  // What it tells the user: the pinned reference, the patch file.
  const std::string pinned = absl::StrCat(host_port, "/gpulet-fixture@", kManifest);
  EXPECT_THAT(serve.Log(),
              HasSubstr(absl::StrCat("gpulet manifests --overlay talos --image ", pinned)));
  EXPECT_THAT(testing::ReadTextFile(dir.path() + "/patch.yaml"),
              HasSubstr(absl::StrCat("- http://", host_port)));

  testing::RunResult inspect =
      testing::RunProgram({skopeo, "inspect", "--tls-verify=false",
                           absl::StrCat("docker://", host_port, "/gpulet-fixture:1")});
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  EXPECT_EQ(nlohmann::json::parse(inspect.out)["Digest"], kManifest);

  const std::string copy = dir.path() + "/copy.oci.tar";
  testing::RunResult pull =
      testing::RunProgram({skopeo, "copy", "--src-tls-verify=false",
                           absl::StrCat("docker://", pinned), absl::StrCat("oci-archive:", copy)});
  ASSERT_EQ(pull.exit_code, 0) << pull.err << serve.Log();
  absl::StatusOr<OciArchive> copied = OciArchive::Open(copy);
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_EQ(copied->images().at(0).manifest.digest, kManifest);

  // A reference by a digest the archive does not hold fails in the client, with the 404.
  testing::RunResult missing = testing::RunProgram(
      {skopeo, "inspect", "--tls-verify=false",
       absl::StrCat("docker://", host_port, "/gpulet-fixture@sha256:", std::string(64, '1'))});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_THAT(serve.Log(), HasSubstr(" 404"));
  EXPECT_EQ(serve.Stop(SIGTERM, absl::Seconds(10)), 0) << serve.Log();
}

TEST(ImageServeCommandTest, ADockerArchiveOrABadAdvertiseIsAUsageError) {
  testing::ScratchDir dir;
  testing::TarWriter docker;
  docker.File("manifest.json", "[]");
  const std::string path = dir.Write("docker.tar", docker.bytes());
  testing::RunResult r = testing::RunProgram({testing::GpuletBinary(), "image-serve", path});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("docker-archive"));
  r = testing::RunProgram({testing::GpuletBinary(), "image-serve", kFixture, "--address",
                           "127.0.0.1:0", "--advertise", "host;rm -rf /:5000"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--advertise 'host;rm -rf /:5000'"));
}

}  // namespace
}  // namespace gpulet::registry
