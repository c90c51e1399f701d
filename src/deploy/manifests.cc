#include "deploy/manifests.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "deploy/manifests_yaml.h"
#include "deploy/talos_migration.h"
#include "node/architecture.h"
#include "node/pci_ids.h"
#include "node/talos_releases.h"

namespace gpulet::deploy {
namespace {

// --- paths inside the manifest tree ---------------------------------------------------------

// Joins and normalises a relative path: "deploy/overlays/talos" + "../../base" ->
// "deploy/base". Returns "" when ".." would leave the tree.
std::string JoinRelative(const std::string& dir, absl::string_view rel) {
  std::vector<std::string> parts;
  for (absl::string_view p : absl::StrSplit(dir, '/', absl::SkipEmpty())) parts.emplace_back(p);
  for (absl::string_view p : absl::StrSplit(rel, '/', absl::SkipEmpty())) {
    if (p == ".") continue;
    if (p == "..") {
      if (parts.empty()) return "";
      parts.pop_back();
      continue;
    }
    parts.emplace_back(p);
  }
  return absl::StrJoin(parts, "/");
}

const std::string* FindFile(const ManifestFiles& files, const std::string& path) {
  auto it = files.find(path);
  return it == files.end() ? nullptr : &it->second;
}

// The kustomization file of `dir`, trying the names kustomize accepts.
const std::string* FindKustomization(const ManifestFiles& files, const std::string& dir,
                                     std::string* path) {
  for (const char* name : {"kustomization.yaml", "kustomization.yml", "Kustomization"}) {
    *path = absl::StrCat(dir, "/", name);
    if (const std::string* f = FindFile(files, *path)) return f;
  }
  return nullptr;
}

std::string ScalarAt(const YAML::Node& node, std::initializer_list<const char*> path) {
  YAML::Node cur = node;
  for (const char* key : path) {
    if (!cur.IsMap()) return "";
    YAML::Node next;
    bool found = false;
    for (const auto& kv : cur) {
      if (kv.first.Scalar() == key) {
        next = kv.second;
        found = true;
        break;
      }
    }
    if (!found) return "";
    cur.reset(next);
  }
  return cur.IsScalar() ? cur.Scalar() : "";
}

// --- image references -------------------------------------------------------------------------

struct ImageRef {
  std::string name;    // "registry.example.com:5000/gpulet"
  std::string tag;     // "0.1.0", or ""
  std::string digest;  // "sha256:...", or ""
};

ImageRef ParseImage(absl::string_view ref) {
  ImageRef out;
  size_t at = ref.find('@');
  if (at != absl::string_view::npos) {
    out.digest = std::string(ref.substr(at + 1));
    ref = ref.substr(0, at);
  }
  size_t slash = ref.rfind('/');
  size_t colon = ref.rfind(':');
  if (colon != absl::string_view::npos && (slash == absl::string_view::npos || colon > slash)) {
    out.tag = std::string(ref.substr(colon + 1));
    ref = ref.substr(0, colon);
  }
  out.name = std::string(ref);
  return out;
}

std::string FormatImage(const ImageRef& ref) {
  std::string out = ref.name;
  if (!ref.tag.empty()) absl::StrAppend(&out, ":", ref.tag);
  if (!ref.digest.empty()) absl::StrAppend(&out, "@", ref.digest);
  return out;
}

bool IsGpuletImageName(absl::string_view name) {
  return name == "gpulet" || absl::EndsWith(name, "/gpulet");
}

// Calls `fn(container)` for every map in a `containers` or `initContainers` list anywhere
// under `node` (Pods, workload templates, CronJob job templates alike).
template <typename Fn>
void ForEachContainer(YAML::Node node, Fn&& fn) {
  if (node.IsMap()) {
    for (auto kv : node) {
      const std::string& key = kv.first.Scalar();
      if ((key == "containers" || key == "initContainers") && kv.second.IsSequence()) {
        for (size_t i = 0; i < kv.second.size(); ++i) {
          YAML::Node c = kv.second[i];
          if (c.IsMap()) fn(c);
        }
      } else {
        ForEachContainer(kv.second, fn);
      }
    }
  } else if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) ForEachContainer(node[i], fn);
  }
}

