// The catalogue behind `gpulet explain`: real error messages people met while running NVIDIA
// GPUs on Kubernetes, each with its cause, its fix (generic and for Talos), the doctor check
// that catches it, a severity, the public page where the message was seen and quoted examples.
//
// The knowledge lives in one data file, src/doctor/explain_catalog.yaml, compiled into the
// binary at build time (cmake/embed_explain_catalog.cmake wraps it in a raw string literal,
// ExplainCatalogYaml()) and parsed once, on first use, with yaml-cpp. A catalogue that does
// not parse or validate is an error value (BuiltinExplainCatalog()), never a crash; the
// catalogue test fails on it.
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
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpulet {

// The embedded text of src/doctor/explain_catalog.yaml (generated at build time).
absl::string_view ExplainCatalogYaml();

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
};

struct ExplainCatalogEntry {
  std::string id;  // stable, for scripts: "nvml-library-missing"
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
};

class ExplainCatalog {
 public:
  // Parses and validates a catalogue document. Errors name the entry and the field.
  static absl::StatusOr<ExplainCatalog> Parse(absl::string_view yaml);

  const std::vector<ExplainCatalogEntry>& entries() const { return entries_; }

 private:
  std::vector<ExplainCatalogEntry> entries_;
};

// The catalogue compiled into the binary, parsed on first use.
const absl::StatusOr<ExplainCatalog>& BuiltinExplainCatalog();

// Lower-cases ASCII and collapses whitespace runs to one space (no leading or trailing
// space), appending to `out`: the form patterns are matched against.
void NormalizeForMatch(absl::string_view text, std::string* out);

// The names of gpulet doctor's checks (src/doctor/doctor.cc), for validating `check`.
bool IsDoctorCheckName(absl::string_view name);

}  // namespace gpulet

#endif  // GPULET_DOCTOR_EXPLAIN_CATALOG_H_
