#!/usr/bin/env bash
# Starts (or reuses) the local environment: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kwok with fake nodes, and nats-server with JetStream, all on loopback.
# Writes $STATE_DIR/kubeconfig and $STATE_DIR/env (source it for KUBECONFIG, NATS_URL,
# KFOP_BUS_DIR — the bus's CA and each operator's NKey seed — and PATH).
#
# A spoke cluster (multi-cluster tests): with KFOP_ENV_CLUSTER=<name> (a DNS label) it starts (or
# reuses) a second, independent control plane instead — its own etcd, kube-apiserver,
# controller-manager, scheduler, pods' network and kwok with fake nodes, but no nats-server (the
# tests run a spoke's NATS themselves) — with its state under $STATE_DIR/clusters/<name>, where
# it writes `kubeconfig` and `env`. Its ports are the main cluster's plus 100 × its index
# (KFOP_ENV_CLUSTER_INDEX, 1–9; versions.sh); without one it keeps the index it was started with,
# or takes the lowest no other spoke holds. `KFOP_ENV_CLUSTER=<name> down.sh` stops it; plain
# `down.sh` stops every spoke with the main cluster. A spoke builds nothing already built.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/versions.sh"

CLUSTER=${KFOP_ENV_CLUSTER:-}
log() { printf '[env%s] %s\n' "${CLUSTER:+ $CLUSTER}" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

"$ENV_DIR/build.sh"
ROOT_DIR=$(cd "$(dirname "$0")/../.." && pwd)

# The directory of this cluster's state: the environment's, or the spoke's.
RUN_DIR=$STATE_DIR
if [[ -n $CLUSTER ]]; then
  [[ $CLUSTER =~ ^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$ ]] || die "KFOP_ENV_CLUSTER=$CLUSTER is not a DNS label"
  RUN_DIR=$CLUSTERS_DIR/$CLUSTER
  mkdir -p "$CLUSTERS_DIR"
  # One spoke start at a time (index choice, and two tests asking for the same spoke); the
  # processes started below do not inherit the lock (start closes fd 9).
  exec 9>"$CLUSTERS_DIR/.up.lock"
  flock 9
  spoke_running() { # state-dir
    local pidfile
    for pidfile in "$1"/pids/*; do
      if [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then return 0; fi
    done
    return 1
  }
  recorded=$(cat "$RUN_DIR/index" 2>/dev/null || true)
  INDEX=${KFOP_ENV_CLUSTER_INDEX:-$recorded}
  if [[ -z $INDEX ]]; then
    for i in 1 2 3 4 5 6 7 8 9; do
      if ! grep -qsx "$i" "$CLUSTERS_DIR"/*/index; then INDEX=$i; break; fi
    done
    [[ -n $INDEX ]] || die "every spoke index (1–9) is taken under $CLUSTERS_DIR; stop one (KFOP_ENV_CLUSTER=<name> $ENV_DIR/down.sh)"
  fi
  [[ $INDEX =~ ^[1-9]$ ]] || die "KFOP_ENV_CLUSTER_INDEX=$INDEX: expected 1–9"
  if [[ -n $recorded && $recorded != "$INDEX" ]]; then
    die "spoke $CLUSTER was started with index $recorded (its ports and etcd data); ask for index $recorded or stop it first (KFOP_ENV_CLUSTER=$CLUSTER $ENV_DIR/down.sh)"
  fi
  for other in "$CLUSTERS_DIR"/*/; do
    other=${other%/}
    [[ $other != "$RUN_DIR" && $(cat "$other/index" 2>/dev/null || true) == "$INDEX" ]] || continue
    if spoke_running "$other"; then die "spoke ${other##*/} runs with index $INDEX (the same ports); pick another KFOP_ENV_CLUSTER_INDEX"; fi
  done
  mkdir -p "$RUN_DIR"
  echo "$INDEX" >"$RUN_DIR/index"
  spoke_ports "$INDEX"
  KUBECONFIG_FILE=$RUN_DIR/kubeconfig ENV_FILE=$RUN_DIR/env
fi

PKI=$RUN_DIR/pki LOGS=$RUN_DIR/logs PIDS=$RUN_DIR/pids
mkdir -p "$PKI" "$LOGS" "$PIDS"

# --- certificates and tokens (created once per state directory) -----------------------------
cert() { # name cn ca-name [san]
  local name=$1 cn=$2 ca=$3 san=${4:-}
  [[ -f $PKI/$name.crt ]] && return 0
  openssl genrsa -out "$PKI/$name.key" 2048 2>/dev/null
  openssl req -new -key "$PKI/$name.key" -subj "/CN=$cn" -out "$PKI/$name.csr" 2>/dev/null
  local ext=$PKI/$name.ext
  printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n' >"$ext"
  [[ -n $san ]] && printf 'subjectAltName=%s\n' "$san" >>"$ext"
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/$ca.crt" -CAkey "$PKI/$ca.key" -CAcreateserial \
    -days 3650 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
}
ca() { # name cn
  [[ -f $PKI/$1.crt ]] && return 0
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$PKI/$1.key" -out "$PKI/$1.crt" -days 3650 \
    -subj "/CN=$2" -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
}
ca ca kubeflow-operator-e2e-ca
ca front-proxy-ca kubeflow-operator-e2e-front-proxy-ca
cert apiserver kube-apiserver ca "IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
cert front-proxy-client front-proxy-client front-proxy-ca
if [[ ! -f $PKI/sa.key ]]; then
  openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
  openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
fi
if [[ ! -f $PKI/tokens.csv ]]; then
  # Static admin token in system:masters; the operators under test get their own SA tokens.
  printf '%s,admin,admin,system:masters\n' "$(openssl rand -hex 24)" >"$PKI/tokens.csv"
fi
ADMIN_TOKEN=$(cut -d, -f1 "$PKI/tokens.csv")

# Written aside and moved in, so a client reading it while a second call rewrites it never sees
# half a file.
CONTEXT=${CLUSTER:-local}
cat >"$KUBECONFIG_FILE.tmp" <<KCFG
apiVersion: v1
kind: Config
clusters:
- name: $CONTEXT
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 <"$PKI/ca.crt")
users:
- name: admin
  user:
    token: $ADMIN_TOKEN
