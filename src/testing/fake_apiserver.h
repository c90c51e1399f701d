// FakeApiServer: a stand-in Kubernetes API server for tests. It is NOT the real server: it
// is written from the Kubernetes API reference's documented behaviour (API Concepts: "Efficient
// detection of changes", "Resource versions", "Field validation", "Watch bookmarks"; the Node
// and events.k8s.io/v1 Event references) for the few endpoints gpulet uses, and where the
// reference is silent it copies what a real server sends (the Status objects' wording).
//
// The real API server is checked by `make e2e` (docs/e2e.md), scenarios registers,
// unhealthy_and_back, config_reload, taint_evicts and dra, on Kubernetes 1.34 and 1.37.
//
// HTTPS on 127.0.0.1 (a port of its own), with a CA and a server certificate made at start
// (testing/test_pki.h; IP SAN 127.0.0.1, DNS SAN localhost). It is cpp-httplib's SSLServer
// (tests only: Debian's cpp-httplib is built with OpenSSL): an HTTP implementation written
// by others, so the client's own HTTP/1.1 parser and TLS code are tested against a peer that
// is not their mirror image.
//
// Endpoints and semantics:
//   GET    /api/v1/nodes/{name}                 the Node, or 404 NotFound
//   PATCH  /api/v1/nodes/{name}                 merge or strategic-merge patch; status kept
//   PATCH  /api/v1/nodes/{name}/status          the same on the status subresource; spec kept
//   PUT    /api/v1/nodes/{name}                 update (status kept)
//   GET    /api/v1/nodes[?fieldSelector=metadata.name%3D{name}]   NodeList, with its
//          resourceVersion; with watch=true a watch (below)
//   POST   /apis/events.k8s.io/v1/namespaces/{ns}/events         create (201), 409
//          AlreadyExists for a taken name, 422 Invalid without the required fields or past
//          the API server's limits (name a DNS subdomain, reportingInstance, action and
//          reason 128 characters, note 1024)
//   PATCH  /apis/events.k8s.io/v1/namespaces/{ns}/events/{name}  patch (series updates)
//   GET    /apis/events.k8s.io/v1/namespaces/{ns}/events/{name}
//   resource.k8s.io/v1 (DRA; limits and messages from kubernetes/api resource/v1/types.go at
//   v0.35.0 and the API server's resource validation, see fake_apiserver.cc):
//   POST   /apis/resource.k8s.io/v1/resourceslices                  create (201; name or
//          generateName), 409 AlreadyExists, 422 Invalid (ValidateResourceSlice below)
//   GET    /apis/resource.k8s.io/v1/resourceslices/{name}           the slice, or 404
//   GET    /apis/resource.k8s.io/v1/resourceslices[?fieldSelector=spec.nodeName%3D{node}
//          [,spec.driver%3D{driver}]]                              ResourceSliceList
//   PUT    /apis/resource.k8s.io/v1/resourceslices/{name}           update: 409 Conflict on a
//          stale metadata.resourceVersion (none: unconditional, as the real strategy allows),
//          422 on an invalid spec or a changed spec.driver / spec.nodeName (immutable)
//   DELETE /apis/resource.k8s.io/v1/resourceslices/{name}           200 with the object, 404
//   GET    /apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}   the claim, or 404
//          (claims are put by the test: PutResourceClaim)
//   POST   /api/v1/namespaces/{ns}/pods/{name}/eviction   policy/v1 Eviction (pods are put by
//          the test: PutPod): 201 with a Success Status, and the pod is gone; 404 NotFound for
//          no such pod; 400 for a body that is not an Eviction of that pod; 409 Conflict when
//          deleteOptions.preconditions.uid names another pod; 429 TooManyRequests with the
//          real message and a DisruptionBudget cause while the test blocks the pod's
//          evictions (BlockEvictions: a PodDisruptionBudget that allows no disruption).
//          (The real server is checked by `make e2e`'s taint_evicts scenario for evictions in
//          general; gpulet's own evictions are checked here only.)
//   GET    /api/v1/pods[?fieldSelector=spec.nodeName%3D{node}]   PodList
//   coordination.k8s.io/v1 Leases (the reboot rung's turns; the real server: `make e2e`'s
//   eviction scenario's API server, and the API reference's Lease):
//   GET    /apis/coordination.k8s.io/v1/namespaces/{ns}/leases[?labelSelector={key}]  LeaseList
//   POST   /apis/coordination.k8s.io/v1/namespaces/{ns}/leases   create (201), 409 AlreadyExists
//   GET    /apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}   the Lease, or 404
//   PUT    /apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}   update: 409 Conflict on a
//          stale metadata.resourceVersion
//   DELETE /apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}   200 Success, 404
// Every request needs "Authorization: Bearer <token>" with the token now accepted
// (SetToken rotates it): else 401 with the real server's Status ("Unauthorized").
// Writes: fieldValidation=Strict rejects an unknown field with 400 BadRequest and the real
// message, `strict decoding error: unknown field "spec.foo"`; without it (the server's
// default, Warn) the field is dropped and a `Warning: 299 - "unknown field \"spec.foo\""`
// header says so. The fields known are those of Node and Event that gpulet may write (the
// API reference's, not every one), and every field of resource.k8s.io/v1 ResourceSlice.
// resourceVersion: one counter for the server, bumped by every write and stored in
// metadata.resourceVersion; a patch or update whose metadata.resourceVersion is set and differs:
// 409 Conflict with the real message. Strategic merge patches merge status.conditions by type and
// status.addresses by type (their patchMergeKey), honour "$patch": "delete" in those lists, and
// drop $setElementOrder directives; every other list is replaced, as the Node's patch strategy
// says. Watches (GET with watch=true): chunked JSON lines, one watch event each. Without a
// resourceVersion (or "0"), ADDED events for the current objects first; with one, every later
// change from history; one older than the compaction point (Compact) gets HTTP 200 and an
// ERROR event holding a Status with code 410 (reason Expired), then the end of the stream, as
// the real server does. BOOKMARK events go to watches that asked allowWatchBookmarks=true
// when the test calls SendBookmarks(). DropWatches() cuts every watch connection without
// ending its chunked body (a dropped connection, not a server timeout).
// Scripted failures: FailNext(n, status, retry_after) answers the next n authenticated
// non-watch requests with `status` (429 TooManyRequests with Retry-After, or a 5xx).
// Every request is recorded (Requests()) for assertions.
//
// Thread-safety: all methods are thread-safe; handlers run on httplib's worker threads.
#ifndef GPULET_TESTING_FAKE_APISERVER_H_
#define GPULET_TESTING_FAKE_APISERVER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kube/kube_config.h"
#include "nlohmann/json.hpp"
#include "testing/test_pki.h"

