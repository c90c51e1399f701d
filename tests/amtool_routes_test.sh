#!/usr/bin/env bash
# Alertmanager example test: deploy/prometheus/alertmanager-telegram.example.yml is a piece
# to merge into an existing alertmanager.yml, never a root. This test does the merge that
# docs/alerting.md describes, textually, into three representative user configurations (one
# with child routes and inhibit rules of its own, one with only a root receiver, one with
# list items at their key's column as Debian's shipped alertmanager.yml has them), then:
#   1. the example alone is refused by `amtool check-config` (it has no root receiver, so
#      it cannot silently replace a whole configuration);
#   2. each merged file passes `amtool check-config`;
#   3. `amtool config routes test` sends every alert of deploy/prometheus/gpulet-rules.yaml
#      (its name, severity and component labels, read from the rules) to telegram-critical
#      or telegram-warning by severity, and other alerts to the user's receivers as before;
#   4. a real Alertmanager (prometheus-alertmanager) with the merged file inhibits
#      GpuletGpuUnhealthyForLong for a GPU that has GpuletGpuLost, and only for that GPU,
#      and groups gpulet's alerts one per alert and GPU;
#   5. deploy/monitoring/alertmanagerconfig.yaml, turned into a configuration by the
#      Prometheus Operator's own code (tests/monitoring/amconfig.go), passes 2 to 4 the same
#      way, in each user configuration.
# Usage: amtool_routes_test.sh [SOURCE_DIR]
# Exits 77 (skip) when amtool is missing, except under CI=true, where `make test` has
# installed Debian's prometheus-alertmanager (scripts/deps.sh test) and it is a failure.
set -euo pipefail
src=$(cd "${1:-$(dirname "$0")/..}" && pwd)
example=$src/deploy/prometheus/alertmanager-telegram.example.yml
rules=$src/deploy/prometheus/gpulet-rules.yaml
for f in "$example" "$rules"; do
  if [ ! -f "$f" ]; then echo "FAIL: $f not found"; exit 1; fi
done
if ! command -v amtool >/dev/null; then
  if [ "${CI:-}" = "true" ]; then
    echo "FAIL: amtool is not installed (scripts/deps.sh test installs prometheus-alertmanager)"
    exit 1
  fi
  echo "amtool_routes_test: amtool not installed; skipping (apt-get install -y prometheus-alertmanager)"
  exit 77
fi
if ! command -v python3 >/dev/null; then
  echo "FAIL: python3 is needed to merge the example (scripts/deps.sh test installs it)"
  exit 1
fi