contexts:
- name: $CONTEXT
  context: {cluster: $CONTEXT, user: admin}
current-context: $CONTEXT
KCFG
chmod 600 "$KUBECONFIG_FILE.tmp"
mv -f "$KUBECONFIG_FILE.tmp" "$KUBECONFIG_FILE"

# --- process helpers -------------------------------------------------------------------------
running() { [[ -f $PIDS/$1 ]] && kill -0 "$(cat "$PIDS/$1")" 2>/dev/null; }
start() { # name command...
  local name=$1; shift
  if running "$name"; then log "$name already running (pid $(cat "$PIDS/$name"))"; return 0; fi
  log "starting $name"
  setsid "$@" >>"$LOGS/$name.log" 2>&1 </dev/null 9>&- &
  echo $! >"$PIDS/$name"
}
wait_for() { # name seconds command...
  local name=$1 timeout=$2; shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    running "$name" || { tail -n 30 "$LOGS/$name.log" >&2; die "$name exited; log: $LOGS/$name.log"; }
    ((SECONDS < deadline)) || { tail -n 30 "$LOGS/$name.log" >&2; die "$name not healthy after ${timeout}s; log: $LOGS/$name.log"; }
    sleep 0.2
  done
}
healthz() { curl -sfk --max-time 2 -H "Authorization: Bearer $ADMIN_TOKEN" "$1" | grep -qx ok; }
KUBECTL=("$KUBE_BIN/kubectl" --kubeconfig "$KUBECONFIG_FILE")

# --- etcd ------------------------------------------------------------------------------------
start etcd "$KUBE_BIN/etcd" --name local --data-dir "$RUN_DIR/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "local=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync --log-level warn
wait_for etcd 30 sh -c "curl -sf http://127.0.0.1:$ETCD_PORT/health | grep -q '\"health\":\"true\"'"

