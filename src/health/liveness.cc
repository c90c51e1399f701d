#include "health/liveness.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "gpu/nvml_api.h"
#include "gpu/nvml_errors.h"
#include "health/xid_catalog.h"

namespace gpulet::health {
namespace {

constexpr char kLivenessSource[] = "liveness";
constexpr char kRowRemapSource[] = "row-remap";
constexpr char kRecoveryActionSource[] = "recovery-action";
constexpr absl::Duration kFlapWindow = absl::Hours(1);

state::HealthCondition ConditionFor(const absl::Status& s, const std::string& gpu) {
  int code = gpu::NvmlCodeOf(s);
  if (code == NVML_ERROR_GPU_IS_LOST) {
    return {state::HealthState::kUnhealthy,
            absl::StrCat("GPU ", gpu, " has fallen off the bus (NVML GPU_IS_LOST)"),
            "drain the node and reboot it; if it repeats, inspect the card, its power and slot",
            absl::InfinitePast(), /*reboot_required=*/true};
  }
  if (code == NVML_ERROR_RESET_REQUIRED) {
    return {state::HealthState::kUnhealthy,
            absl::StrCat("GPU ", gpu, " requires a reset"),
            "stop its workloads and reset it (nvidia-smi -r) or reboot the node",
            absl::InfinitePast(),
            /*reboot_required=*/false,
            /*reset_clears=*/true};
  }
  if (absl::IsDeadlineExceeded(s)) {
    return {state::HealthState::kUnhealthy,
            absl::StrCat("GPU ", gpu, " is not answering: ", s.message()),
            "check the kernel log for XIDs (gpulet doctor); reset the GPU or reboot the node",
            absl::InfinitePast()};
  }
  return {state::HealthState::kUnhealthy,
          absl::StrCat("GPU ", gpu, " failed its liveness probe: ", s.message()),
          "run `gpulet doctor`; reset the GPU or reboot the node if it persists",
          absl::InfinitePast()};
}

}  // namespace

LivenessMonitor::LivenessMonitor(gpu::GpuLibrary* library, state::DeviceStore* store,
                                 Options options)
    : library_(library), store_(store), options_(options) {}

LivenessMonitor::~LivenessMonitor() { Stop(); }

void LivenessMonitor::Start() {
  if (worker_) return;
  worker_ = std::make_unique<PeriodicWorker>(
      PeriodicWorker::Options{
          .name = "gpulet-liveness", .interval = options_.interval, .clock = options_.clock},
      [this] { ProbeOnce(); });
  worker_->Start();
}

void LivenessMonitor::Stop() {
  if (worker_) worker_->Stop();
}

// Row remapping (HBM GPUs): a failed remap means memory the GPU can no longer repair, so
// the GPU goes out; a pending one is applied by the next GPU reset, so the GPU stays in,
// Degraded, until then. Each clears as soon as the GPU stops reporting it.
void LivenessMonitor::CheckRowRemapping(const gpu::Gpu& gpu, const gpu::ProbeAnswer& answer,
                                        absl::Time now) {
  std::optional<state::HealthCondition> c;
  if (answer.remap_failure.value_or(false)) {
    c = state::HealthCondition{
        state::HealthState::kUnhealthy,
        absl::StrCat("row remapping failed on GPU ", gpu.bus_id,
                     ": uncorrectable memory errors could not be remapped"),
        "drain the node and have the GPU serviced or replaced (RMA); `gpulet "
        "explain xid 64` has the details",
        absl::InfinitePast()};
  } else if (answer.remap_pending.value_or(false)) {
    c = state::HealthCondition{
        state::HealthState::kDegraded,
        absl::StrCat("row remapping pending on GPU ", gpu.bus_id,
                     ": a remapped memory row takes effect at the next GPU reset"),
        "drain the GPU's pods, then reset the GPU (nvidia-smi -r) or reboot", absl::InfinitePast()};
  }
  Publish(gpu, kRowRemapSource, c, now);
}

// The driver's own verdict (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, R570 and later): what it
// says the GPU needs now, whichever error caused it. The condition follows the field: it
// clears when the driver says NONE again (after the reset or reboot).
void LivenessMonitor::CheckRecoveryAction(const gpu::Gpu& gpu, const gpu::ProbeAnswer& answer,
                                          absl::Time now) {
  std::optional<state::HealthCondition> c;
  const unsigned action = answer.recovery_action.value_or(NVML_GPU_RECOVERY_ACTION_NONE);
  auto condition = [&](state::HealthState state, absl::string_view what, GpuAction todo) {
    c = state::HealthCondition{state,
                               absl::StrCat("the driver reports recovery action ", action, " (",
                                            what, ") for GPU ", gpu.bus_id),
                               std::string(GpuActionDescription(todo)),
                               absl::InfinitePast(),
                               todo == GpuAction::kRebootNode,
                               todo == GpuAction::kResetGpu};
  };
  switch (action) {
    case NVML_GPU_RECOVERY_ACTION_NONE:
      break;
    case NVML_GPU_RECOVERY_ACTION_GPU_RESET:
      condition(state::HealthState::kUnhealthy, "GPU reset required", GpuAction::kResetGpu);
      break;
    case NVML_GPU_RECOVERY_ACTION_NODE_REBOOT:
      condition(state::HealthState::kUnhealthy, "node reboot required", GpuAction::kRebootNode);
      break;
    case NVML_GPU_RECOVERY_ACTION_DRAIN_P2P:
      // Not yet a verdict: the driver decides once peer-to-peer traffic has stopped.
      c = state::HealthCondition{
          state::HealthState::kDegraded,
          absl::StrCat("the driver reports recovery action 3 (drain peer-to-peer "
                       "traffic) for GPU ",
                       gpu.bus_id),
          "stop the GPU's peer-to-peer (NVLink, P2P) workloads; the driver then "
          "reports the recovery it needs",
          absl::InfinitePast()};
      break;
    case NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET:
      // The GPU runs at reduced capacity until reset: keep it, tell the operator.
      condition(state::HealthState::kDegraded, "drain and reset: reduced capacity until a reset",
                GpuAction::kResetGpu);
      break;
    default:
      condition(state::HealthState::kUnhealthy, "a value this gpulet does not know",
                GpuAction::kContactSupport);
      break;
  }
  Publish(gpu, kRecoveryActionSource, c, now);
}

void LivenessMonitor::Publish(const gpu::Gpu& gpu, const char* source,
                              const std::optional<state::HealthCondition>& c, absl::Time now) {
  // Publish only changes: this runs every probe interval for every GPU.
  std::shared_ptr<const state::Snapshot> snap = store_->Get();
  const state::DeviceRecord* rec = snap->FindByUuid(gpu.uuid);
  if (rec == nullptr) return;
  auto known = rec->health.conditions.find(source);
  bool has = known != rec->health.conditions.end();
  if (!c && !has) return;
  if (c && has && known->second.severity == c->severity && known->second.reason == c->reason) {
    return;
  }
  if (c) GPULET_LOG_WARN("GPU {}: {}", gpu.bus_id, c->reason);
  store_->UpdateHealth(gpu.uuid, [&](state::GpuHealth& h) {
    if (c) {
      h.Raise(source, *c, now);
    } else {
      h.Clear(source, now);
    }
  });
}

void LivenessMonitor::ProbeOnce() {
  const absl::Time now = options_.clock->Now();       // for the conditions' "since"
  const MonoTime mono = options_.clock->Monotonic();  // for the quiet period and flap window
  std::shared_ptr<const state::Snapshot> snap = store_->Get();
  for (const state::DeviceRecord& d : snap->devices) {
    if (!d.gpu.in_nvml || !d.gpu.index) continue;
    const std::string& uuid = d.gpu.uuid;
    Track& t = tracks_[uuid];
    absl::StatusOr<gpu::ProbeAnswer> answer = library_->Probe(*d.gpu.index, options_.probe_timeout);
    bool ok = answer.ok() && answer->uuid == uuid;
    if (answer.ok() && !ok) {
      answer = absl::FailedPreconditionError(absl::StrCat(
          "index ", *d.gpu.index, " now belongs to ", answer->uuid, " (GPUs were renumbered)"));
    }
    if (ok) {
      CheckRowRemapping(d.gpu, *answer, now);
      CheckRecoveryAction(d.gpu, *answer, now);
    }
    if (!ok) {
      t.last_failure = mono;
      if (!t.failing) {
        t.failing = true;
        // The flap limit counts transitions into failure within the last hour, judged when
        // each one happens (so three failures inside an hour are caught however long the
        // last one lasts).
        t.failures.erase(std::remove_if(t.failures.begin(), t.failures.end(),
                                        [mono](MonoTime f) { return mono - f > kFlapWindow; }),
                         t.failures.end());
        t.failures.push_back(mono);
        if (static_cast<int>(t.failures.size()) >= kMaxFailures) t.kept_out = true;
        GPULET_LOG_WARN("GPU {} ({}) failed its liveness probe: {}", *d.gpu.index, uuid,
                        answer.status().message());
      }
      state::HealthCondition c = ConditionFor(answer.status(), d.gpu.bus_id);
      store_->UpdateHealth(uuid, [&](state::GpuHealth& h) { h.Raise(kLivenessSource, c, now); });
      continue;
    }
    if (!t.failing) continue;
    // Answering again, but it flapped: it stays out until gpulet restarts.
    if (t.kept_out) {
      auto known = d.health.conditions.find(kLivenessSource);
      if (known != d.health.conditions.end() &&
          absl::StrContains(known->second.reason, "kept out of scheduling")) {
        continue;  // already says so; publish only changes
      }
      store_->UpdateHealth(uuid, [&](state::GpuHealth& h) {
        h.Raise(kLivenessSource,
                {state::HealthState::kUnhealthy,
                 absl::StrCat("GPU ", d.gpu.bus_id, " failed ", t.failures.size(),
                              " times in the last hour; kept out of scheduling"),
                 "inspect the card (power, seating, temperature) and reboot the node; restart "
                 "gpulet to try it again",
                 absl::InfinitePast()},
                now);
      });
      continue;
    }
    if (mono - t.last_failure >= options_.quiet_period) {
      t.failing = false;
      GPULET_LOG_INFO("GPU {} ({}) answers again: back to scheduling", *d.gpu.index, uuid);
      store_->UpdateHealth(uuid, [&](state::GpuHealth& h) { h.Clear(kLivenessSource, now); });
    }
  }
}

}  // namespace gpulet::health
