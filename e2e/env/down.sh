#!/usr/bin/env bash
# Stops every process the environment and `make demo` started, by the pid each recorded under
# $STATE_DIR/pids (operators and the demo's stand-in manifests server first, then the control
# plane and NATS), and removes the environment's state (etcd data, NATS store, certificates,
# logs). Built binaries stay cached.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/versions.sh"

PIDS=$STATE_DIR/pids
ENVIRONMENT=(kwok kube-scheduler kube-controller-manager kube-apiserver nats-server etcd)
stop() { # name: TERM, wait up to 5 s, then KILL
  local name=$1 pid
  [[ -f $PIDS/$name ]] || return 0
  pid=$(cat "$PIDS/$name")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    printf '[env] stopped %s (pid %s)\n' "$name" "$pid" >&2
  fi
  rm -f "$PIDS/$name"
}
# Whatever else recorded a pid (operators, the stand-in server) goes before what it talks to.
for pidfile in "$PIDS"/*; do
  [[ -f $pidfile ]] || continue
  name=${pidfile##*/}
  [[ " ${ENVIRONMENT[*]} " == *" $name "* ]] || stop "$name" &
done
wait
for name in "${ENVIRONMENT[@]}"; do stop "$name"; done
rm -rf "$STATE_DIR"
