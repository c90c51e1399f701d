#!/bin/bash
# Makes the Debian 12 base image `make image` builds on, without any registry: debootstrap
# (minbase variant) from the Debian mirror this machine's apt already uses, imported into
# podman. Does nothing when the image exists.
# Usage: scripts/image-base.sh IMAGE_REF     (needs root: debootstrap and rootful podman)
set -euo pipefail

ref=${1:?usage: image-base.sh IMAGE_REF}
if podman image exists "$ref"; then
  echo "image-base: $ref exists"
  exit 0
fi
[ "$(id -u)" -eq 0 ] || { echo "image-base: debootstrap needs root; run make image as root" >&2; exit 1; }

# The mirror: the first deb.debian.org-style URI apt is configured with (deb822 or legacy
# format), so a machine behind a local mirror uses it; else Debian's CDN.
mirror=""
if [ -r /etc/apt/sources.list.d/debian.sources ]; then
  mirror=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
fi
if [ -z "$mirror" ] && [ -r /etc/apt/sources.list ]; then
  mirror=$(awk '$1 == "deb" && $0 !~ /security/ {for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) {print $i; exit}}' /etc/apt/sources.list)
fi
mirror=${mirror:-http://deb.debian.org/debian}

work=$(mktemp -d /var/tmp/gpulet-base.XXXXXX)
trap 'rm -rf "$work"' EXIT
echo "image-base: debootstrap --variant=minbase bookworm from $mirror"
debootstrap --variant=minbase --keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
  bookworm "$work/rootfs" "$mirror" > "$work/debootstrap.log" 2>&1 || {
  tail -n 30 "$work/debootstrap.log" >&2
  echo "image-base: debootstrap failed (log above)" >&2
  exit 1
}
# The build stage installs packages with apt from the same mirror.
printf 'deb %s bookworm main\ndeb %s bookworm-updates main\n' "$mirror" "$mirror" \
  > "$work/rootfs/etc/apt/sources.list"
rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
tar -C "$work/rootfs" -c . | podman import --change 'CMD ["/bin/bash"]' - "$ref" > /dev/null
echo "image-base: made $ref"
