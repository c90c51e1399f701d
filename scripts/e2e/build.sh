#!/usr/bin/env bash
# Builds the real Kubernetes peers the e2e suite runs against, from their own Go modules at pinned
# versions, into a cache outside the clone. A second run finds the binaries and builds nothing.
#
#   scripts/e2e/build.sh K8S_VERSION...   the cluster's components for each version, and the tools
#                                         e.g. scripts/e2e/build.sh v1.34.4 v1.37.2
#   scripts/e2e/build.sh --tools          only the tools `make test` needs (kustomize, helm,
#                                         talos-validate-v1.N for each Talos release, and
#                                         talos-apid-standin)
#
# Cache: $GPULET_E2E_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/gpulet-e2e), one directory per
# component and version, each with a `.done` stamp written last that records how it was built
# (a build cut short, or built another way, is redone). The tools are linked from $CACHE/bin.
# The pins below are the versions docs/e2e.md says are tested; change them together.
set -euo pipefail

ETCD_VERSION=v3.6.16
CONTAINERD_VERSION=v2.2.9
RUNC_VERSION=v1.4.4
CRICTL_VERSION=v1.34.0
KUSTOMIZE_VERSION=v5.7.1
HELM_VERSION=v4.3.2
# Talos' machine-config code, one release each: the newest patch of each minor that the Go
# module proxy serves (tests/talos/validate.go is built against each).
TALOS_MACHINERY_VERSIONS="v1.8.3 v1.9.5 v1.10.6 v1.11.5 v1.12.1 v1.13.0 v1.14.1"
# Two modules v1.14.1 pins are not served by the proxy (403): the nearest served versions stand
# in (a patch release below, and the revision v1.13.0 pins); the configuration code gpulet's
# checks run does not depend on what changed between them.
REPLACES_v1_14_1="replace (
  github.com/cosi-project/runtime => github.com/cosi-project/runtime v1.16.2
  github.com/jsimonetti/rtnetlink/v2 => github.com/jsimonetti/rtnetlink/v2 v2.2.1-0.20260317095713-310581b9c6ac
)"
# The machinery tests/talos/apid_standin.go is built against: its certificates and
# talosconfigs are this release's (the apid and machined it mirrors are v1.13.9's; the machinery
# code it calls is the same in both).
TALOS_APID_STANDIN_VERSION=v1.13.0
PROMETHEUS_OPERATOR_VERSION=v0.85.0
CNI_PLUGINS_VERSION=v1.9.1

CACHE=${GPULET_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpulet-e2e}
export PATH=/usr/local/go/bin:$PATH
export GOFLAGS=-buildvcs=false

tools_only=false
if [[ ${1:-} == --tools ]]; then
  tools_only=true
  shift
