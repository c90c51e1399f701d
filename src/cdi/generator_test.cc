#include "cdi/generator.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/pci_inventory.h"
#include "testing/files.h"
#include "testing/homelab.h"
#include "testing/subprocess.h"

namespace gpulet::cdi {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr const char* kUuid0 = testing::kRtx3080;
constexpr const char* kUuid1 = testing::kRtx5090;

using testing::SimRoot;
std::string TestRoot(const std::string& name) {
  return absl::StrCat(GPULET_SOURCE_DIR, "/tests/fixtures/hostroots/", name);
}

gpu::DeviceIdentity Identity(unsigned index, const std::string& uuid, const std::string& bus,
                             unsigned minor) {
  return testing::GpuIdentity(index, uuid, bus, minor);
}
using testing::InventoryFor;
gpu::Inventory Homelab() { return testing::HomelabInventory(); }

std::vector<std::string> Names(const Spec& s) {
  std::vector<std::string> out;
  for (const Device& d : s.devices) out.push_back(d.name);
  return out;
}

std::vector<std::string> ContainerPaths(const ContainerEdits& e) {
  std::vector<std::string> out;
  for (const Mount& m : e.mounts) out.push_back(m.container_path);
  return out;
}

using TempDir = gpulet::testing::ScratchDir;

TEST(CdiGeneratorTest, HomelabTalos113Layout) {
  HostFs host(SimRoot("homelab"));
  absl::StatusOr<GeneratedSpec> g = GenerateSpec(Homelab(), host, GeneratorOptions{});
  ASSERT_TRUE(g.ok()) << g.status();
  const Spec& s = g->spec;
  EXPECT_TRUE(g->warnings.empty()) << g->warnings[0];
  EXPECT_EQ(s.version, "0.5.0");
  EXPECT_EQ(s.kind, "nvidia.com/gpu");
  EXPECT_THAT(Names(s), ElementsAre("0", "1", kUuid0, kUuid1, "all"));
  ASSERT_EQ(s.devices[0].edits.device_nodes.size(), 1u);
  EXPECT_EQ(s.devices[0].edits.device_nodes[0].path, "/dev/nvidia0");
  // Dev root = host root: the host path says nothing new and is left out.
  EXPECT_EQ(s.devices[0].edits.device_nodes[0].host_path, "");
  EXPECT_EQ(s.devices[3].edits.device_nodes[0].path, "/dev/nvidia1");
  EXPECT_EQ(s.devices[4].edits.device_nodes.size(), 2u);

  EXPECT_THAT(s.edits.env, ElementsAre("NVIDIA_VISIBLE_DEVICES=void"));
  std::vector<std::string> nodes;
  for (const DeviceNode& n : s.edits.device_nodes) nodes.push_back(n.path);
  EXPECT_THAT(nodes, ElementsAre("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                                 "/dev/nvidia-modeset"));

  std::vector<std::string> mounts = ContainerPaths(s.edits);
  // Libraries: every lib*.so.<version>, but not Talos' own glibc beside them.
  EXPECT_THAT(mounts, ::testing::Contains("/usr/local/lib/libnvidia-ml.so.570.133.20"));
  EXPECT_THAT(mounts, ::testing::Contains("/usr/local/lib/libcuda.so.570.133.20"));
  EXPECT_THAT(mounts, ::testing::Contains("/usr/local/lib/libnvidia-gpucomp.so.570.133.20"));
  EXPECT_THAT(mounts, ::testing::Not(::testing::Contains("/usr/local/lib/libc.so.6")));
  // Binaries once, at their real place (the /usr/bin links resolve to /usr/local/bin).
  EXPECT_THAT(mounts, ::testing::Contains("/usr/local/bin/nvidia-smi"));
  EXPECT_THAT(mounts, ::testing::Not(::testing::Contains("/usr/bin/nvidia-smi")));
  EXPECT_THAT(mounts, ::testing::Contains("/usr/local/bin/nvidia-cuda-mps-server"));
  EXPECT_THAT(mounts, ::testing::Not(::testing::Contains("/usr/local/bin/nvidia-ctk")));
  EXPECT_THAT(mounts, ::testing::Contains("/usr/lib/firmware/nvidia/570.133.20/gsp_ga10x.bin"));
  EXPECT_EQ(mounts.size(), 9u + 5u + 2u);
  for (const Mount& m : s.edits.mounts) {
    EXPECT_EQ(m.host_path, m.container_path);
    EXPECT_THAT(m.options, ElementsAre("ro", "nosuid", "nodev", "rbind", "rprivate"));
  }

  EXPECT_EQ(g->hook_path, "/usr/local/bin/nvidia-cdi-hook");
  ASSERT_EQ(s.edits.hooks.size(), 2u);
  EXPECT_EQ(s.edits.hooks[0].hook_name, "createContainer");
  EXPECT_EQ(s.edits.hooks[0].path, "/usr/local/bin/nvidia-cdi-hook");
  EXPECT_THAT(s.edits.hooks[0].args, ElementsAre("nvidia-cdi-hook", "create-symlinks", "--link",
                                                 "libcuda.so.1::/usr/local/lib/libcuda.so"));
  EXPECT_THAT(s.edits.hooks[1].args,
              ElementsAre("nvidia-cdi-hook", "update-ldcache", "--folder", "/usr/local/lib"));
  EXPECT_TRUE(ValidateSpec(s).ok());
}

TEST(CdiGeneratorTest, OutputIsDeterministic) {
  HostFs host(SimRoot("homelab"));
  absl::StatusOr<GeneratedSpec> a = GenerateSpec(Homelab(), host, GeneratorOptions{});
  absl::StatusOr<GeneratedSpec> b = GenerateSpec(Homelab(), host, GeneratorOptions{});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(ToYaml(a->spec), ToYaml(b->spec));
  EXPECT_EQ(ToJson(a->spec), ToJson(b->spec));
}

TEST(CdiGeneratorTest, CheckedInHomelabSpecIsCurrent) {
  // sim/fixtures/homelab/root/var/run/cdi/nvidia.yaml is what `gpulet --simulate homelab cdi
  // generate` writes; the doctor's healthy-node test reads it.
  std::ifstream in(SimRoot("homelab") + "/var/run/cdi/nvidia.yaml");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  absl::StatusOr<GeneratedSpec> g =
      GenerateSpec(Homelab(), HostFs(SimRoot("homelab")), GeneratorOptions{});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(text, ToYaml(g->spec)) << "regenerate with: gpulet --simulate homelab cdi generate -o "
                                      "sim/fixtures/homelab/root/var/run/cdi/nvidia.yaml";
}

TEST(CdiGeneratorTest, Talos112GlibcLayoutIsMountedOnce) {
  gpu::Inventory inv =
      InventoryFor(TestRoot("talos-1.12"), {Identity(0, kUuid0, "0000:01:00.0", 0)}, "580.105.08");
  absl::StatusOr<GeneratedSpec> g =
      GenerateSpec(inv, HostFs(TestRoot("talos-1.12")), GeneratorOptions{});
  ASSERT_TRUE(g.ok()) << g.status();
  std::vector<std::string> mounts = ContainerPaths(g->spec.edits);
  EXPECT_THAT(mounts, ::testing::Contains("/usr/local/glibc/usr/lib/libnvidia-ml.so.580.105.08"));
  EXPECT_EQ(std::count_if(mounts.begin(), mounts.end(),
                          [](const std::string& m) { return absl::StrContains(m, "libcuda."); }),
            1);
  EXPECT_THAT(mounts, ::testing::Not(::testing::Contains("/usr/local/glibc/usr/lib/libc.so.6")));
  // Only /usr/local/bin has the hook program on Talos before 1.13.
  EXPECT_EQ(g->hook_path, "/usr/local/bin/nvidia-cdi-hook");
  EXPECT_THAT(g->spec.edits.hooks.back().args, ElementsAre("nvidia-cdi-hook", "update-ldcache",
                                                           "--folder", "/usr/local/glibc/usr/lib"));
  // nvidia_uvm is not loaded there: the generator says so.
  ASSERT_FALSE(g->warnings.empty());
  EXPECT_THAT(g->warnings[0], HasSubstr("/dev/nvidia-uvm"));
}

TEST(CdiGeneratorTest, Talos18AndDebianLayouts) {
  gpu::Inventory t18 =
      InventoryFor(TestRoot("talos-1.8"), {Identity(0, kUuid0, "0000:01:00.0", 0)}, "550.127.05");
  absl::StatusOr<GeneratedSpec> g = GenerateSpec(t18, HostFs(TestRoot("talos-1.8")), {});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_THAT(ContainerPaths(g->spec.edits),
              ::testing::Contains("/usr/local/glibc/lib/libnvidia-ml.so.550.127.05"));

  gpu::Inventory h200 =
      InventoryFor(SimRoot("h200"), {Identity(0, kUuid0, "0000:18:00.0", 0)}, "570.133.20");
  absl::StatusOr<GeneratedSpec> d = GenerateSpec(h200, HostFs(SimRoot("h200")), {});
  ASSERT_TRUE(d.ok()) << d.status();
  std::vector<std::string> mounts = ContainerPaths(d->spec.edits);
  EXPECT_THAT(mounts, ::testing::Contains("/usr/lib/x86_64-linux-gnu/libcuda.so.570.133.20"));
  EXPECT_THAT(mounts, ::testing::Contains("/usr/bin/nvidia-smi"));
  // /lib -> usr/lib: the firmware is found twice but mounted once.
  EXPECT_EQ(std::count_if(mounts.begin(), mounts.end(),
                          [](const std::string& m) { return absl::StrContains(m, "gsp_"); }),
            2);
  EXPECT_EQ(d->hook_path, "/usr/bin/nvidia-cdi-hook");
}

TEST(CdiGeneratorTest, NameStrategiesAndForcedVersions) {
  HostFs host(SimRoot("homelab"));
  GeneratorOptions index;
  index.names = NameStrategy::kIndex;
  EXPECT_THAT(Names(GenerateSpec(Homelab(), host, index)->spec), ElementsAre("0", "1", "all"));

  GeneratorOptions uuid;
  uuid.names = NameStrategy::kUuid;
  uuid.cdi_version = "0.3.0";  // no index names, no hostPath: 0.3.0 can express it
  absl::StatusOr<GeneratedSpec> u = GenerateSpec(Homelab(), host, uuid);
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_THAT(Names(u->spec), ElementsAre(kUuid0, kUuid1, "all"));
  EXPECT_EQ(u->spec.version, "0.3.0");

  GeneratorOptions old;
  old.cdi_version = "0.4.0";
  absl::StatusOr<GeneratedSpec> o = GenerateSpec(Homelab(), host, old);
  EXPECT_TRUE(absl::IsInvalidArgument(o.status())) << o.status();
  EXPECT_THAT(std::string(o.status().message()), HasSubstr("starting with a digit"));

  GeneratorOptions kind;
  kind.kind = "example.com/gpu";
  EXPECT_EQ(GenerateSpec(Homelab(), host, kind)->spec.kind, "example.com/gpu");
  kind.kind = "gpu";
  EXPECT_TRUE(absl::IsInvalidArgument(GenerateSpec(Homelab(), host, kind).status()));
}

TEST(CdiGeneratorTest, RootsOutsideTheHostRootAreHostPaths) {
  // The podman test's arrangement: the fixture is the host root, but device nodes and
  // driver files come from directories on this machine.
  TempDir dev, driver;
  dev.Write("dev/nvidia0", "");
  dev.Write("dev/nvidia1", "");
  dev.Write("dev/nvidiactl", "");
  driver.Write("usr/local/lib/libcuda.so.570.133.20", "");
  GeneratorOptions opt;
  opt.dev_root = dev.path();
  opt.driver_root = driver.path();
  absl::StatusOr<GeneratedSpec> g = GenerateSpec(Homelab(), HostFs(SimRoot("homelab")), opt);
  ASSERT_TRUE(g.ok()) << g.status();
  const DeviceNode& n = g->spec.devices[0].edits.device_nodes[0];
  EXPECT_EQ(n.path, "/dev/nvidia0");
  EXPECT_EQ(n.host_path, dev.path() + "/dev/nvidia0");
  ASSERT_EQ(g->spec.edits.mounts.size(), 1u);
  EXPECT_EQ(g->spec.edits.mounts[0].host_path,
            driver.path() + "/usr/local/lib/libcuda.so.570.133.20");
  EXPECT_EQ(g->spec.edits.mounts[0].container_path, "/usr/local/lib/libcuda.so.570.133.20");
  // The hook program is probed on the host root (the fixture has it).
  EXPECT_EQ(g->hook_path, "/usr/local/bin/nvidia-cdi-hook");
  // nvidia-uvm is missing from the dev root: warned about.
  EXPECT_THAT(absl::StrJoin(g->warnings, "\n"), HasSubstr("/dev/nvidia-uvm"));
}

TEST(CdiGeneratorTest, DriverRootInsideTheHostRootLosesThePrefix) {
  // gpulet in a pod with the host at /host and the GPU operator's driver at
  // /run/nvidia/driver: host paths must be /run/nvidia/driver/..., container paths /usr/...
  TempDir host;
  host.Write("run/nvidia/driver/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.133.20", "");
  host.Write("dev/nvidia0", "");
  host.Write("usr/bin/nvidia-ctk", "");
  gpu::Inventory inv = Homelab();
  GeneratorOptions opt;
  opt.driver_root = host.path() + "/run/nvidia/driver";
  absl::StatusOr<GeneratedSpec> g = GenerateSpec(inv, HostFs(host.path()), opt);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(g->spec.edits.mounts.size(), 1u);
  EXPECT_EQ(g->spec.edits.mounts[0].host_path,
            "/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.133.20");
  EXPECT_EQ(g->spec.edits.mounts[0].container_path,
            "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.133.20");
  // Only GPU 0 has a node: GPU 1 is left out with a warning.
  EXPECT_THAT(Names(g->spec), ElementsAre("0", kUuid0, "all"));
  EXPECT_THAT(absl::StrJoin(g->warnings, "\n"), HasSubstr("/dev/nvidia1 is missing"));
  ASSERT_EQ(g->left_out.size(), 1u);  // as data, for the device plugin's health
  EXPECT_EQ(g->left_out[0].gpu_uuid, kUuid1);
  EXPECT_EQ(g->left_out[0].uuid, kUuid1);
  EXPECT_EQ(g->left_out[0].gpu_instance_id, std::nullopt);
  EXPECT_THAT(g->left_out[0].reason, HasSubstr("/dev/nvidia1 is missing"));
  EXPECT_THAT(g->left_out[0].action, HasSubstr("nvidia-modprobe -c 1"));
  // nvidia-ctk takes hooks as a subcommand; no libcuda, so no create-symlinks hook.
  EXPECT_EQ(g->hook_path, "/usr/bin/nvidia-ctk");
  ASSERT_EQ(g->spec.edits.hooks.size(), 1u);
  EXPECT_THAT(g->spec.edits.hooks[0].args, ElementsAre("nvidia-ctk", "hook", "update-ldcache",
                                                       "--folder", "/usr/lib/x86_64-linux-gnu"));
}

TEST(CdiGeneratorTest, NoHookProgramMeansNoHooks) {
  TempDir host;
  host.Write("usr/lib64/libcuda.so.570.133.20", "");
  host.Write("dev/nvidia0", "");
  host.Write("dev/nvidia1", "");
  absl::StatusOr<GeneratedSpec> g = GenerateSpec(Homelab(), HostFs(host.path()), {});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(g->spec.edits.hooks.empty());
  EXPECT_EQ(g->hook_path, "");
  EXPECT_THAT(absl::StrJoin(g->warnings, "\n"),
              HasSubstr("neither nvidia-cdi-hook nor nvidia-ctk"));
  EXPECT_THAT(absl::StrJoin(g->warnings, "\n"), HasSubstr("LD_LIBRARY_PATH=/usr/lib64"));

  GeneratorOptions explicit_hook;
  explicit_hook.hook_path = "/opt/hook";
  g = GenerateSpec(Homelab(), HostFs(host.path()), explicit_hook);
  ASSERT_TRUE(g.ok());
  ASSERT_FALSE(g->spec.edits.hooks.empty());
  EXPECT_EQ(g->spec.edits.hooks[0].path, "/opt/hook");
  EXPECT_EQ(g->spec.edits.hooks[0].args[0], "hook");
  explicit_hook.hook_path = "relative/hook";
  EXPECT_TRUE(absl::IsInvalidArgument(
      GenerateSpec(Homelab(), HostFs(host.path()), explicit_hook).status()));
}

TEST(CdiGeneratorTest, SonameLinksAndTheHooksTheProgramKnows) {
  TempDir host;
  host.Write("usr/lib64/libnvidia-ml.so.570.133.20", "");
  host.Write("usr/lib64/libcuda.so.570.133.20", "");
  host.Write("dev/nvidia0", "");
  host.Write("dev/nvidia1", "");
  fs::path lib = fs::path(host.path()) / "usr/lib64";
  fs::create_symlink("libnvidia-ml.so.570.133.20", lib / "libnvidia-ml.so.1");
  fs::create_symlink("libcuda.so.570.133.20", lib / "libcuda.so.1");
  fs::create_symlink("libnvidia-ml.so.1", lib / "libnvidia-ml.so");  // a dev link: not a soname
  fs::create_symlink("/usr/lib/libother.so.3", lib / "libnvidia-x.so.2");  // not the driver's
  // A hook program that names both newer hooks, as nvidia-cdi-hook >= 1.17 does.
  fs::create_directories(fs::path(host.path()) / "usr/local/bin");
  std::ofstream(fs::path(host.path()) / "usr/local/bin/nvidia-cdi-hook") << std::string(
      "\x7f"
      "ELF...create-symlinks\0enable-cuda-compat\0update-ldcache\0"
      "disable-device-node-modification\0",
      90);
  absl::StatusOr<GeneratedSpec> g = GenerateSpec(Homelab(), HostFs(host.path()), {});
  ASSERT_TRUE(g.ok()) << g.status();
  const std::vector<Hook>& hooks = g->spec.edits.hooks;
  ASSERT_EQ(hooks.size(), 4u);
  EXPECT_THAT(hooks[0].args,
              ElementsAre("nvidia-cdi-hook", "create-symlinks", "--link",
                          "libcuda.so.1::/usr/lib64/libcuda.so", "--link",
                          "libcuda.so.570.133.20::/usr/lib64/libcuda.so.1", "--link",
                          "libnvidia-ml.so.570.133.20::/usr/lib64/libnvidia-ml.so.1"));
  EXPECT_THAT(hooks[1].args, ElementsAre("nvidia-cdi-hook", "enable-cuda-compat",
                                         "--host-driver-version=570.133.20"));
  EXPECT_THAT(hooks[2].args,
              ElementsAre("nvidia-cdi-hook", "update-ldcache", "--folder", "/usr/lib64"));
  EXPECT_THAT(hooks[3].args, ElementsAre("nvidia-cdi-hook", "disable-device-node-modification"));

  // An older program (no such names in it) gets only the hooks every version has.
  std::ofstream(fs::path(host.path()) / "usr/local/bin/nvidia-cdi-hook") << "create-symlinks";
  g = GenerateSpec(Homelab(), HostFs(host.path()), {});
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(g->spec.edits.hooks.size(), 2u);
  EXPECT_EQ(g->spec.edits.hooks[1].args[1], "update-ldcache");
}

TEST(CdiGeneratorTest, TwoGpusWithOneMinorAreRefusedByName) {
  gpu::Inventory inv =
      InventoryFor(SimRoot("homelab"),
                   {Identity(0, kUuid0, "0000:01:00.0", 0), Identity(1, kUuid1, "0000:02:00.0", 0)},
                   "570.133.20");
  absl::StatusOr<GeneratedSpec> g = GenerateSpec(inv, HostFs(SimRoot("homelab")), {});
  ASSERT_TRUE(absl::IsFailedPrecondition(g.status())) << g.status();
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("0000:01:00.0"));
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("0000:02:00.0"));
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("both report device minor 0"));
}

