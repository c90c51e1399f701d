#include "metrics/pod_attribution.h"

#include <chrono>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/dir_watcher.h"
#include "common/log.h"
#include "common/periodic_worker.h"
#include "grpcpp/grpcpp.h"
#include "proto/podresources/v1/api.grpc.pb.h"
#include "state/device_id.h"

namespace gpulet::metrics {
namespace {

// The kubelet allows 100 qps with a burst of 10; one call a second leaves it all to others.
constexpr absl::Duration kMinGap = absl::Seconds(1);

class KubeletPodResourcesClient final : public PodResourcesClient {
 public:
  explicit KubeletPodResourcesClient(std::string socket_path)
      : socket_path_(std::move(socket_path)) {}

  absl::StatusOr<v1::ListPodResourcesResponse> List(absl::Duration timeout) override {
    auto channel = grpc::CreateChannel(absl::StrCat("unix://", socket_path_),
                                       grpc::InsecureChannelCredentials());
    auto stub = v1::PodResourcesLister::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)));
    v1::ListPodResourcesRequest req;
    v1::ListPodResourcesResponse resp;
    grpc::Status s = stub->List(&ctx, req, &resp);
    if (!s.ok()) {
      return absl::UnavailableError(
          absl::StrCat("PodResources List on ", socket_path_, " failed: ", s.error_message(),
                       ". Pod labels need the kubelet's pod-resources socket: mount the host's ",
                       "<kubelet-dir>/pod-resources into the gpulet pod (deploy/ does)"));
    }
    return resp;
  }

 private:
  std::string socket_path_;
};

// The GPU an advertised device ID names: "<uuid>[::…]", "<index>[::…]" or, for a MIG device,
// "MIG-<uuid>[::…]" (then `mig_uuid` is set).
const gpu::Gpu* GpuOfDeviceId(const state::Snapshot& snap, const std::string& id,
                              std::string* mig_uuid) {
  std::string phys = state::PhysicalId(id);
  unsigned index = 0;
  bool numeric = absl::SimpleAtoi(phys, &index);
  for (const state::DeviceRecord& d : snap.devices) {
    if (d.gpu.uuid == phys) return &d.gpu;
    if (numeric && d.gpu.index && *d.gpu.index == index) return &d.gpu;
    if (d.gpu.FindMig(phys) != nullptr) {
      *mig_uuid = phys;
      return &d.gpu;
    }
  }
  return nullptr;
}

// Whether `resource` is one of ours: listed, or under a listed "<prefix>*" (the MIG
// strategy's per-profile resources, "nvidia.com/mig-*").
bool OurResource(const std::set<std::string>& resources, const std::string& resource) {
  if (resources.count(resource)) return true;
  for (const std::string& r : resources) {
    if (!r.empty() && r.back() == '*' &&
        resource.compare(0, r.size() - 1, r, 0, r.size() - 1) == 0) {
      return true;
    }
  }
  return false;
}

// A decimal number as dra/resource_slices.cc writes one: digits, no sign, no leading zero.
std::optional<unsigned> DeviceNameNumber(absl::string_view s) {
  if (s.empty() || (s.size() > 1 && s[0] == '0') || !absl::c_all_of(s, absl::ascii_isdigit)) {
    return std::nullopt;
  }
  unsigned n = 0;
  if (!absl::SimpleAtoi(s, &n)) return std::nullopt;
  return n;
}

// The GPU a DRA device name of gpulet's names ("gpu-<index>", or "gpu-<index>-mig-<gi>-<ci>"
// for a MIG device, whose UUID then goes to `mig_uuid`), or nullptr with `why` set.
const gpu::Gpu* GpuOfDraDevice(const state::Snapshot& snap, absl::string_view name,
                               std::string* mig_uuid, std::string* why) {
  std::vector<absl::string_view> parts = absl::StrSplit(name, '-');
  std::optional<unsigned> index, gi, ci;
  if (parts.size() >= 2 && parts[0] == "gpu") index = DeviceNameNumber(parts[1]);
  bool mig = parts.size() == 5 && parts[2] == "mig";
  if (mig) {
    gi = DeviceNameNumber(parts[3]);
    ci = DeviceNameNumber(parts[4]);
  }
  if (!index || (parts.size() != 2 && !mig) || (mig && (!gi || !ci))) {
    *why = "not a device name of gpulet's (gpu-<index> or gpu-<index>-mig-<gi>-<ci>)";
    return nullptr;
  }
  for (const state::DeviceRecord& d : snap.devices) {
    if (!d.gpu.index || *d.gpu.index != *index) continue;
    if (!mig) return &d.gpu;
    const gpu::MigDeviceInfo* m = d.gpu.FindMigInstance(*gi, *ci);
    if (m == nullptr) {
      *why = "no such MIG device now";
      return nullptr;
    }
    *mig_uuid = m->uuid;
    return &d.gpu;
  }
  *why = "no GPU with that index";
  return nullptr;
}

