#include "vram/slice_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/read_file.h"
#include "vram/launch_pacing.h"
#include "vram/slice_format.h"
#include "vram/slice_table.h"

namespace gpulet::vram {

std::string AllocationDirName(const std::vector<std::string>& ids) {
  std::string name = *std::min_element(ids.begin(), ids.end());
  for (char& c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) c = '-';
  }
  if (name.empty() || name == "." || name == "..") name = absl::StrCat("a", name);
  return name;
}

ContainerEdits EnforcementEdits(const std::string& host_dir, const std::string& allocation) {
  ContainerEdits e;
  e.env = {{"LD_AUDIT", kLibraryContainerPath},
           {kSliceEnv, absl::StrCat(kSliceContainerDir, "/", kSliceFileName)}};
  e.mounts = {{absl::StrCat(host_dir, "/lib/", kLibraryFileName), kLibraryContainerPath, true},
              {absl::StrCat(host_dir, "/", allocation), kSliceContainerDir, false}};
  return e;
}

absl::Status WriteSliceFile(const std::string& local_dir, const std::string& name,
                            uint64_t quota_bytes, const std::string& gpu_uuid,
                            const std::string& owner, uint32_t compute_share_permille) {
  const std::string dir = absl::StrCat(local_dir, "/", name);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create the slice directory ", dir, ": ", ec.message(),
                     "; gpulet needs sharing.memorySlices.hostDir writable"));
  }
  chmod(dir.c_str(), 0755);
  std::string content(kSliceFileSize, '\0');
  SliceHeader header;
  FormatSliceHeader(&header, quota_bytes, gpu_uuid.c_str(), owner.c_str(), compute_share_permille);
  std::memcpy(content.data(), &header, sizeof(header));
  AtomicWriteOptions options;
  options.mode = 0666;
  absl::Status s = WriteFileAtomically(absl::StrCat(dir, "/", kSliceFileName), content, options);
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("writing the slice file: ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status InstallLibrary(const std::string& source, const std::string& local_dir) {
  absl::StatusOr<std::string> bytes = ReadRegularFile(source, 64 << 20);
  if (!bytes.ok()) {
    return absl::Status(
        bytes.status().code(),
        absl::StrCat("reading the VRAM enforcement library: ", bytes.status().message()));
  }
  const std::string target = absl::StrCat(local_dir, "/lib/", kLibraryFileName);
  absl::StatusOr<std::string> current = ReadRegularFile(target, 64 << 20);
  if (current.ok() && *current == *bytes) return absl::OkStatus();
  AtomicWriteOptions options;
  options.mode = 0644;
  options.create_parents = true;
  absl::Status s = WriteFileAtomically(target, *bytes, options);
  if (!s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("installing the VRAM enforcement library: ", s.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> FindLibraryBeside(const std::string& exe) {
  const std::filesystem::path dir = std::filesystem::path(exe).parent_path();
  const std::string beside = (dir / kLibraryFileName).string();
  const std::string installed = (dir / ".." / "lib" / "gpulet" / kLibraryFileName).string();
  for (const std::string& p : {beside, installed}) {
    if (access(p.c_str(), R_OK) == 0) return p;
  }
  return absl::NotFoundError(absl::StrCat("the VRAM enforcement library is neither at ", beside,
                                          " nor at ", installed,
                                          " (the image ships it beside gpulet)"));
}

namespace {

// Opens and maps `path`, with OpenSlice's message under a code that says what to do.
absl::Status Open(const std::string& path, bool writable, SliceMap* map) {
  char msg[768];
  switch (OpenSlice(path.c_str(), writable, map, msg, sizeof(msg))) {
    case SliceError::kOk:
      return absl::OkStatus();
    case SliceError::kOpen:
      return access(path.c_str(), F_OK) != 0 ? absl::NotFoundError(msg)
                                             : absl::PermissionDeniedError(msg);
    case SliceError::kNewerFormat:
      return absl::FailedPreconditionError(msg);
    default:
      return absl::DataLossError(msg);
  }
}

}  // namespace

absl::Status SetSliceLaunchRate(const std::string& path, uint64_t units_per_second) {
  SliceMap map;
  if (absl::Status s = Open(path, true, &map); !s.ok()) return s;
  SetLaunchRate(map.header, units_per_second);
  CloseSlice(&map);
  return absl::OkStatus();
}

absl::StatusOr<SliceUsage> ReadSliceUsage(const std::string& path) {
  SliceMap map;
  if (absl::Status s = Open(path, false, &map); !s.ok()) return s;
  SliceUsage u;
  u.quota_bytes = map.header->quota_bytes;
  u.in_use_bytes = InUse(map);
  u.peak_bytes = __atomic_load_n(&map.header->peak_bytes, __ATOMIC_ACQUIRE);
  u.refused = __atomic_load_n(&map.header->refused_total, __ATOMIC_ACQUIRE);
  u.gpu_uuid = std::string(map.header->gpu_uuid,
                           strnlen(map.header->gpu_uuid, sizeof(map.header->gpu_uuid)));
  u.owner = std::string(map.header->owner, strnlen(map.header->owner, sizeof(map.header->owner)));
  const SliceHeader& h = *map.header;
  u.compute.share_permille = h.compute_share_permille;
  u.compute.launch_rate = __atomic_load_n(&h.launch_rate, __ATOMIC_RELAXED);
  u.compute.launch_units = __atomic_load_n(&h.launch_units, __ATOMIC_RELAXED);
  u.compute.launch_waits = __atomic_load_n(&h.launch_waits, __ATOMIC_RELAXED);
  u.compute.launch_wait_ns = __atomic_load_n(&h.launch_wait_ns, __ATOMIC_RELAXED);
  uint32_t n = __atomic_load_n(&map.header->slots_in_use, __ATOMIC_ACQUIRE);
  n = std::min(n, map.header->slot_count);
  for (uint32_t i = 0; i < n; ++i) {
    const SliceSlot& s = map.slots[i];
    SliceUsage::Process p;
    p.used_bytes = __atomic_load_n(&s.used_bytes, __ATOMIC_ACQUIRE) +
                   __atomic_load_n(&s.reserved_bytes, __ATOMIC_ACQUIRE);
    p.peak_bytes = __atomic_load_n(&s.peak_bytes, __ATOMIC_ACQUIRE);
    p.refused = __atomic_load_n(&s.refused, __ATOMIC_ACQUIRE);
    if (!SlotHeld(map, i, &p.pid)) continue;  // free, or a dead process's (not counted)
    u.processes.push_back(p);
  }
  CloseSlice(&map);
  return u;
}

}  // namespace gpulet::vram
