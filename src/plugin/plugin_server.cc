#include "plugin/plugin_server.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/host_fs.h"
#include "common/log.h"
#include "grpcpp/grpcpp.h"
#include "proto/deviceplugin/v1beta1/api.grpc.pb.h"
#include "state/device_id.h"
#include "vram/compute_share.h"
#include "vram/slice_file.h"

namespace gpulet::plugin {
namespace {

grpc::Status ToGrpc(const absl::Status& s) {
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
      code = grpc::StatusCode::INVALID_ARGUMENT;
      break;
    case absl::StatusCode::kFailedPrecondition:
      code = grpc::StatusCode::FAILED_PRECONDITION;
      break;
    case absl::StatusCode::kUnavailable:
      code = grpc::StatusCode::UNAVAILABLE;
      break;
    default:
      code = grpc::StatusCode::INTERNAL;
  }
  return grpc::Status(code, std::string(s.message()));
}

bool SameDevices(const v1beta1::ListAndWatchResponse& a, const v1beta1::ListAndWatchResponse& b) {
  return a.SerializeAsString() == b.SerializeAsString();
}

}  // namespace

class DevicePluginServer::Service final : public v1beta1::DevicePlugin::Service {
 public:
  explicit Service(DevicePluginServer* owner) : owner_(owner) {}

  void BeginStop() { stopping_.store(true); }

  grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                      v1beta1::DevicePluginOptions* out) override {
    out->set_pre_start_required(false);
    out->set_get_preferred_allocation_available(true);
    return grpc::Status::OK;
  }

  grpc::Status ListAndWatch(grpc::ServerContext* ctx, const v1beta1::Empty*,
                            grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) override {
    const ResourceSpec& res = owner_->resource_;
    std::shared_ptr<const state::Snapshot> snap = owner_->store_->Get();
    v1beta1::ListAndWatchResponse last;
    bool first = true;
    while (!stopping_.load() && !ctx->IsCancelled()) {
      v1beta1::ListAndWatchResponse now =
          ToListAndWatch(AdvertisedDevices(res, *owner_->config_, *snap));
      if (first || !SameDevices(now, last)) {
        if (!writer->Write(now)) break;  // the kubelet went away
        last = std::move(now);
        first = false;
      }
      if (owner_->store_->shut_down()) break;
      // Short waits so Stop() and cancelled streams end promptly.
      snap = owner_->store_->WaitForChange(snap->version, absl::Milliseconds(200));
    }
    return grpc::Status::OK;
  }

  grpc::Status GetPreferredAllocation(grpc::ServerContext*,
                                      const v1beta1::PreferredAllocationRequest* req,
                                      v1beta1::PreferredAllocationResponse* out) override {
    std::shared_ptr<const state::Snapshot> snap = owner_->store_->Get();
    for (const auto& c : req->container_requests()) {
      std::vector<std::string> available(c.available_deviceids().begin(),
                                         c.available_deviceids().end());
      std::vector<std::string> must(c.must_include_deviceids().begin(),
                                    c.must_include_deviceids().end());
      std::vector<std::string> chosen = PreferredAllocation(
          owner_->resource_, *owner_->config_, *snap, available, must, c.allocation_size());
      auto* r = out->add_container_responses();
      for (const std::string& id : chosen) r->add_deviceids(id);
    }
    return grpc::Status::OK;
  }

  grpc::Status Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* req,
                        v1beta1::AllocateResponse* out) override {
    std::shared_ptr<const state::Snapshot> snap = owner_->store_->Get();
    for (const auto& c : req->container_requests()) {
      std::vector<std::string> ids(c.devices_ids().begin(), c.devices_ids().end());
      absl::StatusOr<v1beta1::ContainerAllocateResponse> r =
          AllocateContainer(owner_->resource_, *owner_->config_, *snap, owner_->control_, ids);
      if (r.ok() && owner_->resource_.kind == ResourceKind::kMemorySlice &&
          owner_->config_->sharing.memory_slices.enforce) {
        if (absl::Status s = owner_->PrepareSlice(ids); !s.ok()) r = s;
      }
      if (!r.ok()) {
        GPULET_LOG_WARN("Allocate {} refused: {}", owner_->resource_.name, r.status().message());
        return ToGrpc(r.status());
      }
      *out->add_container_responses() = std::move(*r);
    }
    return grpc::Status::OK;
  }

  grpc::Status PreStartContainer(grpc::ServerContext*, const v1beta1::PreStartContainerRequest*,
                                 v1beta1::PreStartContainerResponse*) override {
    return grpc::Status::OK;
  }

 private:
  DevicePluginServer* owner_;
  std::atomic<bool> stopping_{false};
};