// gpulet's CDI device name for a device of a claim: "gpulet.dev/claim=<claim uid>-<device>".
constexpr char kClaimCdiPrefix[] = "gpulet.dev/claim=";

// The device name in one of gpulet's per-claim CDI names, "" when `cdi` is not one.
absl::string_view DeviceOfClaimCdiName(absl::string_view cdi) {
  if (!absl::ConsumePrefix(&cdi, kClaimCdiPrefix)) return "";
  // A claim UID is a UUID: 36 characters, dashes at 8, 13, 18 and 23, hex digits elsewhere.
  constexpr size_t kUidSize = 36;
  if (cdi.size() <= kUidSize + 1 || cdi[kUidSize] != '-') return "";
  for (size_t i = 0; i < kUidSize; ++i) {
    bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? cdi[i] != '-' : !absl::ascii_isxdigit(cdi[i])) return "";
  }
  return cdi.substr(kUidSize + 1);
}

// The names of gpulet's devices in one claim's allocation, by driver and pool, or (from a
// kubelet that reports only CDI devices) by gpulet's per-claim CDI names.
std::vector<absl::string_view> OurDraDevices(const v1::ClaimResource& r, const DraPool& dra) {
  std::vector<absl::string_view> names;
  if (!r.driver_name().empty()) {
    if (r.driver_name() == dra.driver && (dra.pool.empty() || r.pool_name() == dra.pool)) {
      names.push_back(r.device_name());
    }
    return names;
  }
  for (const v1::CDIDevice& cdi : r.cdi_devices()) {
    absl::string_view device = DeviceOfClaimCdiName(cdi.name());
    if (!device.empty()) {
      names.push_back(device);
    } else if (absl::StartsWith(cdi.name(), kClaimCdiPrefix)) {
      GPULET_LOG_DEBUG("pod attribution: skipping CDI device {}: not <claim uid>-<device name>",
                       cdi.name());
    }
  }
  return names;
}

}  // namespace

std::map<std::string, std::vector<GpuAssignment>> MapAssignments(
    const v1::ListPodResourcesResponse& list, const state::Snapshot& snap,
    const std::set<std::string>& resources, const DraPool& dra) {
  std::map<std::string, std::vector<GpuAssignment>> out;
  for (const v1::PodResources& pod : list.pod_resources()) {
    for (const v1::ContainerResources& c : pod.containers()) {
      const PodContainer holder{pod.namespace_(), pod.name(), c.name()};
      for (const v1::ContainerDevices& devs : c.devices()) {
        if (!OurResource(resources, devs.resource_name())) continue;
        for (const std::string& id : devs.device_ids()) {
          std::string mig;
          const gpu::Gpu* gpu = GpuOfDeviceId(snap, id, &mig);
          if (gpu == nullptr) continue;
          out[gpu->uuid].push_back({holder, devs.resource_name(), id, mig});
        }
      }
      // A device listed twice for one container (one claim referenced twice, or a claim's
      // CDI names repeating a device) is one series, not two with the same labels.
      std::set<std::string> seen;
      for (const v1::DynamicResource& claim : c.dynamic_resources()) {
        for (const v1::ClaimResource& r : claim.claim_resources()) {
          for (absl::string_view name : OurDraDevices(r, dra)) {
            std::string mig, why;
            const gpu::Gpu* gpu = GpuOfDraDevice(snap, name, &mig, &why);
            if (gpu == nullptr) {
              GPULET_LOG_DEBUG("pod attribution: skipping DRA device {} of claim {}/{}: {}",
                               std::string(name), claim.claim_namespace(), claim.claim_name(), why);
              continue;
            }
            std::string id = r.has_share_id() && !r.share_id().empty()
                                 ? absl::StrCat(name, "/", r.share_id())
                                 : std::string(name);
            if (!seen.insert(id).second) continue;
            out[gpu->uuid].push_back({holder, dra.driver, std::move(id), std::move(mig)});
          }
        }
      }
    }
  }
  return out;
}

