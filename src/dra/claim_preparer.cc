#include "dra/claim_preparer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/atomic_file.h"
#include "dra/resource_slices.h"
#include "vram/compute_share.h"
#include "vram/slice_file.h"

namespace gpulet::dra {
namespace {

using json = nlohmann::json;

constexpr char kClaimEnv[] = "GPULET_DRA_CLAIM";
// The device plugin's name for the same hint (plugin/resources.cc).
constexpr char kMemoryLimitEnv[] = "GPULET_MEMORY_LIMIT_MIB";

std::string ClaimLabel(absl::string_view ns, absl::string_view name) {
  return absl::StrCat("ResourceClaim ", ns, "/", name);
}

// A JSON value's type in the API's words, for errors.
std::string TypeName(const json& v) {
  if (v.is_object()) return "an object";
  if (v.is_array()) return "a list";
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  return "null";
}

absl::Status FieldError(absl::string_view where, absl::string_view field,
                        absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", field, ": ", message));
}

// The string at `key` of `object`; "" when absent or null; an error for another type.
absl::Status OptionalString(const json& object, const char* key, absl::string_view where,
                            const std::string& field, std::string* out) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_string()) {
    return FieldError(where, absl::StrCat(field, ".", key),
                      absl::StrCat("expected a string, found ", TypeName(*it)));
  }
  *out = it->get<std::string>();
  return absl::OkStatus();
}

