// KubeConfig: where the API server is and how gpulet proves who it is, from the pod's
// service account (in-cluster) or from a kubeconfig file (--kubeconfig, out of cluster).
//
// In-cluster, as client-go's rest.InClusterConfig: the server is
// https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT, the CA is the service account's
// ca.crt, the bearer token is read from its token file (and re-read when the kubelet rotates
// it: KubeConfig keeps the path, kube/kube_client.h re-reads it), the namespace from its
// namespace file. The paths are InClusterSource's, injectable for tests.
//
// A kubeconfig file (YAML): current-context (or the context asked for) names a cluster and
// a user. From the cluster: server, certificate-authority (a path, relative to the file's
// directory as kubectl resolves it) or certificate-authority-data (base64 PEM), and
// tls-server-name. From the user: tokenFile (preferred: it can rotate) or token, and/or
// client-certificate(-data) with client-key(-data). From the context: namespace.
//
// Fail closed: an http:// server, insecure-skip-tls-verify: true, a server without a CA (the
// system trust store is never used for a cluster's API server), a proxy-url, and auth gpulet
// cannot do (exec plugins, auth-provider, username/password) are refused, each error naming
// the file and the key and saying what to do. No user credentials at all is refused too: every
// call gpulet makes needs them.
//
// Thread-safety: the functions read files and are safe from any thread; a KubeConfig is a
// plain value.
#ifndef GPULET_KUBE_KUBE_CONFIG_H_
#define GPULET_KUBE_KUBE_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"

namespace gpulet::kube {

struct KubeConfig {
  std::string server;  // "https://host:port" as configured (for messages)
  std::string host;    // DNS name or IP literal, IPv6 without brackets
  int port = 443;
  std::string base_path;        // a path prefix of the server URL ("" or "/k8s/clusters/c-1")
  std::string tls_server_name;  // names the certificate must carry instead of `host`
  std::string ca_pem;           // the CA bundle (PEM)
  std::string ca_source;  // where it came from: a path, or "<file> certificate-authority-data"
  // Credentials: a bearer token from `token_file` (re-read when it changes) or the fixed
  // `token`; and/or a client certificate.
  std::string token;
  std::string token_file;
  std::string client_cert_pem;
  std::string client_key_pem;
  std::string namespace_name;  // the service account's or context's namespace; may be empty
  std::string source;          // "in-cluster service account" or "kubeconfig <path>"
};

// The service account's files and the environment, as the kubelet provides them.
struct InClusterSource {
  std::string host;  // $KUBERNETES_SERVICE_HOST
  std::string port;  // $KUBERNETES_SERVICE_PORT
  std::string token_file = "/var/run/secrets/kubernetes.io/serviceaccount/token";
  std::string ca_file = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
  std::string namespace_file = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

  // host and port from the process environment, the standard paths.
  static InClusterSource FromEnvironment();
};

// Errors: FailedPrecondition (not in a cluster: the variables are unset), NotFound /
// PermissionDenied / InvalidArgument (a file missing, unreadable or wrong), each naming it.
absl::StatusOr<KubeConfig> LoadInClusterConfig(const InClusterSource& source);

// `context` empty: the file's current-context. Errors name `path` and the key at fault.
absl::StatusOr<KubeConfig> LoadKubeconfig(const std::string& path, const std::string& context = "");

// Splits an https:// URL into host, port and path prefix; `where` names it in errors.
absl::Status ParseServerUrl(const std::string& url, const std::string& where, KubeConfig* config);

}  // namespace gpulet::kube

#endif  // GPULET_KUBE_KUBE_CONFIG_H_
