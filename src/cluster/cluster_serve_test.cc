// `gpulet serve` with cluster reporting on, end to end: the daemon (a real process on the
// homelab simulator) talks to the stand-in API server (testing/fake_apiserver.h) through a
// kubeconfig; an XID injected into the simulator reaches the Node as a condition and Events.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/daemon_process.h"
#include "testing/fake_apiserver.h"
#include "testing/fake_pod_resources.h"
#include "testing/files.h"
#include "testing/free_port.h"
#include "testing/homelab.h"
#include "testing/http_clients.h"
#include "testing/subprocess.h"
#include "testing/wait_for.h"

namespace gpulet::cluster {
namespace {

using nlohmann::json;

#if GPULET_SANITIZED
constexpr absl::Duration kPromptly = absl::Seconds(3);
#else
constexpr absl::Duration kPromptly = absl::Seconds(1);
#endif
using gpulet::testing::WaitFor;

class ClusterServeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.Start("serve-token").ok());
    server_.AddNode({{"metadata", {{"name", "talos-08"}, {"uid", "uid-talos-08"}}},
                     {"status", {{"conditions", json::array()}}}});
    kubeconfig_ = dir_.Write("kubeconfig", server_.Kubeconfig("serve-token"));
    state_ = dir_.path() + "/state.json";
  }
  void TearDown() override {
    daemon_.Stop(SIGTERM, absl::Seconds(10));
    server_.Stop();
  }

  void Serve(const std::string& cluster_yaml, const std::string& quiet_period = "2s",
             const std::string& more_health = "") {
    const std::string config =
        dir_.Write("config.yaml", absl::StrCat("version: v1\nhealth: {quietPeriod: ", quiet_period,
                                               more_health, "}\ncluster: ", cluster_yaml, "\n"));
    port_ = gpulet::testing::FreeLoopbackPort();
    ASSERT_TRUE(daemon_.Start(
        {gpulet::testing::GpuletBinary(), "--simulate", "homelab", "--sim-state", state_, "serve",
         "--config", config, "--kubelet-dir", dir_.path() + "/kubelet", "--metrics-address",
         absl::StrCat("127.0.0.1:", port_)},
        {{"NODE_NAME", "talos-08"}, {"POD_NAME", "gpulet-x7k2p"}}, dir_.path() + "/log"));
  }

  // XID 79 on the simulated 5090 (GPU 1), through `gpulet sim`.
  void Xid79OnThe5090() {
    auto sim =
        gpulet::testing::RunProgram({gpulet::testing::GpuletBinary(), "--simulate", "homelab",
                                     "--sim-state", state_, "sim", "xid", "1", "79"});
    ASSERT_EQ(sim.exit_code, 0) << sim.err;
  }
  // Where gpulet serve (--kubelet-dir) looks for the kubelet's PodResources socket.
  std::string PodResourcesSocket() {
    std::filesystem::create_directories(dir_.path() + "/kubelet/pod-resources");
    return dir_.path() + "/kubelet/pod-resources/kubelet.sock";
  }
  // The homelab's pods as the kubelet lists them: the LLM server on the 5090 and, with
  // `with_media`, a media server on the 3080.
  static v1::ListPodResourcesResponse HomelabPods(bool with_media) {
    v1::ListPodResourcesResponse list;
    gpulet::testing::FakePodResources::AddContainer(&list, "ai", "ollama-0", "ollama",
                                                    "nvidia.com/gpu", {gpulet::testing::kRtx5090});
    if (with_media) {
      gpulet::testing::FakePodResources::AddContainer(
          &list, "media", "jellyfin-0", "jellyfin", "nvidia.com/gpu", {gpulet::testing::kRtx3080});
    }
    return list;
  }

  bool ConditionIs(const std::string& type, const std::string& status) {
    json c = server_.NodeCondition("talos-08", type);
    return !c.is_null() && c.value("status", "") == status;
  }
  std::string Metrics() {
    std::optional<gpulet::testing::HttpResponse> r =
        gpulet::testing::Get(port_, "/metrics", absl::Seconds(2));
    return r ? r->body : "";
  }
  // gpulet_gpu_pod_evictions_total{result=...} as /metrics says it; -1 when absent.
  double EvictionCount(const std::string& result) {
    const std::string text = Metrics();
    const std::string series =
        absl::StrCat("gpulet_gpu_pod_evictions_total{result=\"", result, "\"} ");
    const size_t at = text.find(series);
    return at == std::string::npos ? -1 : std::atof(text.c_str() + at + series.size());
  }
  size_t EventsWithReason(const std::string& reason) {
    return server_.EventsWithReason(reason).size();
  }

  gpulet::testing::ScratchDir dir_;
  gpulet::testing::FakeApiServer server_;
  gpulet::testing::DaemonProcess daemon_;
  std::string kubeconfig_, state_;
  int port_ = 0;
};

