#include "node/talos_releases.h"

#include <algorithm>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace gpulet::node {
namespace {

// Repositories the facts were read in (at the release's tag unless a row says otherwise).
constexpr char kExt[] = "siderolabs/extensions@";
constexpr char kTalos[] = "siderolabs/talos@";
constexpr char kPkgs[] = "siderolabs/pkgs@";
constexpr char kDocs[] = "siderolabs/docs@";

// containerd 2's CRI plugin defaults (EnableCDI true, spec dirs /etc/cdi and /var/run/cdi).
constexpr char kContainerdDefaults[] =
    "containerd/containerd (v2.x):internal/cri/config/config_unix.go DefaultRuntimeConfig";

std::string Src(const char* repo, absl::string_view tag, absl::string_view path) {
  return absl::StrCat(repo, tag, ":", path);
}

// The extensions repository has no 1.14.0 tag yet; the 1.14 row is read at its release
// candidate, the newest tag of both siderolabs/talos and siderolabs/extensions.
std::string TagFor(int minor) {
  return minor == 14 ? "v1.14.0-rc.1" : absl::StrCat("v1.", minor, ".0");
}

Release MakeRelease(int minor) {
  Release r;
  r.major = 1;
  r.minor = minor;
  r.tag = TagFor(minor);
  const std::string& t = r.tag;

  // Extension names: the production/lts split is in the tree from extensions v1.8.0 (v1.7.x
  // has nvidia-gpu/nvidia-modules/manifest.yaml with the unsuffixed name).
  r.suffixed_extension_names = {
      true, Src(kExt, t,
                minor <= 10 ? "nvidia-gpu/nvidia-modules/production/manifest.yaml"
                            : "nvidia-gpu/nvidia-modules/production/manifest.yaml.tmpl")};

  // Library layout.
  if (minor == 8) {
    // glibc bundled in the toolkit extension, prefix and libdir /usr/local/glibc(/lib); the
    // driver's libraries are moved into /usr/local/glibc/lib next to it.
    r.layout = {{"/usr/local/glibc/lib",
                 {},
                 "/usr/local/glibc/lib/ld-linux-x86-64.so.2",
                 "/usr/local/glibc/lib/libc.so.6",
                 "/usr/local/glibc/etc/ld.so.cache"},
                absl::StrCat(Src(kExt, t, "nvidia-gpu/nvidia-container-toolkit/glibc/pkg.yaml"),
                             " and nvidia-gpu/nvidia-container-toolkit/nvidia-pkgs/production/"
                             "pkg.yaml (--utility-libdir=glibc/lib)")};
  } else if (minor <= 12) {
    // glibc is its own extension (misc/glibc): libdir /usr/local/glibc/usr/lib, with lib and
    // lib64 linking to it; the toolkit still moves the libraries to /usr/local/glibc/lib.
    r.layout = {{"/usr/local/glibc/usr/lib",
                 {"/usr/local/glibc/lib", "/usr/local/glibc/lib64"},
                 "/usr/local/glibc/usr/lib/ld-linux-x86-64.so.2",
                 "/usr/local/glibc/usr/lib/libc.so.6",
                 "/usr/local/glibc/etc/ld.so.cache"},
                absl::StrCat(Src(kExt, t, "misc/glibc/pkg.yaml"),
                             " and nvidia-gpu/nvidia-container-toolkit/nvidia-pkgs/production/"
                             "pkg.yaml")};
  } else {
    // glibc with prefix /usr/local and sysconfdir /etc; libraries in /usr/local/lib.
    r.layout = {{"/usr/local/lib",
                 {"/usr/local/lib64"},
                 "/usr/local/lib/ld-linux-x86-64.so.2",
                 "/usr/local/lib/libc.so.6",
                 "/etc/ld.so.cache"},
                absl::StrCat(Src(kExt, t, "misc/glibc/pkg.yaml"),
                             " and nvidia-gpu/nvidia-container-toolkit/nvidia-pkgs/production/"
                             "pkg.yaml")};
  }

  // CDI spec writer and runtime mode.
  if (minor >= 13) {
    std::string cdi_gen =
        Src(kExt, t, "nvidia-gpu/nvidia-container-toolkit/production/nvidia-cdi-gen.yaml");
    r.cdi_spec_writer = {"ext-nvidia-cdi-gen", cdi_gen};
    r.cdi_spec_path = {"/run/cdi/nvidia.yaml", cdi_gen};
    r.runtime_mode = {RuntimeMode::kCdi,
                      absl::StrCat(cdi_gen,
                                   "; nvidia-container-cli and its config.toml are gone "
                                   "from nvidia-gpu/nvidia-container-toolkit")};
  } else {
    std::string toml = Src(kExt, t,
                           "nvidia-gpu/nvidia-container-toolkit/nvidia-container-runtime/"
                           "nvidia-container-runtime.toml");
    r.cdi_spec_writer = {"", absl::StrCat(Src(kExt, t, "nvidia-gpu/nvidia-container-toolkit/"),
                                          " (no nvidia-cdi-gen service)")};
    r.cdi_spec_path = {"", r.cdi_spec_writer.source};
    r.runtime_mode = {RuntimeMode::kLegacy,
                      absl::StrCat(toml, " ([nvidia-container-cli] ldcache, ldconfig)")};
  }

  // containerd: the version Talos' pkgs pin, and CDI.
  static const std::map<int, std::string> kContainerd = {
      {8, "v2.0.0-rc.4"}, {9, "v2.0.0"},  {10, "v2.0.4"}, {11, "v2.1.3"},
      {12, "v2.1.5"},     {13, "v2.2.3"}, {14, "v2.3.3"}};
  std::string pkgs_tag = absl::StrCat("v1.", minor, ".0");
  r.containerd_major = {2, absl::StrCat(Src(kPkgs, pkgs_tag, "Pkgfile"), " (containerd_version ",
                                        kContainerd.at(minor), ")")};
  if (minor >= 13) {
    std::string part = Src(kTalos, t, "hack/cri-plugin.part");
    r.containerd_cdi_enabled = {true, absl::StrCat(part, " (enable_cdi = true)")};
    r.cdi_spec_dirs = {{"/run/cdi"}, absl::StrCat(part, " (cdi_spec_dirs)")};
  } else {
    std::string why = absl::StrCat(
        Src(kTalos, t, "hack/cri-plugin.part"),
        " leaves enable_cdi unset, so containerd 2's default holds: ", kContainerdDefaults);
    r.containerd_cdi_enabled = {true, why};
    r.cdi_spec_dirs = {{"/etc/cdi", "/var/run/cdi"}, why};
  }

  // The BPF sysctl: Talos' own NVIDIA test configuration sets it up to 1.12, not from 1.13.
  r.needs_bpf_jit_harden_1 = {minor <= 12, Src(kTalos, t, "hack/test/tfvars/nvidia.yaml")};
  r.bpf_jit_harden_default = {"2", Src(kTalos, t, "pkg/kernel/kspp/kspp.go")};
  r.hook_links_in_usr_bin = {
      minor >= 13,
      minor >= 13 ? Src(kTalos, t, "pkg/machinery/extensions/extensions.go")
                  : absl::StrCat(Src(kTalos, t, "pkg/machinery/extensions/extensions.go"),
                                 " (no /usr/bin/nvidia-cdi-hook; added by talos #13022 in 1.13)")};

  // NVIDIA's GPU Operator, documented from 1.13 (the CDI switch), with the driver and the
  // toolkit left to the extensions; Talos' own integration test installs it the same way.
  // siderolabs/docs has no release tags: the commit that wrote each page.
  const std::string gpu_page =
      absl::StrCat("public/talos/v1.", minor, "/configure-your-talos-cluster/hardware-and-drivers/",
                   "nvidia-gpu.mdx");
  if (minor >= 13) {
    r.gpu_operator_values = {
        {"driver.enabled=false", "toolkit.enabled=false", "hostPaths.driverInstallDir=/usr/local"},
        absl::StrCat(Src(kDocs, minor == 13 ? "f32c5ced" : "0d2f2fe1", gpu_page),
                     " (\"Deploying NVIDIA GPU Operator\"), ",
                     Src(kTalos, t, "internal/integration/api/testdata/nvidia-gpu-operator.yaml"),
                     " and hack/release.toml (\"now supports configuring NVIDIA GPU via the "
                     "gpu-operator helm chart\")")};
  } else {
    r.gpu_operator_values = {
        {},
        absl::StrCat(Src(kDocs, "5debdd92", gpu_page),
                     " (the nvidia RuntimeClass and NVIDIA's device plugin chart; no GPU "
                     "Operator)")};
  }

  // Machine configuration.
  std::string types = Src(kTalos, t, "pkg/machinery/config/types/v1alpha1/v1alpha1_types.go");
  r.v1alpha1_fields = {{"machine.kernel.modules", "machine.kubelet.extraArgs", "machine.nodeLabels",
                        "machine.nodeTaints", "machine.sysctls"},
                       types};
  if (minor >= 14) {
    std::string kubelet = Src(kTalos, t, "pkg/machinery/config/types/k8s/kubelet.go");
    std::string node = Src(kTalos, t, "pkg/machinery/config/types/k8s/node.go");
    std::string kmod = Src(kTalos, t, "pkg/machinery/config/types/runtime/kernel_module.go");
    r.document_kinds = {{"KernelModuleConfig", "KubeletConfig", "KubeNodeConfig", "SysctlConfig"},
                        absl::StrCat(kmod, ", ", kubelet, ", ", node,
                                     ", pkg/machinery/config/types/runtime/sysctl.go")};
    r.conflicts = {
        {"KubeletConfig", "machine.kubelet", kubelet},
        {"KubeNodeConfig", "machine.nodeLabels", node},
        {"KubeNodeConfig", "machine.nodeAnnotations", node},
        {"KubeNodeConfig", "machine.nodeTaints", node},
        {"KubeNodeConfig", "machine.kubelet.skipNodeRegistration", node},
        {"KubeNodeConfig", "machine.kubelet.registerWithFQDN", node},
        {"KubeNodeConfig", "machine.kubelet.nodeIP", node},
        {"KubeNodeConfig", "cluster.allowSchedulingOnControlPlanes", node},
        {"KubeNodeConfig", "cluster.allowSchedulingOnMasters", node},
    };
    r.required = {{"KubeletConfig", "image", kubelet}, {"KernelModuleConfig", "name", kmod}};
    r.generated_config = {
        {"KubeletConfig", "KubeNodeConfig"},
        Src(kTalos, t,
            "pkg/machinery/config/generate/init.go (no .machine.kubelet when "
            "MultidocKubernetesConfigSupported) and kubernetes.go (KubeNodeConfig, "
            "KubeletConfig)")};
  } else {
    r.document_kinds = {{},
                        absl::StrCat(Src(kTalos, t, "pkg/machinery/config/types/"),
                                     " (no KernelModuleConfig, KubeletConfig or KubeNodeConfig "
                                     "document; they arrive in 1.14)")};
    r.generated_config = {{"v1alpha1:machine.kubelet.image"},
                          Src(kTalos, t, "pkg/machinery/config/generate/init.go (MachineKubelet)")};
  }
  return r;
}

bool HasField(const DocumentShape& d, absl::string_view field) {
  for (const std::string& f : d.fields) {
    if (f == field || absl::StartsWith(f, absl::StrCat(field, "."))) return true;
  }
  return false;
}

std::vector<DocumentShape> ShapesOf(const std::vector<std::string>& generated) {
  std::vector<DocumentShape> out;
  DocumentShape v1;
  for (const std::string& g : generated) {
    absl::string_view s = g;
    if (absl::ConsumePrefix(&s, "v1alpha1:")) {
      v1.fields.insert(std::string(s));
    } else {
      out.push_back({g, {}});
    }
  }
  out.insert(out.begin(), v1);
  return out;
}

}  // namespace

