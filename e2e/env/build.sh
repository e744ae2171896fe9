#!/usr/bin/env bash
# Builds the local environment's binaries from the Go module proxy, once per version:
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (k8s.io/kubernetes),
#   kwok (sigs.k8s.io/kwok) and nats-server (github.com/nats-io/nats-server/v2); for the OLM
#   packaging: OLM's olm and catalog operators with its CRDs, opm, and operator-sdk; kustomize
#   v3.1.0 (the engine kfctl used), v3.2.0 (kubeflow/manifests 1.3-1.6) and v5 (current
#   kubeflow/manifests) for rendering KfDef manifests (crate kubeflow-manifests).
# `build.sh kustomize` builds only the kustomizes (a minute), for the tests that run them.
# Binaries land in $CACHE_DIR/bin/<name>-<version>, outside the work tree, so fresh clones reuse them.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/versions.sh"

log() { printf '[build] %s\n' "$*" >&2; }

build_kube() {
  local names=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl) missing=0 n
  for n in "${names[@]}"; do [[ -x $KUBE_BIN/$n ]] || missing=1; done
  ((missing)) || return 0
  log "building Kubernetes $KUBE_VERSION control plane into $KUBE_BIN (cold: ~30 min on 2 cores)"
  local major minor rest ver_pkg tmp start=$SECONDS
  IFS=. read -r major minor rest <<<"${KUBE_VERSION#v}"
  ver_pkg=k8s.io/component-base/version
  local ldflags="-s -w"
  for pkg in $ver_pkg k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  tmp=$(mktemp -d "$CACHE_DIR/bin/.kube.XXXX") && chmod 755 "$tmp"
  (cd "$ENV_DIR/kube" && go build -trimpath -ldflags "$ldflags" -o "$tmp/" \
      ./cmd/etcd \
      k8s.io/kubernetes/cmd/kube-apiserver \
      k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler \
      k8s.io/kubernetes/cmd/kubectl) || {
    log "FAILED building the Kubernetes control plane from $ENV_DIR/kube (go build output above)"
    rm -rf "$tmp"; return 1; }
  rm -rf "$KUBE_BIN" && mv "$tmp" "$KUBE_BIN"
  log "Kubernetes built in $((SECONDS - start)) s"
}

# go install of a module@version into a versioned directory (used for tools whose go.mod has no
# replace directives, so they build as published).
install_tool() {
  local pkg=$1 version=$2 dest=$3 name=$4
  [[ -x $dest/$name ]] && return 0
  log "building $pkg@$version into $dest"
  local tmp start=$SECONDS
  tmp=$(mktemp -d "$CACHE_DIR/bin/.tool.XXXX") && chmod 755 "$tmp"
  GOBIN=$tmp GOFLAGS=-trimpath go install -ldflags "-s -w" "$pkg@$version" || {
    log "FAILED building $pkg@$version"; rm -rf "$tmp"; return 1; }
  rm -rf "$dest" && mv "$tmp" "$dest"
  log "$name built in $((SECONDS - start)) s"
}

# Builds the packages of wrapper module $1 (a directory under e2e/env) into $2, with build tags $3.
# Each wrapper pins a tool's module and repeats the replace directives `go install` would refuse.
build_wrapped() {
  local module=$1 dest=$2 tags=$3; shift 3
  local tmp start=$SECONDS
  tmp=$(mktemp -d "$CACHE_DIR/bin/.$module.XXXX") && chmod 755 "$tmp"
  log "building $* into $dest"
  (cd "$ENV_DIR/$module" && go build -trimpath -tags "$tags" -ldflags "-s -w" -o "$tmp/" "$@") || {
    log "FAILED building $module (go build output above)"; rm -rf "$tmp"; return 1; }
  echo "$tmp"
  log "$module built in $((SECONDS - start)) s"
}

build_olm() {
  local n missing=0
  for n in olm catalog opm crds; do [[ -e $OLM_BIN/$n ]] || missing=1; done
  ((missing)) || return 0
  local tmp
  tmp=$(build_wrapped olm "$OLM_BIN" json1,containers_image_openpgp \
      github.com/operator-framework/operator-lifecycle-manager/cmd/olm \
      github.com/operator-framework/operator-lifecycle-manager/cmd/catalog \
      github.com/operator-framework/operator-registry/cmd/opm) || return 1
  # OLM's own CRDs (CatalogSource, Subscription, ClusterServiceVersion, …) ship in its API module.
  mkdir -p "$tmp/crds"
  cp "$(cd "$ENV_DIR/olm" && go list -m -f '{{.Dir}}' github.com/operator-framework/api)"/crds/*.yaml "$tmp/crds/"
  chmod 644 "$tmp"/crds/*.yaml
  rm -rf "$OLM_BIN" && mv "$tmp" "$OLM_BIN"
}

build_operator_sdk() {
  [[ -x $OPERATOR_SDK_BIN/operator-sdk ]] && return 0
  local tmp
  tmp=$(build_wrapped operator-sdk "$OPERATOR_SDK_BIN" containers_image_openpgp github.com/operator-framework/operator-sdk/cmd/operator-sdk) || return 1
  rm -rf "$OPERATOR_SDK_BIN" && mv "$tmp" "$OPERATOR_SDK_BIN"
}

build_kustomize() {
  [[ -x $KUSTOMIZE_BIN/kustomize ]] && return 0
  local tmp
  # Static (no cgo): the same binary runs on the host and inside the kustomize-operator image,
  # which has no C library.
  tmp=$(CGO_ENABLED=0 build_wrapped kustomize "$KUSTOMIZE_BIN" "" \
      -ldflags "-s -w -X sigs.k8s.io/kustomize/v3/pkg/commands/misc.kustomizeVersion=$KUSTOMIZE_VERSION" \
      sigs.k8s.io/kustomize/v3/cmd/kustomize) || return 1
  rm -rf "$KUSTOMIZE_BIN" && mv "$tmp" "$KUSTOMIZE_BIN"
}

build_kustomize_v32() {
  [[ -x $KUSTOMIZE_V32_BIN/kustomize ]] && return 0
  local tmp
  tmp=$(CGO_ENABLED=0 build_wrapped kustomize-v3.2 "$KUSTOMIZE_V32_BIN" "" \
      -ldflags "-s -w -X sigs.k8s.io/kustomize/v3/pkg/commands/misc.kustomizeVersion=$KUSTOMIZE_V32_VERSION" \
      sigs.k8s.io/kustomize/v3/cmd/kustomize) || return 1
  rm -rf "$KUSTOMIZE_V32_BIN" && mv "$tmp" "$KUSTOMIZE_V32_BIN"
}

build_kustomizes() {
  build_kustomize
  build_kustomize_v32
  # v5 as published (its go.mod has no replace directives); static like v3.
  CGO_ENABLED=0 install_tool sigs.k8s.io/kustomize/kustomize/v5 "$KUSTOMIZE_V5_VERSION" "$KUSTOMIZE_V5_BIN" kustomize
}

mkdir -p "$CACHE_DIR/bin"
if [[ ${1:-} == kustomize ]]; then build_kustomizes; exit; fi
install_tool github.com/nats-io/nats-server/v2 "$NATS_SERVER_VERSION" "$NATS_BIN" nats-server
install_tool sigs.k8s.io/kwok/cmd/kwok "$KWOK_VERSION" "$KWOK_BIN" kwok
build_kube
build_olm
build_operator_sdk
build_kustomizes
