// Architecture: the NVIDIA GPU generation (Kepler ... Rubin) a device belongs to.
//
// Several decisions in gpulet hang on the generation rather than on the exact product: which
// kernel-module flavour can drive the card (open modules need Turing or newer; Blackwell and
// newer need them), which NVML features to expect, how to word advice. The value comes from
// NVML when the driver is up (nvmlDeviceGetArchitecture) and from the compiled-in PCI table
// (pci_ids.h) when it is not, so both sources map into this one enum.
//
// Thread-safety: pure functions over constants; safe to call concurrently.
#ifndef GPULET_NODE_ARCHITECTURE_H_
#define GPULET_NODE_ARCHITECTURE_H_

#include "absl/strings/string_view.h"

namespace gpulet::node {

// Ordered by release, so comparisons such as `arch >= Architecture::kTuring` mean "this
// generation or newer" (kUnknown sorts first and must be checked separately).
enum class Architecture {
  kUnknown,
  kKepler,
  kMaxwell,
  kPascal,
  kVolta,
  kTuring,
  kAmpere,
  kAda,
  kHopper,
  kBlackwell,
  kRubin,
};

// The name nvidia-smi prints for the generation: "Ampere", "Ada Lovelace", "Blackwell";
// "Unknown" for kUnknown.
absl::string_view ArchitectureName(Architecture arch);

// Parses a generation name, case-insensitively: what ArchitectureName returns, plus the
// short forms "ada" and "lovelace". kUnknown for anything else.
Architecture ArchitectureFromName(absl::string_view name);

}  // namespace gpulet::node

#endif  // GPULET_NODE_ARCHITECTURE_H_
