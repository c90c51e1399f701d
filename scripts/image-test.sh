#!/bin/bash
# Runs gpulet's image under podman and checks it: the version matches the binary `make`
# built, the simulator works inside it, `gpulet doctor` reads a fixture host root mounted in,
# it runs as a non-root user, has no shell, and is at most 20 MB (issue 13's target).
# Usage: scripts/image-test.sh IMAGE_REF HOST_GPULET_BINARY
set -uo pipefail

image=${1:?usage: image-test.sh IMAGE_REF HOST_GPULET_BINARY}
host_gpulet=${2:?usage: image-test.sh IMAGE_REF HOST_GPULET_BINARY}
src=$(cd "$(dirname "$0")/.." && pwd)
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
# runc and explicit rlimits: podman 4.3's defaults fail on some hosts (as in podman_cdi_test.sh).
run() {
  podman --runtime runc --cgroup-manager cgroupfs run --rm --network none \
    --ulimit nofile=20000:20000 --ulimit nproc=1000:1000 "$@"
}

podman image exists "$image" || { echo "image-test: $image does not exist; run make image" >&2; exit 1; }

want=$("$host_gpulet" version)
got=$(run "$image" version 2>&1)
[ "$got" = "$want" ] && ok "version: $got" || bad "version: image says '$got', make's binary says '$want'"

list=$(run "$image" --simulate homelab list 2>&1)
if grep -q "RTX 3080" <<< "$list" && grep -q "RTX 5090" <<< "$list"; then
  ok "--simulate homelab list shows both GPUs"
else
  bad "--simulate homelab list: $list"
fi

root="$src/tests/fixtures/hostroots/blackwell-proprietary"
doctor=$(run -v "$root:/host:ro" "$image" doctor --host-root /host 2>&1)
code=$?
# That fixture is the field report's RTX 5090 with the proprietary modules: doctor must
# find it (exit 3: a check failed) and name the open modules; any other exit is a crash, a
# usage error (2) or a missed finding.
if [ "$code" = 3 ] && grep -q "needs the open kernel modules" <<< "$doctor"; then
  ok "doctor --host-root on a fixture root finds the RTX 5090 module problem (exit 3)"
else
  bad "doctor --host-root exited $code: $doctor"
fi

user=$(podman image inspect --format '{{.Config.User}}' "$image")
[ "$user" = "65532:65532" ] && ok "runs as $user" || bad "default user is '$user', not 65532:65532"

shell=$(run --entrypoint /bin/sh "$image" -c true 2>&1)
if [ $? -ne 0 ] && grep -qiE "not found|no such file" <<< "$shell"; then
  ok "no shell in the image"
else
  bad "the image has a shell, or the check could not run: $shell"
fi

size=$(podman image inspect --format '{{.Size}}' "$image")
mb=$(awk -v s="$size" 'BEGIN { printf "%.2f", s / 1000000 }')
[ "$size" -le 20000000 ] && ok "size ${mb} MB (<= 20 MB)" || bad "size ${mb} MB is over 20 MB"

[ "$fail" = 0 ] && echo "image-test: all checks passed" || echo "image-test: some checks failed"
exit "$fail"
