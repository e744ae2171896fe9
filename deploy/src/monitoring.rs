//! `deploy/monitoring/`: what a cluster running the Prometheus Operator needs to watch the
//! operators: a PodMonitor per operator, the alerting rules as a PrometheusRule, and the same
//! rules as a plain Prometheus rule file (`rules.yaml`, for a Prometheus without the operator and
//! for `promtool`). The alerts read only the operators' own `kfop_*` series
//! (operator_runtime::metrics), so they mean the same wherever the operators run.

use serde_json::{Value, json};

use crate::OPERATOR_NAMESPACE;

/// Every workload whose pods serve `/metrics` on their port `metrics`: each shipped binary's, the
/// renderers of the component operators that render packages (on a port their NetworkPolicy
/// opens to anyone), and the NATS server's (its metrics sidecar, `meta-operator nats-exporter`).
pub fn scraped() -> Vec<String> {
    let renderers = kubeflow_component_registry::all().into_iter().filter(|c| c.renders_packages).map(|c| crate::renderer_name(&c.operator));
    crate::images().into_iter().chain(renderers).chain([meta_operator::provision::SERVER.to_string()]).collect()
}

/// A PodMonitor for the pods of `workload` (label `app.kubernetes.io/name`), every replica: only
/// an operator's leader reconciles, and each replica's series carry its pod. Prometheus presents
/// the scrape token from the Secret the operators make beside it (Prometheus Operator reads it in
/// the PodMonitor's namespace); every `/metrics` refuses a scrape without it.
pub fn pod_monitor(workload: &str) -> Value {
    use operator_runtime::server::{SCRAPE_TOKEN_KEY, SCRAPE_TOKEN_SECRET};
    json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {"name": workload, "namespace": OPERATOR_NAMESPACE, "labels": {"app.kubernetes.io/part-of": "kubeflow-operator"}},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": workload}},
            "podMetricsEndpoints": [{
                "port": "metrics", "path": "/metrics", "interval": "30s",
                "authorization": {"type": "Bearer", "credentials": {"name": SCRAPE_TOKEN_SECRET, "key": SCRAPE_TOKEN_KEY}},
            }],
        },
    })
}


/// One alert: its name, expression, how long it must hold, severity, and what to tell the person
/// paged (the runbook: what it means, where to look, what to do).
struct Alert {
    name: &'static str,
    expr: &'static str,
    hold: &'static str,
    severity: &'static str,
    summary: &'static str,
    runbook: &'static str,
}

