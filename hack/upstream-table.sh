#!/usr/bin/env bash
# Objects per application of each kubeflow/manifests release's KfDef (../shared/manifests): what
# `kfop build` writes for each application and what upstream's `kustomize build <path>` renders
# for the same path with the kustomize the release pins, compared by kind, namespace and name
# (e2e/src/bin/upstream-table.rs). Prints Markdown tables; docs/upstream.md keeps the latest.
# (The content of each object is compared by manifests/tests/upstream.rs and the e2e kfop test.)
#   hack/upstream-table.sh [TAG...]   default: 1.2.0 1.3.1 1.10.2 1.11.0, from
#                                     $KFOP_UPSTREAM_MANIFESTS, else ../shared/manifests
set -euo pipefail
cd "$(dirname "$0")/.."
e2e/env/build.sh kustomize >&2
hack/cargo.sh build-bins --bin kfop --bin upstream-table >&2
bin=$(hack/cargo.sh bin-dir)
KFOP_BIN_DIR=$bin exec "$bin/upstream-table" "$@"
