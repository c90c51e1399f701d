#include "doctor/explain_catalog.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "doctor/check_list.h"
#include "yaml-cpp/yaml.h"
#include "yaml/kind.h"
#include "yaml/reader.h"

namespace gpulet::doctor {
namespace {

// A catalogue file larger than this is a mistake, not data (the largest built-in one is under 50
// KiB).
constexpr size_t kMaxCatalogueBytes = size_t{8} << 20;

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

// The single value at `key`, with surrounding whitespace (a block scalar's last newline)
// stripped; "" when absent.
absl::Status Text(const yaml::Map& m, absl::string_view key, std::string* out) {
  std::string v;
  if (absl::Status s = m.String(key, &v, Presence::kOptional); !s.ok()) return s;
  *out = std::string(absl::StripAsciiWhitespace(v));
  return absl::OkStatus();
}

// One string or a list of strings at `key`; empty when absent.
absl::StatusOr<std::vector<std::string>> StringList(const yaml::Map& m, absl::string_view key) {
  std::vector<std::string> out;
  const YAML::Node v = m.Get(key);
  if (!v.IsDefined() || v.IsNull()) return out;
  if (v.IsScalar()) {
    out.push_back(v.Scalar());
    return out;
  }
  if (!v.IsSequence()) {
    return m.ErrorAt(v, absl::StrCat(m.PathOf(key), " must be a string or a list of strings, not ",
                                     yaml::KindName(v)));
  }
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].IsScalar()) {
      return m.ErrorAt(v[i], absl::StrCat(m.PathOf(key), "[", i, "] must be a string, not ",
                                          yaml::KindName(v[i])));
    }
    out.push_back(v[i].Scalar());
  }
  return out;
}

// A `check` names one of `gpulet doctor`'s checks (or is empty).
absl::Status CheckName(const yaml::Map& m, const std::string& check) {
  if (check.empty() || IsDoctorCheckName(check)) return absl::OkStatus();
  return m.ErrorAtKey("check",
                      absl::StrCat(m.PathOf("check"), " names no gpulet doctor check: ", check));
}

absl::StatusOr<ExplainCandidate> ParseCandidate(const yaml::Map& m) {
  if (absl::Status s = m.Check(); !s.ok()) return s;
  if (absl::Status s = m.OnlyKeys({"cause", "question", "check"}); !s.ok()) return s;
  ExplainCandidate c;
  for (auto [key, field] : {std::pair<const char*, std::string*>{"cause", &c.cause},
                            {"question", &c.question},
                            {"check", &c.check}}) {
    if (absl::Status s = Text(m, key, field); !s.ok()) return s;
  }
  if (c.cause.empty() || c.question.empty()) {
    return m.Error(absl::StrCat(m.PathOf(c.cause.empty() ? "cause" : "question"),
                                " is missing: a candidate needs a `cause` and a "
                                "`question`"));
  }
  if (absl::Status s = CheckName(m, c.check); !s.ok()) return s;
  return c;
}

