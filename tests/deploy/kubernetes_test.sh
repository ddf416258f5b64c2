#!/usr/bin/env bash
# Every overlay under deploy/kubernetes/overlays renders with `kubectl kustomize`, and every
# rendered object passes the offline schema check (npm/check_manifests.mjs), and the references
# between them hold. Also shows both can fail: a copy of the example output with a misspelled
# field, and one with a dangling serviceName, must be rejected.
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
