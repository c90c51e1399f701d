// The NVML simulator's fault-injection state: the model, its JSON file format, and the
// edits `gpulet sim ...` makes to it.
//
// The simulator (libgpulet-nvml-sim.so) answers from a fixture (static YAML, see
// sim/fixtures/README.md) plus this state, which lives in a JSON file named by
// $GPULET_SIM_STATE. Another process (a test, or `gpulet sim`) rewrites that file while
// gpulet runs: LoadState() + the helpers below + SaveStateAtomic(). The simulator notices
// the new file on its next call and, for example, reports a GPU as lost or delivers an
// injected XID to event sets. The JSON format is documented in sim/fixtures/README.md.
//
// This file is compiled into both the simulator and gpulet_core, so it uses only the
// standard library and nlohmann::json, and never lets an exception out.
//
// Thread-safety: the types are plain values with no synchronisation; the functions keep no
// state and are safe to call concurrently on different objects. Writers of one state file
// race each other (read-modify-write); serialise them if more than one process edits it.
#ifndef GPULET_SIM_STATE_H_
#define GPULET_SIM_STATE_H_

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gpulet::sim {

// One injected XID. `seq` orders injections across the whole file; the simulator delivers
// each (GPU, seq) to event sets once, so it must increase (InjectXid takes care of that).
struct XidEvent {
  uint64_t seq = 0;
  unsigned xid = 0;
  // The MIG instance the XID names (the driver's "GPU-I:NN GPU-CI:NN"); unset: the whole GPU,
  // reported as NVML_INVALID_INSTANCE_ID.
  std::optional<unsigned> gpu_instance;
  std::optional<unsigned> compute_instance;
};

enum class ProcessType { kCompute, kGraphics };

struct SimProcess {
  unsigned pid = 0;
  std::string name;
  uint64_t used_mib = 0;
  ProcessType type = ProcessType::kCompute;
  // The MIG instance the process runs in; unset: not in one. A process naming an instance the
  // GPU's current layout lacks is not reported at all.
  std::optional<unsigned> gpu_instance;
  std::optional<unsigned> compute_instance;  // unset: the GPU instance's compute instance
  // SM utilisation in percent (0..100), nvmlDeviceGetProcessUtilization's smUtil; unset: the
  // driver has no sample for the process.
  std::optional<unsigned> sm_util;
};

// One MIG device: a GPU instance with one compute instance spanning it (the layout
// mig-parted creates). Profiles and placements are checked against sim/mig.h's tables.
struct MigInstance {
  unsigned gpu_instance = 0;
  unsigned compute_instance = 0;
  std::string profile;     // "3g.71gb"
  unsigned placement = 0;  // first memory slice, 0..7
  std::string uuid;        // "MIG-..."
  // GPM values for nvmlGpmMigSampleGet by GpmMetric name; absent: that call is NOT_SUPPORTED.
  std::optional<std::map<std::string, double>> gpm;

  bool operator==(const MigInstance&) const = default;
};

// A GPU's MIG mode and instances, replacing the fixture's (`gpulet sim mig`). Current and
// pending mode are both `enabled`: the simulated operator resets the GPU after a change.
struct MigOverride {
  bool enabled = false;
  std::vector<MigInstance> instances;
};

// A GPU Performance Monitoring metric the simulator serves, by the name fixtures, state files
// and `gpulet sim load --gpm` use. Values are in NVML's units: utilisations in percent
// (0..100), rates in MiB per second (>= 0).
struct GpmMetric {
  const char* name;       // e.g. "sm_util"
  unsigned id;            // NVML_GPM_METRIC_*
  bool percent;           // false: a rate in MiB/s
  const char* long_name;  // for nvmlGpmMetric_t.metricInfo
};
// Every metric served, in NVML id order.
std::span<const GpmMetric> GpmMetrics();
// nullptr when the name or id is not one of GpmMetrics().
const GpmMetric* FindGpmMetric(std::string_view name);
const GpmMetric* FindGpmMetricById(unsigned id);
// Whether `value` is in the metric's range (finite; 0..100 for percent, >= 0 for rates).
bool GpmValueInRange(const GpmMetric& metric, double value);
// "graphics_util, sm_util, ...", for error messages.
std::string GpmMetricNames();

// NVLink: NVML_NVLINK_MAX_LINKS, and the data-link error counters by nvmlNvLinkErrorCounter_t
// (replay 0, recovery 1, crc_flit 2, crc_data 3) as fixtures, state files and `gpulet sim`
// name them.
constexpr unsigned kMaxNvLinks = 18;
constexpr std::array<std::string_view, 4> kNvLinkCounterNames = {"replay", "recovery", "crc_flit",
                                                                 "crc_data"};
using NvLinkCounters = std::array<std::optional<uint64_t>, 4>;  // unset: keep the fixture's

// Per-link NVLink faults on one GPU. Links past the GPU's link count are ignored.
struct NvLinkOverride {
  std::set<unsigned> down;                    // links forced inactive
  std::map<unsigned, NvLinkCounters> errors;  // error counters by link

  bool empty() const { return down.empty() && errors.empty(); }
};

// Live values that replace the fixture's. Unset fields keep the fixture value. An override
// never makes an unsupported value supported: a fixture's `unsupported` wins.
struct LoadOverride {
  std::optional<unsigned> utilization_gpu;     // percent
  std::optional<unsigned> utilization_memory;  // percent
  std::optional<uint64_t> memory_used_mib;     // excluding reserved memory
  std::optional<unsigned> temperature_c;
  std::optional<unsigned> memory_temperature_c;
  std::optional<double> power_w;
  std::optional<unsigned> fan_percent;
  std::optional<unsigned> pstate;  // 0..15
  std::optional<uint64_t> clocks_event_reasons;
  std::optional<unsigned> pcie_replay;
  std::optional<unsigned> encoder_utilization;
  std::optional<unsigned> decoder_utilization;
  std::optional<unsigned> graphics_clock_mhz;
  std::optional<unsigned> sm_clock_mhz;
  std::optional<unsigned> memory_clock_mhz;
  std::optional<unsigned> video_clock_mhz;
  // GPM metric values by GpmMetric::name. A metric (or the whole of GPM) that the fixture
  // does not serve stays unsupported.
  std::map<std::string, double> gpm;
};

struct RemappedRows {
  unsigned correctable = 0;
  unsigned uncorrectable = 0;
  bool pending = false;
  bool failure = false;
};

struct EccErrors {
  uint64_t volatile_corrected = 0;
  uint64_t volatile_uncorrected = 0;
  uint64_t aggregate_corrected = 0;
  uint64_t aggregate_uncorrected = 0;
};

// Faults and overrides for one GPU.
struct GpuState {
  bool lost = false;            // every call on the GPU returns NVML_ERROR_GPU_IS_LOST
  bool reset_required = false;  // every call on the GPU returns NVML_ERROR_RESET_REQUIRED
  double hang_seconds = 0;      // every call on the GPU first sleeps this long
  std::vector<XidEvent> xids;
  LoadOverride load;
  std::optional<std::vector<SimProcess>> processes;  // replaces the fixture's list
  std::optional<RemappedRows> remapped_rows;
  std::optional<EccErrors> ecc_errors;
  // NVML_FI_DEV_GET_GPU_RECOVERY_ACTION's value (0 none .. 4 drain and reset); absent: the
  // field is not supported, as on drivers before R570.
  std::optional<unsigned> recovery_action;
  NvLinkOverride nvlink;
  // Ignored on GPUs that are not MIG-capable, and (with one stderr line) when the layout does
  // not fit the product's profile table.
  std::optional<MigOverride> mig;
  // A card that faults again after every reset (ResetGpu raises its last XID anew), as a
  // failing card does; otherwise a reset clears what a reset clears.
  bool faults_after_reset = false;
  // A card that fails again after every reboot: RebootNode brings it back, and this many
  // seconds later it falls off the bus again with its last XID anew (lost_at); 0: it does not.
  double fails_after_reboot_s = 0;
  // Seconds since the epoch from which the card answers as lost (GPU_IS_LOST), as if `lost`
  // were set then; its XID (seq at that time) is delivered then too. Unset: no such time.
  std::optional<double> lost_at;
  // The card's minor number (/dev/nvidia<minor>) now; unset: the fixture's. A card that came
  // back after a PCI rescan or a driver reload may come back on another one.
  std::optional<unsigned> minor;
};

struct SimState {
  bool driver_not_loaded = false;  // nvmlInit_v2 returns NVML_ERROR_DRIVER_NOT_LOADED
  bool init_crash = false;         // nvmlInit_v2 raises SIGSEGV
  double init_hang_seconds = 0;    // nvmlInit_v2 sleeps this long first
  uint64_t next_xid_seq = 1;       // lower bound for the next XidEvent::seq
  uint64_t boots = 0;              // RebootNode's count: the simulated node's reboots
  // Key: a GPU UUID ("GPU-...") or a decimal index ("0"). When both name the same GPU the
  // simulator merges them (see MergedGpuState).
  std::map<std::string, GpuState> gpus;
};

// True for "GPU-..." / "MIG-..." UUIDs and decimal indices below 1024.
bool IsValidGpuKey(std::string_view key);

// Parses / prints the JSON form. Parsing is strict: unknown keys, wrong types and invalid
// GPU keys are errors (a typo must not silently inject nothing). On failure `*out` is left
// unchanged and `*error` (if not null) says what and where.
bool StateFromJson(std::string_view text, SimState* out, std::string* error);
std::string StateToJson(const SimState& state);

// Reads `path`. A file that does not exist is the empty state (no faults) and succeeds, so a
// writer can start from nothing and the simulator treats a deleted file as "all clear".
bool LoadState(const std::string& path, SimState* out, std::string* error);

// Writes `path` through a temporary file in the same directory and rename(2), so the
// simulator never reads a half-written file.
bool SaveStateAtomic(const std::string& path, const SimState& state, std::string* error);

// Edits. The ones taking a GPU key return false (and change nothing) when the key is not
// IsValidGpuKey; they never check that such a GPU exists (the state does not know the
// fixture) - keys that match no GPU are ignored by the simulator.
//
// Appends an XID with a fresh sequence number: max(next_xid_seq, microseconds since the
// epoch), so numbers keep increasing even when the file is deleted and written anew while
// the simulator runs.
bool InjectXid(SimState* state, const std::string& gpu_key, unsigned xid,
               std::optional<unsigned> gpu_instance = std::nullopt,
               std::optional<unsigned> compute_instance = std::nullopt);
// false also clears lost_at: the card answers normally again.
bool SetLost(SimState* state, const std::string& gpu_key, bool lost);
bool SetResetRequired(SimState* state, const std::string& gpu_key, bool reset_required);
bool SetHang(SimState* state, const std::string& gpu_key, double seconds);
bool SetFaultsAfterReset(SimState* state, const std::string& gpu_key, bool faults);
// `seconds` > 0: the card falls off the bus again that long after every reboot; 0: it does not.
bool SetFailsAfterReboot(SimState* state, const std::string& gpu_key, double seconds);
// nullopt: back to the fixture's minor number.
bool SetMinor(SimState* state, const std::string& gpu_key, std::optional<unsigned> minor);
// What a GPU reset does to the card the key names (that entry only): the faults a reset
// clears go (reset required, a hang, a recovery action back to none where the driver
// reports one) and so do the processes it ran; a card that falls off the bus stays lost (a
// reboot is its recovery). A card set faults_after_reset raises its last XID again, with
// a new sequence number.
bool ResetGpu(SimState* state, const std::string& gpu_key);
// What a reboot of the node does to every card: what a reset clears goes, and so do the
// cards that had fallen off the bus, their processes, live values and minor numbers (the
// driver enumerates them anew); what the card keeps across a power cycle stays (row
// remapping, ECC counts, the MIG layout, NVLink faults). A card with fails_after_reboot_s
// comes back and falls off the bus again that long after now (lost_at), raising its last
// XID again then. Counts the boot (`boots`).
void RebootNode(SimState* state);
// Merges the set fields of `load` into the GPU's overrides.
bool SetLoad(SimState* state, const std::string& gpu_key, const LoadOverride& load);
// Adds (or replaces, by pid) a process. The first call starts an override list, which hides
// the fixture's processes on that GPU; SetProcesses(..., {}) shows an idle GPU.
bool AddProcess(SimState* state, const std::string& gpu_key, const SimProcess& process);
bool SetProcesses(SimState* state, const std::string& gpu_key,
                  const std::vector<SimProcess>& processes);
bool SetRemappedRows(SimState* state, const std::string& gpu_key, const RemappedRows& rows);
bool SetEccErrors(SimState* state, const std::string& gpu_key, const EccErrors& errors);
// nullopt: the GPU's driver does not report a recovery action (the field is unsupported).
bool SetRecoveryAction(SimState* state, const std::string& gpu_key, std::optional<unsigned> action);
// Forces NVLink `link` down (true) or back up (false; nullopt leaves it) and sets the error
// counters given in `errors`. False (nothing changed) for a bad key or link >= kMaxNvLinks.
bool SetNvLink(SimState* state, const std::string& gpu_key, unsigned link, std::optional<bool> down,
               const NvLinkCounters& errors);
// Replaces the GPU's MIG mode and layout (no checks here: sim/mig.h has them); ClearMig
// returns to the fixture's.
bool SetMig(SimState* state, const std::string& gpu_key, const MigOverride& mig);
bool ClearMig(SimState* state, const std::string& gpu_key);
void SetDriverNotLoaded(SimState* state, bool not_loaded);
void SetInitCrash(SimState* state, bool crash);
void SetInitHang(SimState* state, double seconds);
// Clears every fault and override but keeps next_xid_seq, so XIDs injected after a reset
// are still new to a running simulator, and the count of boots.
void Reset(SimState* state);

// The effective state of GPU `index` with UUID `uuid`: the entries keyed by index and by
// UUID combined. Flags are OR-ed, the hang is the longer one, XIDs are concatenated (sorted
// by seq), NVLinks forced down by either are down, and for overrides (GPM metrics and NVLink
// counters, the MIG layout included) the UUID entry wins field by field.
GpuState MergedGpuState(const SimState& state, unsigned index, std::string_view uuid);

// Seconds and microseconds since the epoch, the clock of lost_at and of XID sequence numbers.
double WallSeconds();
uint64_t WallMicros();
// Whether a GPU in `state` answers as lost at `now_s` (WallSeconds).
bool LostAt(const GpuState& state, double now_s);
// LostAt now; reads the clock only for a GPU with a lost_at (every NVML call asks this).
bool LostNow(const GpuState& state);

}  // namespace gpulet::sim

#endif  // GPULET_SIM_STATE_H_