# --- nats-server (not for a spoke) -----------------------------------------------------------
# Secured as deployed: TLS, one NKey per operator, the bus contract's permissions
# (`kfop local-bus`; the material is made once per state directory).
# kfop of the one build (hack/cargo.sh): a plain `cargo run` would compile the workspace a second
# time with other flags (it cost `make test` five minutes).
BIN_DIR=$("$ROOT_DIR/hack/cargo.sh" bin-dir)
if [[ -z $CLUSTER ]]; then
  "$ROOT_DIR/hack/cargo.sh" build-bins --quiet
  "$BIN_DIR/kfop" local-bus "$STATE_DIR/bus" --port "$NATS_PORT" --monitor-port "$NATS_MONITOR_PORT" \
    --store-dir "$STATE_DIR/nats" >/dev/null
  start nats-server "$NATS_BIN/nats-server" -c "$STATE_DIR/bus/nats.conf"
  wait_for nats-server 30 curl -sf "http://127.0.0.1:$NATS_MONITOR_PORT/healthz?js-enabled-only=true"
elif [[ ! -x $BIN_DIR/pod-network ]]; then
  # A spoke has no NATS and needs only pod-network of the one build, as built if it is.
  "$ROOT_DIR/hack/cargo.sh" build-bins --quiet --bin pod-network
fi

# --- kube-apiserver --------------------------------------------------------------------------
# What the API server sends into the cluster (Service-backed admission and conversion webhooks,
# aggregated APIs) goes through the pods' network stand-in (below), since kwok's pods answer
# nothing.
POD_NETWORK_SOCKET=$(pod_network_socket "$RUN_DIR")
cat >"$RUN_DIR/egress-selector.yaml" <<EGRESS
apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: $POD_NETWORK_SOCKET
EGRESS
start kube-apiserver "$KUBE_BIN/kube-apiserver" \
  --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
  --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$APISERVER_PORT" \
  --endpoint-reconciler-type none \
  --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
  --client-ca-file "$PKI/ca.crt" --token-auth-file "$PKI/tokens.csv" \
  --authorization-mode Node,RBAC \
  --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-cluster-ip-range 10.96.0.0/16 --allow-privileged=true \
  --requestheader-client-ca-file "$PKI/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
  --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
  --requestheader-extra-headers-prefix X-Remote-Extra- \
  --proxy-client-cert-file "$PKI/front-proxy-client.crt" --proxy-client-key-file "$PKI/front-proxy-client.key" \
  --enable-aggregator-routing=true --egress-selector-config-file "$RUN_DIR/egress-selector.yaml" \
  --profiling=false
wait_for kube-apiserver 90 healthz "https://127.0.0.1:$APISERVER_PORT/readyz"

# --- the pods' network -----------------------------------------------------------------------
# Answers for the webhook backends at pod and Service addresses (kwok's CIDR below, the Service
# range above) and injects its CA into their webhook configurations: e2e/src/bin/pod-network.rs.
start pod-network env KUBECONFIG="$KUBECONFIG_FILE" "$BIN_DIR/pod-network" \
  "$POD_NETWORK_SOCKET" 10.244.0.0/16 10.96.0.0/16
wait_for pod-network 30 test -S "$POD_NETWORK_SOCKET"

# --- kube-controller-manager and kube-scheduler ----------------------------------------------
start kube-controller-manager "$KUBE_BIN/kube-controller-manager" \
  --kubeconfig "$KUBECONFIG_FILE" --authentication-kubeconfig "$KUBECONFIG_FILE" \
  --authorization-kubeconfig "$KUBECONFIG_FILE" \
  --bind-address 127.0.0.1 --secure-port "$KCM_PORT" --leader-elect=false \
  --controllers '*' \
  --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
  --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
  --enable-hostpath-provisioner=true --profiling=false