absl::StatusOr<ExplainCatalogEntry> ParseEntry(const yaml::Map& m) {
  if (absl::Status s = m.Check(); !s.ok()) return s;
  if (absl::Status s = m.OnlyKeys({"id", "title", "severity", "patterns", "cause", "fix", "check",
                                   "source", "examples", "candidates"});
      !s.ok()) {
    return s;
  }
  ExplainCatalogEntry e;
  if (absl::Status s = m.NonEmptyString("id", &e.id); !s.ok()) return s;
  for (auto [key, field] : {std::pair<const char*, std::string*>{"title", &e.title},
                            {"cause", &e.cause},
                            {"check", &e.check},
                            {"source", &e.source}}) {
    if (absl::Status s = Text(m, key, field); !s.ok()) return s;
  }
  std::string severity;
  if (absl::Status s = m.String("severity", &severity); !s.ok()) return s;
  auto sev = std::find_if(std::begin(kSeverities), std::end(kSeverities),
                          [&](const SeverityName& n) { return n.name == severity; });
  if (sev == std::end(kSeverities)) {
    return m.ErrorAtKey("severity", absl::StrCat(m.PathOf("severity"),
                                                 " must be info, warning, error or critical, not '",
                                                 severity, "'"));
  }
  e.severity = sev->severity;

  const yaml::Map fix = m.Child("fix");
  if (absl::Status s = fix.Check(); !s.ok()) return s;
  if (absl::Status s = fix.OnlyKeys({"generic", "talos"}); !s.ok()) return s;
  if (absl::Status s = Text(fix, "generic", &e.fix); !s.ok()) return s;
  if (absl::Status s = Text(fix, "talos", &e.fix_talos); !s.ok()) return s;

  absl::StatusOr<std::vector<std::string>> patterns = StringList(m, "patterns");
  if (!patterns.ok()) return patterns.status();
  e.patterns = *std::move(patterns);
  absl::StatusOr<std::vector<std::string>> examples = StringList(m, "examples");
  if (!examples.ok()) return examples.status();
  e.examples = *std::move(examples);

  for (auto [key, value] : {std::pair<const char*, const std::string*>{"title", &e.title},
                            {"cause", &e.cause},
                            {"fix.generic", &e.fix},
                            {"source", &e.source}}) {
    if (value->empty()) {
      return m.Error(
          absl::StrCat(m.PathOf(key), " is missing (entry ", e.id, "); every entry needs it"));
    }
  }
  if (!absl::StartsWith(e.source, "https://") && !absl::StartsWith(e.source, "http://")) {
    return m.ErrorAtKey(
        "source", absl::StrCat(m.PathOf("source"), " must be the URL where the message was seen"));
  }
  if (absl::Status s = CheckName(m, e.check); !s.ok()) return s;
  for (auto [key, list] :
       {std::pair<const char*, const std::vector<std::string>*>{"patterns", &e.patterns},
        {"examples", &e.examples}}) {
    if (list->empty()) {
      return m.Error(absl::StrCat(m.PathOf(key), " is missing (entry ", e.id,
                                  "); every entry needs at least one"));
    }
  }
  if (m.Has("candidates")) {
    const YAML::Node candidates = m.Get("candidates");
    if (!candidates.IsSequence() || candidates.size() < 2) {
      return m.ErrorAtKey("candidates",
                          absl::StrCat(m.PathOf("candidates"),
                                       " must be a list of two or more {cause, question, check}"));
    }
    for (size_t i = 0; i < candidates.size(); ++i) {
      absl::StatusOr<ExplainCandidate> c = ParseCandidate(
          yaml::Map(candidates[i], m.origin(), absl::StrCat(m.PathOf("candidates"), "[", i, "]")));
      if (!c.ok()) return c.status();
      e.candidates.push_back(*std::move(c));
    }
  }
  for (const std::string& p : e.patterns) {
    // Matched against unescaped text: a pattern copied with its quotes escaped still works.
    std::string plain, normal;
    NormalizeForMatch(UnescapePaste(p, &plain), &normal);
    MessagePattern compiled = MessagePattern::Compile(normal);
    // A pattern must have some literal text to look for, or it would match everything.
    if (compiled.anchor().size() < 4) {
      return m.ErrorAtKey("patterns",
                          absl::StrCat(m.PathOf("patterns"), ": pattern \"", p,
                                       "\" has no literal run of 4 or more characters"));
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
  absl::StatusOr<YAML::Node> root = yaml::Load(yaml, what, {kMaxCatalogueBytes});
  if (!root.ok()) return root.status();
  const yaml::Map top(*root, what);
  if (absl::Status s = top.Check(); !s.ok()) return s;
  if (absl::Status s = top.OnlyKeys({"entries"}); !s.ok()) return s;
  const YAML::Node entries = top.Get("entries");
  if (!entries.IsSequence()) {
    return top.ErrorAt(entries, "entries must be a list of entries");
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    absl::StatusOr<ExplainCatalogEntry> e =
        ParseEntry(yaml::Map(entries[i], what, absl::StrCat("entries[", i, "]")));
    if (!e.ok()) return e.status();
    if (const ExplainCatalogEntry* twin = Find(e->id); twin != nullptr) {
      return top.ErrorAt(
          entries[i],
          absl::StrCat("duplicate id ", e->id,
                       twin->file.empty() ? "" : absl::StrCat(" (also in ", twin->file, ")")));
    }
    e->file = std::string(file);
    by_id_.emplace(e->id, entries_.size());
    entries_.push_back(*std::move(e));
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
