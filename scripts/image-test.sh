#!/bin/bash
# Runs gpulet's image under podman and checks it: the version matches the binary `make`
# built, the simulator works inside it, `gpulet doctor` reads a fixture host root mounted in,
# it runs as a non-root user, has no shell, and is at most 20 MB (issue 13's target).
# Then the ways in without a registry of one's own (docs/no-registry.md), with the archive
# `make image` saved: `gpulet image-serve` serves it and podman pulls it from there by digest
# and runs it; skopeo copies the archive into a real registry (Debian's docker-registry) and
# the digest there is the archive's, so a manifest pinned to it works from either.
# Usage: scripts/image-test.sh IMAGE_REF HOST_GPULET_BINARY OCI_ARCHIVE
set -uo pipefail

image=${1:?usage: image-test.sh IMAGE_REF HOST_GPULET_BINARY}
host_gpulet=${2:?usage: image-test.sh IMAGE_REF HOST_GPULET_BINARY OCI_ARCHIVE}
archive=${3:?usage: image-test.sh IMAGE_REF HOST_GPULET_BINARY OCI_ARCHIVE}
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

# --- no registry: the archive, gpulet image-serve, a registry of one's own ----------------
work=$(mktemp -d /var/tmp/gpulet-image-test.XXXXXX)
pids=()
pulled=""
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null; done
  [ -n "$pulled" ] && podman rmi -f "$pulled" > /dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_http() {
  for _ in $(seq 100); do curl -fsS -o /dev/null "$1" 2> /dev/null && return 0; sleep 0.1; done
  return 1
}
index_digest() { tar -xOf "$1" index.json | python3 -c 'import json, sys; print(json.load(sys.stdin)["manifests"][0]["digest"])'; }

digest=$(cat "$archive.digest" 2> /dev/null)
if [ -f "$archive" ] && [ -n "$digest" ] && [ "$digest" = "$(index_digest "$archive")" ]; then
  ok "archive $archive, manifest $digest"
else
  bad "no archive $archive with its digest file; make image writes both"
fi

port=$(free_port)
"$host_gpulet" image-serve "$archive" --address "127.0.0.1:$port" > "$work/serve.log" 2>&1 &
pids+=($!)
if wait_http "http://127.0.0.1:$port/v2/"; then
  pulled="127.0.0.1:$port/gpulet@$digest"
  if podman pull --tls-verify=false "$pulled" > "$work/pull.log" 2>&1; then
    got=$(run "$pulled" version 2>&1)
    [ "$got" = "$want" ] && ok "podman pulled $pulled from gpulet image-serve and ran it: $got" ||
      bad "the image pulled from image-serve says '$got', not '$want'"
  else
    bad "podman could not pull $pulled from gpulet image-serve: $(tail -n 5 "$work/pull.log")"
  fi
  grep -qF "gpulet manifests --overlay talos --image $pulled" "$work/serve.log" &&
    ok "image-serve prints the pinned install command" ||
    bad "image-serve did not print the install command for $pulled: $(cat "$work/serve.log")"
else
  bad "gpulet image-serve did not start: $(cat "$work/serve.log")"
fi

rport=$(free_port)
# The test registry asks for no credentials: an empty auth file keeps skopeo from reading the
# user's (and failing where a rootless login has no runtime directory).
echo '{}' > "$work/auth.json"
printf 'version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: 127.0.0.1:%s\n' \
  "$work/registry" "$rport" > "$work/registry.yml"
docker-registry serve "$work/registry.yml" > "$work/registry.log" 2>&1 &
pids+=($!)
if wait_http "http://127.0.0.1:$rport/v2/"; then
  if skopeo copy --authfile "$work/auth.json" --preserve-digests --dest-tls-verify=false "oci-archive:$archive" \
    "docker://127.0.0.1:$rport/team/gpulet:0.1.0" > "$work/copy.log" 2>&1; then
    there=$(skopeo inspect --authfile "$work/auth.json" --tls-verify=false "docker://127.0.0.1:$rport/team/gpulet:0.1.0" |
      python3 -c 'import json, sys; print(json.load(sys.stdin)["Digest"])')
    [ "$there" = "$digest" ] && ok "skopeo copied the archive into a registry; its digest there is the archive's" ||
      bad "the registry has $there, the archive $digest"
  else
    bad "skopeo could not copy the archive into the registry: $(tail -n 5 "$work/copy.log")"
  fi
else
  bad "docker-registry did not start: $(tail -n 5 "$work/registry.log")"
fi

[ "$fail" = 0 ] && echo "image-test: all checks passed" || echo "image-test: some checks failed"
exit "$fail"