// Replaces `from` by `to` as the value of `image:` lines in a document's text, so that an
// image change keeps the document's comments. Returns false when the result does not parse
// to `expected` (then the caller emits the node instead).
bool RewriteImageText(std::string* text, const std::string& from, const std::string& to,
                      const YAML::Node& expected) {
  std::vector<std::string> lines = absl::StrSplit(*text, '\n');
  bool changed = false;
  for (std::string& line : lines) {
    absl::string_view rest = absl::StripLeadingAsciiWhitespace(line);
    absl::ConsumePrefix(&rest, "- ");
    rest = absl::StripLeadingAsciiWhitespace(rest);
    if (!absl::ConsumePrefix(&rest, "image:")) continue;
    absl::string_view value = absl::StripAsciiWhitespace(rest);
    std::string unquoted(value);
    if (unquoted.size() >= 2 && (unquoted.front() == '"' || unquoted.front() == '\'') &&
        unquoted.back() == unquoted.front()) {
      unquoted = unquoted.substr(1, unquoted.size() - 2);
    }
    if (unquoted != from) continue;
    size_t pos = line.rfind(std::string(value));
    line = absl::StrCat(line.substr(0, pos), "\"", to, "\"");
    changed = true;
  }
  if (!changed) return false;
  std::string rewritten = absl::StrJoin(lines, "\n");
  try {
    if (!YamlEqual(YAML::Load(rewritten), expected)) return false;
  } catch (const YAML::Exception&) {
    return false;
  }
  *text = std::move(rewritten);
  return true;
}

// Sets the image of matching containers of `obj`; keeps its text when it can.
void SetImages(
    KubeObject& obj,
    const std::function<std::string(const std::string& container, const std::string& image)>& map) {
  std::vector<std::pair<std::string, std::string>> changes;
  ForEachContainer(obj.node, [&](YAML::Node c) {
    std::string image = ScalarAt(c, {"image"});
    if (image.empty()) return;
    std::string updated = map(ScalarAt(c, {"name"}), image);
    if (updated == image) return;
    c["image"] = QuotedScalar(updated);
    changes.emplace_back(image, updated);
  });
  if (changes.empty() || obj.modified) {
    if (!changes.empty()) obj.modified = true;
    return;
  }
  for (const auto& [from, to] : changes) {
    if (!RewriteImageText(&obj.text, from, to, obj.node)) {
      obj.modified = true;
      return;
    }
  }
}

// --- kustomization rendering ----------------------------------------------------------------

// kustomize's "legacy" order: these kinds first, in this order, the webhook configurations
// last, everything else in between.
int KindRank(const std::string& kind) {
  static const char* const kFirst[] = {"Namespace",
                                       "ResourceQuota",
                                       "StorageClass",
                                       "CustomResourceDefinition",
                                       "ServiceAccount",
                                       "PodSecurityPolicy",
                                       "Role",
                                       "ClusterRole",
                                       "RoleBinding",
                                       "ClusterRoleBinding",
                                       "ConfigMap",
                                       "Secret",
                                       "Endpoints",
                                       "Service",
                                       "LimitRange",
                                       "PriorityClass",
                                       "PersistentVolume",
                                       "PersistentVolumeClaim",
                                       "Deployment",
                                       "StatefulSet",
                                       "CronJob",
                                       "PodDisruptionBudget"};
  static const char* const kLast[] = {"MutatingWebhookConfiguration",
                                      "ValidatingWebhookConfiguration"};
  int rank = 0;
  for (const char* k : kFirst) {
    if (kind == k) return rank;
    ++rank;
  }
  int last_base = rank + 1;
  for (const char* k : kLast) {
    if (kind == k) return last_base + 1;
    ++last_base;
  }
  return rank;  // between the two groups
}

absl::StatusOr<std::vector<KubeObject>> LoadObjects(const std::string& path,
                                                    const std::string& text) {
  absl::StatusOr<std::vector<YamlDocument>> docs = SplitYamlDocuments(text, path);
  if (!docs.ok()) return docs.status();
  std::vector<KubeObject> out;
  for (YamlDocument& d : *docs) {
    KubeObject obj;
    obj.file = path;
    obj.line = d.first_line;
    obj.node = d.node;
    obj.text = std::move(d.text);
    if (!obj.node.IsMap() || obj.Kind().empty() || obj.ApiVersion().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ":", obj.line, ": not a Kubernetes object (apiVersion and kind are required)"));
    }
    out.push_back(std::move(obj));
  }
  return out;
}

