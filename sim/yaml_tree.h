// YamlTree: one YAML document parsed by libyaml's loader, read through YamlNode views: the
// small part of a YAML DOM the fixture reader (sim/fixture.cc) needs.
//
// Why not yaml-cpp, as gpulet's config reader uses: the simulator library is dlopen'ed in
// place of libnvidia-ml.so.1, and it is linked self-contained (libstdc++ and libyaml from
// their static archives) so that `--simulate` maps no shared C++ library into gpulet.
// yaml-cpp's archive is not position-independent and so cannot go into a shared library;
// libyaml's (C) can.
//
// Semantics follow YAML 1.1's core schema as far as the fixtures need: a plain scalar that
// is empty, `~`, `null`, `Null` or `NULL` is null (neither IsScalar nor IsMap), as in
// yaml-cpp; aliases resolve to their anchored node; a missing key or index gives an
// undefined node (false in a boolean context) whose Mark is null.
//
// Thread-safety: a YamlTree is immutable once loaded; its nodes may be read from any number
// of threads. A YamlNode points into its tree and must not outlive it.
#ifndef GPULET_SIM_YAML_TREE_H_
#define GPULET_SIM_YAML_TREE_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

struct yaml_document_s;
struct yaml_node_s;

namespace gpulet::sim {

// Where a node starts in its file, counted from 0 as libyaml does; line < 0 when unknown.
struct YamlMark {
  int line = -1;
  int column = -1;
  bool is_null() const { return line < 0; }
};

class YamlNode {
 public:
  YamlNode() = default;  // undefined

  explicit operator bool() const { return node_ != nullptr; }
  bool IsMap() const;
  bool IsSequence() const;
  bool IsScalar() const;  // a non-null scalar
  bool IsNull() const;

  // The scalar's text; empty for anything else.
  std::string Scalar() const;
  // Items of a sequence, pairs of a mapping; 0 otherwise.
  size_t size() const;
  // A sequence's item; undefined when out of range or not a sequence.
  YamlNode operator[](size_t index) const;
  // A mapping's value for a scalar key (the first, should the key repeat); undefined when
  // absent or not a mapping.
  YamlNode operator[](std::string_view key) const;
  YamlNode operator[](const char* key) const { return (*this)[std::string_view(key)]; }
  YamlMark Mark() const;

  // Range-for over a mapping's (key, value) pairs, in file order; empty for anything else.
  class PairIterator {
   public:
    PairIterator(const YamlNode* map, size_t i) : map_(map), i_(i) {}
    std::pair<YamlNode, YamlNode> operator*() const;
    PairIterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator!=(const PairIterator& other) const { return i_ != other.i_; }

   private:
    const YamlNode* map_;
    size_t i_;
  };
  PairIterator begin() const { return PairIterator(this, 0); }
  PairIterator end() const { return PairIterator(this, IsMap() ? size() : 0); }

 private:
  friend class YamlTree;
  YamlNode(yaml_document_s* doc, yaml_node_s* node) : doc_(doc), node_(node) {}
  YamlNode Resolve(int id) const;

  yaml_document_s* doc_ = nullptr;
  yaml_node_s* node_ = nullptr;
};

class YamlTree {
 public:
  ~YamlTree();
  YamlTree(const YamlTree&) = delete;
  YamlTree& operator=(const YamlTree&) = delete;

  // Parses the first document of `text`. On a syntax error, returns null and sets `error` to
  // "LINE:COLUMN: <what libyaml says>" (1-based). An empty stream is an empty document: its
  // root is undefined.
  static std::unique_ptr<YamlTree> Parse(std::string_view text, std::string* error);

  YamlNode root() const;

 private:
  YamlTree();
  std::unique_ptr<yaml_document_s> doc_;
  bool loaded_ = false;
};

}  // namespace gpulet::sim

#endif  // GPULET_SIM_YAML_TREE_H_
