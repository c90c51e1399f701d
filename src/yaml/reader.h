// The one strict reader of the YAML documents gpulet reads: its configuration, the metrics
// web config, kubeconfigs, and the like. Hand-edited text must give a clear error that says
// where, never a silent default.
//
// Load(text, origin) parses one document and never throws: yaml-cpp's exceptions (bad
// syntax, nesting too deep) become errors with the line, and text over `max_bytes` is refused
// before it is parsed.
//
// Map reads one mapping by key. Check() refuses what yaml-cpp takes silently: a key given
// twice (yaml-cpp keeps both and a lookup finds the first, so the later line does nothing),
// and a key that is not a plain name. Its reads name the field's path ("tls_server_config.
// cert_file") and the line; OnlyKeys() refuses a key the reader does not know (a typo).
//
// Every error is InvalidArgument and reads "<origin>:<line>: <path> <why>"; `origin` says
// which file ("web config /etc/gpulet/web.yaml").
//
// Thread-safety: Load is a pure function; a Map is used by one thread.
#ifndef GPULET_YAML_READER_H_
#define GPULET_YAML_READER_H_

#include <cstddef>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/json_reader.h"
#include "yaml-cpp/yaml.h"

namespace gpulet::yaml {

struct Limits {
  size_t max_bytes = size_t{1} << 20;
};

absl::StatusOr<YAML::Node> Load(absl::string_view text, absl::string_view origin,
                                Limits limits = {});

// "<origin>:<line>: <what>", the line being `at`'s plus `line_offset` (the document's first
// line less one, for a document cut from a longer file); no line when `at` has no mark.
absl::Status ErrorAt(absl::string_view origin, const YAML::Node& at, absl::string_view what,
                     int line_offset = 0);

// Every mapping of the document at `root`, however deep: the first key given twice or that
// is not a plain name, with its path ("entries[3].fix.generic") and line. For readers that
// walk yaml-cpp nodes themselves, so that no later duplicate is silently ignored.
absl::Status CheckKeys(const YAML::Node& root, absl::string_view origin, int line_offset = 0);

class Map {
 public:
  // `node` is the mapping at `path` ("" for the top level) of the document from `origin`.
  Map(const YAML::Node& node, std::string origin, std::string path = "");

  // OK when the node is a mapping of plain keys, none given twice; otherwise the first
  // problem. An absent or null node is an empty mapping. The reads below assume it is OK.
  absl::Status Check() const;

  // The mapping at `key`, for reading a section ("tls_server_config"): its path is PathOf(key).
  Map Child(absl::string_view key) const;
  const std::string& origin() const { return origin_; }
  const std::string& path() const { return path_; }

  // The keys, in the document's order.
  const std::vector<std::string>& keys() const { return keys_; }
  bool empty() const { return keys_.empty(); }
  bool Has(absl::string_view key) const;
  // The value at `key`; an undefined node when absent.
  YAML::Node Get(absl::string_view key) const;
  // "path.key" ("key" at the top level).
  std::string PathOf(absl::string_view key) const;
  // An error at the mapping's line ("<origin>:<line>: <what>"), for one about the whole of it.
  absl::Status Error(absl::string_view what) const;
  // An error at `at`'s line ("<origin>:<line>: <what>"); the mapping's when `at` is undefined.
  absl::Status ErrorAt(const YAML::Node& at, absl::string_view what) const;
  // An error at the line of the key `key`.
  absl::Status ErrorAtKey(absl::string_view key, absl::string_view what) const;

  // The single value at `key`; nullopt when absent or null and kOptional. `expected` says
  // what it must be ("a non-empty string") in the error for a list, a mapping or a missing
  // required value.
  absl::StatusOr<std::optional<std::string>> Scalar(absl::string_view key, Presence presence,
                                                    absl::string_view expected) const;
  // A single value (null counts as absent). Absent and kOptional: `out` is left as it was.
  absl::Status String(absl::string_view key, std::string* out,
                      Presence presence = Presence::kRequired) const;
  // A single value of at least one character.
  absl::Status NonEmptyString(absl::string_view key, std::string* out,
                              Presence presence = Presence::kRequired) const;
  // true or false (any case); YAML 1.1's yes/no/on/off are refused as ambiguous.
  absl::Status Bool(absl::string_view key, bool* out,
                    Presence presence = Presence::kRequired) const;

  // The first key not in `allowed`, in the document's order; nullopt when there is none. For a
  // reader that words its own error (ErrorAtKey gives its line).
  std::optional<std::string> FirstUnknown(std::initializer_list<absl::string_view> allowed) const;
  // The first key not in `allowed`: "unknown key '<path>' (allowed: a, b)".
  absl::Status OnlyKeys(std::initializer_list<absl::string_view> allowed) const;

 private:
  // The index of `key` in keys_; keys_.size() when absent.
  size_t IndexOf(absl::string_view key) const;

  YAML::Node node_;
  std::string origin_;
  std::string path_;
  std::vector<std::string> keys_;
  std::vector<YAML::Node> key_nodes_;
  std::vector<YAML::Node> values_;
  absl::Status status_;
};

}  // namespace gpulet::yaml

#endif  // GPULET_YAML_READER_H_
