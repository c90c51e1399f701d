#include "dra/slice_publisher.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/periodic_worker.h"

namespace gpulet::dra {
namespace {

using nlohmann::json;

// How long the thread waits for a store change before it looks at options, resync and Stop
// again (the store's wait cannot be woken by them); bounds how long Stop and a reload wait.
constexpr absl::Duration kPublishWait = absl::Milliseconds(100);
// 409s on one slice in one pass before the pass gives up until the retry: someone else
// keeps writing it.
constexpr int kConflictAttempts = 3;
constexpr size_t kMaxNameLength = 253;

std::string Rv(const json& object) {
  return object.value("metadata", json::object()).value("resourceVersion", "");
}

// What this publisher decides of a slice: its owner references and spec.
json KeyOf(const json& object) {
  const json meta = object.value("metadata", json::object());
  return {{"ownerReferences", meta.value("ownerReferences", json())},
          {"spec", object.value("spec", json())}};
}

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

bool IsAlnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

// Lowercase; anything but [a-z0-9.-] becomes '-'; every dot-separated label starts and ends
// with an alphanumeric (DNS-1123 subdomain).
std::string Subdomain(const std::string& in) {
  std::string s = absl::AsciiStrToLower(in);
  for (char& c : s) {
    if (!IsAlnum(c) && c != '.' && c != '-') c = '-';
  }
  std::string out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t dot = s.find('.', start);
    if (dot == std::string::npos) dot = s.size();
    std::string label = s.substr(start, dot - start);
    size_t b = 0, e = label.size();
    while (b < e && !IsAlnum(label[b])) ++b;
    while (e > b && !IsAlnum(label[e - 1])) --e;
    label = label.substr(b, e - b);
    if (!label.empty()) absl::StrAppend(&out, out.empty() ? "" : ".", label);
    start = dot + 1;
  }
  return out.empty() ? "x" : out;
}

// Adds to `out` the paths of keys in `sent` that `got` lacks; array elements by position,
// as "[]" so every device's dropped field is one path.
void CollectDropped(const json& sent, const json& got, const std::string& path,
                    std::set<std::string>* out) {
  if (sent.is_object()) {
    for (const auto& [key, value] : sent.items()) {
      const std::string here = path.empty() ? key : absl::StrCat(path, ".", key);
      if (!got.is_object() || !got.contains(key)) {
        out->insert(here);
      } else {
        CollectDropped(value, got[key], here, out);
      }
    }
  } else if (sent.is_array() && got.is_array()) {
    for (size_t i = 0; i < sent.size() && i < got.size(); ++i) {
      CollectDropped(sent[i], got[i], absl::StrCat(path, "[]"), out);
    }
  }
}

// The feature gate behind a resource.k8s.io/v1 field, for the warning (KEP-5055 device taints,
// KEP-5075 consumable capacity, KEP-4815 partitionable devices, KEP-5007 binding conditions).
struct GatedField {
  const char* suffix;
  const char* gate;
};
constexpr GatedField kGatedFields[] = {
    {".taints", "DRADeviceTaints"},
    {".allowMultipleAllocations", "DRAConsumableCapacity"},
    {".requestPolicy", "DRAConsumableCapacity"},
    {".sharedCounters", "DRAPartitionableDevices"},
    {".consumesCounters", "DRAPartitionableDevices"},
    {".bindingConditions", "DRADeviceBindingConditions"},
    {".bindsToNode", "DRADeviceBindingConditions"},
};

}  // namespace

std::string SliceName(const std::string& node_name, const std::string& driver, size_t index) {
  const std::string full = absl::StrCat(node_name, "-", driver);
  std::string prefix = Subdomain(full);
  const std::string suffix = absl::StrCat("-", index);
  if (prefix.size() + suffix.size() <= kMaxNameLength) return prefix + suffix;
  // Too long: keep the start readable, and a hash of the whole keeps two long names apart.
  const std::string hash = absl::StrFormat("-%08x", Fnv1a(full) & 0xffffffffu);
  prefix.resize(kMaxNameLength - hash.size() - suffix.size());
  while (!prefix.empty() && !IsAlnum(prefix.back())) prefix.pop_back();
  return prefix + hash + suffix;
}

