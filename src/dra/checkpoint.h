// The DRA driver's prepared-claims checkpoint: which ResourceClaims gpulet prepared on this
// node and what it handed the kubelet for each, kept on disk so that a gpulet restart between
// NodePrepareResources and NodeUnprepareResources loses nothing. The kubelet only sends claim
// references (namespace, UID, name) on unprepare, and the claim may be gone from the API
// server by then, so this file is the one record of what must be undone.
//
// The file is JSON, replaced whole with common/atomic_file.h (readers see the old or the new
// file, never a mix):
//
//   {"kind": "GpuletDraCheckpoint", "version": 1,
//    "checksum": "fnv1a64:<16 hex digits>",
//    "claims": {"<claim uid>": {"namespace": "ml", "name": "ollama-gpu",
//                               "devices": [{"requestNames": ["gpu"], "pool": "node-a",
//                                            "device": "gpu-0",
//                                            "cdiDeviceIds": ["gpulet.dev/claim=<uid>-gpu-0"],
//                                            "shareId": ""}]}}}
//
// The checksum is FNV-1a (64 bit) over the compact JSON text of "claims" (keys sorted), so a
// file damaged on disk or edited by hand is refused instead of half-trusted. A missing file is
// an empty checkpoint; anything else that is not exactly this (not a regular file, too large,
// not JSON, a key twice, another kind or version, a wrong type, an unknown field, a checksum
// mismatch) is an error naming the path, the bad field's place ("claims.<uid>.devices[0].pool")
// and what is wrong, never a crash (common/json_reader.h; checkpoint_fuzz.cc).
//
// Thread-safety: the types are values; the functions are pure; CheckpointFile has no state
// but its path, and concurrent Saves to one path leave one of them whole (the last rename).
#ifndef GPULET_DRA_CHECKPOINT_H_
#define GPULET_DRA_CHECKPOINT_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpulet::dra {

// A ResourceClaim as the kubelet names it in NodePrepareResources (all three required).
struct ClaimRef {
  std::string ns;  // metadata.namespace
  std::string uid;
  std::string name;

  friend bool operator==(const ClaimRef&, const ClaimRef&) = default;
};

// One device prepared for a claim: the kubelet API's Device message.
struct PreparedDevice {
  std::vector<std::string> request_names;  // empty: the device serves every request
  std::string pool;
  std::string device;
  std::vector<std::string> cdi_device_ids;  // fully qualified CDI names
  std::string share_id;                     // "" unless a share of a device (v1 only)

  friend bool operator==(const PreparedDevice&, const PreparedDevice&) = default;
};

// A claim gpulet prepared, with what it returned to the kubelet.
struct PreparedClaim {
  ClaimRef ref;
  std::vector<PreparedDevice> devices;

  friend bool operator==(const PreparedClaim&, const PreparedClaim&) = default;
};

// Claim UID → prepared claim. The UID in the key and in `ref` are the same.
using ClaimCheckpoint = std::map<std::string, PreparedClaim>;

// The JSON form above (indented, ending in a newline) and its strict parser. Parse errors
// say what is wrong; the caller adds the path.
std::string CheckpointToJson(const ClaimCheckpoint& checkpoint);
absl::StatusOr<ClaimCheckpoint> CheckpointFromJson(absl::string_view text);

// The largest checkpoint gpulet reads. A claim takes a few hundred bytes and a node holds a
// few hundred claims at most; anything near this is not ours.
inline constexpr size_t kMaxCheckpointBytes = size_t{8} << 20;

// The checkpoint in one file. Save creates missing parent directories (mode 0755) and writes
// the file with mode 0600: it names the claims of every pod on the node.
class CheckpointFile {
 public:
  explicit CheckpointFile(std::string path);

  // The saved checkpoint; an empty one when the file does not exist. Errors name the path,
  // what is wrong and what to do.
  absl::StatusOr<ClaimCheckpoint> Load() const;
  // Replaces the file durably (fsync'd) before returning OK.
  absl::Status Save(const ClaimCheckpoint& checkpoint) const;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace gpulet::dra

#endif  // GPULET_DRA_CHECKPOINT_H_
