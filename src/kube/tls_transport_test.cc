// The API server certificate's name check (CertificateNamesHost): client-go's rules, which
// are Go crypto/x509's VerifyHostname. The handshake itself is tested against the stand-in
// API server (kube_apiserver_test.cc).
#include "kube/tls_transport.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace gpulet::kube {
namespace {

const std::string kLoopback4("\x7f\x00\x00\x01", 4);
const std::string kLoopback6 = std::string(15, '\0') + "\x01";
// 10.96.0.1 as an IPv4-mapped IPv6 address.
const std::string kMapped("\0\0\0\0\0\0\0\0\0\0\xff\xff\x0a\x60\x00\x01", 16);

TEST(CertificateNamesHostTest, DnsNamesMatchWholeLabelsCaseInsensitively) {
  const std::vector<std::string> dns = {"kubernetes.default.svc", "API.Example.com."};
  EXPECT_TRUE(CertificateNamesHost(dns, {}, "kubernetes.default.svc"));
  EXPECT_TRUE(CertificateNamesHost(dns, {}, "KUBERNETES.default.svc."));
  EXPECT_TRUE(CertificateNamesHost(dns, {}, "api.example.com"));
  EXPECT_FALSE(CertificateNamesHost(dns, {}, "kubernetes.default"));
  EXPECT_FALSE(CertificateNamesHost(dns, {}, "evil.kubernetes.default.svc"));
  EXPECT_FALSE(CertificateNamesHost(dns, {}, "default.svc"));
  EXPECT_FALSE(CertificateNamesHost({}, {}, "kubernetes"));
}

TEST(CertificateNamesHostTest, AWildcardIsOneWholeLeftmostLabel) {
  const std::vector<std::string> dns = {"*.hcp.eastus.azmk8s.io"};
  EXPECT_TRUE(CertificateNamesHost(dns, {}, "gpu-abc123.hcp.eastus.azmk8s.io"));
  EXPECT_FALSE(CertificateNamesHost(dns, {}, "hcp.eastus.azmk8s.io"));
  EXPECT_FALSE(CertificateNamesHost(dns, {}, "a.b.hcp.eastus.azmk8s.io"));
  EXPECT_FALSE(CertificateNamesHost(dns, {}, ".hcp.eastus.azmk8s.io"));
  // Partial-label and inner wildcards never match (GnuTLS's own check would take f*).
  EXPECT_FALSE(CertificateNamesHost({"f*.example.com"}, {}, "foo.example.com"));
  EXPECT_FALSE(CertificateNamesHost({"*oo.example.com"}, {}, "foo.example.com"));
  EXPECT_FALSE(CertificateNamesHost({"api.*.com"}, {}, "api.example.com"));
  EXPECT_FALSE(CertificateNamesHost({"*.*.com"}, {}, "a.example.com"));
  EXPECT_FALSE(CertificateNamesHost({"*."}, {}, "a."));
}

TEST(CertificateNamesHostTest, IpLiteralsMatchIpSansOnly) {
  EXPECT_TRUE(CertificateNamesHost({}, {kLoopback4}, "127.0.0.1"));
  EXPECT_FALSE(CertificateNamesHost({}, {kLoopback4}, "127.0.0.2"));
  // An IP written as a DNS SAN does not count, as in Go.
  EXPECT_FALSE(CertificateNamesHost({"127.0.0.1"}, {}, "127.0.0.1"));
  EXPECT_TRUE(CertificateNamesHost({}, {kLoopback6}, "::1"));
  EXPECT_TRUE(CertificateNamesHost({}, {kLoopback6}, "[::1]"));
  EXPECT_FALSE(CertificateNamesHost({}, {kLoopback4}, "::1"));
  // IPv4 and its IPv4-mapped IPv6 form are the same address (Go's net.IP.Equal).
  EXPECT_TRUE(CertificateNamesHost({}, {kMapped}, "10.96.0.1"));
  EXPECT_TRUE(CertificateNamesHost({}, {std::string("\x0a\x60\x00\x01", 4)}, "::ffff:10.96.0.1"));
  // A SAN of a length no address has matches nothing.
  EXPECT_FALSE(CertificateNamesHost({}, {std::string("\x7f\x00\x00", 3)}, "127.0.0.0"));
}

}  // namespace
}  // namespace gpulet::kube