TEST_F(ClusterServeTest, InjectedXid79MakesTheConditionTrueAndAnEventWithinASecond) {
  Serve(absl::StrCat("{enabled: true, kubeconfig: ", kubeconfig_, "}"));
  ASSERT_NE(WaitFor([&] { return ConditionIs("GpuUnhealthy", "False"); }), absl::InfiniteDuration())
      << daemon_.Log();
  EXPECT_TRUE(ConditionIs("GpuNvmlUnavailable", "False"));

  const absl::Time injected = absl::Now();
  ASSERT_NO_FATAL_FAILURE(Xid79OnThe5090());
  ASSERT_NE(WaitFor([&] {
              return ConditionIs("GpuUnhealthy", "True") && EventsWithReason("GpuXid") > 0 &&
                     EventsWithReason("GpuUnhealthy") > 0;
            }),
            absl::InfiniteDuration())
      << daemon_.Log();
  EXPECT_LE(absl::Now() - injected, kPromptly);
  json c = server_.NodeCondition("talos-08", "GpuUnhealthy");
  EXPECT_EQ(c["reason"], "XidCriticalError");
  EXPECT_NE(c["message"].get<std::string>().find("GPU 1 (NVIDIA GeForce RTX 5090"),
            std::string::npos)
      << c;
  EXPECT_TRUE(ConditionIs("GpuRebootRequired", "True"));

  // Every request carried the kubeconfig's token and the Node's name.
  for (const auto& r : server_.Requests()) {
    EXPECT_EQ(r.authorization, "Bearer serve-token") << r.target;
  }
}

// The quarantine rung, where the workload's owner looks: the pod holding the GPU that goes
// out (by the kubelet's PodResources) gets a GpuUnhealthy Event in its own namespace.
TEST_F(ClusterServeTest, AGpuGoingOutIsAnEventOnThePodHoldingIt) {
  gpulet::testing::FakePodResources kubelet(PodResourcesSocket());
  kubelet.SetResponse(HomelabPods(/*with_media=*/false));
  ASSERT_TRUE(kubelet.Start().ok());
  Serve(absl::StrCat("{enabled: true, kubeconfig: ", kubeconfig_, "}"));
  ASSERT_NE(WaitFor([&] {
              return ConditionIs("GpuUnhealthy", "False") &&
                     Metrics().find("pod=\"ollama-0\"") != std::string::npos;
            }),
            absl::InfiniteDuration())
      << daemon_.Log();
  ASSERT_NO_FATAL_FAILURE(Xid79OnThe5090());
  auto on_pod = [&] {
    for (const json& e : server_.EventsWithReason("GpuUnhealthy")) {
      if (e["regarding"].value("kind", "") == "Pod") return e;
    }
    return json();
  };
  ASSERT_NE(WaitFor([&] { return !on_pod().is_null(); }), absl::InfiniteDuration())
      << daemon_.Log();
  json e = on_pod();
  EXPECT_EQ(e["metadata"]["namespace"], "ai") << e;
  EXPECT_EQ(e["regarding"]["name"], "ollama-0");
  EXPECT_NE(e["note"].get<std::string>().find("GPU-8a41d7b9-52c6-4f13-b0e8-7d2c9e155090 (GPU 1)"),
            std::string::npos)
      << e;
}

