#!/usr/bin/env bash
# The whole test suite: prerequisites, the one build (hack/cargo.sh), generated-file drift, the
# operator images' digests, then the unit and end-to-end tests and the images themselves (run
# under crun) against the local control plane and nats-server. Stops the environment at the end
# unless it was already running before (e.g. from `make demo`) or KEEP_ENV=1.
set -euo pipefail
cd "$(dirname "$0")/.."
source e2e/env/versions.sh
start=$SECONDS
# What runs when the script ends, however it ends: stop the second build, stop the environment.
on_exit=()
trap 'for action in "${on_exit[@]}"; do eval "$action"; done' EXIT
step() { printf '\n=== %s (%ss)\n' "$*" "$((SECONDS - start))" >&2; }
target_dir=${CARGO_TARGET_DIR:-$PWD/target}

step "prerequisites"
hack/prereqs.sh

step "kustomize for the manifests tests (e2e/env/build.sh kustomize, cached)"
e2e/env/build.sh kustomize

step "the one build: every library, binary and test, e2e included (hack/cargo.sh build)"
hack/cargo.sh build
BIN_DIR=$(hack/cargo.sh bin-dir)

step "generated files are up to date"
"$BIN_DIR/crdgen" --check
"$BIN_DIR/deploygen" --check
"$BIN_DIR/bundlegen" --check

step "operator images from the same binaries: digests as in images/lock.json (hack/images.sh check)"
hack/images.sh check

step "OLM bundles and catalog (operator-sdk bundle validate, opm validate)"
hack/validate-bundles.sh

step "local environment (e2e/env/up.sh)"
was_running=0
[[ -f $ENV_FILE ]] && KUBECONFIG=$KUBECONFIG_FILE "$KUBE_BIN/kubectl" get --raw /readyz >/dev/null 2>&1 && was_running=1
if ((was_running == 0)) && [[ ${KEEP_ENV:-0} != 1 ]]; then
  on_exit+=(e2e/env/down.sh)
fi
e2e/env/up.sh
source "$ENV_FILE"
# Operators `make demo` left running would reconcile the tests' resources too.
for pidfile in "$STATE_DIR"/pids/*-operator; do
  [[ -f $pidfile ]] && { kill -TERM "$(cat "$pidfile")" 2>/dev/null || true; rm -f "$pidfile"; }
done

step "a second build elsewhere, compared byte for byte (hack/images.sh reproduce), beside the tests"
# At the lowest CPU priority: it takes what the tests leave idle, and the tests keep their pace.
# Started only now: on a cold machine the steps above build the Go tools, which it would slow.
reproduce_log=$(mktemp "${TMPDIR:-/tmp}/kfop-reproduce-log.XXXX")
setsid nice -n 19 hack/images.sh reproduce >"$reproduce_log" 2>&1 &
reproduce_pid=$!
stop_reproduce="kill -- -$reproduce_pid 2>/dev/null || true"
on_exit+=("$stop_reproduce")

step "unit and end-to-end tests (hack/cargo.sh test)"
# The e2e tests run the operator binaries of the one build as host processes.
export KFOP_BIN_DIR=$BIN_DIR
hack/cargo.sh test --no-fail-fast -- --test-threads 4

step "chaos: eight fixed-seed trials, one fault kind each twice (make chaos runs a hundred)"
# Alone, after the e2e tests: it restarts the shared kube-apiserver.
"$KFOP_BIN_DIR/chaos" --trials 8 --seed 20261124

step "operator images run as nonroot under crun and become ready (hack/test-images.sh)"
hack/test-images.sh

step "the second build's comparison (hack/images.sh reproduce)"
if ! wait "$reproduce_pid"; then
  cat "$reproduce_log" >&2
  exit 1
fi
tail -1 "$reproduce_log" >&2
rm -f "$reproduce_log"
# The second build is done: drop only its stop action (the environment's, if any, stays).
kept=()
for action in "${on_exit[@]}"; do [[ $action == "$stop_reproduce" ]] || kept+=("$action"); done
on_exit=("${kept[@]}")

step "done in $((SECONDS - start)) s; build output: $(du -sh "$target_dir" | cut -f1) in $target_dir"