absl::Status ApplyPatchFile(std::vector<KubeObject>& objects, const std::string& patch_path,
                            const std::string& text, const std::string& kustomization) {
  absl::StatusOr<std::vector<KubeObject>> patches = LoadObjects(patch_path, text);
  if (!patches.ok()) return patches.status();
  for (const KubeObject& patch : *patches) {
    std::string where = absl::StrCat(patch_path, ":", patch.line);
    bool applied = false;
    for (KubeObject& obj : objects) {
      if (obj.Kind() != patch.Kind() || obj.Name() != patch.Name()) continue;
      if (!patch.Namespace().empty() && obj.Namespace() != patch.Namespace()) continue;
      absl::Status s = StrategicMerge(obj.node, patch.node, where);
      if (!s.ok()) return s;
      obj.modified = true;
      applied = true;
    }
    if (!applied) {
      return absl::NotFoundError(absl::StrCat(
          where, ": this patch targets ", patch.Kind(), " ",
          patch.Namespace().empty() ? "" : absl::StrCat(patch.Namespace(), "/"), patch.Name(),
          ", which the resources of ", kustomization, " do not contain"));
    }
  }
  return absl::OkStatus();
}

// Renders the kustomization (or, with `component`, the kustomize Component) in `dir`. A
// Component transforms what the kustomization including it has so far: `inherited` is that,
// and its resources are added to it before its patches and images apply to the whole.
absl::StatusOr<std::vector<KubeObject>> RenderDir(const ManifestFiles& files,
                                                  const std::string& dir,
                                                  std::vector<std::string>& stack,
                                                  std::vector<KubeObject> inherited = {},
                                                  bool component = false) {
  std::string kpath;
  const std::string* ktext = FindKustomization(files, dir, &kpath);
  if (ktext == nullptr) {
    return absl::NotFoundError(absl::StrCat("no kustomization.yaml in ", dir));
  }
  if (std::find(stack.begin(), stack.end(), dir) != stack.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        kpath, ": resources form a cycle: ", absl::StrJoin(stack, " -> "), " -> ", dir));
  }
  stack.push_back(dir);
  absl::StatusOr<std::vector<YamlDocument>> docs = SplitYamlDocuments(*ktext, kpath);
  if (!docs.ok()) return docs.status();
  if (docs->size() != 1 || !(*docs)[0].node.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kpath, ": a kustomization must be exactly one YAML mapping"));
  }
  const YAML::Node& k = (*docs)[0].node;
  static const std::set<std::string> kSupported = {"apiVersion", "kind",    "resources",
                                                   "components", "patches", "patchesStrategicMerge",
                                                   "images"};
  // kustomize keeps the two kinds apart: a Component only under `components:`, a
  // Kustomization never there.
  const std::string kind = ScalarAt(k, {"kind"});
  if (component && kind != "Component") {
    return absl::InvalidArgumentError(absl::StrCat(
        kpath, ": listed under components, but its kind is '",
        kind.empty() ? "Kustomization" : kind,
        "'; a component's kustomization.yaml says apiVersion: kustomize.config.k8s.io/v1alpha1, "
        "kind: Component"));
  }
  if (!component && kind == "Component") {
    return absl::InvalidArgumentError(
        absl::StrCat(kpath,
                     ": a Component renders only as part of a kustomization that lists it under "
                     "components:, not on its own or under resources:"));
  }
  for (const auto& kv : k) {
    if (kSupported.count(kv.first.Scalar()) == 0) {
      return absl::UnimplementedError(absl::StrCat(
          kpath, ": the kustomization field '", kv.first.Scalar(),
          "' is not supported by gpulet manifests (it handles: ", absl::StrJoin(kSupported, ", "),
          "); render this overlay with kubectl kustomize"));
    }
  }

  std::vector<KubeObject> objects = std::move(inherited);
  for (const auto& r : k["resources"]) {
    std::string rel = r.Scalar();
    std::string path = JoinRelative(dir, rel);
    if (const std::string* text = FindFile(files, path)) {
      absl::StatusOr<std::vector<KubeObject>> loaded = LoadObjects(path, *text);
      if (!loaded.ok()) return loaded.status();
      for (KubeObject& o : *loaded) objects.push_back(std::move(o));
      continue;
    }
    std::string sub_kpath;
    if (!path.empty() && FindKustomization(files, path, &sub_kpath) != nullptr) {
      // kustomize refuses a directory that contains one it is already rendering (a parent
      // directory, typically): do the same, so what renders here renders with kubectl.
      for (const std::string& visiting : stack) {
        if (absl::StartsWith(visiting, path + "/")) {
          return absl::InvalidArgumentError(
              absl::StrCat(kpath, ": resource '", rel, "' is the directory ", path,
                           ", which contains ", visiting,
                           " being rendered; kustomize rejects this as a cycle. Move the shared "
                           "resources into a sibling directory"));
        }
      }
      absl::StatusOr<std::vector<KubeObject>> sub = RenderDir(files, path, stack);
      if (!sub.ok()) return sub.status();
      for (KubeObject& o : *sub) objects.push_back(std::move(o));
      continue;
    }
    return absl::NotFoundError(absl::StrCat(kpath, ": resource '", rel, "' not found (no file ",
                                            path, " and no ", path, "/kustomization.yaml)"));
  }
  for (const auto& c : k["components"]) {
    std::string rel = c.Scalar();
    std::string path = JoinRelative(dir, rel);
    std::string sub_kpath;
    if (path.empty() || FindKustomization(files, path, &sub_kpath) == nullptr) {
      return absl::NotFoundError(absl::StrCat(kpath, ": component '", rel, "' not found (no ", path,
                                              "/kustomization.yaml)"));
    }
    absl::StatusOr<std::vector<KubeObject>> with =
        RenderDir(files, path, stack, std::move(objects), /*component=*/true);
    if (!with.ok()) return with.status();
    objects = std::move(*with);
  }

  std::vector<std::string> patch_paths;
  for (const auto& p : k["patches"]) {
    if (p.IsScalar()) {
      patch_paths.push_back(p.Scalar());
      continue;
    }
    for (const auto& kv : p) {
      if (kv.first.Scalar() != "path") {
        return absl::UnimplementedError(
            absl::StrCat(kpath, ": patches with '", kv.first.Scalar(),
                         "' are not supported by gpulet manifests; use `- path: FILE` with a "
                         "strategic-merge patch that names its target's kind and name"));
      }
    }
    patch_paths.push_back(p["path"].Scalar());
  }
  for (const auto& p : k["patchesStrategicMerge"]) patch_paths.push_back(p.Scalar());
  for (const std::string& rel : patch_paths) {
    std::string path = JoinRelative(dir, rel);
    const std::string* text = FindFile(files, path);
    if (text == nullptr) {
      return absl::NotFoundError(absl::StrCat(kpath, ": patch file '", rel, "' not found"));
    }
    absl::Status s = ApplyPatchFile(objects, path, *text, dir);
    if (!s.ok()) return s;
  }

  for (const auto& img : k["images"]) {
    std::string name = img["name"] ? img["name"].Scalar() : "";
    if (name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(kpath, ": every entry of images needs a name"));
    }
    std::string new_name = img["newName"] ? img["newName"].Scalar() : "";
    std::string new_tag = img["newTag"] ? img["newTag"].Scalar() : "";
    std::string digest = img["digest"] ? img["digest"].Scalar() : "";
    for (KubeObject& obj : objects) {
      SetImages(obj, [&](const std::string&, const std::string& image) {
        ImageRef ref = ParseImage(image);
        if (ref.name != name) return image;
        if (!new_name.empty()) ref.name = new_name;
        if (!new_tag.empty()) ref.tag = new_tag;
        if (!digest.empty()) {
          ref.tag.clear();
          ref.digest = digest;
        }
        return FormatImage(ref);
      });
    }
  }
  stack.pop_back();
  return objects;
}