work=$(mktemp -d)
am_pid=""
cleanup() {
  if [ -n "$am_pid" ]; then
    kill "$am_pid" 2>/dev/null || true
    wait "$am_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
fail=0

# --- Two existing configurations, as a user might have them ------------------------------
# A cluster's config: a default receiver, a pager for critical alerts, an application's own
# route, and an inhibit rule. Notifications of the live check (step 4) go to a closed local
# port, never to Telegram.
cat >"$work/user-full.yml" <<'EOF'
global:
  resolve_timeout: 5m
  telegram_api_url: http://127.0.0.1:9/
route:
  receiver: team-default
  group_by: [alertname, namespace]
  group_wait: 30s
  group_interval: 5m
  repeat_interval: 4h
  routes:
    - matchers:
        - severity = "critical"
      receiver: team-pager
    - matchers:
        - namespace = "anpr"
      receiver: anpr-webhook
inhibit_rules:
  - source_matchers:
      - severity = "critical"
    target_matchers:
      - severity = "warning"
    equal: [namespace, alertname]
receivers:
  - name: team-default
    webhook_configs:
      - url: http://127.0.0.1:9/default
  - name: team-pager
    webhook_configs:
      - url: http://127.0.0.1:9/pager
  - name: anpr-webhook
    webhook_configs:
      - url: http://127.0.0.1:9/anpr
EOF
# The smallest config: a root receiver and nothing else.
cat >"$work/user-minimal.yml" <<'EOF'
route:
  receiver: team-default
receivers:
  - name: team-default
    webhook_configs:
      - url: http://127.0.0.1:9/default
EOF
# List items at their key's column, as in the alertmanager.yml Debian's package installs, with
# the older match/source_match syntax.
cat >"$work/user-compact.yml" <<'EOF'
route:
  receiver: team-default
  group_by: ['alertname', 'cluster', 'service']
  routes:
  - match:
      severity: critical
    receiver: team-pager
inhibit_rules:
- source_match:
    severity: 'critical'
  target_match:
    severity: 'warning'
  equal: ['alertname', 'cluster', 'service']
receivers:
- name: 'team-default'
  webhook_configs:
  - url: http://127.0.0.1:9/default
- name: 'team-pager'
  webhook_configs:
  - url: http://127.0.0.1:9/pager
EOF

# --- The merge of docs/alerting.md, done as text ------------------------------------------
# Each "# gpulet: begin X" ... "# gpulet: end X" block of the example is pasted as it is:
# the route as the first child under `route:`'s `routes:`, the inhibit rule at the end of
# `inhibit_rules:`, the receivers at the end of `receivers:`. A missing key is added first.
# Where the file puts list items at their key's column, the block moves two spaces left.
cat >"$work/merge.py" <<'EOF'
import re
import sys

example, user, out = sys.argv[1:4]
ex = open(example).read().split("\n")


def block(name):
    begin = [i for i, l in enumerate(ex) if l.strip() == f"# gpulet: begin {name}"]
    end = [i for i, l in enumerate(ex) if l.strip() == f"# gpulet: end {name}"]
    if len(begin) != 1 or len(end) != 1 or end[0] <= begin[0]:
        sys.exit(f"merge: {example} needs exactly one '# gpulet: begin/end {name}' pair")
    return ex[begin[0]:end[0] + 1]


lines = open(user).read().rstrip("\n").split("\n")


def top_key(key):
    for i, l in enumerate(lines):
        if l == f"{key}:":
            return i
    return None


def section_end(start):
    # The line after the last one of the top-level section that starts at `start`.
    end = start + 1
    for i in range(start + 1, len(lines)):
        if lines[i] and not lines[i].startswith((" ", "#")):
            break
        if lines[i].strip():
            end = i + 1
    return end


def indent(l):
    return len(l) - len(l.lstrip(" "))


def fit(blk, key_line):
    # Shift the block so that its list items line up with those under key_line, if any.
    key_indent = indent(lines[key_line])
    items = [l for l in blk if l.lstrip().startswith("- ")]
    shift = 0
    for l in lines[key_line + 1:]:
        if not l.strip() or l.lstrip().startswith("#"):
            continue
        if l.lstrip().startswith("- ") and indent(l) >= key_indent:
            shift = indent(l) - indent(items[0])
        break
    if shift < 0 and any(l.strip() and indent(l) < -shift for l in blk):
        sys.exit("merge: cannot move the block left")
    return [(" " * shift + l) if shift >= 0 else l[-shift:] for l in blk]


def append_to_section(key, blk):
    start = top_key(key)
    if start is None:
        lines.extend([f"{key}:"] + blk)
    else:
        end = section_end(start)
        lines[end:end] = fit(blk, start)


# 1. The route: first child of the root route.
r = top_key("route")
if r is None:
    sys.exit(f"merge: {user} has no route")
routes = None
for i in range(r + 1, section_end(r)):
    if lines[i] == "  routes:":
        routes = i
        break
if routes is None:
    routes = section_end(r)
    lines.insert(routes, "  routes:")
lines[routes + 1:routes + 1] = fit(block("route"), routes)
# 2, 3. The inhibit rule and the receivers: appended.
append_to_section("inhibit_rules", block("inhibit_rules"))
append_to_section("receivers", block("receivers"))
open(out, "w").write("\n".join(lines) + "\n")
EOF

# --- 1. The example alone is not a usable configuration -----------------------------------
if out=$(amtool check-config "$example" 2>&1); then
  echo "FAIL the example passes amtool check-config on its own: it must not be a whole config"
  echo "$out"
  fail=1
elif grep -q "root route must specify a default receiver" <<<"$out"; then
  echo "ok   the example alone is refused: it has no root receiver"
else
  echo "FAIL amtool refused the example alone, but not for a missing root receiver:"
  echo "$out"
  fail=1
fi

# --- 2, 3. Merge, check, route ------------------------------------------------------------
# gpulet's alerts, from the rules file: "name severity component" per rule.
alerts=$(python3 - "$rules" <<'EOF'
import re
import sys

text = open(sys.argv[1]).read()
for rule in re.split(r"\n\s*- alert: ", text)[1:]:
    name = rule.split("\n", 1)[0].strip()
    sev = re.search(r"\n\s+severity: (\S+)", rule)
    comp = re.search(r"\n\s+component: (\S+)", rule)
    print(name, sev.group(1) if sev else "-", comp.group(1) if comp else "-")
EOF
)
if [ "$(wc -l <<<"$alerts")" -lt 8 ]; then
  echo "FAIL found only these rules in $rules:"; echo "$alerts"; exit 1
fi

# route_to CONFIG WANT LABEL...: the alert with these labels must reach receiver WANT only.
route_to() {
  local config=$1 want=$2
  shift 2
  local got rc=0
  # stdout is the receiver list; stderr may carry a note about amtool's own config file.
  got=$(amtool config routes test --config.file="$config" "$@" 2>"$work/routes.err") || rc=$?
  if [ "$rc" -eq 0 ] && [ "$got" = "$want" ]; then
    echo "ok   $(basename "$config"): {$*} -> $want"
  else
    echo "FAIL $(basename "$config"): {$*} -> '$got' (exit $rc), want '$want'"
    cat "$work/routes.err"
    fail=1
  fi
}

for user in user-full user-minimal user-compact; do
  merged=$work/$user-merged.yml
  python3 "$work/merge.py" "$example" "$work/$user.yml" "$merged"
  if amtool check-config "$merged" >"$work/check.out" 2>&1; then
    echo "ok   $user.yml with the example merged in passes amtool check-config"
  else
    echo "FAIL $user.yml with the example merged in fails amtool check-config:"
    cat "$work/check.out"; echo "--- merged file:"; cat -n "$merged"
    fail=1
    continue
  fi
  while read -r name severity component; do
    case "$severity" in
      critical) want=telegram-critical ;;
      warning) want=telegram-warning ;;
      *) echo "FAIL rule $name has severity '$severity'"; fail=1; continue ;;
    esac
    route_to "$merged" "$want" alertname="$name" severity="$severity" component="$component" \
      node=talos-08 gpu=1
  done <<<"$alerts"
  # Other exporters' alerts go where they went before the merge.
  route_to "$merged" team-default alertname=KubePodCrashLooping severity=warning namespace=default
  if [ "$user" != user-minimal ]; then
    route_to "$merged" team-pager alertname=KubeNodeNotReady severity=critical node=talos-08
  fi
  if [ "$user" = user-full ]; then
    route_to "$merged" anpr-webhook alertname=AnprQueueBacklog severity=warning namespace=anpr
  fi
