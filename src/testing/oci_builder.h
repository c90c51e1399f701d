// Test helpers that write tar files and OCI image archives in memory, for the archive reader
// and the registry's tests (registry/). The real writer's output is a fixture
// (tests/fixtures/oci/podman-tiny.oci.tar); these make the variants a writer would not: PAX
// and GNU long-name headers, damaged blobs, missing layers.
//
// Thread-safety: none; one test's objects.
#ifndef GPULET_TESTING_OCI_BUILDER_H_
#define GPULET_TESTING_OCI_BUILDER_H_

#include <nettle/sha2.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "registry/oci_archive.h"

namespace gpulet::testing {

// A ReadAt over `bytes` (kept by value).
inline registry::ReadAt StringReader(std::string bytes) {
  return [bytes = std::move(bytes)](uint64_t offset, uint64_t n, std::string* out) {
    if (offset > bytes.size() || n > bytes.size() - offset) {
      return absl::OutOfRangeError("read past the end");
    }
    *out = bytes.substr(offset, n);
    return absl::OkStatus();
  };
}

inline std::string Sha256Digest(const std::string& data) {
  sha256_ctx ctx;
  sha256_init(&ctx);
  sha256_update(&ctx, data.size(), reinterpret_cast<const uint8_t*>(data.data()));
  uint8_t sum[SHA256_DIGEST_SIZE];
  sha256_digest(&ctx, sizeof(sum), sum);
  return absl::StrCat("sha256:", absl::BytesToHexString(absl::string_view(
                                     reinterpret_cast<const char*>(sum), sizeof(sum))));
}

// A ustar writer: regular files, directories, PAX and GNU long-name headers.
class TarWriter {
 public:
  void File(const std::string& name, const std::string& data) { Entry(name, '0', data); }
  void Directory(const std::string& name) { Entry(name, '5', ""); }
  void Pax(const std::vector<std::pair<std::string, std::string>>& records) {
    std::string data;
    for (const auto& [k, v] : records) {
      std::string body = absl::StrCat(" ", k, "=", v, "\n");
      size_t len = body.size() + 1;
      while (absl::StrCat(len).size() + body.size() != len) ++len;
      absl::StrAppend(&data, len, body);
    }
    Entry("PaxHeader", 'x', data);
  }
  void GnuLongName(const std::string& name) { Entry("././@LongLink", 'L', name + '\0'); }

  // The archive with its two end blocks.
  std::string bytes() const { return out_ + std::string(1024, '\0'); }
  registry::ReadAt reader() const { return StringReader(bytes()); }

 private:
  void Entry(const std::string& name, char type, const std::string& data) {
    std::string h(512, '\0');
    std::memcpy(h.data(), name.data(), std::min<size_t>(name.size(), 100));
    std::snprintf(h.data() + 100, 8, "%07o", 0644);
    std::snprintf(h.data() + 108, 8, "%07o", 0);
    std::snprintf(h.data() + 116, 8, "%07o", 0);
    std::snprintf(h.data() + 124, 12, "%011llo", static_cast<unsigned long long>(data.size()));
    std::snprintf(h.data() + 136, 12, "%011o", 0);
    h[156] = type;
    std::memcpy(h.data() + 257,
                "ustar\0"
                "00",
                8);
    std::memset(h.data() + 148, ' ', 8);
    unsigned sum = 0;
    for (char c : h) sum += static_cast<unsigned char>(c);
    std::snprintf(h.data() + 148, 8, "%06o", sum);
    out_ += h;
    out_ += data;
    out_.append((512 - data.size() % 512) % 512, '\0');
  }

  std::string out_;
};

// An OCI archive of images with one layer each, as `podman save --format oci-archive` lays it
// out.
class OciArchiveBuilder {
 public:
  // Adds an image named `ref` whose one layer holds `layer`; returns its manifest's digest.
  std::string Image(const std::string& ref, const std::string& layer) {
    std::string config = R"({"architecture":"amd64","os":"linux","rootfs":{"type":"layers"}})";
    nlohmann::json manifest = {
        {"schemaVersion", 2},
        {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
        {"config",
         {{"mediaType", "application/vnd.oci.image.config.v1+json"},
          {"digest", Sha256Digest(config)},
          {"size", config.size()}}},
        {"layers", nlohmann::json::array({{{"mediaType", "application/vnd.oci.image.layer.v1.tar"},
                                           {"digest", Sha256Digest(layer)},
                                           {"size", layer.size()}}})}};
    std::string m = manifest.dump();
    blobs_.push_back(config);
    layers_.push_back(layer);
    blobs_.push_back(m);
    index_.push_back({{"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                      {"digest", Sha256Digest(m)},
                      {"size", m.size()},
                      {"annotations", {{"org.opencontainers.image.ref.name", ref}}}});
    return Sha256Digest(m);
  }
  // Leaves the layers out of the archive (an incomplete one).
  void DropLayers() { drop_layers_ = true; }

  std::string Build() const {
    TarWriter tar;
    tar.Directory("blobs/");
    tar.Directory("blobs/sha256/");
    std::vector<std::string> all = blobs_;
    if (!drop_layers_) all.insert(all.end(), layers_.begin(), layers_.end());
    for (const std::string& b : all) tar.File("blobs/sha256/" + Sha256Digest(b).substr(7), b);
    tar.File("index.json", nlohmann::json{{"schemaVersion", 2}, {"manifests", index_}}.dump());
    tar.File("oci-layout", R"({"imageLayoutVersion":"1.0.0"})");
    return tar.bytes();
  }

 private:
  std::vector<std::string> blobs_;
  std::vector<std::string> layers_;
  nlohmann::json index_ = nlohmann::json::array();
  bool drop_layers_ = false;
};

}  // namespace gpulet::testing

#endif  // GPULET_TESTING_OCI_BUILDER_H_
