#include "node/talos_releases.h"

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpulet::node {
namespace {

using ::testing::HasSubstr;

const Release& R(int minor) { return *FindRelease(1, minor)->release; }

TEST(TalosReleasesTest, KnowsEightToFourteenInOrder) {
  const std::vector<Release>& all = KnownReleases();
  ASSERT_EQ(all.size(), 7u);
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].major, 1);
    EXPECT_EQ(all[i].minor, static_cast<int>(8 + i));
  }
  EXPECT_EQ(OldestRelease().Name(), "Talos 1.8");
  EXPECT_EQ(NewestRelease().Name(), "Talos 1.14");
  EXPECT_EQ(R(14).tag, "v1.14.0-rc.1");
  EXPECT_EQ(R(9).tag, "v1.9.0");
}

TEST(TalosReleasesTest, EveryFactNamesAPublicSource) {
  auto sourced = [](const std::string& s, const std::string& what) {
    EXPECT_TRUE(absl::StartsWith(s, "siderolabs/talos@") ||
                absl::StartsWith(s, "siderolabs/extensions@") ||
                absl::StartsWith(s, "siderolabs/pkgs@") ||
                absl::StartsWith(s, "siderolabs/docs@") || absl::StartsWith(s, "containerd/"))
        << what << ": " << s;
    EXPECT_THAT(s, HasSubstr(":")) << what;
  };
  for (const Release& r : KnownReleases()) {
    std::string n = r.Name();
    sourced(r.suffixed_extension_names.source, n + " names");
    sourced(r.layout.source, n + " layout");
    sourced(r.cdi_spec_writer.source, n + " cdi writer");
    sourced(r.cdi_spec_path.source, n + " cdi path");
    sourced(r.containerd_major.source, n + " containerd");
    sourced(r.containerd_cdi_enabled.source, n + " containerd cdi");
    sourced(r.cdi_spec_dirs.source, n + " cdi dirs");
    sourced(r.runtime_mode.source, n + " runtime");
    sourced(r.needs_bpf_jit_harden_1.source, n + " bpf");
    sourced(r.bpf_jit_harden_default.source, n + " bpf default");
    sourced(r.hook_links_in_usr_bin.source, n + " hook links");
    sourced(r.gpu_operator_values.source, n + " GPU Operator");
    sourced(r.v1alpha1_fields.source, n + " fields");
    sourced(r.document_kinds.source, n + " kinds");
    sourced(r.generated_config.source, n + " generated");
    for (const Conflict& c : r.conflicts) sourced(c.source, n + " conflict " + c.field);
    for (const Required& q : r.required) sourced(q.source, n + " required " + q.field);
    // Facts are read at the row's own tag.
    EXPECT_THAT(r.layout.source, HasSubstr("@" + r.tag + ":")) << n;
    EXPECT_THAT(r.runtime_mode.source, HasSubstr("@" + r.tag + ":")) << n;
  }
}

TEST(TalosReleasesTest, ExtensionNamesAreSuffixedFromOneEight) {
  EXPECT_TRUE(R(8).suffixed_extension_names.value);
  EXPECT_EQ(ExtensionName(R(8), "nvidia-container-toolkit", false),
            "nvidia-container-toolkit-production");
  EXPECT_EQ(ExtensionName(R(12), "nonfree-kmod-nvidia", true), "nonfree-kmod-nvidia-lts");
}

TEST(TalosReleasesTest, LibraryLayouts) {
  EXPECT_EQ(R(8).layout.value.library_dir, "/usr/local/glibc/lib");
  EXPECT_EQ(R(8).layout.value.ld_so_cache, "/usr/local/glibc/etc/ld.so.cache");
  for (int m : {9, 10, 11, 12}) {
    EXPECT_EQ(R(m).layout.value.library_dir, "/usr/local/glibc/usr/lib") << m;
    EXPECT_EQ(R(m).layout.value.libc, "/usr/local/glibc/usr/lib/libc.so.6") << m;
  }
  for (int m : {13, 14}) {
    EXPECT_EQ(R(m).layout.value.library_dir, "/usr/local/lib") << m;
    EXPECT_EQ(R(m).layout.value.ld_so_cache, "/etc/ld.so.cache") << m;
  }
  EXPECT_EQ(ReleasesWithLibraryDir("/usr/local/glibc/usr/lib"), "Talos 1.9 to 1.12");
  EXPECT_EQ(ReleasesWithLibraryDir("/usr/local/glibc/lib"), "Talos 1.8 to 1.12");
  EXPECT_EQ(ReleasesWithLibraryDir("/usr/local/lib"), "Talos 1.13 to 1.14 (and later)");
  EXPECT_EQ(ReleasesWithLibraryDir("/usr/lib64"), "");
}

