// A simulator fixture: the static description of one machine's driver and GPUs, read from
// the YAML files in sim/fixtures/ (schema in sim/fixtures/README.md).
//
// Every optional value models an NVML query that may be unsupported on that GPU: an empty
// optional answers NVML_ERROR_NOT_SUPPORTED. Values are in NVML's units (MiB in the YAML
// are converted to bytes only at the API boundary; power is milliwatts here).
//
// The simulator library reads fixtures; gpulet itself reads one only for `gpulet sim mig`,
// which checks a MIG layout against the fixture GPU's product. Thread-safety: LoadFixture
// keeps no state; a Fixture is a plain value, safe to read from many threads once built.
#ifndef GPULET_SIM_FIXTURE_H_
#define GPULET_SIM_FIXTURE_H_

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "sim/state.h"

namespace gpulet::sim {

struct MigProduct;

struct EccInfo {
  bool enabled = true;
  bool pending = true;  // the mode after the next reboot
  // [error type: corrected 0, uncorrected 1][counter: volatile 0, aggregate 1]
  uint64_t counts[2][2] = {{0, 0}, {0, 0}};
};

struct CodecUtilization {
  unsigned utilization = 0;  // percent
  unsigned sampling_period_us = 0;
};

// A GPU's NVLinks. The fixture gives one set of error counters for every link; the state's
// NVLink overrides are folded in by the simulator (down, link_errors).
struct NvLinkInfo {
  unsigned links = 0;        // 1..kMaxNvLinks
  int remote_type = 2;       // nvmlIntNvLinkDeviceType_t of every link's far end: GPU 0, switch 2
  uint64_t data_tx_kib = 0;  // all links' data payload counters when nvmlInit runs
  uint64_t data_rx_kib = 0;
  std::array<uint64_t, 4> errors = {0, 0, 0, 0};            // by nvmlNvLinkErrorCounter_t, per link
  std::set<unsigned> down;                                  // links reported inactive
  std::map<unsigned, std::array<uint64_t, 4>> link_errors;  // links whose counters differ
};

// nvmlDeviceGetMigMode's answer (NVML_DEVICE_MIG_DISABLE 0 / ENABLE 1) and the MIG devices;
// present = MIG-capable.
struct MigMode {
  unsigned current = 0;
  unsigned pending = 0;  // the mode after the next GPU reset
  // The layout, checked against the product's profile table (sim/mig.h); empty unless current
  // is enabled.
  std::vector<MigInstance> instances;
};

struct FixtureGpu {
  // Identity.
  std::string name;
  std::string uuid;
  std::optional<std::string> serial;
  std::optional<std::string> vbios_version;
  unsigned minor = 0;
  unsigned pci_domain = 0;
  unsigned pci_bus = 0;
  unsigned pci_device = 0;
  unsigned pci_device_id = 0;     // the 16-bit PCI device id, e.g. 0x2330
  unsigned pci_subsystem_id = 0;  // (subsystem id << 16) | subsystem vendor id
  std::optional<int> brand;
  std::optional<unsigned> architecture;
  std::optional<std::pair<int, int>> compute_capability;
  std::optional<bool> persistence_mode;

  // Memory, MiB. used excludes reserved.
  uint64_t memory_total_mib = 0;
  uint64_t memory_reserved_mib = 0;
  uint64_t memory_used_mib = 0;

  // Live values.
  std::optional<unsigned> power_limit_mw;
  std::optional<unsigned> power_usage_mw;
  std::optional<uint64_t> energy_mj;  // counter value when nvmlInit runs
  // Indexed by nvmlClockType_t: graphics, sm, memory, video.
  std::array<std::optional<unsigned>, 4> clocks_mhz;
  std::array<std::optional<unsigned>, 4> max_clocks_mhz;
  std::optional<unsigned> temperature_c;
  std::optional<unsigned> memory_temperature_c;
  std::optional<unsigned> fan_percent;
  std::optional<unsigned> pstate;
  std::optional<uint64_t> clocks_event_reasons;
  std::optional<std::pair<unsigned, unsigned>> utilization;  // gpu %, memory %
  std::optional<CodecUtilization> encoder;
  std::optional<CodecUtilization> decoder;
  std::optional<unsigned> pcie_replay;
  std::optional<EccInfo> ecc;
  std::optional<RemappedRows> remapped_rows;
  // Set only from the fault-injection state (GpuState::recovery_action).
  std::optional<unsigned> recovery_action;
  std::vector<SimProcess> processes;

  // GPU Performance Monitoring values by NVML_GPM_METRIC_* id (percent or MiB/s); absent:
  // the GPU has no GPM (nvmlGpmQueryDeviceSupport says unsupported). Metrics missing from
  // the map are NOT_SUPPORTED one by one.
  std::optional<std::map<unsigned, double>> gpm;
  std::optional<NvLinkInfo> nvlink;  // absent: no NVLink (every NVLink query NOT_SUPPORTED)
  std::optional<MigMode> mig;        // absent: not MIG-capable
  // The MIG profile table of this product (found by `name`); nullptr when sim/mig.h has none,
  // and then the GPU can have no MIG instances.
  const MigProduct* mig_product = nullptr;
  int virtualization_mode = 0;  // nvmlGpuVirtualizationMode_t; 0 = none (bare metal)
};

struct Fixture {
  std::string driver_version;
  std::string nvml_version;
  int cuda_driver_version = 0;
  std::vector<FixtureGpu> gpus;
};

// Reads and validates a fixture file. On failure returns false and sets `*error` to one
// line naming the file, the position and the problem. Never throws.
bool LoadFixture(const std::string& path, Fixture* out, std::string* error);

// Parses and validates fixture text; `file` names it in errors ("FILE:LINE:COLUMN: ...").
bool ParseFixture(std::string_view text, const std::string& file, Fixture* out, std::string* error);

// Parses "0000:01:00.0", "00000000:01:00.0" or "01:00.0" (domain 0), case-insensitive.
bool ParsePciBusId(const std::string& text, unsigned* domain, unsigned* bus, unsigned* device);

}  // namespace gpulet::sim

#endif  // GPULET_SIM_FIXTURE_H_
