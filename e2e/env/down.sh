#!/usr/bin/env bash
# Stops every process the environment and `make demo` started, by the pid each recorded under
# $STATE_DIR/pids (operators and the demo's stand-in manifests server first, then the control
# plane and NATS), and removes the environment's state (etcd data, NATS store, certificates,
# logs). Built binaries stay cached. Every spoke cluster (`KFOP_ENV_CLUSTER=<name> up.sh`, pids
# under $STATE_DIR/clusters/<name>/pids) is stopped too, each cluster in parallel with the others.
# With KFOP_ENV_CLUSTER=<name>, stops and removes that spoke cluster alone.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/versions.sh"

PIDS=$STATE_DIR/pids
ENVIRONMENT=(kwok kube-scheduler kube-controller-manager kube-apiserver nats-server etcd)
stop() { # pids-dir name: TERM, wait up to 5 s, then KILL
  local dir=$1 name=$2 pid label=${1%/pids}
  label=${label#"$CLUSTERS_DIR"/}
  [[ $label == "$STATE_DIR" ]] && label= || label=" $label"
  [[ -f $dir/$name ]] || return 0
  pid=$(cat "$dir/$name")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    printf '[env%s] stopped %s (pid %s)\n' "$label" "$name" "$pid" >&2
  fi
  rm -f "$dir/$name"
}
stop_all() { # pids-dir
  local pidfile name
  # Whatever else recorded a pid (operators, the stand-in server, the pods' network) goes before
  # what it talks to.
  for pidfile in "$1"/*; do
    [[ -f $pidfile ]] || continue
    name=${pidfile##*/}
    [[ " ${ENVIRONMENT[*]} " == *" $name "* ]] || stop "$1" "$name" &
  done
  wait
  for name in "${ENVIRONMENT[@]}"; do stop "$1" "$name"; done
}

# kubectl's discovery cache of a cluster's address (kept under ~/.kube/cache by default): the next
# cluster on the same address serves other resources, and a stale cache maps a short name such as
# `katib` to the kinds of the cluster before.
drop_discovery_cache() { # kubeconfig
  local server
  [[ -f $1 ]] || return 0
  server=$(sed -n 's/^ *server: *https:\/\///p' "$1" | head -1)
  [[ -n $server ]] || return 0
  rm -rf "${KUBECACHEDIR:-$HOME/.kube/cache}/discovery/${server//:/_}"
}

if [[ -n ${KFOP_ENV_CLUSTER:-} ]]; then
  [[ $KFOP_ENV_CLUSTER =~ ^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$ ]] || { echo "[env] ERROR: KFOP_ENV_CLUSTER=$KFOP_ENV_CLUSTER is not a DNS label" >&2; exit 1; }
  dir=$CLUSTERS_DIR/$KFOP_ENV_CLUSTER
  stop_all "$dir/pids"
  rm -f "$(pod_network_socket "$dir")"
  drop_discovery_cache "$dir/kubeconfig"
  rm -rf "$dir"
  exit 0
fi

# The clusters are independent: each spoke and the main cluster stop at once.
for dir in "$CLUSTERS_DIR"/*/; do
  [[ -d $dir/pids ]] || continue
  dir=${dir%/}
  { stop_all "$dir/pids"; rm -f "$(pod_network_socket "$dir")"; drop_discovery_cache "$dir/kubeconfig"; } &
done
stop_all "$PIDS" &
wait
drop_discovery_cache "$KUBECONFIG_FILE"
rm -rf "$STATE_DIR"