namespace httplib {
class SSLServer;
struct Request;
struct Response;
}  // namespace httplib

namespace gpulet::testing {

class FakeApiServer {
 public:
  struct RecordedRequest {
    std::string method;
    std::string target;  // path and query as sent
    std::string path;
    std::multimap<std::string, std::string> params;  // decoded query
    std::string authorization;
    std::string content_type;
    std::string body;
    int status = 0;  // the status answered (200 for a watch, even one that ends in ERROR)
  };

  FakeApiServer();
  ~FakeApiServer();
  FakeApiServer(const FakeApiServer&) = delete;
  FakeApiServer& operator=(const FakeApiServer&) = delete;

  // Makes the PKI and starts serving; `token` is the bearer token accepted.
  absl::Status Start(const std::string& token);
  void Stop();

  int port() const { return port_; }
  std::string url() const;  // https://127.0.0.1:<port>
  // A kubeconfig for this server (its CA, `token`), as gpulet's --kubeconfig reads it.
  std::string Kubeconfig(const std::string& token) const;
  // The same as a parsed config, for a KubeClient in the test's process.
  kube::KubeConfig ClientConfig(const std::string& token) const;
  const TestCert& ca() const { return ca_; }
  const TestCert& server_cert() const { return server_cert_; }

  // Objects. AddNode stores (or replaces) a Node, stamping resourceVersion, and tells the
  // watches (ADDED or MODIFIED).
  void AddNode(nlohmann::json node);
  std::optional<nlohmann::json> Node(const std::string& name) const;
  std::vector<nlohmann::json> Events() const;
  // The condition of `type` in Node `name`'s status, or null when either is missing.
  nlohmann::json NodeCondition(const std::string& name, const std::string& type) const;
  // The stored Events whose reason is `reason`.
  std::vector<nlohmann::json> EventsWithReason(const std::string& reason) const;
  int64_t resource_version() const;

