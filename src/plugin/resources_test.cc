#include "plugin/resources.h"

#include "gtest/gtest.h"

namespace gpulet {
namespace {

TEST(CdiAnnotationKeyTest, EachAnswerHasItsOwnValidKey) {
  const std::string whole = CdiAnnotationKey("cdi.k8s.io/", "nvidia.com/gpu", {"GPU-a"});
  const std::string memory =
      CdiAnnotationKey("cdi.k8s.io/", "nvidia.com/gpu-memory", {"GPU-a::mem0", "GPU-a::mem1"});
  // A container holding both resources gets two answers; the kubelet drops an annotation
  // whose key it already has, so the keys must differ.
  EXPECT_NE(whole, memory);
  EXPECT_NE(whole, CdiAnnotationKey("cdi.k8s.io/", "nvidia.com/gpu", {"GPU-b"}));
  // Stable: the same answer always has the same key.
  EXPECT_EQ(whole, CdiAnnotationKey("cdi.k8s.io/", "nvidia.com/gpu", {"GPU-a"}));
  for (const std::string& key : {whole, memory}) {
    ASSERT_EQ(key.rfind("cdi.k8s.io/gpulet_", 0), 0u) << key;
    std::string name = key.substr(std::string("cdi.k8s.io/").size());
    EXPECT_LE(name.size(), 63u) << key;  // a qualified name's name part
    for (char c : name) {
      EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')
          << key;
    }
  }
  // A long resource name is cut, not allowed past the limit.
  std::string long_key = CdiAnnotationKey(
      "cdi.k8s.io/", "example.com/a-very-long-resource-name-that-goes-on-and-on-and-on", {"x"});
  EXPECT_LE(long_key.size() - std::string("cdi.k8s.io/").size(), 63u);
}

}  // namespace
}  // namespace gpulet
