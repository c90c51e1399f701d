#include "nvml/elf_check.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace gpulet::nvml {
namespace {

using ::testing::TestWithParam;
using ::testing::ValuesIn;

const std::string kTestlibDir = GPULET_TESTLIB_DIR;
const std::string kNewerGlibcLib = kTestlibDir + "/libnvml-newer-glibc.so";
const std::string kNewerGlibcSrcLib = kTestlibDir + "/libnvml-newer-glibc-src.so";

// The path this process loaded a library from (e.g. "libc.so.6"), found with
// dl_iterate_phdr so the test follows whatever multiarch layout the machine has; falls
// back to Debian's path for a library that is not loaded.
std::string LoadedLibraryPath(const std::string& basename) {
  struct Query {
    const std::string* basename;
    std::string found;
  } query{&basename, ""};
  dl_iterate_phdr(
      [](struct dl_phdr_info* info, size_t, void* data) {
        auto* q = static_cast<Query*>(data);
        if (info->dlpi_name == nullptr) return 0;
        std::string name = info->dlpi_name;
        size_t slash = name.rfind('/');
        if (name.substr(slash == std::string::npos ? 0 : slash + 1) != *q->basename) return 0;
        q->found = name;
        return 1;
      },
      &query);
  if (!query.found.empty()) return query.found;
  return "/lib/x86_64-linux-gnu/" + basename;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A scratch file under the test's temporary directory, removed at the end of the test.
class ScratchFile {
 public:
  ScratchFile(const std::string& name, const std::string& contents)
      : path_(::testing::TempDir() + "/gpulet_elf_check_" + std::to_string(getpid()) + "_" + name) {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  }
  ~ScratchFile() { unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

const VersionNeed* FindNeed(const ElfInfo& info, const std::string& file_prefix) {
  for (const VersionNeed& need : info.version_needs) {
    if (absl::StartsWith(need.file, file_prefix)) return &need;
  }
  return nullptr;
}

// --- GlibcVersion -----------------------------------------------------------------------

struct ParseCase {
  const char* text;
  std::optional<GlibcVersion> want;
};

// The case's text, so that ctest names each case by it rather than by its bytes (an
// address, which differs from build to build).
void PrintTo(const ParseCase& c, std::ostream* os) { *os << '"' << c.text << '"'; }

class GlibcVersionParseTest : public TestWithParam<ParseCase> {};

TEST_P(GlibcVersionParseTest, Parses) {
  const ParseCase& c = GetParam();
  std::optional<GlibcVersion> got = GlibcVersion::Parse(c.text);
  ASSERT_EQ(got.has_value(), c.want.has_value()) << "\"" << c.text << "\"";
  if (got.has_value()) {
    EXPECT_EQ(got->major, c.want->major) << c.text;
    EXPECT_EQ(got->minor, c.want->minor) << c.text;
  }
}

const ParseCase kParseCases[] = {
    {"GLIBC_2.34", GlibcVersion{2, 34}},
    {"2.36", GlibcVersion{2, 36}},
    {"GLIBC_2.2.5", GlibcVersion{2, 2}},  // x86_64's baseline; third part ignored
    {"GLIBC_2.3.4", GlibcVersion{2, 3}},
    {"GLIBC_2.17", GlibcVersion{2, 17}},  // aarch64's baseline
    {"GLIBC_9.99", GlibcVersion{9, 99}},
    {"GLIBC_9.9.9", GlibcVersion{9, 9}},
    {"2.0", GlibcVersion{2, 0}},
    {"", std::nullopt},
    {"GLIBC_", std::nullopt},
    {"GLIBC_PRIVATE", std::nullopt},
    {"GLIBC_ABI_DT_RELR", std::nullopt},
    {"GLIBC_2", std::nullopt},
    {"2", std::nullopt},
    {"2.", std::nullopt},
    {".2", std::nullopt},
    {"2.x", std::nullopt},
    {"2.34.", std::nullopt},
    {"2.3.4.5", std::nullopt},
    {"2.34 ", std::nullopt},
    {" 2.34", std::nullopt},
    {"+2.34", std::nullopt},
    {"-2.34", std::nullopt},
    {"2.-1", std::nullopt},
    {"glibc_2.34", std::nullopt},
    {"GCC_3.0", std::nullopt},
    {"GLIBCXX_3.4.29", std::nullopt},
    {"1234567.1", std::nullopt},  // more digits than any version has
    {"99999999999999999999.1", std::nullopt},
};

INSTANTIATE_TEST_SUITE_P(Table, GlibcVersionParseTest, ValuesIn(kParseCases));

TEST(GlibcVersionTest, ComparesNumericallyNotAsText) {
  EXPECT_LT((GlibcVersion{2, 4}), (GlibcVersion{2, 34}));  // "2.4" > "2.34" as text
  EXPECT_LT((GlibcVersion{2, 2}), (GlibcVersion{2, 17}));
  EXPECT_GT((GlibcVersion{3, 0}), (GlibcVersion{2, 99}));
  EXPECT_EQ((GlibcVersion{2, 36}), (GlibcVersion{2, 36}));
  EXPECT_NE((GlibcVersion{2, 36}), (GlibcVersion{2, 35}));
  EXPECT_LE((GlibcVersion{2, 36}), (GlibcVersion{2, 36}));
  EXPECT_GE((GlibcVersion{9, 9}), (GlibcVersion{2, 40}));
}

TEST(GlibcVersionTest, ToString) {
  EXPECT_EQ((GlibcVersion{2, 36}).ToString(), "2.36");
  EXPECT_EQ((GlibcVersion{9, 99}).ToString(), "9.99");
}

TEST(GlibcVersionTest, RunningVersionIsPlausible) {
  GlibcVersion running = RunningGlibcVersion();
  EXPECT_EQ(running.major, 2);
  EXPECT_GE(running.minor, 17);  // nothing older runs a C++20 toolchain's output
  EXPECT_EQ(ThisProcessTarget().glibc, running);
}

// --- MaxGlibcNeeded ---------------------------------------------------------------------

TEST(MaxGlibcNeededTest, TakesTheHighestNumericGlibcVersionOfAnyFile) {
  ElfInfo info;
  info.version_needs = {
      {"libc.so.6", {"GLIBC_2.2.5", "GLIBC_2.34", "GLIBC_PRIVATE", "GLIBC_2.4"}, {}},
      {"libm.so.6", {"GLIBC_2.29"}, {}},
      {"libgcc_s.so.1", {"GCC_3.0", "GCC_12.0"}, {}},
      {"libstdc++.so.6", {"GLIBCXX_3.4.30", "CXXABI_1.3"}, {}},
      {"ld-linux-x86-64.so.2", {"GLIBC_ABI_DT_RELR", "GLIBC_2.3"}, {}},
  };
  std::optional<GlibcVersion> max = MaxGlibcNeeded(info);
  ASSERT_TRUE(max.has_value());
  EXPECT_EQ(*max, (GlibcVersion{2, 34}));
}

TEST(MaxGlibcNeededTest, SeesNeedsOnAnyGlibcFile) {
  ElfInfo info;
  info.version_needs = {{"libc.so.6", {"GLIBC_2.2.5"}, {}},
                        {"libpthread.so.0", {"GLIBC_2.30"}, {}}};
  EXPECT_EQ(MaxGlibcNeeded(info), (GlibcVersion{2, 30}));
}

TEST(MaxGlibcNeededTest, IgnoresWeakNeeds) {
  ElfInfo info;
  info.version_needs = {{"libc.so.6", {"GLIBC_2.2.5", "GLIBC_2.99"}, {"GLIBC_2.99"}}};
  EXPECT_EQ(MaxGlibcNeeded(info), (GlibcVersion{2, 2}));
}

TEST(MaxGlibcNeededTest, NoneWhenNothingNumeric) {
  EXPECT_EQ(MaxGlibcNeeded(ElfInfo{}), std::nullopt);
  ElfInfo info;
  info.version_needs = {{"ld-linux-x86-64.so.2", {"GLIBC_PRIVATE", "GLIBC_ABI_DT_RELR"}, {}},
                        {"libgcc_s.so.1", {"GCC_3.0"}, {}}};
  EXPECT_EQ(MaxGlibcNeeded(info), std::nullopt);
}

// --- Real system libraries --------------------------------------------------------------

TEST(ReadElfInfoTest, ReadsLibc) {
  const std::string path = LoadedLibraryPath("libc.so.6");
  absl::StatusOr<ElfInfo> info = ReadElfInfo(path);
  ASSERT_TRUE(info.ok()) << info.status();
  LoaderTarget self = ThisProcessTarget();
  EXPECT_EQ(info->elf_class, self.elf_class);
  EXPECT_EQ(info->machine, self.machine);
  EXPECT_EQ(info->soname, "libc.so.6");
  // libc needs the dynamic loader, and versions from it (including GLIBC_PRIVATE).
  ASSERT_FALSE(info->needed.empty());
  EXPECT_TRUE(std::any_of(info->needed.begin(), info->needed.end(), [](const std::string& n) {
    return absl::StartsWith(n, "ld-");
  })) << info->needed.front();
  const VersionNeed* ld = FindNeed(*info, "ld-");
  ASSERT_NE(ld, nullptr);
  EXPECT_FALSE(ld->versions.empty());
  absl::Status loadable = CheckLoadable(path);
  EXPECT_TRUE(loadable.ok()) << loadable;
}

TEST(ReadElfInfoTest, ReadsLibstdcxxAndItsGlibcNeedsFitTheRunningGlibc) {
  const std::string path = LoadedLibraryPath("libstdc++.so.6");
  absl::StatusOr<ElfInfo> info = ReadElfInfo(path);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->soname, "libstdc++.so.6");
  EXPECT_NE(std::find(info->needed.begin(), info->needed.end(), "libc.so.6"), info->needed.end());
  EXPECT_NE(std::find(info->needed.begin(), info->needed.end(), "libm.so.6"), info->needed.end());

  const VersionNeed* libc = FindNeed(*info, "libc.so.6");
  ASSERT_NE(libc, nullptr);
  EXPECT_GT(libc->versions.size(), 3u);
  for (const std::string& v : libc->versions) {
    EXPECT_TRUE(absl::StartsWith(v, "GLIBC_")) << v;
  }

  std::optional<GlibcVersion> max = MaxGlibcNeeded(*info);
  ASSERT_TRUE(max.has_value());
  EXPECT_EQ(max->major, 2);
  EXPECT_LE(*max, RunningGlibcVersion());
  absl::Status loadable = CheckLoadable(path);
  EXPECT_TRUE(loadable.ok()) << loadable;
}

// --- The test NVML libraries ------------------------------------------------------------

TEST(ReadElfInfoTest, ReadsEveryTestLibrary) {
  for (const char* name : {"crash_init", "hang_init", "missing_symbols", "init_fails",
                           "newer-glibc-src", "newer-glibc"}) {
    const std::string path = kTestlibDir + "/libnvml-" + name + ".so";
    absl::StatusOr<ElfInfo> info = ReadElfInfo(path);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->machine, ThisProcessTarget().machine) << path;
  }
}

TEST(CheckLoadableTest, UnpatchedLibraryNeedsAnOrdinaryGlibc) {
  absl::StatusOr<ElfInfo> info = ReadElfInfo(kNewerGlibcSrcLib);
  ASSERT_TRUE(info.ok()) << info.status();
  const VersionNeed* libc = FindNeed(*info, "libc.so.6");
  ASSERT_NE(libc, nullptr);
  std::optional<GlibcVersion> max = MaxGlibcNeeded(*info);
  ASSERT_TRUE(max.has_value());
  EXPECT_EQ(max->major, 2);
  absl::Status loadable = CheckLoadable(kNewerGlibcSrcLib);
  EXPECT_TRUE(loadable.ok()) << loadable;
}

TEST(CheckLoadableTest, RefusesALibraryThatNeedsANewerGlibc) {
  absl::StatusOr<ElfInfo> info = ReadElfInfo(kNewerGlibcLib);
  ASSERT_TRUE(info.ok()) << info.status();
  const VersionNeed* libc = FindNeed(*info, "libc.so.6");
  ASSERT_NE(libc, nullptr);
  std::string patched;
  for (const std::string& v : libc->versions) {
    if (absl::StartsWith(v, "GLIBC_9.")) patched = v;
  }
  ASSERT_FALSE(patched.empty()) << "patch_glibc_need did not rewrite a GLIBC_2.x need";

  std::optional<GlibcVersion> max = MaxGlibcNeeded(*info);
  ASSERT_TRUE(max.has_value());
  EXPECT_EQ(max->major, 9);
  const GlibcVersion running = RunningGlibcVersion();
  EXPECT_GT(*max, running);

  absl::Status status = CheckLoadable(kNewerGlibcLib);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  const std::string message(status.message());
  EXPECT_TRUE(absl::StrContains(message, kNewerGlibcLib)) << message;
  EXPECT_TRUE(absl::StrContains(message, patched)) << message;
  EXPECT_TRUE(absl::StrContains(message, "libc.so.6")) << message;
  EXPECT_TRUE(absl::StrContains(message, "glibc " + running.ToString())) << message;
  EXPECT_TRUE(absl::StrContains(message, "CDI")) << message;
}

// The check must agree with the dynamic loader: the patched library really does not load.
TEST(CheckLoadableTest, DynamicLoaderAgreesTheLibraryDoesNotLoad) {
  void* handle = dlopen(kNewerGlibcLib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle != nullptr) dlclose(handle);
  ASSERT_EQ(handle, nullptr);
  const char* error = dlerror();
  ASSERT_NE(error, nullptr);
  EXPECT_TRUE(absl::StrContains(error, "GLIBC_9.")) << error;
  EXPECT_TRUE(absl::StrContains(error, "not found")) << error;
}

TEST(CheckLoadableTest, RefusesALibraryForAnotherMachine) {
  if (ThisProcessTarget().machine != EM_X86_64) GTEST_SKIP() << "the copy is made for x86_64";
  std::string bytes = ReadFile(kNewerGlibcSrcLib);
  ASSERT_GT(bytes.size(), sizeof(Elf64_Ehdr));
  const uint16_t aarch64 = EM_AARCH64;  // e_machine, little-endian like the x86_64 original
  bytes[offsetof(Elf64_Ehdr, e_machine)] = static_cast<char>(aarch64 & 0xff);
  bytes[offsetof(Elf64_Ehdr, e_machine) + 1] = static_cast<char>(aarch64 >> 8);
  ScratchFile file("aarch64.so", bytes);

  absl::StatusOr<ElfInfo> info = ReadElfInfo(file.path());
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->machine, EM_AARCH64);
  absl::Status status = CheckLoadable(file.path());
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "aarch64")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "x86_64")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), file.path())) << status;
}

