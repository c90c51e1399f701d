// The API-server stand-in's resource.k8s.io/v1 ResourceSlices and ResourceClaims (the objects
// a DRA driver writes and reads, issue 16), through the API client over real TLS: create, get,
// list by node, update with resourceVersion conflicts, delete, strict fields, and the limits
// and messages of the API server's validation.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kube/kube_client.h"
#include "kube/tls_transport.h"
#include "testing/fake_apiserver.h"

namespace gpulet::kube {
namespace {

using nlohmann::json;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Server = gpulet::testing::FakeApiServer;

constexpr char kSlices[] = "/apis/resource.k8s.io/v1/resourceslices";

json Device(const std::string& name) {
  return {{"name", name},
          {"attributes",
           {{"uuid", {{"string", "GPU-" + name}}},
            {"gpu.gpulet.dev/index", {{"int", 0}}},
            {"driverVersion", {{"version", "570.124.6"}}}}},
          {"capacity", {{"memory", {{"value", "24Gi"}}}}}};
}

json Slice(const std::string& name, const std::string& node, int devices = 1) {
  json list = json::array();
  for (int i = 0; i < devices; ++i) list.push_back(Device(absl::StrCat("gpu-", i)));
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceSlice"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"driver", "gpu.gpulet.dev"},
            {"pool", {{"name", node}, {"generation", 1}, {"resourceSliceCount", 1}}},
            {"nodeName", node},
            {"devices", list}}}};
}

class ResourceApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.Start("token-1").ok());
    const KubeConfig c = server_.ClientConfig("token-1");
    KubeClientOptions o;
    o.qps = 0;
    o.initial_backoff = absl::Milliseconds(5);
    absl::StatusOr<std::unique_ptr<KubeClient>> client = KubeClient::FromConfig(c, o, RealClock());
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
  }

  // DELETE through the transport (the client has no Delete: gpulet never deletes yet).
  absl::StatusOr<HttpResponse> Delete(const std::string& path) {
    TlsTransportOptions t;
    t.host = "127.0.0.1";
    t.port = server_.port();
    t.ca_pem = server_.ca().cert_pem;
    t.ca_source = "the test CA";
    absl::StatusOr<std::unique_ptr<TlsTransport>> transport = TlsTransport::Create(t);
    if (!transport.ok()) return transport.status();
    return (*transport)
        ->RoundTrip({"DELETE", path, {{"Authorization", "Bearer token-1"}}, ""}, absl::Seconds(10));
  }

  Server server_;
  std::unique_ptr<KubeClient> client_;
};

TEST_F(ResourceApiTest, SlicesCreateGetListUpdateDelete) {
  absl::StatusOr<json> a = client_->Create(kSlices, Slice("node-a-gpu.gpulet.dev", "node-a", 2));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)["metadata"]["generation"], 1);
  ASSERT_TRUE(client_->Create(kSlices, Slice("node-b-gpu.gpulet.dev", "node-b")).ok());
  json generated = Slice("", "node-a");
  generated["metadata"] = {{"generateName", "node-a-gpu.gpulet.dev-"}};
  absl::StatusOr<json> g = client_->Create(kSlices, generated);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_THAT((*g)["metadata"]["name"].get<std::string>(), HasSubstr("node-a-gpu.gpulet.dev-"));

  absl::Status again = client_->Create(kSlices, Slice("node-b-gpu.gpulet.dev", "node-b")).status();
  EXPECT_TRUE(absl::IsAlreadyExists(again)) << again;

  absl::StatusOr<json> got = client_->Get(absl::StrCat(kSlices, "/node-a-gpu.gpulet.dev"));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)["spec"]["devices"].size(), 2u);

  // Listed by node, as a driver finds its own slices.
  absl::StatusOr<json> mine =
      client_->Get(absl::StrCat(kSlices, "?fieldSelector=spec.nodeName%3Dnode-a"));
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_EQ((*mine)["kind"], "ResourceSliceList");
  EXPECT_EQ((*mine)["items"].size(), 2u);
  absl::StatusOr<json> both = client_->Get(
      absl::StrCat(kSlices, "?fieldSelector=spec.nodeName%3Dnode-b,spec.driver%3Dgpu.gpulet.dev"));
  ASSERT_TRUE(both.ok()) << both.status();
  ASSERT_EQ((*both)["items"].size(), 1u);
  EXPECT_EQ((*both)["items"][0]["metadata"]["name"], "node-b-gpu.gpulet.dev");
  absl::Status unsupported =
      client_->Get(absl::StrCat(kSlices, "?fieldSelector=spec.pool.name%3Dx")).status();
  EXPECT_THAT(std::string(unsupported.message()), HasSubstr("field label not supported"));

  // Update: a new generation of the pool; the stale resourceVersion then conflicts.
  json next = *got;
  next["spec"]["pool"]["generation"] = 2;
  next["spec"]["devices"][0]["taints"] =
      json::array({{{"key", "gpu.gpulet.dev/xid"}, {"value", "79"}, {"effect", "NoExecute"}}});
  absl::StatusOr<json> updated =
      client_->Update(absl::StrCat(kSlices, "/node-a-gpu.gpulet.dev"), next);
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_EQ((*updated)["metadata"]["generation"], 2);
  absl::Status stale =
      client_->Update(absl::StrCat(kSlices, "/node-a-gpu.gpulet.dev"), next).status();
  EXPECT_TRUE(IsConflict(stale)) << stale;
  EXPECT_THAT(std::string(stale.message()),
              HasSubstr("Operation cannot be fulfilled on resourceslices.resource.k8s.io"));

  absl::StatusOr<HttpResponse> del = Delete(absl::StrCat(kSlices, "/node-b-gpu.gpulet.dev"));
  ASSERT_TRUE(del.ok()) << del.status();
  EXPECT_EQ(del->status, 200);
  EXPECT_EQ(json::parse(del->body)["metadata"]["name"], "node-b-gpu.gpulet.dev");
  EXPECT_FALSE(server_.ResourceSlice("node-b-gpu.gpulet.dev").has_value());
  del = Delete(absl::StrCat(kSlices, "/node-b-gpu.gpulet.dev"));
  ASSERT_TRUE(del.ok());
  EXPECT_EQ(del->status, 404);
  absl::Status missing = client_->Get(absl::StrCat(kSlices, "/node-b-gpu.gpulet.dev")).status();
  EXPECT_TRUE(absl::IsNotFound(missing)) << missing;
  EXPECT_THAT(std::string(missing.message()),
              HasSubstr("resourceslices.resource.k8s.io \"node-b-gpu.gpulet.dev\" not found"));
}