// Checks that `object` is an object with only `allowed` keys.
absl::Status StrictObject(const json& object, const std::vector<absl::string_view>& allowed,
                          absl::string_view where, const std::string& field) {
  if (!object.is_object()) {
    return FieldError(where, field, absl::StrCat("expected an object, found ", TypeName(object)));
  }
  for (const auto& [key, value] : object.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      return FieldError(
          where, absl::StrCat(field, ".", key),
          absl::StrCat("unknown field (known here: ", absl::StrJoin(allowed, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

// Whether a config entry listing `requests` applies to a result of `request` ("gpu" or the
// subrequest "gpu/small", which a config for "gpu" also covers).
bool ConfigApplies(const std::vector<std::string>& requests, const std::string& request) {
  if (requests.empty()) return true;
  const std::string parent = request.substr(0, request.find('/'));
  return std::find(requests.begin(), requests.end(), request) != requests.end() ||
         std::find(requests.begin(), requests.end(), parent) != requests.end();
}

// Namespace and name as the API server allows them (DNS labels and subdomains): enough to keep
// them from changing the request path.
bool SafePathSegment(absl::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.';
  });
}

}  // namespace

absl::StatusOr<GpuConfig> ParseGpuConfig(const json& parameters, absl::string_view where) {
  const std::string root = "parameters";
  if (absl::Status st = StrictObject(parameters, {"apiVersion", "kind", "sharing"}, where, root);
      !st.ok()) {
    return st;
  }
  std::string api_version, kind;
  if (absl::Status st = OptionalString(parameters, "apiVersion", where, root, &api_version);
      !st.ok()) {
    return st;
  }
  if (absl::Status st = OptionalString(parameters, "kind", where, root, &kind); !st.ok()) {
    return st;
  }
  if (api_version != kGpuConfigApiVersion) {
    return FieldError(where, "parameters.apiVersion",
                      absl::StrCat("\"", api_version, "\" is not ", kGpuConfigApiVersion));
  }
  if (kind != kGpuConfigKind) {
    return FieldError(where, "parameters.kind",
                      absl::StrCat("\"", kind, "\" is not ", kGpuConfigKind));
  }
  GpuConfig config;
  auto sharing = parameters.find("sharing");
  if (sharing == parameters.end() || sharing->is_null()) return config;
  const std::string sfield = "parameters.sharing";
  if (absl::Status st = StrictObject(*sharing, {"strategy", "timeSlicingConfig"}, where, sfield);
      !st.ok()) {
    return st;
  }
  std::string strategy;
  if (absl::Status st = OptionalString(*sharing, "strategy", where, sfield, &strategy); !st.ok()) {
    return st;
  }
  if (strategy == "TimeSlicing") {
    config.strategy = SharingStrategy::kTimeSlicing;
  } else if (strategy == "Exclusive") {
    config.strategy = SharingStrategy::kExclusive;
  } else {
    return FieldError(where, "parameters.sharing.strategy",
                      strategy.empty() ? "required (TimeSlicing or Exclusive)"
                                       : absl::StrCat("unknown strategy \"", strategy,
                                                      "\" (use TimeSlicing or Exclusive)"));
  }
  auto ts = sharing->find("timeSlicingConfig");
  if (ts == sharing->end() || ts->is_null()) return config;
  const std::string tfield = "parameters.sharing.timeSlicingConfig";
  if (*config.strategy != SharingStrategy::kTimeSlicing) {
    return FieldError(where, tfield, "only allowed with strategy TimeSlicing");
  }
  if (absl::Status st = StrictObject(*ts, {"interval"}, where, tfield); !st.ok()) return st;
  std::string interval;
  if (absl::Status st = OptionalString(*ts, "interval", where, tfield, &interval); !st.ok()) {
    return st;
  }
  if (interval.empty() || interval == "Default") {
    config.interval = TimeSliceInterval::kDefault;
  } else if (interval == "Short") {
    config.interval = TimeSliceInterval::kShort;
  } else if (interval == "Medium") {
    config.interval = TimeSliceInterval::kMedium;
  } else if (interval == "Long") {
    config.interval = TimeSliceInterval::kLong;
  } else {
    return FieldError(
        where, absl::StrCat(tfield, ".interval"),
        absl::StrCat("unknown interval \"", interval, "\" (use Default, Short, Medium or Long)"));
  }
  return config;
}

absl::StatusOr<std::vector<AllocatedDevice>> ParseAllocation(const json& claim,
                                                             absl::string_view driver,
                                                             absl::string_view pool) {
  std::string ns, name;
  if (claim.is_object() && claim.contains("metadata") && claim["metadata"].is_object()) {
    const json& meta = claim["metadata"];
    if (meta.contains("namespace") && meta["namespace"].is_string()) ns = meta["namespace"];
    if (meta.contains("name") && meta["name"].is_string()) name = meta["name"];
  }
  const std::string where = ClaimLabel(ns, name);
  if (!claim.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": expected an object, found ", TypeName(claim)));
  }
  const json* allocation = nullptr;
  if (auto status = claim.find("status"); status != claim.end() && status->is_object()) {
    if (auto a = status->find("allocation"); a != status->end() && !a->is_null()) {
      allocation = &*a;
    }
  }
  if (allocation == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        where,
        ": status.allocation is not set: the claim is not allocated (yet), so there is "
        "nothing to prepare. The scheduler allocates it before the pod is bound to a node; "
        "check `kubectl describe resourceclaim -n ",
        ns, " ", name, "`"));
  }
  if (!allocation->is_object()) {
    return FieldError(where, "status.allocation",
                      absl::StrCat("expected an object, found ", TypeName(*allocation)));
  }
  const json empty_object = json::object();
  const json& devices = allocation->contains("devices") ? (*allocation)["devices"] : empty_object;
  if (!devices.is_object()) {
    return FieldError(where, "status.allocation.devices",
                      absl::StrCat("expected an object, found ", TypeName(devices)));
  }
  const json empty_list = json::array();
  const json& results = devices.contains("results") ? devices["results"] : empty_list;
  const json& configs = devices.contains("config") ? devices["config"] : empty_list;
  if (!results.is_array()) {
    return FieldError(where, "status.allocation.devices.results",
                      absl::StrCat("expected a list, found ", TypeName(results)));
  }
  if (!configs.is_array()) {
    return FieldError(where, "status.allocation.devices.config",
                      absl::StrCat("expected a list, found ", TypeName(configs)));
  }

  // Our opaque configs, class entries first, then the claim's.
  struct Entry {
    std::vector<std::string> requests;
    GpuConfig config;
  };
  std::vector<Entry> from_class, from_claim;
  for (size_t i = 0; i < configs.size(); ++i) {
    const json& c = configs[i];
    const std::string field = absl::StrCat("status.allocation.devices.config[", i, "]");
    if (!c.is_object()) {
      return FieldError(where, field, absl::StrCat("expected an object, found ", TypeName(c)));
    }
    auto opaque = c.find("opaque");
    if (opaque == c.end() || opaque->is_null()) continue;  // another kind of config
    if (!opaque->is_object()) {
      return FieldError(where, field + ".opaque",
                        absl::StrCat("expected an object, found ", TypeName(*opaque)));
    }
    std::string config_driver;
    if (absl::Status st =
            OptionalString(*opaque, "driver", where, field + ".opaque", &config_driver);
        !st.ok()) {
      return st;
    }
    if (config_driver != driver) continue;
    Entry entry;
    if (auto r = c.find("requests"); r != c.end() && !r->is_null()) {
      if (!r->is_array()) {
        return FieldError(where, field + ".requests",
                          absl::StrCat("expected a list, found ", TypeName(*r)));
      }
      for (size_t j = 0; j < r->size(); ++j) {
        if (!(*r)[j].is_string()) {
          return FieldError(where, absl::StrCat(field, ".requests[", j, "]"),
                            absl::StrCat("expected a string, found ", TypeName((*r)[j])));
        }
        entry.requests.push_back((*r)[j].get<std::string>());
      }
    }
    auto params = opaque->find("parameters");
    if (params == opaque->end()) {
      return FieldError(where, field + ".opaque.parameters", "required");
    }
    absl::StatusOr<GpuConfig> parsed =
        ParseGpuConfig(*params, absl::StrCat(where, ": ", field, ".opaque"));
    if (!parsed.ok()) return parsed.status();
    entry.config = *parsed;
    std::string source;
    if (absl::Status st = OptionalString(c, "source", where, field, &source); !st.ok()) return st;
    (source == "FromClass" ? from_class : from_claim).push_back(std::move(entry));
  }
  std::vector<Entry> ordered = std::move(from_class);
  for (Entry& e : from_claim) ordered.push_back(std::move(e));

  std::vector<AllocatedDevice> out;
  for (size_t i = 0; i < results.size(); ++i) {
    const json& r = results[i];
    const std::string field = absl::StrCat("status.allocation.devices.results[", i, "]");
    if (!r.is_object()) {
      return FieldError(where, field, absl::StrCat("expected an object, found ", TypeName(r)));
    }
    std::string result_driver, result_pool;
    if (absl::Status st = OptionalString(r, "driver", where, field, &result_driver); !st.ok()) {
      return st;
    }
    if (absl::Status st = OptionalString(r, "pool", where, field, &result_pool); !st.ok()) {
      return st;
    }
    if (result_driver != driver || result_pool != pool) continue;
    AllocatedDevice d;
    if (absl::Status st = OptionalString(r, "request", where, field, &d.request); !st.ok()) {
      return st;
    }
    if (absl::Status st = OptionalString(r, "device", where, field, &d.device); !st.ok()) {
      return st;
    }
    if (absl::Status st = OptionalString(r, "shareID", where, field, &d.share_id); !st.ok()) {
      return st;
    }
    if (d.request.empty()) return FieldError(where, field + ".request", "required");
    if (d.device.empty()) return FieldError(where, field + ".device", "required");
    if (auto consumed = r.find("consumedCapacity"); consumed != r.end() && !consumed->is_null()) {
      if (!consumed->is_object()) {
        return FieldError(where, field + ".consumedCapacity",
                          absl::StrCat("expected an object, found ", TypeName(*consumed)));
      }
      if (auto memory = consumed->find("memory"); memory != consumed->end()) {
        const std::string mfield = field + ".consumedCapacity.memory";
        if (!memory->is_string()) {
          return FieldError(where, mfield,
                            absl::StrCat("expected a quantity string, found ", TypeName(*memory)));
        }
        absl::StatusOr<uint64_t> bytes = ParseQuantityBytes(memory->get<std::string>());
        if (!bytes.ok()) return FieldError(where, mfield, bytes.status().message());
        d.memory_bytes = *bytes;
      }
    }
    for (const Entry& e : ordered) {
      if (ConfigApplies(e.requests, d.request)) d.config = e.config;
    }
    out.push_back(std::move(d));
  }
  if (out.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        where, ": status.allocation.devices.results has no device of driver ", driver, " in pool ",
        pool,
        " (this node): the claim was allocated for another node or driver, yet the kubelet of ",
        pool, " asked to prepare it. Check the claim's allocation and the pod's node"));
  }
  return out;
}

