#include "dra/socket_server.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "dra/registration.h"
#include "grpcpp/grpcpp.h"

namespace gpulet::dra {

SocketServer::SocketServer(std::string socket_path, std::string what, std::string mount_hint)
    : socket_path_(std::move(socket_path)),
      what_(std::move(what)),
      mount_hint_(std::move(mount_hint)) {}

SocketServer::~SocketServer() { Stop(); }

absl::Status SocketServer::Start(const std::vector<grpc::Service*>& services) {
  absl::Status s = CheckSocketPath(socket_path_, what_);
  if (!s.ok()) return s;
  size_t slash = socket_path_.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    s = MakeDirs(socket_path_.substr(0, slash));
    if (!s.ok()) return s;
  }
  unlink(socket_path_.c_str());  // a stale socket from an earlier run would make bind fail
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("unix://", socket_path_),
                           grpc::InsecureServerCredentials());
  for (grpc::Service* service : services) builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) {
    return absl::UnavailableError(absl::StrCat("cannot serve the ", what_, " on ", socket_path_,
                                               ": check that the directory is writable (mount "
                                               "the kubelet's ",
                                               mount_hint_, " directory into the gpulet pod)"));
  }
  chmod(socket_path_.c_str(), 0600);
  struct stat st;
  absl::MutexLock lock(&mu_);
  server_ = std::move(server);
  socket_inode_ = stat(socket_path_.c_str(), &st) == 0 ? st.st_ino : 0;
  return absl::OkStatus();
}

void SocketServer::Stop() {
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
  struct stat st;
  if (stat(socket_path_.c_str(), &st) == 0 && st.st_ino == inode) unlink(socket_path_.c_str());
}

bool SocketServer::running() const {
  absl::MutexLock lock(&mu_);
  return server_ != nullptr;
}

bool SocketServer::SocketIntact() const {
  absl::MutexLock lock(&mu_);
  struct stat st;
  return server_ != nullptr && stat(socket_path_.c_str(), &st) == 0 && st.st_ino == socket_inode_ &&
         S_ISSOCK(st.st_mode);
}

}  // namespace gpulet::dra
