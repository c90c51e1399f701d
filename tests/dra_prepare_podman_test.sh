#!/bin/bash
# DRA prepare → podman → unprepare, the path a pod with a ResourceClaim takes on a real node:
# the API-server stand-in holds a claim allocated to the homelab node's RTX 5090 (gpu-1);
# the kubelet's DRA stand-in calls NodePrepareResources over gpulet's real sockets
# (KubeletPlugin → PreparedClaims → KubeClaimPreparer, in tests/dra_prepare_standin.cc); the
# CDI ID it gets back is handed to a real `podman run --device` (Debian 12's podman 4.3),
# which must resolve it in the claim's spec file, and the container must see /dev/nvidia1
# and not the RTX 3080's /dev/nvidia0. Then a second stand-in process (gpulet restarted, the
# claim deleted from the API server) calls NodeUnprepareResources, which must remove the spec.
#
# The node: a copy of the homelab fixture root as the host root; character devices made with
# /dev/null's numbers as the dev root (podman stats every host node); a copy of the fixture's
# driver files as the driver root; a hook stand-in that records its arguments. podman 4.3 reads
# only /etc/cdi and /var/run/cdi, so /etc/cdi gets a symlink to the claim's spec file.
#
# Usage: dra_prepare_podman_test.sh DRA_PREPARE_STANDIN SOURCE_DIR
# Exit: 0 pass, 1 fail, 77 skipped (not root, or podman cannot run containers here).
set -u

standin=${1:?usage: dra_prepare_podman_test.sh DRA_PREPARE_STANDIN SOURCE_DIR}
src=${2:?usage: dra_prepare_podman_test.sh DRA_PREPARE_STANDIN SOURCE_DIR}

fail() { echo "FAIL: $*"; exit 1; }
# shellcheck source=tests/podman_lib.sh
. "$(dirname "$0")/podman_lib.sh"
podman_require

podman_setup dra-podman json
uid="uid-dra-podman-$$"

step "a host root, a driver root and a hook stand-in"
cp -a "$src/sim/fixtures/homelab/root" "$work/root" || fail "copying the fixture root failed"
rm -f "$work/root/var/run/cdi/"*
mkdir -p "$work/driver"
cp -a "$src/sim/fixtures/homelab/root/usr" "$work/driver/" || fail "copying driver files failed"
cat >"$work/hook" <<HOOK
#!/bin/sh
echo "\$*" >>"$work/hook.log"
cat >/dev/null
HOOK
chmod 0755 "$work/hook"
args=("$work" "$work/root" "$work/devroot" "$work/driver" "$work/hook" gpu-1 "$uid")

step "NodePrepareResources through the kubelet's DRA stand-in"
answer=$("$standin" prepare "${args[@]}" 2>&1) || fail "prepare: $answer"
echo "$answer"
name=$(echo "$answer" | sed -n 's/^cdi //p')
[ "$name" = "gpulet.dev/claim=$uid-gpu-1" ] || fail "expected the CDI ID gpulet.dev/claim=$uid-gpu-1, got: $answer"
spec="$work/root/var/run/cdi/gpulet.dev-claim_$uid.json"
[ -f "$spec" ] || fail "no claim spec at $spec: $(ls -la "$work/root/var/run/cdi")"
[ "$(stat -c %a "$spec")" = 644 ] || fail "the spec's mode is $(stat -c %a "$spec"), not 644"
[ -f "$work/checkpoint.json" ] || fail "the prepared claim is not checkpointed"
podman_link_spec "$spec"

step "podman run --device $name"
check='
  fail() { echo "inside: $*"; exit 1; }
  test -c /dev/nvidia1 || fail "/dev/nvidia1 is not a character device"
  test ! -e /dev/nvidia0 || fail "/dev/nvidia0 is there but only the RTX 5090 was allocated"
  test -c /dev/nvidiactl || fail "/dev/nvidiactl missing"
  [ "$GPULET_DRA_CLAIM" = ml/dra-podman ] || fail "GPULET_DRA_CLAIM is \"$GPULET_DRA_CLAIM\""
  test -f /usr/local/lib/libnvidia-ml.so.570.133.20 || fail "libnvidia-ml not mounted"
  ls /dev
  echo "inside: /dev/nvidia1 and no other GPU"
'
out=$(podman_run --device "$name" "$image" sh -c "$check" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "podman run --device $name exited $rc"
grep -q "update-ldcache" "$work/hook.log" || fail "the spec's hooks did not run: $(cat "$work/hook.log" 2>&1)"

step "NodeUnprepareResources from a restarted gpulet, the claim deleted"
answer=$("$standin" unprepare "${args[@]}" 2>&1) || fail "unprepare: $answer"
echo "$answer"
[ ! -e "$spec" ] || fail "the claim's spec $spec is still there after unprepare"
out=$(podman_run --device "$name" "$image" true 2>&1) &&
  fail "podman still resolves $name after unprepare: $out"
echo "podman after unprepare: $out"
echo "PASS"
