#include "health/event_monitor.h"

#include <chrono>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "gpu/nvml_api.h"
#include "health/xid.h"

namespace gpulet {

EventMonitor::EventMonitor(GpuLibrary* library, unsigned gpu_count,
                           std::unique_ptr<KernelLogSource> kmsg, XidPolicy* policy)
    : library_(library), gpu_count_(gpu_count), kmsg_(std::move(kmsg)), policy_(policy) {}

EventMonitor::~EventMonitor() { Stop(); }

void EventMonitor::Start() {
  if (library_ != nullptr) nvml_thread_ = std::thread([this] { NvmlLoop(); });
  kmsg_thread_ = std::thread([this] { KmsgLoop(); });
}

void EventMonitor::Stop() {
  stop_.store(true);
  if (nvml_thread_.joinable()) nvml_thread_.join();
  if (kmsg_thread_.joinable()) kmsg_thread_.join();
}

void EventMonitor::NvmlLoop() {
  absl::Status reg = library_->RegisterEvents(gpu_count_);
  if (!reg.ok()) GPULET_LOG_WARN("{}", reg.message());
  while (!stop_.load()) {
    absl::StatusOr<std::optional<GpuEvent>> ev = library_->WaitEvent(absl::Milliseconds(200));
    if (!ev.ok()) {
      // A lost GPU makes the wait fail at once; liveness reports the GPU, so just back off.
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      continue;
    }
    if (!ev->has_value()) continue;
    const GpuEvent& e = **ev;
    if (e.type & nvmlEventTypeXidCriticalError) {
      GPULET_LOG_WARN("NVML event: XID {} on GPU {}", e.data, e.index);
      policy_->OnXid(absl::StrCat("index:", e.index), static_cast<int>(e.data), "", "nvml",
                     absl::Now());
    } else if (e.type & nvmlEventTypeDoubleBitEccError) {
      // An uncorrectable ECC error is reported by the driver as XID 48 as well.
      policy_->OnXid(absl::StrCat("index:", e.index), 48, "double-bit ECC error event", "nvml",
                     absl::Now());
    }
  }
}

void EventMonitor::KmsgLoop() {
  bool open = false;
  if (kmsg_) {
    absl::Status s = kmsg_->Open();
    if (!s.ok()) {
      GPULET_LOG_WARN("kernel log not watched: {}", s.message());
    } else {
      open = true;
    }
  }
  KernelLogScanner scanner;
  while (!stop_.load()) {
    policy_->Tick(absl::Now());
    if (!open) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      continue;
    }
    absl::StatusOr<std::optional<KmsgRecord>> rec = kmsg_->Read(absl::Milliseconds(200));
    if (!rec.ok()) {
      GPULET_LOG_WARN("kernel log: {}", rec.status().message());
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      continue;
    }
    if (!rec->has_value() || !(*rec)->from_kernel()) continue;
    for (const KernelLogFinding& f : scanner.Scan((*rec)->text)) {
      if (const XidEvent* x = std::get_if<XidEvent>(&f)) {
        GPULET_LOG_WARN("kernel log: XID {} on {}", x->xid, x->bus_id);
        policy_->OnXid(x->bus_id, x->xid, x->message, "kmsg", absl::Now());
      }
    }
  }
}

}  // namespace gpulet
