#include "nvml/elf_check.h"

#include <elf.h>
#include <fcntl.h>
#include <gelf.h>
#include <gnu/libc-version.h>
#include <libelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/read_file.h"

namespace gpulet::nvml {
namespace {

// libelf refuses every call until elf_version() has been told which ELF version the
// caller was written for; do it exactly once, thread-safely.
bool InitLibelf() {
  static const bool ok = elf_version(EV_CURRENT) != EV_NONE;
  return ok;
}

// Closes a file descriptor and ends a libelf handle on every return path. The handle must
// end before the descriptor closes: with ELF_C_READ libelf keeps reading through it.
class ElfHandle {
 public:
  explicit ElfHandle(int fd) : fd_(fd) {}
  ElfHandle(const ElfHandle&) = delete;
  ElfHandle& operator=(const ElfHandle&) = delete;
  ~ElfHandle() {
    if (elf_ != nullptr) elf_end(elf_);
    if (fd_ >= 0) close(fd_);
  }
  int fd() const { return fd_; }
  Elf* elf() const { return elf_; }
  void set_elf(Elf* elf) { elf_ = elf; }

 private:
  int fd_;
  Elf* elf_ = nullptr;
};

// libelf's pending error as " (message)", or "" when the failure was found by our own
// checks. elf_errno() also clears it, so a stale error never leaks into a later message.
std::string LibelfError() {
  int err = elf_errno();
  if (err == 0) return "";
  const char* msg = elf_errmsg(err);
  return absl::StrCat(" (", msg != nullptr ? msg : "unknown libelf error", ")");
}

absl::Status Corrupt(const std::string& path, const char* what) {
  return absl::DataLossError(absl::StrCat(
      path, " is a truncated or corrupt ELF file: ", what, LibelfError(),
      ". Fix: the file is damaged (an interrupted copy or download, a full disk); reinstall "
      "the driver's user-space libraries"));
}

absl::Status OpenError(const std::string& path, int err) {
  if (err == ELOOP) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot open ", path,
        ": it is a symlink loop (a symbolic link that, directly or through others, points back "
        "at itself). Fix: make the link point at the driver's library file, e.g. "
        "libnvidia-ml.so.<driver version>"));
  }
  std::string msg = absl::StrCat("cannot open ", path, ": ", std::strerror(err));
  if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  return absl::ErrnoToStatus(err, absl::StrCat("cannot open ", path));
}

// A hint for the common non-ELF files found where a library is expected: Debian's libc.so
// is a text linker script, and a failed download is often an HTML page.
std::string DescribeNonElf(const unsigned char* head, size_t len) {
  if (len == 0) return "it is empty";
  if (len >= 7 && std::memcmp(head, "!<arch>", 7) == 0) return "it is a static archive (.a)";
  size_t printable = 0;
  for (size_t i = 0; i < len; ++i) {
    if (std::isprint(head[i]) || std::isspace(head[i])) ++printable;
  }
  if (printable == len) {
    absl::string_view text(reinterpret_cast<const char*>(head), len);
    if (absl::StrContains(text, "GNU ld script") || absl::StrContains(text, "INPUT(") ||
        absl::StrContains(text, "GROUP(")) {
      return "it is a GNU linker script (text for the link editor ld), not an ELF shared library";
    }
    return "it is a text file (a linker script or a saved web page?), not an ELF shared library";
  }
  return absl::StrFormat("it starts with bytes %02x %02x %02x %02x, not \\x7fELF", head[0],
                         len > 1 ? head[1] : 0, len > 2 ? head[2] : 0, len > 3 ? head[3] : 0);
}

constexpr size_t kMaxNameLength = 4096;

// The string at `offset` in string-table section `strtab_index`, or nullptr when the
// offset is out of bounds, the string unterminated or the section no string table
// (elf_strptr checks all three).
// Names longer than kMaxNameLength are refused too: real sonames and version names are
// short, and the cap bounds what a crafted file can make us allocate.
const char* StringAt(Elf* elf, size_t strtab_index, size_t offset) {
  const char* s = elf_strptr(elf, strtab_index, offset);
  if (s == nullptr || strnlen(s, kMaxNameLength + 1) > kMaxNameLength) return nullptr;
  return s;
}

