#!/usr/bin/env bash
# Alert rules test: deploy/prometheus/gpulet-rules.yaml must name only series gpulet exports
# (checked against src/metrics/exposition.cc), pass `promtool check rules`, and pass its unit
# tests (deploy/prometheus/gpulet-rules_test.yaml) under `promtool test rules`; where amtool
# is installed, the Alertmanager example beside them passes `amtool check-config`.
# Usage: promtool_rules_test.sh [SOURCE_DIR]
# Exits 77 (skip) when promtool is missing, except under CI=true, where `make test` has
# installed Debian's prometheus (scripts/deps.sh test) and a missing promtool is a failure.
set -euo pipefail
src=$(cd "${1:-$(dirname "$0")/..}" && pwd)
rules=$src/deploy/prometheus/gpulet-rules.yaml
unit=$src/deploy/prometheus/gpulet-rules_test.yaml
exposition=$src/src/metrics/exposition.cc
fail=0

for f in "$rules" "$unit" "$exposition"; do
  if [ ! -f "$f" ]; then echo "FAIL: $f not found"; exit 1; fi
done

# 1. Every DCGM_FI_* / gpulet_* name outside comments (expressions and the queries in
#    annotations) is a series name exposition.cc emits, i.e. appears there as "NAME".
names=$(grep -v -E '^[[:space:]]*#' "$rules" |
  grep -o -E '(^|[^A-Za-z0-9_:])(DCGM_FI_[A-Z0-9_]+|gpulet_[a-z0-9_]+)' |
  sed -E 's/^[^A-Za-z]//' | sort -u)
if [ -z "$names" ]; then echo "FAIL: no series names found in $rules"; exit 1; fi
for n in $names; do
  if grep -q -F "\"$n\"" "$exposition"; then
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

# 4. The Alertmanager example of docs/alerting.md, where amtool is installed (Debian's
#    prometheus-alertmanager; not one of the test dependencies).
example=$src/deploy/prometheus/alertmanager-telegram.example.yml
if command -v amtool >/dev/null; then
  amtool check-config "$example"
else
  echo "note amtool not installed: $example not checked"
fi
echo "promtool_rules_test: passed"