// The eviction rung against the API server stand-in's Eviction API: once the 5090 has been
// out for the grace, the pod holding it is evicted (its PodDisruptionBudget first refuses,
// then allows), with an Event about it; the pod on the 3080 is never touched; /metrics and
// /status say what happened.
TEST_F(ClusterServeTest, ThePodOfAGpuThatStaysOutIsEvictedAndOnlyIt) {
  gpulet::testing::FakePodResources kubelet(PodResourcesSocket());
  kubelet.SetResponse(HomelabPods(/*with_media=*/true));
  ASSERT_TRUE(kubelet.Start().ok());
  // With the UID the simulated node's /var/log/pods gives ollama-0: the eviction's
  // precondition names it.
  server_.PutPod({{"metadata",
                   {{"namespace", "ai"},
                    {"name", "ollama-0"},
                    {"uid", "5b0e3c1a-9f7d-4d2e-8a61-0c3b7e9d4242"}}}});
  server_.PutPod({{"metadata", {{"namespace", "media"}, {"name", "jellyfin-0"}}}});
  server_.BlockEvictions("ai", "ollama-0", true);
  // Started dry, turned on by a reload (a ConfigMap edit): the evictor must start with it (the
  // e2e suite found it did not: the orders queued and nothing evicted).
  const std::string cluster = absl::StrCat("{enabled: true, kubeconfig: ", kubeconfig_, "}");
  Serve(cluster, "10m", ", evict: {mode: dry-run, grace: 1s}");
  ASSERT_NE(WaitFor([&] { return Metrics().find("pod=\"ollama-0\"") != std::string::npos; }),
            absl::InfiniteDuration())
      << daemon_.Log();
  dir_.Write("config.yaml",
             absl::StrCat("version: v1\nhealth: {quietPeriod: 10m, evict: {mode: on, grace: 1s}}"
                          "\ncluster: ",
                          cluster, "\n"));
  ASSERT_EQ(kill(daemon_.pid(), SIGHUP), 0);
  ASSERT_NE(
      WaitFor([&] { return daemon_.Log().find("changed health.evict.mode") != std::string::npos; }),
      absl::InfiniteDuration())
      << daemon_.Log();
  ASSERT_NO_FATAL_FAILURE(Xid79OnThe5090());
  // The budget refuses first: told once, about the pod, and the pod stays.
  ASSERT_NE(WaitFor([&] { return EventsWithReason("GpuEvictionBlocked") > 0; }),
            absl::InfiniteDuration())
      << daemon_.Log();
  EXPECT_TRUE(server_.Pod("ai", "ollama-0").has_value());
  // /status and /metrics say so from the next sampling round.
  auto eviction_state = [&] {
    std::optional<gpulet::testing::HttpResponse> r =
        gpulet::testing::Get(port_, "/status", absl::Seconds(2));
    json doc = r ? json::parse(r->body, nullptr, false) : json();
    if (!doc.is_object() || !doc["gpus"][1].contains("evictions")) return std::string();
    return doc["gpus"][1]["evictions"][0].value("state", "");
  };
  EXPECT_NE(WaitFor([&] { return eviction_state() == "blocked"; }), absl::InfiniteDuration());
  EXPECT_NE(WaitFor([&] { return EvictionCount("blocked") >= 1; }), absl::InfiniteDuration());
  auto printed = gpulet::testing::RunProgram(
      {gpulet::testing::GpuletBinary(), "status", "--address", absl::StrCat("127.0.0.1:", port_)});
  EXPECT_NE(printed.out.find("blocked pod ai/ollama-0 (tries "), std::string::npos) << printed.out;
  EXPECT_NE(printed.out.find("would violate the pod's disruption budget"), std::string::npos)
      << printed.out;
  // The budget allows it now: the next try (every 5 s) evicts it.
  server_.BlockEvictions("ai", "ollama-0", false);
  ASSERT_NE(WaitFor([&] { return EventsWithReason("GpuPodEvicted") > 0; }, absl::Seconds(60)),
            absl::InfiniteDuration())
      << daemon_.Log();
  EXPECT_FALSE(server_.Pod("ai", "ollama-0").has_value());
  EXPECT_TRUE(server_.Pod("media", "jellyfin-0").has_value());
  json e = server_.EventsWithReason("GpuPodEvicted")[0];
  EXPECT_EQ(e["metadata"]["namespace"], "ai") << e;
  EXPECT_EQ(e["regarding"]["kind"], "Pod");
  EXPECT_EQ(e["regarding"]["name"], "ollama-0");
  EXPECT_NE(WaitFor([&] { return EvictionCount("evicted") == 1; }), absl::InfiniteDuration());
  EXPECT_NE(WaitFor([&] { return eviction_state().empty(); }), absl::InfiniteDuration());
  for (const auto& r : server_.Requests()) {
    EXPECT_EQ(r.path.find("/pods/jellyfin-0/"), std::string::npos) << r.target;
  }
}

