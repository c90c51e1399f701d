// The device plugin's rules as pure functions: what each config advertises, what Allocate
// answers for every device-list and device-ID strategy, which IDs are refused, and which IDs
// the plugin prefers. Tables over hand-built snapshots; no gRPC.
#include "plugin/resources.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "gtest/gtest.h"
#include "state/device_id.h"
#include "testing/files.h"

namespace gpulet::plugin {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

constexpr uint64_t kMiB = 1024 * 1024;

state::DeviceRecord Record(unsigned index, std::string uuid, std::string bus, int numa = 0,
                           uint64_t memory_mib = 10240,
                           state::HealthState state = state::HealthState::kHealthy) {
  state::DeviceRecord d;
  d.gpu.index = index;
  d.gpu.uuid = std::move(uuid);
  d.gpu.bus_id = std::move(bus);
  d.gpu.minor = index;
  d.gpu.numa_node = numa;
  d.gpu.memory_total_bytes = memory_mib * kMiB;
  d.gpu.in_nvml = d.gpu.on_pci = true;
  if (state != state::HealthState::kHealthy) {
    d.health.Raise("test", {state, "XID 79 (test)", "reboot", absl::UnixEpoch()},
                   absl::UnixEpoch());
  }
  return d;
}

// GPU-a (index 0, NUMA 0, 10 GiB) and GPU-b (index 1, NUMA 1, 32607 MiB).
state::Snapshot TwoGpus() {
  state::Snapshot s;
  s.nvml_ok = true;
  s.devices = {Record(0, "GPU-a", "0000:01:00.0", 0, 10240),
               Record(1, "GPU-b", "0000:02:00.0", 1, 32607)};
  return s;
}

const ResourceSpec kGpuResource{"nvidia.com/gpu", "gpulet-gpu.sock", ResourceKind::kGpu, ""};
const ResourceSpec kMemoryResource{"nvidia.com/gpu-memory", "gpulet-gpu-memory.sock",
                                   ResourceKind::kMemorySlice, ""};

config::Config WithReplicas(int replicas) {
  config::Config c;
  c.sharing.time_slicing.replicas = replicas;
  return c;
}

config::Config WithMemorySlices(int slice_mib = 1024) {
  config::Config c;
  c.sharing.memory_slices.enabled = true;
  c.sharing.memory_slices.slice_mib = slice_mib;
  return c;
}

std::vector<std::string> Ids(const std::vector<AdvertisedDevice>& devices) {
  std::vector<std::string> out;
  for (const AdvertisedDevice& d : devices) out.push_back(d.id);
  return out;
}

// --- what is advertised -------------------------------------------------------------------

TEST(ResourcesForTest, Table) {
  struct Case {
    const char* name;
    config::Config config;
    std::vector<std::string> names, sockets;
    std::vector<ResourceKind> kinds;
  };
  config::Config renamed = WithReplicas(2);
  renamed.sharing.time_slicing.rename_by_default = true;
  config::Config rename_without_sharing;
  rename_without_sharing.sharing.time_slicing.rename_by_default = true;
  config::Config custom;
  custom.resource_name = "example.com/accel";
  custom.sharing.memory_slices.enabled = true;
  custom.sharing.memory_slices.resource_name = "example.com/accel-mem";
  const Case kCases[] = {
      {"default", config::Config(), {"nvidia.com/gpu"}, {"gpulet-gpu.sock"}, {ResourceKind::kGpu}},
      {"replicas keep the name",
       WithReplicas(4),
       {"nvidia.com/gpu"},
       {"gpulet-gpu.sock"},
       {ResourceKind::kGpu}},
      {"renameByDefault",
       renamed,
       {"nvidia.com/gpu.shared"},
       {"gpulet-gpu.shared.sock"},
       {ResourceKind::kGpu}},
      {"renameByDefault without replicas",
       rename_without_sharing,
       {"nvidia.com/gpu"},
       {"gpulet-gpu.sock"},
       {ResourceKind::kGpu}},
      {"memory slices",
       WithMemorySlices(),
       {"nvidia.com/gpu", "nvidia.com/gpu-memory"},
       {"gpulet-gpu.sock", "gpulet-gpu-memory.sock"},
       {ResourceKind::kGpu, ResourceKind::kMemorySlice}},
      {"custom names",
       custom,
       {"example.com/accel", "example.com/accel-mem"},
       {"gpulet-accel.sock", "gpulet-accel-mem.sock"},
       {ResourceKind::kGpu, ResourceKind::kMemorySlice}},
  };
  for (const Case& c : kCases) {
    std::vector<ResourceSpec> specs = ResourcesFor(c.config);
    ASSERT_EQ(specs.size(), c.names.size()) << c.name;
    for (size_t i = 0; i < specs.size(); ++i) {
      EXPECT_EQ(specs[i].name, c.names[i]) << c.name;
      EXPECT_EQ(specs[i].socket_name, c.sockets[i]) << c.name;
      EXPECT_EQ(specs[i].kind, c.kinds[i]) << c.name;
    }
    EXPECT_EQ(c.config.AdvertisedResources(), c.names) << c.name;
  }
}

TEST(AdvertisedDevicesTest, Table) {
  struct Case {
    const char* name;
    ResourceSpec resource;
    config::Config config;
    std::vector<std::string> ids;
  };
  const Case kCases[] = {
      {"whole GPUs by UUID", kGpuResource, config::Config(), {"GPU-a", "GPU-b"}},
      {"one replica is no sharing", kGpuResource, WithReplicas(1), {"GPU-a", "GPU-b"}},
      {"replicas",
       kGpuResource,
       WithReplicas(3),
       {"GPU-a::0", "GPU-a::1", "GPU-a::2", "GPU-b::0", "GPU-b::1", "GPU-b::2"}},
      // 10240 MiB / 4096 = 2 slices; 32607 MiB / 4096 = 7 (a partial slice is not one).
      {"memory slices",
       kMemoryResource,
       WithMemorySlices(4096),
       {"GPU-a::mem0", "GPU-a::mem1", "GPU-b::mem0", "GPU-b::mem1", "GPU-b::mem2", "GPU-b::mem3",
        "GPU-b::mem4", "GPU-b::mem5", "GPU-b::mem6"}},
      // Slices ignore time-slicing, and whole GPUs ignore slicing.
      {"memory slices with replicas",
       kMemoryResource,
       [] {
         config::Config c = WithMemorySlices(16384);
         c.sharing.time_slicing.replicas = 4;
         return c;
       }(),
       {"GPU-b::mem0"}},
      // A GPU serves slices or whole-GPU requests, never both (sharing.memorySlices.gpus):
      // by default every GPU serves slices ...
      {"whole GPUs with slicing on every GPU", kGpuResource, WithMemorySlices(), {}},
      // ... or the listed ones do (by index or UUID), and the others stay whole.
      {"whole GPUs beside sliced GPU 1",
       kGpuResource,
       [] {
         config::Config c = WithMemorySlices(16384);
         c.sharing.memory_slices.gpus = {"1"};
         return c;
       }(),
       {"GPU-a"}},
      {"slices of GPU 1 only",
       kMemoryResource,
       [] {
         config::Config c = WithMemorySlices(16384);
         c.sharing.memory_slices.gpus = {"GPU-b"};
         return c;
       }(),
       {"GPU-b::mem0"}},
  };
  const state::Snapshot snap = TwoGpus();
  for (const Case& c : kCases) {
    std::vector<AdvertisedDevice> devices = AdvertisedDevices(c.resource, c.config, snap);
    EXPECT_EQ(Ids(devices), c.ids) << c.name;
    for (const AdvertisedDevice& d : devices) {
      // Every ID maps back to its physical GPU, whose position and NUMA node it carries.
      ASSERT_LT(d.gpu, snap.devices.size()) << c.name;
      const state::DeviceRecord& gpu = snap.devices[d.gpu];
      EXPECT_EQ(state::PhysicalId(d.id), gpu.gpu.uuid) << c.name << " " << d.id;
      EXPECT_EQ(d.numa_node, gpu.gpu.numa_node) << c.name << " " << d.id;
      EXPECT_TRUE(d.healthy) << c.name << " " << d.id;
    }
  }
}

// A GPU is offered by the device plugin or by DRA, never both (dra.gpus).
TEST(AdvertisedDevicesTest, GpusOfferedToDraAreNotAdvertisedNorAllocatable) {
  const state::Snapshot s = TwoGpus();
  config::Config sliced = WithMemorySlices();
  sliced.dra.enabled = true;
  sliced.dra.gpus = {"GPU-b"};
  EXPECT_EQ(Ids(AdvertisedDevices(kMemoryResource, sliced, s)).size(), 10u);  // GPU-a's 10 GiB
  config::Config c;
  c.dra.enabled = true;
  c.dra.gpus = {"GPU-b"};
  EXPECT_THAT(Ids(AdvertisedDevices(kGpuResource, c, s)), ElementsAre("GPU-a"));
  absl::StatusOr<v1beta1::ContainerAllocateResponse> refused =
      AllocateContainer(kGpuResource, c, s, ControlNodes{}, {"GPU-b"});
  EXPECT_FALSE(refused.ok());
  c.dra.gpus = {"0"};  // by index
  EXPECT_THAT(Ids(AdvertisedDevices(kGpuResource, c, s)), ElementsAre("GPU-b"));
  c.dra.gpus = {"all"};
  EXPECT_TRUE(AdvertisedDevices(kGpuResource, c, s).empty());
  c.dra.enabled = false;  // the list means nothing while DRA is off
  EXPECT_EQ(AdvertisedDevices(kGpuResource, c, s).size(), 2u);
}

TEST(AdvertisedDevicesTest, HealthOfEveryIdFollowsItsGpu) {
  state::Snapshot s;
  s.devices = {Record(0, "GPU-a", "0000:01:00.0", 0, 2048, state::HealthState::kUnhealthy),
               Record(1, "GPU-b", "0000:02:00.0", -1, 2048, state::HealthState::kDegraded)};
  // A GPU NVML never saw: advertised under its bus id so capacity counts it, Unhealthy.
  state::DeviceRecord pci_only =
      Record(2, "", "0000:03:00.0", 0, 0, state::HealthState::kUnhealthy);
  pci_only.gpu.index.reset();
  pci_only.gpu.memory_total_bytes.reset();
  s.devices.push_back(pci_only);
  std::map<std::string, bool> healthy;
  for (const AdvertisedDevice& d : AdvertisedDevices(kGpuResource, WithReplicas(2), s)) {
    healthy[d.id] = d.healthy;
  }
  EXPECT_EQ(healthy, (std::map<std::string, bool>{{"GPU-a::0", false},
                                                  {"GPU-a::1", false},
                                                  {"GPU-b::0", true},  // Degraded still serves
                                                  {"GPU-b::1", true},
                                                  {"pci-0000:03:00.0::0", false},
                                                  {"pci-0000:03:00.0::1", false}}));
  // Without memory size, a GPU has no slices.
  EXPECT_EQ(Ids(AdvertisedDevices(kMemoryResource, WithMemorySlices(), s)),
            (std::vector<std::string>{"GPU-a::mem0", "GPU-a::mem1", "GPU-b::mem0", "GPU-b::mem1"}));
  // The ListAndWatch message says the same, with NUMA topology only where known.
  v1beta1::ListAndWatchResponse list =
      ToListAndWatch(AdvertisedDevices(kGpuResource, config::Config(), s));
  ASSERT_EQ(list.devices_size(), 3);
  EXPECT_EQ(list.devices(0).id(), "GPU-a");
  EXPECT_EQ(list.devices(0).health(), "Unhealthy");
  ASSERT_TRUE(list.devices(0).has_topology());
  EXPECT_EQ(list.devices(0).topology().nodes(0).id(), 0);
  EXPECT_EQ(list.devices(1).health(), "Healthy");
  EXPECT_FALSE(list.devices(1).has_topology());
  EXPECT_EQ(list.devices(2).id(), "pci-0000:03:00.0");
}

// --- Allocate -----------------------------------------------------------------------------

// The expected answers below are NVIDIA's, read from NVIDIA/k8s-device-plugin at tag v0.20.0:
//   internal/plugin/server.go: getAllocateResponse (the order of the steps and the CDI-only
//     early return), updateResponseForCDI (one CDI name per unique device ID, annotation and
//     CDIDevices), updateResponseForDeviceListEnvVar (NVIDIA_VISIBLE_DEVICES = IDs joined by
//     ","), updateResponseForDeviceMounts (the variable set to the mount root, one /dev/null
//     mount per ID, ReadOnly left false), apiDeviceSpecs (host path = filepath.Join(devRoot,
//     path), permissions "rw"), uniqueDeviceIDsFromAnnotatedDeviceIDs (replicas to their GPU,
//     each GPU once);
//   api/config/v1/strategy.go: DeviceListStrategies is a set (AnyCDIEnabled, AllCDIEnabled);
//   internal/rm/nvml_manager.go: GetDevicePaths (the control nodes first, then the devices'
//     paths); internal/rm/rm.go and devices.go: Subset(ids).GetPaths() (one path list per
//     requested ID, so a replica repeats its GPU's node); internal/rm/device_map.go:
//     updateDeviceMapWithReplicas (a replica copies its GPU's Paths and Index).
// gpulet's deliberate differences (its CDI kind gpulet.dev/gpu and its annotation key) are
// substituted into the expectations; each has its own test further down.

// The protobuf text format of a ContainerAllocateResponse, as far as these tests write it:
// a sequence of `field { name: "value" ... }` for its five fields. The kubelet APIs are
// compiled for the lite runtime (no TextFormat), so the tests read the text themselves.
absl::StatusOr<v1beta1::ContainerAllocateResponse> ParseResponseText(absl::string_view text) {
  std::vector<std::string> tokens;  // identifiers, "{", "}", ":", and strings as "\"value"
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (absl::ascii_isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (c == '{' || c == '}' || c == ':') {
      tokens.emplace_back(1, c);
      ++i;
    } else if (c == '"') {
      std::string value = "\"";
      for (++i; i < text.size() && text[i] != '"'; ++i) {
        if (text[i] == '\\' && i + 1 < text.size()) ++i;
        value += text[i];
      }
      if (i == text.size()) return absl::InvalidArgumentError("an unterminated string");
      ++i;
      tokens.push_back(value);
    } else if (absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < text.size() &&
             (absl::ascii_isalnum(static_cast<unsigned char>(text[j])) || text[j] == '_')) {
        ++j;
      }
      tokens.emplace_back(text.substr(i, j - i));
      i = j;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unexpected '", std::string(1, c), "'"));
    }
  }
  v1beta1::ContainerAllocateResponse r;
  for (size_t i = 0; i < tokens.size();) {
    const std::string field = tokens[i];
    if (i + 1 >= tokens.size() || tokens[i + 1] != "{") {
      return absl::InvalidArgumentError(absl::StrCat("expected '{' after ", field));
    }
    std::map<std::string, std::string> values;
    for (i += 2; i < tokens.size() && tokens[i] != "}"; i += 3) {
      if (i + 2 >= tokens.size() || tokens[i + 1] != ":") {
        return absl::InvalidArgumentError(absl::StrCat("expected name: value in ", field));
      }
      const std::string& v = tokens[i + 2];
      values[tokens[i]] = absl::StartsWith(v, "\"") ? v.substr(1) : v;
    }
    if (i == tokens.size())
      return absl::InvalidArgumentError(absl::StrCat(field, " is not closed"));
    ++i;
    auto take = [&](const std::string& name) {
      std::string v = values[name];
      values.erase(name);
      return v;
    };
    if (field == "envs" || field == "annotations") {
      auto* map = field == "envs" ? r.mutable_envs() : r.mutable_annotations();
      const std::string key = take("key");
      (*map)[key] = take("value");
    } else if (field == "mounts") {
      v1beta1::Mount* m = r.add_mounts();
      m->set_container_path(take("container_path"));
      m->set_host_path(take("host_path"));
      m->set_read_only(take("read_only") == "true");
    } else if (field == "devices") {
      v1beta1::DeviceSpec* d = r.add_devices();
      d->set_container_path(take("container_path"));
      d->set_host_path(take("host_path"));
      d->set_permissions(take("permissions"));
    } else if (field == "cdi_devices") {
      r.add_cdi_devices()->set_name(take("name"));
    } else {
      return absl::InvalidArgumentError(absl::StrCat("no field ", field));
    }
    if (!values.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(field, " has no ", values.begin()->first));
    }
  }
  return r;
}

