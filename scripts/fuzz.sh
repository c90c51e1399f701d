#!/bin/bash
# Runs every libFuzzer target (src/*/*_fuzz.cc, sim/*_fuzz.cc) for SECONDS seconds each, from
# its seeds and its kept corpus. Exits non-zero when a target crashes, leaks, hangs or is
# missing.
#
# Usage: scripts/fuzz.sh SECONDS [NAME...]      (NAME: e.g. xid_fuzz; default: all targets)
#        scripts/fuzz.sh --build [NAME...]      seed only, and check that the targets are built
#
# The targets are built by CMake in clang's sanitizer build (ASan and UBSan, -O0), against its
# modules compiled with libFuzzer's coverage instrumentation (CMakeLists.txt, GPULET_FUZZ):
# `make fuzz-build` builds them alone (cmake --build build-asan --target gpulet_fuzz), `make
# asan-build` with everything else. FUZZ_BIN names their folder (default build-asan/fuzz).
# Runs go FUZZ_JOBS at a time (default: one a core); each target still runs SECONDS.
#
# Seeds: targets under src/health and src/doctor start from tests/fixtures/kmsg (each line
# and each /dev/kmsg record as its own input) and the explain catalogue's examples; the ELF reader (src/nvml/elf_check_fuzz.cc)
# from a few small system shared libraries; the pod-identity parsers from the simulator
# fixtures' /proc/<pid>/cgroup files and /var/log/pods names; the config parser from README's
# example; the web-config parser from a few small files; the API client's HTTP response parser
# (src/kube/http_response_fuzz.cc) from a few responses as the API server sends them; the DRA
# checkpoint parser (src/dra/checkpoint_fuzz.cc) from a checkpoint and claims gpulet writes;
# the simulator's fixture reader (sim/fixture_fuzz.cc) from the bundled fixtures; explain's
# evaluation-set and catalogue readers (src/doctor/explain_eval_fuzz.cc) from their files; the
# VRAM slice file readers (src/vram/slice_file_fuzz.cc) from a slice file as gpulet writes it; the
# flight recorder's file reader (src/recorder/recorder_files_fuzz.cc, with the retired-GPU file
# and the reboot record) from a recording and those files; the
# Talos machine-configuration reader (src/deploy/talos_migration_fuzz.cc) from gpulet's Talos
# patches and an upgraded node's configuration; the OCI image archive reader
# (src/registry/oci_archive_fuzz.cc) from the podman-saved archive under tests/fixtures/oci; the
# /status document reader (src/state/status_report_fuzz.cc) from documents as the daemon serves;
# the talosconfig reader (src/talos/talosconfig_fuzz.cc) from talosconfigs as Talos writes them;
# the driver's per-GPU procfs reader (src/node/driver_gpus_fuzz.cc) from the fixtures' files;
# the dmem rules' readers (src/node/dmem_fuzz.cc) from the fixtures' process cgroup files and
# a dmem.capacity.
# Inputs that grow coverage accumulate in build-fuzz/corpus/NAME; a crashing input is saved in build-fuzz/artifacts/NAME/.
# Reproduce one with: build-asan/fuzz/NAME build-fuzz/artifacts/NAME/crash-...
set -euo pipefail

usage() {
  echo "usage: scripts/fuzz.sh SECONDS [NAME...] | --build [NAME...]   (e.g. scripts/fuzz.sh 60 xid_fuzz)" >&2
  exit 2
}
[ $# -ge 1 ] || usage
seconds=$1
shift
build_only=""
if [ "$seconds" = --build ]; then
  build_only=1
  seconds=0
fi
case "$seconds" in '' | *[!0-9]*) usage ;; esac

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=build-fuzz
mkdir -p "$out/seeds" "$out/corpus" "$out/artifacts" "$out/logs"

bin=${FUZZ_BIN:-build-asan/fuzz}

