#!/bin/bash
# End to end for a MIG device, the path a pod takes on a MIG node: `gpulet serve --simulate
# h200-mig --mig-strategy mixed` writes its CDI spec; a kubelet stand-in
# (tests/kubelet_standin.cc) allocates one nvidia.com/mig-1g.18gb device; the CDI name in the
# answer goes to a real `podman run --device` (Debian 12's podman 4.3), which must resolve it
# in the spec gpulet serve wrote. Inside, the container must see the parent GPU's
# /dev/nvidia0 and the MIG device's two capability nodes (GPU instance 3 of GPU 0:
# /dev/nvidia-caps/nvidia-cap30 and nvidia-cap31, as the fixture's mig-minors lists them),
# and no other MIG device's.
#
# The real kubelet and containerd are checked by `make e2e` (docs/e2e.md), scenario mig.
#
# Device nodes: character devices made with /dev/null's numbers (podman stats every host node
# a spec names), in a dev root passed as --cdi-dev-root.
#
# Usage: serve_mig_cdi_podman_test.sh GPULET_BINARY KUBELET_STANDIN SOURCE_DIR
# Exit: 0 pass, 1 fail, 77 skipped (not root, or podman cannot run containers here).
set -u

gpulet=${1:?usage: serve_mig_cdi_podman_test.sh GPULET_BINARY KUBELET_STANDIN SOURCE_DIR}
standin=${2:?usage: serve_mig_cdi_podman_test.sh GPULET_BINARY KUBELET_STANDIN SOURCE_DIR}
src=${3:?usage: serve_mig_cdi_podman_test.sh GPULET_BINARY KUBELET_STANDIN SOURCE_DIR}

fail() { echo "FAIL: $*"; [ -f "${work:-}/serve.log" ] && tail -20 "$work/serve.log"; exit 1; }
# shellcheck source=tests/podman_lib.sh
. "$(dirname "$0")/podman_lib.sh"
podman_require

podman_setup mig-cdi yaml
step "capability nodes for every MIG device of GPU 0 (gpu0/giN/access and giN/ci0/access)"
major=$((16#$(stat -c %t /dev/null)))
minor=$((16#$(stat -c %T /dev/null)))
mkdir -p "$work/devroot/dev/nvidia-caps"
for cap in 12 13 21 22 30 31 39 40; do
  mknod "$work/devroot/dev/nvidia-caps/nvidia-cap$cap" c "$major" "$minor" ||
    skip "mknod is not allowed here"
done

step "a host root (the h200-mig fixture's), its driver files as a driver root, a no-op hook"
cp -a "$src/sim/fixtures/h200-mig/root" "$work/root" || fail "copying the fixture root failed"
rm -f "$work/root/var/run/cdi/"*.yaml
mkdir -p "$work/driver"
cp -a "$work/root/usr" "$work/driver/" || fail "copying driver files failed"
# The hooks the spec names run on this host, where no NVIDIA toolkit is installed.
printf '#!/bin/sh\nexit 0\n' >"$work/hook"
chmod 0755 "$work/hook"

step "gpulet serve --mig-strategy mixed"
mkdir -p "$work/kubelet/device-plugins"
"$gpulet" --simulate h200-mig --host-root "$work/root" --sim-state "$work/sim-state.json" serve \
  --kubelet-dir "$work/kubelet" --metrics-address "" --mig-strategy mixed \
  --device-list-strategy cdi-cri --cdi-dev-root "$work/devroot" --cdi-driver-root "$work/driver" \
  --cdi-hook-path "$work/hook" >"$work/serve.log" 2>&1 &
serve_pid=$!

step "the kubelet stand-in allocates the 1g.18gb in GPU instance 3"
mig=MIG-c1a7e0f2-9b34-5d58-8e61-2f0b7a3d0203
answer=$("$standin" "$work/kubelet/device-plugins" nvidia.com/mig-1g.18gb "$mig" 30 2>&1) ||
  fail "kubelet stand-in: $answer"
echo "$answer"
name=$(echo "$answer" | sed -n 's/^cdi //p')
[ "$name" = "gpulet.dev/gpu=$mig" ] || fail "expected the CDI name gpulet.dev/gpu=$mig, got: $answer"
spec="$work/root/var/run/cdi/gpulet.dev-gpu.yaml"
[ -f "$spec" ] || fail "gpulet serve wrote no spec at $spec"
podman_link_spec "$spec"

step "podman run --device $name"
check='
  fail() { echo "inside: $*"; exit 1; }
  test -c /dev/nvidia0 || fail "/dev/nvidia0 (the parent GPU) is not a character device"
  test -c /dev/nvidia-caps/nvidia-cap30 || fail "the GPU instance capability node is missing"
  test -c /dev/nvidia-caps/nvidia-cap31 || fail "the compute instance capability node is missing"
  test ! -e /dev/nvidia-caps/nvidia-cap12 || fail "another MIG device'"'"'s capability is there"
  test -c /dev/nvidiactl || fail "/dev/nvidiactl missing"
  echo "inside: /dev/nvidia0, nvidia-cap30 and nvidia-cap31 present, no other MIG device"
'
out=$(podman_run --device "$name" "$image" sh -c "$check" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "podman run --device $name exited $rc"
echo "PASS"
