#include "cdi/spec_keeper.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/files.h"
#include "testing/homelab.h"

namespace gpulet::cdi {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using testing::HomelabInventory;
constexpr const char* kUuid0 = testing::kRtx3080;
constexpr const char* kUuid1 = testing::kRtx5090;

std::string HomelabRoot() { return testing::SimRoot("homelab"); }
gpu::Inventory Homelab() { return HomelabInventory(); }

// A writable host root; the driver files and /dev come from the homelab fixture.
class SpecKeeperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpulet-keeper-test-XXXXXX";
    root_ = mkdtemp(tmpl);
    host_ = std::make_unique<HostFs>(root_);
    options_.generator.driver_root = HomelabRoot();
    options_.generator.dev_root = HomelabRoot();
    options_.generator.kind = "gpulet.dev/gpu";
  }
  void TearDown() override { fs::remove_all(root_); }

  fs::path SpecFile() const { return fs::path(root_) / "var/run/cdi/gpulet.dev-gpu.yaml"; }

  std::string root_;
  std::unique_ptr<HostFs> host_;
  SpecKeeperOptions options_;
};

TEST_F(SpecKeeperTest, WritesTheSpecOnceAndKeepsIt) {
  SpecKeeper keeper(host_.get());
  absl::StatusOr<KeepResult> first = keeper.Reconcile(Homelab(), options_);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->written);
  EXPECT_EQ(first->host_path, "/var/run/cdi/gpulet.dev-gpu.yaml");
  EXPECT_EQ(keeper.host_path(), first->host_path);
  std::string text = testing::ReadTextFile(SpecFile().string());
  absl::StatusOr<Spec> spec = ParseSpec(text, SpecFile().string());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(ValidateSpec(*spec).ok());
  EXPECT_EQ(spec->kind, "gpulet.dev/gpu");
  EXPECT_EQ(spec->version, "0.5.0");  // the lowest the content needs (hostPath, "0")
  EXPECT_NE(spec->FindDevice(kUuid0), nullptr);
  EXPECT_NE(spec->FindDevice(kUuid1), nullptr);
  struct stat st;
  ASSERT_EQ(stat(SpecFile().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);  // runtimes read it; nobody else writes it

  // Same inventory, same options: the file is left alone.
  absl::StatusOr<KeepResult> again = keeper.Reconcile(Homelab(), options_);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->written);
  absl::StatusOr<bool> verified = keeper.Verify();
  ASSERT_TRUE(verified.ok());
  EXPECT_FALSE(*verified);
}

TEST_F(SpecKeeperTest, VerifyRewritesADeletedOrEditedSpec) {
  SpecKeeper keeper(host_.get());
  ASSERT_TRUE(keeper.Reconcile(Homelab(), options_).ok());
  std::string written = testing::ReadTextFile(SpecFile().string());

  fs::remove(SpecFile());
  absl::StatusOr<bool> rewritten = keeper.Verify();
  ASSERT_TRUE(rewritten.ok()) << rewritten.status();
  EXPECT_TRUE(*rewritten);
  EXPECT_EQ(testing::ReadTextFile(SpecFile().string()), written);

  std::ofstream(SpecFile()) << "---\ncdiVersion: 0.5.0\nkind: gpulet.dev/gpu\n";
  rewritten = keeper.Verify();
  ASSERT_TRUE(rewritten.ok());
  EXPECT_TRUE(*rewritten);
  EXPECT_EQ(testing::ReadTextFile(SpecFile().string()), written);
}

TEST_F(SpecKeeperTest, AStaleSpecFromAnEarlierRunIsReplaced) {
  fs::create_directories(SpecFile().parent_path());
  std::ofstream(SpecFile()) << "---\ncdiVersion: 0.5.0\nkind: gpulet.dev/gpu\ndevices: []\n";
  SpecKeeper keeper(host_.get());
  absl::StatusOr<KeepResult> r = keeper.Reconcile(Homelab(), options_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->written);
  EXPECT_THAT(testing::ReadTextFile(SpecFile().string()), HasSubstr(kUuid1));
}

TEST_F(SpecKeeperTest, ANewKindRemovesTheOldFile) {
  SpecKeeper keeper(host_.get());
  ASSERT_TRUE(keeper.Reconcile(Homelab(), options_).ok());
  ASSERT_TRUE(fs::exists(SpecFile()));
  options_.generator.kind = "example.com/accel";
  absl::StatusOr<KeepResult> r = keeper.Reconcile(Homelab(), options_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->host_path, "/var/run/cdi/example.com-accel.yaml");
  EXPECT_TRUE(fs::exists(fs::path(root_) / "var/run/cdi/example.com-accel.yaml"));
  EXPECT_FALSE(fs::exists(SpecFile()));
}

