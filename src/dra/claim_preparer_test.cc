// KubeClaimPreparer against the API-server stand-in (real TLS) and simulator fixture roots:
// whole GPUs, MIG devices, memory shares, every refusal, opaque config, unprepare and
// idempotency; and the pure helpers.
#include "dra/claim_preparer.h"

#include <sys/stat.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cdi/spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kube/kube_client.h"
#include "testing/fake_apiserver.h"
#include "testing/files.h"
#include "testing/homelab.h"
#include "vram/slice_file.h"

namespace gpulet::dra {
namespace {

using json = nlohmann::json;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr char kDriver[] = "gpu.gpulet.dev";
constexpr char kNode[] = "node-a";
constexpr char kH200[] = "GPU-c1a7e0f2-9b34-4d58-8e61-2f0b7a3d0200";

json Result(const std::string& request, const std::string& device,
            const std::string& driver = kDriver, const std::string& pool = kNode) {
  return {{"request", request}, {"driver", driver}, {"pool", pool}, {"device", device}};
}

json Share(const std::string& request, const std::string& device, const std::string& share_id,
           const std::string& memory) {
  json r = Result(request, device);
  r["shareID"] = share_id;
  r["consumedCapacity"] = {{"memory", memory}};
  return r;
}

json GpuConfigParams(const json& sharing) {
  json p = {{"apiVersion", kGpuConfigApiVersion}, {"kind", kGpuConfigKind}};
  if (!sharing.is_null()) p["sharing"] = sharing;
  return p;
}

json Config(const json& parameters, std::vector<std::string> requests = {},
            const std::string& driver = kDriver, const std::string& source = "FromClaim") {
  json c = {{"source", source}, {"opaque", {{"driver", driver}, {"parameters", parameters}}}};
  if (!requests.empty()) c["requests"] = requests;
  return c;
}

// Lists as vectors: a one-element braced list would make json an element, not a list.
json Claim(const std::string& name, const std::string& uid, const std::vector<json>& results,
           const std::vector<json>& configs = {}) {
  json devices = {{"results", json::array()}, {"config", json::array()}};
  for (const json& r : results) devices["results"].push_back(r);
  for (const json& c : configs) devices["config"].push_back(c);
  return {{"metadata", {{"namespace", "ml"}, {"name", name}, {"uid", uid}}},
          {"spec", {{"devices", {{"requests", json::array()}}}}},
          {"status", {{"allocation", {{"devices", devices}}}}}};
}

std::vector<std::string> Env(const cdi::Spec& s) { return s.edits.env; }

std::vector<std::string> NodePaths(const std::vector<cdi::DeviceNode>& nodes) {
  std::vector<std::string> out;
  for (const cdi::DeviceNode& n : nodes) out.push_back(n.path);
  return out;
}

class ClaimPreparerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.Start("token-1").ok());
    const kube::KubeConfig c = server_.ClientConfig("token-1");
    kube::KubeClientOptions o;
    o.qps = 0;
    o.max_attempts = 1;
    absl::StatusOr<std::unique_ptr<kube::KubeClient>> client =
        kube::KubeClient::FromConfig(c, o, RealClock());
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
    UseNode(gpulet::testing::SimRoot("homelab"), gpulet::testing::HomelabInventory());
  }

  void UseNode(const std::string& root, gpu::Inventory inventory) {
    host_ = std::make_unique<HostFs>(root);
    inventory_ = std::move(inventory);
  }

  ClaimPreparerOptions Options() const {
    ClaimPreparerOptions o;
    o.driver = kDriver;
    o.node_name = kNode;
    o.cdi_dir = cdi_dir_;
    o.generator.dev_root = dev_root_;
    o.vram = vram_;
    return o;
  }

  KubeClaimPreparer* Preparer() {
    preparer_ = std::make_unique<KubeClaimPreparer>(
        client_.get(), [this] { return inventory_; }, host_.get(), Options());
    return preparer_.get();
  }

  PrepareResult PrepareOne(const std::string& name, const std::string& uid) {
    std::map<std::string, PrepareResult> r = Preparer()->Prepare({ClaimRef{"ml", uid, name}});
    EXPECT_EQ(r.size(), 1u);
    return r[uid];
  }

  std::string SpecPath(const std::string& uid) const {
    return absl::StrCat(cdi_dir_, "/gpulet.dev-claim_", uid, ".json");
  }

  cdi::Spec ReadSpec(const std::string& uid) const {
    std::string text = gpulet::testing::ReadTextFile(SpecPath(uid));
    absl::StatusOr<cdi::Spec> s = cdi::ParseSpec(text, SpecPath(uid));
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return {};
    EXPECT_TRUE(cdi::ValidateSpec(*s).ok()) << cdi::ValidateSpec(*s);
    return *s;
  }

  bool SpecExists(const std::string& uid) const { return std::filesystem::exists(SpecPath(uid)); }

  gpulet::testing::FakeApiServer server_;
  std::unique_ptr<kube::KubeClient> client_;
  gpulet::testing::ScratchDir scratch_;
  std::string cdi_dir_ = scratch_.path() + "/var/run/cdi";
  ClaimPreparerOptions::Vram vram_;
  std::string dev_root_;  // "" = the host root
  std::unique_ptr<HostFs> host_;
  gpu::Inventory inventory_;
  std::unique_ptr<KubeClaimPreparer> preparer_;
};

