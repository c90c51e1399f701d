#include "sim/yaml_tree.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace gpulet::sim {
namespace {

std::unique_ptr<YamlTree> MustParse(const std::string& text) {
  std::string error;
  std::unique_ptr<YamlTree> tree = YamlTree::Parse(text, &error);
  EXPECT_NE(tree, nullptr) << error;
  return tree;
}

TEST(YamlTreeTest, MappingsSequencesAndScalars) {
  auto tree = MustParse(
      "driver: {version: \"570.1\", cuda: 12080}\n"
      "gpus:\n"
      "  - name: a\n"
      "    memory: {total_mib: 1024}\n"
      "  - name: b\n");
  ASSERT_NE(tree, nullptr);
  const YamlNode root = tree->root();
  ASSERT_TRUE(root.IsMap());
  EXPECT_EQ(root.size(), 2u);
  EXPECT_EQ(root["driver"]["version"].Scalar(), "570.1");
  EXPECT_EQ(root["driver"]["cuda"].Scalar(), "12080");
  const YamlNode gpus = root["gpus"];
  ASSERT_TRUE(gpus.IsSequence());
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[size_t{1}]["name"].Scalar(), "b");
  EXPECT_EQ(gpus[size_t{0}]["memory"]["total_mib"].Scalar(), "1024");
  // Pairs in file order.
  std::vector<std::string> keys;
  for (const auto& kv : root) keys.push_back(kv.first.Scalar());
  EXPECT_EQ(keys, (std::vector<std::string>{"driver", "gpus"}));
  // A scalar iterates as nothing and has no items.
  int pairs = 0;
  for (const auto& kv : root["driver"]["cuda"]) pairs += kv.first ? 1 : 0;
  EXPECT_EQ(pairs, 0);
  EXPECT_EQ(root["driver"]["cuda"].size(), 0u);
}

// Missing keys, indexes past the end and lookups on the wrong kind of node are undefined:
// false, no mark, and every further lookup undefined too.
TEST(YamlTreeTest, MissingIsUndefined) {
  auto tree = MustParse("a: {b: [1, 2]}\n");
  ASSERT_NE(tree, nullptr);
  const YamlNode root = tree->root();
  EXPECT_FALSE(root["nope"]);
  EXPECT_FALSE(root["a"]["b"][size_t{2}]);
  EXPECT_FALSE(root["a"]["b"]["key"]);  // a sequence looked up by key
  EXPECT_FALSE(root["a"][size_t{0}]);   // a mapping looked up by index
  EXPECT_FALSE(root["nope"]["deeper"][size_t{3}]);
  EXPECT_TRUE(root["nope"].Mark().is_null());
  EXPECT_FALSE(root["nope"].IsScalar());
  EXPECT_EQ(root["nope"].Scalar(), "");
}

// Plain empty, ~ and null spellings are null, as in yaml-cpp; quoted they are strings.
TEST(YamlTreeTest, NullsFollowTheCoreSchema) {
  auto tree = MustParse("a:\nb: ~\nc: null\nd: NULL\ne: \"\"\nf: '~'\ng: nullish\n");
  ASSERT_NE(tree, nullptr);
  const YamlNode root = tree->root();
  for (const char* key : {"a", "b", "c", "d"}) {
    SCOPED_TRACE(key);
    EXPECT_TRUE(root[key]);  // defined, but null
    EXPECT_TRUE(root[key].IsNull());
    EXPECT_FALSE(root[key].IsScalar());
  }
  EXPECT_TRUE(root["e"].IsScalar());
  EXPECT_EQ(root["e"].Scalar(), "");
  EXPECT_EQ(root["f"].Scalar(), "~");
  EXPECT_EQ(root["g"].Scalar(), "nullish");
}

TEST(YamlTreeTest, MarksAreWhereNodesStart) {
  auto tree = MustParse("top:\n  inner: 5\n  list:\n    - x\n");
  ASSERT_NE(tree, nullptr);
  const YamlMark inner = tree->root()["top"]["inner"].Mark();
  EXPECT_EQ(inner.line, 1);
  EXPECT_EQ(inner.column, 9);
  const YamlMark x = tree->root()["top"]["list"][size_t{0}].Mark();
  EXPECT_EQ(x.line, 3);
  EXPECT_EQ(x.column, 6);
}

TEST(YamlTreeTest, AliasesResolveToTheAnchoredNode) {
  auto tree = MustParse("base: &b {memory: {total_mib: 8}}\ncopy: *b\n");
  ASSERT_NE(tree, nullptr);
  EXPECT_EQ(tree->root()["copy"]["memory"]["total_mib"].Scalar(), "8");
}

TEST(YamlTreeTest, EmptyStreamHasUndefinedRoot) {
  auto tree = MustParse("");
  ASSERT_NE(tree, nullptr);
  EXPECT_FALSE(tree->root());
  auto comments = MustParse("# only a comment\n");
  ASSERT_NE(comments, nullptr);
  EXPECT_FALSE(comments->root());
}

TEST(YamlTreeTest, SyntaxErrorsSayWhere) {
  struct Case {
    const char* text;
    const char* where;
  } cases[] = {
      {"a: [1, 2\n", "2:1: "},
      {"a: b\n c: d\n  - e\n", "2:3: "},
      {"a: *nowhere\n", "1:4: "},
      {"a: \"unterminated\n", ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    std::string error;
    EXPECT_EQ(YamlTree::Parse(c.text, &error), nullptr);
    EXPECT_FALSE(error.empty());
    EXPECT_EQ(error.rfind(c.where, 0), 0u) << error;
  }
}

}  // namespace
}  // namespace gpulet::sim
