// patch_glibc_need: copies a shared library and rewrites one of its GLIBC_2.* version
// needs to a version no glibc has, e.g. "GLIBC_2.2.5" -> "GLIBC_9.9.9" or "GLIBC_2.34" ->
// "GLIBC_9.99". The result stands in for an NVIDIA library built against a newer glibc
// than the machine has: dlopen() refuses it with "version `GLIBC_9.9.9' not found", and
// gpulet's ELF check must refuse it first.
//
// Why a byte patch instead of building against a newer glibc: no such glibc exists on the
// build machine (or anywhere). The new name has the same length as the old one (every
// digit becomes '9'), so it is overwritten in place in .dynstr and no offset in the file
// moves. The need's vna_hash is updated to the ELF hash of the new name, as a linker would
// have written it; ld.so compares it before the name.
//
// libelf only locates the bytes (read-only, ELF_C_READ); the edit is made on a copy of the
// file in memory, so nothing else in the file is rewritten.
//
// Usage: patch_glibc_need INPUT.so OUTPUT.so [OLD NEW]. With OLD and NEW (same length, e.g.
// GLIBC_2.33 GLIBC_9.99) the need named OLD becomes NEW, and the library's references to
// symbols of that version become unversioned (.gnu.version entries set to 1), so the copy
// still loads where a libc defines version NEW and has those symbols under their real
// versions: the NVML worker test's host root pairs it with such a libc
// (rename_glibc_verdef.cc). Exits 1 with a message when nothing could be patched.
// Single-threaded command-line tool.
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

namespace {

struct Patch {
  size_t name_offset;          // file offset of the version name in .dynstr
  size_t hash_offset;          // file offset of the Vernaux's vna_hash
  unsigned version_index = 0;  // vna_other: the index .gnu.version entries use for it
  std::string old_name;
  std::string new_name;
};

int Fail(const std::string& message) {
  std::fprintf(stderr, "patch_glibc_need: %s\n", message.c_str());
  return 1;
}

// "GLIBC_2.34" -> "GLIBC_9.99": same length, and greater than any real glibc.
std::string Bump(const std::string& name) {
  std::string out = name;
  for (size_t i = 6; i < out.size(); ++i) {
    if (std::isdigit(static_cast<unsigned char>(out[i]))) out[i] = '9';
  }
  return out;
}

bool IsNumericGlibcVersion(const char* name) {
  return std::strncmp(name, "GLIBC_", 6) == 0 && std::isdigit(static_cast<unsigned char>(name[6]));
}

// Finds the first numeric GLIBC_* need in .gnu.version_r and where its bytes live.
std::optional<Patch> FindPatch(Elf* elf, const std::string& want_old, const std::string& want_new,
                               std::string* error) {
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr || shdr.sh_type != SHT_GNU_verneed) continue;
    Elf_Scn* strscn = elf_getscn(elf, shdr.sh_link);
    GElf_Shdr strshdr;
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (strscn == nullptr || gelf_getshdr(strscn, &strshdr) == nullptr || data == nullptr) {
      *error = std::string("unreadable .gnu.version_r: ") + elf_errmsg(-1);
      return std::nullopt;
    }
    // Offsets within the section data equal offsets within the section in the file: the
    // Verneed/Vernaux layout is the same in memory and on disk.
    size_t offset = 0;
    for (size_t guard = 0; guard < data->d_size; ++guard) {
      GElf_Verneed need;
      if (gelf_getverneed(data, static_cast<int>(offset), &need) == nullptr) break;
      size_t aux_offset = offset + need.vn_aux;
      for (unsigned i = 0; i < need.vn_cnt; ++i) {
        GElf_Vernaux aux;
        if (gelf_getvernaux(data, static_cast<int>(aux_offset), &aux) == nullptr) break;
        const char* name = elf_strptr(elf, shdr.sh_link, aux.vna_name);
        if (name != nullptr && IsNumericGlibcVersion(name) &&
            (want_old.empty() || want_old == name)) {
          Patch patch;
          patch.name_offset = strshdr.sh_offset + aux.vna_name;
          patch.hash_offset = shdr.sh_offset + aux_offset;  // vna_hash is the first field
          patch.version_index = aux.vna_other;
          patch.old_name = name;
          patch.new_name = want_new.empty() ? Bump(patch.old_name) : want_new;
          return patch;
        }
        if (aux.vna_next == 0) break;
        aux_offset += aux.vna_next;
      }
      if (need.vn_next == 0) break;
      offset += need.vn_next;
    }
  }
  *error = want_old.empty() ? "no GLIBC_<number> version need found in .gnu.version_r"
                            : "no version need " + want_old + " in .gnu.version_r";
  return std::nullopt;
}

