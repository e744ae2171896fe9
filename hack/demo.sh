#!/usr/bin/env bash
# The main job: bring up the local cluster with NATS, install the operators (deploy/all: CRDs,
# RBAC, Deployments), run the operators on this host with their ServiceAccounts' permissions
# and NATS, and converge the sample kfctl KfDef with every application installed, printing status
# as it goes. The applications no built-in release covers come from the KfDef's manifests
# repository; this machine cannot download kubeflow/manifests, so a stand-in with a package at each
# of their paths is served on loopback (KFOP_DEMO_REPO=<uri> uses a real archive instead).
# Everything keeps running afterwards; `make env-down` stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
source e2e/env/versions.sh
start=$SECONDS
# What the demo did and how long each part took, printed at the end.
done_steps=()
mark() { done_steps+=("$(printf '%5s s  %s' "$((SECONDS - mark_at))" "$*")"); mark_at=$SECONDS; }
mark_at=$SECONDS

hack/prereqs.sh
e2e/env/up.sh
mark "local control plane and NATS running (e2e/env/up.sh)"
source "$ENV_FILE"
OPERATORS=(meta istio dex kfserving katib pipelines profiles kustomize)
KFDEF=examples/kfdef-kfctl-istio-dex.yaml

echo "--- building the operators (hack/cargo.sh build: the one build make test and the images use)" >&2
hack/cargo.sh build -q
BIN_DIR=$(hack/cargo.sh bin-dir)
# The operators render with the cached kustomizes (v3.1.0 for kfctl-era packages, v5 for current ones).
e2e/env/build.sh kustomize
export KFOP_KUSTOMIZE=$KUSTOMIZE_BIN/kustomize KFOP_KUSTOMIZE_V3_2=$KUSTOMIZE_V32_BIN/kustomize KFOP_KUSTOMIZE_V5=$KUSTOMIZE_V5_BIN/kustomize
mark "operators and kustomize built (hack/cargo.sh build, e2e/env/build.sh kustomize)"

echo "--- installing CRDs, RBAC and operator Deployments (kubectl apply -k deploy/all)" >&2
kubectl apply --server-side --force-conflicts -k deploy/all >/dev/null
# The CRDs deploy/all ships; the Profile CRD is the profiles operator's to install.
kubectl wait --for=condition=Established --timeout=60s -f deploy/all/crd.yaml >/dev/null
mark "deploy/all installed: $(grep -c '^kind: CustomResourceDefinition' deploy/all/crd.yaml) CRDs Established, RBAC, operator Deployments"

