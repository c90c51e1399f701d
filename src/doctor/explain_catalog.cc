#include "doctor/explain_catalog.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "yaml-cpp/yaml.h"

namespace gpulet {
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
constexpr absl::string_view kDoctorChecks[] = {
    "os.release", "gpu.present", "gpu.driver",       "driver.flavor", "driver.modules",
    "dev.nodes",  "nvml.load",   "driver.userspace", "talos.bpf",     "cdi.specs",
    "cdi.gpulet", "cdi.resolve", "cdi.hooks",        "cdi.paths",     "containerd",
    "kubelet",    "gpu.health"};

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
                                              "fix", "check", "source",   "examples"};
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
  for (const std::string& p : e.patterns) {
    std::string normal;
    NormalizeForMatch(p, &normal);
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

bool IsDoctorCheckName(absl::string_view name) {
  return std::find(std::begin(kDoctorChecks), std::end(kDoctorChecks), name) !=
         std::end(kDoctorChecks);
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

absl::StatusOr<ExplainCatalog> ExplainCatalog::Parse(absl::string_view yaml) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("explain catalogue: ", e.what()));
  }
  if (!root.IsMap() || !root["entries"] || !root["entries"].IsSequence()) {
    return absl::InvalidArgumentError("explain catalogue: no `entries` list");
  }
  ExplainCatalog catalog;
  std::set<std::string> ids;
  size_t index = 0;
  try {
    for (const YAML::Node& node : root["entries"]) {
      absl::StatusOr<ExplainCatalogEntry> e = ParseEntry(node, index++);
      if (!e.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("explain catalogue: ", e.status().message()));
      }
      if (!ids.insert(e->id).second) {
        return absl::InvalidArgumentError(absl::StrCat("explain catalogue: duplicate id ", e->id));
      }
      catalog.entries_.push_back(*std::move(e));
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("explain catalogue: entry ", index, ": ", e.what()));
  }
  return catalog;
}

const absl::StatusOr<ExplainCatalog>& BuiltinExplainCatalog() {
  static const absl::StatusOr<ExplainCatalog>* const catalog =
      new absl::StatusOr<ExplainCatalog>(ExplainCatalog::Parse(ExplainCatalogYaml()));
  return *catalog;
}

}  // namespace gpulet
