#include "config/config.h"

#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpulet {
namespace {

using ::testing::HasSubstr;

std::string ReadmeConfigExample() {
  std::ifstream in(std::string(GPULET_SOURCE_DIR) + "/README.md");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  size_t start = text.find("```yaml\nversion: v1\n");
  if (start == std::string::npos) return "";
  start += 8;
  return text.substr(start, text.find("```", start) - start);
}

// The README's configuration block is a valid file that shows every key with its default.
TEST(ConfigDocsTest, ReadmeExampleIsValidAndComplete) {
  std::string example = ReadmeConfigExample();
  ASSERT_FALSE(example.empty());
  absl::StatusOr<Config> parsed = ParseConfig(example, "README.md", {});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(ConfigToYaml(*parsed), ConfigToYaml(Config()));
  for (const std::string& key : ConfigKeys()) {
    std::string leaf = key.substr(key.rfind('.') + 1);
    EXPECT_THAT(example, HasSubstr(leaf + ":")) << key << " is not in the README example";
  }
}

TEST(ConfigTest, CdiAndLabelsKeys) {
  Config defaults;
  EXPECT_EQ(defaults.plugin.cdi_kind, "gpulet.dev/gpu");  // never nvidia.com/gpu's node spec
  EXPECT_EQ(defaults.cdi.spec_dir, "/var/run/cdi");
  absl::StatusOr<Config> c = ParseConfig(
      "version: v1\ncdi:\n  specDir: /run/cdi\n  hookPath: /usr/local/bin/nvidia-cdi-hook\n"
      "labels:\n  featuresFile: \"\"\n",
      "test", {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->cdi.spec_dir, "/run/cdi");
  EXPECT_EQ(c->cdi.hook_path, "/usr/local/bin/nvidia-cdi-hook");
  EXPECT_EQ(c->labels.features_file, "");
  // Empty disables the spec; relative paths are refused with the key and the fix.
  c = ParseConfig("version: v1\n", "test", {{"cdi.specDir", ""}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->cdi.spec_dir, "");
  for (const char* key : {"cdi.specDir", "cdi.driverRoot", "cdi.devRoot", "cdi.hookPath"}) {
    c = ParseConfig("version: v1\n", "test", {{key, "relative/dir"}});
    ASSERT_FALSE(c.ok()) << key;
    EXPECT_THAT(std::string(c.status().message()), HasSubstr(key));
    EXPECT_THAT(std::string(c.status().message()), HasSubstr("'relative/dir'"));
  }
  c = ParseConfig("version: v1\n", "test", {{"labels.featuresFile", "/etc/features.d/"}});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("labels.featuresFile"));
}

}  // namespace
}  // namespace gpulet
