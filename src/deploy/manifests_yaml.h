// YAML mechanics behind `gpulet manifests`: splitting multi-document files while keeping each
// document's source text (comments included), a block-style emitter whose output kubectl
// reads back to the same values, and the subset of Kubernetes strategic-merge patching that
// the kustomize overlays in deploy/ use.
//
// Why not yaml-cpp's own emitter: it drops the difference between `"true"` (a string, which a
// label value or an env value must be) and `true` (a boolean), and kubectl rejects a Namespace
// whose label is a boolean. This emitter keeps every scalar that was quoted in the source
// quoted, and emits the rest as they were written.
//
// Why not all of kustomize: gpulet renders its own overlays only, and a feature it does not
// implement must fail loudly rather than render something kubectl would not; the test
// deploy_manifests_test.cc renders every kustomization under deploy/ to keep that true.
//
// Thread-safety: pure functions; yaml-cpp nodes passed in are not shared across threads.
#ifndef GPULET_DEPLOY_MANIFESTS_YAML_H_
#define GPULET_DEPLOY_MANIFESTS_YAML_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "yaml-cpp/yaml.h"

namespace gpulet::deploy {

// One document of a multi-document YAML file.
struct YamlDocument {
  std::string text;    // the source text, without its "---" line; comments kept
  int first_line = 1;  // 1-based line of `text` in the file
  YAML::Node node;     // the parsed document (never null: empty documents are dropped)
};

// Splits `text` at lines that start with "---" and parses each part. Parts holding only
// comments and blank lines are dropped. Errors: InvalidArgument naming "origin:line" and
// yaml-cpp's complaint.
absl::StatusOr<std::vector<YamlDocument>> SplitYamlDocuments(absl::string_view text,
                                                             absl::string_view origin);

// Block-style YAML for `node`, ending in a newline. Scalars quoted in the source (yaml-cpp
// tag "!") and scalars made by QuotedScalar are double-quoted; multi-line strings become
// literal blocks ("|"); maps keep their order.
std::string EmitYaml(const YAML::Node& node);

// A string scalar that EmitYaml will quote ("true" stays a string).
YAML::Node QuotedScalar(absl::string_view value);

// Structural equality: same types, same scalars (text), maps with the same keys and equal
// values (in any order), sequences element by element.
bool YamlEqual(const YAML::Node& a, const YAML::Node& b);

// The node under `keys` from `root` (map keys, one per level), or an undefined node when a
// key is missing or a level is not a map. Unlike chained operator[], it never throws on a
// missing intermediate key and never adds keys.
YAML::Node NodeAtPath(const YAML::Node& root, const std::vector<std::string>& keys);

// Applies a strategic-merge patch to `target` in place, as kubectl/kustomize would for the
// fields it knows:
//   - maps merge key by key; a null value deletes the key;
//   - lists with a merge key are merged element by element: containers, initContainers,
//     env, volumes, imagePullSecrets by `name`, volumeMounts by `mountPath`, ports by
//     `containerPort` (or `port`), volumeDevices by `devicePath`, with the patch's items
//     first (as Kubernetes orders them), then the original items it did not name; other
//     lists are replaced.
// `$patch` and other directives are refused (Unimplemented, naming `origin`).
absl::Status StrategicMerge(YAML::Node target, const YAML::Node& patch, absl::string_view origin);

}  // namespace gpulet::deploy

#endif  // GPULET_DEPLOY_MANIFESTS_YAML_H_