absl::Status ReadDynamic(const std::string& path, Elf* elf, Elf_Scn* scn, const GElf_Shdr& shdr,
                         ElfInfo& info) {
  Elf_Data* data = elf_getdata(scn, nullptr);
  if (data == nullptr) return Corrupt(path, "unreadable .dynamic section");
  size_t entsize = gelf_fsize(elf, ELF_T_DYN, 1, EV_CURRENT);
  if (entsize == 0) return Corrupt(path, "unknown .dynamic entry size");
  size_t count = data->d_size / entsize;
  for (size_t i = 0; i < count && i <= INT_MAX; ++i) {
    GElf_Dyn dyn;
    if (gelf_getdyn(data, static_cast<int>(i), &dyn) == nullptr) {
      return Corrupt(path, "unreadable .dynamic entry");
    }
    if (dyn.d_tag == DT_NULL) break;
    if (dyn.d_tag != DT_NEEDED && dyn.d_tag != DT_SONAME) continue;
    const char* name = StringAt(elf, shdr.sh_link, dyn.d_un.d_val);
    if (name == nullptr) return Corrupt(path, "a .dynamic name is outside its string table");
    if (dyn.d_tag == DT_NEEDED) {
      info.needed.emplace_back(name);
    } else {
      info.soname = name;
    }
  }
  return absl::OkStatus();
}

// Walks the Verneed chain of .gnu.version_r the way ld.so does: records link to the next
// by relative offsets (vn_next, vn_aux, vna_next) and a zero link ends a list; the counts
// (sh_info, vn_cnt) are not consulted, since ld.so does not either. A corrupt file can
// point anywhere, so every offset is bounds-checked and the walk is capped by the number
// of 16-byte records that fit in the section: links only go forwards, but overlapping or
// shared records could otherwise multiply the work.
absl::Status ReadVersionNeeds(const std::string& path, Elf* elf, Elf_Scn* scn,
                              const GElf_Shdr& shdr, ElfInfo& info) {
  Elf_Data* data = elf_getdata(scn, nullptr);
  if (data == nullptr) return Corrupt(path, "unreadable .gnu.version_r section");
  const size_t size = data->d_size;
  if (size > INT_MAX) return Corrupt(path, ".gnu.version_r is implausibly large");
  const size_t max_records = size / sizeof(Elf32_Vernaux);  // both record kinds: 16 bytes
  constexpr char kTooMany[] = ".gnu.version_r has more records than fit in it";

  size_t offset = 0;
  size_t records = 0;
  while (size > 0) {
    if (++records > max_records) return Corrupt(path, kTooMany);
    GElf_Verneed need;
    if (gelf_getverneed(data, static_cast<int>(offset), &need) == nullptr) {
      return Corrupt(path, ".gnu.version_r entry out of bounds");
    }
    const char* file = StringAt(elf, shdr.sh_link, need.vn_file);
    if (file == nullptr) return Corrupt(path, "a .gnu.version_r file name is out of bounds");
    VersionNeed out;
    out.file = file;

    size_t aux_offset = offset + need.vn_aux;
    while (true) {
      if (++records > max_records) return Corrupt(path, kTooMany);
      GElf_Vernaux aux;
      if (aux_offset > size ||
          gelf_getvernaux(data, static_cast<int>(aux_offset), &aux) == nullptr) {
        return Corrupt(path, ".gnu.version_r version entry out of bounds");
      }
      const char* name = StringAt(elf, shdr.sh_link, aux.vna_name);
      if (name == nullptr) return Corrupt(path, "a .gnu.version_r version name is out of bounds");
      out.versions.emplace_back(name);
      if ((aux.vna_flags & VER_FLG_WEAK) != 0) out.weak_versions.emplace_back(name);
      if (aux.vna_next == 0) break;
      aux_offset += aux.vna_next;
    }
    info.version_needs.push_back(std::move(out));

    if (need.vn_next == 0) break;
    offset += need.vn_next;
    if (offset > size) return Corrupt(path, ".gnu.version_r entry out of bounds");
  }
  return absl::OkStatus();
}

