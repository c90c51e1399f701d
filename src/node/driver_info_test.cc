#include "node/driver_info.h"

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/host_fs.h"
#include "gtest/gtest.h"

namespace gpulet::node {
namespace {

constexpr char kOpenVersion[] =
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.133.20  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Thu Mar 13 17:32:45 UTC 2025\n"
    "GCC version:  gcc version 14.2.0 (GCC) \n";
constexpr char kProprietaryVersion[] =
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.133.20  Thu Mar 13 17:32:45 UTC 2025\n"
    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14) \n";

std::string FixtureRoot(const std::string& name) {
  return std::string(GPULET_SOURCE_DIR) + "/sim/fixtures/" + name + "/root";
}

std::string TestRoot(const std::string& name) {
  return std::string(GPULET_SOURCE_DIR) + "/tests/fixtures/hostroots/" + name;
}

TEST(ParseNvrmVersionTest, OpenModules) {
  NvrmVersion v = ParseNvrmVersion(kOpenVersion);
  EXPECT_EQ(v.version, "570.133.20");
  EXPECT_EQ(v.flavor, DriverFlavor::kOpen);
}

TEST(ParseNvrmVersionTest, ProprietaryModules) {
  NvrmVersion v = ParseNvrmVersion(kProprietaryVersion);
  EXPECT_EQ(v.version, "570.133.20");
  EXPECT_EQ(v.flavor, DriverFlavor::kProprietary);
}

TEST(ParseNvrmVersionTest, OtherArchitecturesAndVersions) {
  NvrmVersion arm = ParseNvrmVersion(
      "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.82.07  Release Build  "
      "(dvs-builder@U22-I3-AE18-23-3)  Wed Aug 27 16:21:14 UTC 2025\n");
  EXPECT_EQ(arm.version, "580.82.07");
  EXPECT_EQ(arm.flavor, DriverFlavor::kOpen);
  NvrmVersion old = ParseNvrmVersion(
      "NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.256.02  Thu May  2 14:37:44 UTC 2024");
  EXPECT_EQ(old.version, "470.256.02");
  EXPECT_EQ(old.flavor, DriverFlavor::kProprietary);
}

TEST(ParseNvrmVersionTest, UnrecognisedTextIsUnknown) {
  for (const char* text : {"", "\n", "GCC version:  gcc version 12.2.0\n", "hello world",
                           "NVRM version: something else entirely"}) {
    NvrmVersion v = ParseNvrmVersion(text);
    EXPECT_EQ(v.version, "") << text;
    EXPECT_EQ(v.flavor, DriverFlavor::kUnknown) << text;
  }
}

TEST(ParseProcModulesTest, MatchesWholeNamesOnly) {
  LoadedModules m = ParseProcModules(
      "nvidia_uvm 2076672 0 - Live 0x0000000000000000 (O)\n"
      "nvidia_peermem 16384 0 - Live 0x0000000000000000 (O)\n"
      "nvidia_drm 135168 0 - Live 0x0000000000000000 (O)\n"
      "snd_hda_intel 61440 0 - Live 0x0000000000000000\n");
  EXPECT_TRUE(m.nvidia_uvm);
  EXPECT_TRUE(m.nvidia_drm);
  EXPECT_FALSE(m.nvidia);  // "nvidia_uvm" is not "nvidia"
  EXPECT_FALSE(m.nvidia_modeset);
  EXPECT_FALSE(m.nouveau);
}

TEST(ParseProcModulesTest, AllFive) {
  LoadedModules m = ParseProcModules(
      "nvidia 12980224 2 nvidia_uvm,nvidia_modeset, Live 0x0000000000000000 (O)\n"
      "nvidia_modeset 1830912 1 nvidia_drm, Loading 0x0000000000000000 (O)\n"
      "nvidia_uvm 1 0 - Live 0\nnvidia_drm 1 0 - Live 0\nnouveau 1 0 - Live 0");
  EXPECT_TRUE(m.nvidia);
  EXPECT_TRUE(m.nvidia_modeset);
  EXPECT_TRUE(m.nvidia_uvm);
  EXPECT_TRUE(m.nvidia_drm);
  EXPECT_TRUE(m.nouveau);
  LoadedModules none = ParseProcModules("");
  EXPECT_FALSE(none.nvidia || none.nvidia_uvm || none.nvidia_modeset || none.nvidia_drm ||
               none.nouveau);
}

TEST(ReadDriverInfoTest, HomelabRunsOpenModules) {
  DriverInfo info = ReadDriverInfo(HostFs(FixtureRoot("homelab")));
  EXPECT_TRUE(info.version_file_present);
  EXPECT_EQ(info.version, "570.133.20");
  EXPECT_EQ(info.flavor, DriverFlavor::kOpen);
  EXPECT_EQ(info.module_version, "570.133.20");
  EXPECT_EQ(info.nvrm_line.rfind("NVRM version: NVIDIA UNIX Open Kernel Module", 0), 0u)
      << info.nvrm_line;
  EXPECT_TRUE(info.proc_modules_readable);
  EXPECT_TRUE(info.modules.nvidia);
  EXPECT_TRUE(info.modules.nvidia_uvm);
  EXPECT_TRUE(info.modules.nvidia_modeset);
  EXPECT_TRUE(info.modules.nvidia_drm);
  EXPECT_FALSE(info.modules.nouveau);
  EXPECT_TRUE(info.dev_nvidiactl);
  EXPECT_TRUE(info.dev_nvidia_uvm);
  EXPECT_TRUE(info.dev_nvidia_uvm_tools);
  EXPECT_TRUE(info.dev_nvidia_modeset);
  EXPECT_EQ(info.dev_gpu_minors, (std::vector<int>{0, 1}));
}

TEST(ReadDriverInfoTest, EveryShippedFixtureMatchesItsGpuCount) {
  // The -mig fixtures are the same machines; /dev/nvidia-caps is no GPU.
  for (const char* name : {"h200", "h200-mig"}) {
    EXPECT_EQ(ReadDriverInfo(HostFs(FixtureRoot(name))).dev_gpu_minors, (std::vector<int>{0}))
        << name;
  }
  for (const char* name : {"dgx8", "dgx8-mig"}) {
    EXPECT_EQ(ReadDriverInfo(HostFs(FixtureRoot(name))).dev_gpu_minors,
              (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}))
        << name;
  }
  for (const char* name : {"h200", "dgx8", "h200-mig", "dgx8-mig"}) {
    DriverInfo info = ReadDriverInfo(HostFs(FixtureRoot(name)));
    EXPECT_EQ(info.version, "570.133.20") << name;
    EXPECT_EQ(info.flavor, DriverFlavor::kOpen) << name;
  }
}

