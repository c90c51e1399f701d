#!/bin/bash
# Completes the runtime root file system of gpulet's image (run in the Containerfile's build
# stage, after `cmake --install` into ROOTFS): copies the shared libraries that the gpulet
# binary and the NVML simulator link, as ldd resolves them, with the dynamic loader; adds
# /etc/passwd and /etc/group entries for the non-root user 65532, and /tmp. No CA
# certificates: gpulet never loads the system trust store (the API client trusts the
# cluster's CA alone, and the metrics server presents a certificate, it checks none).
# Usage: image-rootfs.sh ROOTFS
set -euo pipefail

root=${1:?usage: image-rootfs.sh ROOTFS}
bins=("$root/usr/bin/gpulet" "$root/usr/lib/gpulet/libgpulet-nvml-sim.so")
for b in "${bins[@]}"; do
  [ -f "$b" ] || { echo "image-rootfs: $b is missing (cmake --install first)" >&2; exit 1; }
done

# Debian 12 is merged-/usr: /lib and /lib64 are links into /usr, in the image too.
mkdir -p "$root/usr/lib" "$root/usr/lib64"
for d in lib lib64; do
  [ -e "$root/$d" ] || ln -s "usr/$d" "$root/$d"
done

# Every library ldd resolves, at its real path, plus the name the binary asks for.
copy_lib() {
  local path=$1 real
  real=$(readlink -f "$path")
  mkdir -p "$root$(dirname "$real")" "$root$(dirname "$path")"
  [ -e "$root$real" ] || cp "$real" "$root$real"
  if [ "$path" != "$real" ] && [ ! -e "$root$path" ]; then
    ln -s "$real" "$root$path"
  fi
}
for b in "${bins[@]}"; do
  while read -r line; do
    # "libfoo.so.1 => /usr/lib/x86_64-linux-gnu/libfoo.so.1 (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)"
    path=$(awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^\//) { print $i; exit } }' <<< "$line")
    [ -n "$path" ] && copy_lib "$path"
  done < <(ldd "$b")
done

mkdir -p "$root/etc" "$root/tmp"
chmod 1777 "$root/tmp"
printf 'root:x:0:0:root:/:/usr/sbin/nologin\ngpulet:x:65532:65532:gpulet:/:/usr/sbin/nologin\n' \
  > "$root/etc/passwd"
printf 'root:x:0:\ngpulet:x:65532:\n' > "$root/etc/group"
# No shell, compiler or package manager may have slipped in.
for forbidden in bin/sh usr/bin/sh usr/bin/bash usr/bin/apt usr/bin/dpkg usr/bin/gcc usr/bin/g++ usr/bin/cc; do
  [ ! -e "$root/$forbidden" ] || { echo "image-rootfs: $forbidden must not be in the image" >&2; exit 1; }
done
echo "image-rootfs: $(find "$root" -type f | wc -l) files, $(du -sh "$root" | cut -f1)"
