#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every overlay under deploy/kubernetes/overlays renders with `kubectl kustomize`, and every
# rendered object passes the offline schema check (npm/check_manifests.mjs), and the references
# between them hold. Also shows both can fail: a copy of the example output with a misspelled
# field, and one with a dangling serviceName, must be rejected. Then what drains and rollouts
# need (PDB maxUnavailable 1, OnDelete, the grace period, the preStop hook, which it runs in a
# PID namespace against stand-in workers when root), and GPUs from the device plugin only.
# Usage: kubernetes_test.sh <source dir>
set -euo pipefail
src=$1
here=$(cd "$(dirname "$0")" && pwd)
# Debian 12 has no kubectl new enough for kustomize v5 (its kubernetes-client is 1.20); the
# development and CI image carries one. Without it the test is skipped, not passed.
command -v kubectl >/dev/null || { echo "SKIP: kubectl not found (it comes with kustomize built in)"; exit 77; }
[ -d "$here/npm/node_modules" ] || { echo "$here/npm/node_modules missing: run scripts/install-deps.sh"; exit 1; }
kubectl version --client 2>/dev/null | head -2 || true

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
for overlay in "$src"/deploy/kubernetes/overlays/*/; do
  name=$(basename "$overlay")
  if ! kubectl kustomize "$overlay" > "$tmp/$name.yaml" 2> "$tmp/$name.err"; then
    echo "FAIL overlays/$name: kubectl kustomize:"; cat "$tmp/$name.err"; failures=$((failures + 1)); continue
  fi
  if node "$here/npm/check_manifests.mjs" "$tmp/$name.yaml"; then
    echo "ok   overlays/$name"
  else
    echo "FAIL overlays/$name: schema check"; failures=$((failures + 1))
  fi
done
[ -f "$tmp/example.yaml" ] || { echo "FAIL: overlays/example did not render"; exit 1; }

# What the issue asks of the example: the objects and the settings that matter.
for want in "kind: Namespace" "kind: ServiceAccount" "kind: StatefulSet" "kind: Service" \
            "kind: PodDisruptionBudget" "kind: NetworkPolicy" "volumeClaimTemplates:" \
            "readOnlyRootFilesystem: true" "runAsNonRoot: true" "type: RuntimeDefault" \
            "path: /readyz" "secretName: fp8d-tls" "secretName: fp8d-tokens" \
            "prometheus.io/scrape: \"true\""; do
  grep -qF "$want" "$tmp/example.yaml" || { echo "FAIL overlays/example lacks: $want"; failures=$((failures + 1)); }
done
grep -qF "nvidia.com/gpu" "$tmp/gpu.yaml" || { echo "FAIL overlays/gpu lacks nvidia.com/gpu"; failures=$((failures + 1)); }

# Drains and rollouts (statefulset.yaml and poddisruptionbudget.yaml say why).
for want in "maxUnavailable: 1" "type: OnDelete" "terminationGracePeriodSeconds: 600" "preStop:"; do
  grep -qF "$want" "$tmp/example.yaml" || { echo "FAIL overlays/example lacks: $want"; failures=$((failures + 1)); }
done
if grep -qF "maxUnavailable: 0" "$tmp/example.yaml"; then
  echo "FAIL a PodDisruptionBudget with maxUnavailable: 0 blocks every drain"; failures=$((failures + 1))
fi
# The StatefulSet's container in a rendered file, as JSON, through the npm yaml parser.
container_json() {  # <rendered yaml>
  (cd "$here/npm" && node --input-type=module -e '
    import { parseAllDocuments } from "yaml";
    import { readFileSync } from "node:fs";
    const sts = parseAllDocuments(readFileSync(process.argv[1], "utf8")).map((d) => d.toJS())
      .find((o) => o && o.kind === "StatefulSet");
    process.stdout.write(JSON.stringify(sts.spec.template.spec.containers[0]));' "$1")
}
# GPUs come from the device plugin: a limit in overlays/gpu, no NVIDIA_VISIBLE_DEVICES anywhere.
if container_json "$tmp/gpu.yaml" | python3 -c 'import json, sys
c = json.load(sys.stdin)
sys.exit(0 if int(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0)) > 0 else 1)'; then
  echo "ok   overlays/gpu: GPUs as resources.limits nvidia.com/gpu"
else
  echo "FAIL overlays/gpu: fp8d's container has no resources.limits nvidia.com/gpu"; failures=$((failures + 1))
fi
for rendered in "$tmp"/*.yaml; do
  if grep -q "NVIDIA_VISIBLE_DEVICES" "$rendered"; then
    echo "FAIL $(basename "$rendered"): sets NVIDIA_VISIBLE_DEVICES (the device plugin's to set)"; failures=$((failures + 1))
  fi
done

# The preStop hook for real, in a PID namespace of its own as in a pod (root only): two
# workers that checkpoint on SIGTERM, one that ignores it, and a process that is no worker.
if [ "$(id -u)" -ne 0 ]; then
  echo "skip the preStop run (unshare --pid needs root; CI runs as root)"
else
  container_json "$tmp/example.yaml" |
    python3 -c 'import json, sys; sys.stdout.write(json.load(sys.stdin)["lifecycle"]["preStop"]["exec"]["command"][-1])' \
    > "$tmp/prestop.sh"
  grep -q '^wait_s=540$' "$tmp/prestop.sh" || { echo "FAIL: the preStop script has no wait_s=540 line"; failures=$((failures + 1)); }
  mkdir -p "$tmp/run/stubborn"
  # A rank: on SIGTERM it "checkpoints" (1 s) and exits 76.
  printf '%s\n' '#!/bin/sh' \
    'trap '\''sleep 1; echo "$1 checkpointed" >> "$LOG"; exit 76'\'' TERM' \
    'echo "$1 started" >> "$LOG"' 'while :; do sleep 0.1; done' > "$tmp/run/fp8-worker"
  printf '%s\n' '#!/bin/sh' 'trap "" TERM' 'echo "$1 started" >> "$LOG"' 'while :; do sleep 0.1; done' \
    > "$tmp/run/stubborn/fp8-worker"
  chmod +x "$tmp/run/fp8-worker" "$tmp/run/stubborn/fp8-worker"
  # wait_s=540 becomes <wait_s> here, so the stubborn worker costs seconds, not 9 minutes.
  run_prestop() {  # <with the stubborn worker: 0|1> <wait_s>; what happened in $tmp/log
    : > "$tmp/log"
    sed "s/^wait_s=540$/wait_s=$2/" "$tmp/prestop.sh" > "$tmp/prestop-short.sh"
    LOG="$tmp/log" timeout 60 unshare --pid --fork --mount-proc /bin/sh -c '
      "$1/fp8-worker" rank0 & "$1/fp8-worker" rank1 &
      [ "$2" = 1 ] && "$1/stubborn/fp8-worker" stubborn &
      sleep 30 & other=$!
      while [ "$(grep -c started "$LOG")" -lt $((2 + $2)) ]; do sleep 0.1; done
      t0=$(cut -d. -f1 /proc/uptime); /bin/sh "$3"; echo "hook exit $?" >> "$LOG"
      echo "hook took $(( $(cut -d. -f1 /proc/uptime) - t0 )) s" >> "$LOG"
      kill -0 "$other" && echo "other alive" >> "$LOG"' _ "$tmp/run" "$1" "$tmp/prestop-short.sh"
  }
  run_prestop 0 20
  took=$(sed -n 's/^hook took \([0-9]*\) s$/\1/p' "$tmp/log")
  if grep -q "rank0 checkpointed" "$tmp/log" && grep -q "rank1 checkpointed" "$tmp/log" &&
     grep -q "hook exit 0" "$tmp/log" && grep -q "other alive" "$tmp/log" && [ -n "$took" ] && [ "$took" -lt 20 ]; then
    echo "ok   preStop: each worker got SIGTERM and checkpointed, the hook returned once they were gone ($took s), other processes untouched"
  else
    echo "FAIL preStop with two workers:"; cat "$tmp/log"; failures=$((failures + 1))
  fi
  run_prestop 1 4
  took=$(sed -n 's/^hook took \([0-9]*\) s$/\1/p' "$tmp/log")
  if grep -q "hook exit 0" "$tmp/log" && grep -q "rank0 checkpointed" "$tmp/log" && [ -n "$took" ] &&
     [ "$took" -ge 3 ] && [ "$took" -le 6 ]; then
    echo "ok   preStop: a worker that ignores SIGTERM holds the hook for wait_s only ($took s of 4)"
  else
    echo "FAIL preStop with a worker ignoring SIGTERM:"; cat "$tmp/log"; failures=$((failures + 1))
  fi
fi
# The ServiceMonitor needs the Prometheus Operator's CRD: only overlays/prometheus-operator has it.
grep -qF "kind: ServiceMonitor" "$tmp/prometheus-operator.yaml" ||
  { echo "FAIL overlays/prometheus-operator lacks the ServiceMonitor"; failures=$((failures + 1)); }
for plain in example gpu; do
  if grep -qF "kind: ServiceMonitor" "$tmp/$plain.yaml"; then
    echo "FAIL overlays/$plain has a ServiceMonitor (it needs a CRD a cluster may lack)"; failures=$((failures + 1))
  fi
done
sed 's/scrapeTimeout:/scrapeTimeOut:/' "$tmp/prometheus-operator.yaml" > "$tmp/sm-misspelled.yaml"
if node "$here/npm/check_manifests.mjs" "$tmp/sm-misspelled.yaml" > "$tmp/sm-misspelled.out"; then
  echo "FAIL: the ServiceMonitor check accepted a misspelled field"; failures=$((failures + 1))
else
  echo "ok   the ServiceMonitor check rejects a misspelled field: $(head -1 "$tmp/sm-misspelled.out" | cut -c1-120)"
fi
sed 's/^    port: http$/    port: metrics/' "$tmp/prometheus-operator.yaml" > "$tmp/sm-port.yaml"
if node "$here/npm/check_manifests.mjs" "$tmp/sm-port.yaml" > "$tmp/sm-port.out"; then
  echo "FAIL: the cross-check accepted a ServiceMonitor port no Service has"; failures=$((failures + 1))
else
  echo "ok   the cross-check rejects a ServiceMonitor port no Service has: $(head -1 "$tmp/sm-port.out" | cut -c1-120)"
fi

sed 's/readOnlyRootFilesystem/readOnlyRootFileSystem/' "$tmp/example.yaml" > "$tmp/misspelled.yaml"
if node "$here/npm/check_manifests.mjs" "$tmp/misspelled.yaml" > "$tmp/misspelled.out"; then
  echo "FAIL: the schema check accepted a misspelled field"; failures=$((failures + 1))
else
  echo "ok   the schema check rejects a misspelled field: $(head -1 "$tmp/misspelled.out" | cut -c1-120)"
fi
sed 's/serviceName: fp8d-headless/serviceName: fp8d-missing/' "$tmp/example.yaml" > "$tmp/dangling.yaml"
if node "$here/npm/check_manifests.mjs" "$tmp/dangling.yaml" > "$tmp/dangling.out"; then
  echo "FAIL: the cross-check accepted a serviceName that names no Service"; failures=$((failures + 1))
else
  echo "ok   the cross-check rejects a dangling reference: $(head -1 "$tmp/dangling.out" | cut -c1-120)"
fi
echo "kubernetes: $failures failures"
[ "$failures" -eq 0 ]
