// The Container Device Interface (CDI) spec model: what a CDI spec file says, how to write
// it (YAML or JSON, in a fixed order), how to read one back strictly, and the rules that
// decide whether a container runtime will accept it.
//
// A CDI spec names devices of one kind ("nvidia.com/gpu") and, for each, the edits a runtime
// applies to a container's OCI spec when the device is requested ("nvidia.com/gpu=0"):
// environment variables, device nodes, bind mounts and hooks. Runtimes are picky in ways
// that fail at container start, far from the spec's author: the CDI library vendored in a
// runtime accepts only the cdiVersions it knows, rejects a whole file for one unknown field,
// and rejects a file whose declared cdiVersion is older than its content needs (a `hostPath`
// on a device node needs 0.5.0, `annotations` 0.6.0, `additionalGids` 0.7.0). Debian 12's
// podman 4.3 accepts nothing newer than 0.5.0. So gpulet computes the lowest version its
// content needs, can be forced to a target version (and then refuses content that version
// cannot express, instead of writing a file the runtime will reject), and applies the same
// checks when reading specs others wrote (`gpulet doctor`).
//
// Field names and value types follow the CDI JSON schema; e.g. `fileMode` is an integer
// (a Go os.FileMode, written in decimal), and every string that a YAML reader would take for
// a number or a boolean ("0", "true") is quoted, since Go runtimes reject a number where the
// schema wants a string.
//
// Thread-safety: plain values and pure functions; safe to use from any thread.
#ifndef GPULET_CDI_SPEC_H_
#define GPULET_CDI_SPEC_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpulet::cdi {

// A device node to create in the container.
struct DeviceNode {
  std::string path;       // container path, absolute (required)
  std::string host_path;  // host path; "" means the same as `path` (field needs 0.5.0)
  std::string type;       // "b", "c", "u", "p" or "" (the runtime stats the host node)
  std::optional<int64_t> major;
  std::optional<int64_t> minor;
  std::optional<uint32_t> file_mode;  // Go os.FileMode bits, e.g. 0666
  std::string permissions;            // subset of "rwm"; "" means "rwm"
  std::optional<uint32_t> uid;
  std::optional<uint32_t> gid;

  bool operator==(const DeviceNode&) const = default;
};

// A mount into the container (usually a read-only bind mount of one host file).
struct Mount {
  std::string host_path;       // required
  std::string container_path;  // required, absolute
  std::string type;            // e.g. "bind"; "" lets the runtime decide (field needs 0.4.0)
  std::vector<std::string> options;

  bool operator==(const Mount&) const = default;
};

// An OCI hook: a host program the runtime runs at a point of the container's life.
struct Hook {
  std::string hook_name;          // prestart, createRuntime, createContainer, startContainer,
                                  // poststart, poststop
  std::string path;               // host path of the program, absolute
  std::vector<std::string> args;  // argv, including argv[0]
  std::vector<std::string> env;   // "KEY=VALUE"
  std::optional<int> timeout;     // seconds, > 0

  bool operator==(const Hook&) const = default;
};

// Intel RDT settings (0.7.0; `schemata` and `enableMonitoring` 1.1.0). Modelled only so that
// specs from other producers parse; gpulet never emits it.
struct IntelRdt {
  std::string clos_id;
  std::string l3_cache_schema;
  std::string mem_bw_schema;
  std::optional<bool> enable_cmt;  // dropped in 1.1.0
  std::optional<bool> enable_mbm;  // dropped in 1.1.0
  std::vector<std::string> schemata;
  std::optional<bool> enable_monitoring;

  bool operator==(const IntelRdt&) const = default;
};

// A network interface moved into the container (1.1.0). Parsed, never emitted.
struct NetDevice {
  std::string host_interface_name;
  std::string name;

  bool operator==(const NetDevice&) const = default;
};

struct ContainerEdits {
  std::vector<std::string> env;  // "KEY=VALUE"
  std::vector<DeviceNode> device_nodes;
  std::vector<Mount> mounts;
  std::vector<Hook> hooks;
  std::vector<uint32_t> additional_gids;  // 0.7.0
  std::optional<IntelRdt> intel_rdt;      // 0.7.0
  std::vector<NetDevice> net_devices;     // 1.1.0

  bool empty() const;
  bool operator==(const ContainerEdits&) const = default;
};

struct Device {
  std::string name;                                // "0", "GPU-…", "all"
  std::map<std::string, std::string> annotations;  // 0.6.0
  ContainerEdits edits;                            // must not be empty

  bool operator==(const Device&) const = default;
};