absl::string_view RuntimeModeName(RuntimeMode mode) {
  return mode == RuntimeMode::kCdi ? "CDI" : "legacy";
}

std::string Release::Name() const { return absl::StrCat("Talos ", major, ".", minor); }

const std::vector<Release>& KnownReleases() {
  static const auto* kReleases = [] {
    auto* v = new std::vector<Release>;
    for (int minor = 8; minor <= 14; ++minor) v->push_back(MakeRelease(minor));
    return v;
  }();
  return *kReleases;
}

const Release& OldestRelease() { return KnownReleases().front(); }
const Release& NewestRelease() { return KnownReleases().back(); }

absl::StatusOr<Match> FindRelease(int major, int minor) {
  const Release& oldest = OldestRelease();
  const Release& newest = NewestRelease();
  if (major < oldest.major || (major == oldest.major && minor < oldest.minor)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Talos ", major, ".", minor, " is not supported: gpulet knows Talos ", oldest.major, ".",
        oldest.minor, " to ", newest.major, ".", newest.minor,
        " (older releases ship other NVIDIA extension names and library layouts); upgrade the "
        "node to Talos ",
        oldest.major, ".", oldest.minor, " or newer"));
  }
  for (const Release& r : KnownReleases()) {
    if (r.major == major && r.minor == minor) return Match{&r, ""};
  }
  return Match{&newest, absl::StrCat("Talos ", major, ".", minor,
                                     " is newer than the newest release gpulet knows (",
                                     newest.Name(), "); assuming it behaves like ", newest.Name(),
                                     ". Check the result against its release notes.")};
}