TEST(TalosReleasesTest, RuntimeCdiAndSysctl) {
  for (int m = 8; m <= 12; ++m) {
    EXPECT_EQ(R(m).runtime_mode.value, RuntimeMode::kLegacy) << m;
    EXPECT_TRUE(R(m).needs_bpf_jit_harden_1.value) << m;
    EXPECT_EQ(R(m).cdi_spec_writer.value, "") << m;
    EXPECT_FALSE(R(m).hook_links_in_usr_bin.value) << m;
    EXPECT_TRUE(R(m).gpu_operator_values.value.empty()) << m;
    EXPECT_EQ(R(m).cdi_spec_dirs.value, (std::vector<std::string>{"/etc/cdi", "/var/run/cdi"}));
  }
  for (int m = 13; m <= 14; ++m) {
    EXPECT_EQ(R(m).runtime_mode.value, RuntimeMode::kCdi) << m;
    EXPECT_FALSE(R(m).needs_bpf_jit_harden_1.value) << m;
    EXPECT_EQ(R(m).cdi_spec_writer.value, "ext-nvidia-cdi-gen") << m;
    EXPECT_EQ(R(m).cdi_spec_path.value, "/run/cdi/nvidia.yaml") << m;
    EXPECT_TRUE(R(m).hook_links_in_usr_bin.value) << m;
    EXPECT_THAT(R(m).gpu_operator_values.value,
                ::testing::ElementsAre("driver.enabled=false", "toolkit.enabled=false",
                                       "hostPaths.driverInstallDir=/usr/local"))
        << m;
  }
  // containerd 2 everywhere, so CDI is on everywhere (by default before 1.13).
  for (const Release& r : KnownReleases()) {
    EXPECT_EQ(r.containerd_major.value, 2) << r.Name();
    EXPECT_TRUE(r.containerd_cdi_enabled.value) << r.Name();
  }
}

