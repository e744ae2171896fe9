//! With OTEL_EXPORTER_OTLP_ENDPOINT set, a component operator exports its reconcile spans over
//! OTLP/HTTP. A minimal OTLP receiver on loopback records what arrives. And a real Prometheus
//! scrapes the operators and evaluates the alerting rules deploy/monitoring ships.

use std::sync::{Arc, Mutex};

use kube::Api;
use kube::api::PostParams;
use kubeflow_crds::Katib;
use kubeflow_crds::bus::Identity;
use kubeflow_crds::ComponentKind;
use kubeflow_e2e::*;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One test at a time: the Prometheus test's operators watch every namespace, and would take the
/// others' resources as theirs.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Accepts OTLP/HTTP posts and keeps (path, body) of each.
async fn otlp_receiver() -> (u16, Arc<Mutex<Vec<(String, Vec<u8>)>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let received = Arc::new(Mutex::new(Vec::new()));
    let sink = received.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else { return };
            let sink = sink.clone();
            tokio::spawn(async move {
                let mut data = Vec::new();
                let mut buf = [0u8; 8192];
                // Read the head, then as many body bytes as Content-Length says.
                let (head_end, length) = loop {
                    let n = stream.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    data.extend_from_slice(&buf[..n]);
                    if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&data[..end]).to_lowercase();
                        let length = head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse().ok()).unwrap_or(0);
                        break (end + 4, length);
                    }
                };
                while data.len() < head_end + length {
                    let n = stream.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    data.extend_from_slice(&buf[..n]);
                }
                let head = String::from_utf8_lossy(&data[..head_end]).into_owned();
                let path = head.split_whitespace().nth(1).unwrap_or_default().to_string();
                sink.lock().unwrap().push((path, data[head_end..].to_vec()));
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").await;
            });
        }
    });
    (port, received)
}

#[tokio::test]
async fn reconcile_spans_are_exported_over_otlp_when_configured() {
    let _serial = SERIAL.lock().await;
    let client = client().await;
    install_crds(&client).await;
    let ns = TestNamespace::create(&client, "e2e-otel").await;
    let (port, received) = otlp_receiver().await;
    let endpoint = format!("http://127.0.0.1:{port}");
    let operator = OperatorProcess::start(
        "katib-operator",
        &["--namespace", &ns.name],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint), ("OTEL_SERVICE_NAME", "katib-operator-e2e"), ("OTEL_BSP_SCHEDULE_DELAY", "200")],
    );
    operator.wait_ready().await;
    let katib: Katib = serde_json::from_value(json!({
        "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Katib", "metadata": {"name": "otel"},
        // An unsupported version keeps the test away from installing anything; it still reconciles.
        "spec": {"version": "v99.0.0", "targetNamespace": ns.name},
    }))
    .unwrap();
    let api = Api::<Katib>::namespaced(client.clone(), &ns.name);
    api.create(&PostParams::default(), &katib).await.unwrap();
    let contains = |body: &[u8], needle: &str| body.windows(needle.len()).any(|w| w == needle.as_bytes());
    eventually("a reconcile span at the OTLP receiver", || async {
        let got = received.lock().unwrap().clone();
        let found = got.iter().any(|(path, body)| path == "/v1/traces" && contains(body, "reconcile") && contains(body, "katib-operator-e2e") && contains(body, "otel"));
        if found { Ok(()) } else { Err(got.iter().map(|(p, b)| format!("{p} {} bytes", b.len())).collect::<Vec<_>>()) }
    })
    .await;
    // Let the operator release its finalizer before it stops, so the namespace can go.
    api.delete("otel", &Default::default()).await.unwrap();
    gone(&api, "otel").await;
}

/// Trace ids of the spans in an OTLP export: in a `Span` message, field 1 (`trace_id`, 16 bytes)
/// is directly followed by field 2 (`span_id`, 8 bytes).
fn trace_ids(body: &[u8]) -> Vec<Vec<u8>> {
    body.windows(20).filter(|w| w[0] == 0x0a && w[1] == 0x10 && w[18] == 0x12 && w[19] == 0x08).map(|w| w[2..18].to_vec()).collect()
}

