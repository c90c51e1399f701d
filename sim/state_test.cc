// Tests for the simulator state model and its JSON file (sim/state.h).

#include "sim/state.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>

#include "testing/files.h"

namespace gpulet::sim {
namespace {

constexpr char kUuid[] = "GPU-8a41d7b9-52c6-4f13-b0e8-7d2c9e155090";

using TempDir = gpulet::testing::ScratchDir;

TEST(SimStateTest, GpuKeys) {
  EXPECT_TRUE(IsValidGpuKey(kUuid));
  EXPECT_TRUE(IsValidGpuKey("0"));
  EXPECT_TRUE(IsValidGpuKey("17"));
  EXPECT_FALSE(IsValidGpuKey(""));
  EXPECT_FALSE(IsValidGpuKey("07"));
  EXPECT_FALSE(IsValidGpuKey("-1"));
  EXPECT_FALSE(IsValidGpuKey("gpu0"));
  EXPECT_FALSE(IsValidGpuKey("GPU-"));
  EXPECT_FALSE(IsValidGpuKey("5000"));
}

TEST(SimStateTest, JsonRoundTrip) {
  SimState state;
  SetInitHang(&state, 2.5);
  ASSERT_TRUE(SetLost(&state, kUuid, true));
  ASSERT_TRUE(SetHang(&state, "1", 0.25));
  ASSERT_TRUE(InjectXid(&state, "1", 79));
  LoadOverride load;
  load.power_w = 412.5;
  load.memory_used_mib = 1234;
  load.clocks_event_reasons = 0x44;
  ASSERT_TRUE(SetLoad(&state, "1", load));
  ASSERT_TRUE(AddProcess(
      &state, "1",
      {4242, "ollama", 9216, ProcessType::kCompute, std::nullopt, std::nullopt, std::nullopt}));
  ASSERT_TRUE(AddProcess(
      &state, "1",
      {1000, "Xorg", 20, ProcessType::kGraphics, std::nullopt, std::nullopt, std::nullopt}));
  ASSERT_TRUE(AddProcess(
      &state, "1", {4242, "ollama", 9300, ProcessType::kCompute, std::nullopt, std::nullopt, 62u}));
  ASSERT_TRUE(SetRemappedRows(&state, "1", {1, 2, true, false}));
  ASSERT_TRUE(SetEccErrors(&state, "1", {0, 3, 5, 7}));

  const std::string text = StateToJson(state);
  SimState back;
  std::string error;
  ASSERT_TRUE(StateFromJson(text, &back, &error)) << error << "\n" << text;
  EXPECT_EQ(StateToJson(back), text);
  EXPECT_DOUBLE_EQ(back.init_hang_seconds, 2.5);
  EXPECT_TRUE(back.gpus.at(kUuid).lost);
  const GpuState& gpu = back.gpus.at("1");
  EXPECT_DOUBLE_EQ(gpu.hang_seconds, 0.25);
  ASSERT_EQ(gpu.xids.size(), 1u);
  EXPECT_EQ(gpu.xids[0].xid, 79u);
  EXPECT_DOUBLE_EQ(*gpu.load.power_w, 412.5);
  EXPECT_EQ(*gpu.load.memory_used_mib, 1234u);
  EXPECT_EQ(*gpu.load.clocks_event_reasons, 0x44u);
  EXPECT_FALSE(gpu.load.temperature_c.has_value());
  ASSERT_EQ(gpu.processes->size(), 2u);  // pid 4242 replaced, not duplicated
  EXPECT_EQ((*gpu.processes)[0].used_mib, 9300u);
  EXPECT_EQ((*gpu.processes)[0].sm_util, 62u);
  EXPECT_EQ((*gpu.processes)[1].type, ProcessType::kGraphics);
  EXPECT_FALSE((*gpu.processes)[1].sm_util.has_value());
  EXPECT_TRUE(gpu.remapped_rows->pending);
  EXPECT_EQ(gpu.ecc_errors->aggregate_uncorrected, 7u);
}

TEST(SimStateTest, ParsingIsStrict) {
  SimState state;
  std::string error;
  EXPECT_FALSE(StateFromJson(R"({"gpus": {"0": {"lsot": true}}})", &state, &error));
  EXPECT_NE(error.find("lsot"), std::string::npos) << error;
  EXPECT_FALSE(StateFromJson(R"({"gpus": {"gpu0": {}}})", &state, &error));
  EXPECT_NE(error.find("gpu0"), std::string::npos) << error;
  EXPECT_FALSE(StateFromJson(R"({"gpus": {"0": {"hang_seconds": -1}}})", &state, &error));
  EXPECT_FALSE(StateFromJson(R"({"gpus": {"0": {"load": {"pstate": 16}}}})", &state, &error));
  EXPECT_FALSE(StateFromJson(R"({"gpus": {"0": {"xids": [{"xid": 79}]}}})", &state, &error));
  EXPECT_FALSE(StateFromJson(R"({"version": 2})", &state, &error));
  EXPECT_FALSE(StateFromJson(R"({"driver_not_loaded": 1})", &state, &error));
  EXPECT_FALSE(StateFromJson("{", &state, &error));
  EXPECT_FALSE(error.empty());
  EXPECT_TRUE(StateFromJson(R"({"gpus": {"0": {"lost": true}}})", &state, &error)) << error;
  EXPECT_TRUE(state.gpus.at("0").lost);
}

TEST(SimStateTest, GpmAndNvLinkJsonRoundTrip) {
  SimState state;
  LoadOverride load;
  load.gpm["any_tensor_util"] = 50;
  load.gpm["nvlink_total_tx_mib_s"] = 120000.5;
  ASSERT_TRUE(SetLoad(&state, "0", load));
  NvLinkCounters errors;
  errors[2] = 12;  // crc_flit
  errors[0] = 4;   // replay
  ASSERT_TRUE(SetNvLink(&state, "0", 3, true, errors));
  ASSERT_TRUE(SetNvLink(&state, "0", 17, true, {}));
  ASSERT_TRUE(SetNvLink(&state, "0", 5, std::nullopt, {std::nullopt, 1, std::nullopt, 2}));
  EXPECT_FALSE(SetNvLink(&state, "0", 18, true, {}));
  EXPECT_FALSE(SetNvLink(&state, "gpu0", 1, true, {}));

  const std::string text = StateToJson(state);
  EXPECT_NE(text.find("\"crc_flit\": 12"), std::string::npos) << text;
  SimState back;
  std::string error;
  ASSERT_TRUE(StateFromJson(text, &back, &error)) << error << "\n" << text;
  EXPECT_EQ(StateToJson(back), text);
  const GpuState& gpu = back.gpus.at("0");
  EXPECT_DOUBLE_EQ(gpu.load.gpm.at("any_tensor_util"), 50);
  EXPECT_DOUBLE_EQ(gpu.load.gpm.at("nvlink_total_tx_mib_s"), 120000.5);
  EXPECT_EQ(gpu.nvlink.down, (std::set<unsigned>{3, 17}));
  ASSERT_EQ(gpu.nvlink.errors.count(3), 1u);
  EXPECT_EQ(gpu.nvlink.errors.at(3)[2], 12u);
  EXPECT_EQ(gpu.nvlink.errors.at(3)[0], 4u);
  EXPECT_FALSE(gpu.nvlink.errors.at(3)[1].has_value());
  EXPECT_EQ(gpu.nvlink.errors.at(5)[3], 2u);

  // The documented form parses too.
  ASSERT_TRUE(StateFromJson(
      R"({"gpus": {"2": {"load": {"gpm": {"sm_util": 12.5}},
                         "nvlink": {"down": [3], "errors": {"3": {"crc_flit": 12, "replay": 4}}}}}})",
      &back, &error))
      << error;
  EXPECT_EQ(back.gpus.at("2").nvlink.errors.at(3)[0], 4u);

  // Up again: the link leaves the down list; an entry with nothing left is not written.
  ASSERT_TRUE(SetNvLink(&state, "1", 2, true, {}));
  ASSERT_TRUE(SetNvLink(&state, "1", 2, false, {}));
  EXPECT_TRUE(state.gpus.at("1").nvlink.empty());
  EXPECT_EQ(StateToJson(state).find("\"1\""), std::string::npos);
}