// Walks .gnu.version_d (Verdef records, each with its Verdaux names) with the same
// defences as ReadVersionNeeds: bounds-checked relative links and a record cap. Only the
// first Verdaux of each definition is its name; the others name the versions it inherits.
absl::Status ReadVersionDefinitions(const std::string& path, Elf* elf, Elf_Scn* scn,
                                    const GElf_Shdr& shdr, ElfInfo& info) {
  Elf_Data* data = elf_getdata(scn, nullptr);
  if (data == nullptr) return Corrupt(path, "unreadable .gnu.version_d section");
  const size_t size = data->d_size;
  if (size > INT_MAX) return Corrupt(path, ".gnu.version_d is implausibly large");
  const size_t max_records = size / sizeof(Elf32_Verdaux);  // the smallest record: 8 bytes
  size_t offset = 0;
  size_t records = 0;
  while (size > 0) {
    if (++records > max_records) {
      return Corrupt(path, ".gnu.version_d has more records than fit in it");
    }
    GElf_Verdef def;
    if (gelf_getverdef(data, static_cast<int>(offset), &def) == nullptr) {
      return Corrupt(path, ".gnu.version_d entry out of bounds");
    }
    if (def.vd_cnt > 0) {
      const size_t aux_offset = offset + def.vd_aux;
      GElf_Verdaux aux;
      if (aux_offset > size ||
          gelf_getverdaux(data, static_cast<int>(aux_offset), &aux) == nullptr) {
        return Corrupt(path, ".gnu.version_d name entry out of bounds");
      }
      const char* name = StringAt(elf, shdr.sh_link, aux.vda_name);
      if (name == nullptr) return Corrupt(path, "a .gnu.version_d name is out of bounds");
      info.version_definitions.emplace_back(name);
    }
    if (def.vd_next == 0) break;
    offset += def.vd_next;
    if (offset > size) return Corrupt(path, ".gnu.version_d entry out of bounds");
  }
  return absl::OkStatus();
}

bool HasDynamicSegment(Elf* elf) {
  size_t phnum = 0;
  if (elf_getphdrnum(elf, &phnum) != 0) return false;
  for (size_t i = 0; i < phnum && i <= INT_MAX; ++i) {
    GElf_Phdr phdr;
    if (gelf_getphdr(elf, static_cast<int>(i), &phdr) != nullptr && phdr.p_type == PT_DYNAMIC) {
      return true;
    }
  }
  return false;
}

std::string MachineName(uint16_t machine) {
  switch (machine) {
    case EM_X86_64:
      return "x86_64";
    case EM_386:
      return "i386";
    case EM_AARCH64:
      return "aarch64";
    case EM_ARM:
      return "arm";
    case EM_PPC64:
      return "ppc64";
    case EM_PPC:
      return "ppc";
    case EM_S390:
      return "s390";
    case EM_RISCV:
      return "riscv";
    case EM_NONE:
      return "unknown machine";
    default:
      return absl::StrFormat("machine %#x", machine);
  }
}

std::string Describe(int elf_class, uint16_t machine) {
  return absl::StrCat(elf_class, "-bit ", MachineName(machine));
}

constexpr uint16_t CompiledMachine() {
#if defined(__x86_64__)
  return EM_X86_64;
#elif defined(__aarch64__)
  return EM_AARCH64;
#elif defined(__i386__)
  return EM_386;
#elif defined(__arm__)
  return EM_ARM;
#elif defined(__powerpc64__)
  return EM_PPC64;
#elif defined(__s390__)
  return EM_S390;
#elif defined(__riscv)
  return EM_RISCV;
#else
  return EM_NONE;
#endif
}

}  // namespace

