#include "sim/mig.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <set>
#include <tuple>

namespace gpulet::sim {
namespace {

// Source: NVIDIA Multi-Instance GPU User Guide, "Supported MIG Profiles"
// (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html):
// profile names, fractions of memory and SMs, NVDEC/JPEG/OFA units, copy engines, instance
// counts and placements (the guide's placement figures; `nvidia-smi mig -lgipp` prints the
// same as {starts}:memory slices). Profile ids: NVML's nvmlGpuInstanceProfile values
// (NVML_GPU_INSTANCE_PROFILE_1_SLICE 0, 2_SLICE 1, 3_SLICE 2, 4_SLICE 3, 7_SLICE 4,
// 1_SLICE_REV1 7 = "+me", 1_SLICE_REV2 9 = the double-memory 1g) and the nvidia-smi ids.
//
// The guide gives memory as a fraction (1/8, 2/8, 4/8, full); memory_mib here is that
// fraction of the product's memory (the fixtures' nvmlDeviceGetMemoryInfo total; 183359 MiB
// for B200) rounded down to a multiple of 256 MiB, close to what a driver reports and always
// giving the canonical name under go-nvlib's naming rule (sim/mig_test.cc checks that).
// SM counts: H100 and H200 (132 SMs) as `nvidia-smi mig -lgip` lists them; B200 (148 SMs)
// has no per-profile SM count in the guide, so its values are 148 x slices / 7, rounded down.
constexpr uint8_t kAny1g = 0x7f;   // starts 0..6
constexpr uint8_t kEven = 0x55;    // 0, 2, 4, 6
constexpr uint8_t kEven3 = 0x15;   // 0, 2, 4
constexpr uint8_t kHalves = 0x11;  // 0, 4
constexpr uint8_t kFirst = 0x01;   // 0

// name, nvml id, smi id, slices, memory slices, MiB, SMs, CE, NVDEC, NVENC, JPEG, OFA, max,
// starts.
constexpr MigProfile kH100Profiles[] = {
    {"1g.10gb", 0, 19, 1, 1, 9984, 16, 1, 1, 0, 1, 0, 7, kAny1g},
    {"1g.10gb+me", 7, 20, 1, 1, 9984, 16, 1, 1, 0, 1, 1, 1, kAny1g},
    {"1g.20gb", 9, 15, 1, 2, 20224, 26, 1, 1, 0, 1, 0, 4, kEven},
    {"2g.20gb", 1, 14, 2, 2, 20224, 32, 2, 2, 0, 2, 0, 3, kEven3},
    {"3g.40gb", 2, 9, 3, 4, 40704, 60, 3, 3, 0, 3, 0, 2, kHalves},
    {"4g.40gb", 3, 5, 4, 4, 40704, 64, 4, 4, 0, 4, 0, 1, kFirst},
    {"7g.80gb", 4, 0, 7, 8, 81408, 132, 8, 7, 0, 7, 1, 1, kFirst},
};
constexpr MigProfile kH200Profiles[] = {
    {"1g.18gb", 0, 19, 1, 1, 17920, 16, 1, 1, 0, 1, 0, 7, kAny1g},
    {"1g.18gb+me", 7, 20, 1, 1, 17920, 16, 1, 1, 0, 1, 1, 1, kAny1g},
    {"1g.35gb", 9, 15, 1, 2, 35840, 26, 1, 1, 0, 1, 0, 4, kEven},
    {"2g.35gb", 1, 14, 2, 2, 35840, 32, 2, 2, 0, 2, 0, 3, kEven3},
    {"3g.71gb", 2, 9, 3, 4, 71680, 60, 3, 3, 0, 3, 0, 2, kHalves},
    {"4g.71gb", 3, 5, 4, 4, 71680, 64, 4, 4, 0, 4, 0, 1, kFirst},
    {"7g.141gb", 4, 0, 7, 8, 143616, 132, 8, 7, 0, 7, 1, 1, kFirst},
};
constexpr MigProfile kB200Profiles[] = {
    {"1g.23gb", 0, 19, 1, 1, 22784, 21, 1, 1, 0, 1, 0, 7, kAny1g},
    {"1g.23gb+me", 7, 20, 1, 1, 22784, 21, 1, 1, 0, 1, 1, 1, kAny1g},
    {"1g.45gb", 9, 15, 1, 2, 45824, 21, 1, 1, 0, 1, 0, 4, kEven},
    {"2g.45gb", 1, 14, 2, 2, 45824, 42, 2, 2, 0, 2, 0, 3, kEven3},
    {"3g.90gb", 2, 9, 3, 4, 91648, 63, 3, 3, 0, 3, 0, 2, kHalves},
    {"4g.90gb", 3, 5, 4, 4, 91648, 84, 4, 4, 0, 4, 0, 1, kFirst},
    {"7g.180gb", 4, 0, 7, 8, 183296, 148, 8, 7, 0, 7, 1, 1, kFirst},
};

const std::vector<MigProduct>& Products() {
  static const std::vector<MigProduct>* const products = new std::vector<MigProduct>{
      {"H100 80GB", {"NVIDIA H100 80GB HBM3"}, 132, kH100Profiles},
      {"H200 141GB", {"NVIDIA H200"}, 132, kH200Profiles},
      {"B200 180GB", {"NVIDIA B200"}, 148, kB200Profiles},
  };
  return *products;
}

std::string Describe(const MigInstance& m) {
  return "GPU instance " + std::to_string(m.gpu_instance) + " (" + m.profile + " at placement " +
         std::to_string(m.placement) + ")";
}

bool Overlaps(const MigProfile& a, unsigned a_start, const MigProfile& b, unsigned b_start) {
  return a_start < b_start + b.memory_slices && b_start < a_start + a.memory_slices;
}

// Why `profile` cannot go at `start` next to `layout`; empty when it can.
std::string CheckPlacement(const MigProduct& product, const MigProfile& profile, unsigned start,
                           const std::vector<MigInstance>& layout, bool* usage) {
  if (start >= kMigMemorySlices || (profile.starts & (1u << start)) == 0) {
    if (usage != nullptr) *usage = true;
    return std::string("placement ") + std::to_string(start) + " is not one " + profile.name +
           " takes on " + product.label + " (it starts at " + MigStarts(profile) + ")";
  }
  unsigned same = 0;
  for (const MigInstance& other : layout) {
    const MigProfile* p = FindMigProfile(product, other.profile);
    if (p == nullptr) continue;
    if (Overlaps(profile, start, *p, other.placement)) {
      return std::string(profile.name) + " at placement " + std::to_string(start) + " overlaps " +
             Describe(other);
    }
    if (p == &profile) ++same;
  }
  if (same >= profile.max_instances) {
    return std::string("at most ") + std::to_string(profile.max_instances) + " " + profile.name +
           " fit on " + product.label;
  }
  return "";
}

std::optional<unsigned> FreeStart(const MigProduct& product, const MigProfile& profile,
                                  const std::vector<MigInstance>& layout) {
  for (unsigned s = 0; s < kMigMemorySlices; ++s) {
    if ((profile.starts & (1u << s)) == 0) continue;
    if (CheckPlacement(product, profile, s, layout, nullptr).empty()) return s;
  }
  return std::nullopt;
}

std::optional<unsigned> FreeGpuInstanceId(const std::vector<MigInstance>& layout) {
  for (unsigned id = 1; id <= kMaxGpuInstanceId; ++id) {
    if (std::none_of(layout.begin(), layout.end(),
                     [id](const MigInstance& m) { return m.gpu_instance == id; })) {
      return id;
    }
  }
  return std::nullopt;
}

// FNV-1a, 64 bits: enough to spread ids into readable hex, not a security property.
uint64_t Fnv(std::string_view text, uint64_t seed) {
  uint64_t h = seed;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

// Places wanted[i..] next to `layout`, backtracking over start slices; false when none fits.
bool PlaceAll(const MigProduct& product, std::string_view parent_uuid,
              const std::vector<const MigProfile*>& wanted, size_t i,
              std::vector<MigInstance>* layout) {
  if (i == wanted.size()) return true;
  for (unsigned s = 0; s < kMigMemorySlices; ++s) {
    if ((wanted[i]->starts & (1u << s)) == 0) continue;
    if (!CheckPlacement(product, *wanted[i], s, *layout, nullptr).empty()) continue;
    const std::optional<unsigned> id = FreeGpuInstanceId(*layout);
    if (!id.has_value()) return false;
    MigInstance m;
    m.gpu_instance = *id;
    m.profile = wanted[i]->name;
    m.placement = s;
    m.uuid = MigUuid(parent_uuid, m.gpu_instance, m.compute_instance);
    layout->push_back(std::move(m));
    if (PlaceAll(product, parent_uuid, wanted, i + 1, layout)) return true;
    layout->pop_back();
  }
  return false;
}

}  // namespace

std::span<const MigProduct> MigProducts() { return Products(); }

const MigProduct* FindMigProduct(std::string_view gpu_name) {
  for (const MigProduct& product : Products()) {
    for (const std::string& name : product.names) {
      if (name == gpu_name) return &product;
    }
  }
  return nullptr;
}

const MigProfile* FindMigProfile(const MigProduct& product, std::string_view name) {
  for (const MigProfile& profile : product.profiles) {
    if (name == profile.name) return &profile;
  }
  return nullptr;
}

std::string MigProfileNames(const MigProduct& product) {
  std::string names;
  for (const MigProfile& profile : product.profiles) {
    if (!names.empty()) names += ", ";
    names += profile.name;
  }
  return names;
}

std::string MigStarts(const MigProfile& profile) {
  std::string starts;
  for (unsigned s = 0; s < kMigMemorySlices; ++s) {
    if ((profile.starts & (1u << s)) == 0) continue;
    if (!starts.empty()) starts += ", ";
    starts += std::to_string(s);
  }
  return starts;
}

std::string CheckMigLayout(const MigProduct& product, bool enabled,
                           const std::vector<MigInstance>& layout) {
  if (!enabled && !layout.empty()) {
    return Describe(layout.front()) + ": MIG mode is disabled, so there can be no instances";
  }
  std::vector<MigInstance> placed;
  std::set<std::string> uuids;
  for (const MigInstance& m : layout) {
    const MigProfile* profile = FindMigProfile(product, m.profile);
    if (profile == nullptr) {
      return Describe(m) + ": unknown profile for " + product.label +
             " (profiles: " + MigProfileNames(product) + ")";
    }
    if (m.gpu_instance > kMaxGpuInstanceId) {
      return Describe(m) + ": GPU instance ids are 0 to " + std::to_string(kMaxGpuInstanceId);
    }
    if (m.compute_instance > kMaxComputeInstanceId) {
      return Describe(m) + ": compute instance ids are 0 to " +
             std::to_string(kMaxComputeInstanceId);
    }
    for (const MigInstance& other : placed) {
      if (other.gpu_instance == m.gpu_instance) {
        return Describe(m) + ": GPU instance id " + std::to_string(m.gpu_instance) +
               " is already " + Describe(other);
      }
    }
    if (m.uuid.rfind("MIG-", 0) != 0) return Describe(m) + ": uuid must start with MIG-";
    if (!uuids.insert(m.uuid).second) return Describe(m) + ": duplicate uuid " + m.uuid;
    const std::string why = CheckPlacement(product, *profile, m.placement, placed, nullptr);
    if (!why.empty()) return Describe(m) + ": " + why;
    placed.push_back(m);
  }
  return "";
}

std::vector<MigInstance> SortedMigLayout(std::vector<MigInstance> layout) {
  std::sort(layout.begin(), layout.end(), [](const MigInstance& a, const MigInstance& b) {
    return std::tie(a.gpu_instance, a.compute_instance) <
           std::tie(b.gpu_instance, b.compute_instance);
  });
  return layout;
}

std::string MigUuid(std::string_view parent_uuid, unsigned gpu_instance,
                    unsigned compute_instance) {
  const std::string key = std::string(parent_uuid) + "/gi" + std::to_string(gpu_instance) + "/ci" +
                          std::to_string(compute_instance);
  const uint64_t a = Fnv(key, 0xcbf29ce484222325ULL);
  const uint64_t b = Fnv(key, a);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "MIG-%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(a >> 32),
                static_cast<unsigned>((a >> 16) & 0xffff), static_cast<unsigned>(a & 0xffff),
                static_cast<unsigned>(b >> 48),
                static_cast<unsigned long long>(b & 0xffffffffffffULL));
  return buf;
}

std::string MigCreate(const MigProduct& product, std::string_view parent_uuid,
                      std::string_view profile_name, std::optional<unsigned> start,
                      std::vector<MigInstance>* layout, bool* usage) {
  if (usage != nullptr) *usage = false;
  const MigProfile* profile = FindMigProfile(product, profile_name);
  if (profile == nullptr) {
    if (usage != nullptr) *usage = true;
    return "\"" + std::string(profile_name) + "\" is not a MIG profile of " + product.label +
           " (profiles: " + MigProfileNames(product) + ")";
  }
  if (start.has_value()) {
    const std::string why = CheckPlacement(product, *profile, *start, *layout, usage);
    if (!why.empty()) return why;
  } else {
    start = FreeStart(product, *profile, *layout);
    if (!start.has_value()) {
      std::string held;
      for (const MigInstance& m : SortedMigLayout(*layout)) {
        held += (held.empty() ? "" : ", ") + m.profile + " at " + std::to_string(m.placement);
      }
      return std::string("no room for ") + profile->name + " (it starts at " + MigStarts(*profile) +
             "; the GPU holds " + (held.empty() ? "nothing" : held) + ")";
    }
  }
  const std::optional<unsigned> id = FreeGpuInstanceId(*layout);
  if (!id.has_value()) return "no free GPU instance id";
  MigInstance m;
  m.gpu_instance = *id;
  m.compute_instance = 0;
  m.profile = profile->name;
  m.placement = *start;
  m.uuid = MigUuid(parent_uuid, m.gpu_instance, m.compute_instance);
  layout->push_back(std::move(m));
  return "";
}

std::string MigDestroy(unsigned gpu_instance, std::vector<MigInstance>* layout, bool* usage) {
  if (usage != nullptr) *usage = false;
  auto it = std::find_if(layout->begin(), layout->end(), [gpu_instance](const MigInstance& m) {
    return m.gpu_instance == gpu_instance;
  });
  if (it == layout->end()) {
    std::string ids;
    for (const MigInstance& m : SortedMigLayout(*layout)) {
      ids += (ids.empty() ? "" : ", ") + std::to_string(m.gpu_instance);
    }
    return "no GPU instance " + std::to_string(gpu_instance) +
           " (existing: " + (ids.empty() ? "none" : ids) + ")";
  }
  layout->erase(it);
  return "";
}

std::string MigLayout(const MigProduct& product, std::string_view parent_uuid,
                      const std::vector<std::string>& profiles, std::vector<MigInstance>* layout,
                      bool* usage) {
  if (usage != nullptr) *usage = false;
  std::vector<const MigProfile*> wanted;
  for (const std::string& name : profiles) {
    const MigProfile* profile = FindMigProfile(product, name);
    if (profile == nullptr) {
      if (usage != nullptr) *usage = true;
      return "\"" + name + "\" is not a MIG profile of " + product.label +
             " (profiles: " + MigProfileNames(product) + ")";
    }
    wanted.push_back(profile);
  }
  // Largest first: the big profiles have the fewest starts. Then a depth-first search over
  // starts, lowest first, because the first fit for each is not always a fit for all: on a
  // 7-slice GPU, 3g+2g+1g+1g only fits with the 3g at 4 and the 2g at 0.
  std::stable_sort(wanted.begin(), wanted.end(), [](const MigProfile* a, const MigProfile* b) {
    return a->memory_slices > b->memory_slices;
  });
  std::vector<MigInstance> next;
  if (!PlaceAll(product, parent_uuid, wanted, 0, &next)) {
    std::string names;
    for (const std::string& name : profiles) names += (names.empty() ? "" : ", ") + name;
    return "no placement of " + names + " fits on " + product.label;
  }
  *layout = std::move(next);
  return "";
}

}  // namespace gpulet::sim