// --- os-release and Talos --------------------------------------------------------------------

std::string GpuWords(const node::PciGpu& g) {
  std::string name =
      g.product.empty() ? absl::StrCat("GPU 10de:", absl::Hex(g.device_id)) : g.product;
  return absl::StrCat(name, " (", node::ArchitectureName(g.architecture),
                      g.architecture_guessed ? ", probably" : "", ") at ", g.bus_id);
}

// The machine patch's pieces, read from the embedded file.
struct MachinePatchParts {
  std::vector<std::string> modules;
  std::vector<std::pair<std::string, std::string>> kubelet_args;
  std::vector<std::pair<std::string, std::string>> node_labels;
};

absl::StatusOr<MachinePatchParts> ReadMachinePatch(const std::string& text) {
  absl::StatusOr<std::vector<YamlDocument>> docs = SplitYamlDocuments(text, kTalosMachinePatchPath);
  if (!docs.ok()) return docs.status();
  if (docs->size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(kTalosMachinePatchPath, ": expected one document with a machine: key"));
  }
  const YAML::Node& root = (*docs)[0].node;
  MachinePatchParts parts;
  const YAML::Node machine = root["machine"];
  if (!machine || !machine["kernel"] || !machine["kernel"]["modules"]) {
    return absl::InvalidArgumentError(
        absl::StrCat(kTalosMachinePatchPath, ": machine.kernel.modules is missing"));
  }
  for (const auto& m : machine["kernel"]["modules"]) parts.modules.push_back(m["name"].Scalar());
  if (machine["kubelet"] && machine["kubelet"]["extraArgs"]) {
    for (const auto& kv : machine["kubelet"]["extraArgs"]) {
      parts.kubelet_args.emplace_back(kv.first.Scalar(), kv.second.Scalar());
    }
  }
  if (machine["nodeLabels"]) {
    for (const auto& kv : machine["nodeLabels"]) {
      parts.node_labels.emplace_back(kv.first.Scalar(), kv.second.Scalar());
    }
  }
  return parts;
}

