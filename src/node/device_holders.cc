#include "node/device_holders.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace gpulet::node {
namespace {

// Whether the file `st` describes is the device node `dev` describes.
bool Same(const struct stat& st, const struct stat& dev) {
  if (S_ISCHR(dev.st_mode)) return S_ISCHR(st.st_mode) && st.st_rdev == dev.st_rdev;
  return st.st_dev == dev.st_dev && st.st_ino == dev.st_ino;
}

// The parent pid of the process at `proc` ("/proc/<pid>"); 0 when unreadable.
unsigned ParentPid(const HostFs& host, const std::string& proc) {
  absl::StatusOr<std::string> stat = host.ReadFile(absl::StrCat(proc, "/stat"), 4096);
  return stat.ok() ? static_cast<unsigned>(ProcStatField(*stat, 4).value_or(0)) : 0;
}

}  // namespace

std::optional<uint64_t> ProcStatField(absl::string_view stat, int n) {
  const size_t close = stat.rfind(')');
  if (close == absl::string_view::npos || n < 3) return std::nullopt;
  std::vector<absl::string_view> fields =
      absl::StrSplit(stat.substr(close + 1), ' ', absl::SkipEmpty());
  uint64_t value = 0;
  const size_t i = static_cast<size_t>(n - 3);  // field 3 (the state) is the first after ')'
  if (i >= fields.size() || !absl::SimpleAtoi(fields[i], &value)) return std::nullopt;
  return value;
}

absl::StatusOr<std::vector<DeviceHolder>> ProcessesHolding(const HostFs& host,
                                                           absl::string_view device,
                                                           const DeviceHolderOptions& options) {
  absl::StatusOr<std::string> device_local = host.Resolve(device);
  if (!device_local.ok()) return device_local.status();
  struct stat dev {};
  if (stat(device_local->c_str(), &dev) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot stat ", host.Describe(device)));
  }
  absl::StatusOr<std::vector<std::string>> pids = host.ListDir("/proc");
  if (!pids.ok()) return pids.status();
  absl::StatusOr<std::string> proc_local = host.Resolve("/proc");
  if (!proc_local.ok()) return proc_local.status();
  std::vector<DeviceHolder> holders;
  for (const std::string& name : *pids) {
    unsigned pid = 0;
    if (!absl::SimpleAtoi(name, &pid) || pid == 0) continue;
    if (pid == options.self_pid) continue;
    const std::string fd_dir = absl::StrCat(*proc_local, "/", name, "/fd");
    std::unique_ptr<DIR, int (*)(DIR*)> dir(opendir(fd_dir.c_str()), closedir);
    if (!dir) {
      if (errno == ENOENT || errno == ESRCH) continue;  // it ended, or has no fd directory
      if (errno == EACCES || errno == EPERM) {
        return absl::PermissionDeniedError(absl::StrCat(
            "cannot list the open files of pid ", pid, " (", host.Describe("/proc/" + name + "/fd"),
            "): permission denied; gpulet needs CAP_SYS_PTRACE (its pod is privileged in "
            "deploy/base) to see which processes hold a GPU"));
      }
      return absl::ErrnoToStatus(
          errno, absl::StrCat("cannot list ", host.Describe("/proc/" + name + "/fd")));
    }
    bool holds = false;
    while (struct dirent* e = readdir(dir.get())) {
      if (e->d_name[0] == '.') continue;
      struct stat st {};
      if (fstatat(dirfd(dir.get()), e->d_name, &st, 0) == 0 && Same(st, dev)) {
        holds = true;
        break;
      }
    }
    if (!holds) continue;
    const std::string proc = absl::StrCat("/proc/", name);
    if (options.self_pid != 0 && ParentPid(host, proc) == options.self_pid) continue;
    DeviceHolder h;
    h.pid = pid;
    h.name = host.ReadAttribute(proc + "/comm").value_or("");
    if (absl::StatusOr<std::string> exe = host.ReadLink(proc + "/exe"); exe.ok()) {
      h.exe = exe->substr(exe->rfind('/') + 1);
    }
    bool ignored = false;
    for (const std::string& skip : options.ignore_exe) ignored |= !h.exe.empty() && h.exe == skip;
    if (!ignored) holders.push_back(std::move(h));
  }
  return holders;
}

}  // namespace gpulet::node
