#include "daemon/node_files.h"

#include "absl/strings/str_cat.h"
#include "cluster/labels.h"
#include "common/log.h"
#include "plugin/resources.h"

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

namespace {

// Whether `health` (null: a MIG device without its own) holds exactly the "cdi-spec"
// condition `want` asks for (none when null).
bool Matches(const state::GpuHealth* health, const state::HealthCondition* want) {
  const state::HealthCondition* have = nullptr;
  if (health != nullptr) {
    auto it = health->conditions.find(kCdiSpecSource);
    if (it != health->conditions.end()) have = &it->second;
  }
  if (want == nullptr || have == nullptr) return want == have;
  return have->severity == want->severity && have->reason == want->reason &&
         have->action == want->action;
}

}  // namespace

void SyncLeftOutHealth(const std::vector<cdi::LeftOutDevice>& left_out, absl::Time now,
                       state::DeviceStore* store) {
  auto wanted =
      [&](const std::string& gpu_uuid,
          std::optional<unsigned> gpu_instance_id) -> std::optional<state::HealthCondition> {
    for (const cdi::LeftOutDevice& l : left_out) {
      if (l.gpu_uuid != gpu_uuid || l.gpu_instance_id != gpu_instance_id) continue;
      state::HealthCondition c;
      c.severity = state::HealthState::kUnhealthy;
      c.reason =
          absl::StrCat("left out of the CDI spec, so its CDI name would not resolve: ", l.reason);
      c.action = l.action;
      c.since = now;
      return c;
    }
    return std::nullopt;
  };
  auto apply = [now](const std::optional<state::HealthCondition>& want) {
    return [want, now](state::GpuHealth& h) {
      if (want) {
        h.Raise(kCdiSpecSource, *want, now);
      } else {
        h.Clear(kCdiSpecSource, now);
      }
    };
  };
  std::shared_ptr<const state::Snapshot> snap = store->Get();
  for (const state::DeviceRecord& d : snap->devices) {
    std::optional<state::HealthCondition> want = wanted(d.gpu.uuid, std::nullopt);
    if (!Matches(&d.health, want ? &*want : nullptr)) store->UpdateHealth(d.gpu.uuid, apply(want));
    for (const gpu::MigDeviceInfo& mig : d.gpu.mig_devices) {
      want = wanted(d.gpu.uuid, mig.gpu_instance_id);
      auto it = d.mig_health.find(mig.gpu_instance_id);
      if (!Matches(it == d.mig_health.end() ? nullptr : &it->second, want ? &*want : nullptr)) {
        store->UpdateMigHealth(d.gpu.uuid, mig.gpu_instance_id, apply(want));
      }
    }
  }
}

NodeFiles::NodeFiles(const HostFs* host, const gpu::Inventory* inventory, bool bundled_fixture_root,
                     state::DeviceStore* store, const Clock* clock)
    : host_(host),
      inventory_(inventory),
      bundled_fixture_root_(bundled_fixture_root),
      store_(store),
      clock_(clock),
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
  KeepCdiSpec(config, /*from_check=*/false).IgnoreError();  // logged there, never fatal
  labels_path_ = config.labels.features_file;
  labels_.SetConfig(config);
  labels_.Keep(labels_path_);
}

void NodeFiles::Check() {
  labels_.Keep(labels_path_);
  if (!config_ || bundled_fixture_root_ || config_->cdi.spec_dir.empty()) return;
  // Generated again, not only compared with the last: a device node may have gone or
  // appeared since (udev, nvidia-modprobe), and the spec and the devices' health follow it.
  absl::Status kept = KeepCdiSpec(*config_, /*from_check=*/true);
  if (kept.ok()) {
    spec_errors_.Clear();
    return;
  }
  // Nothing could be generated: the last good spec stays on disk for the running containers.
  const bool had_one = !spec_.host_path().empty();
  absl::StatusOr<bool> rewritten = spec_.Verify();
  spec_errors_.Report(absl::StrCat(
      "CDI spec: ", kept.message(),
      !rewritten.ok()
          ? absl::StrCat("; keeping the last one failed too: ", rewritten.status().message())
      : *rewritten ? "; the last one written again, it was missing or changed on disk"
      : had_one    ? "; the last one kept"
                   : ""));
}

// A failure is logged, never fatal: see the header.
absl::Status NodeFiles::KeepCdiSpec(const config::Config& config, bool from_check) {
  if (config.cdi.spec_dir.empty()) {
    // CDI names then resolve in someone else's spec, or not: nothing here can tell.
    spec_warnings_.clear();
    SyncLeftOutHealth({}, clock_->Now(), store_);
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
    return absl::OkStatus();
  }
  cdi::SpecKeeperOptions options;
  options.spec_dir = config.cdi.spec_dir;
  options.generator.kind = config.plugin.cdi_kind;
  options.generator.driver_root = config.cdi.driver_root;
  options.generator.dev_root = config.cdi.dev_root;
  options.generator.hook_path = config.cdi.hook_path;
  absl::StatusOr<cdi::KeepResult> kept = spec_.Reconcile(*inventory_, options);
  if (!kept.ok()) {
    if (!from_check) GPULET_LOG_ERROR("CDI spec: {}", kept.status().message());
    return kept.status();
  }
  // The answers that name CDI devices: the device plugin's with a CDI strategy, and DRA's
  // for the GPUs it offers (a claim's container gets its devices by CDI name only).
  const bool plugin_names_cdi = plugin::AnswersNameCdiDevices(config);
  std::vector<cdi::LeftOutDevice> named;
  for (const cdi::LeftOutDevice& l : kept->left_out) {
    const gpu::Gpu* g = inventory_->FindByUuid(l.gpu_uuid);
    const bool dra = g != nullptr && g->index && config.DraOffers(*g->index, g->uuid);
    if (plugin_names_cdi || dra) named.push_back(l);
  }
  SyncLeftOutHealth(named, clock_->Now(), store_);
  if (from_check && !kept->written && kept->warnings == spec_warnings_) return absl::OkStatus();
  spec_warnings_ = kept->warnings;
  for (const std::string& warning : kept->warnings) GPULET_LOG_WARN("CDI spec: {}", warning);
  GPULET_LOG_INFO("CDI spec for {} {} {}{}", config.plugin.cdi_kind,
                  kept->written ? "written to" : "up to date in", kept->host_path,
                  from_check && kept->written
                      ? " (the file was missing or differed from what the node's devices and "
                        "driver files now call for)"
                      : "");
  return absl::OkStatus();
}

}  // namespace gpulet::daemon
