#include "registry/oci_archive.h"

#include <fcntl.h>
#include <nettle/sha2.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/json_reader.h"
#include "nlohmann/json.hpp"

namespace gpulet::registry {
namespace {

constexpr uint64_t kBlock = 512;
// Manifests may nest an index in an index; a layout from a real writer is two deep at most.
constexpr int kMaxDepth = 4;

constexpr absl::string_view kOciManifest = "application/vnd.oci.image.manifest.v1+json";
constexpr absl::string_view kDockerManifest =
    "application/vnd.docker.distribution.manifest.v2+json";
constexpr absl::string_view kOciIndex = "application/vnd.oci.image.index.v1+json";
constexpr absl::string_view kDockerList =
    "application/vnd.docker.distribution.manifest.list.v2+json";

// A NUL- (or field-) terminated string of a header field.
std::string Field(const std::string& h, size_t at, size_t len) {
  size_t end = at;
  while (end < at + len && h[end] != '\0') ++end;
  return h.substr(at, end - at);
}

// An octal number field (leading spaces, then digits, then a space or NUL).
std::optional<uint64_t> Octal(const std::string& h, size_t at, size_t len) {
  uint64_t v = 0;
  size_t i = at;
  while (i < at + len && h[i] == ' ') ++i;
  bool any = false;
  for (; i < at + len && h[i] >= '0' && h[i] <= '7'; ++i) {
    v = v * 8 + static_cast<uint64_t>(h[i] - '0');
    any = true;
  }
  for (; i < at + len; ++i) {
    if (h[i] != ' ' && h[i] != '\0') return std::nullopt;
  }
  if (!any) return std::nullopt;
  return v;
}

absl::Status BadHeader(uint64_t pos, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("tar header at byte ", pos, ": ", what));
}

// The PAX records of an extended header: path and size are the ones this reader uses.
// *size is -1 when no record sets it.
absl::Status ParsePax(const std::string& data, uint64_t pos, std::optional<std::string>* path,
                      int64_t* size) {
  size_t i = 0;
  while (i < data.size()) {
    if (data[i] == '\0') break;  // padding some writers leave
    size_t space = data.find(' ', i);
    uint64_t len = 0;
    if (space == std::string::npos || !absl::SimpleAtoi(data.substr(i, space - i), &len) ||
        len <= space - i + 1 || len > data.size() - i || data[i + len - 1] != '\n') {
      return BadHeader(pos, absl::StrCat("PAX record at offset ", i, " does not parse"));
    }
    std::string record = data.substr(space + 1, i + len - 1 - (space + 1));
    size_t eq = record.find('=');
    if (eq == std::string::npos) {
      return BadHeader(pos, absl::StrCat("PAX record at offset ", i, " has no '='"));
    }
    std::string key = record.substr(0, eq);
    std::string value = record.substr(eq + 1);
    if (key == "path") {
      *path = value;
    } else if (key == "size") {
      int64_t n = 0;
      if (!absl::SimpleAtoi(value, &n) || n < 0) {
        return BadHeader(pos, absl::StrCat("PAX size '", value, "' is not a number"));
      }
      *size = n;
    }
    i += len;
  }
  return absl::OkStatus();
}

std::string CleanPath(std::string p) {
  while (absl::StartsWith(p, "./")) p.erase(0, 2);
  return p;
}

bool IsManifestType(absl::string_view t) { return t == kOciManifest || t == kDockerManifest; }
bool IsIndexType(absl::string_view t) { return t == kOciIndex || t == kDockerList; }

// A field error of a document, prefixed with where the document is ("<archive>: manifest
// <digest>").
absl::Status In(absl::string_view where, const absl::Status& field_error) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", field_error.message()));
}

// A descriptor (OCI image spec, descriptor.md) at `path` in a document that `where` names.
// Other fields (annotations, platform, urls) are the spec's or its extensions': left alone.
absl::StatusOr<Descriptor> ParseDescriptor(const nlohmann::json& j, absl::string_view where,
                                           std::string path) {
  JsonFields f(j, "an OCI descriptor", std::move(path));
  Descriptor d;
  int64_t size = 0;
  for (const absl::Status& s : {f.String("digest", &d.digest),
                                f.Int64("size", 0, std::numeric_limits<int64_t>::max(), &size,
                                        Presence::kRequired, "a size in bytes"),
                                f.String("mediaType", &d.media_type, Presence::kOptional)}) {
    if (!s.ok()) return In(where, s);
  }
  d.size = static_cast<uint64_t>(size);
  if (!IsSha256Digest(d.digest)) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": digest '", d.digest.substr(0, 80),
                                                   "' is not sha256:<64 lowercase hex>"));
  }
  return d;
}