// What Allocate answers, in text format, with "$KEY" standing for the annotation key.
v1beta1::ContainerAllocateResponse Expected(const std::string& text, const std::string& key) {
  std::string with_key = absl::StrReplaceAll(text, {{"$KEY", key}});
  absl::StatusOr<v1beta1::ContainerAllocateResponse> r = ParseResponseText(with_key);
  EXPECT_TRUE(r.ok()) << r.status() << " in " << with_key;
  return r.ok() ? *r : v1beta1::ContainerAllocateResponse();
}

// The deterministic wire form (maps ordered by key): equal exactly when the messages are.
std::string Canonical(const google::protobuf::MessageLite& m) {
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  m.SerializeToCodedStream(&coded);
  coded.Trim();
  return out;
}

// For failure messages: one line per entry, maps ordered by key.
std::string Describe(const v1beta1::ContainerAllocateResponse& r) {
  std::string out;
  for (const auto& [k, v] : std::map<std::string, std::string>(r.envs().begin(), r.envs().end())) {
    absl::StrAppend(&out, "  env ", k, "=", v, "\n");
  }
  for (const v1beta1::Mount& m : r.mounts()) {
    absl::StrAppend(&out, "  mount ", m.host_path(), " -> ", m.container_path(),
                    m.read_only() ? " (ro)" : "", "\n");
  }
  for (const v1beta1::DeviceSpec& d : r.devices()) {
    absl::StrAppend(&out, "  device ", d.host_path(), " -> ", d.container_path(), " ",
                    d.permissions(), "\n");
  }
  for (const auto& [k, v] :
       std::map<std::string, std::string>(r.annotations().begin(), r.annotations().end())) {
    absl::StrAppend(&out, "  annotation ", k, "=", v, "\n");
  }
  for (const v1beta1::CDIDevice& c : r.cdi_devices()) {
    absl::StrAppend(&out, "  cdi device ", c.name(), "\n");
  }
  return out;
}