const ALERTS: &[Alert] = &[
    Alert {
        name: "KubeflowKfDefDegraded",
        expr: r#"max by (resource_namespace, resource_name) (kfop_resource_phase{kind="KfDef", phase="Degraded"}) == 1"#,
        hold: "10m",
        severity: "critical",
        summary: "KfDef {{ $labels.resource_namespace }}/{{ $labels.resource_name }} has been Degraded for 10 minutes",
        runbook: "An application or component of the KfDef failed and did not recover. `kubectl -n {{ $labels.resource_namespace }} get kfdefs.kfdef.apps.kubeflow.org {{ $labels.resource_name }} -o yaml`: status.conditions and status.applications name the failing application and why (a package that does not render, an object refused, a component operator not heard from). Fix the KfDef or the cluster; nothing has to be restarted, the operators retry on their own.",
    },
    Alert {
        name: "KubeflowKfDefNotAvailable",
        expr: r#"max by (resource_namespace, resource_name, phase) (kfop_resource_phase{kind="KfDef", phase!~"Available|Degraded"}) == 1"#,
        hold: "10m",
        severity: "warning",
        summary: "KfDef {{ $labels.resource_namespace }}/{{ $labels.resource_name }} has been {{ $labels.phase }}, not Available, for 10 minutes",
        runbook: "The KfDef is still converging after 10 minutes. status.applications lists each application's state: an application Pending waits for its component operator (is it running and connected to NATS? see KubeflowOperatorBusDisconnected), one Progressing waits for its workloads to become ready (check their pods' events).",
    },
    Alert {
        name: "KubeflowUpgradeStuck",
        expr: r#"time() - max by (resource_namespace, resource_name) (kfop_resource_deadline_timestamp_seconds{kind="KfUpgrade"}) > 0"#,
        hold: "5m",
        severity: "critical",
        summary: "KfUpgrade {{ $labels.resource_namespace }}/{{ $labels.resource_name }} is 5 minutes past the deadline of its phase",
        runbook: "The meta-operator fails a step (and rolls back) at its deadline; a KfUpgrade still in the phase 5 minutes later means no meta-operator acts on it. Check that a meta-operator replica leads (`kubectl -n kubeflow-operators get lease`), its log, and `kubectl get kfupgrades.kfupgrade.apps.kubeflow.org -A`.",
    },
    Alert {
        name: "KubeflowUpgradeFailed",
        expr: r#"max by (resource_namespace, resource_name, phase) (kfop_resource_phase{kind="KfUpgrade", phase=~"Failed|RolledBack"}) == 1"#,
        hold: "0m",
        severity: "warning",
        summary: "KfUpgrade {{ $labels.resource_namespace }}/{{ $labels.resource_name }} ended {{ $labels.phase }}",
        runbook: "status.conditions and status.steps of the KfUpgrade say which step failed and why; a RolledBack upgrade left every component at its previous release. Fix the cause, delete this KfUpgrade (the alert ends with it) and create a new one.",
    },
    Alert {
        name: "KubeflowOperatorReconcileErrors",
        expr: "sum by (component) (rate(kfop_reconcile_errors_total[5m])) / sum by (component) (rate(kfop_reconciles_total[5m])) > 0.25",
        hold: "15m",
        severity: "warning",
        summary: "More than a quarter of the {{ $labels.component }} operator's reconciles have failed for 15 minutes",
        runbook: "kfop_reconcile_errors_total's `kind` label says which step fails (api, nats, render, status, …); the operator's log names the resource and the error. Failures retry with backoff, so a lasting rate means a lasting cause: API server errors, RBAC the operator lacks, a package that does not render.",
    },
    Alert {
        name: "KubeflowOperatorBusDisconnected",
        expr: "max by (component, identity) (kfop_bus_connected) == 0",
        hold: "5m",
        severity: "critical",
        summary: "The {{ $labels.component }} operator has not been connected to NATS for 5 minutes",
        runbook: "Without the bus the meta-operator cannot hand specs to the component operators, and they cannot report. Check the NATS StatefulSet in kubeflow-operators, the operator's log (connection events, TLS or NKey errors), and KubeflowBusCredentialErrors.",
    },
    Alert {
        name: "KubeflowBusCredentialErrors",
        expr: "sum by (component, credential) (increase(kfop_bus_credential_errors_total[10m])) > 0",
        hold: "0m",
        severity: "critical",
        summary: "The {{ $labels.component }} operator cannot use its NATS {{ $labels.credential }}",
        runbook: "The operator could not read or use its NKey seed (Secret `<operator>-nats` mounted at NATS_NKEY_FILE): missing, emptied or not a seed. The meta-operator provisions these Secrets; check them and its log. Connections fail until it is fixed.",
    },
    Alert {
        name: "KubeflowBusServerDown",
        expr: "min by (instance) (kfop_nats_up) == 0",
        hold: "5m",
        severity: "critical",
        summary: "The NATS server beside {{ $labels.instance }} has not answered its monitoring for 5 minutes",
        runbook: "The metrics sidecar of a NATS pod cannot reach its server's monitor port: the server is down or stuck. The other nodes of the cluster keep the buckets (R3); check the pod (`kubectl -n kubeflow-operators get pods -l app.kubernetes.io/name=nats`), its log, and its volume.",
    },
    Alert {
        name: "KubeflowBusSlowConsumers",
        expr: "sum by (instance) (increase(kfop_nats_slow_consumers_total[10m])) > 0",
        hold: "0m",
        severity: "warning",
        summary: "The NATS server at {{ $labels.instance }} dropped messages for a slow client in the last 10 minutes",
        runbook: "A client read too slowly and the server cut it off: an operator that is starved of CPU or stuck. The operators relist after a reconnect, so nothing is lost, but a repeating one will lag. `kubectl -n kubeflow-operators top pods`, and the operators' logs for reconnects.",
    },
    Alert {
        name: "KubeflowBusStorageFilling",
        expr: "max by (instance) (kfop_nats_jetstream_storage_bytes / kfop_nats_jetstream_storage_max_bytes) > 0.8",
        hold: "15m",
        severity: "warning",
        summary: "JetStream on {{ $labels.instance }} has used more than 80% of its file storage for 15 minutes",
        runbook: "The buckets keep the latest desired state, status and heartbeats per key (a few revisions each), so they stay small: growth means many KfDefs or fleet clusters, or streams that are not the operators'. Look at kfop_bus_stream_bytes per bucket, and grow the server's volume (its StatefulSet's claim) if it is the operators'.",
    },
    Alert {
        name: "KubeflowRendererRefusals",
        expr: r#"sum by (instance) (increase(kfop_renderer_requests_total{code=~"401|413"}[10m])) > 0"#,
        hold: "0m",
        severity: "warning",
        summary: "The renderer at {{ $labels.instance }} refused requests that were not its operator's in the last 10 minutes",
        runbook: "Only its operator calls a renderer, always signed and within bounds: a 401 (unsigned, wrongly signed or replayed) or 413 (too large) answer means something else in the cluster sends it requests. The renderer reads none of their bodies; find the sender (the NetworkPolicy admits only the operator's pods to the build port, so look for a pod with the operator's labels, or a policy the cluster does not enforce).",
    },
    Alert {
        name: "KubeflowRendererSaturated",
        expr: "max by (instance) (kfop_renderer_connections_open / kfop_renderer_connections_max) >= 1 or sum by (instance) (rate(kfop_renderer_requests_total{code=\"503\"}[5m])) > 0",
        hold: "5m",
        severity: "warning",
        summary: "The renderer at {{ $labels.instance }} has held all its connections or turned builds away for 5 minutes",
        runbook: "Every connection slot held, or builds answered 503 (every build slot busy, or too many requests inside the clock window): a flood, or more installs at once than the renderer's concurrency. Renders wait and retry; if no install is running, look for the flood's source (see KubeflowRendererRefusals).",
    },
    Alert {
        name: "KubeflowBusCertificateMissingNames",
        expr: "max by (component) (kfop_bus_certificate_missing_names) > 0",
        hold: "0m",
        severity: "warning",
        summary: "The bus certificate lacks {{ $value }} of the names the fleet's spokes reach the hub by",
        runbook: "The meta-operator keeps an existing bus certificate (a restart never changes a credential), and this one was issued before some of --fleet-hub-hosts were listed: spokes that reach the hub by those names cannot verify it. Its log names them. Delete Secret nats-tls in kubeflow-operators to have the certificate issued again for every name, then give the spokes the new CA (Secret nats-hub-ca).",
    },
    Alert {
        name: "KubeflowFleetClusterStale",
        expr: r#"max by (resource_name) (kfop_resource_phase{kind="FleetCluster", phase="Stale"}) == 1"#,
        hold: "5m",
        severity: "warning",
        summary: "Fleet cluster {{ $labels.resource_name }} has not been heard from for 5 minutes",
        runbook: "The hub gets no heartbeat from the cluster's fleet agent: the spoke, its leaf connection to the hub or its agent is down. The spoke keeps running what it has; waves wait for it (or skip it with staleClusters: Skip). `kubectl get fleetclusters.fleet.kubeflow.org {{ $labels.resource_name }} -o yaml` shows when it was last heard.",
    },
];

