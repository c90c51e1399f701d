#include "yaml/reader.h"

#include <algorithm>
#include <exception>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "yaml/kind.h"

namespace gpulet::yaml {

absl::StatusOr<YAML::Node> Load(absl::string_view text, absl::string_view origin, Limits limits) {
  if (text.size() > limits.max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(origin, " is ", text.size(),
                                                   " bytes; the limit is ", limits.max_bytes,
                                                   ": is it the right file?"));
  }
  try {
    return YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        origin, ":", e.mark.line + 1, ": not valid YAML: ", e.msg, "; fix the syntax"));
  } catch (const std::exception& e) {  // anything else yaml-cpp throws: never past the reader
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": not valid YAML: ", e.what(), "; fix the syntax"));
  }
}

absl::Status ErrorAt(absl::string_view origin, const YAML::Node& at, absl::string_view what,
                     int line_offset) {
  const YAML::Mark mark = at.IsDefined() ? at.Mark() : YAML::Mark::null_mark();
  if (mark.is_null()) return absl::InvalidArgumentError(absl::StrCat(origin, ": ", what));
  return absl::InvalidArgumentError(
      absl::StrCat(origin, ":", mark.line + 1 + line_offset, ": ", what));
}

namespace {

std::string Join(absl::string_view path, absl::string_view key) {
  return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
}

// The first key of mapping `node` (at `path`) that is not a plain name or is given twice.
absl::Status CheckMapKeys(const YAML::Node& node, absl::string_view origin, absl::string_view path,
                          int line_offset) {
  std::set<std::string> seen;
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) {
      return ErrorAt(origin, kv.first,
                     absl::StrCat("a key under ", path.empty() ? "the top level" : path, " is ",
                                  KindName(kv.first), "; keys are plain names"),
                     line_offset);
    }
    if (!seen.insert(kv.first.Scalar()).second) {
      return ErrorAt(origin, kv.first,
                     absl::StrCat("duplicate key '", Join(path, kv.first.Scalar()),
                                  "': it is set more than once; keep only one"),
                     line_offset);
    }
  }
  return absl::OkStatus();
}

absl::Status CheckTree(const YAML::Node& node, absl::string_view origin, const std::string& path,
                       int line_offset) {
  if (node.IsMap()) {
    if (absl::Status s = CheckMapKeys(node, origin, path, line_offset); !s.ok()) return s;
    for (const auto& kv : node) {
      if (absl::Status s = CheckTree(kv.second, origin, Join(path, kv.first.Scalar()), line_offset);
          !s.ok()) {
        return s;
      }
    }
  } else if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) {
      if (absl::Status s = CheckTree(node[i], origin, absl::StrCat(path, "[", i, "]"), line_offset);
          !s.ok()) {
        return s;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckKeys(const YAML::Node& root, absl::string_view origin, int line_offset) {
  return CheckTree(root, origin, "", line_offset);
}

Map::Map(const YAML::Node& node, std::string origin, std::string path)
    : node_(node), origin_(std::move(origin)), path_(std::move(path)) {
  if (!node_.IsDefined() || node_.IsNull()) return;
  if (!node_.IsMap()) {
    status_ = ErrorAt(node_, absl::StrCat(path_.empty() ? "the top level" : path_,
                                          " must be a mapping of keys, not ", KindName(node_)));
    return;
  }
  status_ = CheckMapKeys(node_, origin_, path_, 0);
  if (!status_.ok()) return;
  for (const auto& kv : node_) {
    keys_.push_back(kv.first.Scalar());
    key_nodes_.push_back(kv.first);
    values_.push_back(kv.second);
  }
}

absl::Status Map::Check() const { return status_; }

size_t Map::IndexOf(absl::string_view key) const {
  return std::find(keys_.begin(), keys_.end(), key) - keys_.begin();
}

bool Map::Has(absl::string_view key) const { return IndexOf(key) < keys_.size(); }

YAML::Node Map::Get(absl::string_view key) const {
  const size_t i = IndexOf(key);
  return i < keys_.size() ? values_[i] : YAML::Node(YAML::NodeType::Undefined);
}

std::string Map::PathOf(absl::string_view key) const { return Join(path_, key); }

Map Map::Child(absl::string_view key) const { return Map(Get(key), origin_, PathOf(key)); }

absl::Status Map::Error(absl::string_view what) const {
  return yaml::ErrorAt(origin_, node_, what);
}

absl::Status Map::ErrorAt(const YAML::Node& at, absl::string_view what) const {
  return yaml::ErrorAt(origin_, at.IsDefined() ? at : node_, what);
}

absl::Status Map::ErrorAtKey(absl::string_view key, absl::string_view what) const {
  const size_t i = IndexOf(key);
  return ErrorAt(i < keys_.size() ? key_nodes_[i] : node_, what);
}

absl::StatusOr<std::optional<std::string>> Map::Scalar(absl::string_view key, Presence presence,
                                                       absl::string_view expected) const {
  const YAML::Node v = Get(key);
  if (!v.IsDefined() || v.IsNull()) {
    if (presence == Presence::kOptional) return std::optional<std::string>();
    return ErrorAt(v, absl::StrCat(PathOf(key), " is missing; set it to ", expected));
  }
  if (!v.IsScalar()) {
    return ErrorAt(v, absl::StrCat(PathOf(key), " must be ", expected, ", not ", KindName(v)));
  }
  return std::optional<std::string>(v.Scalar());
}

absl::Status Map::String(absl::string_view key, std::string* out, Presence presence) const {
  absl::StatusOr<std::optional<std::string>> v = Scalar(key, presence, "a string");
  if (!v.ok()) return v.status();
  if (v->has_value()) *out = **v;
  return absl::OkStatus();
}

absl::Status Map::NonEmptyString(absl::string_view key, std::string* out, Presence presence) const {
  absl::StatusOr<std::optional<std::string>> v = Scalar(key, presence, "a non-empty string");
  if (!v.ok()) return v.status();
  if (!v->has_value()) return absl::OkStatus();
  if ((*v)->empty())
    return ErrorAt(Get(key), absl::StrCat(PathOf(key), " must be a non-empty string"));
  *out = **v;
  return absl::OkStatus();
}

absl::Status Map::Bool(absl::string_view key, bool* out, Presence presence) const {
  absl::StatusOr<std::optional<std::string>> v = Scalar(key, presence, "true or false");
  if (!v.ok()) return v.status();
  if (!v->has_value()) return absl::OkStatus();
  const std::string lower = absl::AsciiStrToLower(**v);
  if (lower != "true" && lower != "false") {
    return ErrorAt(Get(key), absl::StrCat(PathOf(key), " must be true or false, not '", **v, "'"));
  }
  *out = lower == "true";
  return absl::OkStatus();
}

std::optional<std::string> Map::FirstUnknown(
    std::initializer_list<absl::string_view> allowed) const {
  for (const std::string& key : keys_) {
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) return key;
  }
  return std::nullopt;
}

absl::Status Map::OnlyKeys(std::initializer_list<absl::string_view> allowed) const {
  const std::optional<std::string> unknown = FirstUnknown(allowed);
  if (!unknown) return absl::OkStatus();
  return ErrorAtKey(*unknown, absl::StrCat("unknown key '", PathOf(*unknown),
                                           "' (allowed: ", absl::StrJoin(allowed, ", "), ")"));
}

}  // namespace gpulet::yaml