// --- CheckCompatible against other targets ----------------------------------------------

ElfInfo NeedsGlibc(const std::string& version) {
  ElfInfo info;
  info.elf_class = 64;
  info.machine = EM_X86_64;
  info.needed = {"libc.so.6"};
  info.version_needs = {{"libc.so.6", {"GLIBC_2.2.5", version}, {}}};
  return info;
}

const LoaderTarget kX86Glibc236{64, EM_X86_64, GlibcVersion{2, 36}};

TEST(CheckCompatibleTest, GlibcMismatchNamesBothVersionsAndTheFix) {
  absl::Status status =
      CheckCompatible(NeedsGlibc("GLIBC_2.38"), "/host/libnvidia-ml.so.1", kX86Glibc236);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(status.message());
  EXPECT_TRUE(absl::StrContains(message, "/host/libnvidia-ml.so.1")) << message;
  EXPECT_TRUE(absl::StrContains(message, "GLIBC_2.38")) << message;
  EXPECT_TRUE(absl::StrContains(message, "glibc 2.36")) << message;
  EXPECT_TRUE(absl::StrContains(message, "runtime class")) << message;
  EXPECT_TRUE(absl::StrContains(message, "bind-mounting")) << message;
}

TEST(CheckCompatibleTest, AcceptsEqualAndOlderGlibcNeeds) {
  EXPECT_TRUE(CheckCompatible(NeedsGlibc("GLIBC_2.36"), "x", kX86Glibc236).ok());
  EXPECT_TRUE(CheckCompatible(NeedsGlibc("GLIBC_2.4"), "x", kX86Glibc236).ok());
  EXPECT_TRUE(CheckCompatible(NeedsGlibc("GLIBC_PRIVATE"), "x", kX86Glibc236).ok());
}

