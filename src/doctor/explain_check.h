// `gpulet explain --check`: what this node's `gpulet doctor` checks say about an explanation.
// An entry names the doctor check that catches its cause; a message with several causes
// names one per candidate where a check can tell. The node's report then says whether the
// named cause is present, or which candidate it points at: the first whose check fails or
// warns. When every candidate check passes, the causes they test are ruled out and the
// candidates without a check remain.
//
// Thread-safety: a pure function over its arguments.
#ifndef GPULET_DOCTOR_EXPLAIN_CHECK_H_
#define GPULET_DOCTOR_EXPLAIN_CHECK_H_

#include <optional>
#include <string>
#include <vector>

#include "doctor/doctor.h"
#include "doctor/explain.h"

namespace gpulet::doctor {

struct NodeAnswer {
  const CheckResult* check = nullptr;  // the entry's check, as run here; null: none or not run
  std::vector<const CheckResult*> candidate_checks;  // one per candidate; null where none
  std::optional<size_t> likely;   // the candidate the node's checks point at (0-based)
  std::vector<size_t> ruled_out;  // candidates whose check passed
  std::string summary;            // one sentence for a person
};

// REQUIRES: `report` outlives the answer (it points into it).
NodeAnswer AnswerOnNode(const Explanation& e, const Report& report);

}  // namespace gpulet::doctor

#endif  // GPULET_DOCTOR_EXPLAIN_CHECK_H_