// Empty when equal; otherwise both answers.
std::string Diff(const v1beta1::ContainerAllocateResponse& want,
                 const v1beta1::ContainerAllocateResponse& got) {
  if (Canonical(want) == Canonical(got)) return "";
  return absl::StrCat("want:\n", Describe(want), "got:\n", Describe(got));
}

TEST(ParseResponseTextTest, ReadsEveryFieldAndRefusesTheRest) {
  absl::StatusOr<v1beta1::ContainerAllocateResponse> r = ParseResponseText(R"pb(
    envs { key: "A" value: "1" }
    mounts { container_path: "/c" host_path: "/h" read_only: true }
    devices { container_path: "/dev/x" host_path: "/dev/y" permissions: "rw" }
    annotations { key: "k" value: "v \"q\"" }
    cdi_devices { name: "gpulet.dev/gpu=GPU-a" }
  )pb");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->envs().at("A"), "1");
  EXPECT_TRUE(r->mounts(0).read_only());
  EXPECT_EQ(r->devices(0).permissions(), "rw");
  EXPECT_EQ(r->annotations().at("k"), "v \"q\"");
  EXPECT_EQ(r->cdi_devices(0).name(), "gpulet.dev/gpu=GPU-a");
  EXPECT_FALSE(ParseResponseText(R"pb(env { key: "A" value: "1" })pb").ok());
  EXPECT_FALSE(ParseResponseText(R"pb(mounts { container: "/c" })pb").ok());
  EXPECT_FALSE(ParseResponseText(R"pb(cdi_devices { name: "x")pb").ok());
  v1beta1::ContainerAllocateResponse other = *r;
  other.mutable_mounts(0)->set_read_only(false);
  EXPECT_NE(Diff(*r, other), "");
  EXPECT_EQ(Diff(*r, *r), "");
}

std::string StrategyNames(const std::vector<config::DeviceListStrategy>& strategies) {
  static const char* const kNames[] = {"envvar", "volume-mounts", "cdi-annotations", "cdi-cri"};
  std::vector<std::string> names;
  for (config::DeviceListStrategy s : strategies) names.push_back(kNames[static_cast<int>(s)]);
  return absl::StrCat("[", absl::StrJoin(names, ", "), "]");
}

// Runs `ids` through every order of `strategies` (the answer must not depend on it) and
// compares each answer with `want`.
void ExpectForEveryOrder(const ResourceSpec& resource, config::Config config,
                         const state::Snapshot& snap, const ControlNodes& control,
                         const std::vector<std::string>& ids,
                         std::vector<config::DeviceListStrategy> strategies,
                         const std::string& want, const std::string& label) {
  const std::string key = CdiAnnotationKey(config.plugin.cdi_annotation_prefix, resource.name, ids);
  std::sort(strategies.begin(), strategies.end());
  do {
    config.plugin.device_list_strategy = strategies;
    absl::StatusOr<v1beta1::ContainerAllocateResponse> r =
        AllocateContainer(resource, config, snap, control, ids);
    ASSERT_TRUE(r.ok()) << label << " " << StrategyNames(strategies) << ": " << r.status();
    EXPECT_EQ(Diff(Expected(want, key), *r), "") << label << " " << StrategyNames(strategies);
  } while (std::next_permutation(strategies.begin(), strategies.end()));
}

