// libFuzzer target for the evaluation set and catalogue readers (doctor/explain_eval.h,
// doctor/explain_catalog.h): a file someone edits by hand must give a value or an error that
// names where it is wrong, never a crash. A set that parses is scored against the built-in
// catalogue, which must then answer for every message or refuse the set with a reason.
//
// Built and run by scripts/fuzz.sh; seeds are the files of tests/explain_eval/ and
// src/doctor/explain/.
//
// Thread-safety: libFuzzer calls LLVMFuzzerTestOneInput from one thread.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "absl/strings/string_view.h"
#include "doctor/explain_catalog.h"
#include "doctor/explain_eval.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view input(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::vector<gpulet::doctor::EvalMessage>> set =
      gpulet::doctor::ParseEvalSet("fuzz.yaml", input);
  if (!set.ok() && set.status().message().empty()) std::abort();
  if (set.ok()) {
    absl::StatusOr<gpulet::doctor::EvalReport> r =
        gpulet::doctor::Evaluate(gpulet::doctor::BuiltinExplainCatalog(), *set);
    if (r.ok() && r->all.messages != set->size()) std::abort();
    if (!r.ok() && r.status().message().empty()) std::abort();
  }
  absl::StatusOr<gpulet::doctor::ExplainCatalog> catalog =
      gpulet::doctor::ExplainCatalog::ParseFiles(
          {gpulet::doctor::ExplainCatalogFile{"fuzz.yaml", input}});
  if (!catalog.ok() && catalog.status().message().empty()) std::abort();
  return 0;
}