SlicePublisher::SlicePublisher(kube::KubeClient* client, const state::DeviceStore* store,
                               SlicePublisherOptions options, const Clock* clock)
    : client_(client), store_(store), clock_(clock), options_(std::move(options)) {}

SlicePublisher::~SlicePublisher() { Stop(); }

absl::Status SlicePublisher::Start() {
  {
    absl::MutexLock lock(&mu_);
    if (options_.slices.driver.empty() || options_.slices.node_name.empty()) {
      return absl::InvalidArgumentError(
          "the ResourceSlice publisher needs the driver name and the node name");
    }
    if (thread_.joinable()) return absl::FailedPreconditionError("already started");
    stopping_ = false;
  }
  thread_ = StartNamedThread("gpulet-dra-pub", [this] { Run(); });
  return absl::OkStatus();
}

void SlicePublisher::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void SlicePublisher::SetOptions(SlicePublisherOptions options) {
  absl::MutexLock lock(&mu_);
  options_ = std::move(options);
  options_changed_ = true;
}

SlicePublisher::Stats SlicePublisher::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

bool SlicePublisher::WaitForPublished(uint64_t store_version, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto done = [this, store_version]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return stats_.published_version >= store_version;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

std::vector<std::string> DroppedFields(const json& sent, const json& stored) {
  std::set<std::string> paths;
  CollectDropped(sent.value("spec", json::object()), stored.value("spec", json::object()), "spec",
                 &paths);
  std::vector<std::string> out;
  for (const std::string& p : paths) {
    const char* gate = nullptr;
    for (const GatedField& g : kGatedFields) {
      if (absl::EndsWith(p, g.suffix)) gate = g.gate;
    }
    out.push_back(gate != nullptr ? absl::StrCat(p, " (feature gate ", gate, ")") : p);
  }
  return out;
}

void SlicePublisher::NoteDropped(const std::string& name, const json& sent, const json& stored) {
  std::vector<std::string> dropped = DroppedFields(sent, stored);
  {
    absl::MutexLock lock(&mu_);
    if (dropped == stats_.dropped_fields) return;
    stats_.dropped_fields = dropped;
  }
  if (dropped.empty()) {
    GPULET_LOG_INFO("DRA: the API server now keeps every field of ResourceSlice {}", name);
    return;
  }
  // The server answered with what it stored: a field it does not serve (a gate off on the
  // API server) is gone without an error, so the scheduler never sees it.
  GPULET_LOG_WARN(
      "DRA: the API server dropped {} from ResourceSlice {}: it stores slices without them, so "
      "the scheduler does not see them; turn the feature gate on for kube-apiserver and "
      "kube-scheduler (--feature-gates=<gate>=true) or accept that (docs/dra.md, \"Fields the "
      "API server may drop\")",
      absl::StrJoin(dropped, ", "), name);
}

void SlicePublisher::Failed(const absl::Status& status) {
  std::string error(status.message());
  bool repeat;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;  // a call Stop's caller cancelled: not an API problem
    ++stats_.errors;
    repeat = stats_.last_error == error;
    stats_.last_error = error;
  }
  // One line per distinct failure: an API server down for an hour is one line.
  if (!repeat) GPULET_LOG_WARN("DRA ResourceSlices: {} (retried)", error);
}

