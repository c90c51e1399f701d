#!/bin/bash
# Writes the image `make image` built as an OCI archive (an OCI image layout in a tar, the
# format `ctr images import`, `skopeo copy oci-archive:` and `gpulet image-serve` read) and
# the digest of its manifest, the one a pod pins with IMAGE@sha256:...:
#   OUT/gpulet-VERSION.oci.tar           the archive
#   OUT/gpulet-VERSION.oci.tar.digest    sha256:<hex>, one line
# The layers are gzip-compressed as a registry stores them, so the digest survives
# `skopeo copy --preserve-digests` into any registry.
# Usage: scripts/image-save.sh IMAGE_REF OUT_DIR
set -euo pipefail

image=${1:?usage: image-save.sh IMAGE_REF OUT_DIR}
out=${2:?usage: image-save.sh IMAGE_REF OUT_DIR}
version=${image##*:}
archive="$out/gpulet-$version.oci.tar"
mkdir -p "$out"
rm -f "$archive.tmp"
podman save --quiet --format oci-archive -o "$archive.tmp" "$image"
digest=$(tar -xOf "$archive.tmp" index.json |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["manifests"][0]["digest"])')
case "$digest" in
  sha256:????????????????????????????????????????????????????????????????) ;;
  *) echo "image-save: $archive: no manifest digest in its index.json ('$digest')" >&2; exit 1 ;;
esac
mv "$archive.tmp" "$archive"
echo "$digest" > "$archive.digest"
size=$(stat -c %s "$archive")
echo "image-save: $archive ($(awk -v s="$size" 'BEGIN { printf "%.1f MB", s / 1000000 }')), manifest $digest"
echo "image-save: serve it to nodes with no registry: gpulet image-serve $archive --advertise IP:5000 (docs/no-registry.md)"
