#include "cdi/spec.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "cdi/spec_dirs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/files.h"

namespace gpulet::cdi {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

DeviceNode Node(const std::string& path, const std::string& host_path = "") {
  DeviceNode n;
  n.path = path;
  n.host_path = host_path;
  return n;
}

// A spec with one device of each name style and spec-wide edits, like the generator's.
Spec SampleSpec() {
  Spec s;
  s.version = "0.5.0";
  s.kind = "nvidia.com/gpu";
  Device d0;
  d0.name = "0";
  d0.edits.device_nodes.push_back(Node("/dev/nvidia0", "/tmp/dev/nvidia0"));
  Device uuid;
  uuid.name = "GPU-3f9d6c2e-1b7a-4e0c-9d35-a1c2e3f43080";
  uuid.edits.device_nodes.push_back(Node("/dev/nvidia0"));
  s.devices = {d0, uuid};
  s.edits.env = {"NVIDIA_VISIBLE_DEVICES=void"};
  s.edits.device_nodes.push_back(Node("/dev/nvidiactl"));
  s.edits.mounts.push_back({"/usr/local/lib/libcuda.so.570.133.20",
                            "/usr/local/lib/libcuda.so.570.133.20",
                            "",
                            {"ro", "nosuid", "nodev", "rbind", "rprivate"}});
  s.edits.hooks.push_back({"createContainer",
                           "/usr/local/bin/nvidia-cdi-hook",
                           {"nvidia-cdi-hook", "update-ldcache", "--folder", "/usr/local/lib"},
                           {},
                           std::nullopt});
  return s;
}

// The smallest valid spec: a UUID-named device, nothing that needs a newer version.
Spec PlainSpec() {
  Spec s;
  s.version = "0.3.0";
  s.kind = "nvidia.com/gpu";
  Device d;
  d.name = "GPU-abc";
  d.edits.device_nodes.push_back(Node("/dev/nvidia0"));
  s.devices.push_back(d);
  return s;
}

TEST(CdiVersionTest, ParsesKnownVersionsWithOrWithoutV) {
  ASSERT_TRUE(ParseVersion("0.5.0").ok());
  EXPECT_EQ(ParseVersion("v0.7.0")->ToString(), "0.7.0");
  EXPECT_EQ(ParseVersion("1.1.0")->ToString(), "1.1.0");
  EXPECT_FALSE(ParseVersion("0.9.0").ok());
  EXPECT_FALSE(ParseVersion("0.5").ok());
  EXPECT_FALSE(ParseVersion("five").ok());
  EXPECT_THAT(std::string(ParseVersion("2.0.0").status().message()), HasSubstr("0.5.0"));
}

TEST(CdiVersionTest, PlainContentGetsTheDefaultMinimum) {
  Spec s = PlainSpec();
  EXPECT_EQ(RequiredVersion(s).version, (Version{0, 3, 0}));
  EXPECT_EQ(RequiredVersion(s).reason, "");
  EXPECT_EQ(ChooseVersion(s, "")->ToString(), "0.5.0");
  // Forcing older versions is allowed when the content fits.
  EXPECT_EQ(ChooseVersion(s, "0.3.0")->ToString(), "0.3.0");
}

TEST(CdiVersionTest, EachFeatureRaisesTheMinimum) {
  Spec s = PlainSpec();
  s.edits.mounts.push_back({"/a", "/a", "bind", {}});
  EXPECT_EQ(RequiredVersion(s).version, (Version{0, 4, 0}));
  EXPECT_THAT(RequiredVersion(s).reason, HasSubstr("containerEdits.mounts[0].type"));

  s.devices[0].edits.device_nodes[0].host_path = "/dev/null";
  EXPECT_EQ(RequiredVersion(s).version, (Version{0, 5, 0}));
  EXPECT_THAT(RequiredVersion(s).reason, HasSubstr("deviceNodes[0].hostPath"));

  Spec digit = PlainSpec();
  digit.devices[0].name = "0";
  EXPECT_EQ(RequiredVersion(digit).version, (Version{0, 5, 0}));
  EXPECT_THAT(RequiredVersion(digit).reason, HasSubstr("starting with a digit"));

  Spec annotated = PlainSpec();
  annotated.devices[0].annotations["a"] = "b";
  EXPECT_EQ(RequiredVersion(annotated).version, (Version{0, 6, 0}));
  Spec dotted = PlainSpec();
  dotted.kind = "example.com/gpu.large";
  EXPECT_EQ(RequiredVersion(dotted).version, (Version{0, 6, 0}));

  Spec gids = PlainSpec();
  gids.devices[0].edits.additional_gids = {44};
  EXPECT_EQ(RequiredVersion(gids).version, (Version{0, 7, 0}));
  Spec rdt = PlainSpec();
  rdt.edits.intel_rdt.emplace();
  rdt.edits.intel_rdt->clos_id = "clos1";
  EXPECT_EQ(RequiredVersion(rdt).version, (Version{0, 7, 0}));
  rdt.edits.intel_rdt->schemata = {"L3:0=ff"};
  EXPECT_EQ(RequiredVersion(rdt).version, (Version{1, 1, 0}));
  Spec net = PlainSpec();
  net.edits.net_devices.push_back({"eth1", "net1"});
  EXPECT_EQ(RequiredVersion(net).version, (Version{1, 1, 0}));
}

TEST(CdiVersionTest, ForcedVersionRejectsContentItCannotExpress) {
  // The podman 4.3 case: additionalGids (what nvidia-ctk 1.19 adds) cannot go into 0.5.0.
  Spec s = SampleSpec();
  s.devices[0].edits.additional_gids = {44};
  absl::StatusOr<Version> v = ChooseVersion(s, "0.5.0");
  ASSERT_FALSE(v.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(v.status()));
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("additionalGids"));
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("0.7.0"));

  absl::StatusOr<Version> old = ChooseVersion(SampleSpec(), "0.4.0");
  ASSERT_FALSE(old.ok());
  EXPECT_THAT(std::string(old.status().message()), HasSubstr("needs cdiVersion 0.5.0"));
  EXPECT_FALSE(ChooseVersion(SampleSpec(), "0.42.0").ok());
  EXPECT_EQ(ChooseVersion(SampleSpec(), "1.0.0")->ToString(), "1.0.0");
}