absl::StatusOr<uint64_t> ParseQuantityBytes(absl::string_view quantity) {
  using u128 = unsigned __int128;
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", quantity, "\" is not a memory quantity: ", why));
  };
  absl::string_view s = quantity;
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  if (!s.empty() && s[0] == '-') return bad("negative");
  size_t i = 0;
  u128 numerator = 0;
  int digits = 0, fraction_digits = 0;
  bool point = false;
  for (; i < s.size(); ++i) {
    char c = s[i];
    if (c == '.' && !point) {
      point = true;
      continue;
    }
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) break;
    if (++digits > 30) return bad("too many digits");
    numerator = numerator * 10 + static_cast<unsigned>(c - '0');
    if (point) ++fraction_digits;
  }
  if (digits == 0) return bad("no number");
  absl::string_view suffix = s.substr(i);
  u128 multiplier = 1;
  int exponent10 = -fraction_digits;
  static const std::pair<absl::string_view, int> kBinary[] = {{"Ki", 10}, {"Mi", 20}, {"Gi", 30},
                                                              {"Ti", 40}, {"Pi", 50}, {"Ei", 60}};
  static const std::pair<absl::string_view, int> kDecimal[] = {
      {"n", -9}, {"u", -6}, {"m", -3}, {"", 0},   {"k", 3},
      {"M", 6},  {"G", 9},  {"T", 12}, {"P", 15}, {"E", 18}};
  bool known = false;
  for (const auto& [name, shift] : kBinary) {
    if (suffix == name) {
      multiplier = u128{1} << shift;
      known = true;
    }
  }
  for (const auto& [name, power] : kDecimal) {
    if (suffix == name) {
      exponent10 += power;
      known = true;
    }
  }
  if (!known && suffix.size() >= 2 && (suffix[0] == 'e' || suffix[0] == 'E')) {
    absl::string_view e = suffix.substr(1);
    bool negative = false;
    if (e[0] == '+' || e[0] == '-') {
      negative = e[0] == '-';
      e.remove_prefix(1);
    }
    if (!e.empty() && e.size() <= 2 && std::all_of(e.begin(), e.end(), [](char c) {
          return absl::ascii_isdigit(static_cast<unsigned char>(c));
        })) {
      int v = 0;
      for (char c : e) v = v * 10 + (c - '0');
      exponent10 += negative ? -v : v;
      known = true;
    }
  }
  if (!known) {
    return bad(absl::StrCat("unknown suffix \"", suffix,
                            "\" (Ki, Mi, Gi, Ti, Pi, Ei, k, M, G, T, P, E or an exponent)"));
  }
  u128 value = numerator * multiplier;
  const u128 limit = ~uint64_t{0};
  if (multiplier != 0 && value / multiplier != numerator) return bad("too large");
  for (; exponent10 > 0; --exponent10) {
    if (value > limit) return bad("too large");
    value *= 10;
  }
  // value < 10^30 * 2^60 < 10^49 here only with a binary suffix, where exponent10 >= -30;
  // below 10^-38 (the largest power of ten a u128 holds) any value is a fraction of a byte.
  if (exponent10 < -38) return value == 0 ? uint64_t{0} : uint64_t{1};
  u128 divisor = 1;
  for (; exponent10 < 0; ++exponent10) divisor *= 10;
  value = value / divisor + (value % divisor != 0 ? 1 : 0);
  if (value > limit) return bad("too large");
  return static_cast<uint64_t>(value);
}