// The pieces of NVIDIA's answer for GPU-b then GPU-a (UUIDs, in request order).
constexpr char kEnvUuid[] = R"pb(envs { key: "NVIDIA_VISIBLE_DEVICES" value: "GPU-b,GPU-a" })pb";
constexpr char kMountsUuid[] = R"pb(
  envs { key: "NVIDIA_VISIBLE_DEVICES" value: "/var/run/nvidia-container-devices" }
  mounts { container_path: "/var/run/nvidia-container-devices/GPU-b" host_path: "/dev/null" }
  mounts { container_path: "/var/run/nvidia-container-devices/GPU-a" host_path: "/dev/null" }
)pb";
constexpr char kAnnotationUuid[] =
    R"pb(annotations { key: "$KEY" value: "gpulet.dev/gpu=GPU-b,gpulet.dev/gpu=GPU-a" })pb";
constexpr char kCdiUuid[] = R"pb(
  cdi_devices { name: "gpulet.dev/gpu=GPU-b" }
  cdi_devices { name: "gpulet.dev/gpu=GPU-a" }
)pb";
// Control nodes first (those that exist), then each requested GPU's node.
constexpr char kSpecs[] = R"pb(
  devices { container_path: "/dev/nvidiactl" host_path: "/dev/nvidiactl" permissions: "rw" }
  devices { container_path: "/dev/nvidia-uvm" host_path: "/dev/nvidia-uvm" permissions: "rw" }
  devices { container_path: "/dev/nvidia1" host_path: "/dev/nvidia1" permissions: "rw" }
  devices { container_path: "/dev/nvidia0" host_path: "/dev/nvidia0" permissions: "rw" }
)pb";

const ControlNodes kControl{{"/dev/nvidiactl", "/dev/nvidia-uvm"}, {}};

TEST(AllocateContainerTest, EveryStrategyCombinationAnswersAsNvidia) {
  using S = config::DeviceListStrategy;
  struct Case {
    std::vector<S> strategies;
    std::string without_specs;  // passDeviceSpecs: false
    std::string with_specs;     // passDeviceSpecs: true
  };
  const std::string env = kEnvUuid, mounts = kMountsUuid, ann = kAnnotationUuid, cdi = kCdiUuid,
                    specs = kSpecs;
  const Case kCases[] = {
      {{S::kEnvvar}, env, env + specs},
      {{S::kVolumeMounts}, mounts, mounts + specs},
      // CDI only: no variable, no mounts, and no device specs even when asked for.
      {{S::kCdiAnnotations}, ann, ann},
      {{S::kCdiCri}, cdi, cdi},
      {{S::kCdiAnnotations, S::kCdiCri}, ann + cdi, ann + cdi},
      // volume-mounts owns NVIDIA_VISIBLE_DEVICES whenever it is on.
      {{S::kEnvvar, S::kVolumeMounts}, mounts, mounts + specs},
      {{S::kEnvvar, S::kCdiAnnotations}, env + ann, env + ann + specs},
      {{S::kEnvvar, S::kCdiCri}, env + cdi, env + cdi + specs},
      {{S::kVolumeMounts, S::kCdiAnnotations}, mounts + ann, mounts + ann + specs},
      {{S::kVolumeMounts, S::kCdiCri}, mounts + cdi, mounts + cdi + specs},
      {{S::kEnvvar, S::kVolumeMounts, S::kCdiAnnotations}, mounts + ann, mounts + ann + specs},
      {{S::kEnvvar, S::kVolumeMounts, S::kCdiCri}, mounts + cdi, mounts + cdi + specs},
      {{S::kEnvvar, S::kCdiAnnotations, S::kCdiCri}, env + ann + cdi, env + ann + cdi + specs},
      {{S::kVolumeMounts, S::kCdiAnnotations, S::kCdiCri},
       mounts + ann + cdi,
       mounts + ann + cdi + specs},
      {{S::kEnvvar, S::kVolumeMounts, S::kCdiAnnotations, S::kCdiCri},
       mounts + ann + cdi,
       mounts + ann + cdi + specs},
  };
  for (const Case& c : kCases) {
    for (bool pass_specs : {false, true}) {
      config::Config config;
      config.plugin.pass_device_specs = pass_specs;
      ExpectForEveryOrder(kGpuResource, config, TwoGpus(), kControl, {"GPU-b", "GPU-a"},
                          c.strategies, pass_specs ? c.with_specs : c.without_specs,
                          pass_specs ? "passDeviceSpecs" : "no device specs");
    }
  }
}

TEST(AllocateContainerTest, IndexStrategyAnswersAsNvidia) {
  using S = config::DeviceListStrategy;
  const std::string env = R"pb(envs { key: "NVIDIA_VISIBLE_DEVICES" value: "1,0" })pb";
  const std::string mounts = R"pb(
    envs { key: "NVIDIA_VISIBLE_DEVICES" value: "/var/run/nvidia-container-devices" }
    mounts { container_path: "/var/run/nvidia-container-devices/1" host_path: "/dev/null" }
    mounts { container_path: "/var/run/nvidia-container-devices/0" host_path: "/dev/null" }
  )pb";
  const std::string ann =
      R"pb(annotations { key: "$KEY" value: "gpulet.dev/gpu=1,gpulet.dev/gpu=0" })pb";
  const std::string cdi = R"pb(
    cdi_devices { name: "gpulet.dev/gpu=1" }
    cdi_devices { name: "gpulet.dev/gpu=0" }
  )pb";
  struct Case {
    std::vector<S> strategies;
    std::string want;
  };
  const Case kCases[] = {
      {{S::kEnvvar}, env},
      {{S::kVolumeMounts}, mounts},
      {{S::kCdiAnnotations}, ann},
      {{S::kCdiCri}, cdi},
      {{S::kEnvvar, S::kVolumeMounts, S::kCdiAnnotations, S::kCdiCri}, mounts + ann + cdi},
  };
  for (const Case& c : kCases) {
    config::Config config;
    config.plugin.device_id_strategy = config::DeviceIdStrategy::kIndex;
    ExpectForEveryOrder(kGpuResource, config, TwoGpus(), {}, {"GPU-b", "GPU-a"}, c.strategies,
                        c.want, "index");
  }
}