std::string ReleasesWithLibraryDir(absl::string_view dir) {
  const Release* first = nullptr;
  const Release* last = nullptr;
  for (const Release& r : KnownReleases()) {
    const LibraryLayout& l = r.layout.value;
    bool match = l.library_dir == dir ||
                 std::find(l.library_dir_aliases.begin(), l.library_dir_aliases.end(), dir) !=
                     l.library_dir_aliases.end();
    if (!match) continue;
    if (first == nullptr) first = &r;
    last = &r;
  }
  if (first == nullptr) return "";
  if (first == last) return first->Name();
  std::string out = absl::StrCat(first->Name(), " to ", last->major, ".", last->minor);
  if (last == &NewestRelease()) absl::StrAppend(&out, " (and later)");
  return out;
}

std::string ExtensionName(const Release& release, absl::string_view base, bool lts) {
  if (!release.suffixed_extension_names.value) return std::string(base);
  return absl::StrCat(base, lts ? "-lts" : "-production");
}

std::vector<Violation> CheckPatch(const Release& release, const std::vector<DocumentShape>& patch) {
  std::vector<Violation> out;
  for (const DocumentShape& d : patch) {
    if (d.kind.empty()) {
      for (const std::string& f : d.fields) {
        bool allowed = false;
        for (const std::string& a : release.v1alpha1_fields.value) {
          // A field is fine when it is an allowed path, lies under one, or leads to one.
          if (f == a || absl::StartsWith(f, a + ".") || absl::StartsWith(a, f + ".")) {
            allowed = true;
          }
        }
        if (!allowed) {
          out.push_back({absl::StrCat(release.Name(), ": v1alpha1 field ", f,
                                      " is not one gpulet's patch may set"),
                         release.v1alpha1_fields.source});
        }
      }
      continue;
    }
    if (release.document_kinds.value.count(d.kind) == 0) {
      out.push_back({absl::StrCat(release.Name(), " has no ", d.kind, " document"),
                     release.document_kinds.source});
      continue;
    }
    for (const Required& q : release.required) {
      if (q.kind == d.kind && !HasField(d, q.field)) {
        out.push_back(
            {absl::StrCat(release.Name(), ": a ", d.kind, " document needs ", q.field), q.source});
      }
    }
  }
  return out;
}

