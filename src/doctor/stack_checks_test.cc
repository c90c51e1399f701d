#include "doctor/stack_checks.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "doctor/check_list.h"
#include "doctor/explain_catalog.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/files.h"

namespace gpulet::doctor {
namespace {

using ::testing::HasSubstr;
using testing::ScratchDir;

// A host root under construction, with the inventory discovery would have built for it.
struct Node {
  ScratchDir dir;
  gpu::Inventory inv;
  DoctorInput input;
  bool talos = false;
  bool cdi = false;

  Node() {
    inv.driver.proc_modules_readable = true;
    inv.driver.modules.nvidia = inv.driver.modules.nvidia_uvm = true;
    inv.driver.dev_nvidiactl = true;
    inv.driver.dev_gpu_minors = {0};
  }
  void Write(const std::string& path, const std::string& text) const { dir.Write(path, text); }
  void Link(const std::string& path, const std::string& target) const {
    std::filesystem::path p = std::filesystem::path(dir.path()) / path;
    std::filesystem::create_directories(p.parent_path());
    std::filesystem::create_symlink(target, p);
  }
  CheckResult Run(CheckResult (*check)(const StackInput&)) const {
    HostFs host(dir.path());
    return check(StackInput{host, inv, input, talos, cdi});
  }
};

std::string Text(const CheckResult& r) {
  return absl::StrCat(r.summary, "\n", absl::StrJoin(r.evidence, "\n"), "\n", r.fix);
}

constexpr char kProcDevices[] =
    "Character devices:\n  1 mem\n195 nvidia-frontend\n509 nvidia-uvm\n\nBlock devices:\n"
    "  8 sd\n";

TEST(CgroupDevicesTest, SystemdDriverWithoutDevCharLinksWarnsUnlessCdiGivesTheDevices) {
  Node n;
  EXPECT_EQ(n.Run(&CheckCgroupDevices).verdict, Verdict::kNotChecked);  // no /sys/fs/cgroup
  n.Write("sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n");
  n.Write("proc/devices", kProcDevices);
  n.inv.driver.dev_nvidia_uvm = true;
  // The cgroupfs driver: systemd does not rewrite the rules.
  CheckResult r = n.Run(&CheckCgroupDevices);
  EXPECT_EQ(r.verdict, Verdict::kPass) << Text(r);
  EXPECT_THAT(r.summary, HasSubstr("cgroupfs"));

  n.Write("var/lib/kubelet/config.yaml",
          "apiVersion: kubelet.config.k8s.io/v1beta1\ncgroupDriver: systemd\n");
  r = n.Run(&CheckCgroupDevices);
  EXPECT_EQ(r.verdict, Verdict::kWarn) << Text(r);
  EXPECT_THAT(r.summary, HasSubstr("Failed to initialize NVML: Unknown Error"));
  EXPECT_THAT(Text(r), HasSubstr("cgroupDriver: systemd at /var/lib/kubelet/config.yaml:2"));
  EXPECT_THAT(Text(r), HasSubstr("/dev/char/195:0 (/dev/nvidia0)"));
  EXPECT_THAT(Text(r), HasSubstr("/dev/char/195:255 (/dev/nvidiactl)"));
  EXPECT_THAT(Text(r), HasSubstr("/dev/char/509:0 (/dev/nvidia-uvm)"));
  EXPECT_THAT(r.fix, HasSubstr("nvidia-ctk system create-dev-char-symlinks --create-all"));

  n.cdi = true;  // CDI puts the nodes in the OCI spec
  EXPECT_EQ(n.Run(&CheckCgroupDevices).verdict, Verdict::kPass);
  n.cdi = false;
  n.Link("dev/char/195:0", "../nvidia0");
  n.Link("dev/char/195:255", "../nvidiactl");
  EXPECT_EQ(n.Run(&CheckCgroupDevices).verdict, Verdict::kWarn);  // uvm's link still missing
  n.Link("dev/char/509:0", "../nvidia-uvm");
  r = n.Run(&CheckCgroupDevices);
  EXPECT_EQ(r.verdict, Verdict::kPass) << Text(r);
}

TEST(CgroupDevicesTest, ContainerdSystemdCgroupCountsAsTheSystemdDriver) {
  Node n;
  n.Write("sys/fs/cgroup/devices/devices.list", "a *:* rwm\n");  // cgroup v1
  n.Write("proc/devices", kProcDevices);
  n.Write("etc/containerd/config.toml",
          "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n"
          "  SystemdCgroup = true\n");
  CheckResult r = n.Run(&CheckCgroupDevices);
  EXPECT_EQ(r.verdict, Verdict::kWarn) << Text(r);
  EXPECT_THAT(Text(r), HasSubstr("cgroup v1"));
  EXPECT_THAT(Text(r), HasSubstr("SystemdCgroup = true at /etc/containerd/config.toml:3"));
}

TEST(CrioTest, NvidiaRuntimeHookOrCdi) {
  Node n;
  EXPECT_EQ(n.Run(&CheckCrio).verdict, Verdict::kNotChecked);  // no CRI-O
  n.Write("etc/crio/crio.conf", "[crio.runtime]\ncgroup_manager = \"systemd\"\n");
  CheckResult r = n.Run(&CheckCrio);
  EXPECT_EQ(r.verdict, Verdict::kFail) << Text(r);
  EXPECT_THAT(r.fix, HasSubstr("nvidia-ctk runtime configure --runtime=crio"));

  n.Write("etc/crio/crio.conf.d/99-nvidia.conf",
          "[crio.runtime.runtimes.nvidia]\nruntime_path = \"/usr/bin/nvidia-container-runtime\"\n");
  r = n.Run(&CheckCrio);
  EXPECT_EQ(r.verdict, Verdict::kWarn) << Text(r);
  EXPECT_THAT(r.summary, HasSubstr("runtimeClassName: nvidia"));
  EXPECT_THAT(Text(r), HasSubstr("runtime nvidia at /etc/crio/crio.conf.d/99-nvidia.conf:1"));

  n.Write("etc/crio/crio.conf.d/99-nvidia.conf",
          "[crio.runtime]\ndefault_runtime = \"nvidia\"\n[crio.runtime.runtimes.nvidia]\n");
  EXPECT_EQ(n.Run(&CheckCrio).verdict, Verdict::kPass);

  n.Write("etc/crio/crio.conf.d/99-nvidia.conf", "");
  n.Write("usr/share/containers/oci/hooks.d/oci-nvidia-hook.json", "{}");
  r = n.Run(&CheckCrio);
  EXPECT_EQ(r.verdict, Verdict::kPass) << Text(r);
  EXPECT_THAT(r.summary, HasSubstr("OCI hook"));

  n.cdi = true;
  n.Write("etc/crio/crio.conf", "[crio.runtime]\ncdi_spec_dirs = [\"/etc/cdi\"]\n");
  r = n.Run(&CheckCrio);
  EXPECT_EQ(r.verdict, Verdict::kWarn) << Text(r);
  EXPECT_THAT(r.summary, HasSubstr("/var/run/cdi"));
  n.Write("etc/crio/crio.conf", "[crio.runtime]\n");
  EXPECT_EQ(n.Run(&CheckCrio).verdict, Verdict::kPass);

  n.talos = true;
  EXPECT_EQ(n.Run(&CheckCrio).verdict, Verdict::kNotChecked);
}

TEST(UvmTest, TheModuleItsDeviceNodesAndTheirMajor) {
  Node n;
  n.Write("proc/devices", kProcDevices);
  n.inv.driver.proc_modules_readable = false;
  EXPECT_EQ(n.Run(&CheckUvm).verdict, Verdict::kNotChecked);
  n.inv.driver.proc_modules_readable = true;
  n.inv.driver.modules.nvidia_uvm = false;
  CheckResult r = n.Run(&CheckUvm);
  EXPECT_EQ(r.verdict, Verdict::kFail);
  EXPECT_THAT(r.summary, HasSubstr("CUDA_ERROR_UNKNOWN"));
  n.inv.driver.modules.nvidia_uvm = true;
  r = n.Run(&CheckUvm);
  EXPECT_EQ(r.verdict, Verdict::kFail);
  EXPECT_THAT(r.summary, HasSubstr("/dev/nvidia-uvm does not exist"));
  EXPECT_THAT(r.fix, HasSubstr("nvidia-modprobe -u -c=0"));
  EXPECT_THAT(Text(r), HasSubstr("nvidia-uvm is major 509"));
  n.talos = true;
  EXPECT_THAT(n.Run(&CheckUvm).fix, HasSubstr("nvidia-container-toolkit-production"));
  n.talos = false;
  n.inv.driver.dev_nvidia_uvm = true;
  EXPECT_EQ(n.Run(&CheckUvm).verdict, Verdict::kWarn);  // no -tools node
  n.inv.driver.dev_nvidia_uvm_tools = true;
  n.Write("sys/module/nvidia_uvm/parameters/uvm_disable_hmm", "N\n");
  r = n.Run(&CheckUvm);
  EXPECT_EQ(r.verdict, Verdict::kPass) << Text(r);
  EXPECT_THAT(Text(r), HasSubstr("uvm_disable_hmm = N"));

  // A node left from an earlier load has another major (needs mknod: root, no nodev).
  std::string node = absl::StrCat(n.dir.path(), "/dev/nvidia-uvm");
  std::filesystem::create_directories(absl::StrCat(n.dir.path(), "/dev"));
  if (mknod(node.c_str(), S_IFCHR | 0600, makedev(510, 0)) != 0) {
    GTEST_SKIP() << "mknod needs root";
  }
  r = n.Run(&CheckUvm);
  EXPECT_EQ(r.verdict, Verdict::kFail) << Text(r);
  EXPECT_THAT(r.summary, HasSubstr("has major 510 but nvidia_uvm registered 509"));
}

TEST(FabricManagerTest, NvSwitchSystemsNeedItRunningAndItsLogSaysSo) {
  Node n;
  CheckResult r = n.Run(&CheckFabricManager);
  EXPECT_EQ(r.verdict, Verdict::kNotChecked);
  EXPECT_THAT(r.summary, HasSubstr("no NVSwitch"));
  n.Write("proc/driver/nvidia-nvswitch/devices/0000:05:00.0", "");
  r = n.Run(&CheckFabricManager);
  EXPECT_EQ(r.verdict, Verdict::kFail) << Text(r);
  EXPECT_THAT(r.summary, HasSubstr("system not yet initialized"));

  n.Write("usr/bin/nv-fabricmanager", "");
  EXPECT_EQ(n.Run(&CheckFabricManager).verdict, Verdict::kWarn);  // no log to read
  const std::string ok =
      "[Jan 05 2026 14:45:28] [INFO] [tid 1120] Successfully configured all the available "
      "NVSwitches to route GPU NVLink traffic. NVLink Peer-to-Peer support will be enabled "
      "once the GPUs are successfully registered with the NVLink fabric.\n";
  // A failed start (a real message of the catalogue's fabric-manager.yaml), then success.
  const std::string mismatch =
      "nv-fabricmanager[3228]: fabric manager NVIDIA GPU driver interface version 530.30.02 "
      "don't match with driver version 530.41.03. Please update with matching NVIDIA driver "
      "package.\n";
  n.Write("var/log/fabricmanager.log", mismatch + ok);
  r = n.Run(&CheckFabricManager);
  EXPECT_EQ(r.verdict, Verdict::kPass) << Text(r);
  EXPECT_THAT(Text(r), HasSubstr("fabricmanager.log:2: success"));
  n.Write("var/log/fabricmanager.log", ok + mismatch);
  r = n.Run(&CheckFabricManager);
  EXPECT_EQ(r.verdict, Verdict::kFail) << Text(r);
  EXPECT_THAT(Text(r), HasSubstr("explain: fabricmanager-version-mismatch"));
  n.Write("var/log/fabricmanager.log", "[INFO] Fabric Manager starting\n");
  EXPECT_EQ(n.Run(&CheckFabricManager).verdict, Verdict::kWarn);
}

TEST(DcgmHostEngineTest, ProbesItsDefaultAddressWhenInstalled) {
  Node n;
  EXPECT_EQ(n.Run(&CheckDcgmHostEngine).verdict, Verdict::kNotChecked);  // not installed
  n.Write("usr/bin/nv-hostengine", "");
  EXPECT_EQ(n.Run(&CheckDcgmHostEngine).verdict, Verdict::kNotChecked);  // no probe
  std::string asked;
  n.input.tcp_probe = [&](const std::string& host, int port) {
    asked = absl::StrCat(host, ":", port);
    return absl::UnavailableError("Connection refused");
  };
  CheckResult r = n.Run(&CheckDcgmHostEngine);
  EXPECT_EQ(asked, "127.0.0.1:5555");
  EXPECT_EQ(r.verdict, Verdict::kWarn);
  EXPECT_THAT(Text(r), HasSubstr("Connection refused"));
  n.input.tcp_probe = [](const std::string&, int) { return absl::OkStatus(); };
  EXPECT_EQ(n.Run(&CheckDcgmHostEngine).verdict, Verdict::kPass);
}

TEST(MigModeCheckTest, ModeOnWithoutInstancesWarns) {
  Node n;
  gpu::Gpu plain;
  plain.uuid = "GPU-plain";
  n.inv.gpus.push_back(plain);
  EXPECT_EQ(n.Run(&CheckMig).verdict, Verdict::kNotChecked);
  gpu::Gpu a100;
  a100.uuid = "GPU-a100";
  a100.mig_capable = true;
  a100.mig_enabled = true;
  n.inv.gpus.push_back(a100);
  CheckResult r = n.Run(&CheckMig);
  EXPECT_EQ(r.verdict, Verdict::kWarn);
  EXPECT_THAT(r.summary, HasSubstr("no GPU instance exists on GPU-a100"));
  gpu::MigDeviceInfo m;
  m.profile = "3g.40gb";
  n.inv.gpus.back().mig_devices = {m, m};
  r = n.Run(&CheckMig);
  EXPECT_EQ(r.verdict, Verdict::kPass) << Text(r);
  EXPECT_THAT(Text(r), HasSubstr("GPU-a100: MIG on, 2 device(s): 3g.40gb, 3g.40gb"));
}

// The list of check names the catalogue validates `check` against is the doctor's report.
TEST(VramCheckTest, SaysWhatHoldsASlicedContainersMemory) {
  Node n;
  EXPECT_EQ(n.Run(&CheckVram).verdict, Verdict::kNotChecked);  // no slices, no shares
  n.input.gpulet_slices = true;
  n.input.gpulet_vram_host_dir = "/var/lib/gpulet/vram";
  n.input.gpulet_vram_library_error = "the VRAM enforcement library is neither at /a nor at /b";
  n.inv.system.driver_version = "570.133.20";
  CheckResult r = n.Run(&CheckVram);
  EXPECT_EQ(r.verdict, Verdict::kFail);
  EXPECT_THAT(r.summary, HasSubstr("refuses every sliced container: the VRAM enforcement "
                                   "library is neither at /a nor at /b"));
  EXPECT_THAT(Text(r), HasSubstr("driver 570.133.20; no dmem cgroup controller"));

  n.input.gpulet_vram_library = "/usr/lib/gpulet/libgpulet-vram.so";
  r = n.Run(&CheckVram);
  EXPECT_EQ(r.verdict, Verdict::kPass);
  EXPECT_THAT(r.summary, HasSubstr("the driver has no limit of its own"));
  EXPECT_THAT(Text(r), HasSubstr("not installed yet"));
  n.Write("var/lib/gpulet/vram/lib/libgpulet-vram.so", "elf");
  EXPECT_THAT(Text(n.Run(&CheckVram)), HasSubstr("installed for containers"));

  // A driver and kernel that hold limits themselves, for the GPU the controller lists.
  n.inv.system.driver_version = "615.10";
  gpu::Gpu g;
  g.index = 1;
  g.bus_id = "00000000:02:00.0";
  n.inv.gpus.push_back(g);
  n.Write("sys/fs/cgroup/dmem.capacity", "nvidia/0000:03:00.0/vidmem 34359738368\n");
  r = n.Run(&CheckVram);
  EXPECT_THAT(r.summary, HasSubstr("the driver has no limit of its own"));  // another GPU's
  EXPECT_THAT(Text(r), HasSubstr("lists no NVIDIA GPU"));
  n.Write("sys/fs/cgroup/dmem.capacity", "nvidia/0000:02:00.0/vidmem 34359738368\n");
  r = n.Run(&CheckVram);
  EXPECT_EQ(r.verdict, Verdict::kPass);
  EXPECT_THAT(r.summary, HasSubstr("and the driver holds them too, set per container by gpulet"));
  EXPECT_THAT(Text(r), HasSubstr("lists GPU 1: the driver holds each sliced container's limit"));
  n.inv.system.driver_version = "570.133.20";  // the report's driver: the library alone
  EXPECT_THAT(n.Run(&CheckVram).summary, HasSubstr("the driver has no limit of its own"));

  n.input.gpulet_vram_enforce = false;
  r = n.Run(&CheckVram);
  EXPECT_EQ(r.verdict, Verdict::kWarn);
  EXPECT_THAT(r.summary, HasSubstr("accounting only"));
}

TEST(StackChecksTest, TheCatalogueKnowsExactlyTheDoctorsChecks) {
  Node n;
  gpu::Gpu g;
  g.uuid = "GPU-1";
  g.on_pci = true;
  n.inv.gpus.push_back(g);
  HostFs host(n.dir.path());
  n.input.host = &host;
  n.input.inventory = &n.inv;
  Report report = RunDoctor(n.input);
  // The report runs exactly the list's checks, in its order, each with its title.
  std::vector<std::string> ran;
  for (const CheckResult& c : report.checks) {
    EXPECT_TRUE(IsDoctorCheckName(c.id)) << c.id;
    EXPECT_EQ(c.title, doctor::CheckTitle(c.id)) << c.id;
    ran.push_back(c.id);
  }
  std::vector<std::string> listed;
  for (const doctor::CheckInfo& c : doctor::CheckList()) listed.emplace_back(c.id);
  EXPECT_EQ(ran, listed);
}

// docs/troubleshooting.md's table lists the doctor's checks, the ids users script against
// (`doctor --json`): every id in the report's order, no more and no fewer, each with the title
// it prints.
TEST(DoctorDocsTest, TroubleshootingListsEveryCheckInOrder) {
  Node n;
  gpu::Gpu g;
  g.uuid = "GPU-1";
  g.on_pci = true;
  n.inv.gpus.push_back(g);
  HostFs host(n.dir.path());
  n.input.host = &host;
  n.input.inventory = &n.inv;
  Report report = RunDoctor(n.input);
  std::string doc =
      testing::ReadTextFile(std::string(GPULET_SOURCE_DIR) + "/docs/troubleshooting.md");
  std::vector<std::pair<std::string, std::string>> rows;  // id, what the doc says it prints
  for (absl::string_view line : absl::StrSplit(doc, '\n')) {
    line = absl::StripLeadingAsciiWhitespace(line);
    if (!absl::StartsWith(line, "| `")) continue;
    std::vector<std::string> cells = absl::StrSplit(line, '|');
    if (cells.size() < 3) continue;
    std::string id(absl::StripAsciiWhitespace(cells[1]));
    rows.push_back(
        {id.substr(1, id.size() - 2), std::string(absl::StripAsciiWhitespace(cells[2]))});
  }
  ASSERT_EQ(rows.size(), report.checks.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].first, report.checks[i].id) << "row " << i + 1;
    if (report.checks[i].id == "os.release") continue;  // the doc adds what it says on Talos
    EXPECT_TRUE(absl::StartsWith(rows[i].second, report.checks[i].title))
        << rows[i].first << ": the doc says \"" << rows[i].second << "\", doctor prints \""
        << report.checks[i].title << "\"";
  }
}

}  // namespace
}  // namespace gpulet::doctor