absl::StatusOr<ElfInfo> ReadElfInfo(const std::string& path) {
  if (!InitLibelf()) return absl::InternalError("libelf refused ELF version EV_CURRENT");
  (void)elf_errno();  // drops an error left on this thread by an earlier caller

  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever (and a
  // device may block too); whatever is not a regular file is refused after fstat anyway.
  ElfHandle handle(open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  if (handle.fd() < 0) return OpenError(path, errno);
  struct stat st;
  if (fstat(handle.fd(), &st) != 0) return OpenError(path, errno);
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " is ", FileKindName(st.st_mode),
        ", not a regular file, so it cannot be a shared library. Fix: point at the driver's "
        "library file itself (libnvidia-ml.so.1 and the file it links to)"));
  }

  // Look at the magic ourselves: libelf reports a truncated ELF header and a file that is
  // no ELF at all the same way, and they deserve different messages. A linker script's
  // first line can be long, so read enough of it to recognise one.
  unsigned char head[256] = {};
  ssize_t got = pread(handle.fd(), head, sizeof(head), 0);
  if (got < 0) return OpenError(path, errno);
  if (got < SELFMAG || std::memcmp(head, ELFMAG, SELFMAG) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not an ELF file: ", DescribeNonElf(head, static_cast<size_t>(got)),
                     ". Fix: point at the driver's real library file (libnvidia-ml.so.1 or the "
                     "libnvidia-ml.so.<version> it links to), not a linker script or a copy "
                     "of something else"));
  }

  // ELF_C_READ, not ELF_C_READ_MMAP: libelf then reads with pread() and checks each read
  // against the file size, whereas a mapping of a file that shrinks would SIGBUS.
  handle.set_elf(elf_begin(handle.fd(), ELF_C_READ, nullptr));
  if (handle.elf() == nullptr) return Corrupt(path, "unreadable ELF header");
  Elf* elf = handle.elf();
  if (elf_kind(elf) != ELF_K_ELF) return Corrupt(path, "unrecognised ELF identification");

  ElfInfo info;
  switch (gelf_getclass(elf)) {
    case ELFCLASS32:
      info.elf_class = 32;
      break;
    case ELFCLASS64:
      info.elf_class = 64;
      break;
    default:
      return Corrupt(path, "unknown ELF class");
  }
  GElf_Ehdr ehdr;
  if (gelf_getehdr(elf, &ehdr) == nullptr) return Corrupt(path, "unreadable ELF header");
  info.machine = ehdr.e_machine;

  size_t shnum = 0;
  if (elf_getshdrnum(elf, &shnum) != 0) return Corrupt(path, "unreadable section count");
  // libelf quietly treats a section header table past the end of the file as "no
  // sections", which would pass a truncated library off as a stripped one; check it here.
  // (e_shnum 0 with a nonzero e_shoff is extended numbering: the count is in entry 0.)
  if (ehdr.e_shoff != 0 || ehdr.e_shnum != 0) {
    const uint64_t file_size = static_cast<uint64_t>(st.st_size);
    const uint64_t entries = std::max<uint64_t>({ehdr.e_shnum, shnum, 1});
    const uint64_t entry_size = gelf_fsize(elf, ELF_T_SHDR, 1, EV_CURRENT);
    if (entry_size == 0 || ehdr.e_shoff > file_size ||
        (file_size - ehdr.e_shoff) / entry_size < entries) {
      return Corrupt(path, "the section header table lies past the end of the file");
    }
  }
  bool have_dynamic = false;
  bool have_verneed = false;
  bool have_verdef = false;
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr) return Corrupt(path, "unreadable section header");
    if (shdr.sh_type == SHT_DYNAMIC && !have_dynamic) {
      have_dynamic = true;
      if (absl::Status s = ReadDynamic(path, elf, scn, shdr, info); !s.ok()) return s;
    } else if (shdr.sh_type == SHT_GNU_verneed && !have_verneed) {
      have_verneed = true;
      if (absl::Status s = ReadVersionNeeds(path, elf, scn, shdr, info); !s.ok()) return s;
    } else if (shdr.sh_type == SHT_GNU_verdef && !have_verdef) {
      have_verdef = true;
      if (absl::Status s = ReadVersionDefinitions(path, elf, scn, shdr, info); !s.ok()) {
        return s;
      }
    }
  }
  if (!have_dynamic) {
    if (ehdr.e_shoff == 0 && ehdr.e_shnum == 0 && HasDynamicSegment(elf)) {
      return absl::UnimplementedError(absl::StrCat(
          path,
          " has no section headers (stripped with sstrip?), which gpulet needs to read "
          "its dependencies"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat(path,
                     " has no dynamic section: it is a static executable or an object file, not a "
                     "shared library"));
  }
  return info;
}

std::optional<GlibcVersion> GlibcVersion::Parse(std::string_view text) {
  if (text.starts_with("GLIBC_")) text.remove_prefix(6);
  // Parses one dot-separated component: 1-6 digits, no sign, no leading '+'.
  auto component = [&text](int& out) {
    if (text.empty() || !std::isdigit(static_cast<unsigned char>(text.front()))) return false;
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, out);
    if (ec != std::errc() || ptr - text.data() > 6) return false;
    text.remove_prefix(static_cast<size_t>(ptr - text.data()));
    return true;
  };
  GlibcVersion v;
  if (!component(v.major)) return std::nullopt;
  if (text.empty() || text.front() != '.') return std::nullopt;
  text.remove_prefix(1);
  if (!component(v.minor)) return std::nullopt;
  if (!text.empty()) {
    int patch = 0;
    if (text.front() != '.') return std::nullopt;
    text.remove_prefix(1);
    if (!component(patch) || !text.empty()) return std::nullopt;
  }
  return v;
}

std::string GlibcVersion::ToString() const { return absl::StrCat(major, ".", minor); }

GlibcVersion RunningGlibcVersion() {
  std::optional<GlibcVersion> v = GlibcVersion::Parse(gnu_get_libc_version());
  return v.value_or(GlibcVersion{});
}

