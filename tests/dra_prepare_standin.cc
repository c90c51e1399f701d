// dra-prepare-standin: gpulet's DRA prepare path end to end in one process, as a command for
// the podman test (tests/dra_prepare_podman_test.sh): the API-server stand-in
// (testing/fake_apiserver.h, real TLS) holding a ResourceClaim allocated to one GPU of the
// homelab node, gpulet's side (KubeClaimPreparer → PreparedClaims on a checkpoint file →
// KubeletPlugin on real unix sockets) and the kubelet's (testing/fake_dra_kubelet.h), which
// registers the plugin and calls NodePrepareResources or NodeUnprepareResources.
//
// The real kubelet, scheduler and containerd are checked by `make e2e` (docs/e2e.md),
// scenario dra.
//
//   prepare WORK HOST_ROOT DEV_ROOT DRIVER_ROOT HOOK DEVICE UID
//     The claim ml/dra-podman (UID UID) holds DEVICE ("gpu-1") of pool node-a; prints
//     "cdi <id>" for each CDI device the kubelet got.
//   unprepare WORK HOST_ROOT DEV_ROOT DRIVER_ROOT HOOK DEVICE UID
//     A new process (gpulet restarted) with the claim deleted from the API server, as the
//     kubelet sees it after the pod is gone; prints "unprepared".
// With GPULET_STANDIN_SHARE (e.g. "4096Mi") the claim holds a memory share of DEVICE that
// size, held by the VRAM enforcement library GPULET_STANDIN_VRAM_LIB: its slice file goes to
// WORK/vram/claim-UID (tests/vram_podman_test.sh).
// WORK holds the kubelet directory and the checkpoint; claim specs go to
// HOST_ROOT/var/run/cdi. The node is the homelab fixture's two GPUs (minors 0 and 1) read
// from HOST_ROOT.
// Exit: 0 done, 1 failed (stderr says why), 2 usage.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "dra/claim_preparer.h"
#include "dra/kubelet_plugin.h"
#include "dra/prepared_claims.h"
#include "kube/kube_client.h"
#include "testing/fake_apiserver.h"
#include "testing/fake_dra_kubelet.h"
#include "testing/homelab.h"