void SlicePublisher::Run() {
  uint64_t seen = 0;
  bool first = true;
  bool retrying = false;
  MonoTime retry_at = MonoTime::Infinite();
  MonoTime resync_at = MonoTime::Infinite();
  for (;;) {
    if (retrying) {
      // A failing server: wait out the retry interval (on the injected clock) even if the
      // store changes meanwhile; the retry writes the latest state anyway.
      absl::MutexLock lock(&mu_);
      auto woken = [this]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || options_changed_; };
      clock_->AwaitWithDeadline(&mu_, absl::Condition(&woken), retry_at);
    } else if (!first) {
      store_->WaitForChange(seen, kPublishWait);
    }
    SlicePublisherOptions options;
    bool changed;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
      options = options_;
      changed = options_changed_;
      options_changed_ = false;
    }
    if (store_->shut_down()) break;
    std::shared_ptr<const state::Snapshot> snap = store_->Get();
    const MonoTime now = clock_->Monotonic();
    const bool resync = !first && now >= resync_at;
    if (!first && !changed && !resync && snap->version == seen && (!retrying || now < retry_at)) {
      continue;
    }
    first = false;
    if (active_ && (active_->driver != options.slices.driver ||
                    active_->node_name != options.slices.node_name)) {
      // Another pool: nothing known of it yet.
      owner_resolved_ = false;
      listed_ = false;
      known_.clear();
      generation_ = 0;
      generation_content_.reset();
    }
    active_ = options.slices;
    if (resync) {
      // The Node too: one deleted and created again has a new uid, and the garbage collector
      // deletes slices owned by the old one as soon as they are written again.
      owner_resolved_ = false;
      listed_ = false;
    }
    seen = snap->version;
    absl::Status status = Reconcile(*snap, options);
    if (status.ok()) {
      retrying = false;
      resync_at = now + options.resync;
      absl::MutexLock lock(&mu_);
      stats_.generation = generation_;
      stats_.published_version = std::max(stats_.published_version, snap->version);
      stats_.last_error.clear();
    } else {
      retrying = true;
      retry_at = now + options.retry_interval;
      Failed(status);
    }
  }
}

absl::Status SlicePublisher::ResolveOwner(const std::string& node_name) {
  const std::string path = absl::StrCat("/api/v1/nodes/", node_name);
  absl::StatusOr<json> node = client_->Get(path);
  if (node.ok()) {
    warned_no_owner_ = false;
    const json meta = node->value("metadata", json::object());
    owner_refs_ = json::array({{{"apiVersion", "v1"},
                                {"kind", "Node"},
                                {"name", node_name},
                                {"uid", meta.value("uid", "")},
                                {"controller", true}}});
  } else if (absl::IsNotFound(node.status()) || absl::IsPermissionDenied(node.status())) {
    // Published without the owner: the slices then outlive a deleted Node until the
    // kubelet's cleanup, which is better than not publishing at all.
    owner_refs_ = json();
    if (!warned_no_owner_) {
      warned_no_owner_ = true;
      GPULET_LOG_WARN(
          "DRA ResourceSlices: published without an owner reference to the Node ({}): {}",
          absl::IsNotFound(node.status()) ? "no such Node; NODE_NAME must be spec.nodeName"
                                          : "no RBAC permission to get nodes",
          node.status().message());
    }
  } else {
    return node.status();
  }
  owner_resolved_ = true;
  return absl::OkStatus();
}

absl::Status SlicePublisher::List(const SliceOptions& slices) {
  const std::string path = absl::StrCat(
      kResourceSlicesPath,
      "?fieldSelector=", kube::QueryEscape(absl::StrCat("spec.nodeName=", slices.node_name)));
  absl::StatusOr<json> list = client_->Get(path);
  if (!list.ok()) return list.status();
  std::map<std::string, Known> found;
  int64_t highest = 0;
  for (const json& item : list->value("items", json::array())) {
    const json spec = item.value("spec", json::object());
    // Other drivers' slices on this node are theirs.
    if (spec.value("driver", "") != slices.driver) continue;
    const std::string name = item.value("metadata", json::object()).value("name", "");
    if (name.empty()) continue;
    highest = std::max(highest, spec.value("pool", json::object()).value("generation", int64_t{0}));
    Known k{item, json()};
    // Unchanged since this publisher wrote it: what it sent still holds.
    auto old = known_.find(name);
    if (old != known_.end() && Rv(old->second.object) == Rv(item)) k.sent = old->second.sent;
    found[name] = std::move(k);
  }
  known_ = std::move(found);
  if (highest > generation_ || !generation_content_) {
    // A first start continues past what is there (a restart's slices, or someone else's
    // newer generation): the next write bumps past it.
    generation_ = std::max(generation_, highest);
    generation_content_.reset();
  }
  listed_ = true;
  return absl::OkStatus();
}

