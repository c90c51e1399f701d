#include "common/k8s_names.h"

#include <string>

#include "gtest/gtest.h"

namespace gpulet {
namespace {

TEST(K8sNamesTest, DnsSubdomainsAreAccepted) {
  EXPECT_TRUE(IsDnsSubdomain("gpu.gpulet.dev"));
  EXPECT_TRUE(IsDnsSubdomain("a-1.b"));
  EXPECT_TRUE(IsDnsSubdomain("node-a-gpu.gpulet.dev-0"));
  EXPECT_TRUE(IsDnsSubdomain(std::string(63, 'a'), 63));
}

TEST(K8sNamesTest, EverythingElseIsRefused) {
  for (const char* bad :
       {"", "Gpu.dev", "-a.b", "a-.b", "a..b", ".a", "a.", "a/b", "a_b", "../x", "a b"}) {
    EXPECT_FALSE(IsDnsSubdomain(bad)) << bad;
  }
  EXPECT_FALSE(IsDnsSubdomain(std::string(64, 'a'), 63));
  EXPECT_FALSE(IsDnsSubdomain(std::string(254, 'a')));
}

}  // namespace
}  // namespace gpulet
