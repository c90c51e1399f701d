// The web-config loader fails closed: every broken kind of file is an error naming the file,
// the key and the fix, never a server with less TLS or auth than the file asks for.
#include "http/web_config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/files.h"

namespace gpulet::http {
namespace {

using ::testing::HasSubstr;

constexpr char kHash[] = "$2y$10$N9qo8uLOickgx2ZMRZoMyeIjZAgcfl7p92ldGxad68LJZdL17lhWy";

TEST(WebConfigParseTest, AcceptsTlsUsersAndHttp2) {
  absl::StatusOr<WebConfig> web =
      ParseWebConfig(std::string("tls_server_config:\n  cert_file: /c.pem\n  key_file: /k.pem\n"
                                 "basic_auth_users:\n  prom: '") +
                         kHash + "'\nhttp_server_config:\n  http2: false\n",
                     "web.yml");
  ASSERT_TRUE(web.ok()) << web.status();
  EXPECT_EQ(web->cert_file, "/c.pem");
  EXPECT_EQ(web->key_file, "/k.pem");
  EXPECT_EQ(web->users.at("prom"), kHash);
}

TEST(WebConfigParseTest, EveryBrokenKindIsAnError) {
  const std::string users = std::string("basic_auth_users:\n  prom: '") + kHash + "'\n";
  struct Case {
    const char* what;
    std::string yaml;
    std::vector<std::string> message_has;
  };
  const Case kCases[] = {
      {"garbage", "\x01\xff{{[[: :", {"web config web.yml"}},
      {"not YAML", "tls_server_config: [\n", {"web.yml:", "not valid YAML"}},
      {"empty file", "", {"not empty", "metrics.webConfigFile to \"\""}},
      {"a list", "- a\n- b\n", {"must be a mapping", "not a list"}},
      {"a scalar", "hello\n", {"must be a mapping", "not a single value"}},
      {"unknown key", "tls_config:\n  cert_file: /c\n", {"web.yml:1", "unknown key 'tls_config'"}},
      {"duplicate key", users + users, {"web.yml:3", "duplicate key"}},
      {"duplicate user",
       users + "  prom: '" + kHash + "'\n",
       {"duplicate key 'basic_auth_users.prom'"}},
      {"cert without key", "tls_server_config:\n  cert_file: /c.pem\n", {"key_file is missing"}},
      {"key without cert", "tls_server_config:\n  key_file: /k.pem\n", {"cert_file is missing"}},
      {"empty tls section", "tls_server_config:\n", {"tls_server_config must be a mapping"}},
      {"empty tls mapping", "tls_server_config: {}\n", {"not an empty one"}},
      {"tls as a list",
       "tls_server_config: [/c.pem, /k.pem]\n",
       {"tls_server_config must be a mapping", "not a list"}},
      {"cert as a list",
       "tls_server_config:\n  cert_file: [/c.pem]\n  key_file: /k.pem\n",
       {"tls_server_config.cert_file must be a non-empty string, not a list"}},
      {"cert as a mapping",
       "tls_server_config:\n  cert_file: {a: b}\n  key_file: /k.pem\n",
       {"tls_server_config.cert_file must be a non-empty string, not a mapping"}},
      {"empty cert",
       "tls_server_config:\n  cert_file: ''\n  key_file: /k.pem\n",
       {"tls_server_config.cert_file must be a non-empty string"}},
      {"unsupported TLS option",
       "tls_server_config:\n  cert_file: /c\n  key_file: /k\n  client_auth_type: "
       "RequireAndVerifyClientCert\n",
       {"tls_server_config.client_auth_type is not supported"}},
      {"users as a list", "basic_auth_users: [prom]\n", {"basic_auth_users must be a mapping"}},
      {"empty users", "basic_auth_users: {}\n", {"basic_auth_users must be a mapping"}},
      {"plain password",
       "basic_auth_users:\n  prom: s3cret\n",
       {"basic_auth_users.prom", "bcrypt"}},
      {"md5 crypt hash",
       "basic_auth_users:\n  prom: '$1$abc$0123456789012345678901'\n",
       {"is not a bcrypt hash"}},
      {"short bcrypt", "basic_auth_users:\n  prom: '$2b$10$abc'\n", {"is not a bcrypt hash"}},
      {"bad cost",
       std::string("basic_auth_users:\n  prom: '$2b$99$") + (kHash + 7) + "'\n",
       {"is not a bcrypt hash"}},
      {"hash as a list",
       std::string("basic_auth_users:\n  prom: ['") + kHash + "']\n",
       {"basic_auth_users.prom must be a non-empty string, not a list"}},
      {"user with a colon",
       std::string("basic_auth_users:\n  'a:b': '") + kHash + "'\n",
       {"user name 'a:b'"}},
      {"headers are not honoured",
       users + "http_server_config:\n  headers:\n    Strict-Transport-Security: max-age=1\n",
       {"http_server_config.headers is not supported"}},
      {"http2 not a bool", users + "http_server_config:\n  http2: [x]\n", {"http2 must be true"}},
      {"only http_server_config",
       "http_server_config:\n  http2: true\n",
       {"sets neither tls_server_config nor basic_auth_users"}},
  };
  for (const Case& c : kCases) {
    absl::StatusOr<WebConfig> web = ParseWebConfig(c.yaml, "web.yml");
    ASSERT_FALSE(web.ok()) << c.what;
    EXPECT_EQ(web.status().code(), absl::StatusCode::kInvalidArgument) << c.what;
    for (const std::string& part : c.message_has) {
      EXPECT_THAT(std::string(web.status().message()), HasSubstr(part))
          << c.what << ": " << web.status();
    }
  }
}

TEST(WebConfigParseTest, IsBcryptHash) {
  EXPECT_TRUE(IsBcryptHash(kHash));
  std::string h = kHash;
  for (char v : {'a', 'b', 'y'}) {
    h[2] = v;
    EXPECT_TRUE(IsBcryptHash(h)) << h;
  }
  for (char v : {'x', '1'}) {
    h[2] = v;
    EXPECT_FALSE(IsBcryptHash(h)) << h;
  }
  EXPECT_FALSE(IsBcryptHash(""));
  EXPECT_FALSE(IsBcryptHash(std::string(kHash) + "x"));
  std::string bad_char = kHash;
  bad_char[20] = '!';
  EXPECT_FALSE(IsBcryptHash(bad_char));
}

class WebConfigFileTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = dir_.path() + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  std::string Tls(const std::string& cert, const std::string& key) {
    return Write("web-" + std::to_string(++files_) + ".yml",
                 "tls_server_config:\n  cert_file: " + cert + "\n  key_file: " + key + "\n");
  }
  gpulet::testing::ScratchDir dir_;
  int files_ = 0;
};

TEST_F(WebConfigFileTest, ChecksTheFileAndTheCertAndKey) {
  EXPECT_TRUE(LoadWebConfig("").ok());  // no file: no TLS, no auth
  const std::string cert = Write("cert.pem", "-----BEGIN CERTIFICATE-----\nMII\n");
  const std::string key = Write("key.pem", "-----BEGIN PRIVATE KEY-----\nMII\n");
  absl::StatusOr<WebConfig> web = LoadWebConfig(Tls(cert, key));
  ASSERT_TRUE(web.ok()) << web.status();
  EXPECT_EQ(web->cert_file, cert);

  std::filesystem::create_directory(dir_.path() + "/adir");
  ASSERT_EQ(mkfifo((dir_.path() + "/fifo").c_str(), 0600), 0);
  struct Case {
    std::string path;
    std::string message_has;
  };
  const Case kCases[] = {
      {dir_.path() + "/missing.yml", "does not exist"},
      {dir_.path() + "/adir", "is a directory"},
      {dir_.path() + "/fifo", "is a FIFO"},
      {"/dev/zero", "is a character device"},
      {Write("huge.yml", std::string((1 << 20) + 1, '#')), "more than the limit"},
      {Tls(dir_.path() + "/nocert.pem", key), "tls_server_config.cert_file"},
      {Tls(cert, dir_.path() + "/nokey.pem"), "tls_server_config.key_file"},
      {Tls(dir_.path() + "/adir", key), "is a directory"},
      {Tls(Write("junk.pem", "not a certificate"), key), "is not a PEM file"},
      {Tls(cert, cert), "tls_server_config.key_file"},
  };
  for (const Case& c : kCases) {
    absl::StatusOr<WebConfig> got = LoadWebConfig(c.path);
    ASSERT_FALSE(got.ok()) << c.path;
    EXPECT_THAT(std::string(got.status().message()), HasSubstr(c.message_has))
        << c.path << ": " << got.status();
  }
}

// Relative cert and key paths are relative to the web-config file, wherever gpulet runs.
TEST_F(WebConfigFileTest, RelativeCertAndKeyAreBesideTheFile) {
  std::filesystem::create_directory(dir_.path() + "/tls");
  Write("tls/cert.pem", "-----BEGIN CERTIFICATE-----\nMII\n");
  Write("tls/key.pem", "-----BEGIN PRIVATE KEY-----\nMII\n");
  const std::string web_path = Tls("tls/cert.pem", "./tls/key.pem");
  const std::filesystem::path cwd = std::filesystem::current_path();
  std::filesystem::current_path("/");
  absl::StatusOr<WebConfig> web = LoadWebConfig(web_path);
  std::filesystem::current_path(cwd);
  ASSERT_TRUE(web.ok()) << web.status();
  EXPECT_EQ(web->cert_file, dir_.path() + "/tls/cert.pem");
  EXPECT_EQ(web->key_file, dir_.path() + "/tls/key.pem");
  // A relative path that is not there is named as gpulet looked for it.
  absl::StatusOr<WebConfig> missing = LoadWebConfig(Tls("nocert.pem", "tls/key.pem"));
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr(dir_.path() + "/nocert.pem"));
}

}  // namespace
}  // namespace gpulet::http