TEST(CheckCompatibleTest, UnknownRunningGlibcSkipsTheComparison) {
  LoaderTarget unknown = kX86Glibc236;
  unknown.glibc = GlibcVersion{};
  EXPECT_TRUE(CheckCompatible(NeedsGlibc("GLIBC_9.99"), "x", unknown).ok());
}

TEST(CheckCompatibleTest, RefusesAnotherMachineNamingBoth) {
  ElfInfo info = NeedsGlibc("GLIBC_2.17");
  info.machine = EM_AARCH64;
  absl::Status status = CheckCompatible(info, "/host/libnvidia-ml.so.1", kX86Glibc236);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(status.message(), "64-bit aarch64")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "64-bit x86_64")) << status;
}

TEST(CheckCompatibleTest, RefusesAnotherClassNamingBoth) {
  ElfInfo info = NeedsGlibc("GLIBC_2.0");
  info.elf_class = 32;
  absl::Status status = CheckCompatible(info, "/usr/lib32/libnvidia-ml.so.1", kX86Glibc236);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(status.message(), "32-bit")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "64-bit")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "compatibility")) << status;
}

TEST(CheckCompatibleTest, UnknownMachineComparesOnlyTheClass) {
  ElfInfo info = NeedsGlibc("GLIBC_2.17");
  info.machine = EM_AARCH64;
  LoaderTarget target = kX86Glibc236;
  target.machine = EM_NONE;
  EXPECT_TRUE(CheckCompatible(info, "x", target).ok());
}

