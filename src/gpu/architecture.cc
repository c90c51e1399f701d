#include "gpu/architecture.h"

#include <string>

#include "absl/strings/ascii.h"
#include "gpu/nvml_api.h"

namespace gpulet {

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

Architecture ArchitectureFromNvml(unsigned nvml_arch) {
  // 11 and 12 are unassigned in the published headers; they stay kUnknown rather than
  // being guessed.
  switch (nvml_arch) {
    case NVML_DEVICE_ARCH_KEPLER:
      return Architecture::kKepler;
    case NVML_DEVICE_ARCH_MAXWELL:
      return Architecture::kMaxwell;
    case NVML_DEVICE_ARCH_PASCAL:
      return Architecture::kPascal;
    case NVML_DEVICE_ARCH_VOLTA:
      return Architecture::kVolta;
    case NVML_DEVICE_ARCH_TURING:
      return Architecture::kTuring;
    case NVML_DEVICE_ARCH_AMPERE:
      return Architecture::kAmpere;
    case NVML_DEVICE_ARCH_ADA:
      return Architecture::kAda;
    case NVML_DEVICE_ARCH_HOPPER:
      return Architecture::kHopper;
    case NVML_DEVICE_ARCH_BLACKWELL:
      return Architecture::kBlackwell;
    case NVML_DEVICE_ARCH_RUBIN:
      return Architecture::kRubin;
    default:
      return Architecture::kUnknown;
  }
}

}  // namespace gpulet