# The Deployments run as fake pods on kwok nodes; the real processes run here, each with its
# ServiceAccount's token (so exactly the permissions deploy/ grants) and its own NATS identity on
# the local nats-server (so exactly the permissions the bus grants it).
mkdir -p "$STATE_DIR/operators"
renderer_port=18091 renderer_metrics_port=18092 # (the operators use 18081–18088, the stand-in server 18090)
prometheus_port=19090 nats_exporter_port=18093
# Every /metrics answers only the scrape token: the operators make its Secret in their namespace
# (with the rights deploy/ grants them), and every process reads it from this file, as pods read
# the mounted Secret; Prometheus presents it.
token_file=$STATE_DIR/operators/metrics-token
port=18080
for o in "${OPERATORS[@]}"; do
  port=$((port + 1))
  pidfile=$STATE_DIR/pids/$o-operator
  if [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then continue; fi
  token=$(kubectl -n kubeflow-operators create token "$o-operator" --duration=24h)
  kubeconfig=$STATE_DIR/operators/$o.kubeconfig
  sed "s|token: .*|token: $token|" "$KUBECONFIG" >"$kubeconfig"
  # As deploy/ runs them (--default-service-account, PLATFORM_NAMESPACE: the KfDef's namespace, whose
  # ProfileController holds the cluster's Profile settings), and the stand-in repository is served
  # on loopback, which the fetch fence refuses unless allowed.
  renderer=()
  [[ $o == kustomize ]] && renderer=(KFOP_RENDERER_URL="http://127.0.0.1:$renderer_port" KFOP_RENDERER_CALLER_SECRET=kustomize-renderer-caller POD_NAMESPACE=kubeflow-operators)
  KUBECONFIG=$kubeconfig NATS_NKEY_FILE=$KFOP_BUS_DIR/identities/$o-operator.nk NATS_CA_FILE=$KFOP_BUS_DIR/ca.crt \
    DEFAULT_SERVICE_ACCOUNT=kubeflow-installer PLATFORM_NAMESPACE=kubeflow KFOP_ALLOW_FETCH_FROM=127.0.0.1 \
    KFOP_MAKE_METRICS_TOKEN_IN=kubeflow-operators KFOP_METRICS_TOKEN_FILE=$token_file \
    env "${renderer[@]}" setsid "$BIN_DIR/$o-operator" --nats-url "$NATS_URL" --metrics-addr "127.0.0.1:$port" \
    >>"$STATE_DIR/logs/$o-operator.log" 2>&1 </dev/null &
  echo $! >"$pidfile"
  echo "    $o-operator: pid $!, metrics http://127.0.0.1:$port/metrics, log $STATE_DIR/logs/$o-operator.log" >&2
done
kubectl -n kubeflow-operators wait --for=create secret/kubeflow-metrics-token --timeout=60s >/dev/null ||
  { echo "no operator made the scrape token Secret (kubeflow-operators/kubeflow-metrics-token); see $STATE_DIR/logs/*-operator.log" >&2; exit 1; }
kubectl -n kubeflow-operators get secret kubeflow-metrics-token -o 'jsonpath={.data.token}' | base64 -d >"$token_file.new"
mv "$token_file.new" "$token_file"

# The generic operator's renderer, as deploy/all runs it in a pod of its own: an empty environment
# (no kubeconfig, no token), answering only the key the kustomize-operator made in its caller
# Secret (the public half from that Secret, as the pod's environment takes it), which signs every
# build it sends.
pidfile=$STATE_DIR/pids/kustomize-renderer
if ! { [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }; then
  kubectl -n kubeflow-operators wait --for=create secret/kustomize-renderer-caller --timeout=60s >/dev/null ||
    { echo "the kustomize-operator made no caller Secret (kubeflow-operators/kustomize-renderer-caller); see $STATE_DIR/logs/kustomize-operator.log" >&2; exit 1; }
  caller=$(kubectl -n kubeflow-operators get secret kustomize-renderer-caller -o 'jsonpath={.data.nkey\.pub}' | base64 -d)
  kept=(HOME="$HOME")
  for v in KFOP_CACHE_DIR KFOP_KUSTOMIZE KFOP_KUSTOMIZE_V3_2 KFOP_KUSTOMIZE_V5; do [[ -n ${!v:-} ]] && kept+=("$v=${!v}"); done
  env -i "${kept[@]}" KFOP_METRICS_TOKEN_FILE="$token_file" setsid "$BIN_DIR/kustomize-operator" render-server --listen "127.0.0.1:$renderer_port" --callers "$caller" \
    --metrics-listen "127.0.0.1:$renderer_metrics_port" \
    >>"$STATE_DIR/logs/kustomize-renderer.log" 2>&1 </dev/null &
  echo $! >"$pidfile"
  echo "    kustomize-renderer: pid $!, http://127.0.0.1:$renderer_port, log $STATE_DIR/logs/kustomize-renderer.log" >&2
fi
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$renderer_port/readyz" >/dev/null && break; sleep 0.1; done
curl -sf "http://127.0.0.1:$renderer_port/readyz" >/dev/null || { echo "the renderer did not start; see $STATE_DIR/logs/kustomize-renderer.log" >&2; exit 1; }

repo=${KFOP_DEMO_REPO:-}
if [[ -z $repo ]]; then
  pidfile=$STATE_DIR/pids/stand-in-manifests
  if ! { [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }; then
    # The log exists before the server starts: the child opens it only once forked, and reading
    # a file that is not there yet would end this script (set -e) without a word.
    : >"$STATE_DIR/logs/stand-in-manifests.log"
    setsid "$BIN_DIR/stand-in-manifests" --kfdef "$KFDEF" >"$STATE_DIR/logs/stand-in-manifests.log" 2>&1 </dev/null &
    echo $! >"$pidfile"
  fi
  for _ in $(seq 100); do repo=$(head -1 "$STATE_DIR/logs/stand-in-manifests.log" 2>/dev/null || true); [[ $repo == http* ]] && break; sleep 0.1; done
  [[ $repo == http* ]] || { echo "the stand-in manifests server did not start; see $STATE_DIR/logs/stand-in-manifests.log" >&2; exit 1; }
  echo "    stand-in manifests repository: $repo" >&2
fi
mark "${#OPERATORS[@]} operators running on this host with their ServiceAccounts' tokens and NATS identities"

echo "--- applying $KFDEF (a kfctl KfDef; spec.repos[manifests] set to $repo)" >&2
kubectl create namespace kubeflow --dry-run=client -o yaml | kubectl apply --server-side -f - >/dev/null
sed "s|uri: https://github.com/kubeflow/manifests/archive/.*|uri: $repo|" "$KFDEF" | kubectl apply --server-side -f - >/dev/null
# Resources by their full names: a short name (`katib`) may mean another kind on a cluster that ran
# upstream's Kubeflow, or to kubectl's discovery cache of one.
kfdefs=kfdefs.kfdef.apps.kubeflow.org
kinds=$kfdefs,$(printf '%s.components.kubeflow.org,' istios dexes kfservings katibs pipelines profilecontrollers kustomizeapplications | sed 's/,$//')
# Progress from a watch: the phase and the applications not Ready yet, printed when they change.
progress() {
  kubectl -n kubeflow get $kfdefs kubeflow --watch \
    -o jsonpath='{.status.phase}{" -- not Ready yet: "}{range .status.applications[?(@.state!="Ready")]}{.name}{" "}{end}{"\n"}' 2>/dev/null |
    while read -r line; do [[ $line == "${last:-}" ]] || echo "--- $(date +%T) KfDef kubeflow: $line" >&2; last=$line; done
}
set -m # its own process group, stopped whole below
progress &
progress=$!
set +m
trap 'kill -- -$progress 2>/dev/null || true' EXIT
if ! kubectl -n kubeflow wait $kfdefs/kubeflow --for=jsonpath='{.status.phase}'=Available --timeout=300s >/dev/null; then
  kubectl -n kubeflow get "$kinds" >&2 || true
  echo "the KfDef did not become Available within 300 s; see $STATE_DIR/logs/*-operator.log" >&2
  exit 1
fi
kill -- -$progress 2>/dev/null || true
kubectl -n kubeflow get "$kinds"
# Available must mean every application of the spec is listed in status, and Ready.
total=$(kubectl -n kubeflow get $kfdefs kubeflow -o jsonpath='{.spec.applications[*].name}' | wc -w)
reported=$(kubectl -n kubeflow get $kfdefs kubeflow -o jsonpath='{.status.applications[*].name}' | wc -w)
((total > 0 && reported == total)) || { echo "the KfDef lists $total applications, its status $reported" >&2; exit 1; }
not_ready=$(kubectl -n kubeflow get $kfdefs kubeflow -o jsonpath='{range .status.applications[?(@.state!="Ready")]}{.name}{" "}{end}')
[[ -z $not_ready ]] || { echo "applications not Ready: $not_ready" >&2; exit 1; }
generic=$(kubectl -n kubeflow get $kfdefs kubeflow -o jsonpath='{range .status.applications[?(@.component=="kustomize")]}{.name}{" "}{end}' | wc -w)
mark "KfDef kubeflow Available: all $total applications Ready ($generic by the generic kustomize-operator)"

# A real Prometheus (Debian's package, hack/prereqs.sh installs it) scraping every operator and
# the renderer, with the alerting rules deploy/monitoring ships (rules.yaml, unchanged).
echo "--- starting Prometheus with deploy/monitoring/rules.yaml" >&2
# NATS's own metrics through the sidecar deploy/ runs beside each server node (meta-operator nats-exporter).
pidfile=$STATE_DIR/pids/nats-exporter
if ! { [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }; then
  KFOP_METRICS_TOKEN_FILE=$token_file setsid "$BIN_DIR/meta-operator" nats-exporter --monitor-port "$NATS_MONITOR_PORT" --listen "127.0.0.1:$nats_exporter_port" \
    >>"$STATE_DIR/logs/nats-exporter.log" 2>&1 </dev/null &
  echo $! >"$pidfile"
fi
targets=$(for p in $(seq 18081 $((18080 + ${#OPERATORS[@]}))) "$renderer_metrics_port" "$nats_exporter_port"; do printf "'127.0.0.1:%s', " "$p"; done)
mkdir -p "$STATE_DIR/prometheus"
cat >"$STATE_DIR/prometheus/prometheus.yml" <<YAML
global: {scrape_interval: 5s, evaluation_interval: 5s}
rule_files: ['$PWD/deploy/monitoring/rules.yaml']
scrape_configs:
  - job_name: kubeflow-operators
    authorization: {type: Bearer, credentials_file: '$token_file'}
    static_configs: [{targets: [${targets%, }]}]
YAML
pidfile=$STATE_DIR/pids/prometheus
if ! { [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }; then
  setsid prometheus --config.file="$STATE_DIR/prometheus/prometheus.yml" --storage.tsdb.path="$STATE_DIR/prometheus/data" \
    --web.listen-address="127.0.0.1:$prometheus_port" >>"$STATE_DIR/logs/prometheus.log" 2>&1 </dev/null &
  echo $! >"$pidfile"
fi
want=$((${#OPERATORS[@]} + 2)) up=0
for _ in $(seq 120); do
  up=$(curl -sf "http://127.0.0.1:$prometheus_port/api/v1/targets" | jq '[.data.activeTargets[] | select(.health == "up")] | length' 2>/dev/null || echo 0)
  ((up == want)) && break
  sleep 0.5
done
((up == want)) || { echo "Prometheus has $up of $want targets up; see $STATE_DIR/logs/prometheus.log and http://127.0.0.1:$prometheus_port/targets" >&2; exit 1; }
mark "Prometheus at http://127.0.0.1:$prometheus_port: $up targets up, $(grep -c '^  - alert:' deploy/monitoring/rules.yaml) alerting rules"
cat >&2 <<MSG

The KfDef is Available: all $total applications are Ready, $generic of them installed by the
generic kustomize-operator from their packages, the rest by their components' operators
(kubectl -n kubeflow get $kfdefs kubeflow -o jsonpath='{.status.applications}').

Try:
  source $ENV_FILE
  kubectl -n kubeflow get $kfdefs kubeflow -o yaml                       # conditions, components, applications
  kubectl -n kubeflow delete deployments.apps katib-controller            # healed in milliseconds
  kubectl -n kubeflow delete deployments.apps jupyter-web-app             # a generic application heals too
  kubectl -n kubeflow patch $kfdefs kubeflow --type merge -p '{"spec":{"version":"v1.3.0"}}'
  curl -H "Authorization: Bearer \$(cat $token_file)" http://127.0.0.1:18081/metrics   # the scrape token
Prometheus: http://127.0.0.1:$prometheus_port (targets: /targets, alerts: /alerts; the rules of deploy/monitoring)
Stop everything: make env-down

make demo: done in $((SECONDS - start)) s
$(printf '%s\n' "${done_steps[@]}")
MSG