absl::Status SlicePublisher::Ensure(const std::string& name, const json& want) {
  const std::string path = absl::StrCat(kResourceSlicesPath, "/", name);
  const json key = KeyOf(want);
  absl::Status last;
  for (int attempt = 0; attempt < kConflictAttempts; ++attempt) {
    auto it = known_.find(name);
    if (it != known_.end() && (it->second.sent == key || KeyOf(it->second.object) == key)) {
      return absl::OkStatus();
    }
    absl::StatusOr<json> written;
    if (it == known_.end()) {
      written = client_->Create(kResourceSlicesPath, want);
    } else {
      json body = want;
      body["metadata"]["resourceVersion"] = Rv(it->second.object);
      written = client_->Update(path, body);
    }
    if (written.ok()) {
      NoteDropped(name, want, *written);
      known_[name] = Known{*std::move(written), key};
      absl::MutexLock lock(&mu_);
      ++stats_.writes;
      return absl::OkStatus();
    }
    last = written.status();
    if (absl::IsNotFound(last)) {  // deleted behind our back: create it
      known_.erase(name);
      continue;
    }
    if (!kube::IsConflict(last) && !absl::IsAlreadyExists(last)) return last;
    {
      absl::MutexLock lock(&mu_);
      ++stats_.conflicts;
    }
    // Someone else wrote it (or it exists though the list missed it): read it again.
    absl::StatusOr<json> current = client_->Get(path);
    if (current.ok()) {
      known_[name] = Known{*std::move(current), json()};
    } else if (absl::IsNotFound(current.status())) {
      known_.erase(name);
    } else {
      return current.status();
    }
  }
  return absl::Status(last.code(), absl::StrCat(last.message(), " (", kConflictAttempts,
                                                " conflicts in a row; retried later)"));
}

absl::Status SlicePublisher::Reconcile(const state::Snapshot& snap,
                                       const SlicePublisherOptions& options) {
  const SliceOptions& o = options.slices;
  if (!owner_resolved_) {
    if (absl::Status s = ResolveOwner(o.node_name); !s.ok()) return s;
  }
  if (!listed_) {
    if (absl::Status s = List(o); !s.ok()) return s;
  }
  SliceOptions build = o;
  build.generation = 0;  // content only; the generation is set below
  std::vector<json> specs = BuildSliceSpecs(snap, build);
  if (!generation_content_ || specs != *generation_content_) {
    ++generation_;
    generation_content_ = specs;
  }
  std::set<std::string> wanted;
  for (size_t i = 0; i < specs.size(); ++i) {
    json& spec = specs[i];
    spec["pool"]["generation"] = generation_;
    const std::string name = SliceName(o.node_name, o.driver, i);
    wanted.insert(name);
    json meta = {{"name", name}};
    if (!owner_refs_.is_null()) meta["ownerReferences"] = owner_refs_;
    json want = {{"apiVersion", "resource.k8s.io/v1"},
                 {"kind", "ResourceSlice"},
                 {"metadata", meta},
                 {"spec", spec}};
    if (absl::Status s = Ensure(name, want); !s.ok()) return s;
  }
  // Extras go last: until then a consumer already ignores them (older generation).
  std::vector<std::string> extra;
  for (const auto& [name, k] : known_) {
    if (!wanted.count(name)) extra.push_back(name);
  }
  for (const std::string& name : extra) {
    absl::Status s = client_->Delete(absl::StrCat(kResourceSlicesPath, "/", name));
    if (!s.ok() && !absl::IsNotFound(s)) return s;
    known_.erase(name);
    if (s.ok()) {
      absl::MutexLock lock(&mu_);
      ++stats_.writes;
    }
  }
  return absl::OkStatus();
}

}  // namespace gpulet::dra