TEST(TalosReleasesTest, UnknownReleases) {
  absl::StatusOr<Match> newer = FindRelease(1, 15);
  ASSERT_TRUE(newer.ok());
  EXPECT_EQ(newer->release, &NewestRelease());
  EXPECT_THAT(newer->warning, HasSubstr("Talos 1.15 is newer than the newest release"));
  EXPECT_TRUE(FindRelease(2, 0).ok());
  EXPECT_TRUE(FindRelease(1, 12)->warning.empty());
  absl::StatusOr<Match> older = FindRelease(1, 7);
  ASSERT_FALSE(older.ok());
  EXPECT_EQ(older.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(older.status().message(), HasSubstr("Talos 1.7 is not supported"));
  EXPECT_THAT(older.status().message(), HasSubstr("upgrade the node to Talos 1.8"));
  EXPECT_FALSE(FindRelease(0, 14).ok());
}

TEST(TalosReleasesTest, DocumentsArriveInOneFourteen) {
  EXPECT_FALSE(R(13).KernelModuleDocuments());
  EXPECT_TRUE(R(14).KernelModuleDocuments());
  EXPECT_TRUE(R(14).KubeNodeDocuments());
  DocumentShape kmod{"KernelModuleConfig", {"name"}};
  std::vector<Violation> v = CheckPatch(R(13), {kmod});
  ASSERT_EQ(v.size(), 1u);
  EXPECT_THAT(v[0].message, HasSubstr("Talos 1.13 has no KernelModuleConfig document"));
  EXPECT_TRUE(CheckPatch(R(14), {kmod}).empty());
  EXPECT_EQ(CheckPatch(R(14), {{"KernelModuleConfig", {}}}).size(), 1u);        // name required
  EXPECT_EQ(CheckPatch(R(14), {{"KubeletConfig", {"extraArgs"}}}).size(), 1u);  // image
  EXPECT_EQ(CheckPatch(R(12), {{"", {"machine.install.disk"}}}).size(), 1u);
  EXPECT_TRUE(CheckPatch(R(12), {{"", {"machine", "machine.sysctls"}}}).empty());
}

TEST(TalosReleasesTest, OneFourteenConflicts) {
  // The 1.13 form (machine.kubelet + machine.nodeLabels) on a node installed with 1.14.
  DocumentShape legacy{"", {"machine.kubelet.extraArgs", "machine.nodeLabels"}};
  std::vector<BaseConfig> bases = BaseConfigs(R(14));
  ASSERT_EQ(bases.size(), 2u);
  EXPECT_EQ(bases[0].description, "generated by Talos 1.14");
  EXPECT_EQ(bases[1].description, "upgraded to Talos 1.14 from Talos 1.13");
  std::vector<Violation> v = CheckMerged(R(14), bases[0].documents, {legacy});
  ASSERT_EQ(v.size(), 2u);
  EXPECT_THAT(v[0].message, HasSubstr("KubeletConfig document next to machine.kubelet"));
  EXPECT_THAT(v[1].message, HasSubstr("KubeNodeConfig document next to machine.nodeLabels"));
  EXPECT_THAT(v[1].source, HasSubstr("types/k8s/node.go"));
  // A KubeletConfig document on an upgraded node (which has machine.kubelet) is refused too.
  v = CheckMerged(R(14), bases[1].documents, {{"KubeletConfig", {"image", "extraArgs"}}});
  ASSERT_EQ(v.size(), 1u);
  // KubeNodeConfig with labels and taints fits both.
  DocumentShape node{"KubeNodeConfig", {"labels", "taints"}};
  EXPECT_TRUE(CheckMerged(R(14), bases[0].documents, {node}).empty());
  EXPECT_TRUE(CheckMerged(R(14), bases[1].documents, {node}).empty());
  // Before 1.14 there are no such rules.
  EXPECT_TRUE(CheckMerged(R(13), BaseConfigs(R(13))[0].documents, {legacy}).empty());
}

// The first `backticked` word of a table cell ("" when none).
std::string FirstCode(const std::string& cell) {
  size_t a = cell.find('`');
  size_t b = a == std::string::npos ? a : cell.find('`', a + 1);
  return b == std::string::npos ? "" : cell.substr(a + 1, b - a - 1);
}

std::string DirOf(const std::string& path) { return path.substr(0, path.rfind('/') + 1); }

// docs/talos.md's release table states the per-release facts of this table; it may not
// contradict it. A row "1.9 to 1.12" states them for each of those releases, "same" repeats
// the row above, "same directory" the libnvidia-ml cell, and every known release has a row.
TEST(TalosDocsTest, TalosMdsReleaseTableIsTheCodesTable) {
  std::ifstream in(std::string(GPULET_SOURCE_DIR) + "/docs/talos.md");
  ASSERT_TRUE(in);
  std::stringstream text;
  text << in.rdbuf();
  std::vector<std::vector<std::string>> rows;
  bool in_table = false;
  for (absl::string_view line : absl::StrSplit(text.str(), '\n')) {
    if (absl::StartsWith(line, "| Talos | extension names |")) {
      in_table = true;
      continue;
    }
    if (!in_table) continue;
    if (!absl::StartsWith(line, "|")) break;
    if (absl::StartsWith(line, "|---")) continue;
    std::vector<std::string> cells;
    for (absl::string_view c : absl::StrSplit(line, '|')) {
      cells.emplace_back(absl::StripAsciiWhitespace(c));
    }
    ASSERT_EQ(cells.size(), 13u) << line;  // the empty ones outside the first and last bar
    rows.emplace_back(cells.begin() + 1, cells.end() - 1);
  }
  ASSERT_GE(rows.size(), 3u) << "docs/talos.md has no release table";

  std::set<int> covered;
  std::vector<std::string> prev;
  for (std::vector<std::string> row : rows) {
    for (size_t i = 1; i < row.size(); ++i) {
      if (row[i] == "same") row[i] = prev.at(i);
      if (row[i] == "same directory") row[i] = row[2];
      if (row[i] == "same, without the sysctl") {
        row[i] = prev.at(i);
        row[i] = row[i].substr(0, row[i].find(", `machine.sysctls`"));
      }
    }
    prev = row;
    std::vector<int> minors;
    std::smatch m;
    static const std::regex kRange(R"(1\.(\d+)(?: to 1\.(\d+))?)");
    ASSERT_TRUE(std::regex_match(row[0], m, kRange)) << row[0];
    const int from = std::stoi(m[1]);
    const int to = m[2].matched ? std::stoi(m[2]) : from;
    for (int minor = from; minor <= to; ++minor) {
      const std::string at = "docs/talos.md, row " + row[0] + ", Talos 1." + std::to_string(minor);
      absl::StatusOr<Match> found = FindRelease(1, minor);
      ASSERT_TRUE(found.ok() && found->warning.empty()) << at << ": not in the table";
      const Release& r = *found->release;
      covered.insert(minor);
      EXPECT_EQ(absl::StrContains(row[1], "-production"), r.suffixed_extension_names.value) << at;
      EXPECT_EQ(FirstCode(row[2]), r.layout.value.library_dir) << at;
      EXPECT_EQ(FirstCode(row[3]) + "/", DirOf(r.layout.value.libc)) << at;
      EXPECT_EQ(FirstCode(row[4]), DirOf(r.layout.value.ld_so_cache)) << at;
      EXPECT_EQ(row[5], RuntimeModeName(r.runtime_mode.value)) << at;
      if (r.cdi_spec_writer.value.empty()) {
        EXPECT_EQ(row[6], "nobody") << at;
      } else {
        EXPECT_THAT(row[6], HasSubstr(r.cdi_spec_writer.value)) << at;
        EXPECT_THAT(row[6], HasSubstr(r.cdi_spec_path.value)) << at;
      }
      std::smatch v;
      static const std::regex kContainerd(R"(containerd_version v(\d+\.\d+))");
      ASSERT_TRUE(std::regex_search(r.containerd_major.source, v, kContainerd)) << at;
      EXPECT_THAT(row[7], HasSubstr(v[1].str())) << at << ": containerd";
      EXPECT_EQ(absl::StrContains(row[7], ", on"), r.containerd_cdi_enabled.value) << at;
      if (std::string dir = FirstCode(row[7]); !dir.empty()) {
        EXPECT_EQ(std::vector<std::string>{dir}, r.cdi_spec_dirs.value) << at;
      }
      EXPECT_EQ(row[8], r.needs_bpf_jit_harden_1.value ? "needed" : "not needed") << at;
      EXPECT_EQ(absl::StrContains(row[9], "machine.sysctls"), r.needs_bpf_jit_harden_1.value) << at;
      EXPECT_EQ(absl::StrContains(row[9], "KubeNodeConfig"), r.KubeNodeDocuments()) << at;
      EXPECT_EQ(absl::StrContains(row[9], "KernelModuleConfig"), r.KernelModuleDocuments()) << at;
      if (r.gpu_operator_values.value.empty()) {
        EXPECT_EQ(row[10], "not documented") << at << ": GPU Operator";
      } else {
        for (const std::string& v : r.gpu_operator_values.value) {
          EXPECT_THAT(row[10], HasSubstr(absl::StrCat("`", v, "`"))) << at << ": GPU Operator";
        }
      }
    }
  }
  for (const Release& r : KnownReleases()) {
    EXPECT_TRUE(covered.count(r.minor)) << r.Name() << " has no row in docs/talos.md's table";
  }
}

}  // namespace
}  // namespace gpulet::node
