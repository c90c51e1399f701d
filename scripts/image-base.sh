#!/bin/bash
# Makes the Debian 12 base image `make image` builds on, without any registry: a minbase
# Debian 12 from the mirror this machine's apt already uses, imported into podman. Does
# nothing when the image exists. As root: debootstrap. As another user (rootless podman):
# mmdebstrap --mode=unshare, which builds the tree in a user namespace from the user's
# subordinate ID ranges (/etc/subuid, /etc/subgid; newuidmap from the uidmap package).
# Usage: scripts/image-base.sh IMAGE_REF
set -euo pipefail

ref=${1:?usage: image-base.sh IMAGE_REF}
if podman image exists "$ref"; then
  echo "image-base: $ref exists"
  exit 0
fi
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
sources="deb $mirror bookworm main
deb $mirror bookworm-updates main"
if [ "$(id -u)" -ne 0 ]; then
  # Rootless: mmdebstrap writes the tree as a tarball, owners as in the user namespace.
  for tool in mmdebstrap newuidmap; do
    command -v "$tool" > /dev/null || {
      echo "image-base: $tool is missing; a rootless make image needs the mmdebstrap and uidmap packages (scripts/deps.sh image lists them)" >&2
      exit 1
    }
  done
  grep -q "^$(id -un):" /etc/subuid 2> /dev/null || {
    echo "image-base: $(id -un) has no subordinate ID range in /etc/subuid; ask root for one (usermod --add-subuids 100000-165535 --add-subgids 100000-165535 $(id -un))" >&2
    exit 1
  }
  echo "image-base: mmdebstrap --mode=unshare --variant=minbase bookworm from $mirror"
  mmdebstrap --mode=unshare --variant=minbase \
    --keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
    --customize-hook='rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/*' \
    bookworm "$work/rootfs.tar" - <<< "$sources" > "$work/mmdebstrap.log" 2>&1 || {
    tail -n 30 "$work/mmdebstrap.log" >&2
    echo "image-base: mmdebstrap failed (log above)" >&2
    exit 1
  }
  podman import --quiet --change 'CMD ["/bin/bash"]' "$work/rootfs.tar" "$ref" > /dev/null
  echo "image-base: made $ref"
  exit 0
fi
echo "image-base: debootstrap --variant=minbase bookworm from $mirror"
debootstrap --variant=minbase --keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
  bookworm "$work/rootfs" "$mirror" > "$work/debootstrap.log" 2>&1 || {
  tail -n 30 "$work/debootstrap.log" >&2
  echo "image-base: debootstrap failed (log above)" >&2
  exit 1
}
# The build stage installs packages with apt from the same mirror.
echo "$sources" > "$work/rootfs/etc/apt/sources.list"
rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
tar -C "$work/rootfs" -c . | podman import --quiet --change 'CMD ["/bin/bash"]' - "$ref" > /dev/null
echo "image-base: made $ref"
