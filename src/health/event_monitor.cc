#include "health/event_monitor.h"

#include <variant>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "gpu/nvml_api.h"
#include "health/xid.h"

namespace gpulet::health {

EventMonitor::EventMonitor(gpu::GpuLibrary* library, unsigned gpu_count,
                           std::unique_ptr<KernelLogSource> kmsg, XidPolicy* policy,
                           Options options)
    : library_(library),
      gpu_count_(gpu_count),
      kmsg_(std::move(kmsg)),
      policy_(policy),
      options_(options) {}

EventMonitor::EventMonitor(gpu::GpuLibrary* library, unsigned gpu_count,
                           std::unique_ptr<KernelLogSource> kmsg, XidPolicy* policy)
    : EventMonitor(library, gpu_count, std::move(kmsg), policy, Options()) {}

EventMonitor::~EventMonitor() { Stop(); }

void EventMonitor::Start() {
  if (tick_) return;
  tick_ = std::make_unique<PeriodicWorker>(
      PeriodicWorker::Options{
          .name = "gpulet-xid-tick", .interval = options_.tick_interval, .clock = options_.clock},
      [this] { policy_->Tick(options_.clock->Now()); });
  tick_->Start();
  if (library_ != nullptr)
    nvml_thread_ = StartNamedThread("gpulet-nvml-evt", [this] { NvmlLoop(); });
  if (kmsg_ != nullptr) kmsg_thread_ = StartNamedThread("gpulet-kmsg", [this] { KmsgLoop(); });
}

void EventMonitor::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (kmsg_ != nullptr) kmsg_->Interrupt();
  if (tick_) tick_->Stop();
  if (kmsg_thread_.joinable()) kmsg_thread_.join();
  if (nvml_thread_.joinable()) nvml_thread_.join();  // at most one event_wait
}

bool EventMonitor::stopping() const {
  absl::MutexLock lock(&mu_);
  return stop_;
}

bool EventMonitor::Pause(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  return !options_.clock->AwaitWithTimeout(&mu_, absl::Condition(&stop_), d);
}

void EventMonitor::NvmlLoop() {
  absl::Status reg = library_->RegisterEvents(gpu_count_);
  if (!reg.ok()) GPULET_LOG_WARN("{}", reg.message());
  while (!stopping()) {
    absl::StatusOr<std::optional<gpu::GpuEvent>> ev = library_->WaitEvent(options_.event_wait);
    if (!ev.ok()) {
      // A lost GPU makes the wait fail at once; liveness reports the GPU, so just back off.
      if (!Pause(options_.error_backoff)) return;
      continue;
    }
    if (!ev->has_value()) continue;
    const gpu::GpuEvent& e = **ev;
    if (e.type & nvmlEventTypeXidCriticalError) {
      GPULET_LOG_WARN("NVML event: XID {} on GPU {}", e.data, e.index);
      policy_->OnXid(absl::StrCat("index:", e.index), static_cast<int>(e.data), "", "nvml",
                     options_.clock->Now(), e.gpu_instance_id);
    } else if (e.type & nvmlEventTypeDoubleBitEccError) {
      // An uncorrectable ECC error is reported by the driver as XID 48 as well.
      policy_->OnXid(absl::StrCat("index:", e.index), 48, "double-bit ECC error event", "nvml",
                     options_.clock->Now());
    }
  }
}

void EventMonitor::KmsgLoop() {
  absl::Status s = kmsg_->Open();
  if (!s.ok()) {
    // Nothing to watch; the policy's ticks run on their own worker.
    GPULET_LOG_WARN("kernel log not watched: {}", s.message());
    return;
  }
  KernelLogScanner scanner;
  while (!stopping()) {
    // No timeout: a record or Stop's Interrupt() ends the wait.
    absl::StatusOr<std::optional<KmsgRecord>> rec = kmsg_->Read(absl::InfiniteDuration());
    if (!rec.ok()) {
      GPULET_LOG_WARN("kernel log: {}", rec.status().message());
      if (!Pause(options_.error_backoff)) return;
      continue;
    }
    if (!rec->has_value() || !(*rec)->from_kernel()) continue;
    for (const KernelLogFinding& f : scanner.Scan((*rec)->text)) {
      if (const XidEvent* x = std::get_if<XidEvent>(&f)) {
        GPULET_LOG_WARN("kernel log: XID {} on {}", x->xid, x->bus_id);
        std::optional<unsigned> instance;
        if (x->gpu_instance && *x->gpu_instance >= 0) {
          instance = static_cast<unsigned>(*x->gpu_instance);
        }
        policy_->OnXid(x->bus_id, x->xid, x->message, "kmsg", options_.clock->Now(), instance);
      }
    }
  }
}

}  // namespace gpulet::health
