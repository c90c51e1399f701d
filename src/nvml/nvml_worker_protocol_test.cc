#include "nvml/nvml_worker_protocol.h"

#include "gpu/nvml_api.h"
#include "gpu/nvml_errors.h"
#include "gtest/gtest.h"

namespace gpulet::nvml {
namespace {

using nlohmann::json;

// Feeds `bytes` to a fresh decoder and returns the first result.
absl::StatusOr<std::optional<json>> DecodeOne(const std::string& bytes) {
  FrameDecoder d;
  d.Append(bytes);
  return d.Next();
}

std::string Frame(uint32_t n, const std::string& body) {
  std::string out;
  out.push_back(static_cast<char>(n >> 24));
  out.push_back(static_cast<char>(n >> 16));
  out.push_back(static_cast<char>(n >> 8));
  out.push_back(static_cast<char>(n));
  return out + body;
}

TEST(NvmlWorkerProtocolTest, FramesRoundTripByteByByte) {
  Request r;
  r.id = 7;
  r.op = Op::kProbe;
  r.index = 1;
  r.timeout = absl::Milliseconds(750);
  std::string bytes = EncodeFrame(EncodeRequest(r)) + EncodeFrame(EncodeRequest(r));
  FrameDecoder d;
  int messages = 0;
  for (char c : bytes) {
    d.Append(std::string(1, c));
    auto m = d.Next();
    ASSERT_TRUE(m.ok()) << m.status();
    if (!m->has_value()) continue;
    ++messages;
    auto back = DecodeRequest(**m);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->id, 7u);
    EXPECT_EQ(back->op, Op::kProbe);
    EXPECT_EQ(back->index, 1u);
    EXPECT_EQ(back->timeout, absl::Milliseconds(750));
  }
  EXPECT_EQ(messages, 2);
  EXPECT_EQ(d.buffered(), 0u);
}

TEST(NvmlWorkerProtocolTest, TruncatedFrameWaitsForMore) {
  std::string frame = EncodeFrame(json{{"v", 1}, {"id", 1}, {"result", json::object()}});
  auto m = DecodeOne(frame.substr(0, frame.size() - 1));
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE(m->has_value());
  m = DecodeOne(frame.substr(0, 2));
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE(m->has_value());
}

TEST(NvmlWorkerProtocolTest, OversizeLengthIsRefusedAndSticks) {
  FrameDecoder d;
  d.Append(Frame(kMaxFrameBytes + 1, "{}"));
  auto m = d.Next();
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(absl::IsDataLoss(m.status()));
  EXPECT_NE(m.status().message().find("over the limit"), std::string::npos) << m.status();
  // The stream lost its framing: later bytes cannot make it good again.
  d.Append(EncodeFrame(json{{"v", 1}, {"id", 1}, {"result", 1}}));
  EXPECT_FALSE(d.Next().ok());
}

TEST(NvmlWorkerProtocolTest, NotJsonWrongVersionAndNonObjectsAreRefused) {
  for (const std::string& body : {std::string("not json"), std::string("[1,2]"),
                                  std::string("{\"id\":1}"), std::string("{\"v\":2,\"id\":1}"),
                                  std::string("{\"v\":\"1\"}"), std::string("\xff\xfe", 2)}) {
    auto m = DecodeOne(Frame(static_cast<uint32_t>(body.size()), body));
    EXPECT_TRUE(absl::IsDataLoss(m.status())) << body << ": " << m.status();
  }
}

TEST(NvmlWorkerProtocolTest, WrongTypesAreDataLossNamingTheField) {
  auto r = DecodeResponse(json{{"v", 1}, {"id", "seven"}, {"result", 1}});
  EXPECT_TRUE(absl::IsDataLoss(r.status()));
  EXPECT_NE(r.status().message().find("\"id\""), std::string::npos) << r.status();
  EXPECT_TRUE(absl::IsDataLoss(DecodeResponse(json{{"v", 1}, {"id", 1}}).status()));
  EXPECT_TRUE(absl::IsDataLoss(
      DecodeResponse(json{{"v", 1}, {"id", 1}, {"error", {{"code", 0}}}}).status()));
  EXPECT_TRUE(absl::IsDataLoss(
      DecodeResponse(json{{"v", 1}, {"id", 1}, {"error", {{"code", 99}}}}).status()));
  EXPECT_TRUE(
      absl::IsDataLoss(DecodeRequest(json{{"v", 1}, {"id", 1}, {"op", "reboot"}}).status()));
  EXPECT_TRUE(absl::IsDataLoss(
      DecodeRequest(json{{"v", 1}, {"id", 1}, {"op", "probe"}, {"timeout_ms", -5}}).status()));
  EXPECT_TRUE(absl::IsDataLoss(
      DecodeRequest(json{{"v", 1}, {"id", 1}, {"op", "probe"}, {"index", -1}}).status()));

  auto id = IdentityFromJson(json{{"index", 0}, {"uuid", "GPU-x"}, {"minor", "zero"}});
  EXPECT_TRUE(absl::IsDataLoss(id.status()));
  EXPECT_NE(id.status().message().find("\"minor\""), std::string::npos) << id.status();
  EXPECT_TRUE(absl::IsDataLoss(IdentityFromJson(json{{"index", 0}}).status()));  // no uuid
  EXPECT_TRUE(absl::IsDataLoss(SampleFromJson(json{{"gpu_util", 1.5}}).status()));
  EXPECT_TRUE(absl::IsDataLoss(SampleFromJson(json{{"gpu_util", 1ULL << 40}}).status()));
  EXPECT_TRUE(absl::IsDataLoss(SampleFromJson(json{{"processes", {{{"pid", -1}}}}}).status()));
  EXPECT_TRUE(absl::IsDataLoss(SampleFromJson(json{{"processes", 3}}).status()));
  EXPECT_TRUE(absl::IsDataLoss(SampleFromJson(json{{"profiling", 3}}).status()));
  EXPECT_TRUE(absl::IsDataLoss(SampleFromJson(json{{"nvlinks", {{{"link", 0}}}}}).status()));
  EXPECT_TRUE(absl::IsDataLoss(ProbeAnswerFromJson(json::array()).status()));
  EXPECT_TRUE(absl::IsDataLoss(EventFromJson(json{{"index", 0}}).status()));
  EXPECT_TRUE(absl::IsDataLoss(HelloFromJson(json{{"pid", 0}}).status()));
  EXPECT_TRUE(absl::IsDataLoss(CountFromJson(json{{"count", true}}).status()));
}

TEST(NvmlWorkerProtocolTest, ErrorKeepsCodeMessageAndNvmlReturn) {
  absl::Status lost = gpu::NvmlError(NVML_ERROR_GPU_IS_LOST, "nvmlDeviceGetUUID", "GPU index 1");
  auto r = DecodeResponse(EncodeError(9, lost));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->id, 9u);
  EXPECT_EQ(r->status.code(), lost.code());
  EXPECT_EQ(r->status.message(), lost.message());
  EXPECT_EQ(gpu::NvmlCodeOf(r->status), NVML_ERROR_GPU_IS_LOST);