TEST_F(SpecKeeperTest, RemoveDeletesTheSpecAndStopsKeepingIt) {
  SpecKeeper keeper(host_.get());
  ASSERT_TRUE(keeper.Reconcile(Homelab(), options_).ok());
  ASSERT_TRUE(keeper.Remove().ok());
  EXPECT_FALSE(fs::exists(SpecFile()));
  EXPECT_EQ(keeper.host_path(), "");
  absl::StatusOr<bool> verified = keeper.Verify();  // nothing is kept any more
  ASSERT_TRUE(verified.ok());
  EXPECT_FALSE(*verified);
  EXPECT_FALSE(fs::exists(SpecFile()));
  EXPECT_TRUE(keeper.Remove().ok());  // twice is fine
}

TEST_F(SpecKeeperTest, TheDirectoryIsAHostPathUnderTheRoot) {
  // /var/run -> /run on most hosts: the link is followed inside the root.
  fs::create_directories(fs::path(root_) / "run");
  fs::create_directories(fs::path(root_) / "var");
  fs::create_symlink("/run", fs::path(root_) / "var/run");
  SpecKeeper keeper(host_.get());
  absl::StatusOr<KeepResult> r = keeper.Reconcile(Homelab(), options_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(fs::exists(fs::path(root_) / "run/cdi/gpulet.dev-gpu.yaml"));
}

TEST_F(SpecKeeperTest, AnUnwritableDirectoryIsAnErrorNamingThePath) {
  // A file where the directory should be: no write can succeed, whoever runs the test.
  fs::create_directories(fs::path(root_) / "var/run");
  std::ofstream(fs::path(root_) / "var/run/cdi") << "not a directory";
  SpecKeeper keeper(host_.get());
  absl::StatusOr<KeepResult> r = keeper.Reconcile(Homelab(), options_);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("var/run/cdi/gpulet.dev-gpu.yaml"));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("unresolvable CDI devices"));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("mount the host's /var/run/cdi"));
  EXPECT_EQ(keeper.host_path(), "");
  absl::StatusOr<bool> verified = keeper.Verify();  // nothing written yet: nothing to keep
  ASSERT_TRUE(verified.ok());
  EXPECT_FALSE(*verified);
}

TEST_F(SpecKeeperTest, AMissingHookProgramIsAWarning) {
  options_.generator.hook_path = "/opt/nvidia/bin/nvidia-cdi-hook";
  SpecKeeper keeper(host_.get());
  absl::StatusOr<KeepResult> r = keeper.Reconcile(Homelab(), options_);
  ASSERT_TRUE(r.ok()) << r.status();
  bool warned = false;
  for (const std::string& w : r->warnings) {
    warned |= w.find("cdi.hookPath /opt/nvidia/bin/nvidia-cdi-hook") != std::string::npos &&
              w.find("does not exist on the host") != std::string::npos;
  }
  EXPECT_TRUE(warned);
}

TEST_F(SpecKeeperTest, NoUsableNvmlIsAnErrorAndNothingIsWritten) {
  gpu::Inventory inv = Homelab();
  inv.nvml_status = absl::FailedPreconditionError("driver not loaded");
  SpecKeeper keeper(host_.get());
  absl::StatusOr<KeepResult> r = keeper.Reconcile(inv, options_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("no CDI spec for gpulet.dev/gpu in /var/run/cdi"));
  EXPECT_FALSE(fs::exists(SpecFile()));
}

TEST_F(SpecKeeperTest, ARelativeDirectoryIsRefused) {
  options_.spec_dir = "run/cdi";
  SpecKeeper keeper(host_.get());
  absl::StatusOr<KeepResult> r = keeper.Reconcile(Homelab(), options_);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("cdi.specDir \"run/cdi\""));
}

TEST(SpecFileNameTest, OneFilePerKind) {
  EXPECT_EQ(SpecFileName("gpulet.dev/gpu"), "gpulet.dev-gpu.yaml");
  EXPECT_EQ(SpecFileName("nvidia.com/gpu"), "nvidia.com-gpu.yaml");
}

}  // namespace
}  // namespace gpulet::cdi
