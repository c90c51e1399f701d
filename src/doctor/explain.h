// `gpulet explain`: turns an error message someone met while setting up NVIDIA GPUs on
// Kubernetes (a pod event, a device-plugin log line, nvidia-smi output, a kernel log line)
// into its cause and the fix, in words an operator can act on.
//
// The knowledge comes from three places:
//  - a table of known messages (device plugin, container toolkit, CDI, kubelet, Talos), each
//    matched by case-insensitive patterns (substring, or '*'/'?' wildcards) over the text
//    with runs of whitespace collapsed, so column-aligned `kubectl describe` output matches;
//  - NVML return-code names (NVML_ERROR_GPU_IS_LOST, ERROR_LIBRARY_NOT_FOUND as Go tools
//    print them, or a bare name given alone) and the common nvmlErrorString() phrases,
//    explained from gpu/nvml_errors.h;
//  - kernel log XID and fallen-off-the-bus lines, explained from the XID catalogue
//    (health/xid.h), naming the GPU's bus id (and UUID when the text maps it).
// Every match is reported; text that matches nothing gives an empty result.
//
// Thread-safety: the tables are immutable; Explain is safe to call concurrently.
#ifndef GPULET_DOCTOR_EXPLAIN_H_
#define GPULET_DOCTOR_EXPLAIN_H_

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace gpulet {

// One known message.
struct ExplainEntry {
  absl::string_view id;                         // stable, for scripts: "nvml-library-missing"
  std::span<const absl::string_view> patterns;  // any one matching selects the entry
  absl::string_view title;
  absl::string_view cause;
  absl::string_view fix;
  absl::string_view source;  // where the knowledge comes from (issue threads, docs)
};

struct Explanation {
  std::string id;
  std::string title;
  std::string cause;
  std::string fix;
  std::string source;
  std::string matched;  // the pattern, NVML name or log line that selected this explanation
  // Structured facts for --json (XID: xid, bus_id, uuid, severity, action, ...), in order.
  std::vector<std::pair<std::string, std::string>> details;
};

// Everything `text` matches, in this order: table entries (in table order), NVML return
// codes, XIDs (in log order, one per XID code and GPU, with the number of occurrences).
std::vector<Explanation> Explain(absl::string_view text);

// The table of known messages (for docs and tests).
std::span<const ExplainEntry> ExplainEntries();

// Case-insensitive wildcard search: true when `pattern` matches some part of `text`. '*'
// matches any run of characters (newlines included), '?' any one character; other
// characters match themselves. An empty pattern matches everything.
bool WildcardSearch(absl::string_view pattern, absl::string_view text);

}  // namespace gpulet

#endif  // GPULET_DOCTOR_EXPLAIN_H_
