#!/usr/bin/env bash
# The main job: bring up the local cluster with NATS, install the operators (deploy/all: CRDs,
# RBAC, Deployments), run the six operators on this host with their ServiceAccounts' permissions
# and NATS, and converge the sample kfctl KfDef, printing status as it goes. Everything keeps
# running afterwards; `make env-down` stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
source e2e/env/versions.sh

hack/prereqs.sh
e2e/env/up.sh
source "$ENV_FILE"
OPERATORS=(meta istio dex kfserving katib pipelines)

echo "--- building the operators" >&2
cargo build -q --locked --workspace --bins

echo "--- installing CRDs, RBAC and operator Deployments (kubectl apply -k deploy/all)" >&2
kubectl apply --server-side --force-conflicts -k deploy/all >/dev/null
kubectl wait --for=condition=Established --timeout=60s -f crds/generated/ >/dev/null

# The Deployments run as fake pods on kwok nodes; the real processes run here, each with its
# ServiceAccount's token (so exactly the permissions deploy/ grants) and the local nats-server.
mkdir -p "$STATE_DIR/operators"
port=18080
for o in "${OPERATORS[@]}"; do
  port=$((port + 1))
  pidfile=$STATE_DIR/pids/$o-operator
  if [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then continue; fi
  token=$(kubectl -n kubeflow-operators create token "$o-operator" --duration=24h)
  kubeconfig=$STATE_DIR/operators/$o.kubeconfig
  sed "s|token: .*|token: $token|" "$KUBECONFIG" >"$kubeconfig"
  KUBECONFIG=$kubeconfig setsid "target/debug/$o-operator" --nats-url "$NATS_URL" --metrics-addr "127.0.0.1:$port" \
    >>"$STATE_DIR/logs/$o-operator.log" 2>&1 </dev/null &
  echo $! >"$pidfile"
  echo "    $o-operator: pid $!, metrics http://127.0.0.1:$port/metrics, log $STATE_DIR/logs/$o-operator.log" >&2
done

echo "--- applying examples/kfdef-kfctl-istio-dex.yaml (a kfctl KfDef, unchanged)" >&2
kubectl create namespace kubeflow --dry-run=client -o yaml | kubectl apply --server-side -f - >/dev/null
kubectl apply --server-side -f examples/kfdef-kfctl-istio-dex.yaml >/dev/null
for i in $(seq 150); do
  phase=$(kubectl -n kubeflow get kfdef kubeflow -o jsonpath='{.status.phase}')
  echo "--- $(date +%T) KfDef kubeflow: ${phase:-Pending}"
  kubectl -n kubeflow get istio,dex,kfserving,katib,pipelines --no-headers 2>/dev/null | sed 's/^/    /' || true
  [[ $phase == Available ]] && break
  ((i < 150)) || { echo "the KfDef did not become Available; see $STATE_DIR/logs/*-operator.log" >&2; exit 1; }
  sleep 2
done
kubectl -n kubeflow get kfdef,istio,dex,kfserving,katib,pipelines
unmapped=$(kubectl -n kubeflow get kfdef kubeflow -o jsonpath='{range .status.applications[?(@.state=="Unmapped")]}{.name}{" "}{end}')
cat >&2 <<MSG

The KfDef is Available. Applications outside the five components are listed in its status as
Unmapped: $unmapped

Try:
  source $ENV_FILE
  kubectl -n kubeflow get kfdef kubeflow -o yaml                  # conditions, components, applications
  kubectl -n kubeflow delete deploy katib-ui                       # healed in milliseconds
  kubectl -n kubeflow patch kfdef kubeflow --type merge -p '{"spec":{"version":"v1.3.0"}}'
Stop everything: make env-down
MSG