TEST(SimStateTest, GpmAndNvLinkParsingIsStrict) {
  const struct {
    const char* json;
    const char* error;  // in the message
  } cases[] = {
      {R"({"gpus": {"0": {"load": {"gpm": {"sm_utilization": 5}}}}})", "sm_utilization"},
      {R"({"gpus": {"0": {"load": {"gpm": {"sm_util": 101}}}}})", "load.gpm.sm_util"},
      {R"({"gpus": {"0": {"load": {"gpm": {"sm_util": -1}}}}})", "percentage"},
      {R"({"gpus": {"0": {"load": {"gpm": {"pcie_tx_mib_s": -5}}}}})", "MiB/s"},
      {R"({"gpus": {"0": {"load": {"gpm": {"sm_util": "high"}}}}})", "load.gpm.sm_util"},
      {R"({"gpus": {"0": {"load": {"gpm": [1]}}}})", "load.gpm: expected an object"},
      {R"({"gpus": {"0": {"nvlink": {"up": [1]}}}})", "nvlink: unknown key \"up\""},
      {R"({"gpus": {"0": {"nvlink": {"down": [18]}}}})", "nvlink.down[0]"},
      {R"({"gpus": {"0": {"nvlink": {"down": [-1]}}}})", "nvlink.down[0]"},
      {R"({"gpus": {"0": {"nvlink": {"down": 3}}}})", "nvlink.down"},
      {R"({"gpus": {"0": {"nvlink": {"errors": {"03": {"replay": 1}}}}}})", "errors[\"03\"]"},
      {R"({"gpus": {"0": {"nvlink": {"errors": {"18": {"replay": 1}}}}}})", "errors[\"18\"]"},
      {R"({"gpus": {"0": {"nvlink": {"errors": {"3": {"crc": 1}}}}}})", "unknown key \"crc\""},
      {R"({"gpus": {"0": {"nvlink": {"errors": {"3": {"replay": -2}}}}}})", "replay"},
  };
  for (const auto& c : cases) {
    SimState state;
    std::string error;
    EXPECT_FALSE(StateFromJson(c.json, &state, &error)) << c.json;
    EXPECT_NE(error.find(c.error), std::string::npos) << c.json << ": " << error;
  }
}

