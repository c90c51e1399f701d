#include "cluster/labels.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "config/config.h"
#include "gmock/gmock.h"
#include "gpu/nvml_api.h"
#include "gtest/gtest.h"
#include "testing/files.h"
#include "testing/homelab.h"
#include "testing/subprocess.h"

namespace gpulet::cluster {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

TEST(LabelsTest, SanitizeFollowsGfdAndStaysValid) {
  EXPECT_EQ(SanitizeLabelValue("NVIDIA GeForce RTX 3080"), "NVIDIA-GeForce-RTX-3080");
  EXPECT_EQ(SanitizeLabelValue("NVIDIA H100 80GB HBM3"), "NVIDIA-H100-80GB-HBM3");
  EXPECT_EQ(SanitizeLabelValue("Tesla V100-SXM2-16GB"), "Tesla-V100-SXM2-16GB");
  // GFD's sanitise() drops the parentheses rather than replacing them.
  EXPECT_EQ(SanitizeLabelValue("NVIDIA TITAN X (Pascal)"), "NVIDIA-TITAN-X-Pascal");
  EXPECT_EQ(SanitizeLabelValue("ProLiant DL380 Gen10 (Gen10)"), "ProLiant-DL380-Gen10-Gen10");
  EXPECT_EQ(SanitizeLabelValue("A  B\tC"), "A-B-C");
  EXPECT_EQ(SanitizeLabelValue("  DGX H100 "), "DGX-H100");
  EXPECT_EQ(SanitizeLabelValue(std::string(80, 'a')).size(), 63u);
  EXPECT_EQ(SanitizeLabelValue("(((("), "");
}

TEST(LabelsTest, FamilyFromComputeCapabilityMatchesGfd) {
  EXPECT_EQ(GpuFamilyFromComputeCapability(7, 0), "volta");
  EXPECT_EQ(GpuFamilyFromComputeCapability(7, 5), "turing");
  EXPECT_EQ(GpuFamilyFromComputeCapability(8, 6), "ampere");
  EXPECT_EQ(GpuFamilyFromComputeCapability(8, 9), "ada-lovelace");
  EXPECT_EQ(GpuFamilyFromComputeCapability(9, 0), "hopper");
  EXPECT_EQ(GpuFamilyFromComputeCapability(10, 0), "blackwell");
  EXPECT_EQ(GpuFamilyFromComputeCapability(12, 0), "blackwell");
  EXPECT_EQ(GpuFamilyFromComputeCapability(11, 0), "undefined");
  EXPECT_EQ(GpuFamilyFromArchitecture(node::Architecture::kAda), "ada-lovelace");
  EXPECT_EQ(GpuFamilyFromArchitecture(node::Architecture::kBlackwell), "blackwell");
  EXPECT_EQ(GpuFamilyFromArchitecture(node::Architecture::kUnknown), "undefined");
}

TEST(LabelsTest, NoGpuNoLabels) {
  gpu::Inventory inv;
  EXPECT_THAT(ComputeGpuLabels(inv, {}, {}), IsEmpty());
  EXPECT_EQ(FormatFeatureFile({}), "");
}

TEST(LabelsTest, PciOnlyInventoryLeavesOutNvmlValues) {
  gpu::Inventory inv;
  inv.nvml_status = absl::FailedPreconditionError("driver not loaded");
  gpu::Gpu g;
  g.name = "NVIDIA GeForce RTX 5090";
  g.bus_id = "0000:02:00.0";
  g.architecture = node::Architecture::kBlackwell;
  g.on_pci = true;
  inv.gpus.push_back(g);
  inv.driver.version = "570.133.20";
  inv.driver.flavor = node::DriverFlavor::kProprietary;
  LabelExtras extras;
  extras.gpu_pci_classes = {0x030000};
  NodeLabels labels = ComputeGpuLabels(inv, extras, {});
  EXPECT_THAT(
      labels,
      UnorderedElementsAre(
          Pair("nvidia.com/gpu.present", "true"), Pair("nvidia.com/gpu.count", "1"),
          Pair("nvidia.com/gpu.replicas", "1"), Pair("nvidia.com/gpu.sharing-strategy", "none"),
          Pair("nvidia.com/mps.capable", "false"), Pair("nvidia.com/gpu.machine", "unknown"),
          Pair("nvidia.com/gpu.product", "NVIDIA-GeForce-RTX-5090"),
          Pair("nvidia.com/gpu.family", "blackwell"), Pair("nvidia.com/gpu.mode", "graphics"),
          Pair("nvidia.com/cuda.driver-version.full", "570.133.20"),
          Pair("nvidia.com/cuda.driver-version.major", "570"),
          Pair("nvidia.com/cuda.driver-version.minor", "133"),
          Pair("nvidia.com/cuda.driver-version.revision", "20"),
          Pair("nvidia.com/cuda.driver.major", "570"), Pair("nvidia.com/cuda.driver.minor", "133"),
          Pair("nvidia.com/cuda.driver.rev", "20"),
          Pair("gpulet.dev/kernel-module-flavor", "proprietary")));
  EXPECT_THAT(FormatFeatureFile(labels), HasSubstr("nvidia.com/gpu.count=1\n"));

  // An "X.Y" driver version: GFD (internal/lm/nvml.go, newVersionLabeler) still writes the
  // revision labels, empty.
  inv.driver.version = "580.65";
  labels = ComputeGpuLabels(inv, extras, {});
  EXPECT_EQ(labels["nvidia.com/cuda.driver-version.full"], "580.65");
  EXPECT_EQ(labels["nvidia.com/cuda.driver.minor"], "65");
  ASSERT_EQ(labels.count("nvidia.com/cuda.driver-version.revision"), 1u);
  EXPECT_EQ(labels["nvidia.com/cuda.driver-version.revision"], "");
  ASSERT_EQ(labels.count("nvidia.com/cuda.driver.rev"), 1u);
  EXPECT_EQ(labels["nvidia.com/cuda.driver.rev"], "");
  EXPECT_THAT(FormatFeatureFile(labels), HasSubstr("nvidia.com/cuda.driver.rev=\n"));
}

// docs/labels.md's table names every label gpulet can write: an inventory that makes every one
// of them appear, each key checked against the doc.
TEST(LabelsTest, EveryLabelIsDocumented) {
  gpu::Inventory inv;
  for (const char* name : {"NVIDIA H100 80GB HBM3", "NVIDIA L4"}) {
    gpu::Gpu g;
    g.name = name;
    g.in_nvml = true;
    g.memory_total_bytes = 80ull << 30;
    g.cc_major = 9;
    g.cc_minor = 0;
    g.mig_capable = true;
    g.virtualization_mode = NVML_GPU_VIRTUALIZATION_MODE_NONE;
    inv.gpus.push_back(g);
  }
  inv.system.driver_version = "570.133.20";
  inv.system.cuda_driver_version = 12080;
  inv.driver.flavor = node::DriverFlavor::kOpen;
  LabelExtras extras;
  extras.machine_type = "DGX H100";
  extras.gpu_pci_classes = {0x030200, 0x030200};
  NodeLabels labels = ComputeGpuLabels(inv, extras, {});
  EXPECT_GE(labels.size(), 27u);
  // The MIG labels of the mixed strategy, with a MIG device on the first GPU.
  inv.gpus[0].mig_enabled = true;
  gpu::MigDeviceInfo mig;
  mig.profile = "1g.10gb";
  inv.gpus[0].mig_devices = {mig};
  LabelSharing mixed;
  mixed.mig_strategy = config::MigStrategy::kMixed;
  for (auto& [key, value] : ComputeGpuLabels(inv, extras, mixed)) labels[key] = value;
  EXPECT_EQ(labels.at("nvidia.com/mig-1g.10gb.count"), "1");
  std::ifstream in(std::string(GPULET_SOURCE_DIR) + "/docs/labels.md");
  std::stringstream doc;
  doc << in.rdbuf();
  const std::string table = doc.str().substr(0, doc.str().find("## GFD labels gpulet does not"));
  for (const auto& [key, value] : labels) {
    // A row may list several keys sharing a prefix: `a.b.major`, `.minor`; the per-profile
    // MIG labels are listed once as `nvidia.com/mig-<profile>.…`.
    std::string last = key.substr(key.rfind('.'));
    if (absl::StartsWith(key, "nvidia.com/mig-")) {
      std::string suffix = key.substr(key.find('.', key.find("gb")));
      EXPECT_TRUE(absl::StrContains(table, absl::StrCat("`", suffix, "`")) ||
                  absl::StrContains(table, absl::StrCat("`nvidia.com/mig-<profile>", suffix, "`")))
          << key << " is not in docs/labels.md";
      continue;
    }
    EXPECT_TRUE(absl::StrContains(table, absl::StrCat("`", key, "`")) ||
                absl::StrContains(table, absl::StrCat("`", last, "`")))
        << key << " is not in docs/labels.md";
  }
}

// GFD (k8s-device-plugin internal/lm/nvml.go newMigCapabilityLabeler, vgpu.go): mig.capable
// "true" when any GPU supports MIG, vgpu.present "true" on a vGPU guest; both need NVML.
TEST(LabelsTest, MigCapableAndVgpuPresentFollowGfd) {
  gpu::Inventory inv;
  for (std::optional<bool> mig : {std::optional<bool>(false), std::optional<bool>(true)}) {
    gpu::Gpu g;
    g.name = "NVIDIA H200";
    g.in_nvml = true;
    g.mig_capable = mig;
    g.virtualization_mode = NVML_GPU_VIRTUALIZATION_MODE_NONE;
    inv.gpus.push_back(g);
  }
  NodeLabels labels = ComputeGpuLabels(inv, {}, {});
  EXPECT_EQ(labels["nvidia.com/mig.capable"], "true");
  EXPECT_EQ(labels["nvidia.com/vgpu.present"], "false");

  inv.gpus[1].mig_capable = false;  // GeForce-like: NVML says NOT_SUPPORTED
  inv.gpus[0].virtualization_mode = NVML_GPU_VIRTUALIZATION_MODE_VGPU;
  labels = ComputeGpuLabels(inv, {}, {});
  EXPECT_EQ(labels["nvidia.com/mig.capable"], "false");
  EXPECT_EQ(labels["nvidia.com/vgpu.present"], "true");

  // An NVML without nvmlDeviceGetMigMode cannot tell: no label rather than a guess.
  for (gpu::Gpu& g : inv.gpus) g.mig_capable.reset();
  labels = ComputeGpuLabels(inv, {}, {});
  EXPECT_EQ(labels.count("nvidia.com/mig.capable"), 0u);

  // Without NVML neither label is written.
  inv.nvml_status = absl::UnavailableError("no NVML");
  labels = ComputeGpuLabels(inv, {}, {});
  EXPECT_EQ(labels.count("nvidia.com/vgpu.present"), 0u);
}

// GFD (k8s-device-plugin internal/lm/resource.go, baseLabeler and getProductName): replicas
// and strategy from the sharing config, "-SHARED" on the product unless the resource is
// renamed; mig-strategy.go newGPULabelers: gpu.count counts the labelled product's GPUs.
TEST(LabelsTest, MigStrategiesWriteGfdsMigLabels) {
  gpu::Inventory inv;
  inv.system.driver_version = "570.133.20";
  for (unsigned i = 0; i < 2; ++i) {
    gpu::Gpu g;
    g.index = i;
    g.name = "NVIDIA H200";
    g.in_nvml = true;
    g.memory_total_bytes = 143771ull << 20;
    g.mig_capable = true;
    g.mig_enabled = true;
    gpu::MigDeviceInfo m;
    m.profile = "3g.71gb";
    m.memory_bytes = 71680ull << 20;
    m.sm_count = 60;
    m.gpu_instance_slices = m.compute_instance_slices = 3;
    m.copy_engines = 3;
    m.decoders = 3;
    m.jpeg_engines = 3;
    g.mig_devices = {m, m};
    inv.gpus.push_back(g);
  }
  LabelSharing sharing;
  EXPECT_EQ(ComputeGpuLabels(inv, {}, sharing).count("nvidia.com/mig.strategy"), 0u);  // none
  sharing.mig_strategy = config::MigStrategy::kSingle;
  NodeLabels single = ComputeGpuLabels(inv, {}, sharing);
  EXPECT_EQ(single.at("nvidia.com/mig.strategy"), "single");
  EXPECT_EQ(single.at("nvidia.com/gpu.product"), "NVIDIA-H200-MIG-3g.71gb");
  EXPECT_EQ(single.at("nvidia.com/gpu.count"), "4");
  EXPECT_EQ(single.at("nvidia.com/gpu.memory"), "71680");
  EXPECT_EQ(single.at("nvidia.com/gpu.multiprocessors"), "60");
  EXPECT_EQ(single.at("nvidia.com/gpu.slices.gi"), "3");
  EXPECT_EQ(single.at("nvidia.com/gpu.engines.decoder"), "3");
  sharing.mig_strategy = config::MigStrategy::kMixed;
  inv.gpus[1].mig_devices[1].profile = "1g.18gb";
  NodeLabels mixed = ComputeGpuLabels(inv, {}, sharing);
  EXPECT_EQ(mixed.at("nvidia.com/mig.strategy"), "mixed");
  EXPECT_EQ(mixed.at("nvidia.com/mig-3g.71gb.count"), "3");
  EXPECT_EQ(mixed.at("nvidia.com/mig-1g.18gb.count"), "1");
  EXPECT_EQ(mixed.at("nvidia.com/mig-3g.71gb.product"), "NVIDIA-H200-MIG-3g.71gb");
  EXPECT_EQ(mixed.at("nvidia.com/mig-3g.71gb.replicas"), "1");
  EXPECT_EQ(mixed.at("nvidia.com/gpu.product"), "NVIDIA-H200");  // the whole GPUs' labels stay
  // Two profiles under single: GFD's invalid labels.
  sharing.mig_strategy = config::MigStrategy::kSingle;
  NodeLabels invalid = ComputeGpuLabels(inv, {}, sharing);
  EXPECT_EQ(invalid.at("nvidia.com/gpu.product"), "NVIDIA-H200-MIG-INVALID");
  EXPECT_EQ(invalid.at("nvidia.com/gpu.count"), "0");
}

TEST(LabelsTest, SharingAndMixedProductsFollowGfd) {
  gpu::Inventory inv;
  for (const char* name : {"NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", "Tesla T4"}) {
    gpu::Gpu g;
    g.name = name;
    g.in_nvml = true;
    inv.gpus.push_back(g);
  }
  NodeLabels plain = ComputeGpuLabels(inv, {}, {});
  EXPECT_EQ(plain["nvidia.com/gpu.product"], "NVIDIA-A100-SXM4-40GB");
  EXPECT_EQ(plain["nvidia.com/gpu.count"], "2");
  EXPECT_EQ(plain["nvidia.com/gpu.replicas"], "1");
  EXPECT_EQ(plain["nvidia.com/gpu.sharing-strategy"], "none");
  EXPECT_EQ(plain["gpulet.dev/gpu.mixed"], "true");

  NodeLabels shared = ComputeGpuLabels(inv, {}, LabelSharing{4, false});
  EXPECT_EQ(shared["nvidia.com/gpu.product"], "NVIDIA-A100-SXM4-40GB-SHARED");
  EXPECT_EQ(shared["nvidia.com/gpu.count"], "2");
  EXPECT_EQ(shared["nvidia.com/gpu.replicas"], "4");
  EXPECT_EQ(shared["nvidia.com/gpu.sharing-strategy"], "time-slicing");

  // No class read: GFD says "unknown"; one class for all: its mode; two classes: "unknown".
  EXPECT_EQ(plain["nvidia.com/gpu.mode"], "unknown");
  LabelExtras extras;
  extras.gpu_pci_classes = {0x030200, 0x030200, 0x030200};
  EXPECT_EQ(ComputeGpuLabels(inv, extras, {})["nvidia.com/gpu.mode"], "compute");
  extras.gpu_pci_classes = {0x030200, 0x030200, 0x030000};
  EXPECT_EQ(ComputeGpuLabels(inv, extras, {})["nvidia.com/gpu.mode"], "unknown");
  extras.gpu_pci_classes = {0x030200, std::nullopt, 0x030200};
  EXPECT_EQ(ComputeGpuLabels(inv, extras, {})["nvidia.com/gpu.mode"], "unknown");

  NodeLabels renamed = ComputeGpuLabels(inv, {}, LabelSharing{4, true});
  EXPECT_EQ(renamed["nvidia.com/gpu.product"], "NVIDIA-A100-SXM4-40GB");
  EXPECT_EQ(renamed["nvidia.com/gpu.replicas"], "4");
  EXPECT_EQ(renamed["nvidia.com/gpu.sharing-strategy"], "time-slicing");

  config::Config config;
  config.sharing.time_slicing.replicas = 3;
  config.sharing.time_slicing.rename_by_default = true;
  LabelSharing from = LabelSharingFromConfig(config);
  EXPECT_EQ(from.replicas, 3);
  EXPECT_TRUE(from.renamed);
}

// --- against the simulated nodes, through the command -----------------------------------------

using TempDir = gpulet::testing::ScratchDir;

NodeLabels ParseFeatureFile(const std::string& text) {
  NodeLabels out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(line, absl::MaxSplits('=', 1));
    out[kv.first] = kv.second;
  }
  return out;
}

