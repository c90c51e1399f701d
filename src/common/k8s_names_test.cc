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

TEST(K8sNamesTest, QualifiedNamesAreLabelAndTaintKeys) {
  for (const char* ok : {"gpu", "nvidia.com/gpu.present", "node-role.kubernetes.io/control-plane",
                         "A_b.c-9", "x/y"}) {
    EXPECT_TRUE(IsQualifiedName(ok)) << ok;
  }
  for (const std::string& bad :
       {std::string(), std::string("/gpu"), std::string("Example.com/gpu"), std::string("a/"),
        std::string("a/b/c"), std::string("-gpu"), std::string("gpu."), std::string("g pu"),
        std::string("gpu\x0b"), std::string(64, 'a'), std::string(254, 'a') + "/gpu",
        std::string("kversion: v1alpha1")}) {
    EXPECT_FALSE(IsQualifiedName(bad)) << bad;
  }
  EXPECT_TRUE(IsQualifiedName(std::string(63, 'a')));
}

}  // namespace
}  // namespace gpulet
