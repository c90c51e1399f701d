#!/bin/bash
# A real CDI consumer reads a spec gpulet wrote: podman (Debian 12's 4.3, which vendors CDI
# library 0.5.x and so accepts cdiVersion up to 0.5.0, strictly) runs a busybox container
# with `--device <kind>=0` and the test checks inside that the device node, the environment
# and the library mounts arrived, and outside that the hooks ran with the right arguments.
#
# No GPU is needed: `gpulet --simulate homelab cdi generate` supplies the GPUs, --dev-root
# points at character devices made here with /dev/null's numbers (podman stats every host
# device node), --driver-root at a copy of the fixture's driver files, --hook-path at a
# stub that records its arguments. podman 4.3 has no --cdi-spec-dir, so the spec goes into
# /etc/cdi under a kind of its own and is removed afterwards.
#
# Usage: podman_cdi_test.sh GPULET_BINARY SOURCE_DIR
# Exit: 0 pass, 1 fail, 77 skipped (not root, or podman cannot run containers here).
set -u

gpulet=${1:?usage: podman_cdi_test.sh GPULET_BINARY SOURCE_DIR}
src=${2:?usage: podman_cdi_test.sh GPULET_BINARY SOURCE_DIR}

fail() { echo "FAIL: $*"; exit 1; }
# shellcheck source=tests/podman_lib.sh
. "$(dirname "$0")/podman_lib.sh"
podman_require
podman --help 2>/dev/null | grep -q -- '--cdi-spec-dir' && has_spec_dir_flag=1 || has_spec_dir_flag=0

work=$(mktemp -d /tmp/gpulet-podman-cdi.XXXXXX)
class="gpu$$"
kind="test.gpulet.dev/$class"
image="localhost/gpulet-cdi-test:$$"
if [ "$has_spec_dir_flag" = 1 ]; then spec_dir="$work/cdi"; else spec_dir=/etc/cdi; fi
spec="$spec_dir/gpulet-podman-test-$$.yaml"
spec_v6="$spec_dir/gpulet-podman-test-$$-v6.yaml"
created_spec_dir=0
[ -d "$spec_dir" ] || { mkdir -p "$spec_dir" && created_spec_dir=1; }
cleanup() {
  rm -f "$spec" "$spec_v6"
  [ "$created_spec_dir" = 1 ] && rmdir "$spec_dir" 2>/dev/null
  podman rmi -f "$image" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
cdi_flags=()
[ "$has_spec_dir_flag" = 1 ] && cdi_flags=(--cdi-spec-dir "$spec_dir")

podman_busybox_image "$image"
podman_fake_dev_root

step "copying the homelab fixture's driver files to a driver root"
mkdir -p "$work/driver"
cp -a "$src/sim/fixtures/homelab/root/usr" "$work/driver/" || fail "copying driver files failed"

cat >"$work/hook" <<EOF
#!/bin/sh
# Stands in for nvidia-cdi-hook: records how the runtime called it.
echo "\$*" >>"$work/hook.log"
exit 0
EOF
chmod 0755 "$work/hook"

step "generating the spec with gpulet"
gen=("$gpulet" --simulate homelab --sim-state "$work/sim-state.json" cdi generate
     --dev-root "$work/devroot" --driver-root "$work/driver" --hook-path "$work/hook")
"${gen[@]}" --cdi-version 0.5.0 --kind "$kind" --output "$spec" ||
  fail "gpulet cdi generate failed"
sed -n '1,12p' "$spec"

step "podman run --device $kind=0"
check='
  fail() { echo "inside: $*"; exit 1; }
  test -c /dev/nvidia0 || fail "/dev/nvidia0 is not a character device"
  test ! -e /dev/nvidia1 || fail "/dev/nvidia1 is there but only GPU 0 was requested"
  test -c /dev/nvidiactl || fail "/dev/nvidiactl missing"
  test -c /dev/nvidia-uvm || fail "/dev/nvidia-uvm missing"
  [ "$NVIDIA_VISIBLE_DEVICES" = void ] || fail "NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES"
  test -f /usr/local/lib/libnvidia-ml.so.570.133.20 || fail "libnvidia-ml not mounted"
  test -f /usr/local/lib/libcuda.so.570.133.20 || fail "libcuda not mounted"
  test ! -e /usr/local/lib/libc.so.6 || fail "the host glibc leaked into the container"
  test -f /usr/local/bin/nvidia-smi || fail "nvidia-smi not mounted"
  test -f /usr/lib/firmware/nvidia/570.133.20/gsp_ga10x.bin || fail "firmware not mounted"
  echo "inside: device node, environment and mounts present"
'
out=$(podman_run "${cdi_flags[@]}" --device "$kind=0" "$image" sh -c "$check" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "podman run with $kind=0 exited $rc"
grep -q "update-ldcache --folder /usr/local/lib" "$work/hook.log" ||
  fail "update-ldcache hook did not run as expected: $(cat "$work/hook.log" 2>/dev/null)"
grep -q "create-symlinks --link libcuda.so.1::/usr/local/lib/libcuda.so" "$work/hook.log" ||
  fail "create-symlinks hook did not run as expected: $(cat "$work/hook.log")"
echo "hooks ran: $(tr '\n' ';' <"$work/hook.log")"

step "podman run --device $kind=all and by UUID"
out=$(podman_run "${cdi_flags[@]}" --device "$kind=all" "$image" \
  sh -c 'test -c /dev/nvidia0 && test -c /dev/nvidia1 && echo both' 2>&1) ||
  fail "podman run with $kind=all: $out"
[ "$out" = both ] || fail "unexpected output for =all: $out"
uuid=GPU-8a41d7b9-52c6-4f13-b0e8-7d2c9e155090
out=$(podman_run "${cdi_flags[@]}" --device "$kind=$uuid" "$image" \
  sh -c 'test -c /dev/nvidia1 && test ! -e /dev/nvidia0 && echo gpu1' 2>&1) ||
  fail "podman run with $kind=$uuid: $out"
[ "$out" = gpu1 ] || fail "unexpected output for the UUID device: $out"

step "an unknown device is refused"
if out=$(podman_run "${cdi_flags[@]}" --device "$kind=7" "$image" true 2>&1); then
  fail "podman accepted $kind=7, which the spec does not define"
fi
echo "refused as expected: $out"

step "podman 4.3 rejects a cdiVersion it does not know (why gpulet defaults to 0.5.0)"
"${gen[@]}" --kind "$kind-v6" --cdi-version 0.6.0 --output "$spec_v6" ||
  fail "gpulet cdi generate --cdi-version 0.6.0 failed"
if podman --version | grep -q ' 4\.'; then
  if out=$(podman_run "${cdi_flags[@]}" --device "$kind-v6=0" "$image" true 2>&1); then
    fail "podman 4 accepted a cdiVersion 0.6.0 spec; the 0.5.0 ceiling in the notes is wrong"
  fi
  echo "rejected as expected: $out"
fi

echo "PASS"