# --- seeds -------------------------------------------------------------------------------
make_seeds() {
  local name=$1 src=$2 dir="$out/seeds/$1"
  rm -rf "$dir"
  mkdir -p "$dir"
  case "$src" in
    src/doctor/explain_eval_fuzz.cc)
      # The evaluation set's files and the catalogue's, each whole.
      local f
      for f in tests/explain_eval/*.yaml src/doctor/explain/*.yaml; do
        cp "$f" "$dir/$(basename "$(dirname "$f")")-$(basename "$f")"
      done
      ;;
    src/health/* | src/doctor/*)
      local f n=0 line
      for f in tests/fixtures/kmsg/*.txt; do
        cp "$f" "$dir/$(basename "$f")"
        # One input per line, and one per /dev/kmsg record (record lines plus their
        # space-indented dictionary lines).
        while IFS= read -r line || [ -n "$line" ]; do
          case "$line" in '' | '#'*) continue ;; esac
          n=$((n + 1))
          printf '%s\n' "$line" > "$dir/line-$n"
        done < "$f"
      done
      awk -v dir="$dir" '
        /^#/ || /^$/ { next }
        /^ / { if (file) print >> file; next }
        { if (file) close(file); file = dir "/record-" ++n; print > file }
      ' tests/fixtures/kmsg/kmsg_records.txt
      # The explain catalogue's examples: real messages, one input each (quoted one-liners
      # unquoted; block scalars with their lines).
      awk -v dir="$dir" '
        /^    examples:/ { in_ex = 1; next }
        /^  - id:/ || /^    [a-z_]+:/ { in_ex = 0; block = 0; next }
        !in_ex { next }
        /^      - / {
          if (file) close(file)
          file = dir "/example-" ++n
          line = substr($0, 9)
          if (line ~ /^\|/) { block = 1; next }
          block = 0
          if (line ~ /^\x27.*\x27$/ || line ~ /^".*"$/) line = substr(line, 2, length(line) - 2)
          print line > file
          next
        }
        block { sub(/^        /, ""); print >> file }
      ' src/doctor/explain/*.yaml
      ;;
    src/metrics/pod_identity_fuzz.cc)
      # The simulator fixtures' process cgroups and pod log directory names.
      local c i=0
      for c in sim/fixtures/*/root/proc/*/cgroup; do
        [ -f "$c" ] && cp "$c" "$dir/cgroup-$((i += 1))"
      done
      for c in sim/fixtures/*/root/var/log/pods/*; do
        [ -d "$c" ] && basename "$c" | tr -d '\n' > "$dir/logdir-$((i += 1))"
      done
      ;;
    src/deploy/talos_migration_fuzz.cc)
      # Machine configurations as nodes carry them: gpulet's patches for each release (each a
      # configuration's shape), and a v1alpha1 document with the fields 1.14 moves.
      local f
      for f in tests/fixtures/talos-patches/*.yaml; do cp "$f" "$dir/$(basename "$f")"; done
      printf 'version: v1alpha1\nmachine:\n  type: controlplane\n  nodeLabels: {a: b}\n  kubelet:\n    nodeIP: {validSubnets: [10.0.0.0/8]}\n    extraArgs: {register-with-taints: "k=v:NoSchedule"}\ncluster: {allowSchedulingOnControlPlanes: true}\n---\napiVersion: v1alpha1\nkind: HostnameConfig\nauto: stable\n' \
        > "$dir/upgraded.yaml"
      ;;
    src/talos/talosconfig_fuzz.cc)
      # A talosconfig as Talos' ServiceAccount controller writes it (context default, endpoint
      # talos.default, base64 PEM; the key under Talos' Ed25519 label), and one with a port.
      local ca crt key
      ca=$(printf -- '-----BEGIN CERTIFICATE-----\nMIIBPzCB8qADAgECAhEA\n-----END CERTIFICATE-----\n' | base64 -w0)
      crt=$(printf -- '-----BEGIN CERTIFICATE-----\nMIIBbDCCAR6gAwIBAgIQ\n-----END CERTIFICATE-----\n' | base64 -w0)
      key=$(printf -- '-----BEGIN ED25519 PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END ED25519 PRIVATE KEY-----\n' | base64 -w0)
      printf 'context: default\ncontexts:\n    default:\n        endpoints:\n            - talos.default\n        ca: %s\n        crt: %s\n        key: %s\n' \
        "$ca" "$crt" "$key" > "$dir/serviceaccount.yaml"
      printf 'context: prod\ncontexts:\n  prod:\n    endpoints: ["[fd00::2]:50001", 10.0.0.2]\n    nodes: [10.0.0.7]\n    ca: %s\n    crt: %s\n    key: %s\n' \
        "$ca" "$crt" "$key" > "$dir/talosctl.yaml"
      ;;
    src/node/driver_gpus_fuzz.cc)
      # The driver's information files as the simulator fixtures carry them.
      local f n=0
      for f in sim/fixtures/*/root/proc/driver/nvidia/gpus/*/information; do
        n=$((n + 1))
        cp "$f" "$dir/information-$n"
      done
      ;;
    src/node/dmem_fuzz.cc)
      # Process cgroup files as the simulator fixtures carry them, a hybrid host's, and a
      # dmem.capacity with NVIDIA's and another driver's regions.
      local c i=0
      for c in sim/fixtures/*/root/proc/*/cgroup; do
        [ -f "$c" ] && cp "$c" "$dir/cgroup-$((i += 1))"
      done
      printf '12:memory:/kubepods/pod1/c\n0::/kubepods/burstable/pod1/ctr-a\n' > "$dir/hybrid"
      printf 'drm/0000:03:00.0/vram0 12550144\nnvidia/0000:02:00.0/vidmem 34359738368\n' \
        > "$dir/capacity"
      ;;
    src/state/status_report_fuzz.cc)
      # A /status document as the daemon serves it: one GPU with every field, one with few.
      printf '%s\n' '{"nvml_ok":true,"gpus":[{"index":0,"uuid":"GPU-1","name":"NVIDIA GeForce RTX 3080","pci_bus_id":"0000:01:00.0","health":"Degraded","reason":"XID 13","action":"watch","since":"2026-01-02T03:04:05Z","last_xid":13,"xid_counts":{"13":2},"memory_total_bytes":10737418240,"allocations":[{"namespace":"ai","pod":"ollama-0","container":"ollama","resource":"nvidia.com/gpu","device_id":"GPU-1::0"}],"answering":true,"sample_age_seconds":0.5,"utilization_percent":40,"memory_used_bytes":1048576,"temperature_c":61,"power_w":220.5,"processes":[{"pid":4242,"name":"ollama","namespace":"ai","pod":"ollama-0","container":"ollama","used_bytes":1048576}],"vram_slices":[{"slice":"s1","owner":"GPU-1::0","quota_bytes":4096,"used_bytes":1024,"peak_bytes":2048,"refused":0,"processes":1,"device_used_bytes":1024,"namespace":"ai","pod":"ollama-0","container":"ollama"}],"vram_enforcement":"preload","evictions":[{"namespace":"ai","pod":"ollama-0","state":"blocked","tries":2,"last":"blocked: a budget"},{"namespace":"ai","pod":"x","state":"would-evict","tries":0}],"last_fault":{"at":"2026-01-02T03:04:05Z","what":"Unhealthy: XID 79","verdict":"hardware","headline":"the card","file":"/var/lib/gpulet/r.json"}},{"uuid":"GPU-2","name":"x","pci_bus_id":"0000:02:00.0","health":"Healthy"}]}' \
        > "$dir/full.json"
      printf '%s\n' '{"nvml_ok":false,"nvml_error":"libnvidia-ml.so.1: not found","gpus":[]}' > "$dir/no-nvml.json"
      ;;
    src/registry/oci_archive_fuzz.cc)
      # An archive as podman saves it (the same writer as make image's).
      cp tests/fixtures/oci/*.oci.tar "$dir/"
      ;;
    src/config/config_fuzz.cc)
      # README's config example, and one file per key from it.
      sed -n '/^```yaml$/,/^```$/p' README.md | sed '1d;$d' > "$dir/readme.yaml"
      printf 'version: v1\nhealth:\n  probeInterval: 2s\n  applicationXids: [13, 31]\n' \
        > "$dir/health.yaml"
      printf 'version: v1\nplugin:\n  deviceListStrategy: envvar, cdi-cri\n' > "$dir/list.yaml"
      ;;
    src/yaml/reader_fuzz.cc)
      # Real documents of several shapes: a Talos patch, a catalogue file, a kustomization.
      local f
      for f in tests/fixtures/talos-patches/*.yaml src/doctor/explain/dcgm.yaml \
        deploy/base/kustomization.yaml; do
        cp "$f" "$dir/$(basename "$(dirname "$f")")-$(basename "$f")"
      done
      ;;
    src/cdi/spec_fuzz.cc)
      # Specs as the NVIDIA toolkit and gpulet write them, YAML and JSON.
      local f
      for f in tests/fixtures/hostroots/talos-1.12/var/run/cdi/*.json \
        tests/fixtures/hostroots/talos-1.14/run/cdi/*.yaml \
        sim/fixtures/homelab/root/var/run/cdi/*.yaml; do
        cp "$f" "$dir/$(echo "$f" | tr / _)"
      done
      ;;
    src/http/web_config_fuzz.cc)
      printf 'tls_server_config:\n  cert_file: /c.pem\n  key_file: /k.pem\n' > "$dir/tls.yml"
      printf 'basic_auth_users:\n  prom: %s\n' \
        '$2y$10$N9qo8uLOickgx2ZMRZoMyeIjZAgcfl7p92ldGxad68LJZdL17lhWy' > "$dir/users.yml"
      printf 'http_server_config:\n  http2: true\n' > "$dir/http.yml"
      ;;
    src/kube/http_response_fuzz.cc)
      # Responses as the API server sends them: a flag byte first (HEAD, EOF, split point).
      printf '\002HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}' \
        > "$dir/length"
      printf '\000HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1a\r\n{"type":"ADDED","object":{}}\r\n0\r\n\r\n' \
        > "$dir/chunked"
      printf '\006HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 409 Conflict\r\n\r\n{"kind":"Status"}' \
        > "$dir/interim"
      printf '\001HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Length: 5\r\n\r\n' \
        > "$dir/head"
      ;;
    src/dra/checkpoint_fuzz.cc)
      # A checkpoint as gpulet writes it, and claims alone ('!': the target wraps them in a
      # valid envelope, so mutations reach the claim parser past the checksum).
      printf '{"kind":"GpuletDraCheckpoint","version":1,"checksum":"fnv1a64:08f44b07b5901a25","claims":{}}' \
        > "$dir/empty.json"
      printf '!{"u1":{"namespace":"ml","name":"gpu","devices":[{"requestNames":["gpu"],"pool":"node-a","device":"gpu-0","cdiDeviceIds":["gpulet.dev/claim=u1-gpu-0"],"shareId":""}]}}' \
        > "$dir/claims.json"
      printf '!{"u2":{"namespace":"ml","name":"x","devices":[]}}' > "$dir/no-devices.json"
      ;;
    sim/fixture_fuzz.cc)
      cp sim/fixtures/*.yaml "$dir/"
      ;;
    src/recorder/recorder_files_fuzz.cc)
      # A recording as gpulet writes it (src/recorder/recorder_files.h): two samples, an XID.
      cat > "$dir/recording.json" << 'JSON'
{"boot_id":"b","columns":["at_ms","answering","nvml_ms","gpu_temp_c","mem_temp_c","power_mw","power_limit_mw","sm_clock_mhz","mem_clock_mhz","throttle_reasons","gpu_util_percent","fb_used_mib","pcie_replays","pcie_link_width","pcie_link_mts","aer_correctable","aer_nonfatal","aer_fatal","remapped_uncorrectable","processes"],"driver_version":"575.51.02","events":[{"at_ms":1780000000500,"kind":"xid","text":"NVRM: Xid (PCI:0000:02:00): 79, GPU has fallen off the bus.","xid":79},{"at_ms":1780000000000,"kind":"process-start","pid":4242,"pod":"ai/ollama-0/ollama","text":"pid 4242 ollama started"}],"fault":{"at_ms":1780000001000,"health":"Unhealthy","what":"Unhealthy: XID 79"},"gpu":{"index":1,"name":"NVIDIA GeForce RTX 5090","pci_bus_id":"0000:02:00.0","uuid":"GPU-8a41"},"gpulet_version":"0.1.0","interval_ms":1000,"node":"n","samples":[[1780000000000,1,2,94,null,400000,575000,2400,14000,64,90,20000,0,16,32000,3,0,0,0,1],[1780000001000,0,1000,null,null,null,null,null,null,null,null,null,null,16,32000,40,0,2,null,null]]}
JSON
      printf '{"version":1,"gpus":{"GPU-8a41":{"pci_bus_id":"0000:02:00.0","since_unix":1780000000,"reason":"retired: 3 faults within 168h"}}}' \
        > "$dir/retired.json"
      printf '{"version":1,"reboots":[{"at_unix":1780000000,"boot_id":"b1","reason":"XID 79","gpus":["GPU-8a41"],"outcome":"rebooted"}]}' \
        > "$dir/reboots.json"
      printf 'RxErr 0\nTOTAL_ERR_COR 7\n' > "$dir/aer"
      printf '16.0 GT/s PCIe\n' > "$dir/speed"
      ;;
    src/vram/slice_file_fuzz.cc)
      # A slice file as gpulet writes it (src/vram/slice_format.h): 8 GiB, no process yet.
      python3 -c '
import struct, sys
h = struct.pack("<8sIIIIIIQIIQQQ96s256s", b"GPULVRAM", 1, 0, 4096, 64, 1024, 0, 8 << 30,
                0, 0, 0, 0, 0, b"GPU-fuzz", b"pod/ctr")
sys.stdout.buffer.write(h.ljust(4096, b"\0") + b"\0" * 64 * 1024)' > "$dir/slice"
      ;;
    src/nvml/elf_check_fuzz.cc)
      local lib
      for lib in libdl.so.2 libpthread.so.0 librt.so.1 libutil.so.1; do
        for d in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib64 /usr/lib64; do
          if [ -f "$d/$lib" ]; then cp "$d/$lib" "$dir/"; break; fi
        done
      done
      ;;
  esac
}

# --- build and run -----------------------------------------------------------------------
mapfile -t targets < <(find src sim -name '*_fuzz.cc' | sort)
if [ $# -gt 0 ]; then
  selected=()
  for want in "$@"; do
    found=""
    for t in "${targets[@]}"; do
      [ "$(basename "$t" .cc)" = "$want" ] && selected+=("$t") && found=1
    done
    [ -n "$found" ] || { echo "fuzz.sh: no target named $want" >&2; exit 2; }
  done
  targets=("${selected[@]}")
fi
[ ${#targets[@]} -gt 0 ] || { echo "fuzz.sh: no *_fuzz.cc targets under src/ or sim/" >&2; exit 1; }

# At most $parallel runs at once (FUZZ_JOBS, default one a core): each uses one core, so two
# cores halve the stage.
parallel=${FUZZ_JOBS:-$(nproc)}
case "$parallel" in '' | *[!0-9]* | 0) echo "fuzz.sh: FUZZ_JOBS must be a positive number" >&2; exit 2 ;; esac
throttle() {
  while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do wait -n || true; done
}

# Seed each target, then run them $parallel at a time, each for $seconds.
failed=()
summary=()
runnable=()
for target in "${targets[@]}"; do
  name=$(basename "$target" .cc)
  if [ ! -x "$bin/$name" ] || [ "$bin/$name" -ot "$target" ]; then
    echo "fuzz.sh: $bin/$name is missing or older than $target: build the targets with" \
      "make fuzz-build (cmake --build build-asan --target gpulet_fuzz), or set FUZZ_BIN" >&2
    failed+=("$name (not built)")
    summary+=("$name: NOT BUILT")
    continue
  fi
  make_seeds "$name" "$target"
  mkdir -p "$out/corpus/$name" "$out/artifacts/$name"
  rm -f "$out/logs/$name.rc"
  runnable+=("$name")
done
if [ -n "$build_only" ]; then
  if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz.sh: ${#failed[@]} target(s) not built: ${failed[*]}" >&2
    exit 1
  fi
  echo "fuzz.sh: ${#runnable[@]} targets built in $bin, seeded in $out/seeds"
  exit 0
fi
for name in "${runnable[@]}"; do
  throttle
  echo "== $name: run ${seconds}s, log $out/logs/$name.log"
  (
    set +e
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
      "$bin/$name" "$out/corpus/$name" "$out/seeds/$name" \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$out/artifacts/$name/" > "$out/logs/$name.log" 2>&1
    echo $? > "$out/logs/$name.rc"
  ) &
done
wait
for name in "${runnable[@]}"; do
  log="$out/logs/$name.log"
  rc=$(cat "$out/logs/$name.rc" 2>/dev/null || echo "?")
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  corpus=$(find "$out/corpus/$name" -type f | wc -l)
  if [ "$rc" != 0 ]; then
    echo "fuzz.sh: $name FAILED (exit $rc); the end of $log:" >&2
    tail -n 40 "$log" >&2
    ls "$out/artifacts/$name" >&2 || true
    failed+=("$name")
    summary+=("$name: FAILED (exit $rc), see $log and $out/artifacts/$name/")
  else
    summary+=("$name: ok, ${runs:-?} inputs in ${seconds}s, corpus $corpus files")
  fi
done

echo
echo "fuzz summary:"
printf '  %s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: ${#failed[@]} target(s) failed: ${failed[*]}" >&2
  exit 1
fi
