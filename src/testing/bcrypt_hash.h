// BcryptHash: a bcrypt hash made by libxcrypt's crypt(3), an implementation apart from the
// one gpulet checks with (Nettle's, http/basic_auth.h). Header-only: a test that includes it
// links libcrypt (tests/CMakeLists.txt).
//
// Thread-safety: a pure function (crypt_r with its own state).
#ifndef GPULET_TESTING_BCRYPT_HASH_H_
#define GPULET_TESTING_BCRYPT_HASH_H_

#include <crypt.h>

#include <string>

#include "gtest/gtest.h"

namespace gpulet::testing {

// `password` hashed as "$2b$" with `cost` (4 to 31) and a random salt.
inline std::string BcryptHash(const std::string& password, int cost) {
  char salt[64];
  EXPECT_NE(crypt_gensalt_rn("$2b$", cost, nullptr, 0, salt, sizeof(salt)), nullptr);
  struct crypt_data data {};
  return crypt_r(password.c_str(), salt, &data);
}

}  // namespace gpulet::testing

#endif  // GPULET_TESTING_BCRYPT_HASH_H_