TEST_F(ResourceApiTest, SliceWritesAreValidatedStrictly) {
  json unknown = Slice("s1", "node-a");
  unknown["spec"]["devices"][0]["basic"] = json::object();  // v1beta1's shape, not v1's
  absl::Status s = client_->Create(kSlices, unknown).status();
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("ResourceSlice in version \"v1\" cannot be handled as a ResourceSlice: "
                        "strict decoding error: unknown field \"spec.devices[0].basic\""));
  json bad_attr = Slice("s1", "node-a");
  bad_attr["spec"]["devices"][0]["attributes"]["uuid"]["strin"] = "x";
  s = client_->Create(kSlices, bad_attr).status();
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("unknown field \"spec.devices[0].attributes[uuid].strin\""));

  json too_many = Slice("s1", "node-a", 129);
  s = client_->Create(kSlices, too_many).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(GetApiStatus(s)->code, 422);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("ResourceSlice.resource.k8s.io \"s1\" is invalid: spec.devices: Too "
                        "many: 129: must have at most 128 items"));
  EXPECT_THAT(server_.ResourceSlices(), IsEmpty());

  ASSERT_TRUE(client_->Create(kSlices, Slice("s1", "node-a")).ok());
  json moved = *server_.ResourceSlice("s1");
  moved["spec"]["nodeName"] = "node-b";
  moved["spec"]["pool"]["name"] = "node-b";
  s = client_->Update(absl::StrCat(kSlices, "/s1"), moved).status();
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("spec.nodeName: Invalid value: \"node-b\": field is immutable"));
}