struct Spec {
  std::string version;                             // cdiVersion, "0.5.0"
  std::string kind;                                // "vendor/class", "nvidia.com/gpu"
  std::map<std::string, std::string> annotations;  // 0.6.0
  std::vector<Device> devices;                     // at least one
  ContainerEdits edits;  // applied when any device of the spec is requested

  const Device* FindDevice(absl::string_view name) const;
  bool operator==(const Spec&) const = default;
};

// --- versions -------------------------------------------------------------------------------

// A cdiVersion. Comparable; ToString() gives "0.5.0".
struct Version {
  int major = 0, minor = 0, patch = 0;

  std::string ToString() const;
  auto operator<=>(const Version&) const = default;
};

// Every cdiVersion the spec has defined, ascending (0.1.0 ... 1.1.0).
const std::vector<Version>& KnownVersions();

// The lowest version gpulet writes unless forced lower: 0.5.0. GPU specs name devices by
// index ("0"), which needs 0.5.0 anyway, and 0.5.0 is what nvidia-ctk writes for the same
// content, so every runtime that works with NVIDIA's specs works with gpulet's.
inline constexpr Version kDefaultMinimumVersion{0, 5, 0};

// Parses "0.5.0" or "v0.5.0". InvalidArgument unless it is one of KnownVersions().
absl::StatusOr<Version> ParseVersion(absl::string_view text);

// The lowest cdiVersion whose schema can express `spec`, and the first field that needs it.
struct VersionRequirement {
  Version version{0, 3, 0};  // 0.3.0 is the oldest version still accepted by CDI consumers
  std::string reason;        // e.g. "devices[0].containerEdits.deviceNodes[0].hostPath
                             // needs cdiVersion 0.5.0"; "" when nothing beyond 0.3.0 is used
};
VersionRequirement RequiredVersion(const Spec& spec);

// The version to write: `forced` when given (InvalidArgument if unknown, or if the content
// needs more, naming the field and what to do), else max(kDefaultMinimumVersion, required).
absl::StatusOr<Version> ChooseVersion(const Spec& spec, absl::string_view forced);

// --- names ----------------------------------------------------------------------------------

// A fully-qualified device name "vendor/class=name".
struct QualifiedName {
  std::string vendor;      // "nvidia.com"
  std::string class_name;  // "gpu"
  std::string name;        // "0"

  std::string Kind() const { return vendor + "/" + class_name; }
  std::string ToString() const { return Kind() + "=" + name; }
};

// Splits "nvidia.com/gpu=0" and validates each part. InvalidArgument says which part is
// wrong and why.
absl::StatusOr<QualifiedName> ParseQualifiedName(absl::string_view text);

// Checks a kind "vendor/class": each part starts with a letter, ends with a letter or digit
// and has only letters, digits, '_', '-' and '.' (a '.' in the class needs cdiVersion 0.6.0,
// which RequiredVersion accounts for).
absl::Status ValidateKind(absl::string_view kind);

// Checks a device name: starts and ends with a letter or digit, middle letters, digits,
// '_', '-', '.', ':' (a leading digit needs cdiVersion 0.5.0).
absl::Status ValidateDeviceName(absl::string_view name);

// --- validation -----------------------------------------------------------------------------

// Applies the CDI rules a runtime applies when it loads the spec: known cdiVersion, not
// older than the content needs, valid kind, at least one device, unique valid device names,
// no device without edits, env entries "K=V", absolute device, mount and hook paths, known
// device types, permissions within "rwm", known hook names, positive timeouts. The first
// problem found is returned as InvalidArgument naming the field ("devices[2].name: ...").
absl::Status ValidateSpec(const Spec& spec);

// --- encoding -------------------------------------------------------------------------------

enum class Format { kYaml, kJson };

// "yaml" / "json" (case-sensitive); InvalidArgument otherwise.
absl::StatusOr<Format> ParseFormat(absl::string_view text);

// Encodes the spec. Keys come in a fixed order (cdiVersion, kind, annotations, devices,
// containerEdits; inside edits env, deviceNodes, mounts, hooks, ...), empty fields are left
// out, and the same Spec always gives the same bytes. YAML starts with "---".
std::string ToYaml(const Spec& spec);
std::string ToJson(const Spec& spec);
std::string Encode(const Spec& spec, Format format);

// Decodes a spec file's contents (YAML, or JSON, which is read as YAML). Strict like the Go
// CDI library: an unknown field, a missing required field or a value of the wrong type
// ("name: 0", a number where a string belongs) is an error. `origin` (a file name) starts
// every message, followed by the line and column when known and the field path. Does not
// call ValidateSpec.
absl::StatusOr<Spec> ParseSpec(absl::string_view text, absl::string_view origin);

}  // namespace gpulet::cdi

#endif  // GPULET_CDI_SPEC_H_
