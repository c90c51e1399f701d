// `gpulet explain`: turns error messages someone met while setting up NVIDIA GPUs on
// Kubernetes (a pod event, a `kubectl describe pod` Events table, a device-plugin log,
// nvidia-smi output, `dmesg` or `talosctl dmesg`) into their causes and fixes, in words an
// operator can act on.
//
// The knowledge comes from three places:
//  - the message catalogue (doctor/explain_catalog.h: src/doctor/explain/*.yaml, compiled
//    in), each entry matched by case-insensitive patterns over each line with runs of
//    whitespace collapsed, and over a window of four lines for messages that wrap; a line's
//    JSON, logfmt or kubectl quoting (\", \n, \uXXXX, nested up to three levels) is undone
//    first, so a message matches however it was logged;
//  - NVML return-code names (NVML_ERROR_GPU_IS_LOST, ERROR_LIBRARY_NOT_FOUND as Go tools
//    print them, or a bare name given alone) and the common nvmlErrorString() phrases,
//    explained from gpu/nvml_errors.h;
//  - kernel log XID and fallen-off-the-bus lines, explained from the XID catalogue
//    (health/xid_catalog.h), naming the GPU's bus id (and UUID when the text maps it).
// Each kind of message is reported once, with the line it was first seen on, worst first; among
// equals, the first seen, and on one line the most specific (the most literal text matched:
// "Failed to initialize NVML: Insufficient Permissions" before the NVML code's phrase alone).
// Informational entries (a line that is harmless) are left out when another line of the text
// holds something worse.
//
// Input is processed line by line (LogExplainer), so a log of any size takes time linear in
// its length and memory bounded by the longest line matched: a line longer than
// kExplainMaxLine is matched on its first kExplainMaxLine bytes only (and counted). Scanning
// uses one Aho-Corasick pass per line over every pattern's longest literal, so the cost does
// not grow with the number of patterns times the text.
//
// Thread-safety: the catalogue is immutable; a LogExplainer is used by one thread at a time;
// Explain is safe to call concurrently.
#ifndef GPULET_DOCTOR_EXPLAIN_H_
#define GPULET_DOCTOR_EXPLAIN_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "doctor/explain_catalog.h"

namespace gpulet::doctor {

// Longest part of one line that is matched; the rest of a longer line is skipped.
inline constexpr size_t kExplainMaxLine = 16 << 10;

struct Explanation {
  std::string id;
  std::string title;
  std::string severity;  // "critical", "error", "warning" or "info"
  std::string cause;
  std::string fix;        // any platform
  std::string fix_talos;  // on Talos Linux; "" when the generic fix applies as is
  std::string check;      // the `gpulet doctor` check that catches it; "" when none
  // When the message has several causes: each with the question that tells it apart, most
  // likely first (`cause` is then their summary).
  std::vector<ExplainCandidate> candidates;
  std::string source;
  std::string matched;  // the line (trimmed) or name that selected this explanation
  size_t line = 0;      // 1-based line of the input where it was first seen; 0: not a line
  size_t count = 0;     // lines it was seen on (XIDs; catalogue entries count the first only)
  // Structured facts for --json (XID: xid, bus_id, uuid, severity, action, ...), in order.
  std::vector<std::pair<std::string, std::string>> details;
};

struct ExplainResult {
  std::vector<Explanation> found;  // worst first, then by line, then most specific
  size_t lines = 0;                // lines read
  size_t truncated_lines = 0;      // lines longer than kExplainMaxLine, matched in part
  std::string catalogue_error;     // the catalogue did not load (a build defect); else ""
};

// A catalogue compiled for matching (one scanner over every pattern), shared by the explainers
// that use it. The catalogue must outlive it. An error value compiles to a matcher that
// explains by NVML names and XIDs only and reports the error (catalogue_error).
struct ExplainMatcher;
std::shared_ptr<const ExplainMatcher> CompileExplainCatalog(
    const absl::StatusOr<ExplainCatalog>& catalog);

// Explains a log fed line by line or in chunks of any size.
class LogExplainer {
 public:
  // With the built-in catalogue (BuiltinExplainCatalog()).
  LogExplainer();
  // With another catalogue (CompileExplainCatalog).
  explicit LogExplainer(std::shared_ptr<const ExplainMatcher> matcher);
  ~LogExplainer();
  LogExplainer(const LogExplainer&) = delete;
  LogExplainer& operator=(const LogExplainer&) = delete;

  // Adds bytes; lines end at '\n' and may span calls. Memory stays bounded: at most
  // kExplainMaxLine bytes of a line are kept.
  void Feed(absl::string_view chunk);
  // Ends the input (a last line without '\n' counts) and returns what was found.
  ExplainResult Finish();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Everything `text` matches (LogExplainer over the whole text), worst first.
std::vector<Explanation> Explain(absl::string_view text);
ExplainResult ExplainText(absl::string_view text);
ExplainResult ExplainText(absl::string_view text, std::shared_ptr<const ExplainMatcher> matcher);

// Case-insensitive search: true when `pattern` (doctor/explain_catalog.h's syntax: '*', '?',
// '<n>', '<x>', '<w>') matches some part of `text`, taken as is (no whitespace collapse).
// '*' matches any run of characters, newlines included. An empty pattern matches everything.
bool WildcardSearch(absl::string_view pattern, absl::string_view text);

}  // namespace gpulet::doctor

#endif  // GPULET_DOCTOR_EXPLAIN_H_