TEST(CdiNameTest, KindRules) {
  EXPECT_TRUE(ValidateKind("nvidia.com/gpu").ok());
  EXPECT_TRUE(ValidateKind("k8s.device-plugin.nvidia.com/gpu").ok());
  EXPECT_TRUE(ValidateKind("vendor_x/class-1").ok());
  for (const char* bad : {"nvidia.com", "nvidia.com/", "/gpu", "1vendor/gpu", "nvidia.com/gpu-",
                          "nvidia.com/g pu", "nvidia.com/gpu/x", "nvidia.com-/gpu"}) {
    EXPECT_FALSE(ValidateKind(bad).ok()) << bad;
  }
  EXPECT_THAT(std::string(ValidateKind("nvidia.com/g pu").message()), HasSubstr("' '"));
}

TEST(CdiNameTest, DeviceNameRules) {
  for (const char* good : {"0", "all", "GPU-3f9d6c2e-1b7a", "0:1", "mig_1.g5", "a"}) {
    EXPECT_TRUE(ValidateDeviceName(good).ok()) << good;
  }
  for (const char* bad : {"", "-a", "a-", "a/b", "a=b", "a b", ":0"}) {
    EXPECT_FALSE(ValidateDeviceName(bad).ok()) << bad;
  }
}

TEST(CdiNameTest, QualifiedNames) {
  absl::StatusOr<QualifiedName> q = ParseQualifiedName("nvidia.com/gpu=0");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->vendor, "nvidia.com");
  EXPECT_EQ(q->class_name, "gpu");
  EXPECT_EQ(q->name, "0");
  EXPECT_EQ(q->ToString(), "nvidia.com/gpu=0");
  EXPECT_FALSE(ParseQualifiedName("nvidia.com/gpu").ok());
  EXPECT_FALSE(ParseQualifiedName("gpu=0").ok());
  EXPECT_FALSE(ParseQualifiedName("nvidia.com/gpu=").ok());
  EXPECT_FALSE(ParseQualifiedName("a=b/c").ok());
}

TEST(CdiValidateTest, SampleIsValid) {
  EXPECT_TRUE(ValidateSpec(SampleSpec()).ok()) << ValidateSpec(SampleSpec());
}

