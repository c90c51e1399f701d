#include "dra/dra_service.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dra/registration.h"
#include "grpcpp/grpcpp.h"
#include "proto/dra/v1/api.grpc.pb.h"
#include "proto/dra/v1beta1/api.grpc.pb.h"

namespace gpulet::dra {
namespace {

namespace v1 = ::k8s::io::kubelet::pkg::apis::dra::v1;
namespace v1beta1 = ::k8s::io::kubelet::pkg::apis::dra::v1beta1;

// The two versions' messages differ only in Device.share_id, so one template serves both.
template <typename Request>
std::vector<ClaimRef> Refs(const Request& req) {
  std::vector<ClaimRef> refs;
  refs.reserve(req.claims_size());
  for (const auto& c : req.claims()) {
    refs.push_back(ClaimRef{.ns = c.namespace_(), .uid = c.uid(), .name = c.name()});
  }
  return refs;
}

template <typename Response>
void FillPrepare(const std::map<std::string, PrepareResult>& results, Response* out) {
  for (const auto& [uid, r] : results) {
    auto& entry = (*out->mutable_claims())[uid];
    if (!r.error.empty()) {
      entry.set_error(r.error);
      continue;
    }
    for (const PreparedDevice& d : r.devices) {
      auto* dev = entry.add_devices();
      for (const std::string& n : d.request_names) dev->add_request_names(n);
      dev->set_pool_name(d.pool);
      dev->set_device_name(d.device);
      for (const std::string& id : d.cdi_device_ids) dev->add_cdi_device_ids(id);
      if constexpr (requires { dev->set_share_id(d.share_id); }) {
        if (!d.share_id.empty()) dev->set_share_id(d.share_id);
      }
    }
  }
}

template <typename Response>
void FillUnprepare(const std::map<std::string, std::string>& errors, Response* out) {
  for (const auto& [uid, error] : errors) {
    auto& entry = (*out->mutable_claims())[uid];  // present even when empty, as required
    if (!error.empty()) entry.set_error(error);
  }
}

}  // namespace

class DraPluginServer::V1Service final : public v1::DRAPlugin::Service {
 public:
  explicit V1Service(PreparedClaims* claims) : claims_(claims) {}

  grpc::Status NodePrepareResources(grpc::ServerContext*,
                                    const v1::NodePrepareResourcesRequest* req,
                                    v1::NodePrepareResourcesResponse* out) override {
    FillPrepare(claims_->Prepare(Refs(*req)), out);
    return grpc::Status::OK;
  }

  grpc::Status NodeUnprepareResources(grpc::ServerContext*,
                                      const v1::NodeUnprepareResourcesRequest* req,
                                      v1::NodeUnprepareResourcesResponse* out) override {
    FillUnprepare(claims_->Unprepare(Refs(*req)), out);
    return grpc::Status::OK;
  }

 private:
  PreparedClaims* claims_;
};

class DraPluginServer::V1beta1Service final : public v1beta1::DRAPlugin::Service {
 public:
  explicit V1beta1Service(PreparedClaims* claims) : claims_(claims) {}

  grpc::Status NodePrepareResources(grpc::ServerContext*,
                                    const v1beta1::NodePrepareResourcesRequest* req,
                                    v1beta1::NodePrepareResourcesResponse* out) override {
    FillPrepare(claims_->Prepare(Refs(*req)), out);
    return grpc::Status::OK;
  }

  grpc::Status NodeUnprepareResources(grpc::ServerContext*,
                                      const v1beta1::NodeUnprepareResourcesRequest* req,
                                      v1beta1::NodeUnprepareResourcesResponse* out) override {
    FillUnprepare(claims_->Unprepare(Refs(*req)), out);
    return grpc::Status::OK;
  }

 private:
  PreparedClaims* claims_;
};

DraPluginServer::DraPluginServer(std::string socket_path, PreparedClaims* claims)
    : socket_path_(std::move(socket_path)), claims_(claims) {}

DraPluginServer::~DraPluginServer() { Stop(); }

absl::Status DraPluginServer::Start() {
  if (running()) return absl::OkStatus();
  absl::Status s = CheckSocketPath(socket_path_, "DRA service");
  if (!s.ok()) return s;
  size_t slash = socket_path_.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    s = MakeDirs(socket_path_.substr(0, slash));
    if (!s.ok()) return s;
  }
  unlink(socket_path_.c_str());  // a stale socket from an earlier run would make bind fail
  v1_ = std::make_unique<V1Service>(claims_);
  v1beta1_ = std::make_unique<V1beta1Service>(claims_);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("unix://", socket_path_),
                           grpc::InsecureServerCredentials());
  builder.RegisterService(v1_.get());
  builder.RegisterService(v1beta1_.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) {
    v1_.reset();
    v1beta1_.reset();
    return absl::UnavailableError(
        absl::StrCat("cannot serve the DRA service on ", socket_path_,
                     ": check that the directory is writable (mount the kubelet's plugins "
                     "directory into the gpulet pod)"));
  }
  chmod(socket_path_.c_str(), 0600);  // only root (the kubelet) calls it
  struct stat st;
  absl::MutexLock lock(&mu_);
  server_ = std::move(server);
  socket_inode_ = stat(socket_path_.c_str(), &st) == 0 ? st.st_ino : 0;
  return absl::OkStatus();
}

void DraPluginServer::Stop() {
  std::unique_ptr<grpc::Server> server;
  ino_t inode = 0;
  {
    absl::MutexLock lock(&mu_);
    server = std::move(server_);
    inode = std::exchange(socket_inode_, 0);
  }
  if (!server) return;
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server->Wait();
  server.reset();
  v1_.reset();
  v1beta1_.reset();
  struct stat st;
  if (stat(socket_path_.c_str(), &st) == 0 && st.st_ino == inode) unlink(socket_path_.c_str());
}

bool DraPluginServer::running() const {
  absl::MutexLock lock(&mu_);
  return server_ != nullptr;
}

bool DraPluginServer::SocketIntact() const {
  absl::MutexLock lock(&mu_);
  struct stat st;
  return server_ != nullptr && stat(socket_path_.c_str(), &st) == 0 && st.st_ino == socket_inode_ &&
         S_ISSOCK(st.st_mode);
}

}  // namespace gpulet::dra
