#!/usr/bin/env bash
# Alert rules test: deploy/prometheus/gpulet-rules.yaml must name only series gpulet exports
# (checked against src/metrics/exposition.cc), pass `promtool check rules`, and pass its unit
# tests (deploy/prometheus/gpulet-rules_test.yaml) under `promtool test rules`; every alert
# carries the `component: gpulet` label that the Alertmanager example routes on (the example
# itself is tested by tests/amtool_routes_test.sh); and the DaemonSet's prometheus.io
# annotations name gpulet's metrics port and path.
# Usage: promtool_rules_test.sh [SOURCE_DIR]
# Exits 77 (skip) when promtool is missing, except under CI=true, where `make test` has
# installed Debian's prometheus (scripts/deps.sh test) and a missing promtool is a failure.
set -euo pipefail
src=$(cd "${1:-$(dirname "$0")/..}" && pwd)
rules=$src/deploy/prometheus/gpulet-rules.yaml
unit=$src/deploy/prometheus/gpulet-rules_test.yaml
exposition=$src/src/metrics/exposition.cc
values=$src/src/gpu/sample_values.cc  # the value table: the families of the GPU values
fail=0

for f in "$rules" "$unit" "$exposition" "$values"; do
  if [ ! -f "$f" ]; then echo "FAIL: $f not found"; exit 1; fi
done

# 1. Every DCGM_FI_* / gpulet_* name outside comments (expressions and the queries in
#    annotations) is a series name exposition.cc emits, i.e. appears as "NAME" there or in
#    the value table it exports from.
names=$(grep -v -E '^[[:space:]]*#' "$rules" |
  grep -o -E '(^|[^A-Za-z0-9_:])(DCGM_FI_[A-Z0-9_]+|gpulet_[a-z0-9_]+)' |
  sed -E 's/^[^A-Za-z]//' | sort -u)
if [ -z "$names" ]; then echo "FAIL: no series names found in $rules"; exit 1; fi
for n in $names; do
  if grep -q -F "\"$n\"" "$exposition" "$values"; then
    echo "ok   series $n is exported"
  else
    echo "FAIL series $n is used in gpulet-rules.yaml but not exported by src/metrics/exposition.cc"
    fail=1
  fi
done

# 2. The label values the rules match on are the ones gpulet writes.
throttle=$(grep -o -E 'gpulet_gpu_throttle_reason\{reason=~"[^"]+"' "$rules" | sed -E 's/.*=~"([^"]+)"/\1/' | tr '|' ' ')
if [ -z "$throttle" ]; then echo "FAIL: no throttle reasons found in $rules"; fail=1; fi
for r in $throttle; do
  if grep -q -F "\"$r\"" "$exposition"; then
    echo "ok   throttle reason $r is exported"
  else
    echo "FAIL throttle reason $r is not one exposition.cc writes"
    fail=1
  fi
done
if grep -q -F 'return "Unhealthy";' "$src/src/state/device_store.cc"; then
  echo "ok   health state Unhealthy is spelled as the rules expect"
else
  echo "FAIL HealthStateName no longer returns \"Unhealthy\" (src/state/device_store.cc)"
  fail=1
fi
if grep -q -F 'absl::StrCat("XID ", xid, " (",' "$src/src/health/xid_policy.cc"; then
  echo "ok   XID health reasons start with \"XID <code> (\" as GpuletFatalXid expects"
else
  echo "FAIL the XID health reason format changed (src/health/xid_policy.cc); update GpuletFatalXid"
  fail=1
fi
# Every alert sets component: gpulet (alertmanager-telegram.example.yml routes on it).
unlabelled=$(awk '
  /^[[:space:]]*- alert:/ { if (name != "" && !seen) print name; name = $3; seen = 0 }
  /^[[:space:]]*component: gpulet[[:space:]]*$/ { seen = 1 }
  END { if (name != "" && !seen) print name }' "$rules")
alerts=$(grep -c -E '^[[:space:]]*- alert:' "$rules" || true)
if [ "$alerts" -eq 0 ]; then
  echo "FAIL no alerts found in $rules"; fail=1
elif [ -n "$unlabelled" ]; then
  echo "FAIL these alerts lack the label component: gpulet: $unlabelled"; fail=1
else
  echo "ok   all $alerts alerts carry component: gpulet"
fi
# The DaemonSet's prometheus.io annotations (for the kubernetes-pods job) name the port
# gpulet listens on and the path it serves.
ds=$src/deploy/base/daemonset.yaml
ann_port=$(sed -n -E 's/^[[:space:]]*prometheus\.io\/port: "?([0-9]+)"?[[:space:]]*$/\1/p' "$ds")
ann_path=$(sed -n -E 's/^[[:space:]]*prometheus\.io\/path: "?([^"[:space:]]+)"?[[:space:]]*$/\1/p' "$ds")
if [ -n "$ann_port" ] && grep -q -E "^[[:space:]]*containerPort: $ann_port[[:space:]]*$" "$ds" &&
  grep -q -F -- "- --metrics-address=:$ann_port" "$ds"; then
  echo "ok   prometheus.io/port $ann_port is the metrics port"
else
  echo "FAIL prometheus.io/port '$ann_port' is not the DaemonSet's containerPort and --metrics-address"
  fail=1
fi
if [ -n "$ann_path" ] && grep -q -F "path == \"$ann_path\"" "$src/src/metrics/metrics_server.cc" &&
  grep -q -F -- "prometheus.io/scrape: \"true\"" "$ds"; then
  echo "ok   prometheus.io/path $ann_path is served by gpulet"
else
  echo "FAIL prometheus.io/path '$ann_path' (or prometheus.io/scrape) does not match gpulet"
  fail=1
fi
if [ "$fail" -ne 0 ]; then exit 1; fi

# 3. promtool.
if ! command -v promtool >/dev/null; then
  if [ "${CI:-}" = "true" ]; then
    echo "FAIL: promtool is not installed (scripts/deps.sh test installs Debian's prometheus)"
    exit 1
  fi
  echo "promtool_rules_test: promtool not installed; skipping (apt-get install -y prometheus)"
  exit 77
fi
promtool check rules "$rules"
promtool test rules "$unit"

echo "promtool_rules_test: passed"