TEST(CdiValidateTest, EachRuleNamesTheField) {
  struct Case {
    const char* what;
    void (*mutate)(Spec*);
    const char* expect;
  };
  const Case cases[] = {
      {"unknown version", [](Spec* s) { s->version = "0.9.0"; }, "cdiVersion"},
      {"too old for content", [](Spec* s) { s->version = "0.4.0"; }, "too old"},
      {"bad kind", [](Spec* s) { s->kind = "nvidia"; }, "kind"},
      {"no devices", [](Spec* s) { s->devices.clear(); }, "at least one device"},
      {"duplicate", [](Spec* s) { s->devices[1].name = "0"; }, "defined twice"},
      {"bad name", [](Spec* s) { s->devices[1].name = "GPU-"; }, "devices[1].name"},
      {"empty device", [](Spec* s) { s->devices[0].edits = {}; }, "no containerEdits"},
      {"relative node", [](Spec* s) { s->edits.device_nodes[0].path = "dev/x"; },
       "containerEdits.deviceNodes[0].path"},
      {"relative hostPath", [](Spec* s) { s->devices[0].edits.device_nodes[0].host_path = "tmp"; },
       "devices[0].containerEdits.deviceNodes[0].hostPath"},
      {"device type", [](Spec* s) { s->edits.device_nodes[0].type = "x"; }, "device type"},
      {"permissions", [](Spec* s) { s->edits.device_nodes[0].permissions = "rwx"; }, "rwm"},
      {"negative major", [](Spec* s) { s->edits.device_nodes[0].major = -1; }, "negative"},
      {"env", [](Spec* s) { s->edits.env.push_back("=x"); }, "KEY=VALUE"},
      {"mount container path", [](Spec* s) { s->edits.mounts[0].container_path = "lib"; },
       "mounts[0].containerPath"},
      {"mount host path", [](Spec* s) { s->edits.mounts[0].host_path = ""; }, "mounts[0].hostPath"},
      {"hook name", [](Spec* s) { s->edits.hooks[0].hook_name = "preStart"; }, "hook name"},
      {"hook path", [](Spec* s) { s->edits.hooks[0].path = "nvidia-ctk"; }, "absolute"},
      {"hook env", [](Spec* s) { s->edits.hooks[0].env = {"NOEQUALS"}; }, "hooks[0].env"},
      {"hook timeout", [](Spec* s) { s->edits.hooks[0].timeout = 0; }, "timeout"},
  };
  for (const Case& c : cases) {
    Spec s = SampleSpec();
    c.mutate(&s);
    absl::Status st = ValidateSpec(s);
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << c.what << ": " << st;
    EXPECT_THAT(std::string(st.message()), HasSubstr(c.expect)) << c.what;
  }
  // A tmpfs mount's "host path" is a source name, not a path.
  Spec tmpfs = SampleSpec();
  tmpfs.edits.mounts.push_back({"tmpfs", "/scratch", "tmpfs", {"nosuid"}});
  EXPECT_TRUE(ValidateSpec(tmpfs).ok()) << ValidateSpec(tmpfs);
}

TEST(CdiEncodeTest, YamlRoundTripsAndIsDeterministic) {
  Spec s = SampleSpec();
  s.edits.device_nodes[0].major = 195;
  s.edits.device_nodes[0].minor = 255;
  s.edits.device_nodes[0].type = "c";
  s.edits.device_nodes[0].file_mode = 0666;
  s.edits.hooks[0].timeout = 10;
  std::string yaml = ToYaml(s);
  EXPECT_TRUE(absl::StartsWith(yaml, "---\n")) << yaml;
  EXPECT_EQ(yaml, ToYaml(s));
  // "0" must stay a string: Go runtimes reject `name: 0`.
  EXPECT_THAT(yaml, HasSubstr("name: \"0\""));
  EXPECT_THAT(yaml, HasSubstr("fileMode: 438"));
  EXPECT_LT(yaml.find("cdiVersion"), yaml.find("kind"));
  EXPECT_LT(yaml.find("kind"), yaml.find("devices"));
  EXPECT_LT(yaml.find("devices"), yaml.find("NVIDIA_VISIBLE_DEVICES"));
  absl::StatusOr<Spec> back = ParseSpec(yaml, "test.yaml");
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  EXPECT_EQ(*back, s);
}

TEST(CdiEncodeTest, JsonRoundTripsInOrder) {
  Spec s = SampleSpec();
  s.annotations["x"] = "1";
  s.version = "0.6.0";
  std::string json = ToJson(s);
  EXPECT_EQ(json, ToJson(s));
  EXPECT_LT(json.find("\"cdiVersion\""), json.find("\"kind\""));
  EXPECT_LT(json.find("\"kind\""), json.find("\"annotations\""));
  EXPECT_LT(json.find("\"annotations\""), json.find("\"devices\""));
  EXPECT_THAT(json, Not(HasSubstr("hostPath\": \"\"")));
  absl::StatusOr<Spec> back = ParseSpec(json, "test.json");
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << json;
  EXPECT_EQ(*back, s);
  EXPECT_EQ(Encode(s, Format::kJson), json);
  EXPECT_EQ(Encode(s, Format::kYaml), ToYaml(s));
}

