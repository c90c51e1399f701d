#include "gpu/nvml_attempt.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gpulet::gpu {
namespace {

absl::string_view ResultWord(NvmlLoadAttempt::Result r) {
  switch (r) {
    case NvmlLoadAttempt::Result::kAbsent:
      return "not found";
    case NvmlLoadAttempt::Result::kRejected:
      return "rejected";
    case NvmlLoadAttempt::Result::kProbeFailed:
      return "probe failed";
    case NvmlLoadAttempt::Result::kLoadFailed:
      return "load failed";
    case NvmlLoadAttempt::Result::kLoaded:
      return "loaded";
  }
  return "?";
}

}  // namespace

const char* NvmlLoadReasonName(NvmlLoadAttempt::Reason reason) {
  using R = NvmlLoadAttempt::Reason;
  switch (reason) {
    case R::kNone:
      return "loaded";
    case R::kNotFound:
      return "not found";
    case R::kNeedsNewerGlibc:
      return "needs a newer glibc";
    case R::kIncompatible:
      return "wrong ELF class or machine";
    case R::kNotALibrary:
      return "not a shared library file";
    case R::kDamaged:
      return "truncated or damaged";
    case R::kCrashed:
      return "crashed";
    case R::kHung:
      return "hung";
    case R::kDriverError:
      return "driver error";
    case R::kUnusable:
      return "not a usable NVML";
    case R::kWorkerFailed:
      return "worker failed";
  }
  return "?";
}

std::string FormatAttempts(const std::vector<NvmlLoadAttempt>& attempts) {
  std::string out;
  for (const NvmlLoadAttempt& a : attempts) {
    absl::StrAppend(&out, "\n  - ", a.candidate, a.note.empty() ? "" : " [", a.note,
                    a.note.empty() ? "" : "]", ": ", ResultWord(a.result));
    if (!a.status.ok() && a.result != NvmlLoadAttempt::Result::kAbsent) {
      absl::StrAppend(&out, ": ", a.status.message());
    }
  }
  return out;
}

}  // namespace gpulet::gpu
