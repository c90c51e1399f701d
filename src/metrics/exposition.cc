#include "metrics/exposition.h"

#include <functional>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/build_info.h"
#include "gpu/nvml_api.h"
#include "gpu/sample_values.h"
#include "metrics/family.h"
#include "metrics/slice_metrics.h"

namespace gpulet::metrics {
namespace {

struct ThrottleReason {
  unsigned long long bit;
  const char* name;
};
constexpr ThrottleReason kThrottleReasons[] = {
    {nvmlClocksEventReasonGpuIdle, "gpu_idle"},
    {nvmlClocksEventReasonApplicationsClocksSetting, "applications_clocks_setting"},
    {nvmlClocksEventReasonSwPowerCap, "sw_power_cap"},
    {nvmlClocksEventReasonHwSlowdown, "hw_slowdown"},
    {nvmlClocksEventReasonSyncBoost, "sync_boost"},
    {nvmlClocksEventReasonSwThermalSlowdown, "sw_thermal_slowdown"},
    {nvmlClocksEventReasonHwThermalSlowdown, "hw_thermal_slowdown"},
    {nvmlClocksEventReasonHwPowerBrakeSlowdown, "hw_power_brake_slowdown"},
    {nvmlClocksEventReasonDisplayClockSetting, "display_clock_setting"},
};

// The `remote` label of gpulet_nvlink_up: what NVML says is at the link's other end.
const char* NvLinkRemoteName(std::optional<int> type) {
  if (!type) return "unknown";
  switch (*type) {
    case NVML_NVLINK_DEVICE_TYPE_GPU:
      return "gpu";
    case NVML_NVLINK_DEVICE_TYPE_SWITCH:
      return "nvswitch";
    case NVML_NVLINK_DEVICE_TYPE_IBMNPU:
      return "ibmnpu";
    default:
      return "unknown";
  }
}

ValueFormat FormatOf(gpu::DcgmType type) {
  switch (type) {
    case gpu::DcgmType::kInt64:
      return ValueFormat::kDcgmInt64;
    case gpu::DcgmType::kDouble:
      return ValueFormat::kDcgmDouble;
    case gpu::DcgmType::kNone:
      break;
  }
  return ValueFormat::kGpulet;
}

}  // namespace

std::string EscapeLabel(absl::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string PodLabels(const PodContainer& who) {
  return absl::StrCat(",pod=\"", EscapeLabel(who.pod), "\",namespace=\"",
                      EscapeLabel(who.namespace_name), "\",container=\"",
                      EscapeLabel(who.container), "\"");
}

std::optional<PodContainer> ProcessPod(const SampleSet& samples, const std::string& gpu_uuid,
                                       const GpuSampleState::Process& process) {
  if (samples.pods == nullptr || !process.cgroup) return std::nullopt;
  return AttributeProcess(*samples.pods, gpu_uuid, *process.cgroup);
}

std::string RenderMetrics(const state::Snapshot& snap, const SampleSet& samples,
                          const RenderInfo& info, bool openmetrics, absl::Time now) {
  // One family per row of the value table (gpu/sample_values.h) that has one, in the table's
  // order: dcgm-exporter's default fields in its default order first. Rows without a family
  // of their own keep an unnamed one that stays empty.
  std::vector<Family> values;
  values.reserve(gpu::kValueCount);
  for (const gpu::SampleValue& row : gpu::SampleValues()) {
    values.emplace_back(row.metric != nullptr ? row.metric : "", row.type, row.help,
                        FormatOf(row.dcgm_type));
  }
  auto value_family = [&values](gpu::ValueId id) -> Family& {
    return values[static_cast<size_t>(id)];
  };
  // gpulet's own.
  Family up("gpulet_gpu_up", "gauge",
            "1 when the GPU answered its latest NVML sample, 0 when it stopped answering.");
  Family age("gpulet_gpu_sample_age_seconds", "gauge",
             "Seconds since the GPU's values were last read successfully.");
  Family health("gpulet_gpu_health_state", "gauge",
                "1 for the GPU's current health state (Healthy, Degraded, Unhealthy), 0 for "
                "the others.");
  Family health_info("gpulet_gpu_health_info", "gauge",
                     "Always 1; labels carry the health reason and the suggested action.");
  Family xid_total("gpulet_gpu_xid_errors_total", "counter",
                   "XID errors seen on the GPU since gpulet started, by XID code.");
  Family throttle("gpulet_gpu_throttle_reason", "gauge",
                  "1 when the clock-event (throttle) reason is active.");
  Family mem_total("gpulet_gpu_memory_total_bytes", "gauge", "GPU memory size.");
  Family proc_mem("gpulet_gpu_process_memory_bytes", "gauge", "GPU memory used by a process.");
  Family allocation("gpulet_gpu_allocation_info", "gauge",
                    "Always 1; one series per advertised device of the GPU that the kubelet "
                    "allocated to a container (from the PodResources API).");
  Family mig_info("gpulet_mig_device_info", "gauge",
                  "Always 1; one series per MIG device of the GPU, labelled with its profile "
                  "(GPU_I_PROFILE), GPU instance (GPU_I_ID), compute instance and MIG UUID.");
  Family mig_mem_total("gpulet_mig_device_memory_total_bytes", "gauge",
                       "Memory of the MIG device (its GPU instance's share).");
  Family mig_healthy("gpulet_mig_device_healthy", "gauge",
                     "1 when the MIG device can take work: neither its GPU nor an XID naming "
                     "its GPU instance took it out.");
  Family pods_up("gpulet_pod_resources_up", "gauge",
                 "1 when the latest kubelet PodResources List succeeded.");
  Family sampler_seconds("gpulet_sampler_duration_seconds", "gauge",
                         "Duration of the latest NVML sampling round.");
  Family nvml_errors("gpulet_nvml_errors_total", "counter",
                     "NVML sampling calls that failed or timed out.");
  Family nvml_up("gpulet_nvml_up", "gauge", "1 when NVML is loaded and usable.");
  Family build("gpulet_build_info", "gauge", "Always 1; labels carry gpulet's version.");
  Family link_up("gpulet_nvlink_up", "gauge",
                 "1 when the NVLink is active, 0 when it is down; `remote` is the device at its "
                 "other end.");
  Family link_errors("gpulet_nvlink_errors_total", "counter",
                     "NVLink data-link errors on all the GPU's links since the driver loaded, "
                     "by type (crc_flit, crc_data, replay, recovery).");
  Family per_link_errors("gpulet_nvlink_link_errors_total", "counter",
                         "NVLink data-link errors on one link since the driver loaded, by "
                         "type; present only for a link whose count is above zero.");
  Family link_bytes("gpulet_nvlink_data_bytes_total", "counter",
                    "NVLink data payload sent (tx) or received (rx) over all links since the "
                    "driver loaded.");
  Family reload_errors("gpulet_config_reload_errors_total", "counter",
                       "Configuration reloads (SIGHUP) refused since gpulet started: an invalid "
                       "or unreadable file, or a change that cannot apply now. The running "
                       "configuration was kept.");
  Family vram_kills("gpulet_vram_over_quota_kills_total", "counter",
                    "Processes gpulet killed because their VRAM slice holder stayed over its "
                    "quota, by the driver's count, by more than the margin "
                    "(sharing.memorySlices.overQuota.action kill).");
  Family evictions("gpulet_gpu_pod_evictions_total", "counter",
                   "The eviction rung's tries to evict a pod holding a GPU that stayed out of "
                   "service (health.evict), by result: evicted, gone (the pod had ended or "
                   "been replaced), blocked (a PodDisruptionBudget), forbidden (RBAC), failed, "
                   "and dry_run (a pod health.evict.mode dry-run would have evicted).");
  Family resets("gpulet_gpu_resets_total", "counter",
                "The reset rung's resets of GPUs out of service for a fault a reset clears "
                "(health.reset), by result: reset, failed, and dry_run (a GPU health.reset.mode "
                "dry-run would have reset).");
  Family reboots("gpulet_node_reboots_total", "counter",
                 "The reboot rung's requests for a reboot of the node, for a GPU fault only a "
                 "reboot clears (health.reboot), by result: asked (kured has it), failed, and "
                 "dry_run (health.reboot.mode dry-run would have asked).");

  for (const state::DeviceRecord& d : snap.devices) {
    const gpu::Gpu& g = d.gpu;
    std::string index = g.index ? absl::StrCat(*g.index) : "";
    std::string nvml_bus =
        g.bus_id.empty() ? "" : absl::StrFormat("0000%s", absl::AsciiStrToUpper(g.bus_id));
    // DCGM series keep dcgm-exporter's label names (UUID, modelName, Hostname, ...) so
    // dashboards and alerts keep working; gpulet's own series use snake_case names.
    std::string dcgm =
        absl::StrCat("gpu=\"", index, "\",UUID=\"", EscapeLabel(g.uuid), "\",pci_bus_id=\"",
                     nvml_bus, "\",device=\"nvidia", index, "\",modelName=\"", EscapeLabel(g.name),
                     "\",Hostname=\"", EscapeLabel(info.hostname), "\",DCGM_FI_DRIVER_VERSION=\"",
                     EscapeLabel(info.driver_version), "\"");
    std::string labels =
        absl::StrCat("gpu=\"", index, "\",uuid=\"", EscapeLabel(g.uuid), "\",pci_bus_id=\"",
                     nvml_bus, "\",device=\"nvidia", index, "\",model_name=\"", EscapeLabel(g.name),
                     "\",hostname=\"", EscapeLabel(info.hostname), "\"");

    // A GPU held by pods carries their pod/namespace/container labels on its DCGM series,
    // as dcgm-exporter's Kubernetes mode does: one series per holder of a shared GPU.
    // A MIG device's holders label that device's series instead (below).
    std::vector<std::string> holders;
    std::map<std::string, std::vector<std::string>> mig_holders;  // MIG UUID → pod labels
    if (samples.pods != nullptr) {
      auto held = samples.pods->by_gpu.find(g.uuid);
      if (held != samples.pods->by_gpu.end()) {
        std::set<std::pair<std::string, PodContainer>> seen;
        for (const GpuAssignment& a : held->second) {
          std::string who = PodLabels(a.holder);
          allocation.Add(absl::StrCat(labels, ",resource=\"", EscapeLabel(a.resource),
                                      "\",device_id=\"", EscapeLabel(a.device_id), "\"", who),
                         1);
          if (!seen.insert({a.mig_uuid, a.holder}).second) continue;
          if (a.mig_uuid.empty()) {
            holders.push_back(std::move(who));
          } else {
            mig_holders[a.mig_uuid].push_back(std::move(who));
          }
        }
      }
    }
    if (holders.empty()) holders.push_back("");
    auto add_dcgm = [&](Family& f, double value) {
      for (const std::string& who : holders) f.Add(dcgm + who, value);
    };

    for (state::HealthState st : {state::HealthState::kHealthy, state::HealthState::kDegraded,
                                  state::HealthState::kUnhealthy}) {
      health.Add(absl::StrCat(labels, ",state=\"", state::HealthStateName(st), "\""),
                 d.health.state == st ? 1 : 0);
    }
    health_info.Add(absl::StrCat(labels, ",state=\"", state::HealthStateName(d.health.state),
                                 "\",reason=\"", EscapeLabel(d.health.reason), "\",action=\"",
                                 EscapeLabel(d.health.action), "\""),
                    1);
    // dcgm-exporter labels DCGM_FI_DEV_XID_ERRORS with the code as `err_code` and its
    // description as `err_msg` ("No Error" for 0; internal/pkg/collector/gpu_collector.go,
    // toMetric). The description is the XID catalogue's, carried in the store by health/.
    {
      std::string msg = d.health.last_xid == 0              ? "No Error"
                        : d.health.last_xid_message.empty() ? "Unknown Error"
                                                            : d.health.last_xid_message;
      std::string attrs =
          absl::StrCat(",err_code=\"", d.health.last_xid, "\",err_msg=\"", EscapeLabel(msg), "\"");
      for (const std::string& who : holders) {
        value_family(gpu::ValueId::kXid).Add(dcgm + who + attrs, d.health.last_xid);
      }
    }
    for (const auto& [code, count] : d.health.xid_counts) {
      xid_total.Add(absl::StrCat(labels, ",xid=\"", code, "\""), static_cast<double>(count));
    }
    if (g.memory_total_bytes) mem_total.Add(labels, static_cast<double>(*g.memory_total_bytes));
    // MIG devices: dcgm-exporter's GPU_I_PROFILE and GPU_I_ID labels on the parent GPU's
    // DCGM labels, then the device's pods.
    std::map<unsigned, std::string> mig_dcgm;  // GPU instance id → DCGM labels
    for (const gpu::MigDeviceInfo& m : g.mig_devices) {
      std::string inst = absl::StrCat(",GPU_I_PROFILE=\"", EscapeLabel(m.profile), "\",GPU_I_ID=\"",
                                      m.gpu_instance_id, "\"");
      mig_dcgm.emplace(m.gpu_instance_id, dcgm + inst);
      std::string mig_labels = absl::StrCat(labels, inst, ",mig_uuid=\"", EscapeLabel(m.uuid),
                                            "\",compute_instance=\"", m.compute_instance_id, "\"");
      mig_info.Add(absl::StrCat(mig_labels, ",sm_count=\"", m.sm_count, "\""), 1);
      mig_mem_total.Add(mig_labels, static_cast<double>(m.memory_bytes));
      mig_healthy.Add(mig_labels, d.MigHealthy(m.gpu_instance_id) ? 1 : 0);
    }
    auto add_mig_dcgm = [&](Family& f, const gpu::MigInstanceSample& ms, double value) {
      auto base = mig_dcgm.find(ms.gpu_instance_id);
      if (base == mig_dcgm.end()) return;  // an instance the store does not know yet
      const gpu::MigDeviceInfo* m = g.FindMigInstance(ms.gpu_instance_id, ms.compute_instance_id);
      auto who = m == nullptr ? mig_holders.end() : mig_holders.find(m->uuid);
      if (who == mig_holders.end()) {
        f.Add(base->second, value);
        return;
      }
      for (const std::string& w : who->second) f.Add(base->second + w, value);
    };

    auto it = samples.by_uuid.find(g.uuid);
    const GpuSampleState* st = it == samples.by_uuid.end() ? nullptr : &it->second;
    up.Add(labels, st != nullptr && st->answering ? 1 : 0);
    if (st == nullptr || !st->last) continue;
    age.Add(labels, absl::ToDoubleSeconds(now - st->last->taken));
    // A GPU that stopped answering exports no frozen values.
    if (!st->answering) continue;
    const gpu::DeviceSample& s = *st->last;
    for (const gpu::SampleValue& row : gpu::SampleValues()) {
      if (row.metric == nullptr) continue;
      std::optional<double> v = gpu::ReadValue(row, s);
      if (!v) continue;
      // DCGM's fields keep dcgm-exporter's labels and pod holders; gpulet's own, its own.
      if (row.dcgm_field != 0) {
        add_dcgm(value_family(row.id), gpu::ExportedValue(row, *v));
      } else {
        value_family(row.id).Add(labels, gpu::ExportedValue(row, *v));
      }
    }
    if (s.clocks_event_reasons) {
      for (const ThrottleReason& r : kThrottleReasons) {
        throttle.Add(absl::StrCat(labels, ",reason=\"", r.name, "\""),
                     (*s.clocks_event_reasons & r.bit) ? 1 : 0);
      }
    }
    // Per MIG device, the rows NVML reports per device (memory, and GPM's activity ratios
    // per GPU instance); the GPU's PCIe and NVLink rates stay the GPU's.
    for (const gpu::MigInstanceSample& ms : s.mig) {
      for (const gpu::SampleValue& row : gpu::SampleValues()) {
        std::optional<double> v = gpu::ReadMigValue(row, ms);
        if (v && row.metric != nullptr) {
          add_mig_dcgm(value_family(row.id), ms, gpu::ExportedValue(row, *v));
        }
      }
    }
    for (auto [direction, kib] :
         {std::pair{"tx", s.nvlink_data_tx_kib}, {"rx", s.nvlink_data_rx_kib}}) {
      if (kib) {
        link_bytes.Add(absl::StrCat(labels, ",direction=\"", direction, "\""),
                       static_cast<double>(*kib) * 1024);
      }
    }
    // Per GPU and type, the sum over its links (always present once NVML reports the
    // counter, so rate() sees the first error); per link only where errors were counted: 18
    // links times 4 types of zeros would triple a DGX node's exposition.
    std::map<std::string, uint64_t> totals;
    for (const gpu::NvLinkSample& l : s.nvlinks) {
      std::string link = absl::StrCat(labels, ",link=\"", l.link, "\"");
      link_up.Add(absl::StrCat(link, ",remote=\"", NvLinkRemoteName(l.remote_type), "\""),
                  l.active ? 1 : 0);
      for (auto [type, count] : {std::pair{"crc_flit", l.crc_flit_errors},
                                 {"crc_data", l.crc_data_errors},
                                 {"replay", l.replay_errors},
                                 {"recovery", l.recovery_errors}}) {
        if (!count) continue;
        totals[type] += *count;
        if (*count > 0) {
          per_link_errors.Add(absl::StrCat(link, ",type=\"", type, "\""),
                              static_cast<double>(*count));
        }
      }
    }
    for (const auto& [type, total] : totals) {
      link_errors.Add(absl::StrCat(labels, ",type=\"", type, "\""), static_cast<double>(total));
    }
    for (const gpu::GpuProcess& p : s.processes) {
      if (!p.used_bytes) continue;
      auto proc = st->processes.find(p.pid);
      std::string name, who;
      if (proc != st->processes.end()) {
        name = proc->second.name;
        std::optional<PodContainer> pod = ProcessPod(samples, g.uuid, proc->second);
        if (pod) who = PodLabels(*pod);
      }
      std::string inst;
      if (p.gpu_instance_id) {
        const gpu::MigDeviceInfo* m = g.FindMigInstance(*p.gpu_instance_id, p.compute_instance_id);
        inst = absl::StrCat(",GPU_I_ID=\"", *p.gpu_instance_id, "\",GPU_I_PROFILE=\"",
                            m == nullptr ? "" : EscapeLabel(m->profile), "\"");
      }
      proc_mem.Add(absl::StrCat(labels, ",pid=\"", p.pid, "\",process=\"", EscapeLabel(name), "\"",
                                inst, who),
                   static_cast<double>(*p.used_bytes));
    }
  }
  sampler_seconds.Add("", samples.last_round_seconds);
  nvml_errors.Add("", static_cast<double>(samples.nvml_errors));
  nvml_up.Add("", snap.nvml_ok ? 1 : 0);
  if (samples.pods != nullptr) pods_up.Add("", samples.pods->ok ? 1 : 0);
  build.Add(absl::StrCat("version=\"", GPULET_VERSION, "\",revision=\"", GitRevision(), "\""), 1);
  if (info.reload_errors != nullptr) {
    reload_errors.Add("", static_cast<double>(info.reload_errors->load()));
  }
  if (info.vram_kills != nullptr) vram_kills.Add("", static_cast<double>(info.vram_kills->load()));
  // The remediation rungs' counts by result.
  for (auto [counts, family] :
       {std::pair{&info.evictions, &evictions}, std::pair{&info.resets, &resets},
        std::pair{&info.reboots, &reboots}}) {
    if (!*counts) continue;
    for (const auto& [result, n] : (*counts)()) {
      family->Add(absl::StrCat("result=\"", result, "\""), static_cast<double>(n));
    }
  }

  std::string out;
  out.reserve(16384);
  for (const Family& f : values) f.AppendTo(&out, openmetrics);
  for (const Family* f : {&up,
                          &age,
                          &health,
                          &health_info,
                          &xid_total,
                          &throttle,
                          &mem_total,
                          &proc_mem,
                          &allocation,
                          &mig_info,
                          &mig_mem_total,
                          &mig_healthy,
                          &link_up,
                          &link_errors,
                          &per_link_errors,
                          &link_bytes,
                          &pods_up,
                          &sampler_seconds,
                          &nvml_errors,
                          &nvml_up,
                          &build,
                          &reload_errors,
                          &vram_kills,
                          &evictions,
                          &resets,
                          &reboots}) {
    f->AppendTo(&out, openmetrics);
  }
  AppendSliceMetrics(samples.slices, snap, samples.pods.get(), info.hostname, openmetrics, &out);
  AppendVramEnforcement(samples.vram_holders, snap, info.hostname, openmetrics, &out);
  if (openmetrics) out += "# EOF\n";
  return out;
}

}  // namespace gpulet::metrics
