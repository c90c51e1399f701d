// PCI ID knowledge compiled into gpulet: which NVIDIA PCI device ID is which product, of
// which generation, with how much memory, and which kernel-module flavour it needs.
//
// gpulet has to name GPUs before the NVIDIA driver works (that is exactly when an operator
// runs `gpulet doctor`), so it cannot ask NVML. The system's pci.ids is no help either: it is
// often absent from minimal images, and Debian 12's copy (2023-04) knows neither the H200
// nor any Blackwell part. The table here lists the data-centre, workstation and desktop parts
// a Kubernetes node is likely to carry; product names are spelled the way NVML reports them
// ("NVIDIA H100 80GB HBM3", "Tesla T4") so that a name seen before the driver loads matches
// the one seen after. Sources: Debian's pci.ids for pre-2023 parts, NVIDIA's supported-GPU
// list in the driver README and NVIDIA's gpu-admin-tools for later ones.
//
// Thread-safety: the table is immutable; all functions are safe to call concurrently.
#ifndef GPULET_NODE_PCI_IDS_H_
#define GPULET_NODE_PCI_IDS_H_

#include <cstdint>
#include <span>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "node/architecture.h"

namespace gpulet::node {

inline constexpr uint16_t kNvidiaPciVendorId = 0x10de;

// Which flavour of NVIDIA kernel modules a GPU can run with.
enum class ModuleFlavor {
  // Open or proprietary both work (Turing, Ampere, Ada, Hopper). NVIDIA recommends the
  // open modules from the 560 driver series on. Also the answer for an unknown generation,
  // where gpulet has no grounds to insist on either.
  kEither,
  // Only the open modules (Blackwell and newer): the proprietary ones do not support them.
  // On Talos: the `nvidia-open-gpu-kernel-modules-production` extension.
  kOpenRequired,
  // Only the proprietary modules (Maxwell, Pascal, Volta; Kepler too, though only legacy
  // drivers up to the 470 series still support it): the open modules need the GSP that
  // Turing introduced. On Talos: the `nonfree-kmod-nvidia-production` extension.
  kProprietaryRequired,
};

// The flavour a generation needs (see ModuleFlavor).
ModuleFlavor ModuleFlavorFor(Architecture arch);

// "either", "open required", "proprietary required".
absl::string_view ModuleFlavorName(ModuleFlavor flavor);

// The Talos system extension that provides modules of a suitable flavour; for kEither the
// recommended one (open).
absl::string_view TalosExtensionFor(ModuleFlavor flavor);

// One row of the table.
struct PciDeviceInfo {
  uint16_t device_id;
  // As NVML's nvmlDeviceGetName reports it. Where one device ID covers several products
  // told apart only by subsystem ID (A2 and A16 share 0x25b6), both are named.
  absl::string_view product;
  Architecture architecture;
  // Memory per GPU as marketed, e.g. "10 GB"; "24/48 GB" where one device ID ships with
  // either amount.
  absl::string_view memory;
};

// The table entry for an NVIDIA device ID, or nullptr when it is not in the table.
const PciDeviceInfo* LookupPciDevice(uint16_t device_id);

// The whole table, sorted by device ID (for `gpulet explain` and tests).
std::span<const PciDeviceInfo> AllPciDevices();

// A GUESS at the generation of an NVIDIA device ID that is not in the table, from the
// device-ID block NVIDIA assigns to each GPU die (e.g. 0x2b80-0x2bff is GB202, Blackwell).
// Blocks have held for every generation so far but are not a published contract: use this
// only for IDs LookupPciDevice does not know, and say "probably" when reporting it. kUnknown
// for IDs outside every known block. Only meaningful for GPU functions: filter by PCI class
// first (a card's HDMI audio function has an ID of its own, usually outside the blocks).
Architecture GuessArchitectureFromDeviceId(uint16_t device_id);

// A vendor:device pair as lspci -n and udev print it.
struct PciId {
  uint16_t vendor_id = 0;
  uint16_t device_id = 0;
};

// Parses "10de:2b85" (either case, surrounding whitespace ignored; each half 1-4 hex digits,
// with an optional "0x"). InvalidArgument otherwise.
absl::StatusOr<PciId> ParsePciId(absl::string_view text);

// Parses one 16-bit hex ID as sysfs writes it ("0x2b85\n") or as people type it ("2B85").
// InvalidArgument for an empty, non-hex or too-large value.
absl::StatusOr<uint16_t> ParsePciHexId(absl::string_view text);

}  // namespace gpulet::node

#endif  // GPULET_NODE_PCI_IDS_H_