start kube-scheduler "$KUBE_BIN/kube-scheduler" \
  --kubeconfig "$KUBECONFIG_FILE" --authentication-kubeconfig "$KUBECONFIG_FILE" \
  --authorization-kubeconfig "$KUBECONFIG_FILE" \
  --bind-address 127.0.0.1 --secure-port "$SCHEDULER_PORT" --leader-elect=false --profiling=false
wait_for kube-controller-manager 60 healthz "https://127.0.0.1:$KCM_PORT/healthz"
wait_for kube-scheduler 60 healthz "https://127.0.0.1:$SCHEDULER_PORT/healthz"

# --- kwok and its fake nodes -----------------------------------------------------------------
start kwok "$KWOK_BIN/kwok" --kubeconfig "$KUBECONFIG_FILE" -c "$ENV_DIR/kwok.yaml" \
  --manage-all-nodes=false --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
  --server-address "127.0.0.1:$KWOK_PORT" --node-lease-duration-seconds 40 \
  --cidr 10.244.0.1/16 --node-ip 10.244.0.1
"${KUBECTL[@]}" apply --server-side --field-manager kfop-e2e-env -f "$ENV_DIR/nodes.yaml" >/dev/null
wait_for kwok 60 "${KUBECTL[@]}" wait --for=condition=Ready node --all --timeout=1s
# Default StorageClass served by the controller manager's hostPath provisioner, so claims bind
# as they would on a cluster with a storage driver (no data is written; pods are kwok's).
"${KUBECTL[@]}" apply --server-side --field-manager kfop-e2e-env -f "$ENV_DIR/storageclass.yaml" >/dev/null
# The controller manager's serviceaccount controller creates `default` in every namespace; pods
# need it, so wait for it as proof that the controllers run.
wait_for kube-controller-manager 60 "${KUBECTL[@]}" -n default get serviceaccount default

if [[ -n $CLUSTER ]]; then
  # No KFOP_ENV_CLUSTER in it: sourcing it must not turn a later up.sh or down.sh into the spoke's.
  cat >"$ENV_FILE" <<ENVF
# Spoke cluster $CLUSTER (index $INDEX): API server $APISERVER_PORT, etcd $ETCD_PORT (peer $ETCD_PEER_PORT),
# controller-manager $KCM_PORT, scheduler $SCHEDULER_PORT, kwok $KWOK_PORT, pods' network $POD_NETWORK_SOCKET.
export KUBECONFIG=$KUBECONFIG_FILE
export KFOP_SPOKE_CLUSTER=$CLUSTER
export KFOP_SPOKE_INDEX=$INDEX
export KFOP_SPOKE_SERVER=https://127.0.0.1:$APISERVER_PORT
export KFOP_STATE_DIR=$STATE_DIR
export KFOP_KUBE_BIN=$KUBE_BIN
export KFOP_KUBE_VERSION=$KUBE_VERSION
export PATH=$KUBE_BIN:\$PATH
ENVF
  log "spoke cluster ready: $("${KUBECTL[@]}" version -o json | grep -m1 gitVersion | tr -d ' ,"') API server https://127.0.0.1:$APISERVER_PORT (index $INDEX)"
  log "use it with: source $ENV_FILE"
  exit 0
fi
cat >"$ENV_FILE" <<ENVF
export KUBECONFIG=$KUBECONFIG_FILE
export NATS_URL=tls://127.0.0.1:$NATS_PORT
export KFOP_BUS_DIR=$STATE_DIR/bus
export KFOP_STATE_DIR=$STATE_DIR
export KFOP_KUBE_BIN=$KUBE_BIN
export KFOP_KUBE_VERSION=$KUBE_VERSION
export KFOP_NATS_SERVER=$NATS_BIN/nats-server
export KFOP_OLM_BIN=$OLM_BIN
export PATH=$KUBE_BIN:\$PATH
ENVF
log "environment ready: $("${KUBECTL[@]}" version -o json | grep -m1 gitVersion | tr -d ' ,"') API server https://127.0.0.1:$APISERVER_PORT, NATS tls://127.0.0.1:$NATS_PORT"
log "use it with: source $ENV_FILE"