TEST(SimStateTest, MigJsonRoundTrip) {
  SimState state;
  MigOverride mig;
  mig.enabled = true;
  MigInstance m;
  m.gpu_instance = 2;
  m.compute_instance = 0;
  m.profile = "2g.35gb";
  m.placement = 0;
  m.uuid = "MIG-c1a7e0f2-9b34-5d58-8e61-2f0b7a3d0202";
  m.gpm = std::map<std::string, double>{{"sm_util", 12.5}};
  mig.instances.push_back(m);
  m.gpu_instance = 3;
  m.profile = "1g.18gb";
  m.placement = 2;
  m.uuid = "MIG-c1a7e0f2-9b34-5d58-8e61-2f0b7a3d0203";
  m.gpm.reset();
  mig.instances.push_back(m);
  ASSERT_TRUE(SetMig(&state, "0", mig));
  SimProcess p;
  p.pid = 90211;
  p.name = "vllm";
  p.used_mib = 1000;
  p.gpu_instance = 3;
  ASSERT_TRUE(AddProcess(&state, "0", p));
  ASSERT_TRUE(InjectXid(&state, "0", 31, 3, 0));
  ASSERT_TRUE(InjectXid(&state, "0", 43, 3));
  EXPECT_FALSE(InjectXid(&state, "0", 43, std::nullopt, 1));  // a CI needs its GI

  SimState parsed;
  std::string error;
  ASSERT_TRUE(StateFromJson(StateToJson(state), &parsed, &error)) << error;
  const GpuState& gpu = parsed.gpus.at("0");
  ASSERT_TRUE(gpu.mig.has_value());
  EXPECT_TRUE(gpu.mig->enabled);
  EXPECT_EQ(gpu.mig->instances, mig.instances);
  ASSERT_EQ(gpu.processes->size(), 1u);
  EXPECT_EQ((*gpu.processes)[0].gpu_instance, 3u);
  EXPECT_FALSE((*gpu.processes)[0].compute_instance.has_value());
  ASSERT_EQ(gpu.xids.size(), 2u);
  EXPECT_EQ(gpu.xids[0].gpu_instance, 3u);
  EXPECT_EQ(gpu.xids[0].compute_instance, 0u);
  EXPECT_FALSE(gpu.xids[1].compute_instance.has_value());

  // The UUID entry's layout wins over the index entry's; ClearMig goes back to the fixture.
  MigOverride off;
  ASSERT_TRUE(SetMig(&state, kUuid, off));
  EXPECT_FALSE(MergedGpuState(state, 0, kUuid).mig->enabled);
  EXPECT_TRUE(MergedGpuState(state, 0, "GPU-other").mig->enabled);
  ASSERT_TRUE(ClearMig(&state, kUuid));
  ASSERT_TRUE(ClearMig(&state, "0"));
  EXPECT_FALSE(MergedGpuState(state, 0, kUuid).mig.has_value());
  Reset(&state);
  EXPECT_TRUE(state.gpus.empty());
}

