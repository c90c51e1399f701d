#include "doctor/explain_catalog.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "doctor/check_list.h"
#include "yaml-cpp/yaml.h"
#include "yaml/reader.h"

namespace gpulet::doctor {
namespace {

bool IsWordChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' ||
         c == '/' || c == ':';
}

char Lower(char c) { return absl::ascii_tolower(static_cast<unsigned char>(c)); }

// Words too common in logs to be a good first filter: a line holding one of them is rarely the
// message, and every such line would cost a full pattern match.
constexpr absl::string_view kCommonWords[] = {
    "allocate", "available", "could",   "device",  "devices", "disabled", "driver",  "error",
    "exit",     "exited",    "failed",  "failure", "found",   "getting",  "library", "module",
    "nvidia",   "running",   "runtime", "timeout", "unable",  "version",  "warning"};

// How good `word` is as the keyword a scanner looks for first: longer is rarer; common
// words and words under 4 characters last. (Only ever compared.)
size_t AnchorRank(absl::string_view word) {
  if (word.empty()) return 0;
  std::string lower = absl::AsciiStrToLower(word);
  while (!lower.empty() && !absl::ascii_isalnum(static_cast<unsigned char>(lower.back()))) {
    lower.pop_back();
  }
  bool common =
      std::find(std::begin(kCommonWords), std::end(kCommonWords), lower) != std::end(kCommonWords);
  return word.size() + (common || word.size() < 4 ? 0 : 1000);
}

// The checks `gpulet doctor` runs (src/doctor/doctor.cc; docs/troubleshooting.md lists them).
struct SeverityName {
  ExplainSeverity severity;
  absl::string_view name;
};
constexpr SeverityName kSeverities[] = {{ExplainSeverity::kInfo, "info"},
                                        {ExplainSeverity::kWarning, "warning"},
                                        {ExplainSeverity::kError, "error"},
                                        {ExplainSeverity::kCritical, "critical"}};

// A scalar field of `node`; "" when absent. Errors when present but not a string.
absl::StatusOr<std::string> Scalar(const YAML::Node& node, const char* key,
                                   absl::string_view where) {
  YAML::Node v = node[key];
  if (!v) return std::string();
  if (!v.IsScalar()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": `", key, "` must be a string"));
  }
  return v.as<std::string>();
}

absl::StatusOr<std::vector<std::string>> StringList(const YAML::Node& node, const char* key,
                                                    absl::string_view where) {
  std::vector<std::string> out;
  YAML::Node v = node[key];
  if (!v) return out;
  if (v.IsScalar()) {
    out.push_back(v.as<std::string>());
    return out;
  }
  if (!v.IsSequence()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": `", key, "` must be a string or a list of strings"));
  }
  for (const YAML::Node& item : v) {
    if (!item.IsScalar()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": every item of `", key, "` must be a string"));
    }
    out.push_back(item.as<std::string>());
  }
  return out;
}

