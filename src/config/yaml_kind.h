// YamlKindName: how a YAML node's type is named in gpulet's messages about a file that has
// the wrong kind of value at a key ("is a list, not a single value").
//
// Thread-safety: a pure function; safe from any thread.
#ifndef GPULET_CONFIG_YAML_KIND_H_
#define GPULET_CONFIG_YAML_KIND_H_

#include "yaml-cpp/yaml.h"

namespace gpulet {

// "a list", "a mapping", "empty" or "a single value".
const char* YamlKindName(const YAML::Node& node);

}  // namespace gpulet

#endif  // GPULET_CONFIG_YAML_KIND_H_
