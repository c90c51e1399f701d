#include "doctor/doctor.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "health/xid_catalog.h"
#include "nlohmann/json.hpp"
#include "node/pci_inventory.h"
#include "testing/files.h"
#include "testing/homelab.h"
#include "testing/subprocess.h"

namespace gpulet::doctor {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

std::string SimRoot(const std::string& name) {
  return absl::StrCat(GPULET_SOURCE_DIR, "/sim/fixtures/", name, "/root");
}
std::string TestRoot(const std::string& name) {
  return absl::StrCat(GPULET_SOURCE_DIR, "/tests/fixtures/hostroots/", name);
}

gpu::DeviceIdentity Identity(unsigned index, const std::string& uuid, const std::string& bus,
                             unsigned minor) {
  gpu::DeviceIdentity id;
  id.index = index;
  id.uuid = uuid;
  id.bus_id = absl::StrCat("0000", bus);
  id.minor = minor;
  return id;
}

// What discovery would build for `root` with NVML reporting `ids` (OK status) or failing
// with `nvml` (then `ids` must be empty). No real NVML is touched, so the verdicts do not
// depend on the machine the test runs on.
gpu::Inventory InventoryFor(const std::string& root, const std::vector<gpu::DeviceIdentity>& ids,
                            absl::Status nvml, const std::string& driver = "") {
  HostFs host(root);
  gpu::Inventory inv = gpu::BuildInventory(nullptr, host, nvml);
  std::vector<absl::StatusOr<gpu::DeviceIdentity>> identities(ids.begin(), ids.end());
  absl::StatusOr<std::vector<node::PciGpu>> pci = node::ScanPciGpus(host);
  inv.gpus = gpu::MergeGpuViews(identities, pci.ok() ? *pci : std::vector<node::PciGpu>{});
  if (nvml.ok()) {
    inv.system.driver_version = driver;
    inv.system.library_path = "/usr/local/lib/libnvidia-ml.so.1";
    inv.system.cuda_driver_version = 12080;
  }
  return inv;
}

Report Diagnose(const std::string& root, const gpu::Inventory& inv,
                const HealthSource* health = nullptr) {
  HostFs host(root);
  DoctorInput in;
  in.host = &host;
  in.inventory = &inv;
  in.health = health;
  return RunDoctor(in);
}

Verdict VerdictOf(const Report& r, absl::string_view id) {
  const CheckResult* c = r.Find(id);
  EXPECT_NE(c, nullptr) << id;
  return c == nullptr ? Verdict::kNotChecked : c->verdict;
}

std::string Text(const Report& r, absl::string_view id) {
  const CheckResult* c = r.Find(id);
  if (c == nullptr) return "";
  return absl::StrCat(c->summary, "\n", absl::StrJoin(c->evidence, "\n"), "\n", c->fix);
}

absl::Status NotFound() { return absl::NotFoundError("libnvidia-ml.so.1 not found"); }

TEST(OsReleaseTest, TalosExpectationsComeFromTheReleaseTable) {
  EXPECT_EQ(ExpectationsFor(1, 8).library_dir, "/usr/local/glibc/lib");
  EXPECT_TRUE(ExpectationsFor(1, 8).needs_bpf_jit_harden_1);
  EXPECT_EQ(ExpectationsFor(1, 9).library_dir, "/usr/local/glibc/usr/lib");
  EXPECT_EQ(ExpectationsFor(1, 12).library_dir, "/usr/local/glibc/usr/lib");
  EXPECT_FALSE(ExpectationsFor(1, 12).cdi_mode);
  EXPECT_EQ(ExpectationsFor(1, 13).library_dir, "/usr/local/lib");
  EXPECT_TRUE(ExpectationsFor(1, 13).cdi_mode);
  EXPECT_FALSE(ExpectationsFor(1, 13).needs_bpf_jit_harden_1);
  EXPECT_FALSE(ExpectationsFor(1, 13).kernel_module_config_docs);
  EXPECT_TRUE(ExpectationsFor(1, 14).kernel_module_config_docs);
  for (int minor = 8; minor <= 14; ++minor) {
    TalosExpectations t = ExpectationsFor(1, minor);
    ASSERT_NE(t.release, nullptr) << minor;
    EXPECT_EQ(t.release->minor, minor);
    EXPECT_EQ(t.library_dir, t.release->layout.value.library_dir);
    EXPECT_TRUE(t.warning.empty()) << t.warning;
  }
  TalosExpectations newer = ExpectationsFor(1, 15);
  EXPECT_EQ(newer.label, "Talos 1.14");
  EXPECT_THAT(newer.warning, HasSubstr("newer than the newest release"));
  EXPECT_THAT(ExpectationsFor(0, 0).warning, HasSubstr("version is unknown"));
  TalosExpectations old = ExpectationsFor(1, 7);
  EXPECT_EQ(old.release, nullptr);
  EXPECT_THAT(old.warning, HasSubstr("Talos 1.7 is not supported"));
}

TEST(DoctorTest, NoGpuSaysSoPlainlyAndExitsThree) {
  Report r = Diagnose(TestRoot("no-gpu"), InventoryFor(TestRoot("no-gpu"), {}, NotFound()));
  EXPECT_EQ(r.ExitCode(), 3);
  EXPECT_EQ(VerdictOf(r, "gpu.present"), Verdict::kFail);
  EXPECT_EQ(r.Find("gpu.present")->summary, "no NVIDIA GPU is present on this node");
  for (const CheckResult& c : r.checks) {
    if (c.id == "gpu.present" || c.id == "os.release") continue;
    EXPECT_EQ(c.verdict, Verdict::kNotChecked) << c.id;
  }
  std::string text = FormatReport(r, false);
  EXPECT_THAT(text, HasSubstr("FAIL  NVIDIA GPU on the PCI bus: no NVIDIA GPU is present"));
  EXPECT_THAT(text, HasSubstr("1 failed"));
}

TEST(DoctorTest, DriverUnbound) {
  Report r = Diagnose(TestRoot("driver-unbound"),
                      InventoryFor(TestRoot("driver-unbound"), {}, NotFound()));
  EXPECT_EQ(r.ExitCode(), 3);
  EXPECT_EQ(VerdictOf(r, "gpu.present"), Verdict::kPass);
  EXPECT_EQ(VerdictOf(r, "gpu.driver"), Verdict::kFail);
  EXPECT_THAT(Text(r, "gpu.driver"), HasSubstr("no driver bound"));
  EXPECT_THAT(Text(r, "gpu.driver"), HasSubstr("0 of 2 GPUs"));
  EXPECT_EQ(VerdictOf(r, "driver.modules"), Verdict::kFail);
  EXPECT_THAT(Text(r, "driver.modules"), HasSubstr("modprobe nvidia"));
  EXPECT_EQ(VerdictOf(r, "dev.nodes"), Verdict::kFail);
  EXPECT_EQ(VerdictOf(r, "nvml.load"), Verdict::kFail);
  // Not loaded yet: the flavour is not checked, but the RTX 5090's need is stated.
  EXPECT_EQ(VerdictOf(r, "driver.flavor"), Verdict::kNotChecked);
  EXPECT_THAT(Text(r, "driver.flavor"), HasSubstr("open required"));
}

TEST(DoctorTest, Nouveau) {
  Report r = Diagnose(TestRoot("nouveau"), InventoryFor(TestRoot("nouveau"), {}, NotFound()));
  EXPECT_EQ(VerdictOf(r, "gpu.driver"), Verdict::kFail);
  EXPECT_THAT(Text(r, "gpu.driver"), HasSubstr("bound to nouveau"));
  EXPECT_THAT(Text(r, "gpu.driver"), HasSubstr("blacklist nouveau"));
  EXPECT_THAT(Text(r, "driver.modules"), HasSubstr("nouveau is loaded too"));
}

TEST(DoctorTest, BlackwellWithProprietaryModules) {
  Report r = Diagnose(TestRoot("blackwell-proprietary"),
                      InventoryFor(TestRoot("blackwell-proprietary"), {}, NotFound()));
  EXPECT_EQ(r.ExitCode(), 3);
  EXPECT_EQ(VerdictOf(r, "driver.flavor"), Verdict::kFail);
  std::string t = Text(r, "driver.flavor");
  EXPECT_THAT(t, HasSubstr("RTX 5090"));
  EXPECT_THAT(t, HasSubstr("needs the open kernel modules, but the proprietary ones"));
  // The root is a Talos node (as in the field report): the fix names the extensions.
  EXPECT_THAT(t, HasSubstr("Replace the system extension nonfree-kmod-nvidia-production with "
                           "nvidia-open-gpu-kernel-modules-production"));
}

TEST(DoctorTest, BlackwellFixWithoutTalos) {
  // Same machine, not Talos: a copy without /etc/os-release.
  fs::path tmp = fs::temp_directory_path() / absl::StrCat("gpulet-doctor-", getpid());
  fs::copy(TestRoot("blackwell-proprietary"), tmp,
           fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  fs::remove(tmp / "etc/os-release");
  Report r = Diagnose(tmp.string(), InventoryFor(tmp.string(), {}, NotFound()));
  EXPECT_THAT(Text(r, "driver.flavor"), HasSubstr("nvidia-kernel-open-dkms"));
  EXPECT_THAT(Text(r, "driver.modules"), Not(HasSubstr("machine.kernel")));
  fs::remove_all(tmp);
}

TEST(DoctorTest, Talos18LegacyModeNeedsTheBpfSysctl) {
  std::string root = TestRoot("talos-1.8");
  gpu::Inventory inv =
      InventoryFor(root, {Identity(0, "GPU-a", "0000:01:00.0", 0)}, absl::OkStatus(), "550.127.05");
  Report r = Diagnose(root, inv);
  EXPECT_EQ(r.ExitCode(), 3);
  EXPECT_TRUE(r.os.talos);
  EXPECT_THAT(Text(r, "os.release"), HasSubstr("(Talos 1.8): NVIDIA libraries expected in "
                                               "/usr/local/glibc/lib"));
  EXPECT_THAT(Text(r, "os.release"), HasSubstr("siderolabs/extensions@v1.8.0:"));
  EXPECT_EQ(VerdictOf(r, "talos.bpf"), Verdict::kFail);
  EXPECT_THAT(Text(r, "talos.bpf"), HasSubstr("net.core.bpf_jit_harden: 1"));
  EXPECT_EQ(VerdictOf(r, "driver.userspace"), Verdict::kPass) << Text(r, "driver.userspace");
  EXPECT_EQ(VerdictOf(r, "driver.modules"), Verdict::kPass);
  EXPECT_EQ(VerdictOf(r, "driver.flavor"), Verdict::kPass);
  EXPECT_EQ(VerdictOf(r, "dev.nodes"), Verdict::kPass);
  EXPECT_EQ(VerdictOf(r, "containerd"), Verdict::kPass) << Text(r, "containerd");
  EXPECT_EQ(VerdictOf(r, "kubelet"), Verdict::kPass);
  // Legacy mode: no CDI spec is a warning, not a failure.
  EXPECT_EQ(VerdictOf(r, "cdi.specs"), Verdict::kWarn);
  EXPECT_EQ(VerdictOf(r, "cdi.resolve"), Verdict::kNotChecked);
}

// Each kind of unusable file gets its own diagnosis, never the glibc mix-up's.
TEST(DoctorTest, DamagedNonLibraryAndForeignFilesAreDiagnosedAsSuch) {
  std::string root = TestRoot("talos-1.12");
  struct Case {
    gpu::NvmlLoadAttempt::Reason reason;
    const char* says;
  };
  for (const Case& c :
       {Case{gpu::NvmlLoadAttempt::Reason::kDamaged, "truncated or damaged"},
        Case{gpu::NvmlLoadAttempt::Reason::kNotALibrary, "not a shared library file"},
        Case{gpu::NvmlLoadAttempt::Reason::kIncompatible, "another architecture"}}) {
    gpu::Inventory inv =
        InventoryFor(root, {}, absl::FailedPreconditionError("NVML could not be used"));
    inv.nvml_attempts = {{"/x/libnvidia-ml.so.1", "--nvml-lib",
                          gpu::NvmlLoadAttempt::Result::kRejected,
                          absl::InvalidArgumentError("/x/libnvidia-ml.so.1 is bad"), c.reason}};
    Report r = Diagnose(root, inv);
    EXPECT_EQ(VerdictOf(r, "nvml.load"), Verdict::kFail);
    EXPECT_THAT(Text(r, "nvml.load"), HasSubstr(c.says));
    EXPECT_THAT(Text(r, "nvml.load"), HasSubstr("/x/libnvidia-ml.so.1"));
    EXPECT_THAT(Text(r, "nvml.load"), Not(HasSubstr("mixed glibc")));
  }
}

TEST(DoctorTest, Talos112FieldReportFailures) {
  std::string root = TestRoot("talos-1.12");
  // NVML: the library exists where Talos 1.12 keeps it, but needs a newer glibc than gpulet's.
  gpu::Inventory inv =
      InventoryFor(root, {}, absl::FailedPreconditionError("NVML could not be used"));
  inv.nvml_attempts = {
      {"libnvidia-ml.so.1 via the dynamic loader", "loader", gpu::NvmlLoadAttempt::Result::kAbsent,
       absl::NotFoundError("the dynamic loader found no libnvidia-ml.so.1")},
      {"/usr/local/glibc/usr/lib/libnvidia-ml.so.1", "Talos 1.9 to 1.12",
       gpu::NvmlLoadAttempt::Result::kRejected,
       absl::FailedPreconditionError("/usr/local/glibc/usr/lib/libnvidia-ml.so.1 needs "
                                     "GLIBC_2.38 but gpulet runs with glibc 2.36"),
       gpu::NvmlLoadAttempt::Reason::kNeedsNewerGlibc}};
  Report r = Diagnose(root, inv);
  EXPECT_EQ(r.ExitCode(), 3);
  EXPECT_EQ(VerdictOf(r, "nvml.load"), Verdict::kFail);
  EXPECT_THAT(Text(r, "nvml.load"), HasSubstr("newer glibc"));
  EXPECT_THAT(Text(r, "nvml.load"), HasSubstr("driver's own dynamic loader and C library"));
  // machine.kernel.modules forgot nvidia_uvm and nvidia_drm.
  EXPECT_EQ(VerdictOf(r, "driver.modules"), Verdict::kFail);
  EXPECT_THAT(Text(r, "driver.modules"), HasSubstr("nvidia_uvm is not loaded"));
  EXPECT_THAT(Text(r, "driver.modules"), HasSubstr("- name: nvidia_uvm"));
  EXPECT_EQ(VerdictOf(r, "dev.nodes"), Verdict::kFail);
  EXPECT_THAT(Text(r, "dev.nodes"), HasSubstr("/dev/nvidia-uvm"));
  // Libraries in the 1.9-1.12 place, of the kernel module's version.
  EXPECT_EQ(VerdictOf(r, "driver.userspace"), Verdict::kPass) << Text(r, "driver.userspace");
  EXPECT_EQ(VerdictOf(r, "talos.bpf"), Verdict::kPass);
  // The device plugin's spec: hook at /usr/bin/nvidia-ctk (absent before Talos 1.13) and a
  // library mount from the pre-1.9 place.
  EXPECT_EQ(VerdictOf(r, "cdi.specs"), Verdict::kPass);
  EXPECT_EQ(VerdictOf(r, "cdi.hooks"), Verdict::kFail);
  std::string hooks = Text(r, "cdi.hooks");
  EXPECT_THAT(hooks, HasSubstr("/usr/bin/nvidia-ctk"));
  EXPECT_THAT(hooks, HasSubstr("NVIDIA_CDI_HOOK_PATH=/usr/local/bin/nvidia-cdi-hook"));
  EXPECT_THAT(hooks, HasSubstr("only in /usr/local/bin"));
  EXPECT_EQ(VerdictOf(r, "cdi.paths"), Verdict::kFail);
  EXPECT_THAT(Text(r, "cdi.paths"), HasSubstr("/usr/local/lib/libnvidia-ml.so.580.105.08"));
  EXPECT_THAT(Text(r, "cdi.paths"), HasSubstr("device node /dev/nvidia-uvm"));
  EXPECT_EQ(VerdictOf(r, "cdi.resolve"), Verdict::kWarn);
  EXPECT_THAT(Text(r, "cdi.resolve"), HasSubstr("k8s.device-plugin.nvidia.com/gpu"));
  // containerd 2 (Talos 1.8 and later) has CDI on by default: no customization needed.
  EXPECT_EQ(VerdictOf(r, "containerd"), Verdict::kPass) << Text(r, "containerd");
  EXPECT_THAT(Text(r, "containerd"), HasSubstr("CDI enabled (default)"));
  EXPECT_THAT(Text(r, "containerd"), HasSubstr("containerd 2, CDI enabled by default"));
}

// The field report's failure on a node without a spec of gpulet's kind (Talos 1.12 writes
// none): the names gpulet answers with must resolve, else every GPU pod fails.
TEST(DoctorTest, GpuletCdiNamesMustResolve) {
  std::string root = SimRoot("homelab");
  gpu::Inventory inv =
      InventoryFor(root,
                   {Identity(0, "GPU-3f9d6c2e-1b7a-4e0c-9d35-a1c2e3f43080", "0000:01:00.0", 0),
                    Identity(1, "GPU-8a41d7b9-52c6-4f13-b0e8-7d2c9e155090", "0000:02:00.0", 1)},
                   absl::OkStatus(), "570.133.20");
  HostFs host(root);
  DoctorInput in;
  in.host = &host;
  in.inventory = &inv;
  // Not configured for CDI: nothing to check.
  Report r = RunDoctor(in);
  EXPECT_EQ(VerdictOf(r, "cdi.gpulet"), Verdict::kNotChecked);
  EXPECT_THAT(Text(r, "cdi.gpulet"), HasSubstr("GPULET_CONFIG"));

  // The homelab root has only nvidia.com/gpu (Talos' own spec): gpulet's kind is missing.
  in.gpulet_uses_cdi = true;
  in.gpulet_cdi_spec_dir = "/var/run/cdi";
  in.gpulet_cdi_names = {"gpulet.dev/gpu=GPU-3f9d6c2e-1b7a-4e0c-9d35-a1c2e3f43080",
                         "gpulet.dev/gpu=GPU-8a41d7b9-52c6-4f13-b0e8-7d2c9e155090"};
  r = RunDoctor(in);
  EXPECT_EQ(VerdictOf(r, "cdi.gpulet"), Verdict::kFail);
  EXPECT_EQ(r.ExitCode(), 3);
  EXPECT_THAT(Text(r, "cdi.gpulet"), HasSubstr("2 of 2 CDI device names"));
  EXPECT_THAT(Text(r, "cdi.gpulet"), HasSubstr("unresolvable CDI devices"));
  EXPECT_THAT(Text(r, "cdi.gpulet"), HasSubstr("gpulet.dev/gpu=GPU-3f9d6c2e"));
  EXPECT_THAT(Text(r, "cdi.gpulet"), HasSubstr("check its log for \"CDI spec\" errors"));
  in.gpulet_cdi_spec_dir = "";
  r = RunDoctor(in);
  EXPECT_THAT(Text(r, "cdi.gpulet"), HasSubstr("cdi.specDir is empty"));

  // Names of the kind the node's spec has resolve.
  in.gpulet_cdi_names = {"nvidia.com/gpu=GPU-3f9d6c2e-1b7a-4e0c-9d35-a1c2e3f43080"};
  r = RunDoctor(in);
  EXPECT_EQ(VerdictOf(r, "cdi.gpulet"), Verdict::kPass) << Text(r, "cdi.gpulet");
  EXPECT_THAT(Text(r, "cdi.gpulet"), HasSubstr("-> /var/run/cdi/nvidia.yaml"));
}

TEST(DoctorTest, Talos113CdiModeWithoutSpec) {
  std::string root = TestRoot("talos-1.13");
  gpu::Inventory inv =
      InventoryFor(root, {Identity(0, "GPU-b", "0000:01:00.0", 0)}, absl::OkStatus(), "595.91.07");
  Report r = Diagnose(root, inv);
  EXPECT_EQ(r.ExitCode(), 3);
  EXPECT_EQ(VerdictOf(r, "driver.flavor"), Verdict::kPass);  // RTX 5090 on the open modules
  EXPECT_EQ(VerdictOf(r, "driver.userspace"), Verdict::kPass) << Text(r, "driver.userspace");
  EXPECT_EQ(VerdictOf(r, "talos.bpf"), Verdict::kNotChecked);
  EXPECT_EQ(VerdictOf(r, "talos.config"), Verdict::kNotChecked);  // from 1.14
  EXPECT_EQ(VerdictOf(r, "cdi.specs"), Verdict::kFail);
  EXPECT_THAT(Text(r, "cdi.specs"), HasSubstr("ext-nvidia-cdi-gen"));
  EXPECT_EQ(VerdictOf(r, "containerd"), Verdict::kPass) << Text(r, "containerd");
  EXPECT_EQ(VerdictOf(r, "kubelet"), Verdict::kPass);
  for (const CheckResult& c : r.checks) {
    if (c.id != "cdi.specs" && c.id != "cdi.resolve" && c.id != "cdi.hooks" &&
        c.id != "cdi.paths" && c.id != "cdi.gpulet" && c.id != "talos.bpf" &&
        c.id != "talos.config" && c.id != "gpu.health" && c.id != "kernel.log" &&
        // Not for this node: no MIG, no NVSwitch, no CRI-O, no DCGM, no memory slices; no
        // /sys/fs/cgroup here.
        c.id != "mig.mode" && c.id != "fabricmanager" && c.id != "crio" &&
        c.id != "dcgm.hostengine" && c.id != "cgroup.devices" && c.id != "vram.enforcement") {
      EXPECT_EQ(c.verdict, Verdict::kPass) << c.id << ": " << c.summary;
    }
  }
}

// Copies a fixture root so a test can change one fact.
class RootCopy {
 public:
  explicit RootCopy(const std::string& from) {
    path_ = fs::temp_directory_path() / absl::StrCat("gpulet-doctor-copy-", getpid(), "-", ++n_);
    fs::copy(from, path_, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  }
  ~RootCopy() { fs::remove_all(path_); }
  std::string path() const { return path_.string(); }
  void Write(const std::string& rel, const std::string& text) const {
    fs::create_directories((path_ / rel).parent_path());
    std::ofstream(path_ / rel) << text;
  }

 private:
  static inline int n_ = 0;
  fs::path path_;
};

TEST(DoctorTest, LibrariesInAnotherTalosVersionsPlace) {
  // Talos 1.12 with an extension built for 1.13: the libraries sit in /usr/local/lib.
  RootCopy root(TestRoot("talos-1.13"));
  root.Write("etc/os-release", "ID=talos\nVERSION_ID=v1.12.0\n");
  gpu::Inventory inv = InventoryFor(root.path(), {}, NotFound());
  Report r = Diagnose(root.path(), inv);
  EXPECT_EQ(VerdictOf(r, "driver.userspace"), Verdict::kFail);
  std::string t = Text(r, "driver.userspace");
  EXPECT_THAT(t, HasSubstr("(the Talos 1.13 to 1.14 (and later) layout)"));
  EXPECT_THAT(t, HasSubstr("/usr/local/glibc/usr/lib"));
  EXPECT_THAT(t, HasSubstr("moves it (1.9, 1.13)"));
  EXPECT_THAT(Text(r, "nvml.load"), HasSubstr("/usr/local/glibc/usr/lib"));
}

// A fixture root: a directory, or an overlay (a directory with overlay.txt: "base <root>",
// "remove <path>" lines, and the files that differ) composed onto a copy of its base.
class FixtureRoot {
 public:
  explicit FixtureRoot(const std::string& name) {
    fs::path dir = TestRoot(name);
    std::ifstream overlay(dir / "overlay.txt");
    if (!overlay) {
      path_ = dir.string();
      return;
    }
    copy_ = fs::temp_directory_path() / absl::StrCat("gpulet-doctor-", name, "-", getpid());
    fs::remove_all(copy_);
    std::string line, base;
    std::vector<std::string> removed;
    while (std::getline(overlay, line)) {
      if (absl::StartsWith(line, "base ")) base = line.substr(5);
      if (absl::StartsWith(line, "remove ")) removed.push_back(line.substr(7));
    }
    EXPECT_FALSE(base.empty()) << name << "/overlay.txt names no base";
    fs::copy(TestRoot(base), copy_, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
    for (const std::string& r : removed) {
      EXPECT_TRUE(fs::exists(copy_ / r) || fs::is_symlink(copy_ / r)) << name << ": " << r;
      fs::remove_all(copy_ / r);
    }
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
      fs::path rel = fs::relative(e.path(), dir);
      if (rel == "overlay.txt" || e.is_directory()) continue;
      fs::create_directories((copy_ / rel).parent_path());
      fs::remove(copy_ / rel);
      fs::copy(e.path(), copy_ / rel, fs::copy_options::copy_symlinks);
    }
    path_ = copy_.string();
  }
  ~FixtureRoot() {
    if (!copy_.empty()) fs::remove_all(copy_);
  }
  const std::string& path() const { return path_; }

 private:
  fs::path copy_;
  std::string path_;
};

struct TalosCase {
  int minor;
  std::string healthy;  // fixture root with no FAIL
  std::string broken;   // the field report's failure on this release
  std::string driver;   // kernel module version ("" when the modules are not loaded there)
  bool broken_nvml;     // NVML works on the broken root
  std::string check;    // the check that must FAIL on the broken root
  std::vector<std::string> says;  // in that check's summary, evidence or fix
};

const std::vector<TalosCase>& TalosCases() {
  static const auto* kCases = new std::vector<TalosCase>{
      {8,
       "talos-1.8-fixed",
       "talos-1.8",
       "550.127.05",
       true,
       "talos.bpf",
       {"net.core.bpf_jit_harden is 2", "net.core.bpf_jit_harden: 1",
        "siderolabs/talos@v1.8.0:hack/test/tfvars/nvidia.yaml"}},
      {9,
       "talos-1.9",
       "talos-1.9-no-extensions",
       "550.144.03",
       false,
       "driver.modules",
       {"no NVIDIA kernel-module extension is installed",
        "nvidia-open-gpu-kernel-modules-production and nvidia-container-toolkit-production"}},
      {10,
       "talos-1.10",
       "talos-1.10-blackwell-proprietary",
       "570.124.06",
       true,
       "driver.flavor",
       {"RTX 5090", "needs the open kernel modules, but the proprietary ones",
        "with nvidia-open-gpu-kernel-modules-production"}},
      {12,
       "talos-1.12-fixed",
       "talos-1.12",
       "580.105.08",
       true,
       "driver.modules",
       {"nvidia_uvm is not loaded", "- name: nvidia_uvm"}},
      {13,
       "talos-1.13-fixed",
       "talos-1.13",
       "595.91.07",
       true,
       "cdi.specs",
       {"gives containers GPUs only through CDI", "talosctl logs ext-nvidia-cdi-gen",
        "siderolabs/extensions@v1.13.0:"}},
      {14,
       "talos-1.14",
       "talos-1.14-modules-not-loaded",
       "595.91.07",
       false,
       "driver.modules",
       {"nvidia and nvidia_uvm are not loaded", "one KernelModuleConfig document per module"}},
  };
  return *kCases;
}

gpu::Inventory TalosInventory(const std::string& root, const std::string& driver, bool nvml) {
  if (!nvml) return InventoryFor(root, {}, NotFound());
  return InventoryFor(root, {Identity(0, "GPU-b", "0000:01:00.0", 0)}, absl::OkStatus(), driver);
}

TEST(DoctorTalosReleasesTest, HealthyRootsHaveNoFailure) {
  for (const TalosCase& tc : TalosCases()) {
    FixtureRoot root(tc.healthy);
    Report r = Diagnose(root.path(), TalosInventory(root.path(), tc.driver, true));
    EXPECT_EQ(r.os.talos_minor, tc.minor) << tc.healthy;
    EXPECT_LE(r.ExitCode(), 1) << tc.healthy << ":\n" << FormatReport(r, true);
    EXPECT_EQ(VerdictOf(r, "os.release"), Verdict::kPass) << tc.healthy;
    EXPECT_EQ(VerdictOf(r, "driver.userspace"), Verdict::kPass) << tc.healthy;
    EXPECT_EQ(VerdictOf(r, "containerd"), Verdict::kPass) << tc.healthy;
  }
}

TEST(DoctorTalosReleasesTest, BrokenVariantsAreFoundWithTheirFix) {
  for (const TalosCase& tc : TalosCases()) {
    FixtureRoot root(tc.broken);
    Report r = Diagnose(root.path(), TalosInventory(root.path(), tc.driver, tc.broken_nvml));
    EXPECT_EQ(r.ExitCode(), 3) << tc.broken;
    EXPECT_EQ(VerdictOf(r, tc.check), Verdict::kFail) << tc.broken << ":\n"
                                                      << FormatReport(r, true);
    const CheckResult* c = r.Find(tc.check);
    ASSERT_NE(c, nullptr);
    EXPECT_FALSE(c->fix.empty()) << tc.broken;
    for (const std::string& s : tc.says) {
      EXPECT_THAT(Text(r, tc.check), HasSubstr(s)) << tc.broken;
    }
  }
}

TEST(DoctorTalosReleasesTest, UnsupportedAndNewerReleases) {
  RootCopy old(TestRoot("talos-1.8"));
  old.Write("etc/os-release", "ID=talos\nVERSION_ID=v1.7.6\n");
  Report r = Diagnose(old.path(), InventoryFor(old.path(), {}, NotFound()));
  EXPECT_EQ(VerdictOf(r, "os.release"), Verdict::kFail);
  EXPECT_THAT(Text(r, "os.release"), HasSubstr("Talos 1.7 is not supported"));
  EXPECT_THAT(Text(r, "os.release"), HasSubstr("Upgrade the node"));

  RootCopy newer(TestRoot("talos-1.14"));
  newer.Write("etc/os-release", "ID=talos\nVERSION_ID=v1.15.1\n");
  r = Diagnose(newer.path(), TalosInventory(newer.path(), "595.91.07", true));
  EXPECT_EQ(VerdictOf(r, "os.release"), Verdict::kWarn);
  EXPECT_THAT(Text(r, "os.release"), HasSubstr("assuming it behaves like Talos 1.14"));
  EXPECT_EQ(VerdictOf(r, "driver.userspace"), Verdict::kPass);
}

// Talos 1.14 reads the node's machine configuration: one upgraded from 1.13 with gpulet's 1.13
// patch is a WARN whose fix renders the patch fitted to it; one installed with 1.14 passes.
TEST(DoctorTalosReleasesTest, AnUpgradedMachineConfigurationIsFound) {
  RootCopy root(TestRoot("talos-1.14"));
  gpu::Inventory inv = TalosInventory(root.path(), "595.91.07", true);
  Report r = Diagnose(root.path(), inv);
  EXPECT_EQ(VerdictOf(r, "talos.config"), Verdict::kNotChecked);
  EXPECT_THAT(Text(r, "talos.config"), HasSubstr("--talos-current-config current.yaml"));

  root.Write("system/state/config.yaml",
             "version: v1alpha1\nmachine:\n  type: worker\n  nodeLabels:\n"
             "    nvidia.com/gpu.present: \"true\"\n  kubelet:\n    extraArgs:\n"
             "      register-with-taints: nvidia.com/gpu=present:NoSchedule\n");
  r = Diagnose(root.path(), inv);
  EXPECT_EQ(VerdictOf(r, "talos.config"), Verdict::kWarn) << Text(r, "talos.config");
  std::string t = Text(r, "talos.config");
  EXPECT_THAT(t, HasSubstr("still sets .machine.nodeLabels, "
                           ".machine.kubelet.extraArgs.register-with-taints"));
  EXPECT_THAT(t, HasSubstr("siderolabs/talos@v1.14"));
  EXPECT_THAT(t, HasSubstr("gpulet manifests --talos-machine-patch --talos-version v1.14 "
                           "--talos-current-config current.yaml"));

  root.Write("system/state/config.yaml",
             "version: v1alpha1\nmachine: {type: worker}\n---\napiVersion: v1alpha1\n"
             "kind: KubeNodeConfig\nnodeIP: {}\n");
  r = Diagnose(root.path(), inv);
  EXPECT_EQ(VerdictOf(r, "talos.config"), Verdict::kPass) << Text(r, "talos.config");

  root.Write("system/state/config.yaml", "machine: [broken\n");
  r = Diagnose(root.path(), inv);
  EXPECT_EQ(VerdictOf(r, "talos.config"), Verdict::kWarn);
  EXPECT_THAT(Text(r, "talos.config"), HasSubstr("system/state/config.yaml"));
}

TEST(DoctorTest, KernelAndUserspaceVersionsMustMatch) {
  RootCopy root(TestRoot("talos-1.13"));
  root.Write("proc/driver/nvidia/version",
             "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build\n");
  gpu::Inventory inv = InventoryFor(root.path(), {}, NotFound());
  Report r = Diagnose(root.path(), inv);
  EXPECT_EQ(VerdictOf(r, "driver.userspace"), Verdict::kFail);
  EXPECT_THAT(Text(r, "driver.userspace"), HasSubstr("595.91.07 do not match kernel module "
                                                     "580.95.05"));
}

TEST(DoctorTest, PascalWithOpenModules) {
  // A Tesla P100 (Pascal) on the open modules, which need Turing's GSP.
  RootCopy root(TestRoot("blackwell-proprietary"));
  root.Write("sys/devices/pci0000:00/0000:01:00.0/device", "0x15f8\n");
  root.Write(
      "proc/driver/nvidia/version",
      "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.133.20  Release Build\n");
  Report r = Diagnose(root.path(), InventoryFor(root.path(), {}, NotFound()));
  EXPECT_EQ(VerdictOf(r, "driver.flavor"), Verdict::kFail);
  std::string t = Text(r, "driver.flavor");
  EXPECT_THAT(t, HasSubstr("Tesla P100-PCIE-16GB"));
  EXPECT_THAT(t, HasSubstr("needs the proprietary kernel modules, but the open ones"));
  EXPECT_THAT(t, HasSubstr("with nonfree-kmod-nvidia-production"));
}

TEST(DoctorTest, TalosWithoutKmodExtension) {
  RootCopy root(TestRoot("talos-1.13"));
  fs::remove(fs::path(root.path()) / "usr/local/lib/modprobe.d/nvidia.conf");
  root.Write("proc/modules", "");
  Report r = Diagnose(root.path(), InventoryFor(root.path(), {}, NotFound()));
  EXPECT_EQ(VerdictOf(r, "driver.modules"), Verdict::kFail);
  EXPECT_THAT(Text(r, "driver.modules"),
              HasSubstr("Add the system extensions nvidia-open-gpu-kernel-modules-production"));
}

TEST(DoctorTest, ContainerdOnADebianHost) {
  RootCopy root(SimRoot("h200"));
  gpu::Inventory inv = InventoryFor(root.path(), {}, NotFound());
  Report r = Diagnose(root.path(), inv);
  EXPECT_EQ(VerdictOf(r, "containerd"), Verdict::kPass) << Text(r, "containerd");
  EXPECT_THAT(Text(r, "containerd"), HasSubstr("enable_cdi = true"));
  root.Write("etc/containerd/config.toml", "version = 2\n");
  r = Diagnose(root.path(), inv);
  EXPECT_EQ(VerdictOf(r, "containerd"), Verdict::kFail);
  EXPECT_THAT(Text(r, "containerd"), HasSubstr("nvidia-ctk runtime configure"));
}

// A HealthSource answering from a StatusReport, as `--daemon-address` does from /status.
class FakeHealth final : public HealthSource {
 public:
  explicit FakeHealth(state::StatusReport report) : report_(std::move(report)) {}
  absl::StatusOr<std::vector<GpuHealth>> GpuHealthStates() const override {
    if (!reachable) return absl::UnavailableError("cannot reach gpulet serve at 127.0.0.1:9400");
    return HealthFromStatus(report_);
  }
  bool reachable = true;

 private:
  state::StatusReport report_;
};

state::GpuStatus StatusOf(unsigned index, std::string uuid, state::HealthState health,
                          std::string reason = "", std::string action = "") {
  state::GpuStatus g;
  g.index = index;
  g.uuid = std::move(uuid);
  g.health = health;
  if (!reason.empty()) g.reason = reason;
  if (!action.empty()) g.action = action;
  return g;
}

TEST(DoctorTest, GpuHealthFromTheDaemon) {
  std::string root = TestRoot("talos-1.13");
  gpu::Inventory inv =
      InventoryFor(root, {Identity(0, "GPU-b", "0000:01:00.0", 0)}, absl::OkStatus(), "595.91.07");
  Report without = Diagnose(root, inv);
  EXPECT_EQ(VerdictOf(without, "gpu.health"), Verdict::kNotChecked);
  EXPECT_THAT(without.Find("gpu.health")->summary, HasSubstr("--daemon-address"));

  struct Case {
    std::vector<state::GpuStatus> gpus;
    Verdict verdict;
    std::string text;
  };
  const Case cases[] = {
      {{StatusOf(0, "GPU-a", state::HealthState::kHealthy)},
       Verdict::kPass,
       "GPU 0 (GPU-a): healthy"},
      {{StatusOf(0, "GPU-a", state::HealthState::kHealthy),
        StatusOf(1, "GPU-b", state::HealthState::kUnhealthy,
                 "XID 79: the GPU has fallen off the bus", "reboot the node")},
       Verdict::kFail,
       "GPU 1 (GPU-b): reboot the node"},
      {{StatusOf(0, "GPU-a", state::HealthState::kDegraded, "row remapping pending",
                 "reset the GPU")},
       Verdict::kWarn,
       "degraded (still scheduled): row remapping pending"},
      // A fatal verdict is not lowered by a degraded GPU listed after it.
      {{StatusOf(0, "GPU-a", state::HealthState::kUnhealthy, "XID 48"),
        StatusOf(1, "GPU-b", state::HealthState::kDegraded, "row remapping pending")},
       Verdict::kFail,
       "XID 48"},
  };
  for (const Case& c : cases) {
    state::StatusReport report;
    report.nvml_ok = true;
    report.gpus = c.gpus;
    FakeHealth health(report);
    Report r = Diagnose(root, inv, &health);
    EXPECT_EQ(VerdictOf(r, "gpu.health"), c.verdict) << Text(r, "gpu.health");
    EXPECT_THAT(Text(r, "gpu.health"), HasSubstr(c.text));
  }
  FakeHealth unreachable(state::StatusReport{});
  unreachable.reachable = false;
  Report r = Diagnose(root, inv, &unreachable);
  EXPECT_EQ(VerdictOf(r, "gpu.health"), Verdict::kNotChecked);
  EXPECT_THAT(r.Find("gpu.health")->summary, HasSubstr("cannot reach gpulet serve"));
}

TEST(DoctorTest, JsonShape) {
  Report r = Diagnose(TestRoot("no-gpu"), InventoryFor(TestRoot("no-gpu"), {}, NotFound()));
  nlohmann::json j = r;
  EXPECT_EQ(j["exit_code"], 3);
  EXPECT_EQ(j["summary"]["fail"], 1);
  EXPECT_EQ(j["checks"][1]["id"], "gpu.present");
  EXPECT_EQ(j["checks"][1]["verdict"], "fail");
  EXPECT_TRUE(j["checks"][1].contains("fix"));
  EXPECT_EQ(j["checks"].back()["verdict"], "not checked");
}

// --- the kernel log -------------------------------------------------------------------------

// A root with only a dev/kmsg of `records` (or none), for the kernel-log check.
std::string KmsgRoot(const testing::ScratchDir& dir, const std::string& records) {
  dir.Write("etc/os-release", "ID=debian\nVERSION_ID=\"12\"\n");
  if (!records.empty()) dir.Write("dev/kmsg", records);
  return dir.path();
}

Report DiagnoseKmsg(const std::string& root) {
  gpu::Inventory inv = InventoryFor(root, {}, absl::NotFoundError("no NVML here"));
  return Diagnose(root, inv);
}

TEST(DoctorKernelLogTest, Xid79IsAFailWithTheRebootAction) {
  FixtureRoot root("talos-1.10-xid79");
  gpu::Inventory inv = InventoryFor(root.path(), {}, absl::NotFoundError("no NVML here"));
  Report r = Diagnose(root.path(), inv);
  const CheckResult* k = r.Find("kernel.log");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->verdict, Verdict::kFail) << Text(r, "kernel.log");
  EXPECT_EQ(r.ExitCode(), 3);
  EXPECT_THAT(k->summary, HasSubstr("XID 79 (GPU_HAS_FALLEN_OFF_THE_BUS) on 0000:01:00.0"));
  EXPECT_THAT(k->summary, HasSubstr("asks to reboot-node"));
  // The XID line and the fallen-off message are the same event twice; the GPU is named by
  // the UUID the driver printed for its address.
  EXPECT_THAT(Text(r, "kernel.log"),
              HasSubstr("XID 79 (GPU_HAS_FALLEN_OFF_THE_BUS) on 0000:01:00.0 "
                        "(GPU-3f1c2b7e-0d8a-4c55-9e21-6a7b8c9d0e1f), 2 times"));
  EXPECT_THAT(Text(r, "kernel.log"), HasSubstr("NVIDIA: immediate RESTART_BM"));
  EXPECT_THAT(k->fix,
              HasSubstr(std::string(health::GpuActionDescription(health::GpuAction::kRebootNode))));
  EXPECT_THAT(k->fix, HasSubstr("if it comes back after that: inspect-hardware"));
  // The application's XID 13 is listed but asks for nothing.
  EXPECT_THAT(Text(r, "kernel.log"), HasSubstr("XID 13 (GR_EXCEPTION)"));
  EXPECT_THAT(k->fix, Not(HasSubstr("XID 13")));
  // The NVRM line is explained by `gpulet explain`'s table.
  EXPECT_THAT(Text(r, "kernel.log"), HasSubstr("RmInitAdapter failed"));
  EXPECT_THAT(Text(r, "kernel.log"), HasSubstr("explain: "));
  EXPECT_THAT(Text(r, "kernel.log"), HasSubstr("7 records read"));
}

TEST(DoctorKernelLogTest, MissingOrUnreadableKmsgIsNotCheckedWithTheTalosWay) {
  testing::ScratchDir missing;
  testing::ScratchDir dir_instead;
  dir_instead.Write("dev/kmsg/not-a-log", "x");
  for (const std::string& root : {KmsgRoot(missing, ""), KmsgRoot(dir_instead, "")}) {
    Report r = DiagnoseKmsg(root);
    EXPECT_EQ(VerdictOf(r, "kernel.log"), Verdict::kNotChecked) << root;
    const std::string summary = r.Find("kernel.log")->summary;
    EXPECT_THAT(summary, HasSubstr("the kernel log /dev/kmsg (read as " + root + "/dev/kmsg)"))
        << root;
    EXPECT_THAT(summary, HasSubstr("talosctl -n <node> dmesg | gpulet explain -")) << root;
  }
}

TEST(DoctorKernelLogTest, AQuietLogPasses) {
  testing::ScratchDir dir;
  std::string root =
      KmsgRoot(dir,
               "6,0,100,-;Linux version 6.12.0\n"
               "6,1,4521337,-;NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.124.06\n"
               "6,2,4600000,-;nvidia-uvm: Loaded the UVM driver, major device number 511.\n");
  Report r = DiagnoseKmsg(root);
  EXPECT_EQ(VerdictOf(r, "kernel.log"), Verdict::kPass) << Text(r, "kernel.log");
  EXPECT_THAT(r.Find("kernel.log")->summary, HasSubstr("no XID, NVRM error or GPU fallen off"));
  EXPECT_THAT(r.Find("kernel.log")->summary, HasSubstr("3 records"));
  EXPECT_TRUE(r.Find("kernel.log")->fix.empty());
}

TEST(DoctorKernelLogTest, WarningsAndUnexplainedNvrmErrorsWarn) {
  testing::ScratchDir dir;
  std::string root = KmsgRoot(
      dir,
      "4,500,8123456790,-;NVRM: Xid (PCI:0000:3b:00): 63, pid='<unknown>', name=<unknown>, "
      "Row Remapper: New row (0x0000000000abcdef) marked for remapping, reset gpu to activate.\n"
      "3,501,8123456800,-;NVRM: nvAssertFailedNoLog: Assertion failed: 0 @ something.c:42\n"
      "12,502,8123456900,-;NVRM: a user-space line that pretends to be the driver\n");
  Report r = DiagnoseKmsg(root);
  EXPECT_EQ(VerdictOf(r, "kernel.log"), Verdict::kWarn) << Text(r, "kernel.log");
  std::string text = Text(r, "kernel.log");
  EXPECT_THAT(text, HasSubstr("XID 63 (INFOROM_DRAM_RETIREMENT_EVENT) on 0000:3b:00.0, 1 time"));
  EXPECT_THAT(text, HasSubstr("NVIDIA: immediate IGNORE, investigatory IGNORE"));
  EXPECT_THAT(text, HasSubstr("NVRM error gpulet has no explanation for: NVRM: nvAssertFailed"));
  EXPECT_THAT(text, Not(HasSubstr("pretends"))) << "user-space records are not the driver's";
  // The buffer had rotated: said, because older XIDs may be gone.
  EXPECT_THAT(text, HasSubstr("starts at record 500"));
}

TEST(DoctorKernelLogTest, NvlinkXidsAreDecoded) {
  testing::ScratchDir dir;
  std::string root =
      KmsgRoot(dir,
               "4,0,100,-;NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 08 "
               "(0x004505c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)\n");
  Report r = DiagnoseKmsg(root);
  EXPECT_EQ(VerdictOf(r, "kernel.log"), Verdict::kFail) << Text(r, "kernel.log");
  EXPECT_THAT(Text(r, "kernel.log"),
              HasSubstr("NVLink5 unit NETIR_LINK_DOWN (V1 (before R575)), link-down reason 4: "
                        "immediate RESET_GPU, investigatory INVESTIGATE_LINK_SI"));
}

// --- the command ------------------------------------------------------------------------

TEST(DoctorCommandTest, HomelabSimulationIsHealthy) {
  testing::RunResult r = testing::RunProgram(
      {gpulet::testing::GpuletBinary(), "--simulate", "homelab", "doctor", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  for (const auto& c : j["checks"]) {
    EXPECT_TRUE(c["verdict"] == "pass" || c["verdict"] == "not checked") << c.dump(2);
  }
  EXPECT_EQ(j["os"]["version_id"], "v1.13.2");
}

TEST(DoctorCommandTest, KernelLogXid79FixtureFailsWithTheRebootAction) {
  FixtureRoot root("talos-1.10-xid79");
  testing::RunResult r = testing::RunProgram(
      {gpulet::testing::GpuletBinary(), "--host-root", root.path(), "doctor", "--json"});
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  bool found = false;
  for (const nlohmann::json& c : j["checks"]) {
    if (c["id"] != "kernel.log") continue;
    found = true;
    EXPECT_EQ(c["verdict"], "fail") << c.dump(2);
    EXPECT_THAT(c["fix"].get<std::string>(), HasSubstr("reboot-node")) << c.dump(2);
  }
  EXPECT_TRUE(found) << r.out;
}

// docs/talos.md and docs/troubleshooting.md: on Talos the kernel log is read from outside the
// node, `talosctl -n <node> dmesg | gpulet explain -`; this is what that pipe gets.
TEST(DoctorCommandTest, TalosctlDmesgPipedIntoExplain) {
  std::string fixture = absl::StrCat(GPULET_SOURCE_DIR, "/tests/fixtures/kmsg/talosctl_dmesg.txt");
  testing::RunResult r = testing::RunProgram(
      {"/bin/sh", "-c",
       absl::StrCat("'", gpulet::testing::GpuletBinary(), "' explain - < '", fixture, "'")});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("XID 79 (GPU_HAS_FALLEN_OFF_THE_BUS) on GPU 0000:01:00.0")) << r.out;
  EXPECT_THAT(r.out, HasSubstr("Drain the node and reboot it")) << r.out;
  EXPECT_THAT(r.out, HasSubstr("GPU-3f1c2b7e-0d8a-4c55-9e21-6a7b8c9d0e1f")) << r.out;
}

TEST(DoctorCommandTest, NoGpuFixtureExitsThree) {
  testing::RunResult r = testing::RunProgram(
      {gpulet::testing::GpuletBinary(), "--host-root", TestRoot("no-gpu"), "doctor"});
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("no NVIDIA GPU is present"));
}

// This machine has no NVIDIA GPU (the CI runners and the development box do not): the
// doctor must say so plainly and exit 3 (a failed check).
TEST(DoctorCommandTest, RealMachineWithoutGpu) {
  HostFs real("/");
  absl::StatusOr<std::vector<node::PciGpu>> gpus = node::ScanPciGpus(real);
  if (gpus.ok() && !gpus->empty()) GTEST_SKIP() << "this machine has an NVIDIA GPU";
  testing::RunResult r = testing::RunProgram({gpulet::testing::GpuletBinary(), "doctor"});
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("no NVIDIA GPU is present on this node"));
}

}  // namespace
}  // namespace gpulet::doctor