// The API server failing for longer than the client retries a call (every call answered 503
// for 8 s; its five attempts back off 3 s at most) holds up nothing gpulet serves: /metrics
// keeps answering at once and reports the XID's verdict, the plugin's socket stays; when the
// server answers again, the Node catches up. (The quiet period outlasts the outage, so the
// GPU is still out when the server comes back.)
TEST_F(ClusterServeTest, AnOutageLongerThanTheRetriesDelaysNothingAndIsCaughtUp) {
  constexpr absl::Duration kOutage = absl::Seconds(8);
  Serve(absl::StrCat("{enabled: true, kubeconfig: ", kubeconfig_, "}"), "10m");
  ASSERT_NE(WaitFor([&] { return ConditionIs("GpuUnhealthy", "False"); }), absl::InfiniteDuration())
      << daemon_.Log();
  server_.FailNext(1000000, 503, -1);
  const absl::Time outage = absl::Now();
  ASSERT_NO_FATAL_FAILURE(Xid79OnThe5090());
  absl::Duration slowest = absl::ZeroDuration();
  bool reported = false;
  while (absl::Now() - outage < kOutage) {
    const absl::Time t0 = absl::Now();
    const std::string text = Metrics();
    slowest = std::max(slowest, absl::Now() - t0);
    reported = reported || (text.find("gpulet_gpu_health_state{gpu=\"1\"") != std::string::npos &&
                            text.find("state=\"Unhealthy\"} 1") != std::string::npos);
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  EXPECT_TRUE(reported) << "the XID's verdict did not reach /metrics during the outage";
  EXPECT_LT(slowest, absl::Seconds(1)) << "a scrape waited on the API server";
  EXPECT_TRUE(std::filesystem::exists(dir_.path() + "/kubelet/device-plugins/gpulet-gpu.sock"));
  EXPECT_TRUE(ConditionIs("GpuUnhealthy", "False")) << "written through a failing server?";
  server_.FailNext(0, 503, -1);
  EXPECT_NE(
      WaitFor([&] { return ConditionIs("GpuUnhealthy", "True") && EventsWithReason("GpuXid") > 0; },
              absl::Seconds(60)),
      absl::InfiniteDuration())
      << daemon_.Log();
}

// Off by default: serve never calls the API server.
TEST_F(ClusterServeTest, DisabledMakesNoApiCalls) {
  Serve("{enabled: false}");
  auto ready = [&] { return Metrics().find("gpulet_gpu_up{") != std::string::npos; };
  ASSERT_NE(WaitFor(ready), absl::InfiniteDuration()) << daemon_.Log();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(server_.Requests().empty());
}

// A ConfigMap update reaches the running daemon by itself: the kubelet swaps the volume's
// `..data` link, gpulet reloads within seconds with no signal sent; a bad version is refused
// with a GpuletConfigRefused Event on the Node and the running settings kept.
TEST_F(ClusterServeTest, AConfigMapUpdateIsReloadedAndABadOneIsAnEvent) {
  const std::string cm = dir_.path() + "/configmap";
  int version = 0;
  auto publish = [&](const std::string& yaml) {
    const std::string data = absl::StrCat("..2026_12_05_10_00_0", ++version);
    dir_.Write(absl::StrCat("configmap/", data, "/config.yaml"),
               absl::StrCat("version: v1\ncluster: {enabled: true, kubeconfig: ", kubeconfig_,
                            "}\n", yaml));
    std::filesystem::create_directory_symlink(data, cm + "/..data_tmp");
    std::filesystem::rename(cm + "/..data_tmp", cm + "/..data");
  };
  publish("metrics: {sampleInterval: 1s}\n");
  std::filesystem::create_symlink("..data/config.yaml", cm + "/config.yaml");
  port_ = gpulet::testing::FreeLoopbackPort();
  ASSERT_TRUE(daemon_.Start(
      {gpulet::testing::GpuletBinary(), "--simulate", "homelab", "--sim-state", state_, "serve",
       "--config", cm + "/config.yaml", "--kubelet-dir", dir_.path() + "/kubelet",
       "--metrics-address", absl::StrCat("127.0.0.1:", port_)},
      {{"NODE_NAME", "talos-08"}}, dir_.path() + "/log"));
  ASSERT_NE(WaitFor([&] { return ConditionIs("GpuUnhealthy", "False"); }), absl::InfiniteDuration())
      << daemon_.Log();

  publish("metrics: {sampleInterval: 500ms}\n");
  ASSERT_NE(WaitFor([&] {
              return daemon_.Log().find("configuration reloaded: changed metrics.sampleInterval") !=
                     std::string::npos;
            }),
            absl::InfiniteDuration())
      << daemon_.Log();

  publish("metrics: {sampleInterval: inf}\n");
  ASSERT_NE(WaitFor([&] { return EventsWithReason("GpuletConfigRefused") > 0; }),
            absl::InfiniteDuration())
      << daemon_.Log();
  const std::string note =
      server_.EventsWithReason("GpuletConfigRefused")[0]["note"].get<std::string>();
  EXPECT_NE(note.find("metrics.sampleInterval"), std::string::npos) << note;
  EXPECT_NE(note.find("keeps the running one"), std::string::npos) << note;
  EXPECT_TRUE(daemon_.Running());
  EXPECT_NE(WaitFor([&] {
              return Metrics().find("gpulet_config_reload_errors_total{} 1") != std::string::npos;
            }),
            absl::InfiniteDuration());
}

}  // namespace
}  // namespace gpulet::cluster
