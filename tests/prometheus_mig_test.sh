#!/usr/bin/env bash
# Real-Prometheus test of MIG metrics: Debian's prometheus scrapes `gpulet serve --simulate
# dgx8-mig --mig-strategy mixed` (eight H100s, seven with MIG: 30 MIG devices, GPU 6 whole)
# while a PodResources stand-in (tests/podresources_standin.cc) says 30 pods hold one MIG
# device each, as the kubelet would after scheduling them on nvidia.com/mig-<profile>. Every
# MIG device's series must carry dcgm-exporter's GPU_I_ID and GPU_I_PROFILE labels and its
# pod's labels; the MIG GPUs' utilisation comes per instance from GPM.
# Usage: prometheus_mig_test.sh BUILD_DIR PODRESOURCES_STANDIN
set -euo pipefail
build=$(cd "$1" && pwd)
standin=${2:?usage: prometheus_mig_test.sh BUILD_DIR PODRESOURCES_STANDIN}
src=$(cd "$(dirname "$0")/.." && pwd)

# shellcheck source=prometheus_lib.sh
. "$src/tests/prometheus_lib.sh"
prometheus_require

# One pod per MIG device: namespace ml, pod infer-<n>, container server.
prometheus_before_gpulet() {
  mkdir -p "$work/kubelet/pod-resources"
  "$build/gpulet" --simulate dgx8-mig --sim-state "$work/state.json" list --json |
    python3 -c 'import json,sys
n = 0
for g in json.load(sys.stdin)["gpus"]:
    for m in g.get("mig_devices", []):
        print("ml infer-%d server nvidia.com/mig-%s %s" % (n, m["profile"], m["uuid"]))
        n += 1' >"$work/pods.txt"
  [ "$(wc -l <"$work/pods.txt")" = 30 ] || { echo "FAIL: expected 30 MIG devices"; cat "$work/pods.txt"; exit 1; }
  "$standin" "$work/kubelet/pod-resources/kubelet.sock" "$work/pods.txt" >"$work/standin.log" 2>&1 &
  pids+=($!)
}
prometheus_start dgx8-mig --mig-strategy mixed --pod-resources-interval 1s
prometheus_wait_scrapes 3

fail=0
check() {  # name, query, expected value
  got=$(value_of "$2")
  if [ "$got" = "$3" ]; then echo "ok   $1 = $got"; else echo "FAIL $1: got '$got', want '$3'"; fail=1; fi
}
# The pod labels arrive with the first PodResources round; give it a few scrapes.
for _ in $(seq 1 20); do
  [ "$(value_of 'count(DCGM_FI_DEV_FB_USED{GPU_I_ID!="",pod!=""})')" = 30 ] && break
  sleep 0.5
done
check "a DCGM_FI_DEV_FB_USED series per MIG device" 'count(DCGM_FI_DEV_FB_USED{GPU_I_ID!=""})' 30
check "each with its pod's labels" 'count(DCGM_FI_DEV_FB_USED{GPU_I_ID!="",pod=~"infer-.*",namespace="ml",container="server"})' 30
check "30 distinct pods" 'count(count by (pod) (DCGM_FI_DEV_FB_USED{GPU_I_ID!=""}))' 30
check "FB_FREE per MIG device too" 'count(DCGM_FI_DEV_FB_FREE{GPU_I_ID!="",pod!=""})' 30
check "1g.10gb devices (GPU_I_PROFILE as dcgm-exporter writes it)" 'count(DCGM_FI_DEV_FB_USED{GPU_I_PROFILE="1g.10gb"})' 21
check "2g.20gb devices" 'count(DCGM_FI_DEV_FB_USED{GPU_I_PROFILE="2g.20gb"})' 6
check "the 7g.80gb is GPU instance 0 of GPU 5" 'count(DCGM_FI_DEV_FB_USED{gpu="5",GPU_I_ID="0",GPU_I_PROFILE="7g.80gb"})' 1
check "MIG device info series" 'count(gpulet_mig_device_info)' 30
check "every MIG device healthy" 'sum(gpulet_mig_device_healthy)' 30
check "allocation series per pod" 'count(gpulet_gpu_allocation_info{resource=~"nvidia.com/mig-.*"})' 30
check "GPU 6 (no MIG) keeps its whole-GPU series" 'count(DCGM_FI_DEV_FB_USED{gpu="6",GPU_I_ID=""})' 1
check "no whole-GPU utilisation under MIG (NVML has none)" 'count(DCGM_FI_DEV_GPU_UTIL{gpu="0"}) or vector(0)' 0
check "per-instance activity from GPM on MIG GPUs" 'count(DCGM_FI_PROF_SM_ACTIVE{GPU_I_ID!=""}) > bool 0' 1
if ! promtool check metrics < <(curl -s "http://127.0.0.1:$gport/metrics") 2>"$work/promtool.txt"; then
  grep -v "^$" "$work/promtool.txt" | grep -iv "counter metrics should have" | head -5 || true
fi
if [ "$fail" -ne 0 ]; then
  tail -20 "$work/gpulet.log"
  exit 1
fi
echo PASS