#[tokio::test]
async fn one_trace_follows_a_kfdef_change_from_the_meta_operator_to_the_component_operator() {
    let _serial = SERIAL.lock().await;
    use component_framework::api::KfDef;
    let client = client().await;
    install_crds(&client).await;
    let ns = TestNamespace::create(&client, "e2e-trace").await;
    let nats = NatsServer::start().await;
    let (meta_port, meta_received) = otlp_receiver().await;
    let (katib_port, katib_received) = otlp_receiver().await;
    let otel = |port: u16| format!("http://127.0.0.1:{port}");
    let (meta_endpoint, katib_endpoint) = (otel(meta_port), otel(katib_port));
    let meta = OperatorProcess::on_bus(
        "meta-operator",
        &nats,
        Identity::MetaOperator,
        &["--namespace", &ns.name],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &meta_endpoint), ("OTEL_BSP_SCHEDULE_DELAY", "200")],
    );
    let katib = OperatorProcess::on_bus(
        "katib-operator",
        &nats,
        Identity::Component(ComponentKind::Katib),
        &["--namespace", &ns.name],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &katib_endpoint), ("OTEL_BSP_SCHEDULE_DELAY", "200")],
    );
    meta.wait_ready().await;
    katib.wait_ready().await;
    let kfdef: KfDef = serde_json::from_value(json!({
        "apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef", "metadata": {"name": "kubeflow"},
        "spec": {"version": "v1.3.0", "applications": [{"name": "katib-controller"}]},
    }))
    .unwrap();
    let api: Api<KfDef> = Api::namespaced(client.clone(), &ns.name);
    api.create(&PostParams::default(), &kfdef).await.unwrap();
    let contains = |body: &[u8], needle: &str| body.windows(needle.len()).any(|w| w == needle.as_bytes());
    eventually("the component operator's apply_desired span in the meta-operator's trace", || async {
        let meta_ids: Vec<Vec<u8>> = meta_received.lock().unwrap().iter().filter(|(p, _)| p == "/v1/traces").flat_map(|(_, b)| trace_ids(b)).collect();
        let katib_bodies: Vec<Vec<u8>> = katib_received.lock().unwrap().iter().filter(|(p, b)| p == "/v1/traces" && contains(b, "apply_desired")).map(|(_, b)| b.clone()).collect();
        let shared = katib_bodies.iter().flat_map(|b| trace_ids(b)).any(|id| meta_ids.contains(&id));
        if shared { Ok(()) } else { Err(format!("{} meta ids, {} katib bodies with apply_desired", meta_ids.len(), katib_bodies.len())) }
    })
    .await;
    api.delete("kubeflow", &Default::default()).await.unwrap();
    gone(&api, "kubeflow").await;
    drop(katib);
    drop(meta);
}

/// The alerting rules of deploy/monitoring (rules.yaml, as shipped), each alert holding for 0 s
/// instead of its minutes: the expressions are what fire; how long they must hold is the promtool
/// tests' (deploy/monitoring-tests).
fn shipped_rules_without_holds() -> String {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/monitoring/rules.yaml")).unwrap();
    let mut rules: serde_json::Value = serde_yaml_ng::from_str(&text).unwrap();
    for group in rules["groups"].as_array_mut().unwrap() {
        for rule in group["rules"].as_array_mut().unwrap() {
            assert!(rule["for"].is_string(), "{rule}");
            rule["for"] = json!("0s");
        }
    }
    serde_yaml_ng::to_string(&rules).unwrap()
}

/// The alerts Prometheus has firing, as (alertname, resource_namespace).
async fn firing(prometheus: &Prometheus) -> Result<Vec<(String, String)>, String> {
    let alerts = prometheus.api("/api/v1/alerts").await?;
    Ok(alerts["alerts"]
        .as_array()
        .ok_or("no alerts list")?
        .iter()
        .filter(|a| a["state"] == "firing")
        .map(|a| (a["labels"]["alertname"].as_str().unwrap_or_default().to_string(), a["labels"]["resource_namespace"].as_str().unwrap_or_default().to_string()))
        .collect())
}