// A small JSON document of the archive (oci-layout, index.json, a manifest) parsed strictly:
// a key twice is refused, as two readers could take different ones (the manifest a registry
// client verifies must be the one gpulet serves).
absl::StatusOr<nlohmann::json> ParseDocument(const std::string& text, absl::string_view name) {
  return ParseStrictJson(text, absl::StrCat("valid JSON in ", name),
                         {.max_bytes = kMaxMetadataBytes});
}

}  // namespace

bool IsSha256Digest(absl::string_view digest) {
  if (digest.size() != 71 || !absl::StartsWith(digest, "sha256:")) return false;
  return std::all_of(digest.begin() + 7, digest.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

RepositoryTag SplitReference(absl::string_view ref) {
  std::string name(ref.substr(0, ref.find('@')));
  RepositoryTag out;
  size_t slash = name.rfind('/');
  size_t colon = name.rfind(':');
  if (colon != std::string::npos && (slash == std::string::npos || colon > slash)) {
    out.tag = name.substr(colon + 1);
    name.resize(colon);
  }
  size_t first = name.find('/');
  if (first != std::string::npos) {
    absl::string_view host(name.data(), first);
    if (absl::StrContains(host, '.') || absl::StrContains(host, ':') || host == "localhost") {
      name.erase(0, first + 1);
    }
  }
  out.repository = name;
  return out;
}

absl::StatusOr<std::vector<TarEntry>> IndexTar(uint64_t size, const ReadAt& read) {
  std::vector<TarEntry> out;
  uint64_t pos = 0;
  int entries = 0;
  std::optional<std::string> pax_path;
  int64_t pax_size = -1;
  std::optional<std::string> long_name;
  std::string h;
  while (pos < size) {
    if (size - pos < kBlock) return BadHeader(pos, "the file ends inside a header (truncated)");
    if (absl::Status s = read(pos, kBlock, &h); !s.ok()) return s;
    if (std::all_of(h.begin(), h.end(), [](char c) { return c == '\0'; })) break;  // the end
    if (++entries > kMaxEntries) {
      return BadHeader(pos, absl::StrCat("more than ", kMaxEntries, " entries"));
    }
    std::optional<uint64_t> stored = Octal(h, 148, 8);
    uint64_t sum = 0;
    int64_t signed_sum = 0;
    for (size_t i = 0; i < kBlock; ++i) {
      unsigned char c = (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(h[i]);
      sum += c;
      signed_sum += static_cast<signed char>(c);
    }
    if (!stored || (*stored != sum && static_cast<int64_t>(*stored) != signed_sum)) {
      return BadHeader(pos, "checksum does not match (not a tar file, or a damaged one)");
    }
    if (static_cast<unsigned char>(h[124]) & 0x80) {
      return BadHeader(pos, "entry size in base-256 (over 8 GiB): not an image layout");
    }
    std::optional<uint64_t> field_size = Octal(h, 124, 12);
    if (!field_size) return BadHeader(pos, "size field is not an octal number");
    const char type = h[156];
    const bool regular = type == '0' || type == '\0' || type == '7';
    uint64_t entry_size =
        (regular && pax_size >= 0) ? static_cast<uint64_t>(pax_size) : *field_size;
    const uint64_t data = pos + kBlock;
    if (entry_size > size - data) {
      return BadHeader(
          pos, absl::StrCat("entry of ", entry_size, " bytes runs past the end of the ", size,
                            "-byte file (truncated)"));
    }
    if (type == 'x' || type == 'L') {
      if (entry_size > kMaxMetadataBytes) {
        return BadHeader(pos, absl::StrCat("extended header of ", entry_size, " bytes"));
      }
      std::string meta;
      if (absl::Status s = read(data, entry_size, &meta); !s.ok()) return s;
      if (type == 'x') {
        if (absl::Status s = ParsePax(meta, pos, &pax_path, &pax_size); !s.ok()) return s;
      } else {
        long_name = meta.substr(0, meta.find('\0'));
      }
    } else if (type != 'g') {
      if (regular) {
        std::string name = Field(h, 0, 100);
        std::string prefix =
            h.compare(257, 6, std::string("ustar\0", 6)) == 0 ? Field(h, 345, 155) : std::string();
        if (!prefix.empty()) name = absl::StrCat(prefix, "/", name);
        if (long_name) name = *long_name;
        if (pax_path) name = *pax_path;
        out.push_back({CleanPath(name), data, entry_size});
      }
      pax_path.reset();
      pax_size = -1;
      long_name.reset();
    }
    uint64_t padded = (entry_size + kBlock - 1) / kBlock * kBlock;
    pos = data + std::min(padded, size - data);
  }
  return out;
}

absl::StatusOr<OciArchive> OciArchive::Open(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    absl::Status s =
        absl::ErrnoToStatus(err, absl::StrCat("cannot open the image archive ", path,
                                              " (make image writes it under build/image/)"));
    return s;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a regular file; give the .oci.tar that make image writes"));
  }
  OciArchive a;
  a.path_ = path;
  a.fd_ = fd;
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  a.read_ = [fd, size, path](uint64_t offset, uint64_t n, std::string* out) -> absl::Status {
    if (offset > size || n > size - offset) {
      return absl::OutOfRangeError(absl::StrCat(path, ": read past the end of the file"));
    }
    out->resize(n);
    uint64_t done = 0;
    while (done < n) {
      ssize_t r = pread(fd, out->data() + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        return absl::DataLossError(absl::StrCat("cannot read ", path, " at byte ", offset + done,
                                                ": ", r < 0 ? strerror(errno) : "end of file"));
      }
      done += static_cast<uint64_t>(r);
    }
    return absl::OkStatus();
  };
  if (absl::Status s = a.Load(size); !s.ok()) return s;
  return a;
}

absl::StatusOr<OciArchive> OciArchive::FromReader(const std::string& name, uint64_t size,
                                                  const ReadAt& read) {
  OciArchive a;
  a.path_ = name;
  a.read_ = read;
  if (absl::Status s = a.Load(size); !s.ok()) return s;
  return a;
}

OciArchive::OciArchive(OciArchive&& other) noexcept { *this = std::move(other); }

OciArchive& OciArchive::operator=(OciArchive&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    read_ = std::move(other.read_);
    blobs_ = std::move(other.blobs_);
    manifests_ = std::move(other.manifests_);
    images_ = std::move(other.images_);
  }
  return *this;
}

OciArchive::~OciArchive() {
  if (fd_ >= 0) close(fd_);
}

const TarEntry* OciArchive::Blob(absl::string_view digest) const {
  auto it = blobs_.find(digest);
  return it == blobs_.end() ? nullptr : &it->second;
}

absl::StatusOr<std::string> OciArchive::ReadBlob(const TarEntry& blob) const {
  std::string out;
  if (absl::Status s = read_(blob.offset, blob.size, &out); !s.ok()) return s;
  return out;
}

absl::Status OciArchive::Load(uint64_t size) {
  absl::StatusOr<std::vector<TarEntry>> entries = IndexTar(size, read_);
  if (!entries.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, " is not an OCI image archive: ", entries.status().message()));
  }
  std::map<std::string, TarEntry, std::less<>> files;
  for (TarEntry& e : *entries) {
    if (absl::StartsWith(e.path, "blobs/")) {
      std::string rest = e.path.substr(6);
      size_t slash = rest.find('/');
      if (slash != std::string::npos) {
        blobs_[absl::StrCat(rest.substr(0, slash), ":", rest.substr(slash + 1))] = e;
      }
    }
    files[e.path] = std::move(e);
  }
  auto not_oci = [this, &files](absl::string_view what) {
    std::string hint = files.count("manifest.json") != 0
                           ? " (it is a docker-archive: save the image with podman save --format "
                             "oci-archive, as make image does)"
                           : " (give the .oci.tar that make image writes)";
    return absl::InvalidArgumentError(
        absl::StrCat(path_, " is not an OCI image archive: ", what, hint));
  };
  auto small_file = [&](absl::string_view name) -> absl::StatusOr<nlohmann::json> {
    auto it = files.find(name);
    if (it == files.end()) return not_oci(absl::StrCat("it has no ", name));
    if (it->second.size > kMaxMetadataBytes) {
      return not_oci(absl::StrCat(name, " is ", it->second.size, " bytes"));
    }
    absl::StatusOr<std::string> text = ReadBlob(it->second);
    if (!text.ok()) return text.status();
    absl::StatusOr<nlohmann::json> j = ParseDocument(*text, name);
    if (!j.ok()) return not_oci(j.status().message());
    return j;
  };
  absl::StatusOr<nlohmann::json> layout = small_file("oci-layout");
  if (!layout.ok()) return layout.status();
  std::string layout_version;
  if (absl::Status s = JsonFields(*layout, "an OCI layout file (oci-layout)")
                           .String("imageLayoutVersion", &layout_version);
      !s.ok()) {
    return not_oci(s.message());
  }
  absl::StatusOr<nlohmann::json> index = small_file("index.json");
  if (!index.ok()) return index.status();
  JsonFields index_fields(*index, "an OCI image index (index.json)");
  absl::StatusOr<const nlohmann::json*> manifests = index_fields.Array("manifests");
  if (!manifests.ok()) return not_oci(manifests.status().message());
  if ((*manifests)->empty()) return not_oci("index.json lists no manifests");
  for (size_t i = 0; i < (*manifests)->size(); ++i) {
    const nlohmann::json& m = (**manifests)[i];
    absl::StatusOr<Descriptor> d =
        ParseDescriptor(m, absl::StrCat(path_, ": index.json"), absl::StrCat("manifests[", i, "]"));
    if (!d.ok()) return d.status();
    if (!IsManifestType(d->media_type) && !IsIndexType(d->media_type)) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": index.json names ", d->digest,
                                                     " with media type '", d->media_type,
                                                     "', which is not an image manifest"));
    }
    NamedImage image{*d, "", {}};
    if (m.contains("annotations") && m["annotations"].is_object()) {
      for (const char* key : {"io.containerd.image.name", "org.opencontainers.image.ref.name"}) {
        if (m["annotations"].contains(key) && m["annotations"][key].is_string()) {
          image.ref_name = m["annotations"][key].get<std::string>();
          break;
        }
      }
    }
    if (absl::Status s = CheckDescriptor(*d, 0); !s.ok()) return s;
    image.name = SplitReference(image.ref_name);
    images_.push_back(std::move(image));
  }
  return absl::OkStatus();
}

