#include "deploy/manifests_yaml.h"

#include <cctype>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "yaml/reader.h"

namespace gpulet::deploy {
namespace {

// yaml-cpp marks a scalar written in quotes (or as a block literal) with the non-specific
// tag "!", and a plain one with "?"; an explicit !!str shows as its full tag.
bool IsQuoted(const YAML::Node& n) {
  const std::string& tag = n.Tag();
  return tag == "!" || tag == "tag:yaml.org,2002:str";
}

// Whether `s` can be written as a plain scalar in block context and read back as the same
// text. Conservative: anything doubtful is quoted instead.
bool PlainSafe(const std::string& s) {
  if (s.empty()) return false;
  if (std::isspace(static_cast<unsigned char>(s.front())) ||
      std::isspace(static_cast<unsigned char>(s.back()))) {
    return false;
  }
  static constexpr absl::string_view kIndicators = "-?:,[]{}#&*!|>'\"%@`";
  if (kIndicators.find(s[0]) != absl::string_view::npos) {
    bool dash_like = s[0] == '-' || s[0] == '?' || s[0] == ':';
    if (!dash_like || s.size() < 2 || std::isspace(static_cast<unsigned char>(s[1]))) {
      return false;
    }
  }
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
  }
  if (absl::StrContains(s, ": ") || absl::StrContains(s, " #") || s.back() == ':') return false;
  return true;
}

std::string DoubleQuoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          absl::StrAppendFormat(&out, "\\x%02x", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  out += "\"";
  return out;
}

// A multi-line string that a literal block can carry unchanged: no tabs or other control
// characters, no trailing spaces on a line, and a first line that does not start with a
// space (that would need an explicit indentation indicator).
bool LiteralBlockSafe(const std::string& s) {
  if (s.find('\n') == std::string::npos || s.front() == ' ' || s.front() == '\n') return false;
  for (char c : s) {
    if (c != '\n' && (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)) return false;
  }
  for (absl::string_view line : absl::StrSplit(s, '\n')) {
    if (!line.empty() && line.back() == ' ') return false;
  }
  return true;
}

std::string Pad(int n) { return std::string(static_cast<size_t>(n), ' '); }

// The scalar as it follows "key:" or "-": " text\n", or a literal block whose lines are
// indented by `indent`.
std::string ScalarTail(const YAML::Node& n, int indent) {
  const std::string& s = n.Scalar();
  if (LiteralBlockSafe(s)) {
    size_t end = s.size();
    while (end > 0 && s[end - 1] == '\n') --end;
    size_t trailing = s.size() - end;
    std::string header = trailing == 0 ? " |-" : trailing == 1 ? " |" : " |+";
    std::string out = header + "\n";
    for (absl::string_view line : absl::StrSplit(absl::string_view(s).substr(0, end), '\n')) {
      if (line.empty()) {
        out += "\n";
      } else {
        absl::StrAppend(&out, Pad(indent), line, "\n");
      }
    }
    for (size_t i = 1; i < trailing; ++i) out += "\n";
    return out;
  }
  if (!IsQuoted(n) && PlainSafe(s)) return absl::StrCat(" ", s, "\n");
  return absl::StrCat(" ", DoubleQuoted(s), "\n");
}

std::string KeyText(const YAML::Node& key) {
  const std::string& s = key.Scalar();
  if (!IsQuoted(key) && PlainSafe(s)) return s;
  return DoubleQuoted(s);
}

void EmitMap(const YAML::Node& map, int indent, std::string* out);
void EmitSeq(const YAML::Node& seq, int indent, std::string* out);

// Writes what follows "key:" (or "-") for `value`, whose own lines go at `indent`.
void EmitValue(const YAML::Node& value, int indent, std::string* out) {
  switch (value.Type()) {
    case YAML::NodeType::Map:
      if (value.size() == 0) {
        *out += " {}\n";
      } else {
        *out += "\n";
        EmitMap(value, indent, out);
      }
      break;
    case YAML::NodeType::Sequence:
      if (value.size() == 0) {
        *out += " []\n";
      } else {
        *out += "\n";
        EmitSeq(value, indent, out);
      }
      break;
    case YAML::NodeType::Scalar:
      *out += ScalarTail(value, indent);
      break;
    default:
      *out += " null\n";
  }
}

void EmitMap(const YAML::Node& map, int indent, std::string* out) {
  for (const auto& kv : map) {
    absl::StrAppend(out, Pad(indent), KeyText(kv.first), ":");
    EmitValue(kv.second, indent + 2, out);
  }
}

void EmitSeq(const YAML::Node& seq, int indent, std::string* out) {
  for (const auto& item : seq) {
    bool nested = (item.IsMap() || item.IsSequence()) && item.size() > 0;
    if (nested) {
      // Render the item one level deeper, then turn the first line's extra indentation
      // into the "- " that introduces it.
      std::string inner;
      if (item.IsMap()) {
        EmitMap(item, indent + 2, &inner);
      } else {
        EmitSeq(item, indent + 2, &inner);
      }
      inner.replace(static_cast<size_t>(indent), 2, "- ");
      *out += inner;
    } else {
      absl::StrAppend(out, Pad(indent), "-");
      EmitValue(item, indent + 2, out);
    }
  }
}

// The value under `key` in `map`, or an invalid node when absent. Iterates instead of using
// operator[], which on a non-const node would add the key.
YAML::Node FindKey(const YAML::Node& map, absl::string_view key) {
  if (!map.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
  for (const auto& kv : map) {
    if (kv.first.IsScalar() && kv.first.Scalar() == key) return kv.second;
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

// The strategic-merge key of a list field, "" for lists that a patch replaces.
std::string MergeKeyFor(absl::string_view field, const YAML::Node& patch_list) {
  if (field == "containers" || field == "initContainers" || field == "ephemeralContainers" ||
      field == "env" || field == "volumes" || field == "imagePullSecrets") {
    return "name";
  }
  if (field == "volumeMounts") return "mountPath";
  if (field == "volumeDevices") return "devicePath";
  if (field == "ports") {
    for (const auto& item : patch_list) {
      if (item.IsMap() && FindKey(item, "containerPort").IsDefined()) return "containerPort";
    }
    return "port";
  }
  return "";
}

absl::Status MergeMap(YAML::Node target, const YAML::Node& patch, const std::string& path,
                      absl::string_view origin);

absl::Status MergeList(YAML::Node target, const YAML::Node& patch, absl::string_view field,
                       const std::string& path, absl::string_view origin) {
  std::string key = MergeKeyFor(field, patch);
  // As Kubernetes orders a merged list: the patch's items first, in the patch's order (each
  // merged into the original item with the same key, if any), then the original items the
  // patch did not name, in their original order.
  YAML::Node result(YAML::NodeType::Sequence);
  std::vector<bool> used(target.size(), false);
  for (const auto& item : patch) {
    YAML::Node id = FindKey(item, key);
    if (!item.IsMap() || !id.IsDefined() || !id.IsScalar()) {
      return absl::InvalidArgumentError(absl::StrCat(
          origin, ": every item of ", path, " in a patch needs its merge key '", key, "'"));
    }
    bool merged = false;
    for (size_t i = 0; i < target.size(); ++i) {
      YAML::Node existing = target[i];
      YAML::Node existing_id = FindKey(existing, key);
      if (!used[i] && existing_id.IsDefined() && existing_id.IsScalar() &&
          existing_id.Scalar() == id.Scalar()) {
        absl::Status s =
            MergeMap(existing, item, absl::StrCat(path, "[", key, "=", id.Scalar(), "]"), origin);
        if (!s.ok()) return s;
        result.push_back(existing);
        used[i] = true;
        merged = true;
        break;
      }
    }
    if (!merged) result.push_back(YAML::Clone(item));
  }
  for (size_t i = 0; i < target.size(); ++i) {
    if (!used[i]) result.push_back(target[i]);
  }
  // `target` is a handle on the list inside its parent: assigning through it replaces the
  // list there.
  target = result;
  return absl::OkStatus();
}

absl::Status MergeMap(YAML::Node target, const YAML::Node& patch, const std::string& path,
                      absl::string_view origin) {
  for (const auto& kv : patch) {
    const std::string& key = kv.first.Scalar();
    std::string child_path = path.empty() ? key : absl::StrCat(path, ".", key);
    if (absl::StartsWith(key, "$")) {
      return absl::UnimplementedError(
          absl::StrCat(origin, ": the patch directive ", child_path,
                       " is not supported by gpulet manifests; write the patch as plain fields"));
    }
    const YAML::Node& value = kv.second;
    if (value.IsNull()) {
      target.remove(key);
      continue;
    }
    YAML::Node existing = FindKey(target, key);
    if (!existing.IsDefined()) {
      target[key] = YAML::Clone(value);
      continue;
    }
    if (value.IsMap() && existing.IsMap()) {
      absl::Status s = MergeMap(existing, value, child_path, origin);
      if (!s.ok()) return s;
    } else if (value.IsSequence() && existing.IsSequence() && !MergeKeyFor(key, value).empty()) {
      absl::Status s = MergeList(existing, value, key, child_path, origin);
      if (!s.ok()) return s;
    } else {
      target[key] = YAML::Clone(value);
    }
  }
  return absl::OkStatus();
}

bool OnlyCommentsOrBlank(absl::string_view text) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    absl::string_view t = absl::StripAsciiWhitespace(line);
    if (!t.empty() && t[0] != '#') return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::vector<YamlDocument>> SplitYamlDocuments(absl::string_view text,
                                                             absl::string_view origin) {
  std::vector<YamlDocument> docs;
  std::string current;
  int current_first_line = 1;
  int line_no = 0;
  auto finish = [&]() -> absl::Status {
    if (!OnlyCommentsOrBlank(current)) {
      YamlDocument doc;
      doc.text = current;
      doc.first_line = current_first_line;
      try {
        doc.node = YAML::Load(current);
      } catch (const YAML::Exception& e) {
        return absl::InvalidArgumentError(absl::StrCat(
            origin, ":", current_first_line + e.mark.line, ": not valid YAML: ", e.msg));
      }
      // A field given twice: yaml-cpp keeps both and a lookup finds the first; kubectl and
      // talosctl refuse the document.
      if (absl::Status s = yaml::CheckKeys(doc.node, origin, current_first_line - 1); !s.ok()) {
        return s;
      }
      if (!doc.node.IsNull()) docs.push_back(std::move(doc));
    }
    current.clear();
    current_first_line = line_no + 1;
    return absl::OkStatus();
  };
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    bool separator = absl::StartsWith(line, "---") &&
                     (line.size() == 3 || line[3] == ' ' || line[3] == '\t' || line[3] == '\r');
    bool end_marker = line == "..." || absl::StartsWith(line, "... ");
    if (separator || end_marker) {
      absl::string_view rest = absl::StripAsciiWhitespace(line.substr(3));
      if (!rest.empty() && rest[0] != '#') {
        return absl::InvalidArgumentError(
            absl::StrCat(origin, ":", line_no,
                         ": content on a document separator line is not supported; "
                         "start the document on the next line"));
      }
      absl::Status s = finish();
      if (!s.ok()) return s;
      continue;
    }
    absl::StrAppend(&current, line, "\n");
  }
  // StrSplit yields a last empty piece for text ending in '\n'; drop the newline it added.
  if (absl::EndsWith(current, "\n\n") || (current == "\n")) current.pop_back();
  absl::Status s = finish();
  if (!s.ok()) return s;
  return docs;
}

std::string EmitYaml(const YAML::Node& node) {
  std::string out;
  switch (node.Type()) {
    case YAML::NodeType::Map:
      if (node.size() == 0) return "{}\n";
      EmitMap(node, 0, &out);
      return out;
    case YAML::NodeType::Sequence:
      if (node.size() == 0) return "[]\n";
      EmitSeq(node, 0, &out);
      return out;
    case YAML::NodeType::Scalar:
      out = ScalarTail(node, 2);
      return out.substr(1);  // no leading space at the top level
    default:
      return "null\n";
  }
}

YAML::Node QuotedScalar(absl::string_view value) {
  YAML::Node n{std::string(value)};
  n.SetTag("!");
  return n;
}

YAML::Node NodeAtPath(const YAML::Node& root, const std::vector<std::string>& keys) {
  YAML::Node cur = root;
  for (const std::string& key : keys) {
    YAML::Node next(YAML::NodeType::Undefined);
    if (cur.IsMap()) {
      for (const auto& kv : cur) {
        if (kv.first.Scalar() == key) {
          next = kv.second;
          break;
        }
      }
    }
    if (!next.IsDefined()) return next;
    cur.reset(next);
  }
  return cur;
}

bool YamlEqual(const YAML::Node& a, const YAML::Node& b) {
  if (a.Type() != b.Type()) return false;
  switch (a.Type()) {
    case YAML::NodeType::Scalar:
      return a.Scalar() == b.Scalar();
    case YAML::NodeType::Sequence:
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        if (!YamlEqual(a[i], b[i])) return false;
      }
      return true;
    case YAML::NodeType::Map:
      if (a.size() != b.size()) return false;
      for (const auto& kv : a) {
        YAML::Node other = FindKey(b, kv.first.Scalar());
        if (!other.IsDefined() || !YamlEqual(kv.second, other)) return false;
      }
      return true;
    default:
      return true;  // both null or both undefined
  }
}

absl::Status StrategicMerge(YAML::Node target, const YAML::Node& patch, absl::string_view origin) {
  if (!target.IsMap() || !patch.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": a strategic-merge patch and its target must both be mappings"));
  }
  return MergeMap(target, patch, "", origin);
}

}  // namespace gpulet::deploy