TEST(SimStateTest, MigParsingIsStrict) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"gpus": {"0": {"mig": {"mode": "on"}}}})", "mig.mode: expected"},
      {R"({"gpus": {"0": {"mig": {"mode": "enabled", "layout": []}}}})", "unknown key \"layout\""},
      {R"({"gpus": {"0": {"mig": {"mode": "enabled", "instances": [{"gpu_instance": 1}]}}}})",
       "needs gpu_instance, profile, placement and uuid"},
      {R"({"gpus": {"0": {"mig": {"instances": [{"gpu_instance": 1, "profile": "1g.18gb",
          "placement": 0, "uuid": "MIG-x", "gpm": {"sm_util": 101}}]}}}})",
       "instances[0].gpm.sm_util: expected a percentage"},
      {R"({"gpus": {"0": {"processes": [{"pid": 1, "compute_instance": 0}]}}})",
       "compute_instance needs gpu_instance"},
      {R"({"gpus": {"0": {"processes": [{"pid": 1, "sm_util": 101}]}}})",
       "processes[0].sm_util: expected an integer from 0 to 100"},
      {R"({"gpus": {"0": {"processes": [{"pid": 1, "sm_util": -1}]}}})",
       "processes[0].sm_util: expected an integer from 0 to 100"},
      {R"({"gpus": {"0": {"processes": [{"pid": 1, "sm_utl": 5}]}}})", "unknown key \"sm_utl\""},
      {R"({"gpus": {"0": {"xids": [{"seq": 1, "xid": 31, "gpu_instance": -1}]}}})",
       "xids[0].gpu_instance: expected an integer"},
      {R"({"gpus": {"0": {"xids": [{"seq": 1, "xid": 31, "compute_instance": 0}]}}})",
       "xids[0]: compute_instance needs gpu_instance"},
  };
  for (const auto& [text, expected] : cases) {
    SimState state;
    std::string error;
    EXPECT_FALSE(StateFromJson(text, &state, &error)) << text;
    EXPECT_NE(error.find(expected), std::string::npos) << text << " -> " << error;
  }
}

