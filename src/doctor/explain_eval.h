// How well `gpulet explain` knows the field: an evaluation set of real messages (the files in
// tests/explain_eval/, one per area), each with the public page where it was seen and the
// explanation it should get, scored against a catalogue. `make explain-eval` prints the
// scores by area (src/explain_eval_main.cc); the explain_eval test holds them at their floor.
//
// A message is *recognised* when explain finds anything in it, and gets the *right cause*
// when the first explanation (explain's order: worst first, then by line, then the most
// specific) is the expected
// one. Expected ids are catalogue entry ids, "xid-<N>" (the XID table) or
// "nvml-<return-code>" ("nvml-gpu-is-lost"). A message whose text is one of its expected
// entry's own examples is refused: it would measure nothing.
//
// File format:
//   area: dcgm
//   messages:
//     - expect: dcgm-init-error
//       source: https://github.com/...
//       text: |-
//         the message as pasted
//
// Thread-safety: plain functions over values; safe to call concurrently.
#ifndef GPULET_DOCTOR_EXPLAIN_EVAL_H_
#define GPULET_DOCTOR_EXPLAIN_EVAL_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "doctor/explain_catalog.h"

namespace gpulet::doctor {

struct EvalMessage {
  std::string area;
  std::string expect;  // the id of the explanation it should get first
  std::string source;  // where it was seen (a URL)
  std::string text;
  std::string where;  // "dcgm.yaml: message 3", for reports
};

// Parses one evaluation file; `file` names it in errors and in each message's `where`.
absl::StatusOr<std::vector<EvalMessage>> ParseEvalSet(absl::string_view file,
                                                      absl::string_view yaml);

struct AreaScore {
  std::string area;  // "all" for the total
  size_t messages = 0;
  size_t recognised = 0;
  size_t right = 0;
};

struct EvalMiss {
  const EvalMessage* message = nullptr;
  std::vector<std::string> found;  // the ids explain gave, in its order (empty: none)
};

struct EvalReport {
  std::vector<AreaScore> areas;  // by area name
  AreaScore all;
  std::vector<EvalMiss> misses;  // not recognised, or the wrong cause first
};

// Scores `messages` against `catalog`. Errors (InvalidArgument, naming the message): an
// expected id that names no explanation, a text that copies its expected entry's example.
absl::StatusOr<EvalReport> Evaluate(const absl::StatusOr<ExplainCatalog>& catalog,
                                    const std::vector<EvalMessage>& messages);

// A catalogue read from the *.yaml files of `dir` (a catalogue being written), in name order.
absl::StatusOr<ExplainCatalog> LoadExplainCatalogDir(const std::string& dir);

}  // namespace gpulet::doctor

#endif  // GPULET_DOCTOR_EXPLAIN_EVAL_H_