// --- Files that are not (whole) libraries -----------------------------------------------

TEST(ReadElfInfoTest, MissingFileIsNotFound) {
  const std::string path = ::testing::TempDir() + "/gpulet_no_such_library.so";
  absl::StatusOr<ElfInfo> info = ReadElfInfo(path);
  EXPECT_EQ(info.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(info.status().message(), path)) << info.status();
  EXPECT_EQ(CheckLoadable(path).code(), absl::StatusCode::kNotFound);
}

TEST(ReadElfInfoTest, LinkerScriptIsNotAnElfFile) {
  // What Debian installs as /usr/lib/x86_64-linux-gnu/libc.so.
  ScratchFile file("libc.so", "/* GNU ld script */\nGROUP ( /lib/x86_64-linux-gnu/libc.so.6 )\n");
  absl::StatusOr<ElfInfo> info = ReadElfInfo(file.path());
  EXPECT_EQ(info.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(info.status().message(), "not an ELF file")) << info.status();
  EXPECT_TRUE(absl::StrContains(info.status().message(), "text")) << info.status();
}

TEST(ReadElfInfoTest, EmptyAndBinaryNonElfFiles) {
  ScratchFile empty("empty.so", "");
  EXPECT_EQ(ReadElfInfo(empty.path()).status().code(), absl::StatusCode::kInvalidArgument);
  ScratchFile binary("binary.so", std::string("\x00\x01\x02\x03\xff\xfe", 6));
  EXPECT_EQ(ReadElfInfo(binary.path()).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ReadElfInfoTest, DirectoryIsNotARegularFile) {
  absl::StatusOr<ElfInfo> info = ReadElfInfo(kTestlibDir);
  EXPECT_EQ(info.status().code(), absl::StatusCode::kInvalidArgument) << info.status();
}

// A path under the test's temporary directory, removed (whatever it is) at the end.
class ScratchPath {
 public:
  explicit ScratchPath(const std::string& name)
      : path_(::testing::TempDir() + "/gpulet_elf_check_" + std::to_string(getpid()) + "_" + name) {
    unlink(path_.c_str());
  }
  ~ScratchPath() { unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Reads `path` and expects a quick InvalidArgument whose message names it and `kind`.
void ExpectRefusedAtOnce(const std::string& path, const std::string& kind) {
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<ElfInfo> info = ReadElfInfo(path);
  absl::Status loadable = CheckLoadable(path);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(500)) << path;
  EXPECT_EQ(info.status().code(), absl::StatusCode::kInvalidArgument) << info.status();
  EXPECT_TRUE(absl::StrContains(info.status().message(), path)) << info.status();
  EXPECT_TRUE(absl::StrContains(info.status().message(), kind)) << info.status();
  EXPECT_TRUE(absl::StrContains(info.status().message(), "Fix:")) << info.status();
  EXPECT_EQ(loadable.code(), absl::StatusCode::kInvalidArgument) << loadable;
}

TEST(ReadElfInfoTest, FifoIsRefusedWithoutBlocking) {
  ScratchPath fifo("fifo.so");
  ASSERT_EQ(mkfifo(fifo.path().c_str(), 0600), 0) << std::strerror(errno);
  ExpectRefusedAtOnce(fifo.path(), "a FIFO");
}

TEST(ReadElfInfoTest, DeviceDirectoryAndSymlinkLoopAreNamed) {
  ExpectRefusedAtOnce("/dev/zero", "a character device");
  ExpectRefusedAtOnce(kTestlibDir, "a directory");
  ScratchPath a("loop_a.so"), b("loop_b.so");
  ASSERT_EQ(symlink(b.path().c_str(), a.path().c_str()), 0);
  ASSERT_EQ(symlink(a.path().c_str(), b.path().c_str()), 0);
  ExpectRefusedAtOnce(a.path(), "symlink loop");
  EXPECT_FALSE(absl::StrContains(ReadElfInfo(a.path()).status().message(), "does not exist"));
}

TEST(ReadElfInfoTest, GnuLinkerScriptsAreCalledThat) {
  for (const char* text : {"/* GNU ld script\n   Use the shared library. */\nINPUT(libfoo.so.1)\n",
                           "INPUT(-lnvidia-ml)\n", "GROUP ( libc.so.6 )\n"}) {
    ScratchFile file("script.so", text);
    absl::StatusOr<ElfInfo> info = ReadElfInfo(file.path());
    EXPECT_EQ(info.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_TRUE(absl::StrContains(info.status().message(), "linker script")) << info.status();
    EXPECT_TRUE(absl::StrContains(info.status().message(), "not an ELF")) << info.status();
    EXPECT_FALSE(absl::StrContains(info.status().message(), "too short")) << info.status();
  }
}

TEST(ReadElfInfoTest, HalfALibraryIsTruncatedNotAGlibcProblem) {
  const std::string whole = ReadFile(kNewerGlibcSrcLib);
  ScratchFile file("half.so", whole.substr(0, whole.size() / 2));
  absl::Status status = CheckLoadable(file.path());
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "truncated")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "Fix:")) << status;
  EXPECT_FALSE(absl::StrContains(status.message(), "glibc")) << status;
}

