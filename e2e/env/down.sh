#!/usr/bin/env bash
# Stops every process up.sh started and removes the environment's state (etcd data, NATS store,
# certificates, logs). Built binaries stay cached.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/versions.sh"

PIDS=$STATE_DIR/pids
for pidfile in "$PIDS"/*-operator; do
  [[ -f $pidfile ]] && kill -TERM "$(cat "$pidfile")" 2>/dev/null || true
done
for name in kwok kube-scheduler kube-controller-manager kube-apiserver nats-server etcd; do
  [[ -f $PIDS/$name ]] || continue
  pid=$(cat "$PIDS/$name")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    printf '[env] stopped %s (pid %s)\n' "$name" "$pid" >&2
  fi
done
rm -rf "$STATE_DIR"
