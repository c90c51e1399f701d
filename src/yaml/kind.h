// yaml::KindName: how a YAML node's type is named in gpulet's messages about a file that has
// the wrong kind of value at a key ("is a list, not a single value"): the configuration's and
// the web config's readers say it alike.
//
// Thread-safety: a pure function; safe from any thread.
#ifndef GPULET_YAML_KIND_H_
#define GPULET_YAML_KIND_H_

#include "yaml-cpp/yaml.h"

namespace gpulet::yaml {

// "a list", "a mapping", "empty" or "a single value".
const char* KindName(const YAML::Node& node);

}  // namespace gpulet::yaml

#endif  // GPULET_YAML_KIND_H_