TEST_F(ClaimPreparerTest, WholeGpu) {
  server_.PutResourceClaim(Claim("ollama", "uid-a", {Result("gpu", "gpu-1")}));
  PrepareResult r = PrepareOne("ollama", "uid-a");
  ASSERT_EQ(r.error, "");
  PreparedDevice want;
  want.request_names = {"gpu"};
  want.pool = kNode;
  want.device = "gpu-1";
  want.cdi_device_ids = {"gpulet.dev/claim=uid-a-gpu-1"};
  want.share_id = "";
  EXPECT_THAT(r.devices, ElementsAre(want));

  struct stat st;
  ASSERT_EQ(stat(SpecPath("uid-a").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  cdi::Spec s = ReadSpec("uid-a");
  EXPECT_EQ(s.kind, "gpulet.dev/claim");
  ASSERT_EQ(s.devices.size(), 1u);
  EXPECT_EQ(s.devices[0].name, "uid-a-gpu-1");
  EXPECT_THAT(NodePaths(s.devices[0].edits.device_nodes), ElementsAre("/dev/nvidia1"));
  // The node spec's spec-wide edits, and the claim.
  EXPECT_THAT(Env(s), ElementsAre("NVIDIA_VISIBLE_DEVICES=void", "GPULET_DRA_CLAIM=ml/ollama"));
  EXPECT_THAT(NodePaths(s.edits.device_nodes), Contains("/dev/nvidiactl"));
  std::vector<std::string> mounts;
  for (const cdi::Mount& m : s.edits.mounts) mounts.push_back(m.container_path);
  EXPECT_THAT(mounts, Contains("/usr/local/lib/libnvidia-ml.so.570.133.20"));
  EXPECT_THAT(s.edits.hooks, Not(IsEmpty()));
  // The API server was asked for exactly this claim.
  std::vector<std::string> paths;
  for (const auto& req : server_.Requests()) paths.push_back(req.method + " " + req.path);
  EXPECT_THAT(paths,
              ElementsAre("GET /apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/ollama"));
}

TEST_F(ClaimPreparerTest, MigDevice) {
  // The h200-mig fixture with its 1g.18gb at GPU instance 3 (capability minors 30 and 31 in
  // its mig-minors); the dev root has the nodes the driver makes for it.
  gpulet::testing::ScratchDir dev;
  for (const char* node :
       {"nvidia0", "nvidiactl", "nvidia-uvm", "nvidia-caps/nvidia-cap30",
        "nvidia-caps/nvidia-cap31", "nvidia-caps/nvidia-cap12", "nvidia-caps/nvidia-cap13"}) {
    dev.Write(absl::StrCat("dev/", node), "");
  }
  dev_root_ = dev.path();
  const std::string root = gpulet::testing::SimRoot("h200-mig");
  gpu::Inventory inv = gpulet::testing::InventoryFor(
      root, {gpulet::testing::GpuIdentity(0, kH200, "0000:18:00.0", 0)}, "570.133.20");
  ASSERT_EQ(inv.gpus.size(), 1u);
  inv.gpus[0].mig_enabled = true;
  gpu::MigDeviceInfo small;
  small.index = 2;
  small.uuid = "MIG-c1a7e0f2-9b34-5d58-8e61-2f0b7a3d0203";
  small.gpu_instance_id = 3;
  small.compute_instance_id = 0;
  small.profile = "1g.18gb";
  gpu::MigDeviceInfo big = small;
  big.index = 0;
  big.uuid = "MIG-c1a7e0f2-9b34-5d58-8e61-2f0b7a3d0201";
  big.gpu_instance_id = 1;
  big.profile = "3g.71gb";
  inv.gpus[0].mig_devices = {big, small};
  UseNode(root, inv);

  server_.PutResourceClaim(Claim("embed", "uid-m", {Result("mig", "gpu-0-mig-3-0")}));
  PrepareResult r = PrepareOne("embed", "uid-m");
  ASSERT_EQ(r.error, "");
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_EQ(r.devices[0].device, "gpu-0-mig-3-0");
  EXPECT_THAT(r.devices[0].cdi_device_ids, ElementsAre("gpulet.dev/claim=uid-m-gpu-0-mig-3-0"));
  cdi::Spec s = ReadSpec("uid-m");
  ASSERT_EQ(s.devices.size(), 1u);
  EXPECT_THAT(NodePaths(s.devices[0].edits.device_nodes),
              ElementsAre("/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap30",
                          "/dev/nvidia-caps/nvidia-cap31"));
  // The dev root is not the host root: host paths say where the nodes are.
  EXPECT_EQ(s.devices[0].edits.device_nodes[1].host_path,
            dev.path() + "/dev/nvidia-caps/nvidia-cap30");

  // With MIG on, the whole GPU is no device of this node.
  server_.PutResourceClaim(Claim("whole", "uid-w", {Result("gpu", "gpu-0")}));
  r = PrepareOne("whole", "uid-w");
  EXPECT_THAT(r.error, HasSubstr("ResourceClaim ml/whole"));
  EXPECT_THAT(r.error, HasSubstr("device gpu-0 of pool node-a, which this node does not have"));
  EXPECT_FALSE(SpecExists("uid-w"));
}

TEST_F(ClaimPreparerTest, TwoSharesOfOneGpuGetDistinctNamesAndFiles) {
  server_.PutResourceClaim(Claim("ollama", "uid-1", {Share("gpu", "gpu-1", "s-1", "24Gi")}));
  server_.PutResourceClaim(Claim("anpr", "uid-2", {Share("gpu", "gpu-1", "s-2", "4096Mi")}));
  std::map<std::string, PrepareResult> r =
      Preparer()->Prepare({ClaimRef{"ml", "uid-1", "ollama"}, ClaimRef{"ml", "uid-2", "anpr"}});
  ASSERT_EQ(r["uid-1"].error, "");
  ASSERT_EQ(r["uid-2"].error, "");
  ASSERT_EQ(r["uid-1"].devices.size(), 1u);
  ASSERT_EQ(r["uid-2"].devices.size(), 1u);
  EXPECT_EQ(r["uid-1"].devices[0].share_id, "s-1");
  EXPECT_EQ(r["uid-2"].devices[0].share_id, "s-2");
  EXPECT_THAT(r["uid-1"].devices[0].cdi_device_ids, ElementsAre("gpulet.dev/claim=uid-1-gpu-1"));
  EXPECT_THAT(r["uid-2"].devices[0].cdi_device_ids, ElementsAre("gpulet.dev/claim=uid-2-gpu-1"));
  cdi::Spec a = ReadSpec("uid-1"), b = ReadSpec("uid-2");
  EXPECT_THAT(NodePaths(a.devices[0].edits.device_nodes), ElementsAre("/dev/nvidia1"));
  EXPECT_THAT(NodePaths(b.devices[0].edits.device_nodes), ElementsAre("/dev/nvidia1"));
  EXPECT_THAT(Env(a), Contains("GPULET_MEMORY_LIMIT_MIB=24576"));
  EXPECT_THAT(Env(b), Contains("GPULET_MEMORY_LIMIT_MIB=4096"));
  EXPECT_THAT(Env(b), Contains("GPULET_DRA_CLAIM=ml/anpr"));
}

TEST_F(ClaimPreparerTest, TwoSharesOfOneGpuInOneClaimShareACdiDevice) {
  server_.PutResourceClaim(
      Claim("pair", "uid-1",
            {Share("model", "gpu-0", "s-1", "6Gi"), Share("cache", "gpu-0", "s-2", "2Gi")}));
  PrepareResult r = PrepareOne("pair", "uid-1");
  ASSERT_EQ(r.error, "");
  ASSERT_EQ(r.devices.size(), 2u);
  EXPECT_EQ(r.devices[0].cdi_device_ids, r.devices[1].cdi_device_ids);
  EXPECT_THAT(r.devices[1].request_names, ElementsAre("cache"));
  EXPECT_EQ(r.devices[1].share_id, "s-2");
  cdi::Spec s = ReadSpec("uid-1");
  ASSERT_EQ(s.devices.size(), 1u);
  EXPECT_THAT(Env(s), Contains("GPULET_MEMORY_LIMIT_MIB=8192"));
}

TEST_F(ClaimPreparerTest, Refusals) {
  // Not in the API server.
  PrepareResult r = PrepareOne("gone", "uid-g");
  EXPECT_THAT(r.error, HasSubstr("ResourceClaim ml/gone does not exist"));
  // Deleted and created again: another UID.
  server_.PutResourceClaim(Claim("again", "uid-new", {Result("gpu", "gpu-0")}));
  r = PrepareOne("again", "uid-old");
  EXPECT_THAT(r.error, HasSubstr("ResourceClaim ml/again has UID uid-new"));
  EXPECT_THAT(r.error, HasSubstr("deleted and created again"));
  // Not allocated.
  json unallocated = Claim("pending", "uid-p", {});
  unallocated["status"] = json::object();
  server_.PutResourceClaim(unallocated);
  r = PrepareOne("pending", "uid-p");
  EXPECT_THAT(r.error, HasSubstr("ResourceClaim ml/pending: status.allocation is not set"));
  // Allocated on another node, and by another driver.
  server_.PutResourceClaim(Claim("elsewhere", "uid-e",
                                 {Result("gpu", "gpu-0", kDriver, "node-b"),
                                  Result("nic", "eth0", "net.example.com", kNode)}));
  r = PrepareOne("elsewhere", "uid-e");
  EXPECT_THAT(r.error, HasSubstr("ResourceClaim ml/elsewhere"));
  EXPECT_THAT(r.error, HasSubstr("no device of driver gpu.gpulet.dev in pool node-a"));
  // A device the node does not have.
  server_.PutResourceClaim(Claim("phantom", "uid-x", {Result("gpu", "gpu-7")}));
  r = PrepareOne("phantom", "uid-x");
  EXPECT_THAT(r.error, HasSubstr("ResourceClaim ml/phantom: its allocation names device gpu-7"));
  for (const char* uid : {"uid-g", "uid-old", "uid-new", "uid-p", "uid-e", "uid-x"}) {
    EXPECT_FALSE(SpecExists(uid)) << uid;
  }
}

TEST_F(ClaimPreparerTest, OneBadClaimDoesNotFailTheOthers) {
  server_.PutResourceClaim(Claim("good", "uid-1", {Result("gpu", "gpu-0")}));
  std::map<std::string, PrepareResult> r =
      Preparer()->Prepare({ClaimRef{"ml", "uid-1", "good"}, ClaimRef{"ml", "uid-2", "missing"}});
  EXPECT_EQ(r["uid-1"].error, "");
  EXPECT_THAT(r["uid-2"].error, HasSubstr("ml/missing does not exist"));
  EXPECT_TRUE(SpecExists("uid-1"));
}

TEST_F(ClaimPreparerTest, OtherDriversAndPoolsAreIgnored) {
  server_.PutResourceClaim(
      Claim("mixed", "uid-1",
            {Result("nic", "eth0", "net.example.com", kNode), Result("gpu", "gpu-0"),
             Result("gpu2", "gpu-0", kDriver, "node-b"), Result("gpu3", "gpu-1")}));
  PrepareResult r = PrepareOne("mixed", "uid-1");
  ASSERT_EQ(r.error, "");
  ASSERT_EQ(r.devices.size(), 2u);
  EXPECT_EQ(r.devices[0].device, "gpu-0");
  EXPECT_THAT(r.devices[0].request_names, ElementsAre("gpu"));
  EXPECT_EQ(r.devices[1].device, "gpu-1");
  EXPECT_THAT(r.devices[1].request_names, ElementsAre("gpu3"));
  cdi::Spec s = ReadSpec("uid-1");
  ASSERT_EQ(s.devices.size(), 2u);
  EXPECT_EQ(s.devices[0].name, "uid-1-gpu-0");
  EXPECT_EQ(s.devices[1].name, "uid-1-gpu-1");
}

TEST_F(ClaimPreparerTest, OpaqueConfigAccepted) {
  std::vector<json> configs = {
      Config(GpuConfigParams(
          {{"strategy", "TimeSlicing"}, {"timeSlicingConfig", {{"interval", "Default"}}}})),
      // Another driver's config is not ours to read.
      Config({{"anything", "goes"}}, {}, "net.example.com"),
      // Ours, but for a request this claim has no result of.
      Config(GpuConfigParams(
                 {{"strategy", "TimeSlicing"}, {"timeSlicingConfig", {{"interval", "Long"}}}}),
             {"other"})};
  server_.PutResourceClaim(Claim("ts", "uid-1", {Result("gpu", "gpu-0")}, configs));
  EXPECT_EQ(PrepareOne("ts", "uid-1").error, "");
  server_.PutResourceClaim(Claim("excl", "uid-2", {Result("gpu", "gpu-1")},
                                 {Config(GpuConfigParams({{"strategy", "Exclusive"}}))}));
  EXPECT_EQ(PrepareOne("excl", "uid-2").error, "");
}

TEST_F(ClaimPreparerTest, OpaqueConfigRefused) {
  struct Case {
    std::string name;
    std::vector<json> results;
    json config;
    std::string error;
  };
  std::vector<Case> cases = {
      {"long",
       {Result("gpu", "gpu-0")},
       Config(GpuConfigParams(
           {{"strategy", "TimeSlicing"}, {"timeSlicingConfig", {{"interval", "Long"}}}})),
       "NVML offers no public call"},
      {"unknown-field",
       {Result("gpu", "gpu-0")},
       Config(GpuConfigParams({{"strategy", "TimeSlicing"}, {"replicas", 4}})),
       "status.allocation.devices.config[0].opaque: parameters.sharing.replicas: unknown field"},
      {"bad-version",
       {Result("gpu", "gpu-0")},
       Config({{"apiVersion", "resource.nvidia.com/v1beta1"}, {"kind", "GpuConfig"}}),
       "parameters.apiVersion: \"resource.nvidia.com/v1beta1\" is not gpu.gpulet.dev/v1alpha1"},
      {"bad-strategy",
       {Result("gpu", "gpu-0")},
       Config(GpuConfigParams({{"strategy", "MPS"}})),
       "parameters.sharing.strategy: unknown strategy \"MPS\""},
      {"exclusive-share",
       {Share("gpu", "gpu-0", "s-1", "4Gi")},
       Config(GpuConfigParams({{"strategy", "Exclusive"}}), {"gpu"}),
       "is a memory share, but its GpuConfig asks for sharing strategy Exclusive"},
  };
  for (const Case& c : cases) {
    server_.PutResourceClaim(Claim(c.name, "uid-" + c.name, c.results, {c.config}));
    PrepareResult r = PrepareOne(c.name, "uid-" + c.name);
    EXPECT_THAT(r.error, HasSubstr("ResourceClaim ml/" + c.name)) << c.name;
    EXPECT_THAT(r.error, HasSubstr(c.error)) << c.name;
    EXPECT_FALSE(SpecExists("uid-" + c.name)) << c.name;
  }
}

TEST_F(ClaimPreparerTest, AMemoryShareIsHeldToItsSizeByTheEnforcementLibrary) {
  vram_.enforce = true;
  vram_.host_dir = "/var/lib/gpulet/vram";
  vram_.local_dir = scratch_.path() + "/host/var/lib/gpulet/vram";
  vram_.library = scratch_.Write("libgpulet-vram.so", "library");
  server_.PutResourceClaim(Claim("anpr", "uid-2", {Share("gpu", "gpu-1", "s-2", "4096Mi")}));
  PrepareResult r = PrepareOne("anpr", "uid-2");
  ASSERT_EQ(r.error, "");
  cdi::Spec spec = ReadSpec("uid-2");
  EXPECT_THAT(Env(spec), Contains("LD_AUDIT=/run/gpulet/lib/libgpulet-vram.so"));
  EXPECT_THAT(Env(spec), Contains("GPULET_VRAM_SLICE=/run/gpulet/vram/slice"));
  // After the driver's own mounts: the library, read-only, and the claim's slice directory.
  ASSERT_GE(spec.edits.mounts.size(), 2u);
  const cdi::Mount& lib = spec.edits.mounts[spec.edits.mounts.size() - 2];
  const cdi::Mount& dir = spec.edits.mounts.back();
  EXPECT_EQ(lib.host_path, "/var/lib/gpulet/vram/lib/libgpulet-vram.so");
  EXPECT_THAT(lib.options, Contains("ro"));
  EXPECT_EQ(dir.host_path, "/var/lib/gpulet/vram/claim-uid-2");
  EXPECT_EQ(dir.container_path, "/run/gpulet/vram");
  absl::StatusOr<vram::SliceUsage> slice =
      vram::ReadSliceUsage(vram_.local_dir + "/claim-uid-2/slice");
  ASSERT_TRUE(slice.ok()) << slice.status();
  EXPECT_EQ(slice->quota_bytes, 4096ull << 20);
  EXPECT_EQ(slice->owner, "claim ml/anpr");
  // Its GPU, so that the sampler counts the holder as the driver does; no compute share.
  EXPECT_EQ(slice->gpu_uuid, "GPU-8a41d7b9-52c6-4f13-b0e8-7d2c9e155090");
  EXPECT_EQ(slice->compute.share_permille, 0u);
  EXPECT_EQ(gpulet::testing::ReadTextFile(vram_.local_dir + "/lib/libgpulet-vram.so"), "library");
  // Unprepared: the slice's directory goes with the claim's spec.
  preparer_->Unprepare({PreparedClaim{ClaimRef{"ml", "uid-2", "anpr"}, r.devices}});
  EXPECT_FALSE(std::filesystem::exists(vram_.local_dir + "/claim-uid-2"));
  // With computeShare, its share of the RTX 5090's SM time is its share of its memory.
  vram_.compute_share = true;
  inventory_.gpus[1].memory_total_bytes = uint64_t{32607} << 20;  // as NVML reports it
  server_.PutResourceClaim(Claim("anpr", "uid-3", {Share("gpu", "gpu-1", "s-3", "4096Mi")}));
  ASSERT_EQ(PrepareOne("anpr", "uid-3").error, "");
  slice = vram::ReadSliceUsage(vram_.local_dir + "/claim-uid-3/slice");
  ASSERT_TRUE(slice.ok()) << slice.status();
  EXPECT_EQ(slice->compute.share_permille, 4096u * 1000 / 32607);
  // Shares on two GPUs name neither: the library alone holds them.
  server_.PutResourceClaim(Claim(
      "two", "uid-4", {Share("a", "gpu-0", "s-4", "1Gi"), Share("b", "gpu-1", "s-5", "1Gi")}));
  ASSERT_EQ(PrepareOne("two", "uid-4").error, "");
  slice = vram::ReadSliceUsage(vram_.local_dir + "/claim-uid-4/slice");
  ASSERT_TRUE(slice.ok()) << slice.status();
  EXPECT_EQ(slice->gpu_uuid, "");
  EXPECT_EQ(slice->compute.share_permille, 0u);
  // A whole GPU gets no library.
  server_.PutResourceClaim(Claim("ollama", "uid-a", {Result("gpu", "gpu-0")}));
  ASSERT_EQ(PrepareOne("ollama", "uid-a").error, "");
  for (const cdi::Mount& m : ReadSpec("uid-a").edits.mounts) {
    EXPECT_FALSE(absl::StartsWith(m.container_path, "/run/gpulet")) << m.container_path;
  }
  EXPECT_THAT(Env(ReadSpec("uid-a")), Not(Contains(HasSubstr("LD_AUDIT"))));
}

TEST_F(ClaimPreparerTest, AMemoryShareWithoutItsLibraryIsRefused) {
  vram_.enforce = true;
  vram_.host_dir = "/var/lib/gpulet/vram";
  vram_.local_dir = scratch_.path() + "/host/var/lib/gpulet/vram";
  vram_.library_error = "the VRAM enforcement library is neither at /a nor at /b";
  server_.PutResourceClaim(Claim("anpr", "uid-2", {Share("gpu", "gpu-1", "s-2", "4096Mi")}));
  PrepareResult r = PrepareOne("anpr", "uid-2");
  EXPECT_THAT(r.error, HasSubstr("ml/anpr"));
  EXPECT_THAT(r.error, HasSubstr("neither at /a nor at /b"));
  EXPECT_THAT(r.error, HasSubstr("sharing.memorySlices.enforce: false"));
  EXPECT_FALSE(SpecExists("uid-2"));
}

TEST_F(ClaimPreparerTest, UnprepareRemovesTheFileAndNeedsNoApiServer) {
  server_.PutResourceClaim(Claim("ollama", "uid-a", {Result("gpu", "gpu-0")}));
  PrepareResult r = PrepareOne("ollama", "uid-a");
  ASSERT_EQ(r.error, "");
  ASSERT_TRUE(SpecExists("uid-a"));
  server_.DeleteResourceClaim("ml", "ollama");
  const size_t requests = server_.Requests().size();
  PreparedClaim claim{ClaimRef{"ml", "uid-a", "ollama"}, r.devices};
  std::map<std::string, std::string> u = preparer_->Unprepare({claim});
  EXPECT_EQ(u["uid-a"], "");
  EXPECT_FALSE(SpecExists("uid-a"));
  // Again: the file is gone already, which is success.
  u = preparer_->Unprepare({claim});
  EXPECT_EQ(u["uid-a"], "");
  EXPECT_EQ(server_.Requests().size(), requests);
}

TEST_F(ClaimPreparerTest, UnprepareOfAClaimNeverPrepared) {
  std::map<std::string, std::string> u =
      Preparer()->Unprepare({PreparedClaim{ClaimRef{"ml", "uid-z", "never"}, {}}});
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u["uid-z"], "");
}

TEST_F(ClaimPreparerTest, PrepareAgainWritesTheSameFile) {
  server_.PutResourceClaim(Claim("ollama", "uid-a", {Share("gpu", "gpu-0", "s-1", "8Gi")}));
  PrepareResult first = PrepareOne("ollama", "uid-a");
  ASSERT_EQ(first.error, "");
  const std::string bytes = gpulet::testing::ReadTextFile(SpecPath("uid-a"));
  PrepareResult second = PrepareOne("ollama", "uid-a");
  EXPECT_EQ(first, second);
  EXPECT_EQ(gpulet::testing::ReadTextFile(SpecPath("uid-a")), bytes);
}

TEST_F(ClaimPreparerTest, NoUsableGpuFailsEveryClaim) {
  gpu::Inventory broken = gpulet::testing::HomelabInventory();
  broken.nvml_status = absl::UnavailableError("NVML: driver not loaded");
  UseNode(gpulet::testing::SimRoot("homelab"), broken);
  server_.PutResourceClaim(Claim("ollama", "uid-a", {Result("gpu", "gpu-0")}));
  PrepareResult r = PrepareOne("ollama", "uid-a");
  EXPECT_THAT(r.error, HasSubstr("cannot prepare ResourceClaim ml/ollama"));
  EXPECT_THAT(r.error, HasSubstr("NVML"));
}

// --- pure helpers ---------------------------------------------------------------------------

TEST(ParseQuantityBytesTest, Units) {
  EXPECT_EQ(*ParseQuantityBytes("4Gi"), uint64_t{4} << 30);
  EXPECT_EQ(*ParseQuantityBytes("4096Mi"), uint64_t{4} << 30);
  EXPECT_EQ(*ParseQuantityBytes("1.5Gi"), uint64_t{3} << 29);
  EXPECT_EQ(*ParseQuantityBytes("4G"), 4000000000u);
  EXPECT_EQ(*ParseQuantityBytes("4e9"), 4000000000u);
  EXPECT_EQ(*ParseQuantityBytes("4294967296"), uint64_t{4} << 30);
  EXPECT_EQ(*ParseQuantityBytes("1500m"), 2u);  // rounded up
  EXPECT_EQ(*ParseQuantityBytes("+1k"), 1000u);
  EXPECT_EQ(*ParseQuantityBytes("99999999999999999999999999e-25"), 10u);
  EXPECT_EQ(*ParseQuantityBytes("1e-99"), 1u);
  EXPECT_EQ(*ParseQuantityBytes("0"), 0u);
  EXPECT_EQ(*ParseQuantityBytes("15Ei"), uint64_t{15} << 60);
  EXPECT_FALSE(ParseQuantityBytes("16Ei").ok());
  for (const char* bad : {"", "Gi", "-1Gi", "4GB", "4 Gi", "1e", "99999999999Ei", "1..5"}) {
    EXPECT_FALSE(ParseQuantityBytes(bad).ok()) << bad;
  }
}

TEST(ParseAllocationTest, ConfigsApplyToTheirRequestsAndTheClaimsWin) {
  std::vector<json> results = {Result("gpu/small", "gpu-0"), Result("other", "gpu-1")};
  std::vector<json> configs = {
      Config(GpuConfigParams({{"strategy", "Exclusive"}}), {}, kDriver, "FromClaim"),
      Config(GpuConfigParams({{"strategy", "TimeSlicing"}}), {}, kDriver, "FromClass"),
      Config(GpuConfigParams({{"strategy", "TimeSlicing"}}), {"gpu"}, kDriver, "FromClaim"),
  };
  absl::StatusOr<std::vector<AllocatedDevice>> a =
      ParseAllocation(Claim("c", "u", results, configs), kDriver, kNode);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->size(), 2u);
  // "gpu/small" is covered by the config for "gpu", the last one.
  ASSERT_TRUE((*a)[0].config.has_value());
  EXPECT_EQ((*a)[0].config->strategy, SharingStrategy::kTimeSlicing);
  // "other": the claim's config for all requests comes after the class's.
  ASSERT_TRUE((*a)[1].config.has_value());
  EXPECT_EQ((*a)[1].config->strategy, SharingStrategy::kExclusive);
}