TEST(CdiGeneratorTest, RefusesWithoutUsableGpus) {
  HostFs host(SimRoot("homelab"));
  gpu::Inventory broken = Homelab();
  broken.nvml_status = absl::NotFoundError("libnvidia-ml.so.1 not found");
  absl::StatusOr<GeneratedSpec> g = GenerateSpec(broken, host, {});
  EXPECT_TRUE(absl::IsFailedPrecondition(g.status()));
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("libnvidia-ml.so.1 not found"));

  // Driver unbound: PCI sees the GPUs, NVML none.
  gpu::Inventory unbound = InventoryFor(TestRoot("driver-unbound"), {}, "570.133.20");
  g = GenerateSpec(unbound, HostFs(TestRoot("driver-unbound")), {});
  EXPECT_TRUE(absl::IsFailedPrecondition(g.status()));
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("no GPU"));

  gpu::Inventory no_version = Homelab();
  no_version.system.driver_version.clear();
  no_version.driver.version.clear();
  EXPECT_TRUE(absl::IsFailedPrecondition(GenerateSpec(no_version, host, {}).status()));
}

// docs/mig.md: "A MIG device whose capability nodes are missing is left out of the spec with a
// warning saying how to create them". The h200-mig fixture's H200 has four MIG devices; here
// only GPU instance 3's capability nodes exist (minors 30 and 31 in its mig-minors).
TEST(CdiGeneratorTest, MigDeviceWithoutCapabilityNodesIsLeftOutWithTheFix) {
  TempDir host;
  fs::copy(SimRoot("h200-mig"), host.path(),
           fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  for (const char* cap : {"nvidia-cap30", "nvidia-cap31"}) {
    std::ofstream(fs::path(host.path()) / "dev/nvidia-caps" / cap);
  }
  gpu::Inventory inv = InventoryFor(
      host.path(), {Identity(0, "GPU-c1a7e0f2-9b34-4d58-8e61-2f0b7a3d0200", "0000:18:00.0", 0)},
      "570.133.20");
  ASSERT_EQ(inv.gpus.size(), 1u);
  auto mig = [](unsigned index, unsigned gi, const std::string& profile, const std::string& uuid) {
    gpu::MigDeviceInfo m;
    m.index = index;
    m.gpu_instance_id = gi;
    m.profile = profile;
    m.uuid = uuid;
    return m;
  };
  inv.gpus[0].mig_capable = inv.gpus[0].mig_enabled = true;
  inv.gpus[0].mig_devices = {mig(0, 3, "1g.18gb", "MIG-c1a7e0f2-9b34-5d58-8e61-2f0b7a3d0203"),
                             mig(1, 4, "1g.18gb", "MIG-c1a7e0f2-9b34-5d58-8e61-2f0b7a3d0204")};
  absl::StatusOr<GeneratedSpec> g = GenerateSpec(inv, HostFs(host.path()), {});
  ASSERT_TRUE(g.ok()) << g.status();
  // GPU instance 3 by index and UUID; GPU instance 4 not at all.
  EXPECT_THAT(Names(g->spec), ElementsAre("0", "GPU-c1a7e0f2-9b34-4d58-8e61-2f0b7a3d0200", "0:0",
                                          "MIG-c1a7e0f2-9b34-5d58-8e61-2f0b7a3d0203", "all"));
  std::vector<std::string> nodes;
  for (const DeviceNode& n : g->spec.devices[2].edits.device_nodes) nodes.push_back(n.path);
  EXPECT_THAT(nodes, ElementsAre("/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap30",
                                 "/dev/nvidia-caps/nvidia-cap31"));
  std::string warnings = absl::StrJoin(g->warnings, "\n");
  EXPECT_THAT(warnings, HasSubstr("GPU 0 MIG device 1 (1g.18gb, "
                                  "MIG-c1a7e0f2-9b34-5d58-8e61-2f0b7a3d0204) is left out of the "
                                  "spec: its capability nodes (/dev/nvidia-caps/nvidia-cap39, "
                                  "/dev/nvidia-caps/nvidia-cap40) are missing"));
  EXPECT_THAT(
      warnings,
      HasSubstr("`nvidia-modprobe -f /proc/driver/nvidia/capabilities/gpu0/mig/gi4/access`"));
  EXPECT_THAT(warnings, ::testing::Not(HasSubstr("2f0b7a3d0203")));
  EXPECT_TRUE(ValidateSpec(g->spec).ok());
  ASSERT_EQ(g->left_out.size(), 1u);
  EXPECT_EQ(g->left_out[0].gpu_uuid, "GPU-c1a7e0f2-9b34-4d58-8e61-2f0b7a3d0200");
  EXPECT_EQ(g->left_out[0].gpu_instance_id, 4u);
  EXPECT_EQ(g->left_out[0].uuid, "MIG-c1a7e0f2-9b34-5d58-8e61-2f0b7a3d0204");
  EXPECT_THAT(g->left_out[0].reason, HasSubstr("/dev/nvidia-caps/nvidia-cap40"));
}

TEST(CdiGeneratorTest, ParseNameStrategy) {
  EXPECT_EQ(*ParseNameStrategy("index"), NameStrategy::kIndex);
  EXPECT_EQ(*ParseNameStrategy("uuid"), NameStrategy::kUuid);
  EXPECT_EQ(*ParseNameStrategy("both"), NameStrategy::kBoth);
  EXPECT_FALSE(ParseNameStrategy("type-index").ok());
}

// --- the command ------------------------------------------------------------------------

TEST(CdiCommandTest, SimulatedGenerateWritesToStdoutByDefault) {
  testing::RunResult r = testing::RunProgram(
      {gpulet::testing::GpuletBinary(), "--simulate", "homelab", "cdi", "generate"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  absl::StatusOr<Spec> spec = ParseSpec(r.out, "stdout");
  ASSERT_TRUE(spec.ok()) << spec.status() << r.out;
  EXPECT_THAT(Names(*spec), ElementsAre("0", "1", kUuid0, kUuid1, "all"));
  EXPECT_THAT(r.err, HasSubstr("cdiVersion 0.5.0"));
}

TEST(CdiCommandTest, WritesAtomicallyToOutputAndListsIt) {
  TempDir dir;
  std::string out = dir.path() + "/etc/cdi/gpu.json";
  testing::RunResult r = testing::RunProgram(
      {gpulet::testing::GpuletBinary(), "--simulate", "homelab", "cdi", "generate", "--format",
       "json", "--output", out, "--device-name-strategy", "index", "--kind", "example.com/gpu"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("wrote " + out));
  struct stat st;
  ASSERT_EQ(stat(out.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);

  testing::RunResult list = testing::RunProgram(
      {gpulet::testing::GpuletBinary(), "--host-root", dir.path(), "cdi", "list"});
  EXPECT_EQ(list.exit_code, 0) << list.err;
  EXPECT_EQ(list.out, "example.com/gpu=0\nexample.com/gpu=1\nexample.com/gpu=all\n");
}

TEST(CdiCommandTest, BadOptionsAreUsageErrors) {
  testing::RunResult r =
      testing::RunProgram({gpulet::testing::GpuletBinary(), "--simulate", "homelab", "cdi",
                           "generate", "--cdi-version", "0.4.0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("cannot express"));
  r = testing::RunProgram({gpulet::testing::GpuletBinary(), "--simulate", "homelab", "cdi",
                           "generate", "--cdi-version", "9.9.9"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("not a CDI spec version"));
  r = testing::RunProgram({gpulet::testing::GpuletBinary(), "cdi"});
  EXPECT_EQ(r.exit_code, 2);
}

TEST(CdiCommandTest, ListReportsBrokenSpecs) {
  testing::RunResult r = testing::RunProgram(
      {gpulet::testing::GpuletBinary(), "--host-root", TestRoot("talos-1.12"), "cdi", "list"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "k8s.device-plugin.nvidia.com/gpu=GPU-1f6e2a43-9c0d-4b7e-8a15-3d2c1b0a3080\n");
  TempDir dir;
  fs::create_directories(dir.path() + "/etc/cdi");
  std::ofstream(dir.path() + "/etc/cdi/bad.yaml") << "cdiVersion: 0.5.0\n";
  r = testing::RunProgram(
      {gpulet::testing::GpuletBinary(), "--host-root", dir.path(), "cdi", "list"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("/etc/cdi/bad.yaml"));
}

}  // namespace
}  // namespace gpulet::cdi