std::string ExtensionComment(const TalosExtensions& ext) {
  std::string out =
      "# System extensions this node needs (in its Image Factory schematic:\n"
      "# `gpulet manifests --talos-schematic`):\n";
  for (const std::string& n : ext.names) absl::StrAppend(&out, "#   siderolabs/", n, "\n");
  for (const std::string& r : ext.reasons) absl::StrAppend(&out, "# ", r, "\n");
  return out;
}

}  // namespace

// --- public -----------------------------------------------------------------------------------

ManifestFiles EmbeddedManifestFiles() {
  ManifestFiles out;
  for (const EmbeddedFile& f : EmbeddedDeployFiles()) out[f.path] = f.content;
  return out;
}

absl::StatusOr<ManifestFiles> ReadManifestFiles(const std::string& source_dir) {
  namespace fs = std::filesystem;
  fs::path root = fs::path(source_dir) / "deploy";
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return absl::NotFoundError(absl::StrCat(root.string(), " is not a directory"));
  }
  ManifestFiles out;
  for (auto it = fs::recursive_directory_iterator(root, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    std::string ext = it->path().extension().string();
    if (ext != ".yaml" && ext != ".yml") continue;
    std::ifstream in(it->path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    if (!in) {
      return absl::PermissionDeniedError(absl::StrCat("cannot read ", it->path().string()));
    }
    out[fs::relative(it->path(), source_dir).generic_string()] = ss.str();
  }
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot list ", root.string(), ": ", ec.message()));
  }
  return out;
}

std::string DefaultGpuletImage() { return absl::StrCat("gpulet:", GPULET_VERSION); }

KubeObject& KubeObject::operator=(const KubeObject& other) {
  if (this == &other) return *this;
  file = other.file;
  line = other.line;
  node.reset(other.node);
  text = other.text;
  modified = other.modified;
  return *this;
}

std::string KubeObject::ApiVersion() const { return ScalarAt(node, {"apiVersion"}); }
std::string KubeObject::Kind() const { return ScalarAt(node, {"kind"}); }
std::string KubeObject::Name() const { return ScalarAt(node, {"metadata", "name"}); }
std::string KubeObject::Namespace() const { return ScalarAt(node, {"metadata", "namespace"}); }

absl::StatusOr<std::vector<KubeObject>> RenderKustomization(const ManifestFiles& files,
                                                            const std::string& dir,
                                                            const RenderOptions& options) {
  std::vector<std::string> stack;
  std::string clean = JoinRelative("", dir);
  absl::StatusOr<std::vector<KubeObject>> objects = RenderDir(files, clean, stack);
  if (!objects.ok()) return objects.status();
  // kustomize's legacy order: kind rank, then kind, name and namespace.
  std::stable_sort(objects->begin(), objects->end(), [](const KubeObject& a, const KubeObject& b) {
    int ra = KindRank(a.Kind()), rb = KindRank(b.Kind());
    if (ra != rb) return ra < rb;
    return std::make_tuple(a.Kind(), a.Name(), a.Namespace()) <
           std::make_tuple(b.Kind(), b.Name(), b.Namespace());
  });
  if (!options.image.empty()) {
    for (KubeObject& obj : *objects) {
      SetImages(obj, [&](const std::string& container, const std::string& image) {
        if (container == "gpulet" || IsGpuletImageName(ParseImage(image).name)) {
          return options.image;
        }
        return image;
      });
    }
  }
  return objects;
}

