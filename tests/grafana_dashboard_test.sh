#!/usr/bin/env bash
# Grafana dashboard test: deploy/grafana/gpulet-dashboard.json parses; every panel has a
# datasource and at least one query; every DCGM_FI_* / gpulet_* name in a query (and in the
# template variables) is a series that src/metrics/exposition.cc exports; and, where promtool
# is installed, every query parses as PromQL once Grafana's variables are filled in.
# Usage: grafana_dashboard_test.sh [SOURCE_DIR]
# Exits 77 (skip) when python3 is missing, except under CI=true.
set -euo pipefail
src=$(cd "${1:-$(dirname "$0")/..}" && pwd)

if ! command -v python3 >/dev/null; then
  if [ "${CI:-}" = "true" ]; then echo "FAIL: python3 is not installed"; exit 1; fi
  echo "grafana_dashboard_test: python3 not installed; skipping"
  exit 77
fi

work=$(mktemp -d /tmp/gdt.XXXXXX)
trap 'rm -rf "$work"' EXIT

python3 - "$src" "$work" <<'PY'
import json
import re
import sys

src, work = sys.argv[1], sys.argv[2]
dashboard_path = f"{src}/deploy/grafana/gpulet-dashboard.json"
exposition_path = f"{src}/src/metrics/exposition.cc"
failures = []

with open(dashboard_path, encoding="utf-8") as f:
    try:
        dash = json.load(f)
    except json.JSONDecodeError as e:
        print(f"FAIL {dashboard_path} is not valid JSON: {e}")
        sys.exit(1)
with open(exposition_path, encoding="utf-8") as f:
    exposition = f.read()
# The GPU values' families are named in the value table exposition.cc exports from.
with open(f"{src}/src/gpu/sample_values.cc", encoding="utf-8") as f:
    exposition += f.read()
# Series names are the quoted first argument of each metric family in exposition.cc.
exported = set(re.findall(r'"((?:DCGM_FI|gpulet)_[A-Za-z0-9_]+)"', exposition))
if not exported:
    print(f"FAIL no series names found in {exposition_path}")
    sys.exit(1)

NAME = re.compile(r"(?<![A-Za-z0-9_:])(DCGM_FI_[A-Z0-9_]+|gpulet_[a-z0-9_]+|up)(?![A-Za-z0-9_:])")
exprs = []  # (where, expr)


def check_names(where, expr):
    for name in NAME.findall(expr):
        if name == "up":
            continue  # written by Prometheus for each target, not by gpulet
        if name not in exported:
            failures.append(f"{where}: {name} is not a series src/metrics/exposition.cc exports")


def walk(panels):
    for p in panels:
        if p.get("type") == "row":
            walk(p.get("panels", []))
            continue
        title = p.get("title") or f"panel id {p.get('id')}"
        where = f"panel '{title}'"
        ds = p.get("datasource")
        if not isinstance(ds, dict) or ds.get("uid") != "${datasource}":
            failures.append(f"{where}: datasource is {ds!r}, want uid ${{datasource}}")
        targets = p.get("targets") or []
        if not targets:
            failures.append(f"{where}: no targets")
        for t in targets:
            expr = t.get("expr", "")
            if not expr.strip():
                failures.append(f"{where} target {t.get('refId')}: empty expr")
                continue
            tds = t.get("datasource")
            if tds is not None and (not isinstance(tds, dict) or tds.get("uid") != "${datasource}"):
                failures.append(f"{where} target {t.get('refId')}: datasource is {tds!r}")
            check_names(where, expr)
            exprs.append((f"{where} target {t.get('refId')}", expr))


panels = dash.get("panels") or []
if not panels:
    failures.append("the dashboard has no panels")
walk(panels)

variables = {v.get("name"): v for v in dash.get("templating", {}).get("list", [])}
ds_var = variables.get("datasource")
if not ds_var or ds_var.get("type") != "datasource" or ds_var.get("query") != "prometheus":
    failures.append("template variable 'datasource' (type datasource, query prometheus) missing")
for name in ("hostname", "gpu"):
    if name not in variables:
        failures.append(f"template variable '{name}' missing")
for name, v in variables.items():
    if v.get("type") == "query":
        q = v.get("query")
        q = q.get("query", "") if isinstance(q, dict) else (q or "")
        check_names(f"variable '{name}'", q)

# For the PromQL parse check: Grafana's variables filled in, as a rules file (JSON is YAML).
def fill(expr):
    expr = re.sub(r"\$__(rate_)?interval", "1m", expr)
    expr = re.sub(r"\$__range", "1h", expr)
    return re.sub(r"\$\{?[A-Za-z_]+\}?", ".*", expr)

rules = {"groups": [{"name": "dashboard", "rules": [
    {"record": f"dashboard:expr_{i}", "expr": fill(e)} for i, (_, e) in enumerate(exprs)]}]}
with open(f"{work}/exprs.yaml", "w", encoding="utf-8") as f:
    json.dump(rules, f, indent=1)
with open(f"{work}/where.txt", "w", encoding="utf-8") as f:
    f.writelines(f"{i} {w}\n" for i, (w, _) in enumerate(exprs))

for msg in failures:
    print("FAIL", msg)
if failures:
    sys.exit(1)
print(f"ok   {len(panels)} panels, {len(exprs)} queries: datasources, targets and series names")
PY

if command -v promtool >/dev/null; then
  if promtool check rules "$work/exprs.yaml" >"$work/promtool.txt" 2>&1; then
    echo "ok   every query parses as PromQL (promtool)"
  else
    echo "FAIL a dashboard query does not parse (expr_N is query N below):"
    cat "$work/promtool.txt" "$work/where.txt"
    exit 1
  fi
else
  echo "note promtool not installed: PromQL parse check skipped"
fi
echo "grafana_dashboard_test: passed"
