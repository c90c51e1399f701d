#include "kube/kube_config.h"

#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/files.h"

namespace gpulet::kube {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kCa[] = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

TEST(KubeConfigTest, InClusterReadsTheServiceAccount) {
  gpulet::testing::ScratchDir dir;
  InClusterSource src;
  src.host = "10.96.0.1";
  src.port = "443";
  src.token_file = dir.Write("sa/token", "tok-1\n");
  src.ca_file = dir.Write("sa/ca.crt", kCa);
  src.namespace_file = dir.Write("sa/namespace", "gpulet-system\n");
  absl::StatusOr<KubeConfig> c = LoadInClusterConfig(src);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->host, "10.96.0.1");
  EXPECT_EQ(c->port, 443);
  EXPECT_EQ(c->server, "https://10.96.0.1:443");
  EXPECT_EQ(c->ca_pem, kCa);
  EXPECT_EQ(c->ca_source, src.ca_file);
  EXPECT_EQ(c->token_file, src.token_file);
  EXPECT_TRUE(c->token.empty());  // re-read from the file by the client
  EXPECT_EQ(c->namespace_name, "gpulet-system");
  // IPv6 service hosts come without brackets.
  src.host = "fd00::1";
  src.port = "6443";
  c = LoadInClusterConfig(src);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->host, "fd00::1");
  EXPECT_EQ(c->port, 6443);
}

TEST(KubeConfigTest, InClusterErrorsSayWhatIsMissing) {
  gpulet::testing::ScratchDir dir;
  InClusterSource src;
  absl::Status s = LoadInClusterConfig(src).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("KUBERNETES_SERVICE_HOST"), HasSubstr("--kubeconfig")));
  src.host = "10.96.0.1";
  src.port = "443";
  src.ca_file = dir.Write("ca.crt", kCa);
  src.token_file = dir.path() + "/no-token";
  s = LoadInClusterConfig(src).status();
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr(src.token_file), HasSubstr("automountServiceAccountToken")));
  src.token_file = dir.Write("token", "  \n");
  s = LoadInClusterConfig(src).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("is empty"));
}

std::string Kubeconfig(const std::string& cluster, const std::string& user) {
  return absl::StrCat(R"(apiVersion: v1
kind: Config
current-context: main
contexts:
- name: main
  context: {cluster: c1, user: u1, namespace: ops}
- name: other
  context: {cluster: c1, user: nobody}
clusters:
- name: c1
  cluster:
)",
                      cluster, R"(
users:
- name: u1
  user:
)",
                      user, "\n");
}

TEST(KubeConfigTest, KubeconfigWithTokenAndRelativeCaFile) {
  gpulet::testing::ScratchDir dir;
  dir.Write("kube/pki/ca.crt", kCa);
  const std::string path =
      dir.Write("kube/config", Kubeconfig("    server: https://api.example:6443/k8s/clusters/c-1/\n"
                                          "    certificate-authority: pki/ca.crt\n"
                                          "    tls-server-name: kubernetes",
                                          "    token: abc"));
  absl::StatusOr<KubeConfig> c = LoadKubeconfig(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->host, "api.example");
  EXPECT_EQ(c->port, 6443);
  EXPECT_EQ(c->base_path, "/k8s/clusters/c-1");
  EXPECT_EQ(c->tls_server_name, "kubernetes");
  EXPECT_EQ(c->ca_pem, kCa);
  EXPECT_EQ(c->ca_source, dir.path() + "/kube/pki/ca.crt");
  EXPECT_EQ(c->token, "abc");
  EXPECT_EQ(c->namespace_name, "ops");
  EXPECT_THAT(c->source, HasSubstr(path));
}

TEST(KubeConfigTest, KubeconfigWithDataFieldsAndTokenFile) {
  gpulet::testing::ScratchDir dir;
  const std::string b64 = absl::Base64Escape(kCa);
  dir.Write("tok", "file-token\n");
  const std::string path = dir.Write(
      "config",
      Kubeconfig(absl::StrCat("    server: https://[fd00::2]\n"
                              "    certificate-authority-data: ",
                              b64),
                 absl::StrCat("    token: ignored\n    tokenFile: tok\n"
                              "    client-certificate-data: ",
                              b64, "\n    client-key-data: ", absl::Base64Escape("KEY"))));
  absl::StatusOr<KubeConfig> c = LoadKubeconfig(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->host, "fd00::2");
  EXPECT_EQ(c->port, 443);
  EXPECT_EQ(c->ca_pem, kCa);
  EXPECT_EQ(c->token_file, dir.path() + "/tok");
  EXPECT_TRUE(c->token.empty()) << "tokenFile wins: it can rotate";
  EXPECT_EQ(c->client_cert_pem, kCa);
  EXPECT_EQ(c->client_key_pem, "KEY");
}

