// BearerToken: the token gpulet sends as "Authorization: Bearer ...", fixed (a kubeconfig's
// token) or read from a file (the service account's projected token, a kubeconfig's
// tokenFile). Bound service-account tokens expire and the kubelet rewrites the file well
// before they do, so a file's token is re-read whenever the file's identity, size or
// modification time differ from the last read: one stat() per request, cheap next to a TLS
// round trip. After a 401 the client calls Reload(), which re-reads regardless (a rewrite
// within the file system's timestamp granularity, same size, would otherwise go unseen).
//
// Thread-safety: all methods are thread-safe.
#ifndef GPULET_KUBE_BEARER_TOKEN_H_
#define GPULET_KUBE_BEARER_TOKEN_H_

#include <sys/types.h>

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace gpulet::kube {

class BearerToken {
 public:
  static BearerToken Fixed(std::string token);
  static BearerToken FromFile(std::string path);
  BearerToken(const BearerToken& other);

  // The token to send now ("" when there is none: client-certificate auth). Errors name the
  // file and say what to do.
  absl::StatusOr<std::string> Get();
  // Re-reads the file; true when its token differs from `sent` (worth one more try).
  bool Reload(const std::string& sent);

  const std::string& file() const { return path_; }
  // For messages: "the token file /var/run/.../token" or "the kubeconfig's token".
  std::string Describe() const;

 private:
  BearerToken() = default;
  absl::StatusOr<std::string> ReadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::string path_;  // empty: fixed_
  std::string fixed_;
  absl::Mutex mu_;
  std::string token_ ABSL_GUARDED_BY(mu_);
  bool read_ ABSL_GUARDED_BY(mu_) = false;
  dev_t dev_ ABSL_GUARDED_BY(mu_) = 0;
  ino_t ino_ ABSL_GUARDED_BY(mu_) = 0;
  off_t size_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t mtime_ns_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gpulet::kube

#endif  // GPULET_KUBE_BEARER_TOKEN_H_
