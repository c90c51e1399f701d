#!/usr/bin/env bash
# dcgm-exporter's own Grafana dashboard against gpulet: a real Prometheus scrapes
# `gpulet serve --simulate h200`, and every PromQL query of the dashboard
# (tests/fixtures/dcgm-exporter/dcgm-exporter-dashboard.json, NVIDIA/dcgm-exporter's
# grafana/dcgm-exporter-dashboard.json; source in tests/fixtures/dcgm-exporter/README.md), its
# panels' and its template variables', must return data, with the variables set to "All" as a
# user opening the dashboard gets them.
# Usage: dcgm_dashboard_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
dashboard=$src/tests/fixtures/dcgm-exporter/dcgm-exporter-dashboard.json

# shellcheck source=prometheus_lib.sh
. "$src/tests/prometheus_lib.sh"
prometheus_require
prometheus_start h200
prometheus_wait_scrapes 3

# The profiling series need two GPM samples, so they appear one sampling interval after the
# others; wait for them rather than for a fixed time.
for _ in $(seq 1 40); do
  [ -n "$(value_of 'count(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE)')" ] && break
  sleep 0.5
done

# The dashboard's queries, with Grafana's substitutions: a multi-value variable set to All
# (no allValue) becomes a regex matching every value; $__rate_interval and $__interval a range.
python3 - "$dashboard" >"$work/queries.tsv" <<'PY'
import json, sys
dash = json.load(open(sys.argv[1]))
subst = {"$instance": ".+", "$gpu": ".+", "$__rate_interval": "1m", "$__interval": "15s"}
def fill(expr):
    for k in sorted(subst, key=len, reverse=True):
        expr = expr.replace("${" + k[1:] + "}", subst[k]).replace(k, subst[k])
    if "$" in expr:
        raise SystemExit("unhandled variable in: " + expr)
    return expr
def panels(ps):
    for p in ps:
        yield p
        yield from panels(p.get("panels", []))
n = 0
for p in panels(dash["panels"]):
    for t in p.get("targets", []):
        if t.get("expr"):
            print("panel " + p.get("title", "?") + "\tquery\t" + fill(t["expr"]))
            n += 1
for v in dash.get("templating", {}).get("list", []):
    q = v.get("query")
    if v.get("type") == "query" and isinstance(q, str) and q.startswith("label_values("):
        metric, label = [x.strip() for x in q[len("label_values("):-1].split(",")]
        print("variable " + v["name"] + "\tlabel\t" + metric + "\t" + label)
        n += 1
if n < 8:
    raise SystemExit("only %d queries found in the dashboard" % n)
PY

fail=0
checked=0
while IFS=$'\t' read -r what kind a b; do
  checked=$((checked + 1))
  if [ "$kind" = "query" ]; then
    got=$(query "$a" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(len(d["data"]["result"]) if d.get("status")=="success" else "error: "+d.get("error",""))' 2>/dev/null || echo "no answer")
    if [[ "$got" =~ ^[1-9][0-9]*$ ]]; then
      echo "ok   $what: $a ($got series)"
    else
      echo "FAIL $what: $a returned $got"
      fail=1
    fi
  else
    values=$(curl -s --max-time 5 -G "http://127.0.0.1:$pport/api/v1/label/$b/values" --data-urlencode "match[]=$a" |
      python3 -c 'import json,sys; print(",".join(json.load(sys.stdin)["data"]))' 2>/dev/null || true)
    if [ -n "$values" ]; then echo "ok   $what: label_values($a, $b) = $values"; else echo "FAIL $what: label_values($a, $b) is empty"; fail=1; fi
  fi
done <"$work/queries.tsv"

if [ "$fail" -ne 0 ]; then tail -20 "$work/gpulet.log"; exit 1; fi
echo "dcgm_dashboard_test: $checked dashboard queries return data"