TEST(ParseAllocationTest, FieldErrors) {
  json claim = Claim("c", "u", {Result("gpu", "gpu-0")});
  claim["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"] = {{"memory", "lots"}};
  absl::StatusOr<std::vector<AllocatedDevice>> a = ParseAllocation(claim, kDriver, kNode);
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(),
              HasSubstr("ResourceClaim ml/c: status.allocation.devices.results[0]"
                        ".consumedCapacity.memory: \"lots\" is not a memory quantity"));
  claim = Claim("c", "u", {Result("gpu", "gpu-0")});
  claim["status"]["allocation"]["devices"]["results"][0].erase("device");
  a = ParseAllocation(claim, kDriver, kNode);
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(),
              HasSubstr("ResourceClaim ml/c: status.allocation.devices.results[0].device: "
                        "required"));
  claim =
      Claim("c", "u", {Result("gpu", "gpu-0")}, {Config(GpuConfigParams(nullptr), {}, kDriver)});
  claim["status"]["allocation"]["devices"]["config"][0]["opaque"].erase("parameters");
  a = ParseAllocation(claim, kDriver, kNode);
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("config[0].opaque.parameters: required"));
}

TEST(ParseGpuConfigTest, NoSharingSection) {
  absl::StatusOr<GpuConfig> c = ParseGpuConfig(GpuConfigParams(nullptr), "here");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->strategy.has_value());
  c = ParseGpuConfig(
      GpuConfigParams({{"strategy", "Exclusive"}, {"timeSlicingConfig", {{"interval", "Short"}}}}),
      "here");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(),
              HasSubstr("here: parameters.sharing.timeSlicingConfig: only allowed with strategy "
                        "TimeSlicing"));
}

}  // namespace
}  // namespace gpulet::dra