done

# --- 4. Inhibition, in a running Alertmanager ---------------------------------------------
am=""
for c in prometheus-alertmanager alertmanager; do
  if command -v "$c" >/dev/null; then am=$(command -v "$c"); break; fi
done
if [ -z "$am" ]; then
  echo "FAIL Alertmanager (prometheus-alertmanager) is not installed beside amtool"
  exit 1
fi
# live_check CONFIG PREFIX: a real Alertmanager on CONFIG inhibits GpuletGpuUnhealthyForLong
# for a GPU that has GpuletGpuLost, and only for that GPU, and groups gpulet's alerts one per
# alert and GPU for PREFIX telegram-critical (PREFIX: the operator's receiver namespace).
live_check() {
  local config=$1 prefix=$2
  local port url status groups
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  url=http://127.0.0.1:$port
  rm -rf "$work/data"
  "$am" --config.file="$config" --storage.path="$work/data" \
    --web.listen-address="127.0.0.1:$port" --cluster.listen-address= >"$work/am.log" 2>&1 &
  am_pid=$!
  for _ in $(seq 1 60); do
    if amtool --alertmanager.url="$url" config show >/dev/null 2>&1; then break; fi
    sleep 0.5
  done
  if ! amtool --alertmanager.url="$url" config show >/dev/null 2>&1; then
    echo "FAIL Alertmanager did not start on $(basename "$config"):"; cat "$work/am.log"; exit 1
  fi
  gpu_a=(component=gpulet severity=critical node=talos-07 hostname=talos-07 gpu=0
    uuid=GPU-3f9d6c2e-1b7a-4e0c-9d35-a1c2e3f43080)
  # Another GPU in the same node.
  gpu_b=(component=gpulet severity=critical node=talos-07 hostname=talos-07 gpu=1
    uuid=GPU-8a41d7b9-52c6-4f13-b0e8-7d2c9e155090)
  amtool --alertmanager.url="$url" alert add alertname=GpuletGpuLost "${gpu_a[@]}"
  amtool --alertmanager.url="$url" alert add alertname=GpuletGpuUnhealthyForLong "${gpu_a[@]}"
  amtool --alertmanager.url="$url" alert add alertname=GpuletGpuUnhealthyForLong "${gpu_b[@]}"
  # "alertname uuid inhibited" for each alert, once the inhibitor has seen the source alert.
  status=""
  for _ in $(seq 1 40); do
    status=$(amtool --alertmanager.url="$url" -o json alert query --inhibited --active |
      python3 -c '
import json, sys
for a in sorted(json.load(sys.stdin), key=lambda a: (a["labels"]["alertname"], a["labels"]["uuid"])):
    print(a["labels"]["alertname"], a["labels"]["uuid"], "inhibited" if a["status"]["inhibitedBy"] else "active")
')
    if grep -q inhibited <<<"$status"; then break; fi
    sleep 0.25
  done
  local want_status="GpuletGpuLost GPU-3f9d6c2e-1b7a-4e0c-9d35-a1c2e3f43080 active
GpuletGpuUnhealthyForLong GPU-3f9d6c2e-1b7a-4e0c-9d35-a1c2e3f43080 inhibited
GpuletGpuUnhealthyForLong GPU-8a41d7b9-52c6-4f13-b0e8-7d2c9e155090 active"
  if [ "$status" = "$want_status" ]; then
    echo "ok   $(basename "$config"): GpuletGpuLost inhibits GpuletGpuUnhealthyForLong for its own GPU only"
  else
    echo "FAIL $(basename "$config"): inhibition: got"; echo "$status"; echo "want"; echo "$want_status"
    fail=1
  fi
  # The groups the running Alertmanager formed for Telegram: one per alert and GPU.
  groups=$(python3 - "$url" "${prefix}telegram-" <<'PY'
import json
import sys
import urllib.request

with urllib.request.urlopen(sys.argv[1] + "/api/v2/alerts/groups", timeout=10) as r:
    groups = json.load(r)
for g in sorted(groups, key=lambda g: sorted(g["labels"].items())):
    if not g["receiver"]["name"].startswith(sys.argv[2]):
        continue
    labels = ",".join(f"{k}={v}" for k, v in sorted(g["labels"].items()))
    print(g["receiver"]["name"], labels, len(g["alerts"]))
PY
)
  local want_groups="${prefix}telegram-critical alertname=GpuletGpuLost,gpu=0,hostname=talos-07,node=talos-07 1
${prefix}telegram-critical alertname=GpuletGpuUnhealthyForLong,gpu=0,hostname=talos-07,node=talos-07 1
${prefix}telegram-critical alertname=GpuletGpuUnhealthyForLong,gpu=1,hostname=talos-07,node=talos-07 1"
  if [ "$groups" = "$want_groups" ]; then
    echo "ok   $(basename "$config"): one notification group per alert and GPU, each to ${prefix}telegram-critical"
  else
    echo "FAIL $(basename "$config"): alert groups: got"; echo "$groups"; echo "want"; echo "$want_groups"
    fail=1
  fi
  kill "$am_pid" 2>/dev/null || true
  wait "$am_pid" 2>/dev/null || true
  am_pid=""
}
live_check "$work/user-full-merged.yml" ""

# --- 5. The AlertmanagerConfig, as the Prometheus Operator turns it into a configuration ---
# deploy/monitoring/alertmanagerconfig.yaml goes through the operator's own code
# (tests/monitoring/amconfig.go: its strict decoding, its validation, and its merge into each
# user configuration above, with alertmanagerConfigMatcherStrategy None as the manifest asks),
# and the result must route, inhibit and group gpulet's alerts as the example does. The
# operator differs from the hand merge in two ways it always has: its route carries
# `continue: true` (gpulet's alerts go on to the user's routes as well), and its receivers
# are named <namespace>/<object>/<receiver>.
cr=$src/deploy/monitoring/alertmanagerconfig.yaml
amconfig=${GPULET_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpulet-e2e}/bin/amconfig
if [ ! -x "$amconfig" ]; then
  if [ "${CI:-}" = "true" ]; then
    echo "FAIL $amconfig is not built (make tools: scripts/e2e/build.sh --tools builds it)"
    exit 1
  fi
  echo "skip the AlertmanagerConfig: $amconfig is not built (make tools builds it)"
else
  am_version=$(amtool --version 2>&1 | sed -n 's/.*version \([0-9][0-9.]*\).*/\1/p' | head -n1)
  prefix=gpulet-system/gpulet/
  for user in user-full user-minimal user-compact; do
    converted=$work/$user-operator.yml
    if ! "$amconfig" "$cr" "$work/$user.yml" "$am_version" >"$converted" 2>"$work/amconfig.err"; then
      echo "FAIL the Prometheus Operator's code refuses $cr with $user.yml:"; cat "$work/amconfig.err"
      fail=1
      continue
    fi
    if amtool check-config "$converted" >"$work/check.out" 2>&1; then
      echo "ok   $user.yml with the AlertmanagerConfig, as the operator merges it, passes amtool check-config"
    else
      echo "FAIL the operator's merge of the AlertmanagerConfig into $user.yml fails amtool check-config:"
      cat "$work/check.out"; cat -n "$converted"
      fail=1
      continue
    fi
    while read -r name severity component; do
      want=${prefix}telegram-$severity
      # continue: true: the user's own critical route (team-pager) sees gpulet's critical alerts.
      if [ "$severity" = critical ] && [ "$user" != user-minimal ]; then want=$want,team-pager; fi
      route_to "$converted" "$want" alertname="$name" severity="$severity" component="$component" \
        node=talos-08 gpu=1
    done <<<"$alerts"
    route_to "$converted" team-default alertname=KubePodCrashLooping severity=warning namespace=default
  done
  live_check "$work/user-full-operator.yml" "$prefix"
  # The operator's default strategy (OnNamespace) routes to these receivers only alerts
  # labelled namespace="gpulet-system", which gpulet's are not: the manifest's note holds.
  if "$amconfig" "$cr" "$work/user-minimal.yml" "$am_version" OnNamespace \
      >"$work/on-namespace.yml" 2>"$work/amconfig.err"; then
    route_to "$work/on-namespace.yml" team-default alertname=GpuletGpuLost severity=critical \
      component=gpulet node=talos-08 gpu=1
  else
    echo "FAIL the operator's code refuses $cr with OnNamespace:"; cat "$work/amconfig.err"
    fail=1
  fi
  # What the operator leaves out of a Telegram receiver: disable_notifications (the warning
  # receiver's silence), which v0.85.0 always writes as false (docs/alerting.md says so).
  if grep -q "disable_notifications" "$work/user-full-operator.yml"; then
    echo "FAIL the operator now keeps disable_notifications: update docs/alerting.md and the manifest"
    fail=1
  else
    echo "ok   the operator drops disable_notifications, as docs/alerting.md says"
  fi
fi

if [ "$fail" -ne 0 ]; then exit 1; fi
echo "amtool_routes_test: passed"