// File offsets of the .gnu.version entries equal to `index` (hidden bit ignored).
std::vector<size_t> VersymEntries(Elf* elf, const std::string& bytes, unsigned index,
                                  bool big_endian) {
  std::vector<size_t> out;
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr || shdr.sh_type != SHT_GNU_versym) continue;
    for (size_t off = shdr.sh_offset;
         off + 2 <= shdr.sh_offset + shdr.sh_size && off + 2 <= bytes.size(); off += 2) {
      const unsigned char b0 = static_cast<unsigned char>(bytes[off]);
      const unsigned char b1 = static_cast<unsigned char>(bytes[off + 1]);
      const unsigned v = big_endian ? (b0 << 8 | b1) : (b1 << 8 | b0);
      if ((v & 0x7fff) == index) out.push_back(off);
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 5) return Fail("usage: patch_glibc_need INPUT.so OUTPUT.so [OLD NEW]");
  const std::string input = argv[1];
  const std::string output = argv[2];
  const std::string want_old = argc == 5 ? argv[3] : "";
  const std::string want_new = argc == 5 ? argv[4] : "";
  if (want_old.size() != want_new.size()) return Fail("OLD and NEW must have the same length");

  std::string bytes;
  {
    std::ifstream in(input, std::ios::binary);
    if (!in) return Fail("cannot read " + input + ": " + std::strerror(errno));
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  if (elf_version(EV_CURRENT) == EV_NONE) return Fail("libelf initialisation failed");
  int fd = open(input.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Fail("cannot open " + input + ": " + std::strerror(errno));
  Elf* elf = elf_begin(fd, ELF_C_READ, nullptr);
  if (elf == nullptr || elf_kind(elf) != ELF_K_ELF) {
    if (elf != nullptr) elf_end(elf);
    close(fd);
    return Fail(input + " is not an ELF file");
  }
  GElf_Ehdr ehdr;
  const bool big_endian =
      gelf_getehdr(elf, &ehdr) != nullptr && ehdr.e_ident[EI_DATA] == ELFDATA2MSB;
  std::string error;
  std::optional<Patch> patch = FindPatch(elf, want_old, want_new, &error);
  std::vector<size_t> versyms;
  if (patch.has_value() && !want_old.empty()) {
    versyms = VersymEntries(elf, bytes, patch->version_index, big_endian);
  }
  elf_end(elf);
  close(fd);
  if (!patch.has_value()) return Fail(input + ": " + error);

  const Patch& p = *patch;
  if (p.name_offset + p.old_name.size() > bytes.size() || p.hash_offset + 4 > bytes.size() ||
      bytes.compare(p.name_offset, p.old_name.size(), p.old_name) != 0) {
    return Fail(input + ": version need " + p.old_name + " is not where the headers say");
  }
  bytes.replace(p.name_offset, p.new_name.size(), p.new_name);
  for (size_t off : versyms) {  // VER_NDX_GLOBAL: an unversioned reference
    bytes[off] = big_endian ? 0 : 1;
    bytes[off + 1] = big_endian ? 1 : 0;
  }
  const uint32_t hash = static_cast<uint32_t>(elf_hash(p.new_name.c_str()));
  for (int i = 0; i < 4; ++i) {
    const int shift = big_endian ? 24 - 8 * i : 8 * i;
    bytes[p.hash_offset + i] = static_cast<char>((hash >> shift) & 0xff);
  }

  // Write beside the output and rename, so a failed run never leaves a half-written
  // library that a later build step would take as up to date.
  const std::string tmp = output + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) return Fail("cannot write " + tmp + ": " + std::strerror(errno));
  }
  if (chmod(tmp.c_str(), 0755) != 0 || rename(tmp.c_str(), output.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return Fail("cannot create " + output + ": " + std::strerror(err));
  }
  std::printf("patch_glibc_need: %s: %s -> %s\n", output.c_str(), p.old_name.c_str(),
              p.new_name.c_str());
  return 0;
}
