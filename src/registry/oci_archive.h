// OciArchive: an OCI image archive (an OCI image layout in a tar: oci-layout, index.json,
// blobs/sha256/<hex>), as `podman save --format oci-archive` and `make image` write it and
// `ctr images import` reads it, opened for serving: every blob located by its offset in the
// file, every descriptor reachable from index.json checked (present, of the stated size, with
// the stated sha256), and the image names its index carries.
//
// The tar reader takes what the layout writers make: ustar and GNU headers, PAX extended
// headers (path, size) and GNU long names; links, devices and other entry types are skipped
// (a layout has none), so a blob that is one is missing. Everything it reads is bounded: the
// file's size, kMaxEntries entries, kMaxMetadataBytes of index.json, a manifest or a PAX
// header.
//
// Thread-safety: immutable once opened; any number of threads may read it. The file stays
// open (the descriptor is the object's) so that a blob can be sent from it with sendfile.
#ifndef GPULET_REGISTRY_OCI_ARCHIVE_H_
#define GPULET_REGISTRY_OCI_ARCHIVE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpulet::registry {

inline constexpr int kMaxEntries = 100000;
inline constexpr uint64_t kMaxMetadataBytes = 4 << 20;

// One regular file of the tar: its path (leading "./" removed) and where its bytes are.
struct TarEntry {
  std::string path;
  uint64_t offset = 0;
  uint64_t size = 0;
};

// Reads `n` bytes at `offset` of the archive into *out; fails (OutOfRange) past its end.
using ReadAt = std::function<absl::Status(uint64_t offset, uint64_t n, std::string* out)>;

// The regular files of a tar of `size` bytes. Errors (InvalidArgument) name the byte offset
// of the bad header and what is wrong with it: a checksum that does not match, a size or
// path that runs past the file, a PAX record that does not parse, too many entries.
absl::StatusOr<std::vector<TarEntry>> IndexTar(uint64_t size, const ReadAt& read);

// A descriptor of the OCI image spec: what a manifest or the index points at.
struct Descriptor {
  std::string media_type;
  std::string digest;  // "sha256:<64 lowercase hex>"
  uint64_t size = 0;
};

// Splits an image reference's name ("localhost/gpulet:0.1.0", "reg.example:5000/a/b:tag",
// "gpulet@sha256:...") into the repository path a registry serves it under ("gpulet", "a/b")
// and its tag ("0.1.0", "" when it has none). The first component is a registry host when it
// holds a '.' or ':' or is "localhost".
struct RepositoryTag {
  std::string repository;
  std::string tag;
};
RepositoryTag SplitReference(absl::string_view ref);

// An image the archive's index names: its manifest, and the name its
// org.opencontainers.image.ref.name annotation gives ("" when it has none), split once.
struct NamedImage {
  Descriptor manifest;
  std::string ref_name;  // "localhost/gpulet:0.1.0"
  RepositoryTag name;    // {"gpulet", "0.1.0"}
};

class OciArchive {
 public:
  // Opens and checks the archive at `path`. Errors name the path and the blob or file at
  // fault: NotFound when the file is missing, InvalidArgument when it is not an OCI archive
  // (no oci-layout or index.json, a descriptor whose blob is missing), DataLoss when a blob's
  // bytes do not match its digest or size.
  static absl::StatusOr<OciArchive> Open(const std::string& path);
  // The same checks over an archive held by `read` (tests and the fuzz target).
  static absl::StatusOr<OciArchive> FromReader(const std::string& name, uint64_t size,
                                               const ReadAt& read);

  OciArchive(OciArchive&& other) noexcept;
  OciArchive& operator=(OciArchive&& other) noexcept;
  OciArchive(const OciArchive&) = delete;
  OciArchive& operator=(const OciArchive&) = delete;
  ~OciArchive();

  const std::string& path() const { return path_; }
  const std::vector<NamedImage>& images() const { return images_; }
  // The blob with `digest`, or nullptr.
  const TarEntry* Blob(absl::string_view digest) const;
  // Every manifest (and nested index) reachable from index.json, by digest, with its media
  // type: what a registry serves under /manifests/<digest>.
  const std::map<std::string, Descriptor, std::less<>>& manifests() const { return manifests_; }
  // The archive's file (for sendfile), or -1 when it was read through a ReadAt.
  int fd() const { return fd_; }
  // The blob's bytes (a manifest's, for a response built in memory).
  absl::StatusOr<std::string> ReadBlob(const TarEntry& blob) const;

 private:
  OciArchive() = default;
  absl::Status Load(uint64_t size);
  absl::Status CheckDescriptor(const Descriptor& d, int depth);

  std::string path_;
  int fd_ = -1;
  ReadAt read_;
  std::map<std::string, TarEntry, std::less<>> blobs_;
  std::map<std::string, Descriptor, std::less<>> manifests_;
  std::vector<NamedImage> images_;
  std::set<std::string, std::less<>> verified_;  // digests whose bytes were hashed
};

// True for "sha256:" followed by 64 lowercase hex digits.
bool IsSha256Digest(absl::string_view digest);

}  // namespace gpulet::registry

#endif  // GPULET_REGISTRY_OCI_ARCHIVE_H_
