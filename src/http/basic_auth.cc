#include "http/basic_auth.h"

#include <nettle/blowfish.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gpulet::http {

namespace {

// bcrypt's default cost, used for the dummy hash when no configured hash is bcrypt.
constexpr int kDefaultBcryptCost = 10;

// The cost of a bcrypt hash ("$2a$", "$2b$", "$2x$" or "$2y$" then two digits), or -1.
int BcryptCost(const std::string& hash) {
  if (hash.size() < 7 || hash[0] != '$' || hash[1] != '2' || hash[3] != '$' || hash[6] != '$') {
    return -1;
  }
  int cost = 0;
  if (!absl::SimpleAtoi(hash.substr(4, 2), &cost) || cost < 4 || cost > 31) return -1;
  return cost;
}

// Compares without an early exit: the time depends on the lengths only.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}
}  // namespace

bool CheckPassword(const std::string& password, const std::string& hash) {
  // Nettle's bcrypt (crypt_blowfish's algorithm, as libxcrypt's crypt(3) has it, which the
  // tests hash with): the rounds and salt come from `hash`, and the result is compared here
  // in constant time rather than by blowfish_bcrypt_verify's strcmp.
  uint8_t out[BLOWFISH_BCRYPT_HASH_SIZE] = {};
  if (blowfish_bcrypt_hash(out, password.size(), reinterpret_cast<const uint8_t*>(password.data()),
                           hash.size(), reinterpret_cast<const uint8_t*>(hash.data()), -1,
                           nullptr) != 1) {
    return false;
  }
  return ConstantTimeEquals(reinterpret_cast<const char*>(out), hash);
}

BasicAuth::BasicAuth(std::map<std::string, std::string> users, CheckFn check)
    : users_(std::move(users)), check_(std::move(check)) {
  int cost = -1;
  for (const auto& [user, hash] : users_) cost = std::max(cost, BcryptCost(hash));
  if (cost < 0) cost = kDefaultBcryptCost;
  // A full bcrypt setting with a fixed all-zero salt: bcrypt does the whole cost's work,
  // and its output never equals the setting, so the check fails.
  dummy_hash_ = absl::StrCat("$2b$", cost < 10 ? "0" : "", cost, "$", std::string(22, '.'));
}

bool BasicAuth::Authorize(absl::string_view authorization) const {
  if (!absl::StartsWith(authorization, "Basic ")) return false;
  std::string decoded;
  if (!absl::Base64Unescape(authorization.substr(6), &decoded)) return false;
  size_t c = decoded.find(':');
  if (c == std::string::npos) return false;
  absl::string_view user = absl::string_view(decoded).substr(0, c);
  // Every configured name is compared, whether or not an earlier one matched.
  const std::string* hash = &dummy_hash_;
  bool known = false;
  for (const auto& [name, user_hash] : users_) {
    bool match = ConstantTimeEquals(name, user);
    hash = match ? &user_hash : hash;
    known = known || match;
  }
  bool password_ok = check_(decoded.substr(c + 1), *hash);
  return known && password_ok;
}

}  // namespace gpulet::http