absl::StatusOr<ExplainCatalogEntry> ParseEntry(const YAML::Node& node, size_t index) {
  std::string where = absl::StrCat("entry ", index + 1);
  if (!node.IsMap()) return absl::InvalidArgumentError(absl::StrCat(where, " is not a map"));
  static const std::set<std::string> kKeys = {"id",  "title", "severity", "patterns", "cause",
                                              "fix", "check", "source",   "examples", "candidates"};
  for (const auto& kv : node) {
    std::string key = kv.first.as<std::string>();
    if (!kKeys.contains(key)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": unknown key `", key, "`"));
    }
  }
  ExplainCatalogEntry e;
  absl::StatusOr<std::string> id = Scalar(node, "id", where);
  if (!id.ok()) return id.status();
  e.id = *id;
  if (e.id.empty()) return absl::InvalidArgumentError(absl::StrCat(where, " has no id"));
  where = absl::StrCat("entry ", e.id);
  for (auto [key, field] : {std::pair<const char*, std::string*>{"title", &e.title},
                            {"cause", &e.cause},
                            {"check", &e.check},
                            {"source", &e.source}}) {
    absl::StatusOr<std::string> v = Scalar(node, key, where);
    if (!v.ok()) return v.status();
    *field = std::string(absl::StripAsciiWhitespace(*v));
  }
  absl::StatusOr<std::string> severity = Scalar(node, "severity", where);
  if (!severity.ok()) return severity.status();
  auto sev = std::find_if(std::begin(kSeverities), std::end(kSeverities),
                          [&](const SeverityName& s) { return s.name == *severity; });
  if (sev == std::end(kSeverities)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": severity must be info, warning, error or critical, not \"", *severity, "\""));
  }
  e.severity = sev->severity;

  YAML::Node fix = node["fix"];
  if (!fix || !fix.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": `fix` must be a map with `generic` (and optionally `talos`)"));
  }
  for (const auto& kv : fix) {
    std::string platform = kv.first.as<std::string>();
    if (!kv.second.IsScalar()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": fix.", platform, " is not text"));
    }
    std::string text(absl::StripAsciiWhitespace(kv.second.as<std::string>()));
    if (platform == "generic") {
      e.fix = text;
    } else if (platform == "talos") {
      e.fix_talos = text;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": unknown platform fix.", platform, " (generic, talos)"));
    }
  }

  absl::StatusOr<std::vector<std::string>> patterns = StringList(node, "patterns", where);
  if (!patterns.ok()) return patterns.status();
  e.patterns = *std::move(patterns);
  absl::StatusOr<std::vector<std::string>> examples = StringList(node, "examples", where);
  if (!examples.ok()) return examples.status();
  e.examples = *std::move(examples);

  for (auto [name, value] : {std::pair<const char*, const std::string*>{"title", &e.title},
                             {"cause", &e.cause},
                             {"fix.generic", &e.fix},
                             {"source", &e.source}}) {
    if (value->empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": `", name, "` is missing"));
    }
  }
  if (!absl::StartsWith(e.source, "https://") && !absl::StartsWith(e.source, "http://")) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": `source` must be the URL where the message was seen"));
  }
  if (!e.check.empty() && !IsDoctorCheckName(e.check)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": `check` names no gpulet doctor check: ", e.check));
  }
  if (e.patterns.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, " has no patterns"));
  }
  if (e.examples.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, " has no examples"));
  }
  if (YAML::Node candidates = node["candidates"]; candidates) {
    if (!candidates.IsSequence() || candidates.size() < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": `candidates` must be a list of two or more {cause, question, check}"));
    }
    for (const YAML::Node& item : candidates) {
      std::string at = absl::StrCat(where, ": candidate ", e.candidates.size() + 1);
      if (!item.IsMap()) return absl::InvalidArgumentError(absl::StrCat(at, " is not a map"));
      for (const auto& kv : item) {
        std::string key = kv.first.as<std::string>();
        if (key != "cause" && key != "question" && key != "check") {
          return absl::InvalidArgumentError(
              absl::StrCat(at, ": unknown key `", key, "` (cause, question, check)"));
        }
      }
      ExplainCandidate c;
      for (auto [key, field] : {std::pair<const char*, std::string*>{"cause", &c.cause},
                                {"question", &c.question},
                                {"check", &c.check}}) {
        absl::StatusOr<std::string> v = Scalar(item, key, at);
        if (!v.ok()) return v.status();
        *field = std::string(absl::StripAsciiWhitespace(*v));
      }
      if (c.cause.empty() || c.question.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(at, " needs a `cause` and a `question`"));
      }
      if (!c.check.empty() && !IsDoctorCheckName(c.check)) {
        return absl::InvalidArgumentError(
            absl::StrCat(at, ": `check` names no gpulet doctor check: ", c.check));
      }
      e.candidates.push_back(std::move(c));
    }
  }
  for (const std::string& p : e.patterns) {
    // Matched against unescaped text: a pattern copied with its quotes escaped still works.
    std::string plain, normal;
    NormalizeForMatch(UnescapePaste(p, &plain), &normal);
    MessagePattern compiled = MessagePattern::Compile(normal);
    // A pattern must have some literal text to look for, or it would match everything.
    if (compiled.anchor().size() < 4) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": pattern \"", p, "\" has no literal run of 4 or more characters"));
    }
    e.compiled.push_back(std::move(compiled));
  }
  return e;
}

}  // namespace

absl::string_view ExplainSeverityName(ExplainSeverity s) {
  for (const SeverityName& n : kSeverities) {
    if (n.severity == s) return n.name;
  }
  return "error";
}

bool IsDoctorCheckName(absl::string_view name) { return !doctor::CheckTitle(name).empty(); }