// The validation itself, case by case, with the API server's wording.
TEST(ResourceSliceValidationTest, EnforcesTheDocumentedLimitsAndRequiredFields) {
  struct Case {
    const char* name;
    std::function<void(json&)> change;
    std::string error;  // "" when valid
  };
  auto device = [](json& s) -> json& { return s["spec"]["devices"][0]; };
  const std::vector<Case> cases = {
      {"valid", [](json&) {}, ""},
      {"driver missing", [](json& s) { s["spec"].erase("driver"); }, "spec.driver: Required value"},
      {"driver not a DNS subdomain", [](json& s) { s["spec"]["driver"] = "GPU_driver"; },
       "spec.driver: Invalid value: \"GPU_driver\": a lowercase RFC 1123 subdomain"},
      {"driver too long", [](json& s) { s["spec"]["driver"] = std::string(64, 'a'); },
       "spec.driver: Too long: may not be more than 63 bytes"},
      {"pool name missing", [](json& s) { s["spec"]["pool"].erase("name"); },
       "spec.pool.name: Required value"},
      {"pool generation missing is 0, fine", [](json& s) { s["spec"]["pool"].erase("generation"); },
       ""},
      {"negative generation", [](json& s) { s["spec"]["pool"]["generation"] = -1; },
       "spec.pool.generation: Invalid value: -1: must be greater than or equal to zero"},
      {"slice count missing", [](json& s) { s["spec"]["pool"].erase("resourceSliceCount"); },
       "spec.pool.resourceSliceCount: Invalid value: 0: must be greater than zero"},
      {"no node selection", [](json& s) { s["spec"].erase("nodeName"); },
       "spec: Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, "
       "`perDeviceNodeSelection` is required"},
      {"two node selections", [](json& s) { s["spec"]["allNodes"] = true; },
       "spec: Invalid value: \"{`nodeName`, `allNodes`}\": exactly one of"},
      {"allNodes false", [](json& s) { s["spec"]["allNodes"] = false; },
       "spec.allNodes: Invalid value: false: must be either unset or set to true"},
      {"128 devices", [](json& s) { s = Slice("s", "n", 128); }, ""},
      {"129 devices", [](json& s) { s = Slice("s", "n", 129); },
       "spec.devices: Too many: 129: must have at most 128 items"},
      {"65 devices with a taint",
       [](json& s) {
         s = Slice("s", "n", 65);
         s["spec"]["devices"][3]["taints"] =
             json::array({{{"key", "gpu.gpulet.dev/xid"}, {"effect", "NoSchedule"}}});
       },
       "spec.devices: Too many: 65: must have at most 64 items"},
      {"device name not a DNS label", [&](json& s) { device(s)["name"] = "GPU.0"; },
       "spec.devices[0].name: Invalid value: \"GPU.0\": a lowercase RFC 1123 label"},
      {"duplicate device", [](json& s) { s["spec"]["devices"].push_back(Device("gpu-0")); },
       "spec.devices[1].name: Duplicate value: \"gpu-0\""},
      {"33 attributes and capacities",
       [&](json& s) {
         for (int i = 0; i < 29; ++i) device(s)["attributes"][absl::StrCat("a", i)] = {{"int", i}};
       },
       "spec.devices[0]: Invalid value: 33: the total number of attributes and capacities must "
       "not exceed 32"},
      {"attribute with two values", [&](json& s) { device(s)["attributes"]["uuid"]["int"] = 1; },
       "spec.devices[0].attributes[uuid]: Invalid value: {\"int\":1,\"string\":\"GPU-gpu-0\"}: "
       "exactly one value must be specified"},
      {"string attribute of 65 bytes",
       [&](json& s) { device(s)["attributes"]["uuid"]["string"] = std::string(65, 'x'); },
       "spec.devices[0].attributes[uuid].string: Too long: may not be more than 64 bytes"},
      {"17 taints",
       [&](json& s) {
         for (int i = 0; i < 17; ++i) {
           device(s)["taints"].push_back({{"key", absl::StrCat("k", i)}, {"effect", "None"}});
         }
       },
       "spec.devices[0].taints: Too many: 17: must have at most 16 items"},
      {"taint effect unknown",
       [&](json& s) {
         device(s)["taints"] = json::array({{{"key", "k"}, {"effect", "Evict"}}});
       },
       "spec.devices[0].taints[0].effect: Unsupported value: \"Evict\": supported values: "
       "\"NoExecute\", \"NoSchedule\", \"None\""},
      {"request policy without multiple allocations",
       [&](json& s) {
         device(s)["capacity"]["memory"]["requestPolicy"] = {{"default", "1Gi"}};
       },
       "spec.devices[0].capacity[memory].requestPolicy: Forbidden: allowMultipleAllocations must "
       "be true"},
      {"request policy with multiple allocations",
       [&](json& s) {
         device(s)["allowMultipleAllocations"] = true;
         device(s)["capacity"]["memory"]["requestPolicy"] = {{"default", "1Gi"}};
       },
       ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    json slice = Slice("s", "n");
    c.change(slice);
    std::vector<std::string> errs = gpulet::testing::ValidateResourceSlice(slice, nullptr);
    if (c.error.empty()) {
      EXPECT_THAT(errs, IsEmpty());
    } else {
      EXPECT_THAT(errs, Contains(HasSubstr(c.error)));
    }
  }
}

TEST_F(ResourceApiTest, ClaimsAreReadAsTheSchedulerLeftThem) {
  server_.PutResourceClaim(json::parse(R"({
    "metadata": {"name": "ollama-gpu", "namespace": "ml"},
    "spec": {"devices": {"requests": [
      {"name": "gpu", "exactly": {"deviceClassName": "gpu.gpulet.dev"}}]}},
    "status": {"allocation": {"devices": {"results": [
      {"request": "gpu", "driver": "gpu.gpulet.dev", "pool": "node-a", "device": "gpu-0"}]}}}
  })"));
  absl::StatusOr<json> claim =
      client_->Get("/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/ollama-gpu");
  ASSERT_TRUE(claim.ok()) << claim.status();
  EXPECT_EQ((*claim)["kind"], "ResourceClaim");
  EXPECT_FALSE((*claim)["metadata"]["uid"].get<std::string>().empty());
  EXPECT_EQ((*claim)["status"]["allocation"]["devices"]["results"][0]["device"], "gpu-0");
  server_.DeleteResourceClaim("ml", "ollama-gpu");
  absl::Status gone =
      client_->Get("/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/ollama-gpu").status();
  EXPECT_TRUE(absl::IsNotFound(gone)) << gone;
  EXPECT_THAT(std::string(gone.message()),
              HasSubstr("resourceclaims.resource.k8s.io \"ollama-gpu\" not found"));
}

}  // namespace
}  // namespace gpulet::kube