// Time-slicing replicas: NVIDIA names each GPU once to the runtime (env, mounts, CDI) but
// hands one DeviceSpec per requested replica, each carrying its GPU's node.
TEST(AllocateContainerTest, ReplicasMapToTheirGpuAsNvidia) {
  using S = config::DeviceListStrategy;
  struct Case {
    const char* name;
    std::vector<S> strategies;
    std::vector<std::string> ids;
    std::string want;
  };
  const Case kCases[] = {
      {"envvar",
       {S::kEnvvar},
       {"GPU-b::3", "GPU-b::0", "GPU-a::1"},
       R"pb(
         envs { key: "NVIDIA_VISIBLE_DEVICES" value: "GPU-b,GPU-a" }
         devices { container_path: "/dev/nvidiactl" host_path: "/dev/nvidiactl" permissions: "rw" }
         devices {
           container_path: "/dev/nvidia-uvm"
           host_path: "/dev/nvidia-uvm"
           permissions: "rw"
         }
         devices { container_path: "/dev/nvidia1" host_path: "/dev/nvidia1" permissions: "rw" }
         devices { container_path: "/dev/nvidia1" host_path: "/dev/nvidia1" permissions: "rw" }
         devices { container_path: "/dev/nvidia0" host_path: "/dev/nvidia0" permissions: "rw" }
       )pb"},
      {"volume-mounts and cdi-cri",
       {S::kVolumeMounts, S::kCdiCri},
       {"GPU-a::2", "GPU-a::0"},
       R"pb(
         envs { key: "NVIDIA_VISIBLE_DEVICES" value: "/var/run/nvidia-container-devices" }
         mounts { container_path: "/var/run/nvidia-container-devices/GPU-a" host_path: "/dev/null" }
         cdi_devices { name: "gpulet.dev/gpu=GPU-a" }
         devices { container_path: "/dev/nvidiactl" host_path: "/dev/nvidiactl" permissions: "rw" }
         devices {
           container_path: "/dev/nvidia-uvm"
           host_path: "/dev/nvidia-uvm"
           permissions: "rw"
         }
         devices { container_path: "/dev/nvidia0" host_path: "/dev/nvidia0" permissions: "rw" }
         devices { container_path: "/dev/nvidia0" host_path: "/dev/nvidia0" permissions: "rw" }
       )pb"},
      {"cdi-annotations only: no device specs",
       {S::kCdiAnnotations},
       {"GPU-a::1", "GPU-a::3"},
       R"pb(annotations { key: "$KEY" value: "gpulet.dev/gpu=GPU-a" })pb"},
  };
  for (const Case& c : kCases) {
    config::Config config = WithReplicas(4);
    config.plugin.pass_device_specs = true;
    ExpectForEveryOrder(kGpuResource, config, TwoGpus(), kControl, c.ids, c.strategies, c.want,
                        c.name);
  }
}

// The host path is filepath.Join(devRoot, path), as NVIDIA's apiDeviceSpecs.
TEST(AllocateContainerTest, DeviceSpecHostPathJoinsTheDevRoot) {
  struct Case {
    const char* dev_root;
    std::string host_prefix;
  };
  for (const Case& c :
       {Case{"/", ""}, Case{"/host", "/host"}, Case{"/run/nvidia/driver/", "/run/nvidia/driver"},
        Case{"/host//a/../b/.", "/host/b"}}) {
    config::Config config;
    config.plugin.pass_device_specs = true;
    config.plugin.dev_root = c.dev_root;
    auto r = AllocateContainer(kGpuResource, config, TwoGpus(), kControl, {"GPU-b"});
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<std::string> container, host;
    for (const auto& d : r->devices()) {
      container.push_back(d.container_path());
      host.push_back(d.host_path());
      EXPECT_EQ(d.permissions(), "rw");
    }
    EXPECT_THAT(container, ElementsAre("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia1"))
        << c.dev_root;
    EXPECT_THAT(host,
                ElementsAre(c.host_prefix + "/dev/nvidiactl", c.host_prefix + "/dev/nvidia-uvm",
                            c.host_prefix + "/dev/nvidia1"))
        << c.dev_root;
  }
}

TEST(AllocateContainerTest, IndexStrategyFallsBackToTheUuid) {
  state::Snapshot s = TwoGpus();
  s.devices[1].gpu.index.reset();
  config::Config config;
  config.plugin.device_id_strategy = config::DeviceIdStrategy::kIndex;
  auto r = AllocateContainer(kGpuResource, config, s, {}, {"GPU-a", "GPU-b"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->envs().at("NVIDIA_VISIBLE_DEVICES"), "0,GPU-b");
}

TEST(AllocateContainerTest, CdiKindAndPrefixComeFromTheConfig) {
  config::Config config;
  config.plugin.device_list_strategy = {config::DeviceListStrategy::kCdiAnnotations,
                                        config::DeviceListStrategy::kCdiCri};
  config.plugin.cdi_kind = "example.com/accel";
  config.plugin.cdi_annotation_prefix = "cdi.example.com/";
  auto r = AllocateContainer(kGpuResource, config, TwoGpus(), {}, {"GPU-b"});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->annotations_size(), 1);
  EXPECT_EQ(r->annotations().begin()->first,
            CdiAnnotationKey("cdi.example.com/", "nvidia.com/gpu", {"GPU-b"}));
  EXPECT_EQ(r->annotations().begin()->second, "example.com/accel=GPU-b");
  EXPECT_EQ(r->cdi_devices(0).name(), "example.com/accel=GPU-b");
}