TEST(SimStateTest, GpmNamesMatchTheirRanges) {
  const GpmMetric* sm = FindGpmMetric("sm_util");
  ASSERT_NE(sm, nullptr);
  EXPECT_TRUE(sm->percent);
  EXPECT_TRUE(GpmValueInRange(*sm, 100));
  EXPECT_FALSE(GpmValueInRange(*sm, 100.5));
  const GpmMetric* tx = FindGpmMetric("nvlink_total_tx_mib_s");
  ASSERT_NE(tx, nullptr);
  EXPECT_FALSE(tx->percent);
  EXPECT_TRUE(GpmValueInRange(*tx, 1e6));
  EXPECT_FALSE(GpmValueInRange(*tx, -0.5));
  EXPECT_EQ(FindGpmMetricById(tx->id), tx);
  EXPECT_EQ(FindGpmMetric("nope"), nullptr);
  EXPECT_EQ(FindGpmMetricById(999), nullptr);
  for (const GpmMetric& m : GpmMetrics()) EXPECT_EQ(FindGpmMetric(m.name), &m);
}

TEST(SimStateTest, HelpersRejectBadKeys) {
  SimState state;
  EXPECT_FALSE(InjectXid(&state, "gpu0", 79));
  EXPECT_FALSE(SetLost(&state, "", true));
  EXPECT_TRUE(state.gpus.empty());
}

TEST(SimStateTest, XidSequenceKeepsIncreasingAcrossReset) {
  SimState state;
  ASSERT_TRUE(InjectXid(&state, "0", 13));
  ASSERT_TRUE(InjectXid(&state, "0", 31));
  const uint64_t first = state.gpus.at("0").xids[0].seq;
  const uint64_t second = state.gpus.at("0").xids[1].seq;
  EXPECT_GT(second, first);
  Reset(&state);
  EXPECT_TRUE(state.gpus.empty());
  ASSERT_TRUE(InjectXid(&state, "0", 79));
  EXPECT_GT(state.gpus.at("0").xids[0].seq, second);
  // A fresh state (file deleted) still numbers above the old ones: the clock (in
  // microseconds) is the floor, so let it tick once.
  std::this_thread::sleep_for(std::chrono::microseconds(5));
  SimState fresh;
  ASSERT_TRUE(InjectXid(&fresh, "0", 79));
  EXPECT_GT(fresh.gpus.at("0").xids[0].seq, second);
}

// A reset clears what a reset clears and leaves a card that fell off the bus lost; a card
// that faults after every reset raises its last XID again, and that survives the file.
TEST(SimStateTest, ResetClearsWhatAResetClearsAndAFailingCardFaultsAgain) {
  SimState s;
  ASSERT_TRUE(SetResetRequired(&s, kUuid, true));
  ASSERT_TRUE(SetHang(&s, kUuid, 3));
  ASSERT_TRUE(SetRecoveryAction(&s, kUuid, 1));
  ASSERT_TRUE(
      AddProcess(&s, kUuid, SimProcess{4242, "ollama", 1024, ProcessType::kCompute, {}, {}, {}}));
  ASSERT_TRUE(InjectXid(&s, kUuid, 48));
  ASSERT_TRUE(ResetGpu(&s, kUuid));
  const GpuState& g = s.gpus.at(kUuid);
  EXPECT_FALSE(g.reset_required);
  EXPECT_EQ(g.hang_seconds, 0);
  EXPECT_EQ(g.recovery_action, 0u);
  ASSERT_TRUE(g.processes.has_value());
  EXPECT_TRUE(g.processes->empty());
  EXPECT_EQ(g.xids.size(), 1u);
  ASSERT_TRUE(SetLost(&s, "1", true));
  ASSERT_TRUE(ResetGpu(&s, "1"));
  EXPECT_TRUE(s.gpus.at("1").lost);
  EXPECT_FALSE(s.gpus.at("1").recovery_action.has_value());  // a driver that does not report it

  ASSERT_TRUE(SetFaultsAfterReset(&s, kUuid, true));
  SimState back;
  std::string error;
  ASSERT_TRUE(StateFromJson(StateToJson(s), &back, &error)) << error;
  ASSERT_TRUE(ResetGpu(&back, kUuid));
  ASSERT_EQ(back.gpus.at(kUuid).xids.size(), 2u);
  EXPECT_EQ(back.gpus.at(kUuid).xids[1].xid, 48u);
  EXPECT_GT(back.gpus.at(kUuid).xids[1].seq, back.gpus.at(kUuid).xids[0].seq);
  EXPECT_FALSE(ResetGpu(&back, "not-a-key"));
}