TEST(KubeConfigTest, FailsClosedNamingTheFileAndTheKey) {
  gpulet::testing::ScratchDir dir;
  const std::string ca = absl::StrCat("    certificate-authority-data: ", absl::Base64Escape(kCa));
  struct Case {
    std::string cluster;
    std::string user;
    std::vector<std::string> words;
  } cases[] = {
      {absl::StrCat("    server: http://api.example:8080\n", ca),
       "    token: a",
       {"clusters[name=c1].cluster.server", "http://", "https://"}},
      {absl::StrCat("    server: https://api.example\n    insecure-skip-tls-verify: true\n", ca),
       "    token: a",
       {"clusters[name=c1].cluster.insecure-skip-tls-verify", "remove the key"}},
      {"    server: https://api.example",
       "    token: a",
       {"clusters[name=c1].cluster", "neither certificate-authority", "system store"}},
      {absl::StrCat("    server: https://api.example\n", ca),
       "    exec: {command: aws, apiVersion: client.authentication.k8s.io/v1}",
       {"users[name=u1].user.exec", "token, tokenFile or a client certificate"}},
      {absl::StrCat("    server: https://api.example\n", ca),
       absl::StrCat("    client-certificate-data: ", absl::Base64Escape(kCa)),
       {"users[name=u1].user", "without a key"}},
      {absl::StrCat("    server: https://api.example\n", ca),
       "    tokenFile: missing",
       {"users[name=u1].user.tokenFile", dir.path() + "/missing"}},
      {absl::StrCat("    server: https://api.example\n", ca),
       "    username: admin",
       {"users[name=u1].user.username"}},
      {absl::StrCat("    server: https://api.example\n    certificate-authority-data: '@@@'"),
       "    token: a",
       {"certificate-authority-data is not base64"}},
      {absl::StrCat("    server: https://api.example:99999\n", ca), "    token: a", {"a bad port"}},
      {absl::StrCat("    server: https://api.example\n    proxy-url: http://proxy\n", ca),
       "    token: a",
       {"proxy-url"}},
      // yaml-cpp keeps both and a lookup finds the first; kubectl refuses the file.
      {absl::StrCat("    server: https://api.example\n", ca),
       "    token: a\n    token: b",
       {"duplicate key 'users[name=u1].user.token'"}},
      {absl::StrCat("    server: [https://api.example]\n", ca),
       "    token: a",
       {"clusters[name=c1].cluster.server must be a string, not a list"}},
  };
  for (const Case& c : cases) {
    const std::string path = dir.Write("config", Kubeconfig(c.cluster, c.user));
    absl::Status s = LoadKubeconfig(path).status();
    ASSERT_FALSE(s.ok()) << c.cluster << c.user;
    EXPECT_THAT(std::string(s.message()), HasSubstr(path)) << s;
    for (const std::string& w : c.words) {
      EXPECT_THAT(std::string(s.message()), HasSubstr(w)) << s;
    }
  }
}

TEST(KubeConfigTest, ContextsAndBrokenFiles) {
  gpulet::testing::ScratchDir dir;
  const std::string path = dir.Write(
      "config", Kubeconfig(absl::StrCat("    server: https://a\n    certificate-authority-data: ",
                                        absl::Base64Escape(kCa)),
                           "    token: a"));
  absl::Status s = LoadKubeconfig(path, "other").status();
  EXPECT_THAT(std::string(s.message()), AllOf(HasSubstr("no entry named \"nobody\" in users")));
  s = LoadKubeconfig(path, "absent").status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("no entry named \"absent\" in contexts"));
  s = LoadKubeconfig(dir.Write("bad", "clusters: [\n")).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("not valid YAML"));
  s = LoadKubeconfig(dir.Write("nocur", "kind: Config\n")).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("no current-context"));
  s = LoadKubeconfig(dir.path() + "/absent").status();
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
}

}  // namespace
}  // namespace gpulet::kube