namespace {

// The GLIBC_* need behind MaxGlibcNeeded: its version, its exact name ("GLIBC_2.2.5"
// keeps its third part for messages) and the file it is needed from.
struct GlibcNeed {
  GlibcVersion version;
  std::string name;
  std::string file;
};

std::optional<GlibcNeed> MaxGlibcNeed(const ElfInfo& info) {
  std::optional<GlibcNeed> best;
  for (const VersionNeed& need : info.version_needs) {
    for (const std::string& name : need.versions) {
      // Only GLIBC_<digits>... parses; GLIBC_PRIVATE and GLIBC_ABI_DT_RELR do not.
      if (!absl::StartsWith(name, "GLIBC_")) continue;
      bool weak = false;
      for (const std::string& w : need.weak_versions) weak = weak || w == name;
      if (weak) continue;
      std::optional<GlibcVersion> v = GlibcVersion::Parse(name);
      if (!v.has_value()) continue;
      if (!best.has_value() || *v > best->version) best = GlibcNeed{*v, name, need.file};
    }
  }
  return best;
}

}  // namespace

std::optional<GlibcVersion> MaxGlibcNeeded(const ElfInfo& info) {
  std::optional<GlibcNeed> need = MaxGlibcNeed(info);
  if (!need.has_value()) return std::nullopt;
  return need->version;
}

std::optional<GlibcVersion> MaxGlibcProvided(const ElfInfo& info) {
  std::optional<GlibcVersion> best;
  for (const std::string& name : info.version_definitions) {
    if (!absl::StartsWith(name, "GLIBC_")) continue;
    std::optional<GlibcVersion> v = GlibcVersion::Parse(name);
    if (v.has_value() && (!best.has_value() || *v > *best)) best = v;
  }
  return best;
}

LoaderTarget ThisProcessTarget() {
  LoaderTarget t;
  t.elf_class = sizeof(void*) == 8 ? 64 : 32;
  t.machine = CompiledMachine();
  t.glibc = RunningGlibcVersion();
  return t;
}

absl::Status CheckCompatible(const ElfInfo& info, std::string_view path,
                             const LoaderTarget& target) {
  // Debian's Abseil is built with its own absl::string_view, which StrCat does not take
  // from a std::string_view.
  const std::string lib(path);
  const bool machine_known = target.machine != EM_NONE;
  if (info.elf_class != target.elf_class || (machine_known && info.machine != target.machine)) {
    std::string hint =
        info.elf_class != target.elf_class && info.machine == target.machine
            ? "This is usually the driver's 32-bit compatibility copy. Fix: point gpulet at "
              "the 64-bit library (e.g. /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1)."
            : "It was built for another architecture. Fix: the NVIDIA libraries and gpulet's "
              "image must both match the node's architecture: install the driver for this "
              "architecture, or run the gpulet image built for it.";
    return absl::FailedPreconditionError(absl::StrCat(
        lib, " is a ", Describe(info.elf_class, info.machine), " library, but gpulet is a ",
        Describe(target.elf_class, target.machine), " process and cannot load it. ", hint));
  }

  if (target.glibc == GlibcVersion{}) return absl::OkStatus();
  std::optional<GlibcNeed> need = MaxGlibcNeed(info);
  if (!need.has_value() || need->version <= target.glibc) return absl::OkStatus();
  // dlopen() would at best fail with "version `GLIBC_x.y' not found"; with the host's
  // libraries bind-mounted into gpulet's container it has been seen to segfault instead.
  return absl::FailedPreconditionError(absl::StrCat(
      lib, " needs ", need->name, " (from ", need->file, ") but gpulet runs with glibc ",
      target.glibc.ToString(),
      ", so loading it would fail or crash. The NVIDIA user-space libraries on this host "
      "were built for a newer glibc than the one gpulet runs with. Run gpulet's image on a "
      "host whose driver libraries match it, or (e.g. on Talos) use CDI or the `nvidia` "
      "runtime class so the NVIDIA container toolkit injects libraries built for a "
      "compatible glibc, instead of bind-mounting the host's libraries into gpulet's "
      "container."));
}

absl::Status CheckLoadable(const std::string& path) {
  absl::StatusOr<ElfInfo> info = ReadElfInfo(path);
  if (!info.ok()) return info.status();
  return CheckCompatible(*info, path, ThisProcessTarget());
}

}  // namespace gpulet::nvml
