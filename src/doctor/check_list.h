// The checks of `gpulet doctor`: each one's id (what `doctor --json` prints and explain's
// catalogue names in `check:`) and the title the report prints, in the report's order. The
// one list: the checks take their titles from it, the catalogue's `check:` names are held to
// it, a test holds the report to it (every id runs, in this order), and another holds
// docs/troubleshooting.md's table to the report.
//
// Thread-safety: constant data.
#ifndef GPULET_DOCTOR_CHECK_LIST_H_
#define GPULET_DOCTOR_CHECK_LIST_H_

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace gpulet::doctor {

struct CheckInfo {
  absl::string_view id;
  absl::string_view title;
};

// Every check, in report order.
absl::Span<const CheckInfo> CheckList();

// The title of check `id`; "" when `id` is not a check.
absl::string_view CheckTitle(absl::string_view id);

}  // namespace gpulet::doctor

#endif  // GPULET_DOCTOR_CHECK_LIST_H_
