#!/bin/bash
# End to end, the path a pod takes on a real node: `gpulet serve --simulate homelab` runs
# with the shipped default config (deploy/base/configmap.yaml, strategy cdi-cri), a kubelet
# stand-in (tests/kubelet_standin.cc) calls Allocate for the RTX 3080, and the CDI name in
# the answer is handed to a real `podman run --device` (Debian 12's podman 4.3), which must
# resolve it in the spec file that `gpulet serve` itself wrote (not `gpulet cdi generate`).
# Inside, the container must see /dev/nvidia0 and the driver's libnvidia-ml.so.1.
#
# The node: a copy of the homelab fixture root as --host-root; character devices made with
# /dev/null's numbers as the dev root (podman stats every host node); a copy of the
# fixture's driver files with the soname links a driver install makes as the driver root;
# a stand-in for nvidia-cdi-hook (tests/cdi_hook_standin.py) that records its arguments and
# makes create-symlinks' links in the container's root as the real hook does. podman 4.3 reads only /etc/cdi and
# /var/run/cdi, so /etc/cdi gets a symlink to the file gpulet serve wrote.
#
# Usage: serve_cdi_podman_test.sh GPULET_BINARY KUBELET_STANDIN SOURCE_DIR
# Exit: 0 pass, 1 fail, 77 skipped (not root, or podman cannot run containers here).
set -u

gpulet=${1:?usage: serve_cdi_podman_test.sh GPULET_BINARY KUBELET_STANDIN SOURCE_DIR}
standin=${2:?usage: serve_cdi_podman_test.sh GPULET_BINARY KUBELET_STANDIN SOURCE_DIR}
src=${3:?usage: serve_cdi_podman_test.sh GPULET_BINARY KUBELET_STANDIN SOURCE_DIR}

fail() { echo "FAIL: $*"; [ -f "${work:-}/serve.log" ] && tail -20 "$work/serve.log"; exit 1; }
# shellcheck source=tests/podman_lib.sh
. "$(dirname "$0")/podman_lib.sh"
podman_require
[ -x /usr/bin/python3 ] || skip "the hook stand-in needs /usr/bin/python3"

podman_setup serve-cdi yaml

step "a host root, and a driver root with the soname links a driver install makes"
cp -a "$src/sim/fixtures/homelab/root" "$work/root" || fail "copying the fixture root failed"
rm -f "$work/root/var/run/cdi/"*.yaml  # the node has no CDI spec of its own
mkdir -p "$work/driver"
cp -a "$src/sim/fixtures/homelab/root/usr" "$work/driver/" || fail "copying driver files failed"
ver=570.133.20
for lib in libnvidia-ml libcuda; do
  ln -s "$lib.so.$ver" "$work/driver/usr/local/lib/$lib.so.1"
done

cp "$src/tests/cdi_hook_standin.py" "$work/hook" || fail "copying the hook stand-in failed"
chmod 0755 "$work/hook"

step "the shipped default config (deploy/base/configmap.yaml)"
awk '/^  config.yaml: \|/ {on=1; next} on && /^[^ ]/ {on=0} on {sub(/^    /, ""); print}' \
  "$src/deploy/base/configmap.yaml" >"$work/config.yaml"
grep -q 'deviceListStrategy: \[cdi-cri\]' "$work/config.yaml" ||
  fail "the shipped config no longer uses cdi-cri: $(cat "$work/config.yaml")"

step "gpulet serve"
mkdir -p "$work/kubelet/device-plugins"
"$gpulet" --simulate homelab --host-root "$work/root" --sim-state "$work/sim-state.json" serve \
  --config "$work/config.yaml" --kubelet-dir "$work/kubelet" --metrics-address "" \
  --cdi-driver-root "$work/driver" --cdi-dev-root "$work/devroot" --cdi-hook-path "$work/hook" \
  >"$work/serve.log" 2>&1 &
serve_pid=$!

step "the kubelet stand-in allocates the RTX 3080"
gpu0=GPU-3f9d6c2e-1b7a-4e0c-9d35-a1c2e3f43080
answer=$("$standin" "$work/kubelet/device-plugins" nvidia.com/gpu "$gpu0" 30 2>&1) ||
  fail "kubelet stand-in: $answer"
echo "$answer"
name=$(echo "$answer" | sed -n 's/^cdi //p')
{ [ -n "$name" ] && [ "$(echo "$name" | wc -l)" -eq 1 ]; } ||
  fail "expected one CDI device in the answer, got: $answer"
spec="$work/root/var/run/cdi/gpulet.dev-gpu.yaml"
[ -f "$spec" ] || fail "gpulet serve wrote no spec at $spec: $(ls -la "$work/root/var/run/cdi")"
grep -q "^kind: ${name%%=*}$" "$spec" || fail "the spec's kind is not that of $name"
podman_link_spec "$spec"

step "podman run --device $name"
check='
  fail() { echo "inside: $*"; exit 1; }
  test -c /dev/nvidia0 || fail "/dev/nvidia0 is not a character device"
  test ! -e /dev/nvidia1 || fail "/dev/nvidia1 is there but only the RTX 3080 was allocated"
  test -c /dev/nvidiactl || fail "/dev/nvidiactl missing"
  test -e /usr/local/lib/libnvidia-ml.so.1 || fail "libnvidia-ml.so.1 missing"
  [ "$(readlink /usr/local/lib/libnvidia-ml.so.1)" = libnvidia-ml.so.570.133.20 ] ||
    fail "libnvidia-ml.so.1 -> $(readlink /usr/local/lib/libnvidia-ml.so.1)"
  test -f /usr/local/lib/libnvidia-ml.so.570.133.20 || fail "libnvidia-ml not mounted"
  test ! -e /usr/local/lib/libc.so.6 || fail "the host glibc leaked into the container"
  echo "inside: /dev/nvidia0 and libnvidia-ml.so.1 present"
'
out=$(podman_run --device "$name" "$image" sh -c "$check" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "podman run --device $name exited $rc"
grep -q "create-symlinks .*libnvidia-ml.so.$ver::/usr/local/lib/libnvidia-ml.so.1" "$work/hook.log" ||
  fail "create-symlinks hook lacks the soname link: $(cat "$work/hook.log")"

step "the spec stays when gpulet stops"
kill "$serve_pid"
wait "$serve_pid"
serve_pid=""
[ -f "$spec" ] || fail "gpulet serve removed its spec on SIGTERM; restarting containers need it"
grep -q "CDI spec for gpulet.dev/gpu written to /var/run/cdi/gpulet.dev-gpu.yaml" "$work/serve.log" ||
  fail "serve did not log where it wrote the spec"
echo "PASS"
