#include "cdi/spec_keeper.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/atomic_file.h"

namespace gpulet::cdi {

std::string SpecFileName(absl::string_view kind) {
  return absl::StrCat(absl::StrReplaceAll(kind, {{"/", "-"}}), ".yaml");
}

absl::StatusOr<std::string> SpecKeeper::LocalPath(const std::string& host_path) const {
  size_t slash = host_path.rfind('/');
  std::string dir = slash == 0 ? "/" : host_path.substr(0, slash);
  absl::StatusOr<std::string> local_dir = host_->Resolve(dir);
  if (!local_dir.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cdi.specDir ", dir, ": ", local_dir.status().message()));
  }
  return JoinPath(*local_dir, host_path.substr(slash + 1));
}

absl::StatusOr<KeepResult> SpecKeeper::Reconcile(const gpu::Inventory& inventory,
                                                 const SpecKeeperOptions& options) {
  if (options.spec_dir.empty() || options.spec_dir[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("cdi.specDir \"", options.spec_dir, "\" must be an absolute host path"));
  }
  absl::StatusOr<GeneratedSpec> generated = GenerateSpec(inventory, *host_, options.generator);
  if (!generated.ok()) {
    return absl::Status(generated.status().code(),
                        absl::StrCat("no CDI spec for ", options.generator.kind, " in ",
                                     options.spec_dir, ": ", generated.status().message()));
  }
  KeepResult result;
  result.warnings = generated->warnings;
  result.left_out = generated->left_out;
  if (!options.generator.hook_path.empty() && !host_->Exists(options.generator.hook_path)) {
    result.warnings.push_back(absl::StrCat(
        "cdi.hookPath ", host_->Describe(options.generator.hook_path),
        " does not exist on the host: the runtime runs hooks on the host, so every container "
        "asking for a ",
        options.generator.kind,
        " device will fail to start. Set cdi.hookPath to nvidia-cdi-hook's host path, or "
        "leave it empty to use the one found on the host"));
  }
  result.host_path = JoinPath(options.spec_dir, SpecFileName(options.generator.kind));
  std::string content = ToYaml(generated->spec);

  absl::StatusOr<std::string> local = LocalPath(result.host_path);
  if (!local.ok()) return local.status();
  absl::StatusOr<std::string> existing = host_->ReadFile(result.host_path);
  if (!existing.ok() || *existing != content) {
    if (absl::Status st = WriteFileAtomically(*local, content, {.create_parents = true});
        !st.ok()) {
      return absl::Status(
          st.code(),
          absl::StrCat(st.message(), ". Pods asking for ", options.generator.kind,
                       " devices fail with \"unresolvable CDI devices\" until the spec is "
                       "written: mount the host's ",
                       options.spec_dir,
                       " writable into gpulet's pod (the DaemonSet does), "
                       "or set cdi.specDir to a directory the runtime scans"));
    }
    result.written = true;
  }
  // The file of a previous kind or directory would resolve names nobody serves any more.
  if (!host_path_.empty() && host_path_ != result.host_path) {
    if (absl::StatusOr<std::string> old = LocalPath(host_path_); old.ok()) {
      if (unlink(old->c_str()) != 0 && errno != ENOENT) {
        result.warnings.push_back(absl::StrCat("could not remove the previous spec ", host_path_,
                                               ": ", std::strerror(errno)));
      }
    }
  }
  host_path_ = result.host_path;
  content_ = std::move(content);
  return result;
}

absl::StatusOr<bool> SpecKeeper::Verify() {
  if (host_path_.empty()) return false;
  absl::StatusOr<std::string> existing = host_->ReadFile(host_path_);
  if (existing.ok() && *existing == content_) return false;
  absl::StatusOr<std::string> local = LocalPath(host_path_);
  if (!local.ok()) return local.status();
  if (absl::Status st = WriteFileAtomically(*local, content_, {.create_parents = true}); !st.ok())
    return st;
  return true;
}

absl::Status SpecKeeper::Remove() {
  if (host_path_.empty()) return absl::OkStatus();
  absl::StatusOr<std::string> local = LocalPath(host_path_);
  if (!local.ok()) return local.status();
  if (unlink(local->c_str()) != 0 && errno != ENOENT) {
    return absl::InternalError(
        absl::StrCat("cannot remove ", host_path_, ": ", std::strerror(errno)));
  }
  host_path_.clear();
  content_.clear();
  return absl::OkStatus();
}

}  // namespace gpulet::cdi