// A reboot brings every card back, on the fixture's minor number, and keeps what a card
// keeps across a power cycle; a card that fails after every reboot falls off the bus again
// when its time comes, with its last XID anew (numbered for that time).
TEST(SimStateTest, ARebootBringsCardsBackAndAFailingCardFailsAgainLater) {
  SimState s;
  ASSERT_TRUE(SetLost(&s, "0", true));
  ASSERT_TRUE(SetMinor(&s, "0", 7));
  ASSERT_TRUE(SetHang(&s, "0", 3));
  ASSERT_TRUE(SetRemappedRows(&s, "0", {0, 1, true, false}));
  ASSERT_TRUE(InjectXid(&s, kUuid, 79));
  ASSERT_TRUE(SetLost(&s, kUuid, true));
  ASSERT_TRUE(SetFailsAfterReboot(&s, kUuid, 5));
  LoadOverride hot;
  hot.temperature_c = 94;
  ASSERT_TRUE(SetLoad(&s, kUuid, hot));

  SimState back;
  std::string error;
  ASSERT_TRUE(StateFromJson(StateToJson(s), &back, &error)) << error;
  EXPECT_EQ(back.gpus.at("0").minor, 7u);
  EXPECT_EQ(back.gpus.at(kUuid).fails_after_reboot_s, 5);
  const double now = WallSeconds();
  RebootNode(&back);
  ASSERT_TRUE(StateFromJson(StateToJson(back), &back, &error)) << error;
  EXPECT_EQ(back.boots, 1u);
  const GpuState& plain = back.gpus.at("0");
  EXPECT_FALSE(LostAt(plain, now + 60));
  EXPECT_FALSE(plain.minor.has_value());
  EXPECT_EQ(plain.hang_seconds, 0);
  EXPECT_TRUE(plain.remapped_rows->pending);  // the card's own record survives
  const GpuState& failing = back.gpus.at(kUuid);
  EXPECT_FALSE(LostAt(failing, now));
  EXPECT_TRUE(LostAt(failing, now + 6));
  ASSERT_EQ(failing.xids.size(), 2u);
  EXPECT_EQ(failing.xids[1].xid, 79u);
  EXPECT_GE(failing.xids[1].seq, static_cast<uint64_t>((now + 4) * 1e6));
  EXPECT_LT(back.next_xid_seq, failing.xids[1].seq);  // XIDs injected meanwhile are not held
  EXPECT_FALSE(failing.load.temperature_c.has_value());
  // `sim recover` (SetLost false) cancels the coming loss; `sim clear` keeps the boots.
  SimState recovered = back;
  ASSERT_TRUE(SetLost(&recovered, kUuid, false));
  EXPECT_FALSE(LostAt(recovered.gpus.at(kUuid), now + 6));
  Reset(&back);
  EXPECT_EQ(back.boots, 1u);
  EXPECT_FALSE(SetMinor(&back, "not-a-key", 1));
  EXPECT_FALSE(SetFailsAfterReboot(&back, "not-a-key", 1));
}