std::string ClaimSpecFileName(absl::string_view claim_uid) {
  return absl::StrCat("gpulet.dev-claim_", claim_uid, ".json");
}

std::string ClaimCdiDeviceName(absl::string_view claim_uid, absl::string_view device) {
  return absl::StrCat(claim_uid, "-", device);
}

KubeClaimPreparer::KubeClaimPreparer(kube::KubeClient* client,
                                     std::function<gpu::Inventory()> inventory, const HostFs* host,
                                     ClaimPreparerOptions options)
    : client_(client),
      inventory_(std::move(inventory)),
      host_(host),
      options_(std::move(options)) {}

std::string KubeClaimPreparer::SpecPath(absl::string_view claim_uid) const {
  return JoinPath(options_.cdi_dir, ClaimSpecFileName(claim_uid));
}

KubeClaimPreparer::NodeDevices KubeClaimPreparer::LoadNodeDevices() const {
  NodeDevices out;
  const gpu::Inventory inventory = inventory_();
  cdi::GeneratorOptions g = options_.generator;
  g.kind = kClaimCdiKind;
  g.names = cdi::NameStrategy::kIndex;
  g.all_device = false;
  absl::StatusOr<cdi::GeneratedSpec> generated = cdi::GenerateSpec(inventory, *host_, g);
  if (!generated.ok()) {
    out.status = generated.status();
    return out;
  }
  out.common = generated->spec.edits;
  out.warnings = generated->warnings;
  // The generator names a whole GPU by its index ("0") and a MIG device by "<index>:<MIG
  // index>"; the DRA names are resource_slices.h's.
  for (const gpu::Gpu& gpu : inventory.gpus) {
    if (!gpu.index || !gpu.in_nvml) continue;
    const ShareGpu parent{gpu.uuid, gpu.memory_total_bytes.value_or(0)};
    if (!gpu.mig_enabled) {
      if (const cdi::Device* d = generated->spec.FindDevice(absl::StrCat(*gpu.index))) {
        out.by_device[GpuDeviceName(gpu)] = *d;
        out.gpu_of[GpuDeviceName(gpu)] = parent;
      }
      continue;
    }
    for (const gpu::MigDeviceInfo& mig : gpu.mig_devices) {
      if (const cdi::Device* d =
              generated->spec.FindDevice(absl::StrCat(*gpu.index, ":", mig.index))) {
        out.by_device[MigDeviceName(gpu, mig)] = *d;
        out.gpu_of[MigDeviceName(gpu, mig)] = parent;
      }
    }
  }
  return out;
}