TEST(CheckLoadableTest, ExecutableForAnotherMachineIsNamed) {
  if (ThisProcessTarget().machine != EM_X86_64) GTEST_SKIP() << "the copy is made for x86_64";
  std::string bytes = ReadFile("/bin/true");
  if (bytes.size() < sizeof(Elf64_Ehdr)) GTEST_SKIP() << "no /bin/true";
  bytes[offsetof(Elf64_Ehdr, e_machine)] = static_cast<char>(EM_RISCV);
  bytes[offsetof(Elf64_Ehdr, e_machine) + 1] = 0;
  ScratchFile file("riscv_true", bytes);
  absl::Status status = CheckLoadable(file.path());
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "riscv")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "x86_64")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), file.path())) << status;
}

TEST(ReadElfInfoTest, TruncatedCopiesGiveCleanErrors) {
  const std::string whole = ReadFile(LoadedLibraryPath("libstdc++.so.6"));
  ASSERT_GT(whole.size(), 4096u);
  for (size_t length : {size_t{4}, size_t{5}, size_t{16}, size_t{52}, size_t{63}, size_t{64},
                        size_t{65}, size_t{1000}, whole.size() / 2, whole.size() - 1}) {
    ScratchFile file("truncated.so", whole.substr(0, length));
    absl::StatusOr<ElfInfo> info = ReadElfInfo(file.path());
    EXPECT_EQ(info.status().code(), absl::StatusCode::kDataLoss)
        << "length " << length << ": " << info.status();
    EXPECT_TRUE(absl::StrContains(info.status().message(), file.path())) << info.status();
  }
}