TEST(SimStateTest, MergesIndexAndUuidEntries) {
  SimState state;
  LoadOverride by_index;
  by_index.temperature_c = 50;
  by_index.power_w = 100;
  LoadOverride by_uuid;
  by_uuid.temperature_c = 90;
  ASSERT_TRUE(SetLoad(&state, "1", by_index));
  ASSERT_TRUE(SetLoad(&state, kUuid, by_uuid));
  ASSERT_TRUE(SetHang(&state, "1", 3));
  ASSERT_TRUE(SetHang(&state, kUuid, 1));
  ASSERT_TRUE(SetLost(&state, "1", true));
  ASSERT_TRUE(InjectXid(&state, kUuid, 79));
  ASSERT_TRUE(InjectXid(&state, "1", 48));
  ASSERT_TRUE(InjectXid(&state, "0", 13));  // another GPU

  LoadOverride gpm_by_index;
  gpm_by_index.gpm = {{"sm_util", 10}, {"fp16_util", 20}};
  LoadOverride gpm_by_uuid;
  gpm_by_uuid.gpm = {{"sm_util", 90}};
  ASSERT_TRUE(SetLoad(&state, "1", gpm_by_index));
  ASSERT_TRUE(SetLoad(&state, kUuid, gpm_by_uuid));
  ASSERT_TRUE(SetNvLink(&state, "1", 2, true, {1, std::nullopt, std::nullopt, 5}));
  ASSERT_TRUE(SetNvLink(&state, kUuid, 4, true, {7, std::nullopt, std::nullopt, std::nullopt}));
  ASSERT_TRUE(
      SetNvLink(&state, kUuid, 2, std::nullopt, {9, std::nullopt, std::nullopt, std::nullopt}));

  const GpuState merged = MergedGpuState(state, 1, kUuid);
  EXPECT_DOUBLE_EQ(merged.load.gpm.at("sm_util"), 90);
  EXPECT_DOUBLE_EQ(merged.load.gpm.at("fp16_util"), 20);
  EXPECT_EQ(merged.nvlink.down, (std::set<unsigned>{2, 4}));
  EXPECT_EQ(merged.nvlink.errors.at(2)[0], 9u);  // the UUID entry wins
  EXPECT_EQ(merged.nvlink.errors.at(2)[3], 5u);
  EXPECT_EQ(merged.nvlink.errors.at(4)[0], 7u);
  EXPECT_TRUE(merged.lost);
  EXPECT_DOUBLE_EQ(merged.hang_seconds, 3);
  EXPECT_EQ(*merged.load.temperature_c, 90u);
  EXPECT_DOUBLE_EQ(*merged.load.power_w, 100);
  ASSERT_EQ(merged.xids.size(), 2u);
  EXPECT_EQ(merged.xids[0].xid, 79u);  // sorted by seq
  EXPECT_EQ(merged.xids[1].xid, 48u);
  EXPECT_FALSE(MergedGpuState(state, 2, "GPU-other").lost);
}

TEST(SimStateTest, LoadAndSaveFiles) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string path = dir.path() + "/state.json";
  SimState state;
  std::string error;
  SetDriverNotLoaded(&state, true);
  ASSERT_TRUE(LoadState(path, &state, &error)) << error;  // missing file: empty state
  EXPECT_FALSE(state.driver_not_loaded);

  SetInitCrash(&state, true);
  ASSERT_TRUE(SaveStateAtomic(path, state, &error)) << error;
  SimState back;
  ASSERT_TRUE(LoadState(path, &back, &error)) << error;
  EXPECT_TRUE(back.init_crash);
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    (void)entry;
    ++files;
  }
  EXPECT_EQ(files, 1);  // no temporary left behind

  { std::ofstream(path) << "not json"; }
  EXPECT_FALSE(LoadState(path, &back, &error));
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_FALSE(SaveStateAtomic(dir.path() + "/no/such/dir/state.json", state, &error));
}

// What is not a regular file at the state path is an error naming it at once, never a hang
// (a FIFO) or an endless read (/dev/zero); a file over the cap is refused.
TEST(SimStateTest, NonRegularAndHugeStateFilesAreRefused) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string fifo = dir.path() + "/fifo.json";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string huge = dir.path() + "/huge.json";
  { std::ofstream(huge) << "{" << std::string(5 << 20, ' ') << "}"; }
  const std::string adir = dir.path() + "/dir.json";
  std::filesystem::create_directory(adir);
  struct Case {
    std::string path, message;
  } cases[] = {{fifo, "is a FIFO"},
               {"/dev/zero", "is a character device"},
               {adir, "is a directory"},
               {huge, "more than the limit"}};
  for (const Case& c : cases) {
    SimState state;
    std::string error;
    EXPECT_FALSE(LoadState(c.path, &state, &error)) << c.path;
    EXPECT_NE(error.find(c.message), std::string::npos) << c.path << ": " << error;
    EXPECT_NE(error.find(c.path), std::string::npos) << error;
  }
}

}  // namespace
}  // namespace gpulet::sim
