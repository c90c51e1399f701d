// Build identity: the git revision gpulet was built from.
//
// The revision lives in one generated source file (build_info.cc in the build tree), not
// in a compile definition, so that a new commit recompiles one file instead of all of them.
// Thread-safe: returns a pointer to a constant string.
#ifndef GPULET_COMMON_BUILD_INFO_H_
#define GPULET_COMMON_BUILD_INFO_H_

namespace gpulet {

// Short git revision of the source tree, or "unknown" when built outside a checkout.
const char* GitRevision();

}  // namespace gpulet

#endif  // GPULET_COMMON_BUILD_INFO_H_