std::string FormatObjects(const std::vector<KubeObject>& objects) {
  std::string out;
  for (const KubeObject& obj : objects) {
    out += "---\n";
    if (obj.modified) {
      absl::StrAppend(&out, "# From ", obj.file,
                      " with the overlay's patches applied (the comments are in that file).\n",
                      EmitYaml(obj.node));
    } else {
      out += obj.text;
      if (!absl::EndsWith(obj.text, "\n")) out += "\n";
    }
  }
  return out;
}

// The release row for `version`; the newest when unknown. `warning` is set for a release
// newer than the table.
static absl::StatusOr<const node::Release*> TalosReleaseFor(
    const std::optional<node::TalosVersion>& version, std::string* warning) {
  if (!version) return &node::NewestRelease();
  absl::StatusOr<node::Match> m = node::FindRelease(version->major, version->minor);
  if (!m.ok()) return m.status();
  if (warning != nullptr) *warning = m->warning;
  return m->release;
}

absl::StatusOr<TalosExtensions> ChooseTalosExtensions(
    const node::NodeFacts& facts, const std::optional<node::TalosVersion>& version,
    DriverBranch branch) {
  TalosExtensions ext;
  std::string warning;
  absl::StatusOr<const node::Release*> release = TalosReleaseFor(version, &warning);
  if (!release.ok()) return release.status();
  bool lts = branch == DriverBranch::kLts;
  auto name = [&](absl::string_view base) { return node::ExtensionName(**release, base, lts); };

  const node::PciGpu* needs_open = nullptr;
  const node::PciGpu* needs_proprietary = nullptr;
  for (const node::PciGpu& g : facts.gpus) {
    if (g.module_flavor == node::ModuleFlavor::kOpenRequired && needs_open == nullptr)
      needs_open = &g;
    if (g.module_flavor == node::ModuleFlavor::kProprietaryRequired &&
        needs_proprietary == nullptr) {
      needs_proprietary = &g;
    }
  }
  if (needs_open != nullptr && needs_proprietary != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this node's GPUs need different kernel modules: ", GpuWords(*needs_open),
        " runs only with the open modules, ", GpuWords(*needs_proprietary),
        " only with the proprietary ones. One driver cannot serve both; put the cards in "
        "different nodes"));
  }
  bool open = true;
  if (needs_open != nullptr) {
    ext.reasons.push_back(
        absl::StrCat(GpuWords(*needs_open), ": only the open kernel modules support it."));
  } else if (needs_proprietary != nullptr) {
    open = false;
    ext.reasons.push_back(absl::StrCat(GpuWords(*needs_proprietary),
                                       ": predates Turing, so only the proprietary modules "
                                       "support it (the open ones need its GSP)."));
  } else if (facts.driver.flavor == node::DriverFlavor::kProprietary) {
    open = false;
    ext.reasons.push_back(
        "The node runs the proprietary modules now and its GPUs work with either; kept.");
  } else if (facts.gpus.empty()) {
    ext.reasons.push_back(
        "No GPU inspected: the open modules, NVIDIA's default since the 560 drivers (they "
        "need Turing or newer; Maxwell, Pascal and Volta need nonfree-kmod-nvidia).");
  } else {
    ext.reasons.push_back(
        "The GPUs work with either module flavour: the open modules, NVIDIA's default since "
        "the 560 drivers.");
  }
  ext.names.push_back(open ? name("nvidia-open-gpu-kernel-modules") : name("nonfree-kmod-nvidia"));
  ext.names.push_back(name("nvidia-container-toolkit"));
  if (facts.nvswitch_count > 0) {
    ext.names.push_back(name("nvidia-fabricmanager"));
    ext.reasons.push_back(
        absl::StrCat(facts.nvswitch_count,
                     " NVSwitch(es) on the PCI bus: Fabric Manager must run before "
                     "the GPUs can take CUDA work."));
  }
  if (!(*release)->suffixed_extension_names.value) {
    ext.reasons.push_back(
        absl::StrCat((*release)->Name(), " predates the -production/-lts extension names."));
  } else {
    ext.reasons.push_back(absl::StrCat("All from the ", lts ? "lts" : "production",
                                       " branch: the modules' and the toolkit's driver versions "
                                       "must match."));
  }
  if (!warning.empty()) ext.reasons.push_back(absl::StrCat("Warning: ", warning));
  return ext;
}