std::map<std::string, PrepareResult> KubeClaimPreparer::Prepare(
    const std::vector<ClaimRef>& claims) {
  std::map<std::string, PrepareResult> out;
  std::optional<NodeDevices> node;  // generated once per call, when a claim needs it
  for (const ClaimRef& ref : claims) out[ref.uid] = PrepareOne(ref, &node);
  return out;
}

PrepareResult KubeClaimPreparer::PrepareOne(const ClaimRef& ref, std::optional<NodeDevices>* node) {
  const std::string where = ClaimLabel(ref.ns, ref.name);
  auto fail = [](std::string message) {
    PrepareResult r;
    r.error = std::move(message);
    return r;
  };
  if (!SafePathSegment(ref.ns) || !SafePathSegment(ref.name)) {
    return fail(absl::StrCat(where, ": the namespace or name is not a valid object name"));
  }
  if (absl::Status st = cdi::ValidateDeviceName(ref.uid); !st.ok() || ref.uid.empty()) {
    return fail(absl::StrCat(where, ": UID \"", ref.uid,
                             "\" cannot name a CDI device (letters, digits, '-', '_', '.')"));
  }
  absl::StatusOr<json> claim = client_->Get(
      absl::StrCat("/apis/resource.k8s.io/v1/namespaces/", ref.ns, "/resourceclaims/", ref.name));
  if (!claim.ok()) {
    if (absl::IsNotFound(claim.status())) {
      return fail(absl::StrCat(where,
                               " does not exist in the API server (deleted?), so it cannot be "
                               "prepared. The kubelet retries; if the pod still needs it, "
                               "create the claim again (and then the pod, which names its UID)"));
    }
    return fail(absl::StrCat("cannot read ", where,
                             " from the API server: ", claim.status().message(),
                             ". The kubelet retries; check gpulet's access to resourceclaims "
                             "(RBAC get on resource.k8s.io resourceclaims)"));
  }
  std::string uid;
  if (claim->contains("metadata") && (*claim)["metadata"].is_object() &&
      (*claim)["metadata"].contains("uid") && (*claim)["metadata"]["uid"].is_string()) {
    uid = (*claim)["metadata"]["uid"];
  }
  if (uid != ref.uid) {
    return fail(absl::StrCat(where, " has UID ", uid.empty() ? "(none)" : uid,
                             " in the API server, not ", ref.uid,
                             " as the kubelet asked: the claim was deleted and created again "
                             "under the same name. Delete the pod so that it is created again "
                             "with the new claim"));
  }
  absl::StatusOr<std::vector<AllocatedDevice>> allocated =
      ParseAllocation(*claim, options_.driver, options_.node_name);
  if (!allocated.ok()) return fail(std::string(allocated.status().message()));

  if (!node->has_value()) *node = LoadNodeDevices();
  const NodeDevices& devices = **node;
  if (!devices.status.ok()) {
    return fail(absl::StrCat("cannot prepare ", where, ": ", devices.status.message()));
  }

  cdi::Spec spec;
  spec.kind = kClaimCdiKind;
  spec.edits = devices.common;
  spec.edits.env.push_back(absl::StrCat(kClaimEnv, "=", ref.ns, "/", ref.name));
  PrepareResult result;
  bool shared = false;
  uint64_t shared_bytes = 0;
  std::optional<ShareGpu> share_gpu;  // the GPU of the claim's memory shares, if only one
  for (const AllocatedDevice& d : *allocated) {
    auto found = devices.by_device.find(d.device);
    if (found == devices.by_device.end()) {
      std::string why = absl::StrCat(
          where, ": its allocation names device ", d.device, " of pool ", options_.node_name,
          ", which this node does not have now (a GPU gone or re-enumerated, MIG turned on or "
          "off, or a MIG device deleted since the scheduler allocated it). Delete the pod and "
          "the claim so that the scheduler allocates again");
      if (!devices.warnings.empty()) {
        absl::StrAppend(&why,
                        "; the CDI generator left out: ", absl::StrJoin(devices.warnings, " "));
      }
      return fail(std::move(why));
    }
    const bool share = d.memory_bytes.has_value() || !d.share_id.empty();
    if (d.config && d.config->strategy == SharingStrategy::kExclusive && share) {
      return fail(absl::StrCat(where, ": device ", d.device, " (request ", d.request,
                               ") is a memory share, but its GpuConfig asks for sharing "
                               "strategy Exclusive. Request the whole device, or use "
                               "TimeSlicing"));
    }
    if (d.config && d.config->interval != TimeSliceInterval::kDefault) {
      return fail(absl::StrCat(
          where, ": device ", d.device, " (request ", d.request,
          "): GpuConfig sharing.timeSlicingConfig.interval other than Default cannot be set: "
          "NVML offers no public call for a GPU's compute time slice (only nvidia-smi "
          "compute-policy --set-timeslice does it). Use interval Default, or set the time "
          "slice on the node with nvidia-smi"));
    }
    // Two results may name one device (two shares of one GPU for two requests): one CDI
    // device serves both.
    const std::string cdi_name = ClaimCdiDeviceName(ref.uid, d.device);
    if (spec.FindDevice(cdi_name) == nullptr) {
      cdi::Device device = found->second;
      device.name = cdi_name;
      spec.devices.push_back(std::move(device));
    }
    if (d.memory_bytes) {
      auto gpu_of = devices.gpu_of.find(d.device);
      const ShareGpu on = gpu_of != devices.gpu_of.end() ? gpu_of->second : ShareGpu{};
      if (!shared) share_gpu = on;
      if (share_gpu && share_gpu->uuid != on.uuid) share_gpu = ShareGpu{};  // two GPUs
      shared = true;
      shared_bytes += *d.memory_bytes;
    }
    PreparedDevice prepared;
    prepared.request_names = {d.request};
    prepared.pool = options_.node_name;
    prepared.device = d.device;
    prepared.cdi_device_ids = {absl::StrCat(kClaimCdiKind, "=", cdi_name)};
    prepared.share_id = d.share_id;
    result.devices.push_back(std::move(prepared));
  }
  if (shared) {
    spec.edits.env.push_back(absl::StrCat(kMemoryLimitEnv, "=", shared_bytes >> 20));
    if (options_.vram.enforce) {
      if (absl::Status st =
              PrepareSlice(ref, shared_bytes, share_gpu.value_or(ShareGpu{}), &spec.edits);
          !st.ok()) {
        return fail(absl::StrCat(where, ": ", st.message()));
      }
    }
  }
  absl::StatusOr<cdi::Version> version = cdi::ChooseVersion(spec, options_.generator.cdi_version);
  if (!version.ok()) return fail(absl::StrCat(where, ": ", version.status().message()));
  spec.version = version->ToString();
  if (absl::Status st = cdi::ValidateSpec(spec); !st.ok()) {
    return fail(absl::StrCat(where, ": its CDI spec is invalid (a gpulet bug): ", st.message()));
  }
  const std::string path = SpecPath(ref.uid);
  AtomicWriteOptions write;
  write.mode = 0644;
  write.create_parents = true;
  if (absl::Status st = WriteFileAtomically(path, cdi::ToJson(spec), write); !st.ok()) {
    return fail(absl::StrCat(where, ": ", st.message(),
                             ". The container runtime resolves the claim's devices from this "
                             "file: make the CDI directory writable for gpulet"));
  }
  return result;
}

