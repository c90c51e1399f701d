// libFuzzer target for the reader of a node's machine configuration (deploy/talos_migration.h,
// PlanKubeNodeMigration): the file comes from `talosctl get machineconfig` or the node's
// /system/state/config.yaml (gpulet doctor), so any bytes must give a plan or an
// InvalidArgument error that says something, never an exception, a crash or a hang; a plan's
// deletions and carried values must print as YAML that reads back.
//
// Built and run by scripts/fuzz.sh (the _fuzz.cc suffix keeps it out of the normal build).
//
// Thread-safety: libFuzzer calls LLVMFuzzerTestOneInput from one thread.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "deploy/manifests_yaml.h"
#include "deploy/talos_migration.h"
#include "node/talos_releases.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1 << 16)) return 0;  // callers cap the file at 4 MiB; keep runs fast
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<gpulet::deploy::KubeNodeMigration> plan =
      gpulet::deploy::PlanKubeNodeMigration(gpulet::node::NewestRelease(), text, "fuzz.yaml");
  if (!plan.ok()) {
    if (plan.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    if (plan.status().message().empty()) std::abort();
    return 0;
  }
  for (const YAML::Node& node : {plan->deletes, plan->carried}) {
    if (!node.IsMap()) continue;
    absl::StatusOr<std::vector<gpulet::deploy::YamlDocument>> back =
        gpulet::deploy::SplitYamlDocuments(gpulet::deploy::EmitYaml(node), "printed");
    if (!back.ok() || back->size() > 1) std::abort();
  }
  return 0;
}
