// The catalogue behind `gpulet explain`: real error messages people met while running NVIDIA
// GPUs on Kubernetes, each with its cause, its fix (generic and for Talos), the doctor check
// that catches it, a severity, the public page where the message was seen and quoted examples.
//
// The knowledge lives in data files, one per area (src/doctor/explain/*.yaml; the folder's
// README.md gives the format), compiled into the binary at build time
// (cmake/embed_explain_catalog.cmake wraps each in a raw string literal, ExplainCatalogFiles())
// and parsed once, on first use, with yaml-cpp, as one catalogue. A catalogue that does not
// parse or validate is an error value (BuiltinExplainCatalog()) naming the file and the entry,
// never a crash; the catalogue test fails on it.
//
// Patterns (MessagePattern) are matched case-insensitively against text whose whitespace runs
// are collapsed to one space, so kubectl's column layout does not matter. Syntax:
//   '*'    any run of characters (possibly empty)      '?'    any one character
//   '<n>'  a run of decimal digits (one or more)        '<x>'  a run of hex digits
//   '<w>'  a run of word characters: letters, digits and . _ - / : (a pod, node or image name,
//          a version, a PCI address), not ending in . : / or -
// Other characters match themselves. The placeholders are possessive (a run is taken whole),
// so matching never backtracks inside a run and stays linear in practice.
//
// Thread-safety: a parsed ExplainCatalog is immutable; BuiltinExplainCatalog() is safe to
// call from any thread.
#ifndef GPULET_DOCTOR_EXPLAIN_CATALOG_H_
#define GPULET_DOCTOR_EXPLAIN_CATALOG_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace gpulet::doctor {

// One catalogue file: its name ("dcgm.yaml") and its text.
struct ExplainCatalogFile {
  absl::string_view name;
  absl::string_view yaml;
};

// The embedded src/doctor/explain/*.yaml files, in name order (generated at build time).
absl::Span<const ExplainCatalogFile> ExplainCatalogFiles();

// Severity, for ordering "worst first". Larger is worse.
enum class ExplainSeverity { kInfo = 0, kWarning = 1, kError = 2, kCritical = 3 };
absl::string_view ExplainSeverityName(ExplainSeverity s);

// A compiled pattern (syntax above).
class MessagePattern {
 public:
  // Compiles `pattern` as written (no case folding or whitespace collapse of its own: the
  // catalogue collapses and lower-cases patterns before compiling them).
  static MessagePattern Compile(absl::string_view pattern);

  // True when the pattern matches some part of `text`. Literals compare case-insensitively.
  bool Search(absl::string_view text) const;
  // The same for text already lower-cased (NormalizeForMatch's output), faster.
  bool SearchNormalized(absl::string_view text) const;

  // The longest word of the pattern's literal text (a run without spaces, lower-cased; common
  // log words like "failed" only when there is nothing else; "" for a pattern of
  // placeholders only): text that does not contain it cannot match, so a scanner looks for
  // it first. It has no spaces so that it lies within one line of a message that wraps.
  const std::string& anchor() const { return anchor_; }
  // How many characters of literal text the pattern has: the more, the more specific a match.
  size_t literal_size() const { return literal_size_; }

 private:
  enum class Kind : uint8_t { kLiteral, kAnyChar, kDigits, kHex, kWord };
  struct Token {
    Kind kind;
    std::string literal;  // kLiteral only, lower-cased
  };
  using Segment = std::vector<Token>;  // the tokens between two '*'

  // Where `segment` ends when it starts at `at`; npos when it does not match there.
  static size_t MatchAt(const Segment& segment, absl::string_view text, size_t at);
  // The end of the leftmost match of `segment` starting at or after `from`; npos if none.
  // `lower`: the text is lower-case already.
  static size_t Find(const Segment& segment, absl::string_view text, size_t from, bool lower);
  bool SearchIn(absl::string_view text, bool lower) const;

  std::vector<Segment> segments_;
  std::string anchor_;
  size_t literal_size_ = 0;
};

// One of several causes a message can have, with what tells it apart from the others.
struct ExplainCandidate {
  std::string cause;
  std::string question;  // the observation or command that decides for this cause
  std::string check;     // the `gpulet doctor` check that answers it on a node; "" when none
};

struct ExplainCatalogEntry {
  std::string id;    // stable, for scripts: "nvml-library-missing"
  std::string file;  // the catalogue file it came from: "dcgm.yaml"
  std::string title;
  ExplainSeverity severity = ExplainSeverity::kError;
  std::vector<std::string> patterns;  // as written in the catalogue
  std::vector<MessagePattern> compiled;
  std::string cause;
  std::string fix;                    // any platform
  std::string fix_talos;              // on Talos Linux ("" when the generic fix applies as is)
  std::string check;                  // the `gpulet doctor` check that catches it ("" when none)
  std::string source;                 // the public URL where the message was seen
  std::vector<std::string> examples;  // real messages, quoted
  // When the message has several causes: each, most likely first (empty when it has one).
  std::vector<ExplainCandidate> candidates;
};

class ExplainCatalog {
 public:
  // Parses and validates a catalogue document. Errors name the entry and the field.
  static absl::StatusOr<ExplainCatalog> Parse(absl::string_view yaml);
  // Parses several files as one catalogue: ids are unique across them, and errors also name
  // the file.
  static absl::StatusOr<ExplainCatalog> ParseFiles(absl::Span<const ExplainCatalogFile> files);

  const std::vector<ExplainCatalogEntry>& entries() const { return entries_; }
  // The entry with this id; null when there is none.
  const ExplainCatalogEntry* Find(absl::string_view id) const;

 private:
  // Adds the entries of one document; `file` names it in errors ("" for none).
  absl::Status Add(absl::string_view file, absl::string_view yaml);

  std::vector<ExplainCatalogEntry> entries_;
  std::map<std::string, size_t, std::less<>> by_id_;  // id -> index in entries_
};

// The catalogue compiled into the binary (ExplainCatalogFiles()), parsed on first use.
const absl::StatusOr<ExplainCatalog>& BuiltinExplainCatalog();

// Lower-cases ASCII and collapses whitespace runs to one space (no leading or trailing
// space), appending to `out`: the form patterns are matched against.
void NormalizeForMatch(absl::string_view text, std::string* out);

// `line` with the quoting a paste goes through undone, as many levels as it has (at most three:
// a JSON log line quoted in an Event quoted by kubectl): JSON and logfmt string escapes (\",
// \\, \n, \t, \uXXXX), Go's %q, kmsg's \xHH. Line breaks and tabs become spaces, so a
// message stays on its line. Returns `line` itself when it holds no escape, else a view of
// `buffer`.
absl::string_view UnescapePaste(absl::string_view line, std::string* buffer);

// True when `name` is one of gpulet doctor's checks (doctor/check_list.h), for validating
// `check`.
bool IsDoctorCheckName(absl::string_view name);

}  // namespace gpulet::doctor

#endif  // GPULET_DOCTOR_EXPLAIN_CATALOG_H_