TEST(CdiEncodeTest, AmbiguousStringsAreQuoted) {
  Spec s = PlainSpec();
  s.version = "0.5.0";
  s.edits.env = {"A=1"};
  for (const char* tricky : {"true", "on", "null", "~", "1e3", "0x1f", "1.5", ".5", "0", "-1",
                             "yes", "N", ".inf", "0:1"}) {
    s.edits.hooks.push_back({"poststop", "/bin/true", {tricky}, {}, std::nullopt});
  }
  absl::StatusOr<Spec> back = ParseSpec(ToYaml(s), "t");
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << ToYaml(s);
  EXPECT_EQ(*back, s);
  // Ordinary strings stay plain.
  EXPECT_THAT(ToYaml(s), HasSubstr("path: /bin/true"));
  EXPECT_THAT(ToYaml(s), HasSubstr("- \"0:1\""));
}

TEST(CdiEncodeTest, AllFieldsRoundTrip) {
  Spec s = PlainSpec();
  s.version = "1.1.0";
  s.annotations = {{"a", "b"}};
  s.devices[0].annotations = {{"gpu.nvidia.com/coherent", "true"}};
  s.devices[0].edits.additional_gids = {44, 109};
  s.devices[0].edits.device_nodes[0] = {
      "/dev/dri/renderD128", "/dev/dri/renderD128", "c", 226, 128, 0660, "rw", 0, 109};
  s.edits.intel_rdt =
      IntelRdt{"clos1", "L3:0=ff", "MB:0=50", std::nullopt, std::nullopt, {"L2:0=f"}, true};
  s.edits.net_devices = {{"eth1", "net1"}};
  ASSERT_TRUE(ValidateSpec(s).ok()) << ValidateSpec(s);
  for (Format f : {Format::kYaml, Format::kJson}) {
    absl::StatusOr<Spec> back = ParseSpec(Encode(s, f), "t");
    ASSERT_TRUE(back.ok()) << back.status() << Encode(s, f);
    EXPECT_EQ(*back, s) << Encode(s, f);
  }
}

TEST(CdiParseTest, StrictLikeTheGoLibrary) {
  absl::StatusOr<Spec> unknown = ParseSpec(
      "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n  - name: \"0\"\n"
      "    containerEdits:\n      deviceNodes:\n        - path: /dev/nvidia0\n"
      "          readOnly: true\n",
      "/etc/cdi/x.yaml");
  ASSERT_FALSE(unknown.ok());
  std::string msg(unknown.status().message());
  EXPECT_THAT(msg, HasSubstr("/etc/cdi/x.yaml:8:"));
  EXPECT_THAT(msg, HasSubstr("devices[0].containerEdits.deviceNodes[0]"));
  EXPECT_THAT(msg, HasSubstr("unknown field \"readOnly\""));

  absl::StatusOr<Spec> number = ParseSpec(
      "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n  - name: 0\n"
      "    containerEdits: {env: [A=1]}\n",
      "x.yaml");
  ASSERT_FALSE(number.ok());
  EXPECT_THAT(std::string(number.status().message()), HasSubstr("quote it"));

  absl::StatusOr<Spec> quoted_int = ParseSpec(
      "{\"cdiVersion\": \"0.5.0\", \"kind\": \"a.com/b\", \"devices\": [{\"name\": \"x\", "
      "\"containerEdits\": {\"deviceNodes\": [{\"path\": \"/dev/x\", \"major\": \"195\"}]}}]}",
      "x.json");
  ASSERT_FALSE(quoted_int.ok());
  EXPECT_THAT(std::string(quoted_int.status().message()), HasSubstr("expected an integer"));

  absl::StatusOr<Spec> missing = ParseSpec("kind: a.com/b\ndevices: []\n", "x.yaml");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("cdiVersion"));

  // Go's decoder refuses a field given twice; yaml-cpp would keep the first silently.
  absl::StatusOr<Spec> twice = ParseSpec(
      "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n  - name: \"0\"\n"
      "    containerEdits:\n      env: [A=1]\n      env: [A=2]\n",
      "x.yaml");
  ASSERT_FALSE(twice.ok());
  EXPECT_THAT(std::string(twice.status().message()),
              HasSubstr("x.yaml:7: duplicate key 'devices[0].containerEdits.env'"));

  EXPECT_FALSE(ParseSpec("devices: [", "x.yaml").ok());
  EXPECT_FALSE(ParseSpec("", "x.yaml").ok());
  EXPECT_FALSE(ParseSpec("- a\n- b\n", "x.yaml").ok());
}