fi
$tools_only || [[ $# -ge 1 ]] || { echo "usage: $0 K8S_VERSION... | --tools (for example v1.34.4 v1.37.2)" >&2; exit 2; }
command -v go >/dev/null || { echo "e2e build: no go on PATH (Go 1.26 is expected at /usr/local/go/bin)" >&2; exit 1; }

# The tools `make test` runs (kustomize, helm, talos-validate) are built without the Go
# compiler's optimizations and inlining: make test builds them from a clean clone, where that
# cuts helm's build from 128 s to 102 s and a Talos validator's from 46 s to 38 s, and their
# runs in the tests take as long either way (a validation 1.8 s against 2.0 s; 2026-12-06).
# The Kubernetes components keep the release build's optimizations: they serve real load.
TOOL_GCFLAGS="all=-N -l"

# build_module NAME VERSION MODULE@VERSION "package[:binary]..." [go.mod lines] [tags] [cgo]
#   [ldflags] [gcflags]
# Builds each package from a throwaway consumer module that requires MODULE at VERSION; the
# binary is named after the package's last element unless ":binary" names it.
build_module() {
  local name=$1 version=$2 module=$3 packages=$4 extra=${5:-} tags=${6:-} cgo=${7:-0}
  local ldflags="-s -w ${8:-}" gcflags=${9:-}
  local out="$CACHE/$name-$version" p bin missing=""
  # The stamp holds how the binaries were built: another recipe rebuilds them all.
  local recipe="tags=$tags cgo=$cgo ldflags=$ldflags gcflags=$gcflags"
  [[ -f $out/.done && $(cat "$out/.done") == "$recipe" ]] || rm -f "$out/.done" "$out"/bin/*
  for p in $packages; do
    bin=${p##*/}
    [[ $p == *:* ]] && bin=${p##*:}
    [[ -x $out/bin/$bin ]] || missing="$missing $p"
  done
  if [[ -f $out/.done && -z $missing ]]; then
    echo "e2e build: $name $version cached in $out"
    return
  fi
  echo "e2e build: building$missing ($name $version) into $out"
  local start=$SECONDS
  rm -f "$out/.done"
  mkdir -p "$out/bin" "$out/src"
  {
    echo "module gpulet.invalid/e2e/$name"
    echo "go 1.24"
    echo "require ${module%@*} ${module#*@}"
    printf '%s\n' "$extra"
  } >"$out/src/go.mod"
  {
    echo "//go:build tools"
    echo "package tools"
    for p in $packages; do echo "import _ \"${p%%:*}\""; done
  } >"$out/src/tools.go"
  (cd "$out/src" && go mod tidy -e >/dev/null 2>"$out/tidy.log" || { cat "$out/tidy.log" >&2; exit 1; })
  for p in $missing; do
    bin=${p##*/}
    [[ $p == *:* ]] && bin=${p##*:}
    (cd "$out/src" && CGO_ENABLED=$cgo go build -trimpath -tags "$tags" -ldflags "$ldflags" -gcflags "$gcflags" \
      -o "$out/bin/${bin%%:*}" "${p%%:*}")
  done
  echo "$recipe" >"$out/.done"
  echo "e2e build: $name $version built in $((SECONDS - start)) s"
}

# k8s.io/kubernetes cannot be built by `go install pkg@version`: its go.mod replaces every staging
# module with a local path. A consumer module requires it and points each staging module at the
# published k8s.io/<name> v0.N.P instead (kubernetes/kubernetes issue 79384).
kubernetes_replaces() {
  local version=$1 gomod
  gomod=$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
  local staging=v0.${version#v1.}
  echo "replace ("
  sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/k8s.io/.*#\1#p' "$gomod" |
    while read -r mod; do echo "  $mod => $mod $staging"; done
  echo ")"
}

# What `kubectl version` and the components report (the values the release build stamps), so
# version checks and skew warnings see the real version, not v0.0.0-master.
kubernetes_version_flags() {
  local v=$1 minor
  minor=${v#v1.}
  minor=${minor%%.*}
  local pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    printf -- '-X %s.gitVersion=%s -X %s.gitMajor=1 -X %s.gitMinor=%s -X %s.gitTreeState=clean ' \
      "$pkg" "$v" "$pkg" "$pkg" "$minor" "$pkg"
  done
}

# A tool under a stable path: $CACHE/bin/NAME.
link_tool() {
  mkdir -p "$CACHE/bin"
  ln -sfn "$CACHE/$1-$2/bin/$1" "$CACHE/bin/$1"
}

build_module kustomize "$KUSTOMIZE_VERSION" "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION" \
  "sigs.k8s.io/kustomize/kustomize/v5:kustomize" "" "" 0 "" "$TOOL_GCFLAGS"
link_tool kustomize "$KUSTOMIZE_VERSION"
build_module helm "$HELM_VERSION" "helm.sh/helm/v4@$HELM_VERSION" "helm.sh/helm/v4/cmd/helm" "" "" 0 "" \
  "$TOOL_GCFLAGS"
link_tool helm "$HELM_VERSION"

# build_go_tool TOOL PATH MODULE VERSION LINK: PATH (a package main under tests/) built
# against the Go module MODULE at VERSION into $CACHE/TOOL-VERSION, linked as $CACHE/bin/LINK.
# The stamp holds the source's hash, so an edit of the source rebuilds it. More go.mod lines
# for the module's dependencies (replace or require) come from the variable
# REPLACES_<VERSION with . as _>, when set.
build_go_tool() {
  local tool=$1 file=$2 module=$3 version=$4 link=$5 out src recipe start=$SECONDS
  out="$CACHE/$tool-$version"
  src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/$file"
  local replaces_var="REPLACES_${version//./_}"
  local replaces=${!replaces_var:-}
  recipe="$file $(sha256sum "$src" | cut -c1-16) $(printf '%s' "$replaces" | sha256sum | cut -c1-8) gcflags=$TOOL_GCFLAGS"
  if [[ -f $out/.done && $(cat "$out/.done") == "$recipe" && -x $out/bin/$tool ]]; then
    echo "e2e build: $tool $version cached in $out"
  else
    echo "e2e build: building $tool against $module $version into $out"
    rm -rf "$out"
    mkdir -p "$out/bin" "$out/src"
    cp "$src" "$out/src/main.go"
    {
      echo "module gpulet.invalid/e2e/$tool"
      echo "go 1.24"
      echo "require $module $version"
      printf '%s\n' "$replaces"
    } >"$out/src/go.mod"
    # -e: the proxy lacks some modules that only the packages' own tests import.
    (cd "$out/src" && go mod tidy -e >/dev/null 2>"$out/tidy.log" || { cat "$out/tidy.log" >&2; exit 1; })
    (cd "$out/src" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -gcflags "$TOOL_GCFLAGS" \
      -o "$out/bin/$tool" .)
    echo "$recipe" >"$out/.done"
    echo "e2e build: $tool $version built in $((SECONDS - start)) s"
  fi
  mkdir -p "$CACHE/bin"
  ln -sfn "$out/bin/$tool" "$CACHE/bin/$link"
}
# build_talos_tool TOOL SOURCE VERSION LINK: tests/talos/SOURCE against Talos' machinery.
build_talos_tool() {
  build_go_tool "$1" "tests/talos/$2" github.com/siderolabs/talos/pkg/machinery "$3" "$4"
}
# The modules under Talos' configuration code that take no part in reading or checking a
# configuration (gRPC, protobuf, logging, golang.org/x) are taken for every release at the
# newest release's versions, so that the go build cache compiles them once, not once per
# release: the six older validators then build in 63 s where they took 196 s, a clean clone's
# make test being mostly compile (two cores, 2026-12-08). What decodes and validates (the
# machinery itself, its YAML libraries, siderolabs' helpers, CEL, the COSI runtime) stays at
# each release's own versions.
TALOS_SHARED_MODULES="google.golang.org/grpc google.golang.org/protobuf
  google.golang.org/genproto/googleapis/api google.golang.org/genproto/googleapis/rpc
  golang.org/x/net golang.org/x/sys golang.org/x/text go.uber.org/zap
  github.com/planetscale/vtprotobuf github.com/grpc-ecosystem/grpc-gateway/v2"
talos_shared_requires() {
  local newest=${TALOS_MACHINERY_VERSIONS##* } gomod m
  gomod=$(go mod download -json "github.com/siderolabs/talos/pkg/machinery@$newest" |
    sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
  echo "require ("
  for m in $TALOS_SHARED_MODULES; do
    awk -v m="$m" '$1 == m { print "  " $1 " " $2 }' "$gomod"
  done
  echo ")"
}
shared_requires=$(talos_shared_requires)
[[ $(grep -c '^  ' <<<"$shared_requires") -eq $(wc -w <<<"$TALOS_SHARED_MODULES") ]] || {
  echo "e2e build: Talos machinery ${TALOS_MACHINERY_VERSIONS##* } does not require every module of TALOS_SHARED_MODULES:" >&2
  echo "$shared_requires" >&2
  exit 1
}
for v in $TALOS_MACHINERY_VERSIONS; do
  replaces_var="REPLACES_${v//./_}"
  declare "$replaces_var=$shared_requires
${!replaces_var:-}"
done
# talos-validate-v1.N: tests/talos/validate.go, once per Talos release.
for v in $TALOS_MACHINERY_VERSIONS; do build_talos_tool talos-validate validate.go "$v" "talos-validate-${v%.*}"; done
# talos-apid-standin: tests/talos/apid_standin.go, a stand-in for a Talos node's API, built
# against the machinery of the release whose apid and machined it mirrors.
build_talos_tool talos-apid-standin apid_standin.go "$TALOS_APID_STANDIN_VERSION" talos-apid-standin
# amconfig: tests/monitoring/amconfig.go, the Prometheus Operator's own AlertmanagerConfig
# validation and conversion (tests/amtool_routes_test.sh). Its Kubernetes libraries (client-go,
# apimachinery, api) and every other module helm requires are taken at helm's versions, so that
# the go build cache has compiled nearly all of it for helm already: 17 s after helm where it
# takes 87 s alone, a clean clone's make test being mostly compile (two cores, 2026-12-07).
# The operator's own packages, the ones the test runs, stay at its release; the Kubernetes
# libraries under them are newer than its own go.mod's (v0.33), which builds and keeps the
# decoding those packages call.
helm_requires() {
  local gomod
  gomod=$(go mod download -json "helm.sh/helm/v4@$HELM_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
  echo "require ("
  sed -n '/^require (/,/^)/{/^require (/d;/^)/d;s#[[:space:]]*//.*##;/^[[:space:]]*$/d;p}' "$gomod"
  echo ")"
}
declare "REPLACES_${PROMETHEUS_OPERATOR_VERSION//./_}=$(helm_requires)"
build_go_tool amconfig tests/monitoring/amconfig.go \
  github.com/prometheus-operator/prometheus-operator "$PROMETHEUS_OPERATOR_VERSION" amconfig
$tools_only && exit 0

for k in "$@"; do
  [[ $k =~ ^v1\.[0-9]+\.[0-9]+$ ]] || { echo "e2e build: '$k' is not a Kubernetes version like v1.34.4" >&2; exit 2; }
  build_module kubernetes "$k" "k8s.io/kubernetes@$k" \
    "k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl" \
    "$(kubernetes_replaces "$k")" "" 0 "$(kubernetes_version_flags "$k")"
done
build_module etcd "$ETCD_VERSION" "go.etcd.io/etcd/server/v3@$ETCD_VERSION" "go.etcd.io/etcd/server/v3:etcd"
build_module containerd "$CONTAINERD_VERSION" "github.com/containerd/containerd/v2@$CONTAINERD_VERSION" \
  "github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 github.com/containerd/containerd/v2/cmd/ctr" \
  "" "no_btrfs no_devmapper no_zfs"
build_module runc "$RUNC_VERSION" "github.com/opencontainers/runc@$RUNC_VERSION" "github.com/opencontainers/runc" "" seccomp 1
build_module cni-plugins "$CNI_PLUGINS_VERSION" "github.com/containernetworking/plugins@$CNI_PLUGINS_VERSION" \
  "github.com/containernetworking/plugins/plugins/main/bridge github.com/containernetworking/plugins/plugins/main/loopback github.com/containernetworking/plugins/plugins/ipam/host-local github.com/containernetworking/plugins/plugins/meta/portmap"
build_module crictl "$CRICTL_VERSION" "sigs.k8s.io/cri-tools@$CRICTL_VERSION" "sigs.k8s.io/cri-tools/cmd/crictl"
