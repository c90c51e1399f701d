#include "deploy/manifests_yaml.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpulet::deploy {
namespace {

using ::testing::HasSubstr;

TEST(ManifestsYamlSplitTest, KeepsTextAndLinesAndDropsEmptyDocuments) {
  const char* text =
      "# leading comment\n"
      "a: 1\n"
      "---\n"
      "# only a comment\n"
      "---\n"
      "# doc b\n"
      "b: \"two\"\n";
  absl::StatusOr<std::vector<YamlDocument>> docs = SplitYamlDocuments(text, "f.yaml");
  ASSERT_TRUE(docs.ok()) << docs.status();
  ASSERT_EQ(docs->size(), 2u);
  EXPECT_EQ((*docs)[0].text, "# leading comment\na: 1\n");
  EXPECT_EQ((*docs)[0].first_line, 1);
  EXPECT_EQ((*docs)[1].text, "# doc b\nb: \"two\"\n");
  EXPECT_EQ((*docs)[1].first_line, 6);
  EXPECT_EQ((*docs)[1].node["b"].Scalar(), "two");
}

TEST(ManifestsYamlSplitTest, ErrorNamesFileAndLine) {
  absl::StatusOr<std::vector<YamlDocument>> docs =
      SplitYamlDocuments("a: 1\n---\nb: [1, 2\nc: 3\n", "deploy/x.yaml");
  ASSERT_FALSE(docs.ok());
  EXPECT_THAT(std::string(docs.status().message()), HasSubstr("deploy/x.yaml:"));
}

// kubectl and talosctl refuse a field given twice; yaml-cpp would keep the first silently.
TEST(ManifestsYamlSplitTest, AFieldGivenTwiceNamesTheFileLineAndPath) {
  absl::StatusOr<std::vector<YamlDocument>> docs = SplitYamlDocuments(
      "a: 1\n---\nmachine:\n  kernel:\n    modules: []\n    modules: [x]\n", "patch.yaml");
  ASSERT_FALSE(docs.ok());
  EXPECT_THAT(std::string(docs.status().message()),
              HasSubstr("patch.yaml:6: duplicate key 'machine.kernel.modules'"));
}

TEST(ManifestsYamlEmitTest, QuotedScalarsStayStrings) {
  YAML::Node n =
      YAML::Load("labels:\n  present: \"true\"\n  count: 2\nvalue: \"-1\"\nplain: yes-it-is\n");
  std::string out = EmitYaml(n);
  EXPECT_THAT(out, HasSubstr("present: \"true\"\n"));
  EXPECT_THAT(out, HasSubstr("count: 2\n"));
  EXPECT_THAT(out, HasSubstr("value: \"-1\"\n"));
  EXPECT_THAT(out, HasSubstr("plain: yes-it-is\n"));
  EXPECT_TRUE(YamlEqual(YAML::Load(out), n));
  EXPECT_EQ(YAML::Load(out)["labels"]["present"].Tag(), "!");
}

TEST(ManifestsYamlEmitTest, RoundTripsNestedStructuresAndBlocks) {
  const char* text =
      "spec:\n"
      "  containers:\n"
      "    - name: a\n"
      "      args: [serve, --x=1]\n"
      "      env:\n"
      "        - {name: K, value: \"v: w\"}\n"
      "  empty: {}\n"
      "  none: []\n"
      "  matrix:\n"
      "    - - 1\n"
      "      - 2\n"
      "data:\n"
      "  config.yaml: |\n"
      "    version: v1\n"
      "    # a comment inside the block\n"
      "    resourceName: nvidia.com/gpu\n"
      "  key#hash: \"a # b\"\n";
  YAML::Node n = YAML::Load(text);
  std::string out = EmitYaml(n);
  YAML::Node back = YAML::Load(out);
  EXPECT_TRUE(YamlEqual(back, n)) << out;
  EXPECT_THAT(out, HasSubstr("config.yaml: |\n    version: v1\n    # a comment inside"));
  EXPECT_EQ(back["data"]["config.yaml"].Scalar(),
            "version: v1\n# a comment inside the block\nresourceName: nvidia.com/gpu\n");
}

TEST(ManifestsYamlEmitTest, QuotedScalarHelper) {
  YAML::Node n;
  n["v"] = QuotedScalar("true");
  EXPECT_EQ(EmitYaml(n), "v: \"true\"\n");
}

TEST(ManifestsYamlMergeTest, MergesContainersByNameAndEnvByName) {
  YAML::Node target = YAML::Load(
      "spec:\n  template:\n    spec:\n      containers:\n"
      "        - name: gpulet\n          image: gpulet:1\n"
      "          env: [{name: A, value: '1'}]\n"
      "        - name: other\n          image: x\n");
  YAML::Node patch = YAML::Load(
      "spec:\n  template:\n    spec:\n      runtimeClassName: nvidia\n      containers:\n"
      "        - name: gpulet\n          env: [{name: A, value: '2'}, {name: B, value: '3'}]\n");
  ASSERT_TRUE(StrategicMerge(target, patch, "p.yaml").ok());
  YAML::Node spec = target["spec"]["template"]["spec"];
  EXPECT_EQ(spec["runtimeClassName"].Scalar(), "nvidia");
  ASSERT_EQ(spec["containers"].size(), 2u);
  EXPECT_EQ(spec["containers"][0]["image"].Scalar(), "gpulet:1");
  ASSERT_EQ(spec["containers"][0]["env"].size(), 2u);
  EXPECT_EQ(spec["containers"][0]["env"][0]["value"].Scalar(), "2");
  EXPECT_EQ(spec["containers"][0]["env"][1]["name"].Scalar(), "B");
  EXPECT_EQ(spec["containers"][1]["name"].Scalar(), "other");
}

TEST(ManifestsYamlMergeTest, NewListItemsComeFirstAsKubernetesOrdersThem) {
  YAML::Node target = YAML::Load("env: [{name: X, value: x}, {name: Y, value: y}]\n");
  YAML::Node patch = YAML::Load("env: [{name: Z, value: z}, {name: Y, value: y2}]\n");
  ASSERT_TRUE(StrategicMerge(target, patch, "p.yaml").ok());
  std::vector<std::string> order;
  for (const auto& e : target["env"]) order.push_back(e["name"].Scalar() + e["value"].Scalar());
  EXPECT_THAT(order, ::testing::ElementsAre("Zz", "Yy2", "Xx"));
}

TEST(ManifestsYamlMergeTest, NullDeletesAndPlainListsAreReplaced) {
  YAML::Node target = YAML::Load("limits: {nvidia.com/gpu: 1, memory: 1Gi}\nargs: [a, b]\n");
  YAML::Node patch =
      YAML::Load("limits: {nvidia.com/gpu: null, nvidia.com/gpu-memory: 24}\nargs: [c]\n");
  ASSERT_TRUE(StrategicMerge(target, patch, "p.yaml").ok());
  EXPECT_FALSE(target["limits"]["nvidia.com/gpu"]);
  EXPECT_EQ(target["limits"]["nvidia.com/gpu-memory"].Scalar(), "24");
  EXPECT_EQ(target["limits"]["memory"].Scalar(), "1Gi");
  ASSERT_EQ(target["args"].size(), 1u);
  EXPECT_EQ(target["args"][0].Scalar(), "c");
}

TEST(ManifestsYamlMergeTest, PatchDoesNotAliasItsSource) {
  YAML::Node target = YAML::Load("a: {}\n");
  YAML::Node patch = YAML::Load("a: {b: {c: 1}}\n");
  ASSERT_TRUE(StrategicMerge(target, patch, "p.yaml").ok());
  target["a"]["b"]["c"] = 2;
  EXPECT_EQ(patch["a"]["b"]["c"].Scalar(), "1");
}

TEST(ManifestsYamlMergeTest, RefusesDirectives) {
  YAML::Node target = YAML::Load("a: 1\n");
  absl::Status s = StrategicMerge(target, YAML::Load("$patch: delete\n"), "p.yaml");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()), HasSubstr("p.yaml"));
}

}  // namespace
}  // namespace gpulet::deploy
