// DRA benchmarks: NodePrepareResources latency for one claim and for 8 claims at once, through
// a real `gpulet serve` (homelab simulator on a copy of its fixture root, dra.enabled) over the
// kubelet stand-in's sockets, each claim read from the API-server stand-in and given its own
// CDI spec. The floor, in the same run, is the same call for claims already prepared: the
// kubelet's repeat, answered from the checkpoint (gRPC and the driver's bookkeeping, no API
// read, no spec written). Rounds are spaced so that the DRA client's rate limit (20 reads a
// second, burst 40) is not what is measured.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_util.h"
#include "nlohmann/json.hpp"
#include "testing/daemon_process.h"
#include "testing/fake_apiserver.h"
#include "testing/fake_dra_kubelet.h"

namespace gpulet::bench {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::FakeDraKubelet;

constexpr char kDriver[] = "gpu.gpulet.dev";
constexpr char kNode[] = "bench-node";

std::string Uid(int round, int i) { return absl::StrFormat("%08x-0000-4000-8000-%012x", round, i); }

// Claims of round `round`, each allocated a share of GPU 1 (two GPUs would limit the count).
std::vector<testing::drapb::Claim> PutClaims(testing::FakeApiServer& server, int round, int n) {
  std::vector<testing::drapb::Claim> out;
  for (int i = 0; i < n; ++i) {
    const std::string uid = Uid(round, i), name = absl::StrCat("c-", round, "-", i);
    json claim = {{"apiVersion", "resource.k8s.io/v1"},
                  {"kind", "ResourceClaim"},
                  {"metadata", {{"namespace", "bench"}, {"name", name}, {"uid", uid}}}};
    claim["spec"]["devices"]["requests"] =
        json::array({{{"name", "gpu"}, {"exactly", {{"deviceClassName", "gpu.gpulet.dev"}}}}});
    json result = {{"request", "gpu"},
                   {"driver", kDriver},
                   {"pool", kNode},
                   {"device", "gpu-1"},
                   {"shareID", absl::StrFormat("%08x-0000-4000-8000-00000000%04x", round, i)},
                   {"consumedCapacity", {{"memory", "1Gi"}}}};
    claim["status"]["allocation"]["devices"]["results"] = json::array({result});
    server.PutResourceClaim(std::move(claim));
    out.push_back(FakeDraKubelet::MakeClaim("bench", uid, name));
  }
  return out;
}

}  // namespace

void RunDraBenchmarks(BenchTable& table) {
  fs::path dir = fs::temp_directory_path() / ("gpulet-bench-dra-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "kubelet");
  fs::copy(std::string(GPULET_SOURCE_DIR) + "/sim/fixtures/homelab/root", dir / "root",
           fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  testing::FakeApiServer server;
  if (!server.Start("bench-token").ok()) return;
  server.AddNode({{"metadata", {{"name", kNode}, {"uid", "uid-bench"}}}});
  {
    std::FILE* f = std::fopen((dir / "kubeconfig").c_str(), "w");
    std::fputs(server.Kubeconfig("bench-token").c_str(), f);
    std::fclose(f);
    f = std::fopen((dir / "config.yaml").c_str(), "w");
    std::fputs(absl::StrCat("version: v1\ncluster: {kubeconfig: ", (dir / "kubeconfig").string(),
                            "}\ndra: {enabled: true, memoryShares: {enabled: true}}\n")
                   .c_str(),
               f);
    std::fclose(f);
  }
  FakeDraKubelet kubelet((dir / "kubelet").string());
  if (!kubelet.Start().ok()) return;
  testing::DaemonProcess daemon;
  daemon.Start({std::string(GPULET_BINARY_DIR) + "/gpulet", "--simulate", "homelab", "--host-root",
                (dir / "root").string(), "--sim-state", (dir / "state.json").string(), "serve",
                "--config", (dir / "config.yaml").string(), "--kubelet-dir",
                (dir / "kubelet").string(), "--metrics-address", ""},
               {{"NODE_NAME", kNode}}, (dir / "daemon.log").string());
  if (!kubelet.WaitForRegistrations(1, absl::Seconds(20))) {
    std::fprintf(stderr, "gpulet did not register its DRA driver:\n%s\n", daemon.Log().c_str());
    return;
  }
  int round = 0;
  for (int n : {1, 8}) {
    std::vector<double> prepare_ms, repeat_ms, unprepare_ms;
    bool failed = false;
    const int rounds = n == 1 ? 200 : 60;
    for (int i = 0; i < rounds && !failed; ++i) {
      std::vector<testing::drapb::Claim> claims = PutClaims(server, ++round, n);
      // gpulet's DRA client reads claims at 20 per second (burst 40): a round every n/20 s
      // measures a prepare, not a wait for the rate limit (which a node starting more than
      // 40 claims at once meets).
      absl::SleepFor(absl::Milliseconds(50 * n + 20));
      absl::Time t0 = absl::Now();
      auto prepared = kubelet.Prepare(kDriver, claims);
      prepare_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
      t0 = absl::Now();
      auto repeated = kubelet.Prepare(kDriver, claims);
      repeat_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
      t0 = absl::Now();
      auto unprepared = kubelet.Unprepare(kDriver, claims);
      unprepare_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
      failed = !prepared.ok() || !repeated.ok() || !unprepared.ok();
      if (prepared.ok()) {
        for (const auto& [uid, answer] : prepared->claims()) {
          if (answer.error().empty()) continue;
          std::fprintf(stderr, "prepare of %s failed: %s\n", uid.c_str(), answer.error().c_str());
          failed = true;
        }
      }
    }
    if (failed) {
      std::fprintf(stderr, "DRA benchmark stopped on an error:\n%s\n", daemon.Log().c_str());
      break;
    }
    const double floor = Percentile(repeat_ms, 50);
    table.Add("dra", absl::StrCat("NodePrepareResources, ", n, n == 1 ? " claim" : " claims"),
              Percentile(prepare_ms, 50), "ms",
              absl::StrFormat("p50 of %d; p99 %.2f ms; floor (repeat, from the checkpoint) p50 "
                              "%.2f ms = %.1fx",
                              static_cast<int>(prepare_ms.size()), Percentile(prepare_ms, 99),
                              floor, floor > 0 ? Percentile(prepare_ms, 50) / floor : 0));
    table.Add("dra", absl::StrCat("NodeUnprepareResources, ", n, n == 1 ? " claim" : " claims"),
              Percentile(unprepare_ms, 50), "ms",
              absl::StrFormat("p50; p99 %.2f ms", Percentile(unprepare_ms, 99)));
  }
  daemon.Stop(SIGTERM, absl::Seconds(10));
  kubelet.Stop();
  server.Stop();
  fs::remove_all(dir);
}

}  // namespace gpulet::bench