std::string ReadWhole(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(LabelsCommandTest, HomelabSimulation) {
  TempDir dir;
  std::string out = dir.path() + "/gpulet";
  testing::RunResult r = testing::RunProgram(
      {gpulet::testing::GpuletBinary(), "--simulate", "homelab", "labels", "--output", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("wrote"));
  NodeLabels labels = ParseFeatureFile(ReadWhole(out));
  EXPECT_EQ(labels["nvidia.com/gpu.present"], "true");
  // GFD describes one product, and counts the GPUs of that product: gpulet picks the first
  // GPU's (NVML index 0), the RTX 3080, of which there is one (the other GPU is an RTX 5090).
  EXPECT_EQ(labels["nvidia.com/gpu.count"], "1");
  EXPECT_EQ(labels["nvidia.com/gpu.product"], "NVIDIA-GeForce-RTX-3080");
  EXPECT_EQ(labels["nvidia.com/gpu.memory"], "10240");
  EXPECT_EQ(labels["nvidia.com/gpu.family"], "ampere");
  EXPECT_EQ(labels["nvidia.com/gpu.compute.major"], "8");
  EXPECT_EQ(labels["nvidia.com/gpu.compute.minor"], "6");
  EXPECT_EQ(labels["nvidia.com/gpu.mode"], "graphics");
  EXPECT_EQ(labels["nvidia.com/cuda.driver-version.full"], "570.133.20");
  EXPECT_EQ(labels["nvidia.com/cuda.driver-version.revision"], "20");
  EXPECT_EQ(labels["nvidia.com/cuda.runtime-version.full"], "12.8");
  EXPECT_EQ(labels["nvidia.com/cuda.runtime.major"], "12");
  EXPECT_EQ(labels["gpulet.dev/kernel-module-flavor"], "open");
  EXPECT_EQ(labels["gpulet.dev/gpu.mixed"], "true");
  EXPECT_EQ(labels["nvidia.com/gpu.machine"], "unknown");  // the fixture has no DMI, as GFD
  EXPECT_EQ(labels["nvidia.com/gpu.replicas"], "1");
  EXPECT_EQ(labels["nvidia.com/gpu.sharing-strategy"], "none");
  EXPECT_EQ(labels["nvidia.com/mps.capable"], "false");
  // Only the file itself is left in the directory: no temporary files.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
}

TEST(LabelsCommandTest, Dgx8Simulation) {
  testing::RunResult r = testing::RunProgram(
      {gpulet::testing::GpuletBinary(), "--simulate", "dgx8", "labels", "--output", "-"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  NodeLabels labels = ParseFeatureFile(r.out);
  EXPECT_EQ(labels["nvidia.com/gpu.count"], "8");
  EXPECT_EQ(labels["nvidia.com/gpu.product"], "NVIDIA-H100-80GB-HBM3");
  EXPECT_EQ(labels["nvidia.com/gpu.memory"], "81559");
  EXPECT_EQ(labels["nvidia.com/gpu.family"], "hopper");
  EXPECT_EQ(labels["nvidia.com/gpu.compute.major"], "9");
  EXPECT_EQ(labels["nvidia.com/gpu.compute.minor"], "0");
  EXPECT_EQ(labels["nvidia.com/gpu.mode"], "compute");
  EXPECT_EQ(labels.count("gpulet.dev/gpu.mixed"), 0u);
  // Sorted, one key=value per line.
  EXPECT_EQ(r.out, FormatFeatureFile(labels));
}

// `--config` reads the daemon's config: the sharing labels follow it.
TEST(LabelsCommandTest, ConfigSetsTheSharingLabels) {
  TempDir dir;
  std::string config = dir.path() + "/config.yaml";
  std::ofstream(config) << "version: v1\nsharing:\n  timeSlicing:\n    replicas: 4\n";
  testing::RunResult r = testing::RunProgram({gpulet::testing::GpuletBinary(), "--simulate", "dgx8",
                                              "labels", "--config", config, "--output", "-"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  NodeLabels labels = ParseFeatureFile(r.out);
  EXPECT_EQ(labels["nvidia.com/gpu.replicas"], "4");
  EXPECT_EQ(labels["nvidia.com/gpu.sharing-strategy"], "time-slicing");
  EXPECT_EQ(labels["nvidia.com/gpu.product"], "NVIDIA-H100-80GB-HBM3-SHARED");
  EXPECT_EQ(labels["nvidia.com/gpu.count"], "8");

  std::ofstream(config) << "version: v1\nsharing:\n  timeSlicing:\n    replica: 4\n";
  r = testing::RunProgram({gpulet::testing::GpuletBinary(), "--simulate", "dgx8", "labels",
                           "--config", config, "--output", "-"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr(config));
  EXPECT_THAT(r.err, HasSubstr("replica"));
  EXPECT_EQ(r.out, "");
}

TEST(LabelsCommandTest, MissingDirectoryIsExplained) {
  TempDir dir;
  testing::RunResult r =
      testing::RunProgram({gpulet::testing::GpuletBinary(), "--simulate", "homelab", "labels",
                           "--output", dir.path() + "/no/such/file"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("does not exist"));
  EXPECT_THAT(r.err, HasSubstr("--output -"));
}

}  // namespace
}  // namespace gpulet::cluster

namespace gpulet::cluster {
namespace {
// `gpulet serve` keeps the same file `gpulet labels` writes by default.
TEST(LabelsDefaultsTest, DaemonWritesTheSameFeatureFile) {
  EXPECT_EQ(config::Config().labels.features_file, kDefaultFeaturesFile);
}
}  // namespace
}  // namespace gpulet::cluster