// Where gpulet answers differently from NVIDIA's plugin on purpose (docs/allocate.md gives
// each reason). Every case would pass against NVIDIA's answer only if the difference were
// removed.
TEST(AllocateContainerTest, DeliberateDifferencesFromNvidia) {
  state::Snapshot unhealthy = TwoGpus();
  unhealthy.devices[1] =
      Record(1, "GPU-b", "0000:02:00.0", 1, 32607, state::HealthState::kUnhealthy);
  state::Snapshot no_minor = TwoGpus();
  no_minor.devices[0].gpu.minor.reset();
  config::Config cdi_only;
  cdi_only.plugin.device_list_strategy = {config::DeviceListStrategy::kCdiCri};
  config::Config specs;
  specs.plugin.pass_device_specs = true;
  config::Config slices_cdi = WithMemorySlices(2048);
  slices_cdi.plugin.device_list_strategy = {config::DeviceListStrategy::kCdiCri};
  slices_cdi.plugin.pass_device_specs = true;
  config::Config slices_unenforced = slices_cdi;
  slices_unenforced.sharing.memory_slices.enforce = false;
  config::Config slices_specs = WithMemorySlices(2048);
  slices_specs.plugin.pass_device_specs = true;
  slices_specs.sharing.memory_slices.host_dir = "/srv/vram";
  struct Case {
    const char* name;
    ResourceSpec resource;
    config::Config config;
    state::Snapshot snap;
    std::vector<std::string> ids;
    absl::StatusCode code;
    std::string want;  // when allowed
  };
  const Case kCases[] = {
      // NVIDIA's ValidateRequest checks only that the IDs are known; it would answer.
      {"an unhealthy GPU is refused",
       kGpuResource,
       config::Config(),
       unhealthy,
       {"GPU-b"},
       absl::StatusCode::kFailedPrecondition,
       ""},
      // NVIDIA would answer NVIDIA_VISIBLE_DEVICES="" (no GPU, but the toolkit still runs).
      {"an empty request is refused",
       kGpuResource,
       config::Config(),
       TwoGpus(),
       {},
       absl::StatusCode::kInvalidArgument,
       ""},
      // NVIDIA: k8s.device-plugin.nvidia.com/gpu=<id>, the kind of its own spec.
      {"the CDI kind is gpulet's own",
       kGpuResource,
       cdi_only,
       TwoGpus(),
       {"GPU-a"},
       absl::StatusCode::kOk,
       R"pb(cdi_devices { name: "gpulet.dev/gpu=GPU-a" })pb"},
      // NVIDIA's GPUs all have a minor number or it does not advertise them at all.
      {"a GPU without a known minor gets no node spec",
       kGpuResource,
       specs,
       no_minor,
       {"GPU-a"},
       absl::StatusCode::kOk,
       R"pb(
         envs { key: "NVIDIA_VISIBLE_DEVICES" value: "GPU-a" }
         devices { container_path: "/dev/nvidiactl" host_path: "/dev/nvidiactl" permissions: "rw" }
         devices {
           container_path: "/dev/nvidia-uvm"
           host_path: "/dev/nvidia-uvm"
           permissions: "rw"
         }
       )pb"},
      // Memory slices have no NVIDIA counterpart: the limit and the enforcement library
      // (mounted, loaded by LD_AUDIT, pointed at the allocation's slice file) are set as
      // NVIDIA sets its feature variables (NVIDIA_GDS, ...), even for a CDI-only answer,
      // whose CDI device is the whole GPU's ...
      {"memory slices: the limit and the enforcement library with CDI only",
       kMemoryResource,
       slices_cdi,
       TwoGpus(),
       {"GPU-b::mem1", "GPU-b::mem0"},
       absl::StatusCode::kOk,
       R"pb(
         envs { key: "GPULET_MEMORY_LIMIT_MIB" value: "4096" }
         envs { key: "LD_AUDIT" value: "/run/gpulet/lib/libgpulet-vram.so" }
         envs { key: "GPULET_VRAM_SLICE" value: "/run/gpulet/vram/slice" }
         mounts {
           container_path: "/run/gpulet/lib/libgpulet-vram.so"
           host_path: "/var/lib/gpulet/vram/lib/libgpulet-vram.so"
           read_only: true
         }
         mounts { container_path: "/run/gpulet/vram" host_path: "/var/lib/gpulet/vram/GPU-b--mem0" }
         cdi_devices { name: "gpulet.dev/gpu=GPU-b" }
       )pb"},
      {"memory slices: the limit alone with enforcement off",
       kMemoryResource,
       slices_unenforced,
       TwoGpus(),
       {"GPU-b::mem0", "GPU-b::mem1"},
       absl::StatusCode::kOk,
       R"pb(
         envs { key: "GPULET_MEMORY_LIMIT_MIB" value: "4096" }
         cdi_devices { name: "gpulet.dev/gpu=GPU-b" }
       )pb"},
      // ... and the GPU's node is listed once, not once per slice.
      {"memory slices: the GPU's node once",
       kMemoryResource,
       slices_specs,
       TwoGpus(),
       {"GPU-b::mem0", "GPU-b::mem3", "GPU-b::mem1"},
       absl::StatusCode::kOk,
       R"pb(
         envs { key: "NVIDIA_VISIBLE_DEVICES" value: "GPU-b" }
         envs { key: "GPULET_MEMORY_LIMIT_MIB" value: "6144" }
         envs { key: "LD_AUDIT" value: "/run/gpulet/lib/libgpulet-vram.so" }
         envs { key: "GPULET_VRAM_SLICE" value: "/run/gpulet/vram/slice" }
         mounts {
           container_path: "/run/gpulet/lib/libgpulet-vram.so"
           host_path: "/srv/vram/lib/libgpulet-vram.so"
           read_only: true
         }
         mounts { container_path: "/run/gpulet/vram" host_path: "/srv/vram/GPU-b--mem0" }
         devices { container_path: "/dev/nvidiactl" host_path: "/dev/nvidiactl" permissions: "rw" }
         devices {
           container_path: "/dev/nvidia-uvm"
           host_path: "/dev/nvidia-uvm"
           permissions: "rw"
         }
         devices { container_path: "/dev/nvidia1" host_path: "/dev/nvidia1" permissions: "rw" }
       )pb"},
  };
  for (const Case& c : kCases) {
    auto r = AllocateContainer(c.resource, c.config, c.snap, kControl, c.ids);
    ASSERT_EQ(r.status().code(), c.code) << c.name << ": " << r.status();
    if (r.ok()) {
      EXPECT_EQ(Diff(Expected(c.want, ""), *r), "") << c.name;
    }
  }
}

// NVIDIA keys its cdi-annotations answer "cdi.k8s.io/nvidia-device-plugin_<random UUID>", new
// on every call; gpulet's key is a function of the resource and the IDs (CdiAnnotationKey),
// so the same request always gets the same answer.
TEST(AllocateContainerTest, DeliberateDifferenceTheAnnotationKeyIsStable) {
  config::Config config;
  config.plugin.device_list_strategy = {config::DeviceListStrategy::kCdiAnnotations};
  auto first = AllocateContainer(kGpuResource, config, TwoGpus(), {}, {"GPU-a"});
  auto second = AllocateContainer(kGpuResource, config, TwoGpus(), {}, {"GPU-a"});
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_EQ(first->annotations_size(), 1);
  const std::string key = first->annotations().begin()->first;
  EXPECT_EQ(key.rfind("cdi.k8s.io/gpulet_nvidia.com_gpu_", 0), 0u) << key;
  EXPECT_EQ(Diff(*first, *second), "");
  auto other = AllocateContainer(kGpuResource, config, TwoGpus(), {}, {"GPU-b"});
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->annotations().count(key), 0u) << "another request, another key";
}

