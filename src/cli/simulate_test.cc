#include "cli/simulate.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "sim/state.h"
#include "testing/files.h"

namespace gpulet::cli {
namespace {

constexpr char kUuid[] = "GPU-8a41d7b9-52c6-4f13-b0e8-7d2c9e155090";

// `gpulet serve --simulate`'s resetter does to the simulated card what the kernel's reset
// does to a real one, through the state file the simulator reads.
TEST(SimGpuResetterTest, ResetsTheCardInTheStateFile) {
  testing::ScratchDir dir;
  const std::string file = (std::filesystem::path(dir.path()) / "state.json").string();
  sim::SimState state;
  ASSERT_TRUE(sim::SetRecoveryAction(&state, kUuid, 1));
  ASSERT_TRUE(sim::SetResetRequired(&state, kUuid, true));
  std::string error;
  ASSERT_TRUE(sim::SaveStateAtomic(file, state, &error)) << error;
  SimGpuResetter resetter(file);
  ASSERT_TRUE(resetter.Reset(kUuid, "0000:02:00.0").ok());
  sim::SimState back;
  ASSERT_TRUE(sim::LoadState(file, &back, &error)) << error;
  EXPECT_EQ(back.gpus.at(kUuid).recovery_action, 0u);
  EXPECT_FALSE(back.gpus.at(kUuid).reset_required);
  // A name that is no GPU key, and a state file that cannot be read, are errors that say so.
  EXPECT_TRUE(absl::IsNotFound(resetter.Reset("nonsense", "0000:02:00.0")));
  std::ofstream(file) << "{not json";
  absl::Status s = resetter.Reset(kUuid, "0000:02:00.0");
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_NE(s.message().find(file), std::string::npos) << s;
}

}  // namespace
}  // namespace gpulet::cli