namespace {

// Undoes one level of the quoting a paste goes through: JSON and logfmt string escapes (\",
// \\, \n, \t, \uXXXX), Go's %q in kubectl's Events, kmsg's \xHH. Line breaks and tabs
// become spaces, so a message stays on its line. Appends to `out`; false when nothing changed.
bool UnescapeOnce(absl::string_view in, std::string* out) {
  bool changed = false;
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c != '\\' || i + 1 == in.size()) {
      out->push_back(c);
      continue;
    }
    char n = in[i + 1];
    int hex_digits = n == 'u' ? 4 : n == 'x' ? 2 : 0;
    unsigned code = 0;
    if (hex_digits > 0) {
      bool ok = i + 1 + hex_digits < in.size();
      for (int k = 0; ok && k < hex_digits; ++k) {
        char h = in[i + 2 + k];
        if (!absl::ascii_isxdigit(static_cast<unsigned char>(h))) ok = false;
        code = code * 16 + (absl::ascii_isdigit(static_cast<unsigned char>(h))
                                ? h - '0'
                                : absl::ascii_tolower(static_cast<unsigned char>(h)) - 'a' + 10);
      }
      if (!ok) {
        out->push_back(c);
        continue;
      }
      if (code < 0x20 || code == 0x7f) {
        out->push_back(' ');
      } else if (code < 0x80 || n == 'x') {  // \xHH is a byte (kmsg), \uXXXX a code point
        out->push_back(static_cast<char>(code));
      } else if (code < 0x800) {
        out->push_back(static_cast<char>(0xc0 | (code >> 6)));
        out->push_back(static_cast<char>(0x80 | (code & 0x3f)));
      } else {
        out->push_back(static_cast<char>(0xe0 | (code >> 12)));
        out->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3f)));
        out->push_back(static_cast<char>(0x80 | (code & 0x3f)));
      }
      i += 1 + hex_digits;
      changed = true;
      continue;
    }
    switch (n) {
      case '"':
      case '\'':
      case '\\':
      case '/':
        out->push_back(n);
        break;
      case 'n':
      case 'r':
      case 't':
        out->push_back(' ');
        break;
      default:
        out->push_back(c);
        continue;
    }
    ++i;
    changed = true;
  }
  return changed;
}

}  // namespace

absl::string_view UnescapePaste(absl::string_view line, std::string* buffer) {
  for (int level = 0; level < 3 && absl::StrContains(line, '\\'); ++level) {
    std::string next;
    next.reserve(line.size());
    if (!UnescapeOnce(line, &next)) break;
    *buffer = std::move(next);
    line = *buffer;
  }
  return line;
}

void NormalizeForMatch(absl::string_view text, std::string* out) {
  bool space = false;
  size_t start = out->size();
  for (char c : text) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c))) {
      space = true;
      continue;
    }
    if (space && out->size() > start) out->push_back(' ');
    space = false;
    out->push_back(Lower(c));
  }
}

MessagePattern MessagePattern::Compile(absl::string_view pattern) {
  MessagePattern p;
  p.segments_.emplace_back();
  std::string literal;
  auto flush = [&] {
    if (literal.empty()) return;
    // The anchor is the longest run without spaces: a message the kernel wraps over several
    // lines breaks at spaces, so the anchor still falls within one line.
    for (absl::string_view word : absl::StrSplit(literal, ' ', absl::SkipEmpty())) {
      if (AnchorRank(word) > AnchorRank(p.anchor_)) p.anchor_ = std::string(word);
    }
    p.literal_size_ += literal.size();
    p.segments_.back().push_back(Token{Kind::kLiteral, std::move(literal)});
    literal.clear();
  };
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    Kind placeholder = Kind::kLiteral;
    if (c == '<' && i + 2 < pattern.size() && pattern[i + 2] == '>') {
      switch (pattern[i + 1]) {
        case 'n':
          placeholder = Kind::kDigits;
          break;
        case 'x':
          placeholder = Kind::kHex;
          break;
        case 'w':
          placeholder = Kind::kWord;
          break;
        default:
          break;
      }
    }
    if (c == '*') {
      flush();
      if (!p.segments_.back().empty()) p.segments_.emplace_back();
    } else if (c == '?') {
      flush();
      p.segments_.back().push_back(Token{Kind::kAnyChar, ""});
    } else if (placeholder != Kind::kLiteral) {
      flush();
      p.segments_.back().push_back(Token{placeholder, ""});
      i += 2;
    } else {
      literal.push_back(Lower(c));
    }
  }
  flush();
  if (p.segments_.back().empty()) p.segments_.pop_back();
  return p;
}

size_t MessagePattern::MatchAt(const Segment& segment, absl::string_view text, size_t at) {
  for (const Token& t : segment) {
    switch (t.kind) {
      case Kind::kLiteral:
        if (text.size() - at < t.literal.size()) return absl::string_view::npos;
        for (size_t i = 0; i < t.literal.size(); ++i) {
          if (Lower(text[at + i]) != t.literal[i]) return absl::string_view::npos;
        }
        at += t.literal.size();
        break;
      case Kind::kAnyChar:
        if (at >= text.size()) return absl::string_view::npos;
        ++at;
        break;
      case Kind::kDigits:
      case Kind::kHex:
      case Kind::kWord: {
        size_t start = at;
        while (at < text.size()) {
          unsigned char c = static_cast<unsigned char>(text[at]);
          bool ok = t.kind == Kind::kDigits ? absl::ascii_isdigit(c)
                    : t.kind == Kind::kHex  ? absl::ascii_isxdigit(c)
                                            : IsWordChar(text[at]);
          if (!ok) break;
          ++at;
        }
        // A word does not end in punctuation: "0000:01:00.0:" is the address and a colon.
        if (t.kind == Kind::kWord) {
          while (at > start && (text[at - 1] == '.' || text[at - 1] == ':' || text[at - 1] == '/' ||
                                text[at - 1] == '-')) {
            --at;
          }
        }
        if (at == start) return absl::string_view::npos;
        break;
      }
    }
  }
  return at;
}

