# Versions of everything the local environment builds. Sourced by the other scripts.
# Changing a version here changes the cache key, so the next start rebuilds that piece.
KUBE_VERSION=v1.34.4          # k8s.io/kubernetes; also pinned in kube/go.mod
KWOK_VERSION=v0.7.0           # sigs.k8s.io/kwok
NATS_SERVER_VERSION=v2.12.15  # github.com/nats-io/nats-server/v2
OLM_VERSION=v0.33.0           # OLM's olm + catalog operators and opm; pinned in olm/go.mod
OPERATOR_SDK_VERSION=v1.34.2  # operator-sdk (bundle validate); pinned in operator-sdk/go.mod
# sigs.k8s.io/kustomize/v3, the engine kfctl v1.0–v1.2 linked (it renders KfDef manifests the same
# way: `vars`, `bases`, `env:` generators, files outside the root); pinned in kustomize/go.mod.
KUSTOMIZE_VERSION=v3.1.0
# sigs.k8s.io/kustomize/v3 v3.2.0, the release kubeflow/manifests 1.3 to 1.6 name ("kustomize 3.2.0"):
# it names generated ConfigMaps as v3.1.0 does but fixes name references and namespaces v3.1.0
# misses, and v5 hashes their contents otherwise; pinned in kustomize-v3.2/go.mod.
KUSTOMIZE_V32_VERSION=v3.2.0
# sigs.k8s.io/kustomize/kustomize/v5, for kubeflow/manifests since Kubeflow 1.7 (`components`,
# `labels`, `replacements`, `sortOptions`). Must equal KUSTOMIZE_V5_VERSION in manifests/src/kustomize.rs.
# v5.7.1 is the release kubeflow/manifests' CI installs with; v5.8 no longer applies a replacement
# whose target is selected by a name holding `$(...)`, so user-namespace's Profile is rendered as
# `$(profile-name)` and refused (kubeflow/manifests#3315).
KUSTOMIZE_V5_VERSION=v5.7.1

ENV_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE_DIR=${KFOP_CACHE_DIR:-$HOME/.cache/kubeflow-operator}
# Runtime state of a running environment (etcd data, certificates, logs, kubeconfig).
STATE_DIR=${KFOP_STATE_DIR:-$CACHE_DIR/run}
KUBE_BIN=$CACHE_DIR/bin/kube-$KUBE_VERSION-$(sha256sum "$ENV_DIR/kube/go.sum" | cut -c1-12)
KWOK_BIN=$CACHE_DIR/bin/kwok-$KWOK_VERSION
NATS_BIN=$CACHE_DIR/bin/nats-server-$NATS_SERVER_VERSION
OLM_BIN=$CACHE_DIR/bin/olm-$OLM_VERSION-$(sha256sum "$ENV_DIR/olm/go.sum" | cut -c1-12)
KUSTOMIZE_BIN=$CACHE_DIR/bin/kustomize-$KUSTOMIZE_VERSION-$(sha256sum "$ENV_DIR/kustomize/go.sum" | cut -c1-12)-static
KUSTOMIZE_V32_BIN=$CACHE_DIR/bin/kustomize-$KUSTOMIZE_V32_VERSION-$(sha256sum "$ENV_DIR/kustomize-v3.2/go.sum" | cut -c1-12)-static
KUSTOMIZE_V5_BIN=$CACHE_DIR/bin/kustomize-$KUSTOMIZE_V5_VERSION-static
OPERATOR_SDK_BIN=$CACHE_DIR/bin/operator-sdk-$OPERATOR_SDK_VERSION-$(sha256sum "$ENV_DIR/operator-sdk/go.sum" | cut -c1-12)

# Loopback ports; override when they collide with something already running.
ETCD_PORT=${KFOP_ETCD_PORT:-23790}
ETCD_PEER_PORT=${KFOP_ETCD_PEER_PORT:-23800}
APISERVER_PORT=${KFOP_APISERVER_PORT:-26443}
NATS_PORT=${KFOP_NATS_PORT:-24222}
NATS_MONITOR_PORT=${KFOP_NATS_MONITOR_PORT:-28222}
KCM_PORT=${KFOP_KCM_PORT:-26257}
SCHEDULER_PORT=${KFOP_SCHEDULER_PORT:-26259}
KWOK_PORT=${KFOP_KWOK_PORT:-26250}

# Files a running environment exposes to tests and operators.
KUBECONFIG_FILE=$STATE_DIR/kubeconfig
ENV_FILE=$STATE_DIR/env

# Spoke clusters: `KFOP_ENV_CLUSTER=<name> e2e/env/up.sh` starts another control plane (no
# nats-server) with its state, kubeconfig and env file under $CLUSTERS_DIR/<name>. Its ports are
# the ones above plus 100 × its index (KFOP_ENV_CLUSTER_INDEX, 1–9): the main cluster and nine
# spokes never share one, and all stay within 23790–27343, below the range the e2e tests take
# free ports from (29000–32767, e2e/src/lib.rs).
CLUSTERS_DIR=$STATE_DIR/clusters
SPOKE_PORT_STEP=100
spoke_ports() { # index: moves the ports above to spoke `index`'s
  local offset=$((SPOKE_PORT_STEP * $1))
  ETCD_PORT=$((ETCD_PORT + offset)) ETCD_PEER_PORT=$((ETCD_PEER_PORT + offset))
  APISERVER_PORT=$((APISERVER_PORT + offset)) KCM_PORT=$((KCM_PORT + offset))
  SCHEDULER_PORT=$((SCHEDULER_PORT + offset)) KWOK_PORT=$((KWOK_PORT + offset))
}
# The pods' network socket of the cluster whose state is in directory $1; under /tmp when that
# path is too long for a Unix socket (108 bytes), which a long spoke name makes it.
pod_network_socket() { # state-dir
  local socket=$1/pod-network.sock
  ((${#socket} < 100)) || socket=/tmp/kfop-pod-network-$(printf %s "$1" | sha256sum | cut -c1-12).sock
  echo "$socket"
}