absl::Status OciArchive::CheckDescriptor(const Descriptor& d, int depth) {
  if (depth > kMaxDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": manifests nest deeper than ", kMaxDepth, " at ", d.digest));
  }
  const TarEntry* blob = Blob(d.digest);
  if (blob == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        path_, ": blob ", d.digest, " is missing (the archive is incomplete; save it again)"));
  }
  if (blob->size != d.size) {
    return absl::DataLossError(absl::StrCat(path_, ": blob ", d.digest, " is ", blob->size,
                                            " bytes, its descriptor says ", d.size));
  }
  // Each blob is hashed once, however many manifests share it.
  static constexpr uint64_t kChunk = 1 << 20;
  if (verified_.insert(d.digest).second) {
    sha256_ctx ctx;
    sha256_init(&ctx);
    std::string chunk;
    for (uint64_t at = 0; at < blob->size; at += kChunk) {
      uint64_t n = std::min(kChunk, blob->size - at);
      if (absl::Status s = read_(blob->offset + at, n, &chunk); !s.ok()) return s;
      sha256_update(&ctx, chunk.size(), reinterpret_cast<const uint8_t*>(chunk.data()));
    }
    uint8_t sum[SHA256_DIGEST_SIZE];
    sha256_digest(&ctx, sizeof(sum), sum);
    const std::string hex =
        absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(sum), sizeof(sum)));
    if (d.digest.compare(7, std::string::npos, hex) != 0) {
      return absl::DataLossError(absl::StrCat(path_, ": blob ", d.digest,
                                              " does not match its digest (its sha256 is ", hex,
                                              "); the archive is damaged, save it again"));
    }
  }
  if (!IsManifestType(d.media_type) && !IsIndexType(d.media_type)) return absl::OkStatus();
  manifests_[d.digest] = d;
  if (d.size > kMaxMetadataBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": manifest ", d.digest, " is ", d.size, " bytes"));
  }
  absl::StatusOr<std::string> text = ReadBlob(*blob);
  if (!text.ok()) return text.status();
  const std::string where = absl::StrCat(path_, ": manifest ", d.digest);
  absl::StatusOr<nlohmann::json> j = ParseDocument(*text, absl::StrCat("manifest ", d.digest));
  if (!j.ok()) return In(path_, j.status());
  JsonFields fields(*j, IsIndexType(d.media_type) ? "an OCI image index" : "an OCI image manifest");
  // An index lists manifests; a manifest its config and layers.
  std::vector<std::pair<std::string, const nlohmann::json*>> descriptors;
  if (IsIndexType(d.media_type)) {
    absl::StatusOr<const nlohmann::json*> list = fields.Array("manifests");
    if (!list.ok()) return In(where, list.status());
    for (size_t i = 0; i < (*list)->size(); ++i) {
      descriptors.emplace_back(absl::StrCat("manifests[", i, "]"), &(**list)[i]);
    }
  } else {
    absl::StatusOr<const nlohmann::json*> config = fields.Object("config");
    absl::StatusOr<const nlohmann::json*> layers = fields.Array("layers");
    for (const absl::Status& s : {config.status(), layers.status()}) {
      if (!s.ok()) return In(where, s);
    }
    descriptors.emplace_back("config", *config);
    for (size_t i = 0; i < (*layers)->size(); ++i) {
      descriptors.emplace_back(absl::StrCat("layers[", i, "]"), &(**layers)[i]);
    }
  }
  std::vector<Descriptor> children;
  for (const auto& [path, json] : descriptors) {
    absl::StatusOr<Descriptor> c = ParseDescriptor(*json, where, path);
    if (!c.ok()) return c.status();
    children.push_back(*c);
  }
  for (const Descriptor& c : children) {
    if (absl::Status s = CheckDescriptor(c, depth + 1); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace gpulet::registry