std::optional<PodContainer> AttributeProcess(const PodMap& map, const std::string& gpu_uuid,
                                             const CgroupPod& cgroup) {
  auto pod = map.pods_by_uid.find(cgroup.pod_uid);
  if (pod == map.pods_by_uid.end()) return std::nullopt;
  PodContainer out{pod->second.namespace_name, pod->second.pod, ""};
  std::set<std::string> holders;
  auto gpu = map.by_gpu.find(gpu_uuid);
  if (gpu != map.by_gpu.end()) {
    for (const GpuAssignment& a : gpu->second) {
      if (a.holder.namespace_name == out.namespace_name && a.holder.pod == out.pod) {
        holders.insert(a.holder.container);
      }
    }
  }
  if (holders.size() == 1) {
    out.container = *holders.begin();
  } else if (holders.empty() && pod->second.containers.size() == 1) {
    out.container = pod->second.containers[0];
  }
  return out;
}

std::unique_ptr<PodResourcesClient> MakeKubeletPodResourcesClient(std::string socket_path) {
  return std::make_unique<KubeletPodResourcesClient>(std::move(socket_path));
}

PodAttributor::PodAttributor(std::unique_ptr<PodResourcesClient> client,
                             const state::DeviceStore* store, const HostFs* host, Options options)
    : client_(std::move(client)), store_(store), host_(host), options_(std::move(options)) {
  absl::MutexLock lock(&mu_);
  current_ = std::make_shared<const PodMap>();
}

PodAttributor::~PodAttributor() { Stop(); }

void PodAttributor::Start() {
  if (options_.dra.pool.empty()) {
    GPULET_LOG_DEBUG(
        "pod attribution: the node name is unknown, so DRA devices of {} in any pool count",
        options_.dra.driver);
  }
  watcher_ = std::make_unique<DirWatcher>(options_.socket_dir);
  thread_ = StartNamedThread("gpulet-podres", [this] { Run(); });
}

void PodAttributor::Stop() {
  if (!thread_.joinable()) return;
  stop_.store(true);
  watcher_->Wake();
  thread_.join();
  watcher_.reset();
}

void PodAttributor::Run() {
  const Clock* clock = options_.clock;
  // Refresh at once, then every interval; never twice within kMinGap.
  MonoTime last = clock->Monotonic() - kMinGap;
  MonoTime next = clock->Monotonic();
  // After a failed call, try again sooner than the interval, backing off: a
  // kubelet that creates its socket (which wakes us) before it listens answers
  // the first call with "connection refused".
  absl::Duration retry = kMinGap;
  while (!stop_.load()) {
    MonoTime now = clock->Monotonic();
    if (now >= next && now - last >= kMinGap) {
      RefreshOnce();
      last = clock->Monotonic();
      if (Current()->ok) {
        retry = kMinGap;
        next = last + options_.interval;
      } else {
        next = last + std::min(retry, options_.interval);
        retry = std::min(retry * 2, options_.interval);
      }
    }
    absl::Duration wait = std::max(next, last + kMinGap) - clock->Monotonic();
    DirWatcher::Changes changes = watcher_->Wait(std::max(wait, absl::Milliseconds(1)));
    for (const std::string& name : changes.created) {
      // A restarted kubelet: its pods may have changed while it was away.
      if (name == "kubelet.sock") next = clock->Monotonic();
    }
  }
}

void PodAttributor::RefreshOnce() {
  auto map = std::make_shared<PodMap>();
  map->refreshed = options_.clock->Now();
  absl::StatusOr<v1::ListPodResourcesResponse> list = client_->List(options_.timeout);
  std::shared_ptr<const PodMap> previous = Current();
  if (list.ok()) {
    map->ok = true;
    map->by_gpu = MapAssignments(*list, *store_->Get(), options_.resources, options_.dra);
  } else {
    map->error = std::string(list.status().message());
    // Keep the last known holders: a kubelet restart should not blank every pod label.
    map->by_gpu = previous->by_gpu;
    if (previous->ok) GPULET_LOG_WARN("{}", map->error);
  }
  if (host_ != nullptr) {
    absl::StatusOr<std::vector<std::string>> dirs = host_->ListDir("/var/log/pods");
    if (dirs.ok()) {
      for (const std::string& name : *dirs) {
        std::optional<PodLogDir> pod = ParsePodLogDir(name);
        if (!pod) continue;
        PodMap::PodInfo& info = map->pods_by_uid[pod->uid];
        info.namespace_name = pod->namespace_name;
        info.pod = pod->pod;
        absl::StatusOr<std::vector<std::string>> containers =
            host_->ListDir(absl::StrCat("/var/log/pods/", name));
        if (containers.ok()) info.containers = *containers;
      }
    }
  }
  absl::MutexLock lock(&mu_);
  current_ = std::move(map);
}

std::shared_ptr<const PodMap> PodAttributor::Current() const {
  absl::MutexLock lock(&mu_);
  return current_;
}

}  // namespace gpulet::metrics