/// The alert names, in rule order.
pub fn alert_names() -> Vec<&'static str> {
    ALERTS.iter().map(|a| a.name).collect()
}

/// The rule groups, as both the PrometheusRule's spec and a rule file hold them.
pub fn rule_groups() -> Value {
    let rules: Vec<Value> = ALERTS
        .iter()
        .map(|a| {
            json!({
                "alert": a.name,
                "expr": a.expr,
                "for": a.hold,
                "labels": {"severity": a.severity},
                "annotations": {"summary": a.summary, "runbook": a.runbook},
            })
        })
        .collect();
    json!([{"name": "kubeflow-operators", "rules": rules}])
}

pub fn prometheus_rule() -> Value {
    json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "kubeflow-operators", "namespace": OPERATOR_NAMESPACE, "labels": {"app.kubernetes.io/part-of": "kubeflow-operator"}},
        "spec": {"groups": rule_groups()},
    })
}

/// One panel of a dashboard: a title, its kind (`timeseries`, `table`, `stat`), its queries
/// (expression, legend) and its width in the 24-column grid.
struct Panel {
    title: &'static str,
    kind: &'static str,
    queries: &'static [(&'static str, &'static str)],
    width: u32,
}

/// One Grafana dashboard per area: its file name, title and panels.
struct Dashboard {
    file: &'static str,
    title: &'static str,
    panels: &'static [Panel],
}

