# Shared by the real-Prometheus tests (sourced, not run): installs Prometheus when missing,
# starts `gpulet serve` on a simulator fixture and a Prometheus scraping it every second, and
# queries Prometheus' HTTP API. Callers set `build` (the build dir) and `src` (the source
# dir); prometheus_start creates `work` (removed on exit) and sets `gport` and `pport`.

prometheus_require() {
  if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null || ! command -v curl >/dev/null; then
    if [ "$(id -u)" -eq 0 ]; then
      "$src/scripts/deps.sh" prometheus
    else
      echo "$(basename "$0"): prometheus, promtool or curl missing and not root; skipping"
      exit 77
    fi
  fi
}

prometheus_cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# prometheus_start FIXTURE [SERVE_FLAG...]: gpulet on the fixture (with any extra `serve`
# flags), Prometheus scraping it (job "gpulet").
prometheus_start() {
  local fixture=$1
  shift
  work=$(mktemp -d /tmp/gpt.XXXXXX)
  pids=()
  trap prometheus_cleanup EXIT
  gport=$(free_port)
  pport=$(free_port)
  # A caller's stand-ins that gpulet finds at start (e.g. the kubelet's PodResources socket).
  if declare -F prometheus_before_gpulet >/dev/null; then prometheus_before_gpulet; fi
  "$build/gpulet" --simulate "$fixture" --sim-state "$work/state.json" serve \
    --kubelet-dir "$work/kubelet" --metrics-address "127.0.0.1:$gport" "$@" >"$work/gpulet.log" 2>&1 &
  pids+=($!)
  cat >"$work/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  scrape_timeout: 900ms
scrape_configs:
  - job_name: gpulet
    static_configs:
      - targets: ["127.0.0.1:$gport"]
YAML
  prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
    --web.listen-address="127.0.0.1:$pport" >"$work/prometheus.log" 2>&1 &
  pids+=($!)
}

query() {  # prints the JSON result of an instant query
  curl -s --max-time 5 -G "http://127.0.0.1:$pport/api/v1/query" --data-urlencode "query=$1"
}
value_of() {  # the single value of a query, or empty
  query "$1" | python3 -c 'import json,sys
d=json.load(sys.stdin)["data"]["result"]
print(d[0]["value"][1] if len(d)==1 else "")' 2>/dev/null || true
}

# Waits until Prometheus has scraped gpulet at least N times (default 2); fails the test
# with both logs otherwise.
prometheus_wait_scrapes() {
  local want=${1:-2} n="" up=""
  for _ in $(seq 1 60); do
    n=$(value_of 'sum(count_over_time(up{job="gpulet"}[5m]))')
    up=$(value_of 'up{job="gpulet"}')
    if [ -n "$n" ] && [ "${n%.*}" -ge "$want" ] && [ "$up" = "1" ]; then return 0; fi
    sleep 0.5
  done
  echo "FAIL: Prometheus did not scrape gpulet $want times"
  cat "$work/gpulet.log" "$work/prometheus.log" | tail -30
  exit 1
}