std::string RenderTalosSchematic(const TalosExtensions& ext) {
  std::string out =
      "# Talos Image Factory schematic for this GPU node (rendered by gpulet manifests).\n"
      "#   curl -X POST --data-binary @schematic.yaml https://factory.talos.dev/schematics\n"
      "# then install or upgrade with factory.talos.dev/installer/<id>:<talos version>.\n";
  for (const std::string& r : ext.reasons) absl::StrAppend(&out, "# ", r, "\n");
  out += "customization:\n  systemExtensions:\n    officialExtensions:\n";
  for (const std::string& n : ext.names) absl::StrAppend(&out, "      - siderolabs/", n, "\n");
  return out;
}

absl::StatusOr<std::string> RenderTalosMachinePatch(
    const ManifestFiles& files, const std::optional<node::TalosVersion>& version,
    const TalosExtensions& extensions, const TalosCurrentConfig* current) {
  const std::string* text = FindFile(files, kTalosMachinePatchPath);
  if (text == nullptr) {
    return absl::NotFoundError(absl::StrCat(kTalosMachinePatchPath, " is not in the manifests"));
  }
  absl::StatusOr<MachinePatchParts> parts = ReadMachinePatch(*text);
  if (!parts.ok()) return parts.status();
  std::string header = ExtensionComment(extensions);
  // A release newer than the table is rendered as the newest row; `extensions` (chosen for
  // the same version) already carries the warning in its reasons.
  absl::StatusOr<const node::Release*> found = TalosReleaseFor(version, nullptr);
  if (!found.ok()) return found.status();
  const node::Release& release = **found;

  if (version && release.KernelModuleDocuments()) {
    // Talos 1.14 moved these settings into documents of their own and refuses a
    // KubeNodeConfig next to .machine.nodeLabels / .machine.nodeTaints / .machine.kubelet.nodeIP
    // (and more: the release row's conflicts), and a KubeletConfig next to any
    // .machine.kubelet. KubeNodeConfig (labels, taints) fits a node generated by 1.14 as it is;
    // a node upgraded from 1.13 that still has those fields (gpulet's own earlier patch sets
    // .machine.nodeLabels) takes it only with them moved, which needs its configuration
    // (`current`). Its taints become the kubelet's registerWithTaints, so no KubeletConfig
    // (which would also need the kubelet image) is written.
    KubeNodeMigration migration;
    if (current != nullptr) {
      absl::StatusOr<KubeNodeMigration> plan =
          PlanKubeNodeMigration(release, current->text, current->origin);
      if (!plan.ok()) return plan.status();
      migration = std::move(*plan);
    }
    std::string out =
        absl::StrCat("# Talos machine-configuration patch for a GPU node, ", release.Name(),
                     " form\n# (rendered by gpulet manifests from ", kTalosMachinePatchPath,
                     ", which explains each setting).\n"
                     "#   talosctl -n <node> patch machineconfig --patch @gpu-node-patch.yaml\n",
                     header);
    if (current == nullptr) {
      const FitPatchCommands fit = FitPatchCommandsFor(version->ToString());
      out += absl::StrCat(
          "# For a node installed with ", release.Name(),
          ". A node upgraded from an earlier release refuses it while its v1alpha1\n"
          "# document still sets .machine.nodeLabels (gpulet's earlier patch does), "
          ".machine.nodeTaints or\n# .machine.kubelet.nodeIP: render it for that node with\n"
          "#   ",
          fit.get, "\n#   ", fit.render, "\n");
    } else {
      out += absl::StrCat("# Fitted to the machine configuration in ", current->origin, ".\n");
    }
    bool first = true;
    auto doc = [&](const std::string& body) {
      if (!first) out += "---\n";
      first = false;
      out += body;
    };
    if (migration.deletes.IsMap()) {
      doc(absl::StrCat("# ", release.Name(),
                       " refuses a KubeNodeConfig while these are set here; their values move "
                       "into it (below):\n#   .",
                       absl::StrJoin(migration.moved, ", ."), "\n", EmitYaml(migration.deletes)));
    }
    for (const std::string& m : parts->modules) {
      doc(absl::StrCat("apiVersion: v1alpha1\nkind: KernelModuleConfig\nname: ", m, "\n"));
    }
    YAML::Node nc;
    nc["apiVersion"] = "v1alpha1";
    nc["kind"] = "KubeNodeConfig";
    // The node's own settings first, then gpulet's label and taint (which win on their keys).
    for (const auto& kv : migration.carried) nc[kv.first.Scalar()] = kv.second;
    for (const auto& [k, v] : parts->node_labels) nc["labels"][k] = QuotedScalar(v);
    for (const auto& [k, v] : parts->kubelet_args) {
      if (k != "register-with-taints") {
        return absl::InvalidArgumentError(absl::StrCat(
            kTalosMachinePatchPath, ": machine.kubelet.extraArgs.", k, " has no place in the ",
            release.Name(), " documents gpulet writes; only register-with-taints does"));
      }
      for (absl::string_view taint : absl::StrSplit(v, ',', absl::SkipEmpty())) {
        // key=value:Effect -> taints[key] = "value:Effect" (KubeNodeConfig's form).
        size_t eq = taint.find('=');
        if (eq == absl::string_view::npos || eq == 0 ||
            taint.find(':', eq) == absl::string_view::npos) {
          return absl::InvalidArgumentError(absl::StrCat(kTalosMachinePatchPath,
                                                         ": register-with-taints entry '", taint,
                                                         "' is not key=value:Effect"));
        }
        std::string key(taint.substr(0, eq));
        std::string value(taint.substr(eq + 1));
        nc["taints"][key] = QuotedScalar(value);
      }
    }
    if (nc.size() > 2) {
      doc(absl::StrCat(
          "# The GPU label gpulet's DaemonSet selects, and the GPU taint: ", release.Name(),
          " gives KubeNodeConfig taints to the kubelet\n"
          "# to set when the node registers (an existing node: kubectl taint it "
          "once).\n",
          EmitYaml(nc)));
    }
    return out;
  }

  std::string body = *text;
  if (version && release.needs_bpf_jit_harden_1.value) {
    // Legacy runtime mode: uncomment the sysctl the file carries for exactly this case.
    static constexpr char kCommented[] = "  # sysctls:\n  #   net.core.bpf_jit_harden: \"1\"\n";
    static constexpr char kActive[] = "  sysctls:\n    net.core.bpf_jit_harden: \"1\"\n";
    size_t at = body.find(kCommented);
    if (at == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          kTalosMachinePatchPath, ": the commented net.core.bpf_jit_harden sysctl that ",
          release.Name(), " needs is missing; restore it"));
    }
    body.replace(at, sizeof(kCommented) - 1, kActive);
  }
  std::string note = version ? absl::StrCat("# Rendered by gpulet manifests for Talos ",
                                            version->ToString(), ".\n")
                             : absl::StrCat(
                                   "# Rendered by gpulet manifests; Talos version unknown "
                                   "(pass --talos-version): the Talos 1.13 form.\n");
  return absl::StrCat(note, header, body);
}