/// Prometheus scrapes every operator of a stack and its renderer (every target up), reads what
/// they report of the KfDef and the bus, fires KubeflowKfDefDegraded while a KfDef is Degraded on
/// purpose (an application whose package path does not exist) and resolves it once the KfDef heals.
#[tokio::test]
async fn prometheus_scrapes_every_operator_and_alerts_while_a_kfdef_is_degraded() {
    let _serial = SERIAL.lock().await;
    use kube::api::{Patch, PatchParams};
    use kubeflow_crds::kfdef::KfDefPhase;
    let client = client().await;
    prepare_manifests_fixture(&client).await;
    let archive = "archive/v1.0.2.tar.gz";
    let server = kubeflow_manifests::fixtures::Server::start(std::collections::BTreeMap::from([(archive.to_string(), kubeflow_manifests::fixtures::repo_tarball())])).await;
    let stack = OperatorStack::start(&client, &[]).await;
    let mut ports: Vec<u16> = std::iter::once(&stack.meta).chain(stack.components.values()).map(|p| p.scrape_port).collect();
    ports.push(stack.renderer.scrape_port);
    // The NATS server's metrics sidecar, as deploy/ runs it beside each node: reading the stack's
    // server's monitor port.
    let exporter_port = free_port();
    let exporter = OperatorProcess::command("meta-operator", &["nats-exporter", &format!("--monitor-port={}", stack.nats.nodes[0].monitor_port), &format!("--listen=127.0.0.1:{exporter_port}")], exporter_port);
    ports.push(exporter_port);
    let prometheus = Prometheus::start(&ports, &shipped_rules_without_holds());
    eventually("every target up", || async {
        let targets = prometheus.api("/api/v1/targets").await?;
        let health: Vec<String> = targets["activeTargets"].as_array().ok_or("no targets")?.iter().map(|t| format!("{} {}", t["scrapeUrl"], t["health"])).collect();
        let up = health.iter().filter(|h| h.ends_with("\"up\"")).count();
        if up == ports.len() { Ok(()) } else { Err(format!("{up} of {} up: {health:?}", ports.len())) }
    })
    .await;
    // Up because Prometheus presents the scrape token: without it, or with another, every one of
    // them (operators, renderer, exporter) refuses.
    for port in &ports {
        let url = format!("http://127.0.0.1:{port}/metrics");
        for headers in ["", "Authorization: Bearer not-the-token\r\n"] {
            let refused = http_get_with(&url, headers).await;
            assert!(refused.as_ref().is_err_and(|status| status.starts_with("HTTP/1.1 401")), "{url} with {headers:?}: {refused:?}");
        }
    }

    let ns = TestNamespace::create(&client, "e2e-monitoring").await;
    let mut kfdef = kubeflow_manifests::fixtures::per_application_kfdef(&server.url(archive), &ns.name);
    let healthy: Vec<serde_json::Value> = kfdef.spec.applications.iter().map(|a| serde_json::to_value(a).unwrap()).collect();
    kfdef.spec.applications.push(serde_json::from_value(json!({"name": "bad-path", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "demo/missing"}}})).unwrap());
    let api: Api<kubeflow_crds::KfDef> = Api::namespaced(client.clone(), &ns.name);
    api.create(&PostParams::default(), &kfdef).await.unwrap();
    let degraded = (String::from("KubeflowKfDefDegraded"), ns.name.clone());
    eventually(&format!("KubeflowKfDefDegraded firing for {} (meta-operator log: {})", ns.name, stack.meta.log.display()), || async {
        let firing = firing(&prometheus).await?;
        if firing.contains(&degraded) { Ok(()) } else { Err(format!("firing: {firing:?}")) }
    })
    .await;
    let phase = api.get("demo").await.unwrap().status.and_then(|s| s.phase);
    assert_eq!(phase, Some(KfDefPhase::Degraded), "the alert fired for the phase the KfDef's status has");
    // Prometheus reads the application that is wrong, and the operators on the bus.
    let query = |q: &str| format!("/api/v1/query?query={}", q.bytes().map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") }).collect::<String>());
    let bad = prometheus.api(&query(&format!(r#"kfop_resource_phase{{kind="KfDefApplication",resource_namespace="{}",resource_name="demo/bad-path"}}"#, ns.name))).await.unwrap();
    assert_eq!(bad["result"][0]["metric"]["phase"], "Degraded", "{bad}");
    let connected = prometheus.api(&query("sum(kfop_bus_connected)")).await.unwrap();
    assert_eq!(connected["result"][0]["value"][1], json!((1 + stack.components.len()).to_string()), "every operator on the bus: {connected}");
    // The server's own count of its clients, through the sidecar: every operator at least.
    let server = prometheus.api(&query("kfop_nats_connections")).await.unwrap();
    let clients: f64 = server["result"][0]["value"][1].as_str().and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no kfop_nats_connections: {server}; exporter log: {}", exporter.log.display()));
    assert!(clients >= (1 + stack.components.len()) as f64, "the server counts {clients} clients: {server}");
    let streams = prometheus.api(&query("kfop_nats_jetstream_streams")).await.unwrap();
    assert!(streams["result"][0]["value"][1].as_str().and_then(|v| v.parse::<f64>().ok()).is_some_and(|n| n >= 9.0), "the buckets' streams: {streams}");

    // Healed: the bad application goes, the KfDef is Available, the alert resolves.
    api.patch("demo", &PatchParams::default(), &Patch::Merge(json!({"spec": {"applications": healthy}}))).await.unwrap();
    eventually("KubeflowKfDefDegraded resolved", || async {
        let firing = firing(&prometheus).await?;
        if firing.iter().any(|(_, namespace)| *namespace == ns.name) { Err(format!("firing: {firing:?}")) } else { Ok(()) }
    })
    .await;
    let phase = api.get("demo").await.unwrap().status.and_then(|s| s.phase);
    assert_eq!(phase, Some(KfDefPhase::Available), "resolved because the KfDef healed; Prometheus log:\n{}", prometheus.log());
    api.delete("demo", &kube::api::DeleteParams::default()).await.unwrap();
    gone(&api, "demo").await;
}

/// Where OLM installed the operators (`--monitoring-objects`, as the bundle sets it), the
/// meta-operator makes deploy/monitoring's objects in its namespace once the Prometheus
/// Operator's kinds are served, and leaves one of another manager's as it is.
#[tokio::test]
async fn the_meta_operator_makes_the_monitoring_objects_where_the_prometheus_operators_kinds_are_served() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
    let _serial = SERIAL.lock().await;
    let client = client().await;
    serve_kind(&client, "monitoring.coreos.com", "PodMonitor", "podmonitors", &["v1"]).await;
    serve_kind(&client, "monitoring.coreos.com", "PrometheusRule", "prometheusrules", &["v1"]).await;
    let ns = TestNamespace::create(&client, "e2e-monitoring-objects").await;
    // A dashboard ConfigMap someone else made first: theirs, not taken over.
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let theirs = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kfop-dashboard-fleet"}, "data": {"kfop-fleet.json": "{}"}});
    config_maps.patch("kfop-dashboard-fleet", &PatchParams::apply("someone-else"), &Patch::Apply(&theirs)).await.unwrap();
    let meta = OperatorProcess::start("meta-operator", &["--monitoring-objects", "--bus-namespace", &ns.name, "--namespace", &ns.name], &[]);
    let resource = |kind: &str, plural: &str| ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("monitoring.coreos.com", "v1", kind), plural);
    let rules: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns.name, &resource("PrometheusRule", "prometheusrules"));
    let monitors: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns.name, &resource("PodMonitor", "podmonitors"));
    let shipped = meta_operator::monitoring::objects(&ns.name);
    let want_monitors = shipped.iter().filter(|o| o["kind"] == "PodMonitor").count();
    eventually(&format!("the monitoring objects in {} (log: {})", ns.name, meta.log.display()), || async {
        let rule = rules.get_opt("kubeflow-operators").await.map_err(|e| e.to_string())?.ok_or("no PrometheusRule")?;
        let made = monitors.list(&Default::default()).await.map_err(|e| e.to_string())?.items.len();
        if made == want_monitors { Ok(rule) } else { Err(format!("{made} of {want_monitors} PodMonitors")) }
    })
    .await;
    let rule = rules.get("kubeflow-operators").await.unwrap();
    let alerts: Vec<String> = rule.data["spec"]["groups"][0]["rules"].as_array().unwrap().iter().map(|r| r["alert"].as_str().unwrap().to_string()).collect();
    assert!(alerts.contains(&"KubeflowKfDefDegraded".to_string()) && alerts.contains(&"KubeflowBusServerDown".to_string()), "{alerts:?}");
    let nats = monitors.get("nats").await.unwrap();
    assert_eq!(nats.data["spec"]["podMetricsEndpoints"][0]["port"], "metrics");
    eventually("the dashboards made but the one of another manager's", || async {
        let made: Vec<String> = config_maps.list(&Default::default()).await.map_err(|e| e.to_string())?.items.into_iter().filter_map(|c| c.metadata.name).filter(|n| n.starts_with("kfop-dashboard-")).collect();
        if made.len() == 5 { Ok(()) } else { Err(format!("{made:?}")) }
    })
    .await;
    let fleet = config_maps.get("kfop-dashboard-fleet").await.unwrap();
    assert_eq!(fleet.data.unwrap()["kfop-fleet.json"], "{}", "another manager's ConfigMap was overwritten");
    let bus = config_maps.get("kfop-dashboard-bus").await.unwrap();
    assert!(bus.data.unwrap()["kfop-bus.json"].contains("kfop_bus_connected"));
    // The shared cluster as it was: no Prometheus Operator's kinds for the other tests' operators.
    drop(meta);
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> = Api::all(client.clone());
    for name in ["podmonitors.monitoring.coreos.com", "prometheusrules.monitoring.coreos.com"] {
        crds.delete(name, &Default::default()).await.unwrap();
        gone(&crds, name).await;
    }
}

