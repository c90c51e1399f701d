#include "cdi/spec_dirs.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gpulet::cdi {

std::vector<std::string> DefaultSpecDirs() { return {kStaticSpecDir, kDynamicSpecDir}; }

SpecCatalog SpecCatalog::Load(const HostFs& fs, const std::vector<std::string>& dirs) {
  SpecCatalog catalog;
  catalog.dirs_ = dirs;
  for (size_t d = 0; d < dirs.size(); ++d) {
    const std::string& dir = dirs[d];
    if (!fs.Exists(dir)) continue;
    absl::StatusOr<std::vector<std::string>> names = fs.ListDir(dir);
    if (!names.ok()) {
      catalog.dir_errors_.push_back(std::string(names.status().message()));
      continue;
    }
    for (const std::string& name : *names) {
      if (!absl::EndsWith(name, ".yaml") && !absl::EndsWith(name, ".json")) continue;
      std::string path = JoinPath(dir, name);
      if (fs.IsDirectory(path)) continue;
      SpecFile file;
      file.path = path;
      file.priority = static_cast<int>(d);
      absl::StatusOr<std::string> text = fs.ReadFile(path, 16 << 20);
      if (!text.ok()) {
        file.status = text.status();
      } else if (absl::StatusOr<Spec> spec = ParseSpec(*text, path); !spec.ok()) {
        file.status = spec.status();
      } else if (absl::Status valid = ValidateSpec(*spec); !valid.ok()) {
        file.status = absl::InvalidArgumentError(absl::StrCat(path, ": ", valid.message()));
      } else {
        file.spec = std::move(*spec);
      }
      catalog.files_.push_back(std::move(file));
    }
  }
  // Index after loading, so that the pointers into files_ stay valid. Per name, only the
  // highest-priority definitions count; more than one of them is a conflict.
  std::map<std::string, std::vector<std::pair<size_t, size_t>>> defined;
  for (size_t f = 0; f < catalog.files_.size(); ++f) {
    const SpecFile& file = catalog.files_[f];
    if (!file.status.ok()) continue;
    for (size_t i = 0; i < file.spec.devices.size(); ++i) {
      defined[absl::StrCat(file.spec.kind, "=", file.spec.devices[i].name)].push_back({f, i});
    }
  }
  for (const auto& [name, where] : defined) {
    int top = -1;
    for (const auto& [f, i] : where) top = std::max(top, catalog.files_[f].priority);
    std::vector<std::pair<size_t, size_t>> winners;
    for (const auto& w : where) {
      if (catalog.files_[w.first].priority == top) winners.push_back(w);
    }
    if (winners.size() == 1) {
      catalog.devices_[name] = winners[0];
    } else {
      for (const auto& [f, i] : winners) catalog.conflicts_[name].push_back(catalog.files_[f].path);
    }
  }
  return catalog;
}

absl::StatusOr<ResolvedDevice> SpecCatalog::Resolve(absl::string_view qualified_name) const {
  absl::StatusOr<QualifiedName> q = ParseQualifiedName(qualified_name);
  if (!q.ok()) return q.status();
  std::string name = q->ToString();
  if (auto c = conflicts_.find(name); c != conflicts_.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        name, " is defined by several spec files of the same directory (",
        absl::StrJoin(c->second, ", "), "); the runtime uses neither. Remove all but one"));
  }
  if (auto it = devices_.find(name); it != devices_.end()) {
    const SpecFile& file = files_[it->second.first];
    return ResolvedDevice{&file, &file.spec.devices[it->second.second]};
  }
  std::vector<std::string> same_kind, broken;
  for (const SpecFile& f : files_) {
    if (!f.status.ok()) {
      broken.push_back(f.path);
    } else if (f.spec.kind == q->Kind()) {
      same_kind.push_back(f.path);
    }
  }
  std::string detail;
  if (!same_kind.empty()) {
    absl::StrAppend(&detail, "; ", absl::StrJoin(same_kind, ", "), " define kind ", q->Kind(),
                    " but no device \"", q->name, "\"");
  } else {
    absl::StrAppend(&detail, "; no loadable spec in ", absl::StrJoin(dirs_, ", "), " defines kind ",
                    q->Kind());
  }
  if (!broken.empty()) {
    absl::StrAppend(&detail, "; not loadable: ", absl::StrJoin(broken, ", "));
  }
  return absl::NotFoundError(absl::StrCat("CDI device ", name, " is not defined", detail));
}

std::vector<std::string> SpecCatalog::DeviceNames() const {
  std::vector<std::string> names;
  for (const auto& [name, where] : devices_) names.push_back(name);
  return names;
}

}  // namespace gpulet::cdi