absl::StatusOr<std::string> RenderTalosRegistryMirrorPatch(absl::string_view host_port,
                                                           absl::string_view flag) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " '", host_port, "': ", why,
        "; give the address the nodes reach this machine at, as HOST:PORT (192.168.1.10:5000)"));
  };
  size_t colon = host_port.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) return bad("no HOST:PORT");
  absl::string_view host = host_port.substr(0, colon);
  int port = 0;
  if (!absl::SimpleAtoi(host_port.substr(colon + 1), &port) || port < 1 || port > 65535) {
    return bad("the port is not 1 to 65535");
  }
  const bool bracketed = host.size() > 2 && host.front() == '[' && host.back() == ']';
  absl::string_view bare = bracketed ? host.substr(1, host.size() - 2) : host;
  for (char c : bare) {
    const bool ok = absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' ||
                    (bracketed && c == ':');
    if (!ok) return bad(absl::StrCat("the host has a '", std::string(1, c), "'"));
  }
  if (!bracketed && (bare.front() == '-' || bare.front() == '.')) return bad("not a host name");
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "machine" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "registries" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "mirrors" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << std::string(host_port) << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "endpoints" << YAML::Value << YAML::BeginSeq
      << absl::StrCat("http://", host_port) << YAML::EndSeq;
  out << YAML::EndMap << YAML::EndMap << YAML::EndMap << YAML::EndMap << YAML::EndMap;
  return absl::StrCat(
      "# Talos: pull the images of ", host_port, " from http://", host_port,
      " (gpulet image-serve).\n"
      "# Plain HTTP: pods pin gpulet's image by digest, and containerd checks every byte\n"
      "# against it. Apply once per node: talosctl patch machineconfig --nodes NODE --patch "
      "@FILE\n",
      out.c_str(), "\n");
}

}  // namespace gpulet::deploy
