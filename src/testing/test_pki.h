// Test PKI: a certificate authority and certificates it signs, made with the OpenSSL API at
// test time (EC P-256, valid from an hour ago for a day), so that no key material lives in
// the repository and every run has fresh keys. For the stand-in API server
// (testing/fake_apiserver.h) and the TLS tests: a server certificate with IP and DNS
// subject alternative names, a client certificate, and a second, unrelated CA to show that
// verification fails against it.
//
// Thread-safety: the functions are pure; a TestCert is a plain value.
#ifndef GPULET_TESTING_TEST_PKI_H_
#define GPULET_TESTING_TEST_PKI_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gpulet::testing {

struct TestCert {
  std::string cert_pem;
  std::string key_pem;  // unencrypted PKCS#8
};

// A self-signed CA certificate named `common_name`.
absl::StatusOr<TestCert> MakeTestCa(const std::string& common_name);

// A certificate signed by `ca` for `common_name`, with the given subject alternative names
// ("127.0.0.1" as an IP SAN, "localhost" as a DNS SAN) and extended key usage serverAuth
// (client = false) or clientAuth (client = true).
absl::StatusOr<TestCert> MakeTestCert(const TestCert& ca, const std::string& common_name,
                                      const std::vector<std::string>& ip_sans,
                                      const std::vector<std::string>& dns_sans, bool client);

}  // namespace gpulet::testing

#endif  // GPULET_TESTING_TEST_PKI_H_
