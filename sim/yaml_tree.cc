#include "sim/yaml_tree.h"

#include <yaml.h>

#include <cstring>

namespace gpulet::sim {
namespace {

std::string_view ScalarText(const yaml_node_t* n) {
  return std::string_view(reinterpret_cast<const char*>(n->data.scalar.value),
                          n->data.scalar.length);
}

bool IsNullScalar(const yaml_node_t* n) {
  if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return false;  // "" or '~' is a string
  const std::string_view text = ScalarText(n);
  return text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL";
}

}  // namespace

bool YamlNode::IsMap() const { return node_ != nullptr && node_->type == YAML_MAPPING_NODE; }

bool YamlNode::IsSequence() const { return node_ != nullptr && node_->type == YAML_SEQUENCE_NODE; }

bool YamlNode::IsScalar() const {
  return node_ != nullptr && node_->type == YAML_SCALAR_NODE && !IsNullScalar(node_);
}

bool YamlNode::IsNull() const {
  return node_ != nullptr && node_->type == YAML_SCALAR_NODE && IsNullScalar(node_);
}

std::string YamlNode::Scalar() const {
  if (!IsScalar()) return "";
  return std::string(ScalarText(node_));
}

size_t YamlNode::size() const {
  if (IsSequence()) {
    return static_cast<size_t>(node_->data.sequence.items.top - node_->data.sequence.items.start);
  }
  if (IsMap())
    return static_cast<size_t>(node_->data.mapping.pairs.top - node_->data.mapping.pairs.start);
  return 0;
}

YamlNode YamlNode::Resolve(int id) const {
  return YamlNode(doc_, yaml_document_get_node(doc_, id));
}

YamlNode YamlNode::operator[](size_t index) const {
  if (index >= size() || !IsSequence()) return YamlNode();
  return Resolve(node_->data.sequence.items.start[index]);
}

YamlNode YamlNode::operator[](std::string_view key) const {
  if (!IsMap()) return YamlNode();
  for (const yaml_node_pair_t* p = node_->data.mapping.pairs.start;
       p != node_->data.mapping.pairs.top; ++p) {
    const YamlNode k = Resolve(p->key);
    if (k.IsScalar() && ScalarText(k.node_) == key) return Resolve(p->value);
  }
  return YamlNode();
}

YamlMark YamlNode::Mark() const {
  if (node_ == nullptr) return YamlMark();
  return YamlMark{static_cast<int>(node_->start_mark.line),
                  static_cast<int>(node_->start_mark.column)};
}

std::pair<YamlNode, YamlNode> YamlNode::PairIterator::operator*() const {
  const yaml_node_pair_t& p = map_->node_->data.mapping.pairs.start[i_];
  return {map_->Resolve(p.key), map_->Resolve(p.value)};
}

YamlTree::YamlTree() : doc_(std::make_unique<yaml_document_t>()) {
  std::memset(doc_.get(), 0, sizeof(yaml_document_t));
}

YamlTree::~YamlTree() {
  if (loaded_) yaml_document_delete(doc_.get());
}

std::unique_ptr<YamlTree> YamlTree::Parse(std::string_view text, std::string* error) {
  yaml_parser_t parser;
  if (yaml_parser_initialize(&parser) == 0) {
    *error = "cannot start the YAML parser (out of memory)";
    return nullptr;
  }
  yaml_parser_set_input_string(&parser, reinterpret_cast<const unsigned char*>(text.data()),
                               text.size());
  std::unique_ptr<YamlTree> tree(new YamlTree());
  if (yaml_parser_load(&parser, tree->doc_.get()) == 0) {
    const yaml_mark_t& at = parser.problem_mark;
    std::string what = parser.problem != nullptr ? parser.problem : "malformed YAML";
    if (parser.context != nullptr) what = std::string(parser.context) + ": " + what;
    *error = std::to_string(at.line + 1) + ":" + std::to_string(at.column + 1) + ": " + what;
    yaml_parser_delete(&parser);
    return nullptr;
  }
  tree->loaded_ = true;
  yaml_parser_delete(&parser);
  return tree;
}

YamlNode YamlTree::root() const {
  return YamlNode(doc_.get(), yaml_document_get_root_node(doc_.get()));
}

}  // namespace gpulet::sim
