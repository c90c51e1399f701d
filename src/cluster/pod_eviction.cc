#include "cluster/pod_eviction.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "nlohmann/json.hpp"

namespace gpulet::cluster {

const char* EvictionResultName(EvictionResult result) {
  switch (result) {
    case EvictionResult::kEvicted:
      return "evicted";
    case EvictionResult::kGone:
      return "gone";
    case EvictionResult::kBlocked:
      return "blocked";
    case EvictionResult::kForbidden:
      return "forbidden";
    case EvictionResult::kFailed:
      return "failed";
  }
  return "failed";
}

EvictionResult ClassifyEviction(const absl::Status& status) {
  if (status.ok()) return EvictionResult::kEvicted;
  const std::optional<kube::ApiStatus> api = kube::GetApiStatus(status);
  if (!api) return EvictionResult::kFailed;  // no answer: the server was not reached
  switch (api->code) {
    case 404:  // the pod is gone already
    case 409:  // the UID precondition failed: the name now holds another pod
      return EvictionResult::kGone;
    case 429:  // a PodDisruptionBudget allows no disruption now
      return EvictionResult::kBlocked;
    case 403:
      return EvictionResult::kForbidden;
    default:
      return EvictionResult::kFailed;
  }
}

void EvictionQueue::Add(EvictionOrder order) {
  absl::MutexLock lock(&mu_);
  const std::string key = Key(order.pod);
  if (auto it = entries_.find(key); it != entries_.end() && !it->second.dry_run) return;
  GPULET_LOG_WARN("evicting pod {} (GPU {} is out: {})", key, order.gpu_text, order.gpu_problem);
  Entry fresh;  // replaces a dry run's entry for the pod
  fresh.order = std::move(order);
  entries_[key] = std::move(fresh);
}

void EvictionQueue::Withdraw(const std::string& gpu) {
  absl::MutexLock lock(&mu_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->second.order.gpu != gpu) {
      ++it;
      continue;
    }
    GPULET_LOG_INFO("not evicting pod {}: GPU {} is back in service", it->first,
                    it->second.order.gpu_text);
    it = entries_.erase(it);
  }
}

std::vector<EvictionOrder> EvictionQueue::Due(absl::Time now) {
  absl::MutexLock lock(&mu_);
  std::vector<EvictionOrder> out;
  for (const auto& [key, e] : entries_) {
    if (!e.dry_run && e.due <= now) out.push_back(e.order);
  }
  return out;
}

std::vector<NodeEvent> EvictionQueue::Done(const EvictionOrder& order, const absl::Status& status,
                                           absl::Time now) {
  const EvictionResult result = ClassifyEviction(status);
  const std::string key = Key(order.pod);
  std::vector<NodeEvent> events;
  auto event = [&](const char* type, const char* reason, std::string note) {
    NodeEvent e;
    e.type = type;
    e.reason = reason;
    e.note = std::move(note);
    e.pod = order.pod;
    events.push_back(std::move(e));
  };
  absl::MutexLock lock(&mu_);
  ++counts_[EvictionResultName(result)];
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.dry_run) return events;  // withdrawn meanwhile
  Entry& e = it->second;
  ++e.tries;
  e.last =
      status.ok() ? "evicted" : absl::StrCat(EvictionResultName(result), ": ", status.message());
  e.state = EvictionResultName(result);
  switch (result) {
    case EvictionResult::kEvicted:
      GPULET_LOG_WARN("evicted pod {}: GPU {} is out", key, order.gpu_text);
      event("Warning", "GpuPodEvicted",
            absl::StrCat("evicted by gpulet: the GPU this pod held, ", order.gpu_text,
                         ", is out of service (", order.gpu_problem,
                         "); its controller reschedules it onto a healthy GPU"));
      entries_.erase(it);
      break;
    case EvictionResult::kGone:
      GPULET_LOG_INFO("pod {} is gone already: {}", key, status.message());
      entries_.erase(it);
      break;
    case EvictionResult::kBlocked:
      GPULET_LOG_WARN("pod {} not evicted yet, a PodDisruptionBudget allows no disruption now: {}",
                      key, status.message());
      if (!e.blocked_told) {
        e.blocked_told = true;
        event("Warning", "GpuEvictionBlocked",
              absl::StrCat("gpulet would evict this pod, whose GPU ", order.gpu_text,
                           " is out of service, but its PodDisruptionBudget allows no "
                           "disruption now; trying again every ",
                           absl::FormatDuration(options_.retry)));
      }
      e.due = now + options_.retry;
      break;
    case EvictionResult::kForbidden:
      GPULET_LOG_ERROR(
          "pod {} not evicted: the API server refused ({}); grant gpulet's ServiceAccount "
          "create on pods/eviction (deploy/evict) or set health.evict.mode off",
          key, status.message());
      if (!e.forbidden_told) {
        e.forbidden_told = true;
        event("Warning", "GpuEvictionForbidden",
              absl::StrCat("gpulet may not evict this pod, whose GPU ", order.gpu_text,
                           " is out of service: its ServiceAccount lacks create on "
                           "pods/eviction (deploy/evict grants it)"));
      }
      e.due = now + options_.forbidden_retry;
      break;
    case EvictionResult::kFailed:
      GPULET_LOG_WARN("pod {} not evicted yet: {}; trying again in {}", key, status.message(),
                      absl::FormatDuration(options_.retry));
      e.due = now + options_.retry;
      break;
  }
  return events;
}