TEST(AllocateContainerTest, ReplicasAndSlicesAreOneGpuForTheRuntime) {
  auto r = AllocateContainer(kGpuResource, WithReplicas(4), TwoGpus(), {},
                             {"GPU-b::3", "GPU-b::0", "GPU-a::1"});
  ASSERT_TRUE(r.ok()) << r.status();
  // First-use order, each physical GPU once.
  EXPECT_EQ(r->envs().at("NVIDIA_VISIBLE_DEVICES"), "GPU-b,GPU-a");
  EXPECT_EQ(r->envs().count("GPULET_MEMORY_LIMIT_MIB"), 0u);

  r = AllocateContainer(kMemoryResource, WithMemorySlices(2048), TwoGpus(), {},
                        {"GPU-b::mem0", "GPU-b::mem4", "GPU-b::mem2"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->envs().at("NVIDIA_VISIBLE_DEVICES"), "GPU-b");
  EXPECT_EQ(r->envs().at("GPULET_MEMORY_LIMIT_MIB"), "6144");  // 3 × 2048
}

TEST(AllocateContainerTest, RefusedRequests) {
  state::Snapshot s = TwoGpus();
  s.devices[1] = Record(1, "GPU-b", "0000:02:00.0", 1, 32607, state::HealthState::kUnhealthy);
  state::Snapshot degraded = TwoGpus();
  degraded.devices[1] = Record(1, "GPU-b", "0000:02:00.0", 1, 32607, state::HealthState::kDegraded);
  config::Config fail_many = WithReplicas(2);
  fail_many.sharing.time_slicing.fail_requests_greater_than_one = true;
  struct Case {
    const char* name;
    ResourceSpec resource;
    config::Config config;
    state::Snapshot snap;
    std::vector<std::string> ids;
    absl::StatusCode code;  // kOk: allowed
    std::vector<std::string> message_has;
  };
  const Case kCases[] = {
      {"no IDs",
       kGpuResource,
       config::Config(),
       TwoGpus(),
       {},
       absl::StatusCode::kInvalidArgument,
       {"names no devices"}},
      {"unknown UUID",
       kGpuResource,
       config::Config(),
       TwoGpus(),
       {"GPU-a", "GPU-zzz"},
       absl::StatusCode::kInvalidArgument,
       {"GPU-zzz", "advertises 2 devices"}},
      // Advertised-ID shapes that do not match this resource and config.
      {"replica ID without replicas",
       kGpuResource,
       config::Config(),
       TwoGpus(),
       {"GPU-a::0"},
       absl::StatusCode::kInvalidArgument,
       {"GPU-a::0"}},
      {"whole GPU with replicas",
       kGpuResource,
       WithReplicas(2),
       TwoGpus(),
       {"GPU-a"},
       absl::StatusCode::kInvalidArgument,
       {"GPU-a"}},
      {"replica out of range",
       kGpuResource,
       WithReplicas(2),
       TwoGpus(),
       {"GPU-a::2"},
       absl::StatusCode::kInvalidArgument,
       {"GPU-a::2"}},
      {"empty replica number",
       kGpuResource,
       WithReplicas(2),
       TwoGpus(),
       {"GPU-a::"},
       absl::StatusCode::kInvalidArgument,
       {"GPU-a::"}},
      {"slice for the GPU resource",
       kGpuResource,
       WithMemorySlices(),
       TwoGpus(),
       {"GPU-a::mem0"},
       absl::StatusCode::kInvalidArgument,
       {"GPU-a::mem0"}},
      {"GPU for the slice resource",
       kMemoryResource,
       WithMemorySlices(),
       TwoGpus(),
       {"GPU-a"},
       absl::StatusCode::kInvalidArgument,
       {"nvidia.com/gpu-memory", "GPU-a"}},
      {"slice out of range",
       kMemoryResource,
       WithMemorySlices(),
       TwoGpus(),
       {"GPU-a::mem10"},
       absl::StatusCode::kInvalidArgument,
       {"GPU-a::mem10"}},
      {"index instead of UUID",
       kGpuResource,
       config::Config(),
       TwoGpus(),
       {"0"},
       absl::StatusCode::kInvalidArgument,
       {"unknown nvidia.com/gpu device IDs: 0 "}},
      {"unhealthy",
       kGpuResource,
       config::Config(),
       s,
       {"GPU-a", "GPU-b"},
       absl::StatusCode::kFailedPrecondition,
       {"GPU-b (XID 79 (test))"}},
      {"degraded is allowed",
       kGpuResource,
       config::Config(),
       degraded,
       {"GPU-b"},
       absl::StatusCode::kOk,
       {}},
      {"unknown beats unhealthy",
       kGpuResource,
       config::Config(),
       s,
       {"GPU-b", "GPU-x"},
       absl::StatusCode::kInvalidArgument,
       {"GPU-x"}},
      {"slices from two GPUs",
       kMemoryResource,
       WithMemorySlices(),
       TwoGpus(),
       {"GPU-a::mem0", "GPU-b::mem0"},
       absl::StatusCode::kFailedPrecondition,
       {"span 2 GPUs"}},
      {"two replicas, failRequestsGreaterThanOne",
       kGpuResource,
       fail_many,
       TwoGpus(),
       {"GPU-a::0", "GPU-b::0"},
       absl::StatusCode::kFailedPrecondition,
       {"failRequestsGreaterThanOne"}},
      {"one replica, failRequestsGreaterThanOne",
       kGpuResource,
       fail_many,
       TwoGpus(),
       {"GPU-a::1"},
       absl::StatusCode::kOk,
       {}},
      {"two replicas allowed by default",
       kGpuResource,
       WithReplicas(2),
       TwoGpus(),
       {"GPU-a::0", "GPU-a::1"},
       absl::StatusCode::kOk,
       {}},
  };
  for (const Case& c : kCases) {
    auto r = AllocateContainer(c.resource, c.config, c.snap, {}, c.ids);
    EXPECT_EQ(r.status().code(), c.code) << c.name << ": " << r.status();
    for (const std::string& part : c.message_has) {
      EXPECT_THAT(std::string(r.status().message()), HasSubstr(part)) << c.name;
    }
  }
}

// Every advertised ID, handed back by the kubelet, allocates its own physical GPU.
TEST(AllocateContainerTest, EveryAdvertisedIdRoundTrips) {
  struct Case {
    ResourceSpec resource;
    config::Config config;
  };
  for (const Case& c : {Case{kGpuResource, config::Config()}, Case{kGpuResource, WithReplicas(3)},
                        Case{kMemoryResource, WithMemorySlices(8192)}}) {
    state::Snapshot snap = TwoGpus();
    std::vector<AdvertisedDevice> devices = AdvertisedDevices(c.resource, c.config, snap);
    ASSERT_FALSE(devices.empty());
    std::set<std::string> unique;
    for (const AdvertisedDevice& d : devices) {
      EXPECT_TRUE(unique.insert(d.id).second) << "duplicate ID " << d.id;
      auto r = AllocateContainer(c.resource, c.config, snap, {}, {d.id});
      ASSERT_TRUE(r.ok()) << d.id << ": " << r.status();
      EXPECT_EQ(r->envs().at("NVIDIA_VISIBLE_DEVICES"), snap.devices[d.gpu].gpu.uuid) << d.id;
      EXPECT_EQ(state::PhysicalId(d.id), snap.devices[d.gpu].gpu.uuid) << d.id;
    }
  }
}

// --- preferred allocation -----------------------------------------------------------------

std::vector<std::string> ReplicaIds(const std::vector<std::pair<std::string, int>>& gpus) {
  std::vector<std::string> out;
  for (const auto& [uuid, n] : gpus) {
    for (int i = 0; i < n; ++i) out.push_back(state::ReplicaDeviceId(uuid, i));
  }
  return out;
}

TEST(PreferredAllocationTest, ReplicasSpreadOverGpusLeastUsedFirst) {
  config::Config config = WithReplicas(4);
  state::Snapshot snap = TwoGpus();
  struct Case {
    const char* name;
    std::vector<std::string> available, must_include;
    int size;
    std::vector<std::string> want;
  };
  const Case kCases[] = {
      {"two from two GPUs",
       ReplicaIds({{"GPU-a", 4}, {"GPU-b", 4}}),
       {},
       2,
       {"GPU-a::0", "GPU-b::0"}},
      {"three: round robin",
       ReplicaIds({{"GPU-a", 4}, {"GPU-b", 4}}),
       {},
       3,
       {"GPU-a::0", "GPU-b::0", "GPU-a::1"}},
      // GPU-a has one replica free, GPU-b three: the least used GPU comes first.
      {"least used first", {"GPU-a::3", "GPU-b::1", "GPU-b::2", "GPU-b::3"}, {}, 1, {"GPU-b::1"}},
      // The must-include replica uses GPU-a, so GPU-b is now the less used.
      {"must-include kept first",
       ReplicaIds({{"GPU-a", 4}, {"GPU-b", 4}}),
       {"GPU-a::2"},
       2,
       {"GPU-a::2", "GPU-b::0"}},
      {"must-include beyond size is cut",
       ReplicaIds({{"GPU-a", 4}}),
       {"GPU-a::2", "GPU-a::3"},
       1,
       {"GPU-a::2"}},
      {"not enough: all there is", {"GPU-a::0", "GPU-b::0"}, {}, 5, {"GPU-a::0", "GPU-b::0"}},
  };
  for (const Case& c : kCases) {
    EXPECT_EQ(PreferredAllocation(kGpuResource, config, snap, c.available, c.must_include, c.size),
              c.want)
        << c.name;
  }
}

TEST(PreferredAllocationTest, WholeGpusStayOnOneNumaNode) {
  // NUMA 0: GPU-0, GPU-1. NUMA 1: GPU-2, GPU-3, GPU-4.
  state::Snapshot snap;
  for (unsigned i = 0; i < 5; ++i) {
    snap.devices.push_back(
        Record(i, absl::StrCat("GPU-", i), absl::StrCat("0000:0", i + 1, ":00.0"), i < 2 ? 0 : 1));
  }
  const std::vector<std::string> all = {"GPU-0", "GPU-1", "GPU-2", "GPU-3", "GPU-4"};
  struct Case {
    const char* name;
    std::vector<std::string> available, must_include;
    int size;
    std::vector<std::string> want;
  };
  const Case kCases[] = {
      // The smallest node that fits keeps the bigger one free for bigger requests.
      {"two: the smaller node that fits", all, {}, 2, {"GPU-0", "GPU-1"}},
      {"one: the smaller node", all, {}, 1, {"GPU-0"}},
      {"three: only node 1 fits", all, {}, 3, {"GPU-2", "GPU-3", "GPU-4"}},
      {"four: none fits, the biggest first", all, {}, 4, {"GPU-2", "GPU-3", "GPU-4", "GPU-0"}},
      {"must-include picks its node", all, {"GPU-3"}, 2, {"GPU-3", "GPU-2"}},
      {"only what is available", {"GPU-1", "GPU-4"}, {}, 2, {"GPU-1", "GPU-4"}},
  };
  for (const Case& c : kCases) {
    EXPECT_EQ(PreferredAllocation(kGpuResource, config::Config(), snap, c.available, c.must_include,
                                  c.size),
              c.want)
        << c.name;
  }
}

TEST(PreferredAllocationTest, MemorySlicesPackOntoTheTightestGpu) {
  config::Config config = WithMemorySlices();
  state::Snapshot snap = TwoGpus();
  std::vector<std::string> available;
  for (const AdvertisedDevice& d : AdvertisedDevices(kMemoryResource, config, snap)) {
    available.push_back(d.id);  // GPU-a: 10 slices, GPU-b: 31
  }
  auto on_one_gpu = [](const std::vector<std::string>& ids, const std::string& uuid) {
    return std::all_of(ids.begin(), ids.end(),
                       [&](const std::string& id) { return state::PhysicalId(id) == uuid; });
  };
  std::vector<std::string> eight =
      PreferredAllocation(kMemoryResource, config, snap, available, {}, 8);
  EXPECT_EQ(eight.size(), 8u);
  EXPECT_TRUE(on_one_gpu(eight, "GPU-a")) << "8 fit the 10-slice GPU most tightly";
  std::vector<std::string> big =
      PreferredAllocation(kMemoryResource, config, snap, available, {}, 24);
  EXPECT_EQ(big.size(), 24u);
  EXPECT_TRUE(on_one_gpu(big, "GPU-b"));
  // A must-include slice fixes the GPU, even when another would fit more tightly.
  std::vector<std::string> fixed =
      PreferredAllocation(kMemoryResource, config, snap, available, {"GPU-b::mem7"}, 3);
  EXPECT_THAT(fixed, ElementsAre("GPU-b::mem7", "GPU-b::mem0", "GPU-b::mem1"));
  // More than any GPU has: the slices of one GPU only, never a mix Allocate would refuse.
  std::vector<std::string> too_many =
      PreferredAllocation(kMemoryResource, config, snap, available, {}, 40);
  EXPECT_FALSE(too_many.empty());
  EXPECT_TRUE(on_one_gpu(too_many, state::PhysicalId(too_many.front())));
  // Taken slices are not offered twice.
  std::vector<std::string> partial = {"GPU-a::mem0", "GPU-a::mem1", "GPU-b::mem0"};
  EXPECT_THAT(PreferredAllocation(kMemoryResource, config, snap, partial, {"GPU-a::mem0"}, 2),
              UnorderedElementsAre("GPU-a::mem0", "GPU-a::mem1"));
}

TEST(CdiAnnotationKeyTest, EachAnswerHasItsOwnValidKey) {
  const std::string whole = CdiAnnotationKey("cdi.k8s.io/", "nvidia.com/gpu", {"GPU-a"});
  const std::string memory =
      CdiAnnotationKey("cdi.k8s.io/", "nvidia.com/gpu-memory", {"GPU-a::mem0", "GPU-a::mem1"});
  // A container holding both resources gets two answers; the kubelet drops an annotation
  // whose key it already has, so the keys must differ.
  EXPECT_NE(whole, memory);
  EXPECT_NE(whole, CdiAnnotationKey("cdi.k8s.io/", "nvidia.com/gpu", {"GPU-b"}));
  // Stable: the same answer always has the same key.
  EXPECT_EQ(whole, CdiAnnotationKey("cdi.k8s.io/", "nvidia.com/gpu", {"GPU-a"}));
  for (const std::string& key : {whole, memory}) {
    ASSERT_EQ(key.rfind("cdi.k8s.io/gpulet_", 0), 0u) << key;
    std::string name = key.substr(std::string("cdi.k8s.io/").size());
    EXPECT_LE(name.size(), 63u) << key;  // a qualified name's name part
    for (char c : name) {
      EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')
          << key;
    }
  }
  // A long resource name is cut, not allowed past the limit.
  std::string long_key = CdiAnnotationKey(
      "cdi.k8s.io/", "example.com/a-very-long-resource-name-that-goes-on-and-on-and-on", {"x"});
  EXPECT_LE(long_key.size() - std::string("cdi.k8s.io/").size(), 63u);
}

// The host directory for slices is reached under the host root whatever symlinks the host
// holds: an absolute link is re-anchored at the root, never followed out of it.
TEST(SliceFilesTest, TheHostDirectoryStaysUnderTheHostRoot) {
  testing::ScratchDir root;
  root.Write("etc/marker", "host's etc");
  std::filesystem::create_directories(root.path() + "/var/lib/gpulet");
  std::filesystem::create_symlink("/etc", root.path() + "/var/lib/gpulet/vram");
  SliceFiles files;
  files.host_root = root.path();
  absl::StatusOr<std::string> local = files.LocalDir("/var/lib/gpulet/vram");
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ(*local, root.path() + "/etc");
  std::filesystem::create_symlink("loop", root.path() + "/loop");
  local = files.LocalDir("/loop/vram");
  EXPECT_EQ(local.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(local.status().message()),
              ::testing::HasSubstr("sharing.memorySlices.hostDir /loop/vram cannot be reached"));
  files.host_root = "/";
  EXPECT_EQ(files.LocalDir("/var/lib/gpulet/vram").value_or(""), "/var/lib/gpulet/vram");
}

}  // namespace
}  // namespace gpulet::plugin