  // DRA objects. ResourceSlices as stored (by name); PutResourceClaim stores (or replaces) a
  // ResourceClaim as the scheduler would have left it (uid and resourceVersion stamped when
  // missing), for gpulet to GET.
  std::vector<nlohmann::json> ResourceSlices() const;
  std::optional<nlohmann::json> ResourceSlice(const std::string& name) const;
  void PutResourceClaim(nlohmann::json claim);
  void DeleteResourceClaim(const std::string& ns, const std::string& name);
  // Pods, for the Eviction API: PutPod stores one (uid stamped when missing); Pod reads one.
  void PutPod(nlohmann::json pod);
  std::optional<nlohmann::json> Pod(const std::string& ns, const std::string& name) const;
  // Leases, as stored ("ns/name"); PutLease stores one (resourceVersion stamped).
  std::optional<nlohmann::json> Lease(const std::string& ns, const std::string& name) const;
  void PutLease(nlohmann::json lease);
  // While set, evicting ns/name answers 429 as a PodDisruptionBudget at its minimum does.
  void BlockEvictions(const std::string& ns, const std::string& name, bool blocked);
  // As an API server with the DRADeviceTaints / DRAConsumableCapacity gates off: slices are
  // stored without spec.devices[].taints / allowMultipleAllocations and capacity
  // requestPolicy, with no error (kubernetes pkg/registry/resource/resourceslice/strategy.go,
  // dropDisabledFields; its "already in use by the old slice" exception is not modelled).
  void SetDraGatesOff(bool device_taints, bool consumable_capacity);

  // Only `token` is accepted from now on.
  void SetToken(const std::string& token);
  // The next `n` authenticated requests that are not watches get `status` (429: reason
  // TooManyRequests) with `Retry-After: retry_after_seconds` when that is >= 0.
  void FailNext(int n, int status, int retry_after_seconds);
  // History before `resource_version` is forgotten: watches from older versions get 410.
  void Compact(int64_t resource_version);
  // A BOOKMARK with the current resourceVersion to every watch that allows bookmarks.
  void SendBookmarks();
  // Cuts every open watch connection.
  void DropWatches();

  std::vector<RecordedRequest> Requests() const;
  // Real-time waits (a guard against a hang; tests pass long before): until `n` requests
  // have been recorded / `n` watches are streaming.
  bool AwaitRequests(size_t n, absl::Duration limit = absl::Seconds(10)) const;
  bool AwaitOpenWatches(int n, absl::Duration limit = absl::Seconds(10)) const;

 private:
  struct Watcher {
    std::string name;  // from fieldSelector metadata.name=..., "" for all
    bool bookmarks = false;
    std::deque<std::string> lines;
    bool drop = false;
    bool done = false;  // end the stream properly after the lines
  };
  struct HistoryEntry {
    int64_t rv;
    std::string type;
    nlohmann::json object;
  };

  using Handler = void (FakeApiServer::*)(const httplib::Request&, httplib::Response&);
  void Route(const char* method, const char* pattern, Handler h);
  void Serve(const httplib::Request& req, httplib::Response& res, Handler h);