namespace {

using nlohmann::json;

constexpr char kDriver[] = "gpu.gpulet.dev";
constexpr char kNode[] = "node-a";

int Fail(const std::string& why) {
  std::fprintf(stderr, "dra-prepare-standin: %s\n", why.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 9) {
    std::fprintf(stderr,
                 "usage: dra-prepare-standin prepare|unprepare WORK HOST_ROOT DEV_ROOT "
                 "DRIVER_ROOT HOOK DEVICE UID\n");
    return 2;
  }
  const std::string mode = argv[1], work = argv[2], host_root = argv[3], dev_root = argv[4],
                    driver_root = argv[5], hook = argv[6], device = argv[7], uid = argv[8];
  if (mode != "prepare" && mode != "unprepare") return Fail("mode must be prepare or unprepare");
  const char* share = std::getenv("GPULET_STANDIN_SHARE");
  const char* vram_lib = std::getenv("GPULET_STANDIN_VRAM_LIB");

  gpulet::testing::FakeApiServer server;
  if (absl::Status st = server.Start("token-1"); !st.ok()) return Fail(st.ToString());
  if (mode == "prepare") {
    json result = {{"request", "gpu"}, {"driver", kDriver}, {"pool", kNode}, {"device", device}};
    if (share != nullptr) {
      result["shareID"] = "share-1";
      result["consumedCapacity"] = {{"memory", share}};
    }
    json devices = {{"results", json::array()}};
    devices["results"].push_back(result);
    server.PutResourceClaim(
        {{"metadata", {{"namespace", "ml"}, {"name", "dra-podman"}, {"uid", uid}}},
         {"spec", {{"devices", {{"requests", json::array()}}}}},
         {"status", {{"allocation", {{"devices", devices}}}}}});
  }
  gpulet::kube::KubeConfig config;
  if (absl::Status st = gpulet::kube::ParseServerUrl(server.url(), "stand-in", &config); !st.ok()) {
    return Fail(st.ToString());
  }
  config.ca_pem = server.ca().cert_pem;
  config.ca_source = "the stand-in's CA";
  config.token = "token-1";
  config.source = "stand-in";
  gpulet::kube::KubeClientOptions client_options;
  client_options.qps = 0;
  absl::StatusOr<std::unique_ptr<gpulet::kube::KubeClient>> client =
      gpulet::kube::KubeClient::FromConfig(config, client_options, gpulet::RealClock());
  if (!client.ok()) return Fail(client.status().ToString());

  gpulet::HostFs host(host_root);
  const gpulet::gpu::Inventory inventory = gpulet::testing::InventoryFor(
      host_root,
      {gpulet::testing::GpuIdentity(0, gpulet::testing::kRtx3080, "0000:01:00.0", 0),
       gpulet::testing::GpuIdentity(1, gpulet::testing::kRtx5090, "0000:02:00.0", 1)},
      "570.133.20");
  gpulet::dra::ClaimPreparerOptions options;
  options.driver = kDriver;
  options.node_name = kNode;
  options.cdi_dir = host_root + "/var/run/cdi";
  options.generator.dev_root = dev_root;
  options.generator.driver_root = driver_root;
  options.generator.hook_path = hook;
  if (share != nullptr) {
    options.vram.enforce = true;
    options.vram.host_dir = work + "/vram";  // the test runs on the host: host path = local
    options.vram.local_dir = work + "/vram";
    options.vram.library = vram_lib != nullptr ? vram_lib : "";
    options.vram.library_error = "GPULET_STANDIN_VRAM_LIB is not set";
  }
  gpulet::dra::KubeClaimPreparer preparer(
      client->get(), [&inventory] { return inventory; }, &host, options);

  absl::StatusOr<std::unique_ptr<gpulet::dra::PreparedClaims>> claims =
      gpulet::dra::PreparedClaims::Open(work + "/checkpoint.json", &preparer);
  if (!claims.ok()) return Fail(claims.status().ToString());
  const std::string kubelet_dir = work + "/kubelet";
  gpulet::dra::KubeletPlugin plugin(kDriver, kubelet_dir, claims->get(), absl::Milliseconds(50));
  if (absl::Status st = plugin.Start(); !st.ok()) return Fail(st.ToString());
  gpulet::testing::FakeDraKubelet kubelet(kubelet_dir);
  if (absl::Status st = kubelet.Start(); !st.ok()) return Fail(st.ToString());
  if (!kubelet.WaitForRegistrations(1, absl::Seconds(20))) {
    return Fail("the kubelet stand-in did not register the plugin within 20s");
  }
  const auto claim = gpulet::testing::FakeDraKubelet::MakeClaim("ml", uid, "dra-podman");

  int rc = 0;
  if (mode == "prepare") {
    absl::StatusOr<gpulet::testing::drapb::NodePrepareResourcesResponse> r =
        kubelet.Prepare(kDriver, {claim}, absl::Seconds(20));
    if (!r.ok()) {
      rc = Fail(absl::StrCat("NodePrepareResources: ", r.status().ToString()));
    } else if (r->claims().count(uid) == 0) {
      rc = Fail("NodePrepareResources answered nothing for the claim");
    } else if (const auto& c = r->claims().at(uid); !c.error().empty()) {
      rc = Fail(absl::StrCat("NodePrepareResources: ", c.error()));
    } else {
      for (const auto& d : c.devices()) {
        for (const std::string& id : d.cdi_device_ids()) std::printf("cdi %s\n", id.c_str());
      }
    }
  } else {
    absl::StatusOr<gpulet::testing::drapb::NodeUnprepareResourcesResponse> r =
        kubelet.Unprepare(kDriver, {claim}, absl::Seconds(20));
    if (!r.ok()) {
      rc = Fail(absl::StrCat("NodeUnprepareResources: ", r.status().ToString()));
    } else if (r->claims().count(uid) == 0) {
      rc = Fail("NodeUnprepareResources answered nothing for the claim");
    } else if (const std::string& e = r->claims().at(uid).error(); !e.empty()) {
      rc = Fail(absl::StrCat("NodeUnprepareResources: ", e));
    } else {
      std::printf("unprepared\n");
    }
  }
  kubelet.Stop();
  plugin.Stop();
  server.Stop();
  return rc;
}