DevicePluginServer::DevicePluginServer(ResourceSpec resource,
                                       std::shared_ptr<const config::Config> config,
                                       state::DeviceStore* store, ControlNodes control,
                                       std::string plugin_dir, SliceFiles slice_files)
    : resource_(std::move(resource)),
      config_(std::move(config)),
      store_(store),
      control_(std::move(control)),
      plugin_dir_(std::move(plugin_dir)),
      slice_files_(std::move(slice_files)) {}

absl::Status DevicePluginServer::PrepareSlice(const std::vector<std::string>& ids) const {
  const config::Config::MemorySlices& slices = config_->sharing.memory_slices;
  absl::StatusOr<std::string> local_dir = slice_files_.LocalDir(slices.host_dir);
  auto refused = [](absl::string_view why) {
    return absl::FailedPreconditionError(
        absl::StrCat(why,
                     "; the container is refused rather than served without its VRAM "
                     "limit (sharing.memorySlices.enforce: false serves slices as "
                     "accounting only)"));
  };
  if (slice_files_.library.empty()) return refused(slice_files_.library_error);
  if (!local_dir.ok()) return refused(local_dir.status().message());
  const std::string& local = *local_dir;
  if (absl::Status s = vram::InstallLibrary(slice_files_.library, local); !s.ok()) {
    return refused(s.message());
  }
  const uint64_t quota = static_cast<uint64_t>(ids.size()) *
                         static_cast<uint64_t>(slices.slice_mib) * uint64_t{1 << 20};
  const std::string uuid = state::PhysicalId(ids.front());
  // The compute share: the holder's slices over the card's memory (docs/sharing.md).
  uint32_t share_permille = 0;
  if (slices.compute_share) {
    const state::DeviceRecord* d = store_->Get()->FindByUuid(uuid);
    if (d != nullptr) {
      share_permille = vram::ComputeSharePermille(quota, d->gpu.memory_total_bytes.value_or(0));
    }
  }
  if (absl::Status s = vram::WriteSliceFile(
          local, vram::AllocationDirName(ids), quota, uuid,
          absl::StrCat(resource_.name, " ", absl::StrJoin(ids, ",")), share_permille);
      !s.ok()) {
    return refused(s.message());
  }
  return absl::OkStatus();
}

DevicePluginServer::~DevicePluginServer() { Stop(); }

std::string DevicePluginServer::socket_path() const {
  return JoinPath(plugin_dir_, resource_.socket_name);
}