const DASHBOARDS: &[Dashboard] = &[
    Dashboard {
        file: "kfdefs",
        title: "Kubeflow operators: KfDefs and applications",
        panels: &[
            Panel { title: "KfDefs by phase", kind: "stat", queries: &[(r#"count by (phase) (max by (resource_namespace, resource_name, phase) (kfop_resource_phase{kind="KfDef"}))"#, "{{phase}}")], width: 8 },
            Panel { title: "Applications by state", kind: "stat", queries: &[(r#"count by (phase) (max by (resource_namespace, resource_name, phase) (kfop_resource_phase{kind="KfDefApplication"}))"#, "{{phase}}")], width: 8 },
            Panel { title: "KfDefs not Available", kind: "stat", queries: &[(r#"count(max by (resource_namespace, resource_name) (kfop_resource_phase{kind="KfDef", phase!="Available"})) or vector(0)"#, "not Available")], width: 8 },
            Panel { title: "Each KfDef's phase", kind: "table", queries: &[(r#"max by (resource_namespace, resource_name, phase) (kfop_resource_phase{kind="KfDef"})"#, "{{resource_namespace}}/{{resource_name}} {{phase}}")], width: 12 },
            Panel { title: "Applications not Ready (KfDef/application)", kind: "table", queries: &[(r#"max by (resource_namespace, resource_name, phase) (kfop_resource_phase{kind="KfDefApplication", phase!="Ready"})"#, "{{resource_namespace}}/{{resource_name}} {{phase}}")], width: 12 },
            Panel { title: "KfDefs by phase over time", kind: "timeseries", queries: &[(r#"count by (phase) (max by (resource_namespace, resource_name, phase) (kfop_resource_phase{kind="KfDef"}))"#, "{{phase}}")], width: 24 },
        ],
    },
    Dashboard {
        file: "upgrades",
        title: "Kubeflow operators: upgrades and waves",
        panels: &[
            Panel { title: "KfUpgrades by phase", kind: "stat", queries: &[(r#"count by (phase) (max by (resource_namespace, resource_name, phase) (kfop_resource_phase{kind="KfUpgrade"}))"#, "{{phase}}")], width: 12 },
            Panel { title: "KfUpgrades that ended Failed or RolledBack", kind: "stat", queries: &[(r#"count(max by (resource_namespace, resource_name) (kfop_resource_phase{kind="KfUpgrade", phase=~"Failed|RolledBack"})) or vector(0)"#, "failed")], width: 12 },
            Panel { title: "Each KfUpgrade's phase", kind: "table", queries: &[(r#"max by (resource_namespace, resource_name, phase) (kfop_resource_phase{kind="KfUpgrade"})"#, "{{resource_namespace}}/{{resource_name}} {{phase}}")], width: 12 },
            Panel { title: "Seconds left before the current phase's deadline", kind: "timeseries", queries: &[(r#"max by (resource_namespace, resource_name) (kfop_resource_deadline_timestamp_seconds{kind="KfUpgrade"}) - time()"#, "{{resource_namespace}}/{{resource_name}}")], width: 12 },
            Panel { title: "Waves by phase", kind: "stat", queries: &[(r#"count by (phase) (max by (resource_namespace, resource_name, phase) (kfop_resource_phase{kind="KfUpgradeWave"}))"#, "{{phase}}")], width: 12 },
            Panel { title: "Clusters in waves by phase", kind: "stat", queries: &[(r#"count by (phase) (max by (resource_namespace, resource_name, phase) (kfop_resource_phase{kind="KfUpgradeWaveCluster"}))"#, "{{phase}}")], width: 12 },
            Panel { title: "Each wave's phase (upgrade/wave)", kind: "table", queries: &[(r#"max by (resource_namespace, resource_name, phase) (kfop_resource_phase{kind="KfUpgradeWave"})"#, "{{resource_namespace}}/{{resource_name}} {{phase}}")], width: 12 },
            Panel { title: "Clusters of a wave not done (upgrade/wave/cluster)", kind: "table", queries: &[(r#"max by (resource_namespace, resource_name, phase) (kfop_resource_phase{kind="KfUpgradeWaveCluster", phase!~"Succeeded|Unchanged"})"#, "{{resource_namespace}}/{{resource_name}} {{phase}}")], width: 12 },
        ],
    },
    Dashboard {
        file: "operators",
        title: "Kubeflow operators: reconciles and writes",
        panels: &[
            Panel { title: "Reconciles per second", kind: "timeseries", queries: &[("sum by (component) (rate(kfop_reconciles_total[5m]))", "{{component}}")], width: 12 },
            Panel { title: "Failed reconciles per second, by step", kind: "timeseries", queries: &[("sum by (component, kind) (rate(kfop_reconcile_errors_total[5m]))", "{{component}} {{kind}}")], width: 12 },
            Panel {
                title: "Reconcile latency (p50, p99)",
                kind: "timeseries",
                queries: &[
                    ("histogram_quantile(0.5, sum by (component, le) (rate(kfop_reconcile_duration_seconds_bucket[5m])))", "{{component}} p50"),
                    ("histogram_quantile(0.99, sum by (component, le) (rate(kfop_reconcile_duration_seconds_bucket[5m])))", "{{component}} p99"),
                ],
                width: 12,
            },
            Panel { title: "API writes per second, by field manager", kind: "timeseries", queries: &[("sum by (component, field_manager) (rate(kfop_writes_by_field_manager_total[5m]))", "{{component}} {{field_manager}}")], width: 12 },
            Panel { title: "Objects healed per second", kind: "timeseries", queries: &[("sum by (component) (rate(kfop_heals_total[5m]))", "{{component}}")], width: 24 },
        ],
    },
    Dashboard {
        file: "bus",
        title: "Kubeflow operators: the bus (NATS)",
        panels: &[
            Panel { title: "Operators connected to NATS", kind: "stat", queries: &[("sum(max by (component, identity) (kfop_bus_connected))", "connected"), ("count(max by (component, identity) (kfop_bus_connected) == 0) or vector(0)", "disconnected")], width: 12 },
            Panel { title: "NKey failures (10 min)", kind: "stat", queries: &[("sum(increase(kfop_bus_credential_errors_total[10m])) or vector(0)", "failures")], width: 12 },
            Panel { title: "Connection per operator", kind: "timeseries", queries: &[("max by (component, identity) (kfop_bus_connected)", "{{identity}}")], width: 24 },
            Panel { title: "Messages per bucket", kind: "timeseries", queries: &[("max by (stream) (kfop_bus_stream_messages)", "{{stream}}")], width: 12 },
            Panel { title: "Bytes per bucket", kind: "timeseries", queries: &[("max by (stream) (kfop_bus_stream_bytes)", "{{stream}}")], width: 12 },
            Panel { title: "Consumers per bucket", kind: "timeseries", queries: &[("max by (stream) (kfop_bus_stream_consumers)", "{{stream}}")], width: 24 },
            Panel { title: "NATS servers answering", kind: "stat", queries: &[("sum(kfop_nats_up)", "up"), ("count(kfop_nats_up == 0) or vector(0)", "down")], width: 12 },
            Panel { title: "Slow consumers cut off (10 min)", kind: "stat", queries: &[("sum(increase(kfop_nats_slow_consumers_total[10m])) or vector(0)", "cut off")], width: 12 },
            Panel { title: "Client connections per server", kind: "timeseries", queries: &[("max by (instance) (kfop_nats_connections)", "{{instance}}")], width: 12 },
            Panel { title: "Messages per second per server", kind: "timeseries", queries: &[("sum by (instance) (rate(kfop_nats_in_msgs_total[5m]))", "{{instance}} in"), ("sum by (instance) (rate(kfop_nats_out_msgs_total[5m]))", "{{instance}} out")], width: 12 },
            Panel { title: "JetStream file storage used", kind: "timeseries", queries: &[("max by (instance) (kfop_nats_jetstream_storage_bytes / kfop_nats_jetstream_storage_max_bytes)", "{{instance}}")], width: 24 },
        ],
    },
    Dashboard {
        file: "fleet",
        title: "Kubeflow operators: the fleet",
        panels: &[
            Panel { title: "Clusters by connection", kind: "stat", queries: &[(r#"count by (phase) (max by (resource_name, phase) (kfop_resource_phase{kind="FleetCluster"}))"#, "{{phase}}")], width: 12 },
            Panel { title: "Clusters not Connected", kind: "table", queries: &[(r#"max by (resource_name, phase) (kfop_resource_phase{kind="FleetCluster", phase!="Connected"})"#, "{{resource_name}} {{phase}}")], width: 12 },
            Panel { title: "Messages per cluster bucket", kind: "timeseries", queries: &[(r#"max by (stream) (kfop_bus_stream_messages{stream=~"KV_kubeflow-fleet-.*"})"#, "{{stream}}")], width: 24 },
        ],
    },
];

/// Every panel query of every dashboard, as (dashboard file, panel title, expression).
pub fn dashboard_queries() -> Vec<(&'static str, &'static str, &'static str)> {
    DASHBOARDS.iter().flat_map(|d| d.panels.iter().flat_map(move |p| p.queries.iter().map(move |(expr, _)| (d.file, p.title, *expr)))).collect()
}

/// A dashboard as Grafana's JSON model: its panels laid out left to right, top to bottom, each
/// reading the data source chosen in the dashboard's `datasource` variable.
fn dashboard(d: &Dashboard) -> Value {
    let (mut x, mut y) = (0, 0);
    let panels: Vec<Value> = d
        .panels
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let height = if p.kind == "stat" { 5 } else { 9 };
            if x + p.width > 24 {
                (x, y) = (0, y + 9);
            }
            let grid = json!({"x": x, "y": y, "w": p.width, "h": height});
            x += p.width;
            let targets: Vec<Value> = p
                .queries
                .iter()
                .enumerate()
                .map(|(j, (expr, legend))| json!({"refId": char::from(b'A' + j as u8).to_string(), "expr": expr, "legendFormat": legend, "datasource": {"type": "prometheus", "uid": "${datasource}"}, "instant": p.kind == "table"}))
                .collect();
            json!({"id": i + 1, "type": p.kind, "title": p.title, "gridPos": grid, "datasource": {"type": "prometheus", "uid": "${datasource}"}, "targets": targets})
        })
        .collect();
    json!({
        "uid": format!("kfop-{}", d.file),
        "title": d.title,
        "tags": ["kubeflow", "kubeflow-operator"],
        "schemaVersion": 39,
        "editable": true,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "templating": {"list": [{"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus"}]},
        "panels": panels,
    })
}

/// The dashboards as ConfigMaps labelled `grafana_dashboard: "1"`, which Grafana's dashboard
/// sidecar (as kube-prometheus-stack runs it) loads.
fn dashboard_config_maps() -> Vec<Value> {
    DASHBOARDS
        .iter()
        .map(|d| {
            let text = serde_json::to_string_pretty(&dashboard(d)).expect("a dashboard serialises");
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("kfop-dashboard-{}", d.file), "namespace": OPERATOR_NAMESPACE, "labels": {"grafana_dashboard": "1", "app.kubernetes.io/part-of": "kubeflow-operator"}},
                "data": {format!("kfop-{}.json", d.file): text},
            })
        })
        .collect()
}

/// The package's files.
pub fn package() -> (String, Vec<(String, String)>) {
    let monitors: Vec<Value> = scraped().iter().map(|w| pod_monitor(w)).collect();
    let rule_file = format!("{}{}", crate::HEADER, serde_yaml_ng::to_string(&json!({"groups": rule_groups()})).expect("rules serialise"));
    let mut files = vec![
        ("kustomization.yaml".to_string(), crate::kustomization(&["podmonitors.yaml", "prometheusrule.yaml", "dashboards.yaml"])),
        ("podmonitors.yaml".to_string(), crate::yaml_docs(&monitors)),
        ("prometheusrule.yaml".to_string(), crate::yaml_docs(&[prometheus_rule()])),
        ("dashboards.yaml".to_string(), crate::yaml_docs(&dashboard_config_maps())),
        ("rules.yaml".to_string(), rule_file),
    ];
    // The same dashboards as files, to import by hand.
    files.extend(DASHBOARDS.iter().map(|d| (format!("dashboards/{}.json", d.file), format!("{}\n", serde_json::to_string_pretty(&dashboard(d)).expect("a dashboard serialises")))));
    ("monitoring".to_string(), files)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `promtool check rules` and `promtool test rules` (Debian's `prometheus` package, which
    /// `hack/prereqs.sh` installs) on the generated rule file, with the hand-written unit tests of
    /// `deploy/monitoring-tests/alerts_test.yaml`: every alert firing and not firing.
    #[test]
    fn promtool_checks_the_rules_and_every_alert_fires_and_stays_quiet_as_its_tests_say() {
        let dir = crate::deploy_dir();
        let run = |args: &[&str]| {
            let out = std::process::Command::new("promtool").args(args).current_dir(&dir).output().unwrap_or_else(|e| panic!("promtool (Debian package prometheus, hack/prereqs.sh installs it): {e}"));
            let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            assert!(out.status.success(), "promtool {args:?} failed:\n{text}");
            text
        };
        run(&["check", "rules", "monitoring/rules.yaml"]);
        run(&["test", "rules", "monitoring-tests/alerts_test.yaml"]);
        // Every alert has a firing case and a quiet case in the tests.
        let tests = std::fs::read_to_string(dir.join("monitoring-tests/alerts_test.yaml")).unwrap();
        for name in alert_names() {
            let cases = tests.matches(&format!("alertname: {name}\n")).count();
            assert!(cases >= 2, "{name} has {cases} test cases in monitoring-tests/alerts_test.yaml; every alert needs one firing and one quiet");
        }
    }

    /// Every panel's query parses (promtool checks it as a recording rule's expression) and
    /// reads only series the operators serve; every dashboard file is what the package ships.
    #[test]
    fn every_dashboard_query_parses_and_reads_the_operators_series() {
        let queries = dashboard_queries();
        assert!(DASHBOARDS.len() >= 5 && queries.len() >= 20, "{} dashboards, {} queries", DASHBOARDS.len(), queries.len());
        let rules: Vec<Value> = queries.iter().enumerate().map(|(i, (_, _, expr))| json!({"record": format!("kfop:panel_{i}"), "expr": expr})).collect();
        let file = std::env::temp_dir().join(format!("kfop-panels-{}.yaml", std::process::id()));
        std::fs::write(&file, serde_yaml_ng::to_string(&json!({"groups": [{"name": "panels", "rules": rules}]})).unwrap()).unwrap();
        let out = std::process::Command::new("promtool").args(["check", "rules"]).arg(&file).output().expect("promtool (Debian package prometheus, hack/prereqs.sh installs it)");
        let _ = std::fs::remove_file(&file);
        assert!(out.status.success(), "a panel's query does not parse:\n{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        for (file, title, expr) in queries {
            assert!(expr.contains("kfop_"), "{file}: {title}: {expr} reads no operator series");
        }
        let (_, files) = package();
        for d in DASHBOARDS {
            let shipped = &files.iter().find(|(name, _)| *name == format!("dashboards/{}.json", d.file)).unwrap().1;
            let model: Value = serde_json::from_str(shipped).unwrap();
            assert_eq!(model["uid"], format!("kfop-{}", d.file));
            let panels = model["panels"].as_array().unwrap();
            assert_eq!(panels.len(), d.panels.len());
            for panel in panels {
                let grid = &panel["gridPos"];
                assert!(grid["x"].as_u64().unwrap() + grid["w"].as_u64().unwrap() <= 24, "{}: {panel}", d.file);
                assert!(!panel["targets"].as_array().unwrap().is_empty());
            }
        }
    }

    #[test]
    fn every_operator_renderer_and_nats_server_has_a_pod_monitor_on_its_metrics_port() {
        let names = scraped();
        for name in ["meta-operator", "katib-operator", "fleet-agent", "kustomize-renderer", "nats"] {
            assert!(names.contains(&name.to_string()), "{name}: {names:?}");
        }
        // The port the NATS pods' sidecar serves, and the renderers'.
        let nats = meta_operator::provision::server_objects(OPERATOR_NAMESPACE, &crate::nats_server());
        let pod = &nats.iter().find(|o| o["kind"] == "StatefulSet").unwrap()["spec"]["template"];
        assert_eq!(pod["metadata"]["labels"]["app.kubernetes.io/name"], "nats");
        assert_eq!(pod["spec"]["containers"][1]["ports"][0]["name"], "metrics");
        let (_, renderer) = crate::with_renderer(crate::operator_deployment("kustomize-operator", env!("CARGO_PKG_VERSION")));
        let renderer = renderer.iter().find(|o| o["kind"] == "Deployment").unwrap();
        assert_eq!(renderer["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"], "kustomize-renderer");
        assert_eq!(renderer["spec"]["template"]["spec"]["containers"][0]["ports"][1]["name"], "metrics");
        let monitor = pod_monitor("katib-operator");
        assert_eq!(monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"], "katib-operator");
        assert_eq!(monitor["spec"]["podMetricsEndpoints"][0]["port"], "metrics");
        // The token from the Secret every pod serving metrics mounts, as each one's file.
        assert_eq!(monitor["spec"]["podMetricsEndpoints"][0]["authorization"], json!({"type": "Bearer", "credentials": {"name": "kubeflow-metrics-token", "key": "token"}}));
        let token_file = json!({"name": "KFOP_METRICS_TOKEN_FILE", "value": "/var/run/secrets/kubeflow-operator/metrics/token"});
        let secret_volume = json!({"name": "metrics-token", "secret": {"secretName": "kubeflow-metrics-token", "optional": true}});
        for (what, pod, container) in [("nats", &pod["spec"], 1), ("renderer", &renderer["spec"]["template"]["spec"], 0)] {
            assert!(pod["containers"][container]["env"].as_array().unwrap().contains(&token_file), "{what}: {}", pod["containers"][container]);
            assert!(pod["volumes"].as_array().unwrap().contains(&secret_volume), "{what}: {}", pod["volumes"]);
        }
        // The port the operators' Deployments name.
        let deployment = crate::operator_deployment("katib-operator", env!("CARGO_PKG_VERSION"));
        assert_eq!(deployment["spec"]["template"]["spec"]["containers"][0]["ports"][0]["name"], "metrics");
        assert!(deployment["spec"]["template"]["spec"]["containers"][0]["env"].as_array().unwrap().contains(&token_file));
        let agent = crate::fleet_agent_deployment(env!("CARGO_PKG_VERSION"));
        assert!(agent["spec"]["template"]["spec"]["containers"][0]["env"].as_array().unwrap().contains(&token_file), "the fleet agent too");
        assert_eq!(deployment["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"], "katib-operator");
    }
}
