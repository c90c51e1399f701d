# Shared by the podman CDI tests (sourced, not run): skip rules, a podman that works on this
# kind of host, and a registry-free busybox image. Callers set `src` (the source dir) and
# `work` (a scratch directory they remove), and define `fail`.

skip() { echo "SKIP: $*"; exit 77; }
step() { echo "--- $*"; }

# Skips unless podman, runc and busybox are usable as root; installs them when missing.
podman_require() {
  [ "$(id -u)" -eq 0 ] || skip "needs root: rootful podman, mknod and writing /etc/cdi"
  if ! command -v podman >/dev/null || ! command -v runc >/dev/null || [ ! -x /bin/busybox ]; then
    step "installing podman, runc and busybox-static"
    "$src/scripts/deps.sh" podman || skip "podman, runc or busybox-static missing and not installable"
  fi
  command -v podman >/dev/null || skip "podman is not installed"
}

# crun fails on this kind of host ("cgroups in hybrid mode not supported"); runc and
# cgroupfs work, with explicit ulimits (the defaults exceed what the sandbox allows).
podman_run() {
  podman --runtime runc --cgroup-manager cgroupfs run --rm --network none \
    --ulimit nofile=20000:20000 --ulimit nproc=1000:1000 "$@"
}

# Imports a busybox image named $1 from /bin/busybox; skips when podman cannot run it.
podman_busybox_image() {
  local image=$1
  step "building a busybox image without a registry"
  mkdir -p "$work/rootfs/bin"
  cp /bin/busybox "$work/rootfs/bin/busybox"
  for applet in sh ls test cat env stat grep echo true readlink; do
    ln -s busybox "$work/rootfs/bin/$applet"
  done
  tar -C "$work/rootfs" -cf "$work/rootfs.tar" . || fail "tar of the image root failed"
  local out
  out=$(podman import "$work/rootfs.tar" "$image" 2>&1) || skip "podman import failed: $out"
  if ! out=$(podman_run "$image" true 2>&1); then
    skip "podman cannot run a plain container here: $out"
  fi
}

# Makes $work/devroot/dev with character devices (/dev/null's numbers) for the GPU nodes:
# podman stats every host device node a CDI spec names.
podman_fake_dev_root() {
  step "making a dev root of character devices with /dev/null's numbers"
  local major minor node
  major=$((16#$(stat -c %t /dev/null)))
  minor=$((16#$(stat -c %T /dev/null)))
  mkdir -p "$work/devroot/dev"
  for node in nvidia0 nvidia1 nvidiactl nvidia-uvm nvidia-uvm-tools nvidia-modeset; do
    mknod "$work/devroot/dev/$node" c "$major" "$minor" || skip "mknod is not allowed here"
  done
}

# What every podman test starts with: $work (a scratch directory), $image (the busybox image),
# $link (where in /etc/cdi the test links its spec: podman 4.3 reads only /etc/cdi and
# /var/run/cdi), all removed on exit with /etc/cdi itself when the test made it, and the
# process in $serve_pid killed; then the image and the fake dev root. $1 names the test, $2
# is the spec's extension (yaml or json).
podman_setup() {
  work=$(mktemp -d "/tmp/gpulet-$1.XXXXXX")
  image="localhost/gpulet-$1-test:$$"
  link="/etc/cdi/gpulet-$1-test-$$.$2"
  serve_pid=""
  created_cdi_dir=0
  trap podman_cleanup EXIT
  podman_busybox_image "$image"
  podman_fake_dev_root
}

podman_cleanup() {
  [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null
  rm -f "$link"
  [ "$created_cdi_dir" = 1 ] && rmdir /etc/cdi 2>/dev/null
  podman rmi -f "$image" >/dev/null 2>&1
  rm -rf "$work"
}

# Links spec $1 into /etc/cdi as $link (making /etc/cdi when missing).
podman_link_spec() {
  [ -d /etc/cdi ] || { mkdir -p /etc/cdi && created_cdi_dir=1; }
  ln -s "$1" "$link" || fail "cannot link $link to the spec"
}
