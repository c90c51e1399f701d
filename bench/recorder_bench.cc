// Flight recorder benchmarks (issue 30): what keeping each GPU's last 30 minutes costs.
//   - memory per GPU after a full 30-minute window at 1 s sampling (target: under 1 MiB);
//   - CPU per sampler round for 8 GPUs: FlightRecorder::Record, and Record with each GPU's
//     PCIe link and AER files read from sysfs (as the daemon does), against the peer every
//     round already pays: rendering the exposition of the same samples (RenderMetrics). At
//     1 s sampling, microseconds per round / 10^4 is the share of one core.
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_util.h"
#include "metrics/exposition.h"
#include "recorder/flight_recorder.h"
#include "recorder/pci_link.h"
#include "testing/files.h"

namespace gpulet::bench {
namespace {

constexpr int kGpus = 8;

struct Node {
  metrics::SampleSet set;
  state::Snapshot snap;
};

Node EightGpus() {
  Node n;
  for (int i = 0; i < kGpus; ++i) {
    state::DeviceRecord d;
    d.gpu.uuid = absl::StrCat("GPU-", i);
    d.gpu.name = "NVIDIA H200";
    d.gpu.bus_id = absl::StrFormat("0000:%02x:00.0", 0x10 + i);
    d.gpu.index = i;
    d.gpu.in_nvml = true;
    n.snap.devices.push_back(d);
    metrics::GpuSampleState& st = n.set.by_uuid[d.gpu.uuid];
    st.answering = true;
    st.last_attempt = absl::Now();
    st.last.emplace();
    gpu::DeviceSample& s = *st.last;
    s.gpu_temp_c = 55;
    s.mem_temp_c = 60;
    s.power_w = 420.5;
    s.power_limit_w = 700;
    s.sm_clock_mhz = 1980;
    s.mem_clock_mhz = 3201;
    s.clocks_event_reasons = 0;
    s.gpu_util = 87;
    s.fb_used_bytes = uint64_t{90} << 30;
    s.pcie_replays = 0;
    s.remapped_uncorrectable = 0;
    for (unsigned p = 0; p < 4; ++p) {
      gpu::GpuProcess proc;
      proc.pid = 1000 + i * 10 + p;
      s.processes.push_back(proc);
      st.processes[proc.pid].name = "python3";
    }
  }
  return n;
}

template <typename F>
double MicrosPerCall(int n, F f) {
  return SecondsOf([&] {
           for (int i = 0; i < n; ++i) f(i);
         }) *
         1e6 / n;
}

}  // namespace

void RunRecorderBenchmarks(BenchTable& table) {
  Node node = EightGpus();
  const absl::Time t0 = absl::FromUnixSeconds(1780000000);
  // Memory: a full 30-minute window at 1 s.
  recorder::FlightRecorder full({});
  for (int i = 0; i < 1800; ++i) {
    full.Record(node.set, node.snap, {}, absl::Minutes(30), absl::Seconds(1),
                t0 + absl::Seconds(i));
  }
  double kib = static_cast<double>(full.MemoryBytes()) / kGpus / 1024;
  table.Add("recorder", "memory per GPU, 30 min at 1 s", kib, "KiB",
            absl::StrFormat("%.2f of the 1024 KiB target", kib / 1024));

  // CPU: a round of 8 GPUs, steady state (the ring full, so every round overwrites).
  testing::ScratchDir root;
  std::map<std::string, recorder::PciLinkReading> pci;
  for (const state::DeviceRecord& d : node.snap.devices) {
    std::filesystem::path dev =
        std::filesystem::path(root.path()) / "sys/bus/pci/devices" / d.gpu.bus_id;
    std::filesystem::create_directories(dev);
    std::ofstream(dev / "current_link_width") << "16\n";
    std::ofstream(dev / "current_link_speed") << "32.0 GT/s PCIe\n";
    std::ofstream(dev / "aer_dev_correctable") << "RxErr 0\nBadTLP 0\nTOTAL_ERR_COR 0\n";
    std::ofstream(dev / "aer_dev_nonfatal") << "Undefined 0\nTOTAL_ERR_NONFATAL 0\n";
    std::ofstream(dev / "aer_dev_fatal") << "Undefined 0\nTOTAL_ERR_FATAL 0\n";
  }
  HostFs host(root.path());
  constexpr int kRounds = 2000;
  int round = 1800;
  double record = MicrosPerCall(kRounds, [&](int) {
    full.Record(node.set, node.snap, pci, absl::Minutes(30), absl::Seconds(1),
                t0 + absl::Seconds(round++));
  });
  double with_sysfs = MicrosPerCall(kRounds, [&](int) {
    for (const state::DeviceRecord& d : node.snap.devices)
      pci[d.gpu.uuid] = recorder::ReadPciLink(host, d.gpu.bus_id);
    full.Record(node.set, node.snap, pci, absl::Minutes(30), absl::Seconds(1),
                t0 + absl::Seconds(round++));
  });
  metrics::RenderInfo info{.hostname = "node", .driver_version = "575.51.02"};
  double render = MicrosPerCall(kRounds / 4, [&](int) {
    std::string text = metrics::RenderMetrics(node.snap, node.set, info, false, t0);
    if (text.empty()) std::abort();
  });
  table.Add("recorder", "Record, 8 GPUs, per round", record, "us",
            absl::StrFormat("%.2fx the round's render (%.1f us); %.4f%% of a core at 1 s",
                            record / render, render, record / 1e4));
  table.Add("recorder", "Record + PCIe sysfs reads, 8 GPUs, per round", with_sysfs, "us",
            absl::StrFormat("%.2fx the round's render; %.4f%% of a core at 1 s",
                            with_sysfs / render, with_sysfs / 1e4));
}

}  // namespace gpulet::bench