std::string KubeClaimPreparer::SliceName(const std::string& uid) {
  return absl::StrCat("claim-", uid);
}

absl::Status KubeClaimPreparer::PrepareSlice(const ClaimRef& ref, uint64_t bytes,
                                             const ShareGpu& gpu,
                                             cdi::ContainerEdits* edits) const {
  const ClaimPreparerOptions::Vram& v = options_.vram;
  const char* off =
      "; the claim is refused rather than served without its VRAM limit "
      "(sharing.memorySlices.enforce: false serves memory shares as accounting only)";
  if (v.library.empty()) return absl::FailedPreconditionError(absl::StrCat(v.library_error, off));
  if (absl::Status s = vram::InstallLibrary(v.library, v.local_dir); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(s.message(), off));
  }
  const std::string name = SliceName(ref.uid);
  // The GPU's UUID lets gpulet's sampler count the holder as the driver does (and pace it);
  // shares spanning two GPUs are held by the library alone.
  const uint32_t share_permille = v.compute_share && !gpu.uuid.empty()
                                      ? vram::ComputeSharePermille(bytes, gpu.memory_bytes)
                                      : 0;
  if (absl::Status s =
          vram::WriteSliceFile(v.local_dir, name, bytes, gpu.uuid,
                               absl::StrCat("claim ", ref.ns, "/", ref.name), share_permille);
      !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(s.message(), off));
  }
  vram::ContainerEdits e = vram::EnforcementEdits(v.host_dir, name);
  for (const auto& [key, value] : e.env) edits->env.push_back(absl::StrCat(key, "=", value));
  for (const vram::ContainerEdits::Mount& m : e.mounts) {
    edits->mounts.push_back(
        cdi::Mount{m.host_path, m.container_path, "bind", {m.read_only ? "ro" : "rw", "rbind"}});
  }
  return absl::OkStatus();
}

std::map<std::string, std::string> KubeClaimPreparer::Unprepare(
    const std::vector<PreparedClaim>& claims) {
  std::map<std::string, std::string> out;
  for (const PreparedClaim& claim : claims) {
    const std::string& uid = claim.ref.uid;
    // Prepare never wrote a file for a UID that cannot name one.
    if (uid.empty() || !cdi::ValidateDeviceName(uid).ok()) {
      out[uid] = "";
      continue;
    }
    const std::string path = SpecPath(uid);
    if (unlink(path.c_str()) != 0 && errno != ENOENT) {
      out[uid] = absl::StrCat(ClaimLabel(claim.ref.ns, claim.ref.name), ": cannot remove ", path,
                              ": ", std::strerror(errno));
      continue;
    }
    if (options_.vram.enforce && !options_.vram.local_dir.empty()) {
      std::error_code ignored;  // none was written when the claim held no memory share
      std::filesystem::remove_all(JoinPath(options_.vram.local_dir, SliceName(uid)), ignored);
    }
    out[uid] = "";
  }
  return out;
}

}  // namespace gpulet::dra