  auto plain = DecodeResponse(EncodeError(3, absl::DeadlineExceededError("slow")));
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(plain->status));
  EXPECT_EQ(gpu::NvmlCodeOf(plain->status), -1);
}

TEST(NvmlWorkerProtocolTest, ValuesRoundTrip) {
  gpu::DeviceIdentity id;
  id.index = 1;
  id.uuid = "GPU-8a41d7b9-52c6-4f13-b0e8-7d2c9e155090";
  id.name = "NVIDIA GeForce RTX 5090";
  id.bus_id = "00000000:02:00.0";
  id.pci_device_id = 0x2b8510de;
  id.minor = 1;
  id.memory_total_bytes = 34190917632ULL;
  id.cc_major = 12;
  id.cc_minor = 0;
  id.persistence_mode = false;
  id.mig_capable = false;
  id.virtualization_mode = 2;
  auto id2 = IdentityFromJson(ToJson(id));
  ASSERT_TRUE(id2.ok()) << id2.status();
  EXPECT_EQ(id2->uuid, id.uuid);
  EXPECT_EQ(id2->name, id.name);
  EXPECT_EQ(id2->pci_device_id, id.pci_device_id);
  EXPECT_EQ(id2->minor, id.minor);
  EXPECT_EQ(id2->memory_total_bytes, id.memory_total_bytes);
  EXPECT_EQ(id2->cc_major, 12);
  EXPECT_EQ(id2->persistence_mode, false);
  EXPECT_FALSE(id2->serial.has_value());  // absent stays absent
  EXPECT_EQ(id2->mig_capable, false);
  EXPECT_EQ(id2->virtualization_mode, 2);

  gpu::DeviceSample s;
  s.gpu_util = 71;
  s.power_w = 486.2;
  s.energy_mj = 214503118000ULL;
  s.pstate = 0;
  s.processes = {{4242, 9663676416ULL, 3u, 0u, 87u},
                 {3117, std::nullopt, std::nullopt, std::nullopt, std::nullopt}};
  s.profiling.emplace().tensor_active = 0.376;
  s.profiling->pcie_rx_bytes_per_second = 1.25e9;
  gpu::NvLinkSample link;
  link.link = 17;
  link.active = true;
  link.remote_type = 2;
  link.crc_flit_errors = 5;
  s.nvlinks = {link};
  s.nvlink_data_tx_kib = 1ULL << 40;
  gpu::MigInstanceSample mig;
  mig.gpu_instance_id = 3;
  mig.fb_used_bytes = 1ULL << 33;
  mig.profiling.emplace().sm_active = 0.5;
  s.mig = {mig};
  auto s2 = SampleFromJson(ToJson(s));
  ASSERT_TRUE(s2.ok()) << s2.status();
  EXPECT_EQ(s2->gpu_util, 71u);
  EXPECT_DOUBLE_EQ(*s2->power_w, 486.2);
  EXPECT_EQ(s2->energy_mj, s.energy_mj);
  EXPECT_EQ(s2->pstate, 0);
  EXPECT_FALSE(s2->mem_temp_c.has_value());
  ASSERT_EQ(s2->processes.size(), 2u);
  EXPECT_EQ(s2->processes[0].used_bytes, 9663676416ULL);
  EXPECT_FALSE(s2->processes[1].used_bytes.has_value());
  EXPECT_EQ(s2->processes[0].sm_percent, 87u);
  EXPECT_FALSE(s2->processes[1].sm_percent.has_value());
  ASSERT_TRUE(s2->profiling.has_value());
  EXPECT_DOUBLE_EQ(*s2->profiling->tensor_active, 0.376);
  EXPECT_DOUBLE_EQ(*s2->profiling->pcie_rx_bytes_per_second, 1.25e9);
  EXPECT_FALSE(s2->profiling->sm_active.has_value());
  ASSERT_EQ(s2->nvlinks.size(), 1u);
  EXPECT_EQ(s2->nvlinks[0].link, 17u);
  EXPECT_TRUE(s2->nvlinks[0].active);
  EXPECT_EQ(s2->nvlinks[0].remote_type, 2);
  EXPECT_EQ(s2->nvlinks[0].crc_flit_errors, 5u);
  EXPECT_FALSE(s2->nvlinks[0].replay_errors.has_value());
  EXPECT_EQ(s2->nvlink_data_tx_kib, 1ULL << 40);
  EXPECT_FALSE(s2->nvlink_data_rx_kib.has_value());
  EXPECT_EQ(s2->processes[0].gpu_instance_id, 3u);
  EXPECT_EQ(s2->processes[0].compute_instance_id, 0u);
  EXPECT_FALSE(s2->processes[1].gpu_instance_id.has_value());
  ASSERT_EQ(s2->mig.size(), 1u);
  EXPECT_EQ(s2->mig[0].gpu_instance_id, 3u);
  EXPECT_EQ(s2->mig[0].fb_used_bytes, 1ULL << 33);
  EXPECT_FALSE(s2->mig[0].fb_free_bytes.has_value());
  EXPECT_DOUBLE_EQ(*s2->mig[0].profiling->sm_active, 0.5);

  gpu::MigLayout layout;
  layout.enabled = true;
  layout.pending_enabled = true;
  gpu::MigDeviceInfo d;
  d.index = 2;
  d.uuid = "MIG-1b2c3d4e-0000-5000-8000-000000000003";
  d.gpu_instance_id = 9;
  d.gpu_instance_slices = 3;
  d.compute_instance_slices = 3;
  d.memory_bytes = 72704ULL << 20;
  d.sm_count = 60;
  d.copy_engines = 3;
  d.profile = "3g.71gb";
  layout.devices = {d};
  auto layout2 = MigLayoutFromJson(ToJson(layout));
  ASSERT_TRUE(layout2.ok()) << layout2.status();
  EXPECT_EQ(*layout2, layout);
  nlohmann::json broken = ToJson(layout);
  broken["devices"][0].erase("uuid");
  EXPECT_FALSE(MigLayoutFromJson(broken).ok());
  // A sample without GPM or NVLink stays without.
  auto bare = SampleFromJson(ToJson(gpu::DeviceSample{}));
  ASSERT_TRUE(bare.ok());
  EXPECT_FALSE(bare->profiling.has_value());
  EXPECT_TRUE(bare->nvlinks.empty());

  auto none = EventFromJson(ToJson(std::optional<gpu::GpuEvent>()));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  auto ev = EventFromJson(ToJson(std::optional<gpu::GpuEvent>(gpu::GpuEvent{1, 8, 79, 5, 0})));
  ASSERT_TRUE(ev.ok());
  EXPECT_EQ((*ev)->data, 79u);
}

}  // namespace
}  // namespace gpulet::nvml