absl::Status DevicePluginServer::Start() {
  if (server_) return absl::OkStatus();
  yielded_ = false;
  std::string path = socket_path();
  if (path.size() > 107) {
    return absl::InvalidArgumentError(
        absl::StrCat("the device plugin socket path ", path, " is ", path.size(),
                     " bytes; unix sockets allow at most 107. Use a shorter --kubelet-dir"));
  }
  // Served on a name of its own first and then renamed over `path`: the path is never
  // absent (a gpulet of a rolling update that served it sees it replaced, not gone, and
  // leaves it), and gRPC, which unlinks the path it bound when its listener goes (possibly
  // later, from its own threads), unlinks that private name instead of whatever serves
  // `path` by then.
  static std::atomic<int> serial{0};
  std::string bound = JoinPath(plugin_dir_, absl::StrCat(".", resource_.socket_name, ".", getpid(),
                                                         ".", serial.fetch_add(1)));
  if (bound.size() > 107) bound = path;  // no room: unlink and bind in place, as before
  unlink(bound.c_str());                 // a stale socket from an earlier run would make bind fail
  service_ = std::make_unique<Service>(this);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("unix://", bound), grpc::InsecureServerCredentials());
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (!server_) {
    service_.reset();
    return absl::UnavailableError(
        absl::StrCat("cannot serve the device plugin for ", resource_.name, " on ", path,
                     ": check that the directory exists and is writable (mount the kubelet's "
                     "device-plugins directory into the gpulet pod)"));
  }
  // Only root (the kubelet) talks to this socket.
  chmod(bound.c_str(), 0600);
  if (bound != path && rename(bound.c_str(), path.c_str()) != 0) {
    const int err = errno;
    server_->Shutdown();
    server_.reset();
    service_.reset();
    unlink(bound.c_str());
    return absl::UnavailableError(absl::StrCat("cannot serve the device plugin for ",
                                               resource_.name, " on ", path, ": renaming ", bound,
                                               ": ", strerror(err)));
  }
  struct stat st;
  socket_inode_ = stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
  return absl::OkStatus();
}

void DevicePluginServer::Stop() {
  if (!server_) return;
  service_->BeginStop();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_->Wait();
  server_.reset();
  service_.reset();
  // Remove the socket only if it is still ours (the kubelet may have replaced the directory
  // contents).
  std::string path = socket_path();
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && st.st_ino == socket_inode_) unlink(path.c_str());
  socket_inode_ = 0;
}

bool DevicePluginServer::SocketIntact() const {
  struct stat st;
  return server_ && stat(socket_path().c_str(), &st) == 0 && st.st_ino == socket_inode_;
}

void RegisterCancel::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  if (in_flight_ != nullptr) in_flight_->TryCancel();
}

bool RegisterCancel::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

bool RegisterCancel::Begin(grpc::ClientContext* ctx) {
  absl::MutexLock lock(&mu_);
  if (cancelled_) return false;
  in_flight_ = ctx;
  return true;
}

void RegisterCancel::End() {
  absl::MutexLock lock(&mu_);
  in_flight_ = nullptr;
}

absl::Status DevicePluginServer::Register(const std::string& kubelet_socket, absl::Duration timeout,
                                          RegisterCancel* cancel) {
  auto channel = grpc::CreateChannel(absl::StrCat("unix://", kubelet_socket),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1beta1::Registration::NewStub(channel);
  v1beta1::RegisterRequest req;
  req.set_version("v1beta1");
  req.set_endpoint(resource_.socket_name);
  req.set_resource_name(resource_.name);
  req.mutable_options()->set_get_preferred_allocation_available(true);
  v1beta1::Empty resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)));
  if (cancel != nullptr && !cancel->Begin(&ctx)) {
    return absl::CancelledError(absl::StrCat("registering ", resource_.name,
                                             " with the kubelet: not started, gpulet is stopping"));
  }
  grpc::Status s = stub->Register(&ctx, req, &resp);
  if (cancel != nullptr) cancel->End();
  if (!s.ok()) {
    if (cancel != nullptr && cancel->cancelled()) {
      return absl::CancelledError(absl::StrCat("registering ", resource_.name,
                                               " with the kubelet at ", kubelet_socket,
                                               ": cancelled, gpulet is stopping"));
    }
    // The kubelet answers a registration it refuses with its handler's error (UNKNOWN);
    // anything else is the call not getting through (the kubelet absent, slow, restarting).
    const std::string what = absl::StrCat("registering ", resource_.name, " with the kubelet at ",
                                          kubelet_socket, " failed: ", s.error_message());
    return s.error_code() == grpc::StatusCode::UNKNOWN ? absl::FailedPreconditionError(what)
                                                       : absl::UnavailableError(what);
  }
  return absl::OkStatus();
}

}  // namespace gpulet::plugin
