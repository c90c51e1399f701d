// Tests for the simulator's MIG profile tables and layout rules (sim/mig.h).

#include "sim/mig.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "sim/fixture.h"

namespace gpulet::sim {
namespace {

constexpr uint64_t kMiB = 1ULL << 20;
constexpr uint64_t kGiB = 1ULL << 30;

// The profile-name rule of NVIDIA's go-nvlib, which gpulet implements: the memory fraction
// rounded up to eighths, times the device's memory rounded up to whole GiB, rounded.
std::string CanonicalName(uint64_t memory_mib, unsigned slices, uint64_t total_bytes) {
  double fraction = static_cast<double>(memory_mib * kMiB) / static_cast<double>(total_bytes);
  fraction = std::ceil(fraction * 8) / 8;
  const auto total_gb = static_cast<double>((total_bytes + kGiB - 1) / kGiB);
  const auto gb = static_cast<uint64_t>(std::round(fraction * total_gb));
  return std::to_string(slices) + "g." + std::to_string(gb) + "gb";
}

std::string WithoutMe(std::string name) {
  const size_t plus = name.find("+me");
  if (plus != std::string::npos) name.erase(plus);
  return name;
}

// nvmlDeviceGetMemoryInfo's total of each product's GPUs: the fixtures' (dgx8 and h200), and
// for B200, which has no fixture, 183359 MiB (an HGX B200's, as nvidia-smi prints it).
uint64_t TotalMib(const MigProduct& product) {
  const std::string label = product.label;
  std::string fixture;
  if (label == "H100 80GB") fixture = "dgx8";
  if (label == "H200 141GB") fixture = "h200";
  if (fixture.empty()) return 183359;
  Fixture f;
  std::string error;
  EXPECT_TRUE(LoadFixture(std::string(GPULET_SOURCE_DIR) + "/sim/fixtures/" + fixture + ".yaml", &f,
                          &error))
      << error;
  return f.gpus.empty() ? 0 : f.gpus[0].memory_total_mib;
}

TEST(MigTest, EveryProfileGetsItsCanonicalNameFromItsMemory) {
  ASSERT_EQ(MigProducts().size(), 3u);
  for (const MigProduct& product : MigProducts()) {
    SCOPED_TRACE(product.label);
    const uint64_t total = TotalMib(product) * kMiB;
    ASSERT_GT(total, 0u);
    for (const MigProfile& profile : product.profiles) {
      EXPECT_EQ(CanonicalName(profile.memory_mib, profile.slices, total), WithoutMe(profile.name))
          << profile.name << " with " << profile.memory_mib << " MiB";
    }
    EXPECT_EQ(product.Full().slices, kMigComputeSlices);
    EXPECT_EQ(product.Full().memory_slices, kMigMemorySlices);
  }
}

TEST(MigTest, ProductsAreFoundByTheirNvmlNames) {
  ASSERT_NE(FindMigProduct("NVIDIA H100 80GB HBM3"), nullptr);
  EXPECT_STREQ(FindMigProduct("NVIDIA H200")->label, "H200 141GB");
  EXPECT_STREQ(FindMigProduct("NVIDIA B200")->label, "B200 180GB");
  EXPECT_EQ(FindMigProduct("NVIDIA GeForce RTX 3080"), nullptr);
  const MigProduct& h200 = *FindMigProduct("NVIDIA H200");
  EXPECT_EQ(MigProfileNames(h200),
            "1g.18gb, 1g.18gb+me, 1g.35gb, 2g.35gb, 3g.71gb, 4g.71gb, 7g.141gb");
  EXPECT_EQ(MigStarts(*FindMigProfile(h200, "3g.71gb")), "0, 4");
  EXPECT_EQ(MigStarts(*FindMigProfile(h200, "1g.35gb")), "0, 2, 4, 6");
}

MigInstance Instance(unsigned gi, const char* profile, unsigned placement) {
  MigInstance m;
  m.gpu_instance = gi;
  m.profile = profile;
  m.placement = placement;
  m.uuid = MigUuid("GPU-test", gi, 0);
  return m;
}

TEST(MigTest, LayoutChecksNameTheInstanceAtFault) {
  const MigProduct& h100 = *FindMigProduct("NVIDIA H100 80GB HBM3");
  EXPECT_EQ(CheckMigLayout(h100, true, {Instance(1, "4g.40gb", 0), Instance(2, "3g.40gb", 4)}), "");
  struct Case {
    bool enabled;
    std::vector<MigInstance> layout;
    const char* expected;
  } cases[] = {
      {false,
       {Instance(1, "1g.10gb", 0)},
       "GPU instance 1 (1g.10gb at placement 0): MIG mode is disabled"},
      {true, {Instance(1, "1g.18gb", 0)}, "unknown profile for H100 80GB (profiles: 1g.10gb,"},
      {true,
       {Instance(1, "3g.40gb", 2)},
       "placement 2 is not one 3g.40gb takes on H100 80GB (it starts at 0, 4)"},
      {true,
       {Instance(1, "2g.20gb", 0), Instance(2, "1g.10gb", 1)},
       "GPU instance 2 (1g.10gb at placement 1): 1g.10gb at placement 1 overlaps GPU instance 1 "
       "(2g.20gb at placement 0)"},
      {true,
       {Instance(1, "1g.10gb", 0), Instance(1, "1g.10gb", 1)},
       "GPU instance id 1 is already"},
      {true, {Instance(1, "1g.10gb+me", 0), Instance(2, "1g.10gb+me", 1)}, "at most 1 1g.10gb+me"},
      {true, {Instance(15, "1g.10gb", 0)}, "GPU instance ids are 0 to 14"},
  };
  for (const Case& c : cases) {
    const std::string why = CheckMigLayout(h100, c.enabled, c.layout);
    EXPECT_NE(why.find(c.expected), std::string::npos) << why;
  }
  std::vector<MigInstance> same_uuid = {Instance(1, "1g.10gb", 0), Instance(2, "1g.10gb", 1)};
  same_uuid[1].uuid = same_uuid[0].uuid;
  EXPECT_NE(CheckMigLayout(h100, true, same_uuid).find("duplicate uuid"), std::string::npos);
}

TEST(MigTest, CreateTakesTheFirstFreePlacementAndTheNextId) {
  const MigProduct& h200 = *FindMigProduct("NVIDIA H200");
  std::vector<MigInstance> layout;
  bool usage = true;
  ASSERT_EQ(MigCreate(h200, "GPU-p", "3g.71gb", std::nullopt, &layout, &usage), "");
  EXPECT_FALSE(usage);
  ASSERT_EQ(MigCreate(h200, "GPU-p", "3g.71gb", std::nullopt, &layout, &usage), "");
  ASSERT_EQ(layout.size(), 2u);
  EXPECT_EQ(layout[0].placement, 0u);
  EXPECT_EQ(layout[1].placement, 4u);
  EXPECT_EQ(layout[1].gpu_instance, 2u);
  EXPECT_EQ(layout[1].uuid, MigUuid("GPU-p", 2, 0));
  std::string why = MigCreate(h200, "GPU-p", "1g.18gb", std::nullopt, &layout, &usage);
  EXPECT_NE(why.find("no room for 1g.18gb"), std::string::npos) << why;
  EXPECT_FALSE(usage);
  why = MigCreate(h200, "GPU-p", "1g.10gb", std::nullopt, &layout, &usage);
  EXPECT_NE(why.find("\"1g.10gb\" is not a MIG profile of H200 141GB (profiles: 1g.18gb,"),
            std::string::npos)
      << why;
  EXPECT_TRUE(usage);
  ASSERT_EQ(MigDestroy(1, &layout, &usage), "");
  why = MigDestroy(1, &layout, &usage);
  EXPECT_EQ(why, "no GPU instance 1 (existing: 2)");
  why = MigCreate(h200, "GPU-p", "2g.35gb", 1, &layout, &usage);
  EXPECT_NE(why.find("placement 1 is not one 2g.35gb takes"), std::string::npos) << why;
  EXPECT_TRUE(usage);
  ASSERT_EQ(MigCreate(h200, "GPU-p", "2g.35gb", 2, &layout, &usage), "");
  EXPECT_EQ(layout.back().gpu_instance, 1u);  // the lowest free id
}

TEST(MigTest, LayoutPlacesLargestFirst) {
  const MigProduct& h200 = *FindMigProduct("NVIDIA H200");
  std::vector<MigInstance> layout = {Instance(9, "7g.141gb", 0)};
  bool usage = false;
  ASSERT_EQ(MigLayout(h200, "GPU-p", {"1g.18gb", "1g.18gb", "2g.35gb", "3g.71gb"}, &layout, &usage),
            "");
  // The h200-mig fixture's layout: a 3g at 0 would leave the second 1g no room.
  ASSERT_EQ(layout.size(), 4u);
  const std::pair<const char*, unsigned> expected[] = {
      {"3g.71gb", 4}, {"2g.35gb", 0}, {"1g.18gb", 2}, {"1g.18gb", 3}};
  for (unsigned i = 0; i < 4; ++i) {
    EXPECT_EQ(layout[i].profile, expected[i].first) << i;
    EXPECT_EQ(layout[i].placement, expected[i].second) << i;
    EXPECT_EQ(layout[i].gpu_instance, i + 1);
  }
  EXPECT_EQ(CheckMigLayout(h200, true, layout), "");
  const std::string why =
      MigLayout(h200, "GPU-p", {"4g.71gb", "3g.71gb", "1g.18gb"}, &layout, &usage);
  EXPECT_EQ(why, "no placement of 4g.71gb, 3g.71gb, 1g.18gb fits on H200 141GB");
  EXPECT_EQ(layout.size(), 4u);  // unchanged
  ASSERT_EQ(MigLayout(h200, "GPU-p", {}, &layout, &usage), "");
  EXPECT_TRUE(layout.empty());
}

TEST(MigTest, MigUuidsAreStableAndDistinct) {
  EXPECT_EQ(MigUuid("GPU-a", 1, 0), MigUuid("GPU-a", 1, 0));
  std::set<std::string> seen;
  for (unsigned gi = 0; gi <= kMaxGpuInstanceId; ++gi) {
    for (const char* parent : {"GPU-a", "GPU-b"}) seen.insert(MigUuid(parent, gi, 0));
  }
  EXPECT_EQ(seen.size(), 2u * (kMaxGpuInstanceId + 1));
  const std::string uuid = MigUuid("GPU-a", 3, 0);
  ASSERT_EQ(uuid.size(), 40u);  // MIG- + 8-4-4-4-12
  EXPECT_EQ(uuid.substr(0, 4), "MIG-");
}

}  // namespace
}  // namespace gpulet::sim
