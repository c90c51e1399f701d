// The exposition, the web config and the HTTP server (in process), and `gpulet serve`'s
// metrics under an injected GPU hang (as a real process against the simulator).
#include <crypt.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gpu/nvml_api.h"
#include "gpu/sample_values.h"
#include "gtest/gtest.h"
#include "http/basic_auth.h"
#include "http/web_config.h"
#include "httplib.h"
#include "metrics/exposition.h"
#include "metrics/metrics_server.h"
#include "metrics/sampler.h"
#include "nlohmann/json.hpp"
#include "testing/daemon_process.h"
#include "testing/fake_gpu_library.h"
#include "testing/free_port.h"
#include "testing/homelab.h"
#include "testing/subprocess.h"
#include "testing/test_pki.h"

namespace gpulet::metrics {
namespace {

namespace fs = std::filesystem;

state::Snapshot TwoGpus() {
  state::Snapshot snap;
  snap.nvml_ok = true;
  for (int i = 0; i < 2; ++i) {
    state::DeviceRecord d;
    d.gpu.index = i;
    d.gpu.uuid = absl::StrCat("GPU-test-", i);
    d.gpu.name = i == 0 ? "Card \"A\"" : "Card B";
    d.gpu.bus_id = absl::StrCat("0000:0", i + 1, ":00.0");
    d.gpu.in_nvml = true;
    snap.devices.push_back(d);
  }
  snap.devices[1].health.xid_counts[79] = 2;
  snap.devices[1].health.last_xid = 79;
  return snap;
}

TEST(ExpositionTest, DcgmNamesLabelsAndOmittedValues) {
  state::Snapshot snap = TwoGpus();
  SampleSet set;
  GpuSampleState st;
  st.answering = true;
  gpu::DeviceSample s;
  s.taken = absl::Now();
  s.gpu_temp_c = 47;
  s.sm_clock_mhz = 1410;
  s.fb_used_bytes = 530ull << 20;
  s.clocks_event_reasons = 0x4;  // sw power cap
  st.last = s;
  set.by_uuid["GPU-test-0"] = st;
  std::string text = RenderMetrics(snap, set, {"node1", "570.1"}, false, absl::Now());
  EXPECT_NE(text.find("# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"), std::string::npos);
  EXPECT_NE(text.find("DCGM_FI_DEV_GPU_TEMP{gpu=\"0\",UUID=\"GPU-test-0\",pci_bus_id=\"00000000:01:"
                      "00.0\",device=\"nvidia0\",modelName=\"Card \\\"A\\\"\",Hostname=\"node1\","
                      "DCGM_FI_DRIVER_VERSION=\"570.1\"} 47\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("DCGM_FI_DEV_FB_USED{"), std::string::npos);
  // Not supported (absent) values are omitted, not written as sentinels.
  EXPECT_EQ(text.find("DCGM_FI_DEV_MEMORY_TEMP{"), std::string::npos);
  // GPU 1 has no sample: it is not answering, and has no DCGM value series.
  EXPECT_NE(text.find("gpulet_gpu_up{gpu=\"1\""), std::string::npos);
  EXPECT_EQ(text.find("DCGM_FI_DEV_GPU_TEMP{gpu=\"1\""), std::string::npos);
  EXPECT_NE(text.find("gpulet_gpu_xid_errors_total{gpu=\"1\",uuid=\"GPU-test-1\""),
            std::string::npos);
  EXPECT_NE(text.find("reason=\"sw_power_cap\"} 1"), std::string::npos);
  EXPECT_NE(text.find("DCGM_FI_DEV_XID_ERRORS{gpu=\"1\""), std::string::npos);
  std::string om = RenderMetrics(snap, set, {"node1", "570.1"}, true, absl::Now());
  EXPECT_NE(om.find("# TYPE gpulet_gpu_xid_errors counter\n"), std::string::npos);
  EXPECT_EQ(om.substr(om.size() - 6), "# EOF\n");
}

// The lines of `text` that start with `prefix`.
std::vector<std::string> LinesStartingWith(const std::string& text, absl::string_view prefix) {
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(line, prefix)) out.emplace_back(line);
  }
  return out;
}

// dcgm-exporter labels DCGM_FI_DEV_XID_ERRORS with err_code (the XID as a string) and
// err_msg (its description; "No Error" for 0, "Unknown Error" for a code it cannot describe):
// NVIDIA/dcgm-exporter internal/pkg/collector/gpu_collector.go, toMetric.
TEST(ExpositionTest, XidErrorsCarryDcgmExportersErrCodeAndErrMsg) {
  state::Snapshot snap = TwoGpus();
  snap.devices[1].health.last_xid_message = "the GPU fell off the bus";
  std::string text = RenderMetrics(snap, SampleSet{}, {"node1", "570.1"}, false, absl::Now());
  std::vector<std::string> xid = LinesStartingWith(text, "DCGM_FI_DEV_XID_ERRORS{");
  ASSERT_EQ(xid.size(), 2u) << text;
  EXPECT_TRUE(absl::StrContains(xid[0], "gpu=\"0\"")) << xid[0];
  EXPECT_TRUE(absl::EndsWith(xid[0], ",err_code=\"0\",err_msg=\"No Error\"} 0")) << xid[0];
  EXPECT_TRUE(absl::EndsWith(xid[1], ",err_code=\"79\",err_msg=\"the GPU fell off the bus\"} 79"))
      << xid[1];

  snap.devices[1].health.last_xid = 999;
  snap.devices[1].health.last_xid_message.clear();
  text = RenderMetrics(snap, SampleSet{}, {"node1", "570.1"}, false, absl::Now());
  xid = LinesStartingWith(text, "DCGM_FI_DEV_XID_ERRORS{");
  ASSERT_EQ(xid.size(), 2u) << text;
  EXPECT_TRUE(absl::EndsWith(xid[1], ",err_code=\"999\",err_msg=\"Unknown Error\"} 999")) << xid[1];
}

// A sample set in which GPU-test-0 answered with `s`.
SampleSet AnsweringGpu0(const gpu::DeviceSample& s) {
  SampleSet set;
  GpuSampleState st;
  st.answering = true;
  st.last = s;
  set.by_uuid["GPU-test-0"] = st;
  return set;
}

// dcgm-exporter prints a DCGM_FT_DOUBLE field with Go's "%f" and an INT64 one with "%d"
// (gpu_collector.go, toString); gpulet's own series keep the shortest exact form.
TEST(ExpositionTest, DcgmValuesPrintedAsDcgmExporterPrintsThem) {
  state::Snapshot snap = TwoGpus();
  gpu::DeviceSample s;
  s.taken = absl::Now();
  s.power_w = 123.4567891;
  s.power_limit_w = 450.5;
  s.gpu_temp_c = 47;
  s.energy_mj = 123456789012ull;
  SampleSet set = AnsweringGpu0(s);
  std::string text = RenderMetrics(snap, set, {"node1", "570.1"}, false, absl::Now());
  std::vector<std::string> power = LinesStartingWith(text, "DCGM_FI_DEV_POWER_USAGE{");
  ASSERT_EQ(power.size(), 1u) << text;
  EXPECT_TRUE(absl::EndsWith(power[0], "} 123.456789")) << power[0];
  std::vector<std::string> temp = LinesStartingWith(text, "DCGM_FI_DEV_GPU_TEMP{");
  ASSERT_EQ(temp.size(), 1u);
  EXPECT_TRUE(absl::EndsWith(temp[0], "} 47")) << temp[0];
  std::vector<std::string> energy =
      LinesStartingWith(text, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{");
  ASSERT_EQ(energy.size(), 1u);
  EXPECT_TRUE(absl::EndsWith(energy[0], "} 123456789012")) << energy[0];
  std::vector<std::string> limit = LinesStartingWith(text, "gpulet_gpu_power_limit_watts{");
  ASSERT_EQ(limit.size(), 1u);
  EXPECT_TRUE(absl::EndsWith(limit[0], "} 450.5")) << limit[0];
}

// OpenMetrics requires a counter's samples to be named `<family>_total`. DCGM's counters lack
// the suffix: in OpenMetrics their family keeps DCGM's name and the samples get `_total`; the
// Prometheus text format is unchanged (name and `counter` type as dcgm-exporter writes them).
TEST(ExpositionTest, DcgmCountersAreCountersInBothFormats) {
  state::Snapshot snap = TwoGpus();
  gpu::DeviceSample s;
  s.taken = absl::Now();
  s.energy_mj = 5000;
  s.pcie_replays = 3;
  s.remapped_correctable = 1;
  s.remapped_uncorrectable = 0;
  SampleSet set = AnsweringGpu0(s);
  std::string text = RenderMetrics(snap, set, {"node1", "570.1"}, false, absl::Now());
  std::string om = RenderMetrics(snap, set, {"node1", "570.1"}, true, absl::Now());
  for (const char* name :
       {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"}) {
    EXPECT_TRUE(absl::StrContains(text, absl::StrCat("# TYPE ", name, " counter\n"))) << name;
    EXPECT_EQ(LinesStartingWith(text, absl::StrCat(name, "{")).size(), 1u) << name;
    EXPECT_TRUE(absl::StrContains(om, absl::StrCat("# TYPE ", name, " counter\n"))) << name;
    EXPECT_EQ(LinesStartingWith(om, absl::StrCat(name, "{")).size(), 0u) << name;
    EXPECT_EQ(LinesStartingWith(om, absl::StrCat(name, "_total{")).size(), 1u) << name;
  }
  EXPECT_FALSE(absl::StrContains(om, " unknown\n")) << om;
  // A counter named with the suffix: family without it, samples with it.
  EXPECT_TRUE(absl::StrContains(om, "# TYPE gpulet_nvml_errors counter\n"));
  EXPECT_EQ(LinesStartingWith(om, "gpulet_nvml_errors_total{").size(), 1u);
  EXPECT_EQ(LinesStartingWith(text, "gpulet_nvml_errors_total{").size(), 1u);
}

TEST(WebConfigTest, ParsesAndChecksBcrypt) {
  char salt[64];
  ASSERT_NE(crypt_gensalt_rn("$2b$", 5, nullptr, 0, salt, sizeof(salt)), nullptr);
  struct crypt_data data {};
  std::string hash = crypt_r("s3cret", salt, &data);
  EXPECT_TRUE(http::CheckPassword("s3cret", hash));
  EXPECT_FALSE(http::CheckPassword("wrong", hash));
  fs::path f = fs::temp_directory_path() / ("gpulet-web-" + std::to_string(getpid()) + ".yml");
  std::ofstream(f) << "basic_auth_users:\n  prom: " << hash << "\n";
  auto web = http::LoadWebConfig(f.string());
  ASSERT_TRUE(web.ok()) << web.status();
  EXPECT_EQ(web->users.at("prom"), hash);
  std::ofstream(f) << "tls_server_config:\n  cert_file: /x.pem\n";
  EXPECT_FALSE(http::LoadWebConfig(f.string()).ok());
  std::ofstream(f) << "nonsense: 1\n";
  auto bad = http::LoadWebConfig(f.string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("nonsense"), absl::string_view::npos);

  // The server enforces it; /healthz stays open for probes.
  state::DeviceStore store;
  Sampler sampler(nullptr, &store, nullptr, {}, {"h", ""});
  http::WebConfig wc;
  wc.users["prom"] = hash;
  MetricsServer server(&sampler, &store, wc);
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  httplib::Client c("127.0.0.1", server.port());
  EXPECT_EQ(c.Get("/metrics")->status, 401);
  EXPECT_EQ(c.Get("/healthz")->status, 200);
  // A wrong password and an unknown user are both refused the same way.
  c.set_basic_auth("prom", "wrong");
  EXPECT_EQ(c.Get("/metrics")->status, 401);
  c.set_basic_auth("nobody", "s3cret");
  EXPECT_EQ(c.Get("/metrics")->status, 401);
  c.set_basic_auth("prom", "s3cret");
  auto ok = c.Get("/metrics");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_NE(ok->body.find("gpulet_build_info"), std::string::npos);
  server.Stop();
  fs::remove(f);
}

// The fields of dcgm-exporter's default-counters.csv (tests/fixtures/dcgm-exporter/), by name:
// its Prometheus type ("gauge", "counter" or "label").
std::map<std::string, std::string> DcgmDefaultCounters() {
  std::ifstream in(std::string(GPULET_SOURCE_DIR) +
                   "/tests/fixtures/dcgm-exporter/default-counters.csv");
  std::map<std::string, std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view l = absl::StripAsciiWhitespace(line);
    if (l.empty() || l[0] == '#') continue;
    std::vector<std::string> cols = absl::StrSplit(l, ',');
    if (cols.size() < 2) continue;
    out[std::string(absl::StripAsciiWhitespace(cols[0]))] =
        std::string(absl::StripAsciiWhitespace(cols[1]));
  }
  return out;
}

// The rows of docs/metrics.md's "dcgm-exporter's default counters" table: field to status.
// A table of docs/metrics.md: the first column's `NAME` to the third column, for the rows of
// the section headed `heading`.
std::map<std::string, std::string> DocTable(absl::string_view heading) {
  std::ifstream in(std::string(GPULET_SOURCE_DIR) + "/docs/metrics.md");
  std::map<std::string, std::string> out;
  std::string line;
  bool in_section = false;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "## ")) {
      in_section = line == heading;
      continue;
    }
    if (!in_section || !absl::StartsWith(line, "| `")) continue;
    std::vector<std::string> cols = absl::StrSplit(line, '|');
    // "", " `NAME` ", " type ", " status ", ""
    if (cols.size() < 5) continue;
    std::string name(absl::StripAsciiWhitespace(cols[1]));
    name = name.substr(1, name.size() - 2);
    out[name] = std::string(absl::StripAsciiWhitespace(cols[3]));
  }
  return out;
}

std::map<std::string, std::string> DocDefaultCountersTable() {
  return DocTable("## dcgm-exporter's default counters");
}

// The families of the value table (gpu/sample_values.h), which docs/metrics.md's "GPU
// values" table lists (SampleValuesTest.TheDocsTableIsTheTable).
std::set<std::string> ValueTableFamilies() {
  std::set<std::string> out;
  for (const gpu::SampleValue& row : gpu::SampleValues()) {
    if (row.metric != nullptr) out.insert(row.metric);
  }
  return out;
}

// Every row of the value table with a family is exported from a sample that has it, with
// the row's value as its family prints it, on dcgm-exporter's labels for a DCGM field and
// gpulet's for its own.
// docs/metrics.md: a GPU without a fan reading (a passively cooled board: NVML answers
// NOT_SUPPORTED) has no fan series, while its other values are exported as usual.
TEST(ExpositionTest, AGpuWithoutAFanReadingHasNoFanSeries) {
  state::Snapshot snap = TwoGpus();
  gpu::DeviceSample s = testing::SampleWithEveryValue();
  s.fan_percent.reset();
  std::string text = RenderMetrics(snap, AnsweringGpu0(s), {"node1", "570.1"}, false, absl::Now());
  EXPECT_TRUE(LinesStartingWith(text, "DCGM_FI_DEV_FAN_SPEED{").empty()) << text;
  EXPECT_FALSE(LinesStartingWith(text, "DCGM_FI_DEV_GPU_TEMP{").empty()) << text;
}

TEST(ExpositionTest, EveryValueRowIsExportedWithItsValue) {
  state::Snapshot snap = TwoGpus();
  gpu::DeviceSample s = testing::SampleWithEveryValue();
  SampleSet set = AnsweringGpu0(s);
  std::string text = RenderMetrics(snap, set, {"node1", "570.1"}, false, absl::Now());
  for (const gpu::SampleValue& row : gpu::SampleValues()) {
    if (row.metric == nullptr) continue;
    SCOPED_TRACE(row.metric);
    EXPECT_TRUE(absl::StrContains(text, absl::StrCat("# TYPE ", row.metric, " ", row.type, "\n")));
    std::vector<std::string> lines = LinesStartingWith(text, absl::StrCat(row.metric, "{"));
    ASSERT_FALSE(lines.empty()) << text;
    const std::string& line = lines[0];
    EXPECT_TRUE(absl::StrContains(line, row.dcgm_field != 0 ? "UUID=\"" : "uuid=\"")) << line;
    double printed = 0;
    ASSERT_TRUE(absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &printed)) << line;
    std::optional<double> want = gpu::ReadValue(row, s);
    if (row.id == gpu::ValueId::kXid) want = 0;  // no XID yet
    ASSERT_TRUE(want.has_value());
    // DCGM_FT_INT64 prints the integer part; "%f", six decimals.
    double expect = gpu::ExportedValue(row, *want);
    if (row.dcgm_type == gpu::DcgmType::kInt64)
      expect = static_cast<double>(static_cast<int64_t>(expect));
    EXPECT_NEAR(printed, expect, 1e-6) << line;
  }
}

// Profiling values come from NVML's GPM in percent and MiB/s; dcgm-exporter exports DCGM's
// DCGM_FI_PROF_* ratios (0..1, DCGM_FT_DOUBLE, "%f") and byte rates (DCGM_FT_INT64).
TEST(ExpositionTest, ProfilingSeriesUseDcgmUnitsAndFormats) {
  state::Snapshot snap = TwoGpus();
  gpu::DeviceSample s;
  s.taken = absl::Now();
  gpu::ProfilingSample& p = s.profiling.emplace();
  p.tensor_active = 0.376;
  p.sm_active = 0.692;
  p.pcie_tx_bytes_per_second = 812.0 * 1024 * 1024;
  p.nvlink_rx_bytes_per_second = 0.5;  // DCGM_FT_INT64: truncated
  SampleSet set = AnsweringGpu0(s);
  std::string text = RenderMetrics(snap, set, {"node1", "570.1"}, false, absl::Now());
  auto one = [&](const char* name) {
    std::vector<std::string> lines = LinesStartingWith(text, absl::StrCat(name, "{"));
    EXPECT_EQ(lines.size(), 1u) << name << "\n" << text;
    return lines.empty() ? std::string() : lines[0];
  };
  EXPECT_TRUE(absl::EndsWith(one("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"), "} 0.376000"));
  EXPECT_TRUE(absl::EndsWith(one("DCGM_FI_PROF_SM_ACTIVE"), "} 0.692000"));
  EXPECT_TRUE(absl::EndsWith(one("DCGM_FI_PROF_PCIE_TX_BYTES"), "} 851443712"));
  EXPECT_TRUE(absl::EndsWith(one("DCGM_FI_PROF_NVLINK_RX_BYTES"), "} 0"));
  EXPECT_TRUE(absl::StrContains(text, "# TYPE DCGM_FI_PROF_PIPE_TENSOR_ACTIVE gauge\n"));
  // Values the GPU did not report are left out; a GPU without GPM has no profiling series.
  EXPECT_TRUE(LinesStartingWith(text, "DCGM_FI_PROF_DRAM_ACTIVE{").empty());
  EXPECT_FALSE(absl::StrContains(text, "DCGM_FI_PROF_SM_ACTIVE{gpu=\"1\""));
}

// NVLink: dcgm-exporter's total counter, and gpulet's per-link state and error counters.
TEST(ExpositionTest, NvLinkSeriesPerLinkAndTotal) {
  state::Snapshot snap = TwoGpus();
  gpu::DeviceSample s;
  s.taken = absl::Now();
  s.nvlink_data_tx_kib = 1000;
  s.nvlink_data_rx_kib = 2000;
  gpu::NvLinkSample up;
  up.link = 0;
  up.active = true;
  up.remote_type = NVML_NVLINK_DEVICE_TYPE_SWITCH;
  up.crc_flit_errors = 3;
  up.replay_errors = 1;
  gpu::NvLinkSample down;
  down.link = 1;
  down.active = false;
  s.nvlinks = {up, down};
  SampleSet set = AnsweringGpu0(s);
  std::string text = RenderMetrics(snap, set, {"node1", "570.1"}, false, absl::Now());
  std::vector<std::string> total = LinesStartingWith(text, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{");
  ASSERT_EQ(total.size(), 1u) << text;
  EXPECT_TRUE(absl::EndsWith(total[0], "} 3000")) << total[0];
  std::vector<std::string> links = LinesStartingWith(text, "gpulet_nvlink_up{");
  ASSERT_EQ(links.size(), 2u) << text;
  EXPECT_TRUE(absl::EndsWith(links[0], ",link=\"0\",remote=\"nvswitch\"} 1")) << links[0];
  EXPECT_TRUE(absl::EndsWith(links[1], ",link=\"1\",remote=\"unknown\"} 0")) << links[1];
  // Per GPU, summed over links, for every counter NVML reported (zeros included)...
  std::vector<std::string> errors = LinesStartingWith(text, "gpulet_nvlink_errors_total{");
  ASSERT_EQ(errors.size(), 2u) << text;
  EXPECT_TRUE(absl::EndsWith(errors[0],
                             "nvidia0\",model_name=\"Card \\\"A\\\"\","
                             "hostname=\"node1\",type=\"crc_flit\"} 3"))
      << errors[0];
  EXPECT_TRUE(absl::EndsWith(errors[1], ",type=\"replay\"} 1")) << errors[1];
  // ...and per link only where errors were counted.
  std::vector<std::string> per_link = LinesStartingWith(text, "gpulet_nvlink_link_errors_total{");
  ASSERT_EQ(per_link.size(), 2u) << text;
  EXPECT_TRUE(absl::EndsWith(per_link[0], ",link=\"0\",type=\"crc_flit\"} 3")) << per_link[0];
  std::vector<std::string> bytes = LinesStartingWith(text, "gpulet_nvlink_data_bytes_total{");
  ASSERT_EQ(bytes.size(), 2u);
  EXPECT_TRUE(absl::EndsWith(bytes[0], ",direction=\"tx\"} 1024000")) << bytes[0];
  std::string om = RenderMetrics(snap, set, {"node1", "570.1"}, true, absl::Now());
  EXPECT_EQ(LinesStartingWith(om, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL_total{").size(), 1u);
  EXPECT_TRUE(absl::StrContains(om, "# TYPE gpulet_nvlink_errors counter\n"));
}

// On the simulated H200, every field of dcgm-exporter's default list is exported with
// dcgm-exporter's type (gauge, counter, or the label DCGM_FI_DRIVER_VERSION) exactly when
// docs/metrics.md says "exported", and the doc's table lists exactly the default fields.
TEST(MetricsDaemonTest, DcgmDefaultCountersOnH200MatchTheDocTable) {
  std::map<std::string, std::string> csv = DcgmDefaultCounters();
  ASSERT_GE(csv.size(), 20u) << "the fixture tests/fixtures/dcgm-exporter/default-counters.csv";
  std::map<std::string, std::string> doc = DocDefaultCountersTable();
  std::set<std::string> csv_names, doc_names;
  for (const auto& [name, type] : csv) csv_names.insert(name);
  for (const auto& [name, status] : doc) {
    doc_names.insert(name);
    EXPECT_TRUE(status == "exported" || status == "not on this GPU class" || status == "not yet")
        << name << ": '" << status << "' in docs/metrics.md";
  }
  EXPECT_EQ(doc_names, csv_names) << "docs/metrics.md's default-counters table";

  fs::path dir = fs::temp_directory_path() / ("gmh-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  int port = testing::FreeLoopbackPort();
  testing::DaemonProcess daemon;
  ASSERT_TRUE(
      daemon.Start({gpulet::testing::GpuletBinary(), "--simulate", "h200", "--sim-state",
                    (dir / "state.json").string(), "serve", "--kubelet-dir", (dir / "k").string(),
                    "--metrics-address", absl::StrCat("127.0.0.1:", port)},
                   {}, (dir / "log").string()));
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(1, 0);
  // The profiling series need two GPM samples: they appear one sampling interval after the
  // others, so wait for them too (a test that saw only the first sample would be wrong).
  std::string text;
  for (int i = 0; i < 200; ++i) {
    auto r = c.Get("/metrics");
    if (r && absl::StrContains(r->body, "DCGM_FI_DEV_GPU_TEMP{")) text = r->body;
    if (absl::StrContains(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE{")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_FALSE(text.empty()) << daemon.Log();
  // Families with samples, by their declared type.
  std::map<std::string, std::string> exported;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, "# TYPE DCGM_")) continue;
    std::vector<std::string> cols = absl::StrSplit(line, ' ');
    ASSERT_EQ(cols.size(), 4u) << line;
    if (!LinesStartingWith(text, cols[2] + "{").empty()) exported[cols[2]] = cols[3];
  }
  bool driver_label = absl::StrContains(text, ",DCGM_FI_DRIVER_VERSION=\"");
  for (const auto& [name, type] : csv) {
    bool is_exported = type == "label" ? driver_label : exported.count(name) > 0;
    auto row = doc.find(name);
    if (row == doc.end()) continue;  // reported above
    EXPECT_EQ(is_exported, row->second == "exported")
        << name << " is " << (is_exported ? "" : "not ") << "exported on the H200 fixture; "
        << "docs/metrics.md says '" << row->second << "'";
    if (is_exported && type != "label") {
      EXPECT_EQ(exported[name], type) << name << ": dcgm-exporter's type";
    }
  }
  // Nothing DCGM-named is exported that the value table (and so the doc's "GPU values"
  // table) does not list.
  std::set<std::string> families = ValueTableFamilies();
  for (const auto& [name, type] : exported) EXPECT_EQ(families.count(name), 1u) << name;
  daemon.Stop(SIGTERM, absl::Seconds(5));  // before its directory goes
  fs::remove_all(dir);
}

// The shipped binary (statically linked, its GnuTLS without p11-kit, libidn2 and libunistring:
// cmake/p11_kit_absent.c, cmake/unicode_absent.c)
// serves /metrics over TLS from a web config: a client that trusts the test CA gets the
// metrics, one that trusts another CA or speaks plain HTTP gets none; a certificate renewed in
// place is served without a restart (the config watcher watches the files the web config
// names).
TEST(MetricsDaemonTest, TheBinaryServesTlsFromAWebConfigAndRenewsIt) {
  // OpenSSL writes to the socket with write(2): a server that drops a handshake it refuses (a
  // plain-HTTP client, another CA) or one that is still starting must not kill this process.
  struct sigaction ignore {
  }, previous{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &previous);
  struct RestoreSigpipe {
    struct sigaction action;
    ~RestoreSigpipe() { sigaction(SIGPIPE, &action, nullptr); }
  } restore{previous};
  fs::path dir = fs::temp_directory_path() / ("gmtls-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  absl::StatusOr<testing::TestCert> ca = testing::MakeTestCa("gpulet test CA");
  absl::StatusOr<testing::TestCert> other_ca = testing::MakeTestCa("another CA");
  ASSERT_TRUE(ca.ok() && other_ca.ok());
  absl::StatusOr<testing::TestCert> cert =
      testing::MakeTestCert(*ca, "gpulet", {"127.0.0.1"}, {"localhost"}, /*client=*/false);
  ASSERT_TRUE(cert.ok()) << cert.status();
  std::ofstream(dir / "ca.pem") << ca->cert_pem;
  std::ofstream(dir / "other-ca.pem") << other_ca->cert_pem;
  std::ofstream(dir / "cert.pem") << cert->cert_pem;
  std::ofstream(dir / "key.pem") << cert->key_pem;
  fs::permissions(dir / "key.pem", fs::perms::owner_read | fs::perms::owner_write);
  std::ofstream(dir / "web.yml") << "tls_server_config:\n  cert_file: cert.pem\n"
                                 << "  key_file: key.pem\n";
  std::ofstream(dir / "config.yaml")
      << "version: v1\nmetrics: {webConfigFile: " << (dir / "web.yml").string() << "}\n";
  int port = testing::FreeLoopbackPort();
  testing::DaemonProcess daemon;
  ASSERT_TRUE(daemon.Start({gpulet::testing::GpuletBinary(), "--simulate", "homelab", "--sim-state",
                            (dir / "state.json").string(), "serve", "--config",
                            (dir / "config.yaml").string(), "--kubelet-dir", (dir / "k").string(),
                            "--metrics-address", absl::StrCat("127.0.0.1:", port)},
                           {}, (dir / "log").string()));
  auto get = [&](const fs::path& ca_file) {
    httplib::SSLClient c("127.0.0.1", port);
    c.set_ca_cert_path((dir / ca_file).string());
    c.enable_server_certificate_verification(true);
    c.set_connection_timeout(1, 0);
    c.set_read_timeout(2, 0);
    return c.Get("/metrics");
  };
  std::string body;
  for (int i = 0; i < 200 && body.empty(); ++i) {
    auto r = get("ca.pem");
    if (r && r->status == 200 && absl::StrContains(r->body, "DCGM_FI_DEV_GPU_TEMP{")) {
      body = r->body;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  EXPECT_FALSE(body.empty()) << daemon.Log();
  EXPECT_FALSE(get("other-ca.pem")) << "a server certificate from another CA was accepted";

  // The certificate renewed in place (as cert-manager does to a Secret): the running gpulet
  // serves the new one within seconds, with no restart and no SIGHUP.
  absl::StatusOr<testing::TestCert> renewed =
      testing::MakeTestCert(*other_ca, "gpulet", {"127.0.0.1"}, {"localhost"}, /*client=*/false);
  ASSERT_TRUE(renewed.ok()) << renewed.status();
  std::ofstream(dir / "key.pem.new") << renewed->key_pem;
  std::ofstream(dir / "cert.pem.new") << renewed->cert_pem;
  fs::rename(dir / "key.pem.new", dir / "key.pem");
  fs::rename(dir / "cert.pem.new", dir / "cert.pem");
  bool rotated = false;
  for (int i = 0; i < 200 && !rotated; ++i) {
    auto r = get("other-ca.pem");
    rotated = r && r->status == 200;
    if (!rotated) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(rotated) << "the renewed certificate was not served within 10 s:\n" << daemon.Log();
  EXPECT_FALSE(get("ca.pem")) << "the old certificate is still served";
  httplib::Client plain("127.0.0.1", port);
  plain.set_connection_timeout(1, 0);
  plain.set_read_timeout(2, 0);
  auto r = plain.Get("/metrics");
  EXPECT_TRUE(!r || r->status != 200) << "plain HTTP got the metrics";
  daemon.Stop(SIGTERM, absl::Seconds(5));
  fs::remove_all(dir);
}

TEST(MetricsDaemonTest, HungGpuLeavesMetricsFastAndOtherGpuFresh) {
  fs::path dir = fs::temp_directory_path() / ("gmt-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  int port = testing::FreeLoopbackPort();
  std::string gpulet = gpulet::testing::GpuletBinary();
  std::string state = (dir / "state.json").string();
  testing::DaemonProcess daemon;
  ASSERT_TRUE(daemon.Start({gpulet, "--simulate", "homelab", "--sim-state", state, "serve",
                            "--kubelet-dir", (dir / "k").string(), "--metrics-address",
                            absl::StrCat("127.0.0.1:", port), "--probe-interval", "200ms"},
                           {}, (dir / "log").string()));
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(1, 0);
  bool up = false;
  for (int i = 0; i < 100 && !up; ++i) {
    auto r = c.Get("/metrics");
    up = r && r->body.find("DCGM_FI_DEV_GPU_TEMP{gpu=\"1\"") != std::string::npos;
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(up) << daemon.Log();

  // The simulator's thermal-hang script, without a pause: 94 C, then every call hangs.
  auto sim = testing::RunProgram({gpulet, "--simulate", "homelab", "--sim-state", state, "sim",
                                  "script", "thermal-hang", "1", "--pace", "0"});
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_NE(sim.out.find("step 2 of 2: every call on the card hangs"), std::string::npos)
      << sim.out;
  // Within a few sampling rounds GPU 1 is reported as not answering...
  bool marked = false;
  std::vector<double> ms;
  for (int i = 0; i < 100 && !marked; ++i) {
    absl::Time t0 = absl::Now();
    auto r = c.Get("/metrics");
    ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
    ASSERT_TRUE(r);
    marked = r->body.find("gpulet_gpu_up{gpu=\"1\"") != std::string::npos &&
             r->body.find("DCGM_FI_DEV_GPU_TEMP{gpu=\"1\"") == std::string::npos;
    if (!marked) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(marked) << daemon.Log();
  // ...while /metrics keeps answering fast and GPU 0's series stay fresh.
  // 300 scrapes over ~3 s: enough that the p99 is a percentile, not the single worst
  // request (which a busy CI machine can delay by itself).
  for (int i = 0; i < 300; ++i) {
    absl::Time t0 = absl::Now();
    auto r = c.Get("/metrics");
    ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
    ASSERT_TRUE(r);
    EXPECT_NE(r->body.find("DCGM_FI_DEV_GPU_TEMP{gpu=\"0\""), std::string::npos);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::sort(ms.begin(), ms.end());
  // The bound shows that the hang does not reach scrapes: a scrape that waited on the hung
  // GPU would take the NVML call deadline (10 s). It is far above a scrape's real cost (well
  // under a millisecond: `make bench` measures that) so that a CI machine busy with other
  // tests, or ASan+UBSan, cannot fail it.
  const double p99_bound_ms = 250.0;
  EXPECT_LT(ms[ms.size() * 99 / 100], p99_bound_ms) << "p99 scrape latency during the hang";
  auto status = c.Get("/status");
  ASSERT_TRUE(status);
  EXPECT_NE(status->body.find("\"answering\": false"), std::string::npos) << status->body;
  // `gpulet status` shows both GPUs and the fault.
  auto table =
      testing::RunProgram({gpulet, "status", "--address", absl::StrCat("127.0.0.1:", port)});
  EXPECT_NE(table.out.find("NVIDIA GeForce RTX 3080"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("NVIDIA GeForce RTX 5090"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("Unhealthy"), std::string::npos) << table.out << daemon.Log();
  EXPECT_NE(table.out.find("not answering"), std::string::npos) << table.out;
  EXPECT_EQ(table.exit_code, 1);
  // `gpulet doctor --daemon-address` reports the daemon's verdict as its gpu.health check.
  auto doctor =
      testing::RunProgram({gpulet, "--simulate", "homelab", "--sim-state", state, "doctor",
                           "--json", "--daemon-address", absl::StrCat("127.0.0.1:", port)});
  nlohmann::json report = nlohmann::json::parse(doctor.out, nullptr, false);
  ASSERT_FALSE(report.is_discarded()) << doctor.out << doctor.err;
  bool seen = false;
  for (const nlohmann::json& check : report["checks"]) {
    if (check["id"] != "gpu.health") continue;
    seen = true;
    EXPECT_EQ(check["verdict"], "fail") << check.dump();
    EXPECT_NE(check.dump().find("GPU 1"), std::string::npos) << check.dump();
  }
  EXPECT_TRUE(seen) << doctor.out;
  testing::RunProgram(
      {gpulet, "--simulate", "homelab", "--sim-state", state, "sim", "hang", "1", "0"});
  EXPECT_EQ(daemon.Stop(SIGTERM, absl::Seconds(10)), 0) << daemon.Log();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gpulet::metrics

namespace gpulet::metrics {
namespace {

// Every family gpulet can emit is documented in docs/metrics.md.
TEST(ExpositionTest, EveryFamilyIsDocumented) {
  state::Snapshot snap = TwoGpus();
  SampleSet set;
  GpuSampleState st;
  st.answering = true;
  gpu::DeviceSample s;
  s.taken = absl::Now();
  s.sm_clock_mhz = s.mem_clock_mhz = 1;
  s.gpu_temp_c = s.mem_temp_c = 1;
  s.power_w = s.power_limit_w = 1;
  s.energy_mj = 1;
  s.pcie_replays = 1;
  s.gpu_util = s.mem_util = s.enc_util = s.dec_util = 1;
  s.fb_free_bytes = s.fb_used_bytes = s.fb_reserved_bytes = 1 << 20;
  s.remapped_correctable = s.remapped_uncorrectable = 1;
  s.remap_failure = false;
  s.clocks_event_reasons = 1;
  s.processes.push_back({42, 1 << 20, std::nullopt, std::nullopt, std::nullopt});
  gpu::ProfilingSample& prof = s.profiling.emplace();
  prof.gr_engine_active = prof.sm_active = prof.sm_occupancy = prof.tensor_active = 0.5;
  prof.dram_active = prof.fp64_active = prof.fp32_active = prof.fp16_active = 0.5;
  prof.pcie_tx_bytes_per_second = prof.pcie_rx_bytes_per_second = 1;
  prof.nvlink_tx_bytes_per_second = prof.nvlink_rx_bytes_per_second = 1;
  s.nvlink_data_tx_kib = s.nvlink_data_rx_kib = 1;
  gpu::NvLinkSample link;
  link.active = true;
  link.crc_flit_errors = 1;
  s.nvlinks.push_back(link);
  st.last = s;
  set.by_uuid["GPU-test-0"] = st;
  auto pods = std::make_shared<PodMap>();
  pods->ok = true;
  pods->by_gpu["GPU-test-0"] = {{{"ns", "p", "c"}, "nvidia.com/gpu", "GPU-test-0", ""}};
  set.pods = pods;
  snap.devices[0].gpu.memory_total_bytes = 1 << 30;
  std::string text = RenderMetrics(snap, set, {"node1", "570.1"}, false, absl::Now());
  std::ifstream in(std::string(GPULET_SOURCE_DIR) + "/docs/metrics.md");
  std::stringstream doc;
  doc << in.rdbuf();
  int families = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, "# TYPE ")) continue;
    std::string name(line.substr(0, line.find(' ')));
    ++families;
    EXPECT_NE(doc.str().find(absl::StrCat("`", name, "`")), std::string::npos)
        << name << " is not in docs/metrics.md";
  }
  EXPECT_GE(families, 50);
  // The allocated GPU's DCGM series carry the pod; the other GPU's do not.
  EXPECT_NE(
      text.find("DCGM_FI_DEV_GPU_TEMP{gpu=\"0\",UUID=\"GPU-test-0\",pci_bus_id=\"00000000:"
                "01:00.0\",device=\"nvidia0\",modelName=\"Card \\\"A\\\"\",Hostname=\"node1\","
                "DCGM_FI_DRIVER_VERSION=\"570.1\",pod=\"p\",namespace=\"ns\",container=\"c\"} 1\n"),
      std::string::npos)
      << text;
}

}  // namespace
}  // namespace gpulet::metrics