std::vector<Violation> CheckMerged(const Release& release, const std::vector<DocumentShape>& base,
                                   const std::vector<DocumentShape>& patch) {
  // Merge: one v1alpha1 document, one per kind (gpulet's kinds are unnamed singletons or
  // named by `name`; conflicts only concern the kinds, so kinds are enough here).
  DocumentShape v1;
  std::set<std::string> kinds;
  for (const auto* list : {&base, &patch}) {
    for (const DocumentShape& d : *list) {
      if (d.kind.empty()) {
        v1.fields.insert(d.fields.begin(), d.fields.end());
      } else {
        kinds.insert(d.kind);
      }
    }
  }
  std::vector<Violation> out;
  for (const Conflict& c : release.conflicts) {
    if (kinds.count(c.kind) && HasField(v1, c.field)) {
      out.push_back({absl::StrCat(release.Name(), " rejects a ", c.kind, " document next to ",
                                  c.field, " in the v1alpha1 config"),
                     c.source});
    }
  }
  return out;
}

std::vector<BaseConfig> BaseConfigs(const Release& release) {
  std::vector<BaseConfig> out;
  out.push_back({absl::StrCat("generated by ", release.Name()),
                 ShapesOf(release.generated_config.value), release.generated_config.source});
  for (const Release& r : KnownReleases()) {
    if (r.major == release.major && r.minor + 1 == release.minor) {
      out.push_back({absl::StrCat("upgraded to ", release.Name(), " from ", r.Name()),
                     ShapesOf(r.generated_config.value), r.generated_config.source});
    }
  }
  return out;
}

}  // namespace gpulet::node