TEST(CdiParseTest, YamlOctalFileModeAndTabbedJson) {
  absl::StatusOr<Spec> s = ParseSpec(
      "cdiVersion: \"0.5.0\"\nkind: a.com/b\ndevices:\n  - name: x\n    containerEdits:\n"
      "      deviceNodes:\n        - {path: /dev/x, fileMode: 0666, major: 0x10}\n",
      "x.yaml");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->devices[0].edits.device_nodes[0].file_mode, 0666u);
  EXPECT_EQ(s->devices[0].edits.device_nodes[0].major, 16);
  absl::StatusOr<Spec> tabs = ParseSpec(
      "{\n\t\"cdiVersion\": \"0.5.0\",\n\t\"kind\": \"a.com/b\",\n\t\"devices\": [{\"name\": "
      "\"x\", \"containerEdits\": {\"env\": [\"A=1\"]}}]\n}\n",
      "x.json");
  ASSERT_TRUE(tabs.ok()) << tabs.status();
  EXPECT_EQ(tabs->devices[0].edits.env[0], "A=1");
}

using TempDir = gpulet::testing::ScratchDir;

TEST(CdiCatalogTest, LaterDirectoryWinsAndConflictsAreReported) {
  TempDir root;
  Spec a = SampleSpec();
  root.Write("etc/cdi/nvidia.yaml", ToYaml(a));
  Spec b = SampleSpec();
  b.devices.erase(b.devices.begin() + 1);  // only "0"
  root.Write("var/run/cdi/nvidia.json", ToJson(b));
  Spec other = PlainSpec();
  other.kind = "example.com/thing";
  other.devices[0].name = "x";
  root.Write("var/run/cdi/one.yaml", ToYaml(other));
  root.Write("var/run/cdi/two.yaml", ToYaml(other));
  root.Write("var/run/cdi/broken.yaml", "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n");
  root.Write("var/run/cdi/ignored.txt", "not a spec");

  HostFs fs(root.path());
  SpecCatalog cat = SpecCatalog::Load(fs, DefaultSpecDirs());
  EXPECT_EQ(cat.files().size(), 5u);
  absl::StatusOr<ResolvedDevice> zero = cat.Resolve("nvidia.com/gpu=0");
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_EQ(zero->file->path, "/var/run/cdi/nvidia.json");
  absl::StatusOr<ResolvedDevice> uuid =
      cat.Resolve("nvidia.com/gpu=GPU-3f9d6c2e-1b7a-4e0c-9d35-a1c2e3f43080");
  ASSERT_TRUE(uuid.ok());
  EXPECT_EQ(uuid->file->path, "/etc/cdi/nvidia.yaml");

  absl::StatusOr<ResolvedDevice> conflict = cat.Resolve("example.com/thing=x");
  EXPECT_TRUE(absl::IsFailedPrecondition(conflict.status())) << conflict.status();
  EXPECT_EQ(cat.conflicts().size(), 1u);

  absl::StatusOr<ResolvedDevice> missing = cat.Resolve("nvidia.com/gpu=7");
  EXPECT_TRUE(absl::IsNotFound(missing.status()));
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("broken.yaml"));
  EXPECT_THAT(cat.DeviceNames(),
              ::testing::ElementsAre("nvidia.com/gpu=0",
                                     "nvidia.com/gpu=GPU-3f9d6c2e-1b7a-4e0c-9d35-a1c2e3f43080"));
  EXPECT_FALSE(cat.Resolve("not-a-name").ok());
}

TEST(CdiCatalogTest, MissingDirectoriesAreNotErrors) {
  TempDir root;
  SpecCatalog cat = SpecCatalog::Load(HostFs(root.path()), DefaultSpecDirs());
  EXPECT_TRUE(cat.files().empty());
  EXPECT_TRUE(cat.dir_errors().empty());
  EXPECT_THAT(std::string(cat.Resolve("nvidia.com/gpu=0").status().message()),
              HasSubstr("no loadable spec"));
}

}  // namespace
}  // namespace gpulet::cdi
