#include "node/architecture.h"

#include <string>

#include "absl/strings/ascii.h"

namespace gpulet::node {

absl::string_view ArchitectureName(Architecture arch) {
  switch (arch) {
    case Architecture::kKepler:
      return "Kepler";
    case Architecture::kMaxwell:
      return "Maxwell";
    case Architecture::kPascal:
      return "Pascal";
    case Architecture::kVolta:
      return "Volta";
    case Architecture::kTuring:
      return "Turing";
    case Architecture::kAmpere:
      return "Ampere";
    case Architecture::kAda:
      return "Ada Lovelace";
    case Architecture::kHopper:
      return "Hopper";
    case Architecture::kBlackwell:
      return "Blackwell";
    case Architecture::kRubin:
      return "Rubin";
    case Architecture::kUnknown:
      break;
  }
  return "Unknown";
}

Architecture ArchitectureFromName(absl::string_view name) {
  std::string lower = absl::AsciiStrToLower(absl::StripAsciiWhitespace(name));
  // "ada" and "lovelace" are both in common use (NVML's enum says ADA, marketing says
  // Ada Lovelace), so accept either half.
  if (lower == "ada" || lower == "lovelace") return Architecture::kAda;
  for (Architecture arch :
       {Architecture::kKepler, Architecture::kMaxwell, Architecture::kPascal, Architecture::kVolta,
        Architecture::kTuring, Architecture::kAmpere, Architecture::kAda, Architecture::kHopper,
        Architecture::kBlackwell, Architecture::kRubin}) {
    if (lower == absl::AsciiStrToLower(ArchitectureName(arch))) return arch;
  }
  return Architecture::kUnknown;
}

}  // namespace gpulet::node