TEST(ReadElfInfoTest, SectionHeadersPastTheEndAreCorrupt) {
  std::string bytes = ReadFile(kNewerGlibcSrcLib);
  ASSERT_GT(bytes.size(), sizeof(Elf64_Ehdr));
  if (bytes[EI_CLASS] != ELFCLASS64) GTEST_SKIP() << "the edit assumes a 64-bit file";
  Elf64_Ehdr ehdr;
  std::memcpy(&ehdr, bytes.data(), sizeof(ehdr));
  ehdr.e_shoff = bytes.size() + 4096;
  std::memcpy(bytes.data(), &ehdr, sizeof(ehdr));
  ScratchFile file("bad_shoff.so", bytes);
  EXPECT_EQ(ReadElfInfo(file.path()).status().code(), absl::StatusCode::kDataLoss);
}

TEST(ReadElfInfoTest, ObjectFileWithoutDynamicSection) {
  // An ELF file without .dynamic: this test's own object code is not at hand, so make one
  // by removing the section headers' SHT_DYNAMIC entry from a copy of a library.
  std::string bytes = ReadFile(kNewerGlibcSrcLib);
  if (bytes[EI_CLASS] != ELFCLASS64) GTEST_SKIP() << "the edit assumes a 64-bit file";
  Elf64_Ehdr ehdr;
  std::memcpy(&ehdr, bytes.data(), sizeof(ehdr));
  ASSERT_LE(ehdr.e_shoff + uint64_t{ehdr.e_shnum} * sizeof(Elf64_Shdr), bytes.size());
  bool changed = false;
  for (int i = 0; i < ehdr.e_shnum; ++i) {
    Elf64_Shdr shdr;
    char* at = bytes.data() + ehdr.e_shoff + i * sizeof(Elf64_Shdr);
    std::memcpy(&shdr, at, sizeof(shdr));
    if (shdr.sh_type != SHT_DYNAMIC) continue;
    shdr.sh_type = SHT_PROGBITS;
    std::memcpy(at, &shdr, sizeof(shdr));
    changed = true;
  }
  ASSERT_TRUE(changed);
  ScratchFile file("no_dynamic.so", bytes);
  absl::StatusOr<ElfInfo> info = ReadElfInfo(file.path());
  EXPECT_EQ(info.status().code(), absl::StatusCode::kFailedPrecondition) << info.status();
  EXPECT_TRUE(absl::StrContains(info.status().message(), "no dynamic section")) << info.status();
}

TEST(ReadElfInfoTest, StrippedSectionHeadersAreUnimplemented) {
  std::string bytes = ReadFile(kNewerGlibcSrcLib);
  if (bytes[EI_CLASS] != ELFCLASS64) GTEST_SKIP() << "the edit assumes a 64-bit file";
  Elf64_Ehdr ehdr;
  std::memcpy(&ehdr, bytes.data(), sizeof(ehdr));
  ehdr.e_shoff = 0;  // what sstrip leaves: program headers only
  ehdr.e_shnum = 0;
  ehdr.e_shstrndx = 0;
  std::memcpy(bytes.data(), &ehdr, sizeof(ehdr));
  ScratchFile file("sstripped.so", bytes);
  absl::StatusOr<ElfInfo> info = ReadElfInfo(file.path());
  EXPECT_EQ(info.status().code(), absl::StatusCode::kUnimplemented) << info.status();
}

}  // namespace
}  // namespace gpulet::nvml
