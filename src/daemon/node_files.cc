#include "daemon/node_files.h"

#include "absl/strings/str_cat.h"
#include "cluster/labels.h"
#include "common/log.h"

namespace gpulet::daemon {

void ErrorOnce::Report(const std::string& error) {
  if (error != last_) GPULET_LOG_ERROR("{}", error);
  last_ = error;
}

LabelsFile::LabelsFile(const HostFs* host, const gpu::Inventory* inventory)
    : host_(host), inventory_(inventory) {
  SetConfig(config::Config());
}

void LabelsFile::SetConfig(const config::Config& config) {
  text_ = cluster::FormatFeatureFile(cluster::NodeGpuLabels(*inventory_, *host_, config));
}

void LabelsFile::Keep(const std::string& host_path) {
  if (host_path.empty()) return;
  absl::StatusOr<std::string> existing = host_->ReadFile(host_path);
  if (existing.ok() && *existing == text_) return;
  absl::StatusOr<std::string> local = host_->Resolve(host_path);
  absl::Status st = local.ok() ? WriteFileAtomically(*local, text_) : local.status();
  if (!st.ok()) {
    std::string error =
        absl::IsNotFound(st)
            ? absl::StrCat("labels.featuresFile ", host_->Describe(host_path),
                           ": its directory does not exist, so the node's GPU labels are not "
                           "written. deploy/base mounts the host's features.d (created if "
                           "missing); set labels.featuresFile to \"\" to write none")
            : absl::StrCat("labels.featuresFile: ", st.message());
    errors_.Report(error);
    return;
  }
  errors_.Clear();
  GPULET_LOG_INFO("GPU labels written to {}", host_path);
}

NodeFiles::NodeFiles(const HostFs* host, const gpu::Inventory* inventory, bool bundled_fixture_root)
    : host_(host),
      inventory_(inventory),
      bundled_fixture_root_(bundled_fixture_root),
      spec_(host),
      labels_(host, inventory) {}

void NodeFiles::Refresh() {
  if (config_) Reconcile(*config_);
}

void NodeFiles::Reconcile(const config::Config& config) {
  config_ = config;
  if (bundled_fixture_root_) {
    if (!told_bundled_) {
      GPULET_LOG_INFO(
          "simulation on the bundled fixture root: no CDI spec written (pass "
          "--host-root with a writable copy of {} to have one)",
          host_->root());
      told_bundled_ = true;
    }
    return;
  }
  KeepCdiSpec(config);
  labels_path_ = config.labels.features_file;
  labels_.SetConfig(config);
  labels_.Keep(labels_path_);
}

void NodeFiles::Check() {
  labels_.Keep(labels_path_);
  absl::StatusOr<bool> rewritten = spec_.Verify();
  if (!rewritten.ok()) {
    spec_errors_.Report(absl::StrCat("CDI spec: ", rewritten.status().message()));
    return;
  }
  spec_errors_.Clear();
  if (*rewritten) {
    GPULET_LOG_WARN("CDI spec {} was missing or changed on disk; written again", spec_.host_path());
  }
}

// A failure is logged, never fatal: see the header.
void NodeFiles::KeepCdiSpec(const config::Config& config) {
  if (config.cdi.spec_dir.empty()) {
    std::string previous = spec_.host_path();
    if (absl::Status st = spec_.Remove(); !st.ok()) {
      GPULET_LOG_ERROR("CDI spec: {}", st.message());
    } else if (!previous.empty()) {
      GPULET_LOG_INFO("CDI spec {} removed: cdi.specDir is now empty", previous);
    }
    GPULET_LOG_INFO(
        "cdi.specDir is empty: no CDI spec written; CDI names in answers ({}=…) "
        "must resolve in a spec written by someone else",
        config.plugin.cdi_kind);
    return;
  }
  cdi::SpecKeeperOptions options;
  options.spec_dir = config.cdi.spec_dir;
  options.generator.kind = config.plugin.cdi_kind;
  options.generator.driver_root = config.cdi.driver_root;
  options.generator.dev_root = config.cdi.dev_root;
  options.generator.hook_path = config.cdi.hook_path;
  absl::StatusOr<cdi::KeepResult> kept = spec_.Reconcile(*inventory_, options);
  if (!kept.ok()) {
    GPULET_LOG_ERROR("CDI spec: {}", kept.status().message());
    return;
  }
  for (const std::string& warning : kept->warnings) GPULET_LOG_WARN("CDI spec: {}", warning);
  GPULET_LOG_INFO("CDI spec for {} {} {}", config.plugin.cdi_kind,
                  kept->written ? "written to" : "up to date in", kept->host_path);
}

}  // namespace gpulet::daemon
