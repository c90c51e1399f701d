// rename_glibc_verdef: copies a shared library (a libc.so.6) and renames one of the versions
// it *defines*, e.g. "GLIBC_2.10" -> "GLIBC_9.99", so the copy provides a glibc release no
// machine has. The NVML worker test builds a host root whose driver library needs
// GLIBC_9.99 (patch_glibc_need.cc) and whose own libc.so.6 is this copy: gpulet must refuse
// to load that library in its own process and run it through the root's loader instead.
//
// Pick a version that nothing the test loads needs (check with `readelf -V`): its symbols
// then carry the new name, and a need for the old one would no longer be met. The new name
// has the same length, so it is overwritten in place in .dynstr (the verdef's name and the
// absolute symbol of the same name share that string) and the Verdef's vd_hash is updated
// to the ELF hash of the new name, which ld.so compares first.
//
// Usage: rename_glibc_verdef INPUT.so OUTPUT.so OLD NEW. Exits 1 with a message when OLD is
// not defined or is also needed by the file itself. Single-threaded command-line tool.
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "rename_glibc_verdef: %s\n", message.c_str());
  return 1;
}

struct Found {
  size_t name_offset = 0;  // file offset of the name in the string table
  size_t hash_offset = 0;  // file offset of vd_hash
};

// Finds the Verdef named `old_name`; sets *needed when .gnu.version_r names it too (the
// shared string would rename the need as well).
std::optional<Found> Find(Elf* elf, const std::string& old_name, bool* needed, std::string* error) {
  std::optional<Found> found;
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr) continue;
    Elf_Scn* strscn = elf_getscn(elf, shdr.sh_link);
    GElf_Shdr strshdr;
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (shdr.sh_type != SHT_GNU_verdef && shdr.sh_type != SHT_GNU_verneed) continue;
    if (strscn == nullptr || gelf_getshdr(strscn, &strshdr) == nullptr || data == nullptr) {
      *error = std::string("unreadable version section: ") + elf_errmsg(-1);
      return std::nullopt;
    }
    size_t offset = 0;
    for (size_t guard = 0; guard < data->d_size; ++guard) {
      if (shdr.sh_type == SHT_GNU_verdef) {
        GElf_Verdef def;
        if (gelf_getverdef(data, static_cast<int>(offset), &def) == nullptr) break;
        GElf_Verdaux aux;
        if (def.vd_cnt > 0 &&
            gelf_getverdaux(data, static_cast<int>(offset + def.vd_aux), &aux) != nullptr) {
          const char* name = elf_strptr(elf, shdr.sh_link, aux.vda_name);
          if (name != nullptr && old_name == name) {
            found = Found{strshdr.sh_offset + aux.vda_name, shdr.sh_offset + offset + 8};
          }
        }
        if (def.vd_next == 0) break;
        offset += def.vd_next;
      } else {
        GElf_Verneed need;
        if (gelf_getverneed(data, static_cast<int>(offset), &need) == nullptr) break;
        size_t aux_offset = offset + need.vn_aux;
        for (unsigned i = 0; i < need.vn_cnt; ++i) {
          GElf_Vernaux aux;
          if (gelf_getvernaux(data, static_cast<int>(aux_offset), &aux) == nullptr) break;
          const char* name = elf_strptr(elf, shdr.sh_link, aux.vna_name);
          if (name != nullptr && old_name == name) *needed = true;
          if (aux.vna_next == 0) break;
          aux_offset += aux.vna_next;
        }
        if (need.vn_next == 0) break;
        offset += need.vn_next;
      }
    }
  }
  if (!found) *error = "no version definition " + old_name + " in .gnu.version_d";
  return found;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) return Fail("usage: rename_glibc_verdef INPUT.so OUTPUT.so OLD NEW");
  const std::string input = argv[1], output = argv[2], old_name = argv[3], new_name = argv[4];
  if (old_name.size() != new_name.size()) return Fail("OLD and NEW must have the same length");

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
  bool needed = false;
  std::optional<Found> found = Find(elf, old_name, &needed, &error);
  elf_end(elf);
  close(fd);
  if (!found) return Fail(input + ": " + error);
  if (needed) return Fail(input + " also needs " + old_name + "; pick another version");
  if (found->name_offset + old_name.size() > bytes.size() ||
      found->hash_offset + 4 > bytes.size() ||
      bytes.compare(found->name_offset, old_name.size(), old_name) != 0) {
    return Fail(input + ": version " + old_name + " is not where the headers say");
  }
  bytes.replace(found->name_offset, new_name.size(), new_name);
  const uint32_t hash = static_cast<uint32_t>(elf_hash(new_name.c_str()));
  for (int i = 0; i < 4; ++i) {
    const int shift = big_endian ? 24 - 8 * i : 8 * i;
    bytes[found->hash_offset + i] = static_cast<char>((hash >> shift) & 0xff);
  }
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
  std::printf("rename_glibc_verdef: %s: %s -> %s\n", output.c_str(), old_name.c_str(),
              new_name.c_str());
  return 0;
}
