#!/bin/sh
# Installs (as root) or lists (otherwise) the Debian 12 packages a make target needs.
# Usage: scripts/deps.sh GROUP...   groups: build test bench fuzz podman prometheus image e2e
# Exits 0 when everything is present, 1 when a non-root user must install something.
set -eu

pkgs_build="cmake ninja-build g++ pkg-config libabsl-dev libyaml-cpp-dev nlohmann-json3-dev \
libcli11-dev libspdlog-dev libelf-dev libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev \
protobuf-compiler libcpp-httplib-dev libssl-dev libmicrohttpd-dev libgnutls28-dev nettle-dev zlib1g-dev libunistring-dev libyaml-dev"
# clang-14, its sanitizer runtimes (libclang-rt-14-dev) and its linker (lld-14) for make
# test's sanitizer build, clang-tidy-14 for `make lint`'s checks (.clang-tidy), clang-format-14
# for its format check.
pkgs_test="libgtest-dev libgmock-dev clang-14 libclang-rt-14-dev lld-14 clang-tidy-14 clang-format-14 openssl"
pkgs_bench="libbenchmark-dev"
# libclang-rt-14-dev: clang's sanitizer and libFuzzer runtime archives (libclang_rt.*.a),
# which clang-14 alone does not bring.
pkgs_fuzz="clang-14 libfuzzer-14-dev libclang-rt-14-dev lld-14"
# The real CDI consumer test (tests/podman_cdi_test.sh): podman 4.3 runs here only with runc
# (crun fails on hybrid cgroups); busybox-static gives a registry-free local image.
# skopeo: the real registry client that pulls gpulet's image from `gpulet image-serve`
# (src/registry/registry_server_test.cc) and, in make image-test, copies it into a real
# registry (docker-registry, Debian's build of the distribution registry).
pkgs_podman="podman runc busybox-static skopeo"
# The real-Prometheus test and the metrics benchmark's peer and load generator;
# prometheus-alertmanager (amtool and Alertmanager) for tests/amtool_routes_test.sh.
pkgs_prometheus="prometheus prometheus-alertmanager curl python3"
pkgs_bench_peers="prometheus-node-exporter wrk curl"
# `make image`: podman builds, debootstrap (as root) or mmdebstrap with uidmap (rootless) makes
# the Debian 12 base without a registry.
pkgs_image="podman runc debootstrap mmdebstrap uidmap debian-archive-keyring skopeo docker-registry"
# `make e2e` (tests/e2e): the image's, plus what the real cluster needs on the host beside the
# components it builds with Go: iptables for kube-proxy, the CNI bridge's ip, openssl for its
# PKI, gcc (static) for the pause image, busybox-static for the workload image, PyYAML, libseccomp for runc.
pkgs_e2e="$pkgs_image iptables iproute2 openssl gcc libc6-dev libseccomp-dev pkg-config busybox-static curl python3 python3-yaml"

want=""
for group in "$@"; do
  case "$group" in
    build) want="$want $pkgs_build" ;;
    test) want="$want $pkgs_build $pkgs_test $pkgs_prometheus $pkgs_podman" ;;
    bench) want="$want $pkgs_build $pkgs_bench $pkgs_bench_peers" ;;
    fuzz) want="$want $pkgs_fuzz" ;;
    podman) want="$want $pkgs_podman" ;;
    prometheus) want="$want $pkgs_prometheus" ;;
    image) want="$want $pkgs_image" ;;
    e2e) want="$want $pkgs_e2e" ;;
    *) echo "deps.sh: unknown group '$group' (allowed: build test bench fuzz podman prometheus image e2e)" >&2; exit 2 ;;
  esac
done

missing=""
for p in $want; do
  case " $missing " in *" $p "*) continue ;; esac
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $p"
  fi
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
  echo "deps.sh: installing Debian packages:$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing
else
  echo "deps.sh: missing Debian packages. Install them with:" >&2
  echo "  sudo apt-get install -y$missing" >&2
  exit 1
fi
