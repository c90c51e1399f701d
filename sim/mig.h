// MIG (Multi-Instance GPU) for the NVML simulator: the GPU instance profiles of each
// MIG-capable product, the placement rules, and the layout edits `gpulet sim mig` makes.
//
// The profile tables are data, in sim/mig.cc, with their source (NVIDIA's MIG user guide,
// "Supported MIG Profiles") named there and in sim/fixtures/README.md. A layout is a list of
// MigInstance (sim/state.h): one compute instance spanning each GPU instance, which is how
// mig-parted and the GPU operator partition a GPU.
//
// Placement model (as nvmlDeviceGetGpuInstancePossiblePlacements reports it): a 7-slice GPU
// has 8 memory slices; a profile occupies `memory_slices` of them from its start slice, may
// start only at the slices in `starts`, and no two GPU instances may share a memory slice.
//
// Used by the simulator library and by gpulet's `sim` command; standard library only.
// Thread-safety: the tables are constant; the functions keep no state.
#ifndef GPULET_SIM_MIG_H_
#define GPULET_SIM_MIG_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sim/state.h"

namespace gpulet::sim {

constexpr unsigned kMigMemorySlices = 8;
constexpr unsigned kMigComputeSlices = 7;  // nvmlDeviceGetMaxMigDeviceCount on these products
// GPU instance ids 0..14 and compute instance ids 0..7: the ranges the driver's
// /proc/driver/nvidia-caps/mig-minors names (gpu<g>/gi<i>/ci<c>).
constexpr unsigned kMaxGpuInstanceId = 14;
constexpr unsigned kMaxComputeInstanceId = 7;

// One GPU instance profile, as `nvidia-smi mig -lgip` lists it.
struct MigProfile {
  const char* name;          // "3g.71gb", "1g.18gb+me"
  unsigned nvml_id;          // NVML_GPU_INSTANCE_PROFILE_* (1_SLICE 0, ... 1_SLICE_REV2 9)
  unsigned smi_id;           // the ID column of `nvidia-smi mig -lgip` (19, 20, 15, ...)
  unsigned slices;           // compute slices (the "Ng"), of kMigComputeSlices
  unsigned memory_slices;    // of kMigMemorySlices
  uint64_t memory_mib;       // nvmlDeviceAttributes_t.memorySizeMB
  unsigned multiprocessors;  // SMs
  unsigned copy_engines;
  unsigned decoders;       // NVDEC
  unsigned encoders;       // NVENC
  unsigned jpegs;          // NVJPG
  unsigned ofas;           // optical flow accelerators
  unsigned max_instances;  // how many of this profile fit at once
  uint8_t starts;          // bit s set: may start at memory slice s
};

// A MIG-capable product and its profiles.
struct MigProduct {
  const char* label;               // "H100 80GB"
  std::vector<std::string> names;  // nvmlDeviceGetName values of this product
  unsigned multiprocessors;        // the whole GPU's SMs
  std::span<const MigProfile> profiles;
  const MigProfile& Full() const { return profiles.back(); }  // the 7g profile
};

std::span<const MigProduct> MigProducts();
// The product a GPU's nvmlDeviceGetName belongs to; nullptr when it has no table here.
const MigProduct* FindMigProduct(std::string_view gpu_name);
const MigProfile* FindMigProfile(const MigProduct& product, std::string_view name);
// "1g.18gb, 1g.18gb+me, 1g.35gb, ...", for error messages.
std::string MigProfileNames(const MigProduct& product);
// "0, 2, 4": where `profile` may start.
std::string MigStarts(const MigProfile& profile);

// Why `layout` is not valid on `product` with MIG `enabled` (or disabled), naming the instance
// at fault; empty when it is valid. Checks: instances while disabled, unknown profiles, bad
// start slices, ids out of range or repeated, repeated UUIDs, overlaps, per-profile counts.
std::string CheckMigLayout(const MigProduct& product, bool enabled,
                           const std::vector<MigInstance>& layout);

// The layout sorted the way nvmlDeviceGetMigDeviceHandleByIndex counts MIG devices: by GPU
// instance id, then compute instance id.
std::vector<MigInstance> SortedMigLayout(std::vector<MigInstance> layout);

// A stable, readable MIG UUID for (parent GPU, GPU instance, compute instance): the same
// inputs always give the same "MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
std::string MigUuid(std::string_view parent_uuid, unsigned gpu_instance, unsigned compute_instance);

// Layout edits. Each returns an empty string on success or why it failed; `*usage` (when not
// null) says whether the request itself was malformed (unknown profile, a start slice the
// profile never takes) rather than refused by the current layout (no room, unknown id).
//
// Adds `profile` at `start` (or the lowest free start when nullopt) with the lowest free GPU
// instance id from 1, compute instance 0 and MigUuid(parent_uuid, ...).
std::string MigCreate(const MigProduct& product, std::string_view parent_uuid,
                      std::string_view profile, std::optional<unsigned> start,
                      std::vector<MigInstance>* layout, bool* usage);
std::string MigDestroy(unsigned gpu_instance, std::vector<MigInstance>* layout, bool* usage);
// Replaces the layout by `profiles`, placed largest first at the lowest starts that let all
// of them fit (ids 1, 2, ... in that order).
std::string MigLayout(const MigProduct& product, std::string_view parent_uuid,
                      const std::vector<std::string>& profiles, std::vector<MigInstance>* layout,
                      bool* usage);

}  // namespace gpulet::sim

#endif  // GPULET_SIM_MIG_H_