/// An operator told where (`--make-metrics-token-in`) makes the scrape token's Secret there, with a
/// new random token; its `/metrics` answers that token once the file it was given holds it (as the
/// kubelet fills in the mounted Secret), and nothing before.
#[tokio::test]
async fn an_operator_makes_the_scrape_token_secret_and_answers_only_that_token() {
    let _serial = SERIAL.lock().await;
    use k8s_openapi::api::core::v1::Secret;
    let client = client().await;
    install_crds(&client).await;
    let ns = TestNamespace::create(&client, "e2e-scrape-token").await;
    let dir = std::env::temp_dir().join(unique_name("scrape-token"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("token");
    let file_env = file.display().to_string();
    let operator = OperatorProcess::start("katib-operator", &["--namespace", &ns.name, "--make-metrics-token-in", &ns.name], &[("KFOP_METRICS_TOKEN_FILE", &file_env)]);
    operator.wait_ready().await;
    let url = format!("http://127.0.0.1:{}/metrics", operator.scrape_port);

    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns.name);
    let token = eventually(&format!("Secret {}/kubeflow-metrics-token (log: {})", ns.name, operator.log.display()), || async {
        let secret = secrets.get_opt("kubeflow-metrics-token").await.map_err(|e| e.to_string())?.ok_or("not there")?;
        let token = secret.data.unwrap_or_default().remove("token").ok_or("no key token")?;
        String::from_utf8(token.0).map_err(|e| e.to_string())
    })
    .await;
    assert!(token.len() == 64 && token.chars().all(|c| c.is_ascii_hexdigit()), "a random token: {token:?}");
    let bearer = format!("Authorization: Bearer {token}\r\n");
    // Its file is not there yet: nobody is answered.
    let before = http_get_with(&url, &bearer).await;
    assert!(before.as_ref().is_err_and(|s| s.starts_with("HTTP/1.1 503")), "{before:?}");

    std::fs::write(&file, &token).unwrap();
    let body = http_get_with(&url, &bearer).await.expect("the Secret's token is answered");
    assert!(body.contains("kfop_reconciles_total"), "{body}");
    let other = scrape(&url).await;
    assert!(other.as_ref().is_err_and(|s| s.starts_with("HTTP/1.1 401")), "another token: {other:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