  void GetNode(const httplib::Request& req, httplib::Response& res);
  void ListOrWatchNodes(const httplib::Request& req, httplib::Response& res);
  void PatchNode(const httplib::Request& req, httplib::Response& res);
  void PutNode(const httplib::Request& req, httplib::Response& res);
  void CreateEvent(const httplib::Request& req, httplib::Response& res);
  void PatchEvent(const httplib::Request& req, httplib::Response& res);
  void GetEvent(const httplib::Request& req, httplib::Response& res);
  void CreateResourceSlice(const httplib::Request& req, httplib::Response& res);
  void GetResourceSlice(const httplib::Request& req, httplib::Response& res);
  void ListResourceSlices(const httplib::Request& req, httplib::Response& res);
  void PutResourceSlice(const httplib::Request& req, httplib::Response& res);
  void DeleteResourceSlice(const httplib::Request& req, httplib::Response& res);
  void DropDisabledSliceFieldsLocked(nlohmann::json* slice) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void GetResourceClaim(const httplib::Request& req, httplib::Response& res);
  void EvictPod(const httplib::Request& req, httplib::Response& res);
  void ListPods(const httplib::Request& req, httplib::Response& res);
  void ListLeases(const httplib::Request& req, httplib::Response& res);
  void CreateLease(const httplib::Request& req, httplib::Response& res);
  void GetLease(const httplib::Request& req, httplib::Response& res);
  void PutLeaseRequest(const httplib::Request& req, httplib::Response& res);
  void DeleteLease(const httplib::Request& req, httplib::Response& res);

  // The Node `name` that `write` may change: else end() after answering 404 (no such Node)
  // or 409 (`write` carries a resourceVersion that is not the Node's).
  std::map<std::string, nlohmann::json>::iterator WritableNodeLocked(const std::string& name,
                                                                     const nlohmann::json& write,
                                                                     httplib::Response& res)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StoreNodeLocked(nlohmann::json node, const std::string& type)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  TestCert ca_;
  TestCert server_cert_;
  std::unique_ptr<httplib::SSLServer> server_;
  std::thread thread_;
  int port_ = 0;

  mutable absl::Mutex mu_;
  std::string token_ ABSL_GUARDED_BY(mu_);
  int64_t rv_ ABSL_GUARDED_BY(mu_) = 1000;
  int64_t compacted_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, nlohmann::json> nodes_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, nlohmann::json> events_ ABSL_GUARDED_BY(mu_);  // "ns/name"
  std::map<std::string, nlohmann::json> slices_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, nlohmann::json> claims_ ABSL_GUARDED_BY(mu_);  // "ns/name"
  std::map<std::string, nlohmann::json> pods_ ABSL_GUARDED_BY(mu_);    // "ns/name"
  std::set<std::string> eviction_blocked_ ABSL_GUARDED_BY(mu_);        // "ns/name"
  std::map<std::string, nlohmann::json> leases_ ABSL_GUARDED_BY(mu_);  // "ns/name"
  std::vector<HistoryEntry> history_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Watcher>> watchers_ ABSL_GUARDED_BY(mu_);
  bool taints_gate_off_ ABSL_GUARDED_BY(mu_) = false;
  bool capacity_gate_off_ ABSL_GUARDED_BY(mu_) = false;
  int fail_left_ ABSL_GUARDED_BY(mu_) = 0;
  int fail_status_ ABSL_GUARDED_BY(mu_) = 0;
  int fail_retry_after_ ABSL_GUARDED_BY(mu_) = -1;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<RecordedRequest> requests_ ABSL_GUARDED_BY(mu_);
};

// The API server's validation of a resource.k8s.io/v1 ResourceSlice (its spec; `old` is the
// stored object on an update, else null): each error as the server words it inside a 422
// Status message ("spec.driver: Required value", "spec.devices: Too many: 129: must have at
// most 128 items"). Empty when valid. Covers what a driver can get wrong: required fields,
// node selection, the limits of types.go (devices per slice, attributes and capacities per
// device, taints per device, string attribute length), device names (DNS labels, unique),
// attribute values (exactly one), taint effects, request policies only on devices that allow
// multiple allocations, and the immutable spec.driver and spec.nodeName.
std::vector<std::string> ValidateResourceSlice(const nlohmann::json& slice,
                                               const nlohmann::json* old);

}  // namespace gpulet::testing

#endif  // GPULET_TESTING_FAKE_APISERVER_H_
