#!/usr/bin/env bash
# Validates the OLM packaging with the operator framework's own tools, built from the Go module
# proxy by e2e/env/build.sh: `operator-sdk bundle validate` (with the operatorframework optional
# suite) on every bundle under bundle/, and `opm validate` on the file-based catalog.
set -euo pipefail
cd "$(dirname "$0")/.."
source e2e/env/versions.sh
e2e/env/build.sh
count=0
for dir in bundle/*/*/metadata; do
  b=${dir%/metadata}
  # Two warnings are expected and kept: the validator reads any `events` rule as the removed
  # events.k8s.io/v1beta1 (the operators use events.k8s.io/v1), and component operators create
  # the CRDs their component ships.
  # This operator-sdk (the newest the module proxy serves) predates NetworkPolicy as a bundle
  # object (operator-registry 1.55; OLM and opm here are newer and take it): it validates a copy
  # without the NetworkPolicies, which `opm validate` below and e2e `olm` (OLM creating them)
  # cover.
  checked=$b
  if grep -lq '^kind: NetworkPolicy' "$b"/manifests/*.yaml; then
    checked=$(mktemp -d "${TMPDIR:-/tmp}/kfop-bundle.XXXX")/$(basename "$b")
    mkdir -p "$checked" && cp -r "$b/manifests" "$b/metadata" "$checked/"
    rm $(grep -l '^kind: NetworkPolicy' "$checked"/manifests/*.yaml)
  fi
  rc=0 && out=$("$OPERATOR_SDK_BIN/operator-sdk" bundle validate "$checked" --select-optional suite=operatorframework 2>&1) || rc=$?
  [[ $checked == "$b" ]] || rm -rf "$(dirname "$checked")"
  grep -v -e 'deprecated and removed in v1.25' -e 'CSV contains permissions to create CRD' <<<"$out" | sed "s|^|$b: |" || true
  ((rc == 0)) || { echo "bundle validation FAILED: $b" >&2; exit 1; }
  count=$((count + 1))
done
"$OLM_BIN/opm" validate bundle/catalog
echo "validated $count bundles and the catalog (bundle/catalog)"