size_t MessagePattern::Find(const Segment& segment, absl::string_view text, size_t from,
                            bool lower) {
  const Token& first = segment.front();
  while (from <= text.size()) {
    if (first.kind == Kind::kLiteral && lower) {
      // Lower-case text: jump straight to the next occurrence of the whole first literal.
      from = text.find(first.literal, from);
      if (from == absl::string_view::npos) return absl::string_view::npos;
    } else if (first.kind == Kind::kLiteral) {
      // Jump to the next place the first literal's first character (either case) occurs.
      char lower = first.literal[0];
      char upper = absl::ascii_toupper(static_cast<unsigned char>(lower));
      size_t a = text.find(lower, from);
      size_t b = lower == upper ? absl::string_view::npos : text.find(upper, from);
      from = std::min(a, b);
      if (from == absl::string_view::npos) return absl::string_view::npos;
    }
    size_t end = MatchAt(segment, text, from);
    if (end != absl::string_view::npos) return end;
    ++from;
  }
  return absl::string_view::npos;
}

bool MessagePattern::Search(absl::string_view text) const { return SearchIn(text, false); }

bool MessagePattern::SearchNormalized(absl::string_view text) const { return SearchIn(text, true); }

bool MessagePattern::SearchIn(absl::string_view text, bool lower) const {
  size_t at = 0;
  for (const Segment& s : segments_) {
    at = Find(s, text, at, lower);
    if (at == absl::string_view::npos) return false;
  }
  return true;
}

absl::Status ExplainCatalog::Add(absl::string_view file, absl::string_view yaml) {
  std::string what =
      file.empty() ? std::string("explain catalogue") : absl::StrCat("explain catalogue ", file);
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", e.what()));
  }
  // A key given twice anywhere: yaml-cpp keeps both and a lookup finds the first.
  if (absl::Status s = yaml::CheckKeys(root, what); !s.ok()) return s;
  if (!root.IsMap() || !root["entries"] || !root["entries"].IsSequence()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": no `entries` list"));
  }
  for (const auto& kv : root) {
    if (kv.first.as<std::string>() != "entries") {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": unknown key `", kv.first.as<std::string>(), "` (entries)"));
    }
  }
  size_t index = 0;
  try {
    for (const YAML::Node& node : root["entries"]) {
      absl::StatusOr<ExplainCatalogEntry> e = ParseEntry(node, index++);
      if (!e.ok())
        return absl::InvalidArgumentError(absl::StrCat(what, ": ", e.status().message()));
      if (const ExplainCatalogEntry* twin = Find(e->id); twin != nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": duplicate id ", e->id,
                         twin->file.empty() ? "" : absl::StrCat(" (also in ", twin->file, ")")));
      }
      e->file = std::string(file);
      by_id_.emplace(e->id, entries_.size());
      entries_.push_back(*std::move(e));
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": entry ", index, ": ", e.what()));
  }
  return absl::OkStatus();
}

absl::StatusOr<ExplainCatalog> ExplainCatalog::Parse(absl::string_view yaml) {
  ExplainCatalog catalog;
  if (absl::Status s = catalog.Add("", yaml); !s.ok()) return s;
  return catalog;
}

absl::StatusOr<ExplainCatalog> ExplainCatalog::ParseFiles(
    absl::Span<const ExplainCatalogFile> files) {
  ExplainCatalog catalog;
  for (const ExplainCatalogFile& f : files) {
    if (absl::Status s = catalog.Add(f.name, f.yaml); !s.ok()) return s;
  }
  if (catalog.entries_.empty()) return absl::InvalidArgumentError("explain catalogue: no entries");
  return catalog;
}

const ExplainCatalogEntry* ExplainCatalog::Find(absl::string_view id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &entries_[it->second];
}

const absl::StatusOr<ExplainCatalog>& BuiltinExplainCatalog() {
  static const absl::StatusOr<ExplainCatalog>* const catalog =
      new absl::StatusOr<ExplainCatalog>(ExplainCatalog::ParseFiles(ExplainCatalogFiles()));
  return *catalog;
}

}  // namespace gpulet::doctor
