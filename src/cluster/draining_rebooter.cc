#include "cluster/draining_rebooter.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cluster/pod_eviction.h"
#include "common/log.h"

namespace gpulet::cluster {
namespace {

constexpr int kRebootTries = 3;
constexpr char kReasonAnnotation[] = "gpulet.dev/reason";

std::string MicroTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", t, absl::UTCTimeZone());
}

std::string Str(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// Whether `kubectl drain` leaves the pod alone: a DaemonSet's (its controller would put it
// back at once), a mirror pod (the kubelet's static pod), or one that has finished.
bool DrainSkips(const nlohmann::json& pod) {
  const nlohmann::json meta = pod.value("metadata", nlohmann::json::object());
  for (const nlohmann::json& owner : meta.value("ownerReferences", nlohmann::json::array())) {
    if (Str(owner, "kind") == "DaemonSet" && owner.value("controller", false)) return true;
  }
  if (meta.value("annotations", nlohmann::json::object()).contains("kubernetes.io/config.mirror"))
    return true;
  const std::string phase = Str(pod.value("status", nlohmann::json::object()), "phase");
  return phase == "Succeeded" || phase == "Failed";
}

std::string NodePath(const std::string& node) { return absl::StrCat("/api/v1/nodes/", node); }

}  // namespace

std::string DrainingRebooter::LeaseName(absl::string_view reason) {
  // FNV-1a: stable across builds and nodes, which is all a name needs.
  uint32_t h = 2166136261u;
  for (unsigned char c : reason) h = (h ^ c) * 16777619u;
  return absl::StrFormat("gpulet-reboot-%08x", h);
}

DrainingRebooter::DrainingRebooter(std::unique_ptr<kube::KubeClient> client,
                                   std::unique_ptr<node::NodeRebooter> inner, Options options,
                                   const Clock* clock)
    : client_(std::move(client)),
      inner_(std::move(inner)),
      options_(std::move(options)),
      clock_(clock),
      worker_({"gpulet-reboot", options_.poll, clock, true}, [this] { Step(); }) {}

DrainingRebooter::~DrainingRebooter() { Stop(); }

void DrainingRebooter::Start() { worker_.Start(); }

void DrainingRebooter::Stop() {
  client_->Cancel();
  worker_.Stop();
}

std::string DrainingRebooter::Describe() const {
  return absl::StrCat(inner_->Describe(), ", after a cordon and drain of node ",
                      options_.node_name);
}

bool DrainingRebooter::Busy() const {
  absl::MutexLock lock(&mu_);
  return phase_ != Phase::kIdle;
}

std::string DrainingRebooter::Progress() const {
  absl::MutexLock lock(&mu_);
  return progress_;
}

absl::Status DrainingRebooter::TakeLateFailure() {
  absl::MutexLock lock(&mu_);
  return std::exchange(late_failure_, absl::OkStatus());
}

absl::Status DrainingRebooter::Reboot(absl::string_view why, absl::string_view reason) {
  {
    absl::MutexLock lock(&mu_);
    if (phase_ != Phase::kIdle) {
      return absl::FailedPreconditionError(
          absl::StrCat("a reboot is under way already (", progress_, ")"));
    }
    phase_ = Phase::kTurn;
    why_ = std::string(why);
    reason_ = std::string(reason);
    lease_ = LeaseName(reason);
    reboot_tries_ = 0;
    late_failure_ = absl::OkStatus();
    progress_ =
        absl::StrCat("taking the node's turn (Lease ", options_.lease_namespace, "/", lease_, ")");
  }
  worker_.Wake();
  return absl::OkStatus();
}

void DrainingRebooter::Say(std::string progress) {
  absl::MutexLock lock(&mu_);
  if (progress != progress_) GPULET_LOG_INFO("node reboot: {}", progress);
  progress_ = std::move(progress);
}

void DrainingRebooter::Step() {
  bool recovered;
  Phase phase;
  std::string lease, reason, why;
  {
    absl::MutexLock lock(&mu_);
    recovered = recovered_;
    phase = phase_;
    lease = lease_;
    reason = reason_;
    why = why_;
  }
  if (!recovered) {
    if (absl::Status s = Recover(); !s.ok()) {
      const std::string progress = absl::StrCat(
          "could not yet check for a cordon or Lease of gpulet's to undo: ", s.message());
      Say(progress);  // logged once per different error
      return;         // tried again at the next step; a request waits for it
    }
    absl::MutexLock lock(&mu_);
    recovered_ = true;
    if (phase_ == Phase::kIdle) progress_.clear();  // an earlier try's error is over
  }
  if (phase == Phase::kTurn) {
    absl::StatusOr<bool> turn = TakeTurn(lease, reason);
    if (!turn.ok()) {
      Say(absl::StrCat("waiting for the node's turn: ", turn.status().message()));
      return;
    }
    if (!*turn) return;  // TakeTurn said why
    if (absl::Status s = Cordon(); !s.ok()) {
      Fail(s);
      return;
    }
    absl::MutexLock lock(&mu_);
    phase = phase_ = Phase::kDrain;
    drain_deadline_ = clock_->Now() + options_.drain_timeout;
  }
  if (phase == Phase::kDrain) {
    absl::StatusOr<int> left = DrainPass();
    if (!left.ok() && absl::IsPermissionDenied(left.status())) {
      Fail(left.status());
      return;
    }
    absl::Time deadline;
    {
      absl::MutexLock lock(&mu_);
      deadline = drain_deadline_;
    }
    if (!left.ok() || *left > 0) {
      if (clock_->Now() >= deadline) {
        std::string progress;
        {
          absl::MutexLock lock(&mu_);
          progress = progress_;
        }
        Fail(absl::DeadlineExceededError(absl::StrCat(
            "the drain of node ", options_.node_name, " did not finish within ",
            absl::FormatDuration(options_.drain_timeout), " (health.reboot.drainTimeout): ",
            progress, "; the node is uncordoned and the reboot asked for again later")));
      }
      return;
    }
    absl::MutexLock lock(&mu_);
    phase = phase_ = Phase::kReboot;
  }
  if (phase == Phase::kReboot) {
    Say(absl::StrCat("drained; asking ", inner_->Describe()));
    const absl::Status s = inner_->Reboot(why, reason);
    int tries;
    {
      absl::MutexLock lock(&mu_);
      tries = ++reboot_tries_;
    }
    if (s.ok()) {
      Say(absl::StrCat("drained, and ", inner_->Describe(), " took the request"));
      absl::MutexLock lock(&mu_);
      phase_ = Phase::kIdle;
      return;
    }
    if (absl::IsUnavailable(s) && tries < kRebootTries) {
      Say(absl::StrCat("drained; the reboot request failed (try ", tries, " of ", kRebootTries,
                       "): ", s.message()));
      return;
    }
    Fail(s);
  }
}

absl::StatusOr<bool> DrainingRebooter::TakeTurn(const std::string& lease,
                                                const std::string& reason) {
  const std::string base =
      absl::StrCat("/apis/coordination.k8s.io/v1/namespaces/", options_.lease_namespace, "/leases");
  const absl::Time now = clock_->Now();
  nlohmann::json spec = {{"holderIdentity", options_.node_name},
                         {"leaseDurationSeconds",
                          absl::ToInt64Seconds(options_.drain_timeout + options_.reboot_allowance)},
                         {"acquireTime", MicroTime(now)},
                         {"renewTime", MicroTime(now)}};
  absl::StatusOr<nlohmann::json> got = client_->Get(absl::StrCat(base, "/", lease));
  if (absl::IsNotFound(got.status())) {
    nlohmann::json body = {{"apiVersion", "coordination.k8s.io/v1"},
                           {"kind", "Lease"},
                           {"metadata",
                            {{"name", lease},
                             {"namespace", options_.lease_namespace},
                             {"labels", {{kRebootLeaseLabel, "true"}}},
                             {"annotations", {{kReasonAnnotation, reason}}}}},
                           {"spec", spec}};
    absl::StatusOr<nlohmann::json> made = client_->Create(base, body);
    if (absl::IsAlreadyExists(made.status())) return false;  // another node, just now
    if (!made.ok()) return made.status();
    return true;
  }
  if (!got.ok()) return got.status();
  const nlohmann::json held = got->value("spec", nlohmann::json::object());
  const std::string holder = Str(held, "holderIdentity");
  if (holder == options_.node_name) return true;
  std::string renewed = Str(held, "renewTime");
  if (renewed.empty()) renewed = Str(held, "acquireTime");
  absl::Time renew = absl::InfinitePast();
  std::string ignored;
  if (!renewed.empty() && !absl::ParseTime(absl::RFC3339_full, renewed, &renew, &ignored)) {
    renew = absl::InfinitePast();  // unreadable: taken over, as an expired one
  }
  const absl::Time until = renew + absl::Seconds(held.value("leaseDurationSeconds", 0));
  if (!holder.empty() && until > now) {
    Say(absl::StrCat("waiting for the node's turn: node ", holder,
                     " reboots for the same reason (Lease ", options_.lease_namespace, "/", lease,
                     ", held until ", MicroTime(until), ")"));
    return false;
  }
  nlohmann::json body = *got;
  body["spec"] = spec;
  absl::StatusOr<nlohmann::json> updated = client_->Update(absl::StrCat(base, "/", lease), body);
  if (kube::IsConflict(updated.status())) return false;  // another node took it first
  if (!updated.ok()) return updated.status();
  return true;
}

absl::Status DrainingRebooter::Cordon() {
  const std::string path = NodePath(options_.node_name);
  absl::StatusOr<nlohmann::json> node = client_->Get(path);
  if (!node.ok()) return node.status();
  const bool cordoned = node->value("spec", nlohmann::json::object()).value("unschedulable", false);
  const bool ours = node->value("metadata", nlohmann::json::object())
                        .value("annotations", nlohmann::json::object())
                        .contains(kRebootCordonAnnotation);
  if (cordoned && !ours) {
    Say("the node was cordoned already (not by gpulet; it stays so); draining");
    return absl::OkStatus();
  }
  nlohmann::json patch = {
      {"metadata", {{"annotations", {{kRebootCordonAnnotation, options_.boot_id}}}}},
      {"spec", {{"unschedulable", true}}}};
  absl::StatusOr<nlohmann::json> done = client_->Patch(path, kube::PatchType::kMerge, patch);
  if (!done.ok()) return done.status();
  Say(absl::StrCat("cordoned node ", options_.node_name, "; draining"));
  return absl::OkStatus();
}

absl::StatusOr<int> DrainingRebooter::DrainPass() {
  absl::StatusOr<nlohmann::json> pods =
      client_->Get(absl::StrCat("/api/v1/pods?fieldSelector=spec.nodeName%3D", options_.node_name));
  if (!pods.ok()) return pods.status();
  int left = 0;
  std::vector<std::string> blocked, terminating;
  for (const nlohmann::json& pod : pods->value("items", nlohmann::json::array())) {
    if (DrainSkips(pod)) continue;
    ++left;
    const nlohmann::json meta = pod.value("metadata", nlohmann::json::object());
    PodRef ref{Str(meta, "namespace"), Str(meta, "name"), Str(meta, "uid")};
    const std::string name = absl::StrCat(ref.namespace_name, "/", ref.name);
    if (meta.contains("deletionTimestamp")) {
      terminating.push_back(name);
      continue;
    }
    const absl::Status s = EvictPod(*client_, ref);
    switch (ClassifyEviction(s)) {
      case EvictionResult::kEvicted:
      case EvictionResult::kGone:
        terminating.push_back(name);
        break;
      case EvictionResult::kBlocked:
        blocked.push_back(name);
        break;
      case EvictionResult::kForbidden:
        return absl::PermissionDeniedError(
            absl::StrCat("gpulet may not evict ", name, " to drain the node: ", s.message(),
                         "; grant create on pods/eviction (deploy/reboot-talos)"));
      case EvictionResult::kFailed:
        blocked.push_back(absl::StrCat(name, " (", s.message(), ")"));
        break;
    }
  }
  if (left > 0) {
    std::string progress = absl::StrCat("draining node ", options_.node_name, ": ", left,
                                        left == 1 ? " pod" : " pods", " left");
    if (!terminating.empty()) {
      absl::StrAppend(&progress, "; stopping: ", absl::StrJoin(terminating, ", "));
    }
    if (!blocked.empty()) {
      absl::StrAppend(&progress,
                      "; not evicted yet (a PodDisruptionBudget allows no disruption "
                      "now): ",
                      absl::StrJoin(blocked, ", "));
    }
    Say(std::move(progress));
  }
  return left;
}

void DrainingRebooter::UncordonIfOurs(const nlohmann::json& node) {
  if (!node.value("metadata", nlohmann::json::object())
           .value("annotations", nlohmann::json::object())
           .contains(kRebootCordonAnnotation)) {
    return;
  }
  nlohmann::json patch = {{"metadata", {{"annotations", {{kRebootCordonAnnotation, nullptr}}}}},
                          {"spec", {{"unschedulable", false}}}};
  if (absl::StatusOr<nlohmann::json> s =
          client_->Patch(NodePath(options_.node_name), kube::PatchType::kMerge, patch);
      !s.ok()) {
    GPULET_LOG_ERROR("could not uncordon node {}: {}", options_.node_name, s.status().message());
  } else {
    GPULET_LOG_INFO("uncordoned node {}, which gpulet had cordoned for a reboot",
                    options_.node_name);
  }
}

void DrainingRebooter::GiveBackLease(const std::string& name, const nlohmann::json* held) {
  const std::string path = absl::StrCat("/apis/coordination.k8s.io/v1/namespaces/",
                                        options_.lease_namespace, "/leases/", name);
  absl::StatusOr<nlohmann::json> read;
  if (held == nullptr) {
    read = client_->Get(path);
    if (!read.ok()) return;  // gone already, or unreadable: its expiry gives it back
    held = &*read;
  }
  if (Str(held->value("spec", nlohmann::json::object()), "holderIdentity") != options_.node_name)
    return;
  if (absl::Status s = client_->Delete(path); !s.ok() && !absl::IsNotFound(s)) {
    GPULET_LOG_ERROR("could not give back the Lease {}: {}", name, s.message());
  }
}

void DrainingRebooter::Fail(const absl::Status& why) {
  std::string lease;
  {
    absl::MutexLock lock(&mu_);
    lease = lease_;
  }
  if (absl::StatusOr<nlohmann::json> node = client_->Get(NodePath(options_.node_name)); node.ok()) {
    UncordonIfOurs(*node);
  } else {
    GPULET_LOG_ERROR("could not read node {} to undo gpulet's cordon: {}", options_.node_name,
                     node.status().message());
  }
  if (!lease.empty()) GiveBackLease(lease, nullptr);
  GPULET_LOG_ERROR("the node reboot failed: {}", why.message());
  absl::MutexLock lock(&mu_);
  phase_ = Phase::kIdle;
  late_failure_ = why;
  progress_ = absl::StrCat("failed: ", why.message());
}

absl::Status DrainingRebooter::Recover() {
  absl::StatusOr<nlohmann::json> node = client_->Get(NodePath(options_.node_name));
  if (!node.ok()) return node.status();
  const nlohmann::json annotations = node->value("metadata", nlohmann::json::object())
                                         .value("annotations", nlohmann::json::object());
  const std::string cordoned_in = Str(annotations, kRebootCordonAnnotation);
  const bool restarted_mid_drain =
      annotations.contains(kRebootCordonAnnotation) && cordoned_in == options_.boot_id;
  // Every Lease of gpulet's this node holds: after a reboot, its turn is over.
  absl::StatusOr<nlohmann::json> leases = client_->Get(
      absl::StrCat("/apis/coordination.k8s.io/v1/namespaces/", options_.lease_namespace,
                   "/leases?labelSelector=", kRebootLeaseLabel));
  if (!leases.ok()) return leases.status();
  UncordonIfOurs(*node);
  for (const nlohmann::json& l : leases->value("items", nlohmann::json::array())) {
    GiveBackLease(Str(l.value("metadata", nlohmann::json::object()), "name"), &l);
  }
  if (restarted_mid_drain) {
    absl::MutexLock lock(&mu_);
    late_failure_ = absl::AbortedError(
        "gpulet restarted while it drained the node for a reboot; it uncordoned the node, and "
        "asks again later");
  }
  return absl::OkStatus();
}

}  // namespace gpulet::cluster
