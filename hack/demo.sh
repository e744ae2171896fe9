#!/usr/bin/env bash
# The main job: bring up the local cluster with NATS, install the CRDs and every component operator
# (deploy/<component>), run the operators on this host with their ServiceAccounts' permissions,
# and converge the sample component resources, printing status as it goes. The environment and
# the operators keep running; `make env-down` stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."
source e2e/env/versions.sh

hack/prereqs.sh
e2e/env/up.sh
source "$ENV_FILE"
COMPONENTS=(istio dex kfserving katib pipelines)

echo "--- building the operators" >&2
cargo build -q --locked --workspace --bins

echo "--- installing CRDs and the component operators (kubectl apply -k deploy/<component>)" >&2
kubectl apply --server-side --force-conflicts -f crds/generated/ >/dev/null
kubectl wait --for=condition=Established --timeout=60s -f crds/generated/ >/dev/null
for c in "${COMPONENTS[@]}"; do kubectl apply --server-side --force-conflicts -k "deploy/$c" >/dev/null; done

# The operator Deployments run as fake pods on kwok nodes; the real processes run here, each with
# its ServiceAccount's token, so they have exactly the permissions deploy/ grants.
mkdir -p "$STATE_DIR/operators"
port=18080
for c in "${COMPONENTS[@]}"; do
  port=$((port + 1))
  pidfile=$STATE_DIR/pids/$c-operator
  if [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then continue; fi
  token=$(kubectl -n kubeflow-operators create token "$c-operator" --duration=24h)
  kubeconfig=$STATE_DIR/operators/$c.kubeconfig
  sed "s|token: .*|token: $token|" "$KUBECONFIG" >"$kubeconfig"
  KUBECONFIG=$kubeconfig setsid "target/debug/$c-operator" --metrics-addr "127.0.0.1:$port" \
    >>"$STATE_DIR/logs/$c-operator.log" 2>&1 </dev/null &
  echo $! >"$pidfile"
  echo "    $c-operator: pid $!, metrics http://127.0.0.1:$port/metrics, log $STATE_DIR/logs/$c-operator.log" >&2
done

echo "--- applying examples/components.yaml" >&2
kubectl create namespace kubeflow --dry-run=client -o yaml | kubectl apply --server-side -f - >/dev/null
kubectl apply --server-side -f examples/components.yaml >/dev/null
kubectl apply --server-side -f examples/kfdef-kfctl-istio-dex.yaml >/dev/null
for i in $(seq 120); do
  kubectl get istio,dex,kfserving,katib,pipelines -n kubeflow
  ready=$(kubectl get istio,dex,kfserving,katib,pipelines -n kubeflow -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | grep -c '^Ready$' || true)
  [[ $ready == 5 ]] && break
  ((i < 120)) || { echo "components did not all become Ready; see $STATE_DIR/logs/*-operator.log" >&2; exit 1; }
  echo
  sleep 2
done
cat >&2 <<MSG

All five components are Ready. Try:
  source $ENV_FILE
  kubectl get deploy -A -l components.kubeflow.org/part-of     # what the operators installed
  kubectl -n kfserving delete deploy --all                         # (any owned object) comes back
  kubectl -n kubeflow patch katib katib --type merge -p '{"spec":{"version":"v0.10.0"}}'
The KfDef examples/kfdef-kfctl-istio-dex.yaml is stored as written; the meta-operator that
splits it into these resources is not part of this release yet.
Stop everything: make env-down
MSG
