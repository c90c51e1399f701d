#include "http/basic_auth.h"

#include <crypt.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "testing/bcrypt_hash.h"

namespace gpulet::http {
namespace {

using testing::BcryptHash;

std::string BasicHeader(const std::string& user, const std::string& password) {
  return "Basic " + absl::Base64Escape(user + ":" + password);
}

// gpulet checks with Nettle's bcrypt; libxcrypt's crypt(3) makes the hashes here, so the two
// implementations must agree on every prefix a web config may hold (htpasswd -B writes $2y$,
// Go's bcrypt $2a$), on 8-bit and over-long passwords, and refuse what is not bcrypt.
TEST(CheckPasswordTest, AgreesWithCryptForEveryBcryptPrefix) {
  const std::string long_password(100, 'p');  // bcrypt reads the first 72 bytes
  for (const char* prefix : {"$2a$", "$2b$", "$2y$"}) {
    for (const std::string& password :
         std::vector<std::string>{"s3cret", "p\xc3\xa4ss w\xc3\xb6rd", long_password}) {
      char salt[64];
      ASSERT_NE(crypt_gensalt_rn(prefix, 4, nullptr, 0, salt, sizeof(salt)), nullptr);
      struct crypt_data data {};
      const std::string hash = crypt_r(password.c_str(), salt, &data);
      EXPECT_TRUE(CheckPassword(password, hash)) << prefix << " " << password;
      EXPECT_FALSE(CheckPassword(password.substr(0, 5), hash)) << prefix << " " << password;
      // A corrupted hash (last character changed) never matches.
      std::string bad = hash;
      bad.back() = bad.back() == 'a' ? 'b' : 'a';
      EXPECT_FALSE(CheckPassword(password, bad)) << prefix;
    }
  }
  // bcrypt keys are 72 bytes: a longer password matches its first 72, as crypt(3) has it.
  char salt[64];
  ASSERT_NE(crypt_gensalt_rn("$2b$", 4, nullptr, 0, salt, sizeof(salt)), nullptr);
  struct crypt_data data {};
  const std::string hash = crypt_r(long_password.c_str(), salt, &data);
  EXPECT_TRUE(CheckPassword(long_password.substr(0, 72) + "tail", hash));
  // Not bcrypt: a SHA-512 crypt hash of the right password, a setting without its hash, junk.
  ASSERT_NE(crypt_gensalt_rn("$6$", 5000, nullptr, 0, salt, sizeof(salt)), nullptr);
  const std::string sha512 = crypt_r("s3cret", salt, &data);
  EXPECT_FALSE(CheckPassword("s3cret", sha512));
  EXPECT_FALSE(CheckPassword("s3cret", "$2b$04$abcdefghijklmnopqrstuu"));
  EXPECT_FALSE(
      CheckPassword("s3cret", "$2b$99$abcdefghijklmnopqrstuu1qdcFaS0PtqFUPzaCxLQ8/0lspH0ZEW"));
  EXPECT_FALSE(CheckPassword("s3cret", ""));
  EXPECT_FALSE(CheckPassword("", "*0"));
}

TEST(BasicAuthTest, UnknownUserRunsTheCheckOnADummyHashOfTheHighestCost) {
  std::vector<std::pair<std::string, std::string>> calls;
  BasicAuth auth({{"alice", "$2b$05$aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"},
                  {"bob", "$2y$12$bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"}},
                 [&](const std::string& password, const std::string& hash) {
                   calls.emplace_back(password, hash);
                   return password == "right";
                 });
  EXPECT_TRUE(absl::StartsWith(auth.dummy_hash(), "$2b$12$")) << auth.dummy_hash();

  // Unknown user, even with the password that would pass: one check, on the dummy hash.
  EXPECT_FALSE(auth.Authorize(BasicHeader("mallory", "right")));
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].second, auth.dummy_hash());
  // A prefix of a configured name is not that name.
  calls.clear();
  EXPECT_FALSE(auth.Authorize(BasicHeader("ali", "right")));
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].second, auth.dummy_hash());
  // Known user, wrong password: one check, on the user's hash.
  calls.clear();
  EXPECT_FALSE(auth.Authorize(BasicHeader("alice", "wrong")));
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_TRUE(absl::StartsWith(calls[0].second, "$2b$05$a"));
  // Known user, right password.
  calls.clear();
  EXPECT_TRUE(auth.Authorize(BasicHeader("bob", "right")));
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_TRUE(absl::StartsWith(calls[0].second, "$2y$12$b"));
  // Malformed headers are refused.
  EXPECT_FALSE(auth.Authorize(""));
  EXPECT_FALSE(auth.Authorize("Bearer x"));
  EXPECT_FALSE(auth.Authorize("Basic !!!"));
  EXPECT_FALSE(auth.Authorize("Basic " + absl::Base64Escape("alice")));  // no ':'
}

TEST(BasicAuthTest, DummyHashIsRealBcryptWorkAndNeverMatches) {
  BasicAuth auth({{"prom", "$2b$04$" + std::string(53, 'x')}});
  EXPECT_EQ(auth.dummy_hash(), "$2b$04$" + std::string(22, '.'));
  struct crypt_data data {};
  const char* out = crypt_r("anything", auth.dummy_hash().c_str(), &data);
  ASSERT_NE(out, nullptr);
  EXPECT_NE(out[0], '*') << "crypt(3) refused the dummy setting";
  EXPECT_TRUE(absl::StartsWith(out, auth.dummy_hash()));
  EXPECT_EQ(std::strlen(out), 60u);
  EXPECT_FALSE(CheckPassword("anything", auth.dummy_hash()));
  EXPECT_FALSE(CheckPassword("", auth.dummy_hash()));
}

TEST(BasicAuthTest, UnknownUserTakesAsLongAsWrongPassword) {
  BasicAuth auth({{"prom", BcryptHash("s3cret", 10)}});
  auto time_one = [&](const std::string& user) {
    auto start = std::chrono::steady_clock::now();
    EXPECT_FALSE(auth.Authorize(BasicHeader(user, "wrong")));
    return std::chrono::steady_clock::now() - start;
  };
  std::vector<std::chrono::steady_clock::duration> unknown, wrong;
  for (int i = 0; i < 10; ++i) {  // interleaved, so load on the machine hits both alike
    unknown.push_back(time_one("nobody"));
    wrong.push_back(time_one("prom"));
  }
  std::sort(unknown.begin(), unknown.end());
  std::sort(wrong.begin(), wrong.end());
  auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  EXPECT_GE(ms(unknown[5]), ms(wrong[5]) / 2)
      << "unknown user " << ms(unknown[5]) << " ms, wrong password " << ms(wrong[5]) << " ms";
}

}  // namespace
}  // namespace gpulet::http