void EvictionQueue::AddDryRun(EvictionOrder order) {
  absl::MutexLock lock(&mu_);
  ++counts_["dry_run"];
  Entry& e = entries_[Key(order.pod)];
  if (!e.order.gpu.empty() && !e.dry_run) return;  // ordered for real already
  e.order = std::move(order);
  e.dry_run = true;
  e.state = "would-evict";
}

std::map<std::string, std::vector<state::EvictionStatus>> EvictionQueue::ByGpu() const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, std::vector<state::EvictionStatus>> out;
  for (const auto& [key, e] : entries_) {
    out[e.order.gpu].push_back(
        {e.order.pod.namespace_name, e.order.pod.name, e.state, e.tries, e.last});
  }
  return out;
}

std::map<std::string, uint64_t> EvictionQueue::counts() const {
  std::map<std::string, uint64_t> out;
  for (EvictionResult r :
       {EvictionResult::kEvicted, EvictionResult::kGone, EvictionResult::kBlocked,
        EvictionResult::kForbidden, EvictionResult::kFailed}) {
    out[EvictionResultName(r)] = 0;
  }
  out["dry_run"] = 0;
  absl::MutexLock lock(&mu_);
  for (const auto& [result, n] : counts_) out[result] = n;
  return out;
}

absl::Status EvictPod(kube::KubeClient& client, const PodRef& pod) {
  nlohmann::json body = {
      {"apiVersion", "policy/v1"},
      {"kind", "Eviction"},
      {"metadata", {{"name", pod.name}, {"namespace", pod.namespace_name}}},
  };
  if (!pod.uid.empty()) body["deleteOptions"] = {{"preconditions", {{"uid", pod.uid}}}};
  return client
      .Create(
          absl::StrCat("/api/v1/namespaces/", pod.namespace_name, "/pods/", pod.name, "/eviction"),
          body)
      .status();
}

PodEvictor::PodEvictor(EvictionQueue* queue, kube::KubeClient* client, EventInbox* inbox,
                       absl::Duration interval, const Clock* clock)
    : queue_(queue),
      client_(client),
      inbox_(inbox),
      clock_(clock),
      worker_({"gpulet-evict", interval, clock, true}, [this] { Tick(); }) {}

void PodEvictor::Tick() {
  for (const EvictionOrder& order : queue_->Due(clock_->Now())) {
    const absl::Status status = EvictPod(*client_, order.pod);
    std::vector<NodeEvent> events = queue_->Done(order, status, clock_->Now());
    if (!events.empty() && inbox_ != nullptr) inbox_->Post(std::move(events));
  }
}

}  // namespace gpulet::cluster
