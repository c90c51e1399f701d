// HTTP basic auth against bcrypt hashes, as a Prometheus web-config file's basic_auth_users
// configure it (http/web_config.h).
//
// Thread-safety: CheckPassword is a pure function; a BasicAuth is immutable after
// construction, and Authorize may run on any number of threads.
#ifndef GPULET_HTTP_BASIC_AUTH_H_
#define GPULET_HTTP_BASIC_AUTH_H_

#include <functional>
#include <map>
#include <string>

#include "absl/strings/string_view.h"

namespace gpulet::http {

// Checks a password against a bcrypt hash ($2a$, $2b$, $2x$ or $2y$; anything else is a
// mismatch), comparing in constant time.
bool CheckPassword(const std::string& password, const std::string& hash);

// BasicAuth: decides an HTTP "Authorization: Basic ..." header against the web config's
// basic_auth_users, in time that does not depend on whether the user exists. User names are
// compared without early exit, and an unknown user's password is checked against a fixed
// dummy bcrypt hash of the highest cost among the configured users, so an unknown user costs
// the same hash work as a known user with a wrong password (and is still refused).
class BasicAuth {
 public:
  // Checks a password against a hash; CheckPassword unless a test injects another.
  using CheckFn = std::function<bool(const std::string& password, const std::string& hash)>;

  explicit BasicAuth(std::map<std::string, std::string> users, CheckFn check = CheckPassword);

  // True when `authorization` is "Basic <base64 user:password>" for a configured user whose
  // hash the password matches. Every header that names a user runs the check exactly once.
  bool Authorize(absl::string_view authorization) const;

  // Whether any user is configured (no users: nothing to check).
  bool enabled() const { return !users_.empty(); }

  // The bcrypt setting ("$2b$<cost>$<salt>") an unknown user's password is checked against.
  const std::string& dummy_hash() const { return dummy_hash_; }

 private:
  std::map<std::string, std::string> users_;
  CheckFn check_;
  std::string dummy_hash_;
};

}  // namespace gpulet::http

#endif  // GPULET_HTTP_BASIC_AUTH_H_