TEST(ReadDriverInfoTest, NothingLoadedIsFactsNotErrors) {
  DriverInfo info = ReadDriverInfo(HostFs(TestRoot("driver-unbound")));
  EXPECT_FALSE(info.version_file_present);
  EXPECT_EQ(info.version, "");
  EXPECT_EQ(info.flavor, DriverFlavor::kUnknown);
  EXPECT_EQ(info.module_version, "");
  EXPECT_TRUE(info.proc_modules_readable);
  EXPECT_FALSE(info.modules.nvidia);
  EXPECT_FALSE(info.modules.nouveau);
  EXPECT_FALSE(info.dev_nvidiactl);
  EXPECT_FALSE(info.dev_nvidia_uvm);
  EXPECT_TRUE(info.dev_gpu_minors.empty());
}

TEST(ReadDriverInfoTest, NouveauIsSeen) {
  DriverInfo info = ReadDriverInfo(HostFs(TestRoot("nouveau")));
  EXPECT_TRUE(info.modules.nouveau);
  EXPECT_FALSE(info.modules.nvidia);
  EXPECT_FALSE(info.version_file_present);
}

TEST(ReadDriverInfoTest, ProprietaryModulesCannotDriveBlackwell) {
  DriverInfo info = ReadDriverInfo(HostFs(TestRoot("blackwell-proprietary")));
  EXPECT_EQ(info.flavor, DriverFlavor::kProprietary);
  EXPECT_EQ(info.version, "570.133.20");
  EXPECT_TRUE(info.modules.nvidia);
  EXPECT_TRUE(info.modules.nvidia_uvm);
  EXPECT_FALSE(info.modules.nvidia_modeset);
  EXPECT_EQ(info.dev_gpu_minors, (std::vector<int>{0}));
  EXPECT_FALSE(DriverFlavorSupports(info.flavor, ModuleFlavorFor(Architecture::kBlackwell)));
}

TEST(ReadDriverInfoTest, EmptyRootHasNothing) {
  std::string tmpl = (std::filesystem::path(::testing::TempDir()) / "driver_info_XXXXXX").string();
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  DriverInfo info = ReadDriverInfo(HostFs(tmpl));
  EXPECT_FALSE(info.version_file_present);
  EXPECT_FALSE(info.proc_modules_readable);
  EXPECT_FALSE(info.dev_nvidiactl);
  EXPECT_TRUE(info.dev_gpu_minors.empty());
  std::filesystem::remove_all(tmpl);
}

TEST(DriverFlavorTest, SupportsMatrix) {
  EXPECT_TRUE(DriverFlavorSupports(DriverFlavor::kOpen, ModuleFlavor::kOpenRequired));
  EXPECT_TRUE(DriverFlavorSupports(DriverFlavor::kOpen, ModuleFlavor::kEither));
  EXPECT_FALSE(DriverFlavorSupports(DriverFlavor::kOpen, ModuleFlavor::kProprietaryRequired));
  EXPECT_FALSE(DriverFlavorSupports(DriverFlavor::kProprietary, ModuleFlavor::kOpenRequired));
  EXPECT_TRUE(DriverFlavorSupports(DriverFlavor::kProprietary, ModuleFlavor::kEither));
  EXPECT_TRUE(DriverFlavorSupports(DriverFlavor::kProprietary, ModuleFlavor::kProprietaryRequired));
  EXPECT_TRUE(DriverFlavorSupports(DriverFlavor::kUnknown, ModuleFlavor::kOpenRequired));
  EXPECT_TRUE(DriverFlavorSupports(DriverFlavor::kUnknown, ModuleFlavor::kProprietaryRequired));
}

TEST(DriverFlavorTest, Names) {
  EXPECT_EQ(DriverFlavorName(DriverFlavor::kOpen), "open");
  EXPECT_EQ(DriverFlavorName(DriverFlavor::kProprietary), "proprietary");
  EXPECT_EQ(DriverFlavorName(DriverFlavor::kUnknown), "unknown");
}

}  // namespace
}  // namespace gpulet::node
