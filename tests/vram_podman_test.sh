#!/bin/bash
# VRAM enforcement end to end through a real container runtime: gpulet's DRA prepare path
# (tests/dra_prepare_standin.cc) prepares a claim holding a 4 GiB memory share of the homelab
# RTX 5090; its CDI spec is handed to a real `podman run --device` with an image that knows
# nothing of gpulet (a CUDA application, glibc, and the CUDA driver stand-in in place of the
# host's driver libraries); inside, the application sees 4 GiB as the card's memory and is
# refused past it, though the card has 16 GiB. Then NodeUnprepareResources removes the
# claim's slice directory with its spec.
#
# Usage: vram_podman_test.sh DRA_PREPARE_STANDIN SOURCE_DIR VRAM_TEST_DIR VRAM_LIB
# Exit: 0 pass, 1 fail, 77 skipped (not root, or podman cannot run containers here).
set -u

standin=${1:?usage: vram_podman_test.sh DRA_PREPARE_STANDIN SOURCE_DIR VRAM_TEST_DIR VRAM_LIB}
src=${2:?usage}
vram_dir=${3:?usage}
vram_lib=${4:?usage}

fail() { echo "FAIL: $*"; exit 1; }
# shellcheck source=tests/podman_lib.sh
. "$(dirname "$0")/podman_lib.sh"
podman_require

podman_setup vram-podman json
uid="uid-vram-podman-$$"
app_image="localhost/gpulet-vram-app-test:$$"
trap 'podman rmi -f "$app_image" >/dev/null 2>&1; podman_cleanup' EXIT

step "an application image: the test application, its glibc and the driver stand-in"
app_root="$work/app-rootfs"
mkdir -p "$app_root/usr/lib" "$app_root/bin" "$app_root/tmp"
cp "$vram_dir/vram_app" "$app_root/bin/vram_app" || fail "copying vram_app failed"
cp "$vram_dir/libcuda.so.1" "$vram_dir/libnvidia-ml.so.1" "$app_root/usr/lib/" ||
  fail "copying the driver stand-in failed"
# The loader and glibc the application links, at the paths it names, and the loader under
# its soname in the library directory too, as Debian's and Ubuntu's images have it (a second
# link namespace, the audit library's, finds it by name).
for lib in $(ldd "$vram_dir/vram_app" | grep -o '/[^ ]*'); do
  mkdir -p "$app_root$(dirname "$lib")"
  cp -L "$lib" "$app_root$lib" || fail "copying $lib failed"
  case $lib in
    */ld-linux*) mkdir -p "$app_root/lib/x86_64-linux-gnu" && cp -L "$lib" "$app_root/lib/x86_64-linux-gnu/" ;;
  esac
done
tar -C "$app_root" -cf "$work/app.tar" . || fail "tar of the application image failed"
out=$(podman import "$work/app.tar" "$app_image" 2>&1) || skip "podman import failed: $out"

step "a host root, a driver root and a hook stand-in"
cp -a "$src/sim/fixtures/homelab/root" "$work/root" || fail "copying the fixture root failed"
rm -f "$work/root/var/run/cdi/"*
mkdir -p "$work/driver"
cp -a "$src/sim/fixtures/homelab/root/usr" "$work/driver/" || fail "copying driver files failed"
printf '#!/bin/sh\ncat >/dev/null\n' >"$work/hook"
chmod 0755 "$work/hook"
args=("$work" "$work/root" "$work/devroot" "$work/driver" "$work/hook" gpu-1 "$uid")

step "NodePrepareResources for a claim holding 4096Mi of the RTX 5090"
answer=$(GPULET_STANDIN_SHARE=4096Mi GPULET_STANDIN_VRAM_LIB="$vram_lib" \
  "$standin" prepare "${args[@]}" 2>&1) || fail "prepare: $answer"
echo "$answer"
name=$(echo "$answer" | sed -n 's/^cdi //p')
[ -n "$name" ] || fail "no CDI ID in: $answer"
spec="$work/root/var/run/cdi/gpulet.dev-claim_$uid.json"
[ -f "$spec" ] || fail "no claim spec at $spec"
grep -q LD_AUDIT "$spec" || fail "the claim's spec does not load the enforcement library: $(cat "$spec")"
slice="$work/vram/claim-$uid/slice"
[ -f "$slice" ] || fail "no slice file at $slice"
[ "$(stat -c %a "$slice")" = 666 ] || fail "the slice file's mode is $(stat -c %a "$slice")"
podman_link_spec "$spec"

step "podman run --device $name: the application sees its 4 GiB and no more"
out=$(podman_run --device "$name" -e GPULET_CUDA_STANDIN_STATE=/tmp/card \
  -e GPULET_CUDA_STANDIN_TOTAL_MIB=16384 "$app_image" /bin/vram_app fill proc 512 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "podman run exited $rc"
for want in total_mib=4096 free_mib=4096 device_total_mib=4096 allocated_mib=4096 last_rc=2 \
  free_errors=0; do
  echo "$out" | grep -q "$want" || fail "expected $want inside the container"
done
echo "$out" | grep -q "refused with CUDA_ERROR_OUT_OF_MEMORY" || fail "no refusal line on stderr"

step "the same image without the claim's edits takes the whole card (the control)"
out=$(podman_run -e GPULET_CUDA_STANDIN_STATE=/tmp/card -e GPULET_CUDA_STANDIN_TOTAL_MIB=16384 \
  "$app_image" /bin/vram_app fill proc 512 2>&1)
echo "$out"
echo "$out" | grep -q allocated_mib=16384 || fail "without gpulet the application should take 16384 MiB"

step "NodeUnprepareResources removes the slice directory with the spec"
answer=$(GPULET_STANDIN_SHARE=4096Mi GPULET_STANDIN_VRAM_LIB="$vram_lib" \
  "$standin" unprepare "${args[@]}" 2>&1) || fail "unprepare: $answer"
[ ! -e "$spec" ] || fail "the claim's spec is still there"
[ ! -e "$work/vram/claim-$uid" ] || fail "the claim's slice directory is still there"
echo "PASS"
