#!/usr/bin/env bash
# The whole test suite: prerequisites, unit tests (no cluster), generated-file drift, the operator
# images' digests, then the end-to-end tests and the images themselves (run under crun) against
# the local control plane and nats-server. Stops the environment at the end unless it was already
# running before (e.g. from `make demo`) or KEEP_ENV=1.
set -euo pipefail
cd "$(dirname "$0")/.."
source e2e/env/versions.sh
start=$SECONDS
step() { printf '\n=== %s (%ss)\n' "$*" "$((SECONDS - start))" >&2; }
target_dir=${CARGO_TARGET_DIR:-$PWD/target}
# A one-off build (CI on a fresh clone) gains nothing from incremental caches, which would take
# several GB of disk beside the binaries.
[[ -n ${CI:-} ]] && export CARGO_INCREMENTAL=0

step "prerequisites"
hack/prereqs.sh

step "kustomize for the manifests tests (e2e/env/build.sh kustomize, cached)"
e2e/env/build.sh kustomize

step "unit tests (cargo test --workspace)"
cargo test --workspace --locked

step "generated files are up to date"
cargo run -q --locked -p kubeflow-crds --bin crdgen -- --check
cargo run -q --locked -p kubeflow-deploy --bin deploygen -- --check
cargo run -q --locked -p kubeflow-bundle --bin bundlegen -- --check

step "operator images: build, digests as in images/lock.json (hack/images.sh check)"
hack/images.sh check

step "OLM bundles and catalog (operator-sdk bundle validate, opm validate)"
hack/validate-bundles.sh

step "local environment (e2e/env/up.sh)"
was_running=0
[[ -f $ENV_FILE ]] && KUBECONFIG=$KUBECONFIG_FILE "$KUBE_BIN/kubectl" get --raw /readyz >/dev/null 2>&1 && was_running=1
if ((was_running == 0)) && [[ ${KEEP_ENV:-0} != 1 ]]; then
  trap 'e2e/env/down.sh' EXIT
fi
e2e/env/up.sh
source "$ENV_FILE"
# Operators `make demo` left running would reconcile the tests' resources too.
for pidfile in "$STATE_DIR"/pids/*-operator; do
  [[ -f $pidfile ]] && { kill -TERM "$(cat "$pidfile")" 2>/dev/null || true; rm -f "$pidfile"; }
done

step "end-to-end tests"
# The e2e tests run the operator binaries as host processes.
cargo build --locked --workspace --bins
# Test-only operator binaries (e.g. katib-operator-test-releases) live in the e2e crate.
cargo build --locked -p kubeflow-e2e --features e2e --bins
export KFOP_BIN_DIR=$target_dir/debug
cargo test --locked -p kubeflow-e2e --features e2e -- --test-threads 4

step "chaos: eight fixed-seed trials, one fault kind each twice (make chaos runs a hundred)"
# Alone, after the e2e tests: it restarts the shared kube-apiserver.
"$KFOP_BIN_DIR/chaos" --trials 8 --seed 20261124

step "operator images run as nonroot under crun and become ready (hack/test-images.sh)"
hack/test-images.sh

step "done in $((SECONDS - start)) s; build output: $(du -sh "$target_dir" | cut -f1) in $target_dir"
