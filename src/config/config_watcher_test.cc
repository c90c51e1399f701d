// When the config file counts as changed: a ConfigMap's `..data` swap and an edit in place
// do, once a second read agrees; the same content again, a file missing or empty for a
// moment, or one still being written, do not. The thread and the
// reload it triggers in `gpulet serve` are DaemonReloadTest's (src/cli/serve_reload_test.cc).
#include "config/config_watcher.h"

#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "testing/files.h"

namespace gpulet::config {
namespace {

namespace fs = std::filesystem;

// A ConfigMap volume as the kubelet lays it out: config.yaml -> ..data/config.yaml, and
// ..data -> the current timestamped directory.
void ConfigMapVersion(const testing::ScratchDir& dir, const std::string& version,
                      const std::string& content) {
  dir.Write(version + "/config.yaml", content);
  fs::create_directory_symlink(version, dir.path() + "/..data_tmp");
  fs::rename(dir.path() + "/..data_tmp", dir.path() + "/..data");
}

TEST(ConfigFileWatcherTest, AConfigMapSwapIsAChangeAndTheSameContentIsNot) {
  testing::ScratchDir dir;
  ConfigMapVersion(dir, "..2026_12_05_10_00_00.1", "version: v1\n");
  fs::create_symlink("..data/config.yaml", dir.path() + "/config.yaml");
  int changes = 0;
  ConfigFileWatcher watcher({.path = dir.path() + "/config.yaml",
                             .poll = absl::Seconds(2),
                             .settle = absl::Milliseconds(250),
                             .on_change = [&] { ++changes; }});
  EXPECT_FALSE(watcher.Check());  // the baseline
  ConfigMapVersion(dir, "..2026_12_05_10_01_00.2", "version: v1\nmetrics: {address: ''}\n");
  EXPECT_FALSE(watcher.Check());  // pending
  EXPECT_TRUE(watcher.Check());   // the same again: settled
  EXPECT_EQ(changes, 1);
  EXPECT_FALSE(watcher.Check());  // seen: not again every poll
  // A new version with the same content (an annotation changed upstream): no change.
  ConfigMapVersion(dir, "..2026_12_05_10_02_00.3", "version: v1\nmetrics: {address: ''}\n");
  EXPECT_FALSE(watcher.Check());
  EXPECT_EQ(changes, 1);
}

TEST(ConfigFileWatcherTest, AnEditInPlaceIsAChangeAndAMissingFileIsNot) {
  testing::ScratchDir dir;
  const std::string path = dir.Write("config.yaml", "version: v1\n");
  int changes = 0;
  ConfigFileWatcher watcher(
      {.path = path, .poll = absl::Seconds(2), .settle = absl::Milliseconds(250), .on_change = [&] {
         ++changes;
       }});
  fs::remove(path);
  EXPECT_FALSE(watcher.Check());  // gone for a moment
  EXPECT_FALSE(watcher.Check());
  dir.Write("config.yaml", "");  // truncated by an editor about to write it again
  EXPECT_FALSE(watcher.Check());
  EXPECT_FALSE(watcher.Check());
  dir.Write("config.yaml", "version: v1\n");
  EXPECT_FALSE(watcher.Check());  // back as it was
  // Caught halfway through a write: nothing until two reads agree.
  dir.Write("config.yaml", "version: v1\nhealth:");
  EXPECT_FALSE(watcher.Check());
  dir.Write("config.yaml", "version: v1\nhealth: {kmsg: false}\n");
  EXPECT_FALSE(watcher.Check());
  EXPECT_TRUE(watcher.Check());
  EXPECT_EQ(changes, 1);
  // A bad file is a change like any other (serve refuses it and says so), reported once.
  dir.Write("config.yaml", "version: [\n");
  EXPECT_FALSE(watcher.Check());
  EXPECT_TRUE(watcher.Check());
  EXPECT_FALSE(watcher.Check());
  EXPECT_FALSE(watcher.Check());
  EXPECT_EQ(changes, 2);
}

}  // namespace
// The web config and the certificate it names: a certificate renewed in place (a Secret's
// swap) is a change; the list is replaced by the next WatchAlso, whose files start as seen.
TEST(ConfigFileWatcherTest, TheFilesTheConfigurationNamesAreWatchedToo) {
  testing::ScratchDir dir;
  const std::string path = dir.Write("config.yaml", "version: v1\n");
  const std::string web = dir.Write("web/web.yml", "tls_server_config: {cert_file: tls.crt}\n");
  const std::string cert = dir.Write("web/tls.crt", "CERT 1\n");
  int changes = 0;
  ConfigFileWatcher watcher({.path = path, .on_change = [&] { ++changes; }});
  watcher.WatchAlso({web, cert});
  EXPECT_FALSE(watcher.Check());
  dir.Write("web/tls.crt", "CERT 2\n");
  EXPECT_FALSE(watcher.Check());  // pending
  EXPECT_TRUE(watcher.Check());
  EXPECT_EQ(changes, 1);
  EXPECT_FALSE(watcher.Check());
  // The main file and a named file changing together: one reload.
  dir.Write("config.yaml", "version: v1\nhealth: {kmsg: false}\n");
  dir.Write("web/web.yml", "tls_server_config: {cert_file: other.crt}\n");
  EXPECT_FALSE(watcher.Check());
  EXPECT_TRUE(watcher.Check());
  EXPECT_EQ(changes, 2);
  // A new list: the old certificate is no longer watched, the new one starts as seen.
  const std::string other = dir.Write("web/other.crt", "OTHER\n");
  watcher.WatchAlso({web, other});
  dir.Write("web/tls.crt", "CERT 3\n");
  EXPECT_FALSE(watcher.Check());
  EXPECT_FALSE(watcher.Check());
  EXPECT_EQ(changes, 2);
}

}  // namespace gpulet::config
