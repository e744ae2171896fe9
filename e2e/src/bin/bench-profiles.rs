//! Benchmark of the Profile controller (prints figures, asserts nothing). `make bench-profiles`.
//!
//! The profiles operator runs on the host as in `tests/profiles.rs` (deploy/profiles installed,
//! its ServiceAccount's token, a `ProfileController`, the AuthorizationPolicy CRD served so each
//! namespace gets its mesh policy). For each size N (`BENCH_PROFILES`, default `1000,5000`):
//!
//! * Converge: N Profiles with a quota (`resourceQuotaSpec.hard`) created at once (32 requests in
//!   flight) → every one Ready at its generation with its Namespace, RoleBindings
//!   (`namespaceAdmin`, `default-editor`, `default-viewer`), ServiceAccounts, AuthorizationPolicy
//!   `ns-owner-access-istio` and ResourceQuota `kf-resource-quota`, all seen on watches opened
//!   before the first create. Bounded (`BENCH_PROFILES_TIMEOUT_SECS`, default 600 s, 1,200 s for
//!   5,000); a run that hits the bound reports how far it got.
//! * API requests: every request of the operator goes through a counting proxy in this process
//!   (its kubeconfig points at the proxy, which forwards with the same ServiceAccount token), so
//!   writes and reads per Profile are counted by verb and resource, with the error answers. The
//!   operator's own `kfop_writes_total` / `kfop_writes_by_field_manager_total` are printed next to
//!   them.
//! * Steady state: once the operator has sent no write for 5 s, the writes over
//!   `BENCH_STEADY_SECS` (default 30) more (target 0).
//! * Memory: the operator's VmRSS after convergence and its peak (VmHWM).
//! * Reference, in the same run: the same objects for N other names (rendered here as the
//!   operator renders them — `profiles_operator::tenant::desired_objects`, which this crate does
//!   not link — without the owner reference and the operator's labels) applied by one
//!   `kubectl apply --server-side`; time until it exits, and its requests (from `-v=6`).
//! * Where the time goes: CPU seconds of kube-apiserver, etcd, kube-controller-manager, the
//!   operator and this process in each phase; the API server's priority-and-fairness queueing of
//!   the operator's requests (level `workload-low`).
//!
//! Everything made is deleted at the end, after a failure and on Ctrl-C or SIGTERM (Profiles
//! first, so the operator still removes its finalizer; their namespaces follow by garbage
//! collection), and the benchmark waits (bounded) until the namespaces are gone before the next
//! size.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::{Namespace, ResourceQuota, ServiceAccount};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use kubeflow_crds::component::ComponentPhase;
use kubeflow_crds::profile::Profile;
use kubeflow_crds::{ConditionStatus, ProfileController};
use kubeflow_e2e::*;
use serde_json::{Value, json};

/// Label of this run's Profiles (the operator copies nothing of it).
const RUN_LABEL: &str = "bench.kubeflow.org/profiles-run";
/// Label of the reference's objects.
const REFERENCE_LABEL: &str = "bench.kubeflow.org/profiles-reference";
const PROFILE_LABEL: &str = "profiles.kubeflow.org/profile";
const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
const MANAGED_BY: &str = "profiles-operator";
/// Field manager of the Profile controller's tenant objects.
const OPERATOR_FIELD_MANAGER: &str = "kubeflow-profile-controller";

/// Upstream's profile-controller for 1,000 Profiles on this kind of machine, and the issue's
/// targets (for 1,000).
const UPSTREAM_1000: (f64, f64) = (965.0, 94.0);
const TARGET_1000: (f64, f64) = (48.0, 31.0);

// ---------------------------------------------------------------------------------------------
// The objects of one Profile, as `profiles_operator::tenant::desired_objects` renders them with
// default settings and Istio's AuthorizationPolicy API served.

fn quota_hard() -> Value {
    json!({"cpu": "4", "memory": "16Gi"})
}

fn profile_object(name: &str, run: &str) -> Profile {
    serde_json::from_value(json!({
        "apiVersion": "kubeflow.org/v1", "kind": "Profile", "metadata": {"name": name, "labels": {RUN_LABEL: run}},
        "spec": {"owner": {"kind": "User", "name": format!("{name}@example.com")}, "resourceQuotaSpec": {"hard": quota_hard()}},
    }))
    .unwrap()
}

/// Every object the operator makes for Profile `name` owned by User `<name>@example.com`;
/// `owner_reference` is the Profile's (None: the reference's objects, which no Profile owns).
fn tenant_objects(name: &str, settings: &kubeflow_crds::component::ProfileControllerSpec, owner_reference: Option<&Value>, reference_run: Option<&str>) -> Vec<Value> {
    let owner = format!("{name}@example.com");
    let labels = |mut extra: serde_json::Map<String, Value>| {
        match reference_run {
            Some(run) => extra.insert(REFERENCE_LABEL.into(), run.into()),
            None => {
                extra.insert(PROFILE_LABEL.into(), name.into());
                extra.insert(MANAGED_BY_LABEL.into(), MANAGED_BY.into())
            }
        };
        Value::Object(extra)
    };
    let metadata = |object: &str, annotations: Option<Value>| {
        let mut m = json!({"name": object, "namespace": name, "labels": labels(Default::default())});
        if let Some(o) = owner_reference {
            m["ownerReferences"] = json!([o]);
        }
        if let Some(a) = annotations {
            m["annotations"] = a;
        }
        m
    };
    let mut ns_labels: serde_json::Map<String, Value> = serde_json::from_value(json!({
        "katib.kubeflow.org/metrics-collector-injection": "enabled", "serving.kubeflow.org/inferenceservice": "enabled",
        "pipelines.kubeflow.org/enabled": "true", "app.kubernetes.io/part-of": "kubeflow-profile", "istio-injection": "enabled",
    }))
    .unwrap();
    ns_labels.extend(settings.namespace_labels.iter().map(|(k, v)| (k.clone(), Value::from(v.clone()))));
    ns_labels.retain(|_, v| v != "");
    let mut namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels(ns_labels), "annotations": {"owner": owner}}});
    if let Some(o) = owner_reference {
        namespace["metadata"]["ownerReferences"] = json!([o]);
    }
    let admin = json!({"user": owner, "role": "admin"});
    let mut objects = vec![
        namespace,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": metadata("namespaceAdmin", Some(admin.clone())),
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kubeflow-admin"},
               "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": owner}]}),
    ];
    for (account, role) in [("default-editor", "kubeflow-edit"), ("default-viewer", "kubeflow-view")] {
        objects.push(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata(account, None)}));
        objects.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": metadata(account, None),
                            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": name}]}));
    }
    objects.push(json!({
        "apiVersion": "security.istio.io/v1beta1", "kind": "AuthorizationPolicy", "metadata": metadata("ns-owner-access-istio", Some(admin)),
        "spec": {"action": "ALLOW", "rules": [
            {"from": [{"source": {"principals": settings.trusted_principals}}],
             "when": [{"key": format!("request.headers[{}]", settings.user_id_header), "values": [format!("{}{owner}", settings.user_id_prefix)]}]},
            {"from": [{"source": {"namespaces": [name]}}]},
            {"to": [{"operation": {"paths": ["/healthz", "/metrics", "/wait-for-drain"]}}]},
        ]},
    }));
    objects.push(json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": metadata("kf-resource-quota", None), "spec": {"hard": quota_hard()}}));
    objects
}

/// Whether every field of `want` is in `live` with the same value (arrays element by element).
fn contains(live: &Value, want: &Value) -> bool {
    match (live, want) {
        (Value::Object(l), Value::Object(w)) => w.iter().all(|(k, v)| l.get(k).is_some_and(|lv| contains(lv, v))),
        (Value::Array(l), Value::Array(w)) => l.len() == w.len() && l.iter().zip(w).all(|(a, b)| contains(a, b)),
        _ => live == want,
    }
}

fn api_resource(object: &Value) -> ApiResource {
    let api_version = object["apiVersion"].as_str().unwrap();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let kind = object["kind"].as_str().unwrap();
    let plural = match kind {
        "Namespace" => "namespaces",
        "RoleBinding" => "rolebindings",
        "ServiceAccount" => "serviceaccounts",
        "AuthorizationPolicy" => "authorizationpolicies",
        "ResourceQuota" => "resourcequotas",
        other => panic!("unexpected kind {other}"),
    };
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

// ---------------------------------------------------------------------------------------------
// A counting proxy between the operator and the API server.

#[derive(Default, Clone, Debug)]
struct Counts {
    writes: u64,
    /// GETs and LISTs (not watches).
    reads: u64,
    watches: u64,
    by_request: BTreeMap<String, u64>,
    errors: BTreeMap<u16, u64>,
}

impl Counts {
    fn since(&self, before: &Counts) -> Counts {
        let diff = |a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>| a.iter().map(|(k, v)| (k.clone(), v - b.get(k).copied().unwrap_or(0))).filter(|(_, v)| *v > 0).collect();
        Counts {
            writes: self.writes - before.writes,
            reads: self.reads - before.reads,
            watches: self.watches - before.watches,
            by_request: diff(&self.by_request, &before.by_request),
            errors: self.errors.iter().map(|(k, v)| (*k, v - before.errors.get(k).copied().unwrap_or(0))).filter(|(_, v)| *v > 0).collect(),
        }
    }
}

#[derive(Default)]
struct Traffic(Mutex<Counts>);

impl Traffic {
    fn snapshot(&self) -> Counts {
        self.0.lock().unwrap().clone()
    }
}

/// `(verb, resource[/subresource])` of a request, verbs as the API server's audit names them.
fn classify(method: &http::Method, uri: &http::Uri, content_type: Option<&str>) -> (&'static str, String) {
    let segments: Vec<&str> = uri.path().trim_start_matches('/').split('/').collect();
    let rest = match segments.first() {
        Some(&"api") => &segments[segments.len().min(2)..],
        Some(&"apis") => &segments[segments.len().min(3)..],
        _ => &segments[..0],
    };
    let namespaced = rest.len() >= 3 && rest[0] == "namespaces" && !["status", "finalize"].contains(&rest[2]);
    let rest = if namespaced { &rest[2..] } else { rest };
    let resource = match (rest.first(), rest.get(2)) {
        (Some(r), Some(sub)) => format!("{r}/{sub}"),
        (Some(r), None) => r.to_string(),
        (None, _) => uri.path().to_string(),
    };
    let named = rest.len() >= 2;
    let watch = uri.query().is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    let verb = match *method {
        http::Method::GET | http::Method::HEAD if watch => "WATCH",
        http::Method::GET | http::Method::HEAD if named => "GET",
        http::Method::GET | http::Method::HEAD => "LIST",
        http::Method::POST => "CREATE",
        http::Method::PUT => "UPDATE",
        http::Method::PATCH if content_type == Some("application/apply-patch+yaml") => "APPLY",
        http::Method::PATCH => "PATCH",
        http::Method::DELETE if named => "DELETE",
        http::Method::DELETE => "DELETECOLLECTION",
        _ => "OTHER",
    };
    (verb, resource)
}

async fn forward(request: hyper::Request<hyper::body::Incoming>, upstream: Client, traffic: Arc<Traffic>) -> Result<hyper::Response<kube::client::Body>, std::convert::Infallible> {
    let (mut parts, body) = request.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let (verb, resource) = classify(&parts.method, &parts.uri, parts.headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()));
    {
        let mut counts = traffic.0.lock().unwrap();
        match verb {
            "WATCH" => counts.watches += 1,
            "GET" | "LIST" => counts.reads += 1,
            _ => counts.writes += 1,
        }
        *counts.by_request.entry(format!("{verb} {resource}")).or_default() += 1;
    }
    for header in [http::header::HOST, http::header::AUTHORIZATION, http::header::CONNECTION, http::header::TRANSFER_ENCODING] {
        parts.headers.remove(header);
    }
    parts.uri = parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/").parse().unwrap();
    match upstream.send(http::Request::from_parts(parts, kube::client::Body::from(body))).await {
        Ok(response) => {
            if response.status().as_u16() >= 400 {
                *traffic.0.lock().unwrap().errors.entry(response.status().as_u16()).or_default() += 1;
            }
            Ok(response)
        }
        Err(e) => {
            *traffic.0.lock().unwrap().errors.entry(502).or_default() += 1;
            Ok(hyper::Response::builder().status(502).body(kube::client::Body::from(e.to_string().into_bytes())).unwrap())
        }
    }
}

/// Serves the proxy on a loopback port; returns a kubeconfig that reaches the API server through
/// it as the ServiceAccount of `service_account_kubeconfig`.
async fn start_proxy(service_account_kubeconfig: &std::path::Path, traffic: Arc<Traffic>) -> std::path::PathBuf {
    let kubeconfig = kube::config::Kubeconfig::read_from(service_account_kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
    let upstream = Client::try_from(config).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let (upstream, traffic) = (upstream.clone(), traffic.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| forward(request, upstream.clone(), traffic.clone()));
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(hyper_util::rt::TokioIo::new(stream), service).await;
            });
        }
    });
    let text = std::fs::read_to_string(service_account_kubeconfig).unwrap();
    let mut proxied: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
    proxied["clusters"][0]["cluster"] = serde_yaml_ng::from_str(&format!("server: http://127.0.0.1:{port}")).unwrap();
    proxied["users"][0]["user"] = serde_yaml_ng::Value::Mapping(Default::default());
    let path = std::env::temp_dir().join(unique_name("kubeconfig-bench-profiles-proxy"));
    std::fs::write(&path, serde_yaml_ng::to_string(&proxied).unwrap()).unwrap();
    path
}

// ---------------------------------------------------------------------------------------------
// Convergence, seen on watches.

const READY: u16 = 1;
const NAMESPACE: u16 = 1 << 1;
const RB_ADMIN: u16 = 1 << 2;
const RB_EDITOR: u16 = 1 << 3;
const RB_VIEWER: u16 = 1 << 4;
const SA_EDITOR: u16 = 1 << 5;
const SA_VIEWER: u16 = 1 << 6;
const POLICY: u16 = 1 << 7;
const QUOTA: u16 = 1 << 8;
const ALL: u16 = (1 << 9) - 1;
const PARTS: [(u16, &str); 9] = [
    (READY, "Ready"),
    (NAMESPACE, "Namespace"),
    (RB_ADMIN, "RoleBinding namespaceAdmin"),
    (RB_EDITOR, "RoleBinding default-editor"),
    (RB_VIEWER, "RoleBinding default-viewer"),
    (SA_EDITOR, "ServiceAccount default-editor"),
    (SA_VIEWER, "ServiceAccount default-viewer"),
    (POLICY, "AuthorizationPolicy"),
    (QUOTA, "ResourceQuota"),
];

struct Tracker {
    t0: Instant,
    index: HashMap<String, usize>,
    parts: Vec<u16>,
    /// When each Profile was first complete.
    done_at: Vec<Option<Duration>>,
    complete: usize,
    /// When the last Profile became complete (all N complete at once).
    all_done_at: Option<Duration>,
}

impl Tracker {
    fn new(names: &[String], t0: Instant) -> Self {
        Self { t0, index: names.iter().enumerate().map(|(i, n)| (n.clone(), i)).collect(), parts: vec![0; names.len()], done_at: vec![None; names.len()], complete: 0, all_done_at: None }
    }

    fn update(&mut self, profile: &str, part: u16, present: bool) {
        let Some(&i) = self.index.get(profile) else {
            return;
        };
        let before = self.parts[i] == ALL;
        if present {
            self.parts[i] |= part
        } else {
            self.parts[i] &= !part
        }
        let after = self.parts[i] == ALL;
        if after && !before {
            self.complete += 1;
            self.done_at[i].get_or_insert(self.t0.elapsed());
            if self.complete == self.parts.len() {
                self.all_done_at = Some(self.t0.elapsed());
            }
        } else if before && !after {
            self.complete -= 1;
        }
    }

    /// How many Profiles have each part.
    fn reached(&self) -> String {
        PARTS.iter().map(|(bit, what)| format!("{what} {}", self.parts.iter().filter(|p| *p & bit != 0).count())).collect::<Vec<_>>().join(", ")
    }
}

/// Feeds `tracker` from a watch of `api`: `part(object)` names the Profile and the part an object is.
fn track<K>(api: Api<K>, config: watcher::Config, tracker: Arc<Mutex<Tracker>>, part: fn(&K) -> Option<(String, u16, bool)>) -> tokio::task::JoinHandle<()>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    tokio::spawn(async move {
        let mut events = std::pin::pin!(watcher(api, config).default_backoff().applied_objects());
        while let Some(event) = events.next().await {
            match event {
                Ok(object) => {
                    if let Some((profile, bit, present)) = part(&object) {
                        tracker.lock().unwrap().update(&profile, bit, present);
                    }
                }
                Err(e) => eprintln!("watch error (retried): {e}"),
            }
        }
    })
}

fn owned_part(object: &impl Resource, parts: &[(&str, u16)]) -> Option<(String, u16, bool)> {
    let name = object.meta().name.as_deref()?;
    let bit = parts.iter().find(|(n, _)| *n == name)?.1;
    Some((object.meta().namespace.clone()?, bit, object.meta().deletion_timestamp.is_none()))
}

fn watch_all(tracker: &Arc<Mutex<Tracker>>, client: &Client, run: &str) -> Vec<tokio::task::JoinHandle<()>> {
    let owned = || watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}"));
    let policy = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("security.istio.io", "v1beta1", "AuthorizationPolicy"), "authorizationpolicies");
    vec![
        track(Api::<Profile>::all(client.clone()), watcher::Config::default().labels(&format!("{RUN_LABEL}={run}")), tracker.clone(), |p| {
            let status = p.status.clone().unwrap_or_default();
            let ready = status.observed_generation == p.metadata.generation
                && status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == ConditionStatus::from(true) && (c.observed_generation.is_none() || c.observed_generation == p.metadata.generation));
            Some((p.name_any(), READY, ready))
        }),
        track(Api::<Namespace>::all(client.clone()), owned(), tracker.clone(), |ns| Some((ns.name_any(), NAMESPACE, ns.metadata.deletion_timestamp.is_none()))),
        track(Api::<RoleBinding>::all(client.clone()), owned(), tracker.clone(), |o| owned_part(o, &[("namespaceAdmin", RB_ADMIN), ("default-editor", RB_EDITOR), ("default-viewer", RB_VIEWER)])),
        track(Api::<ServiceAccount>::all(client.clone()), owned(), tracker.clone(), |o| owned_part(o, &[("default-editor", SA_EDITOR), ("default-viewer", SA_VIEWER)])),
        track(Api::<DynamicObject>::all_with(client.clone(), &policy), owned(), tracker.clone(), |o| owned_part(o, &[("ns-owner-access-istio", POLICY)])),
        track(Api::<ResourceQuota>::all(client.clone()), owned(), tracker.clone(), |o| owned_part(o, &[("kf-resource-quota", QUOTA)])),
    ]
}

// ---------------------------------------------------------------------------------------------

struct Operator {
    process: OperatorProcess,
    traffic: Arc<Traffic>,
    settings: kubeflow_crds::component::ProfileControllerSpec,
    /// VmRSS after the warm-up Profile, before any of the benchmark's.
    idle_rss: std::sync::OnceLock<f64>,
    /// Whether its requests go through the counting proxy.
    counted: bool,
}

impl Operator {
    fn rss_mib(&self) -> (f64, f64) {
        let field = self.status_mib();
        (rss_kib(self.process.pid()) as f64 / 1024.0, field("VmHWM:"))
    }

    /// RSS split into anonymous memory (heap, stacks: what the operator holds) and file-backed
    /// pages (the binary's code and read-only data it touched, which the kernel may drop).
    fn rss_split_mib(&self) -> (f64, f64) {
        let field = self.status_mib();
        (field("RssAnon:"), field("RssFile:"))
    }

    /// A field of /proc/<pid>/status, in MiB.
    fn status_mib(&self) -> impl Fn(&str) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.process.pid())).unwrap_or_default();
        move |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<f64>().ok()).unwrap_or(0.0) / 1024.0
    }

    /// Failed reconciles the operator logged so far, by category.
    fn failures(&self) -> BTreeMap<String, u64> {
        let log = log_excerpt(&std::fs::read_to_string(&self.process.log).unwrap_or_default(), usize::MAX);
        let mut failures = BTreeMap::new();
        for line in log.lines().filter(|l| l.contains("reconcile failed")) {
            let category = line.split("category=").nth(1).and_then(|c| c.split_whitespace().next()).unwrap_or("?").trim_matches('"');
            *failures.entry(category.to_string()).or_default() += 1;
        }
        failures
    }

    /// The operator's own write counters: all writes, and those of the Profile controller's field manager.
    async fn own_counters(&self) -> (Option<f64>, Option<f64>) {
        (self.process.metric("kfop_writes_total").await, self.process.metric_with_labels("kfop_writes_by_field_manager_total", &[("field_manager", OPERATOR_FIELD_MANAGER)]).await)
    }

    /// Waits until the operator has sent no write for `quiet` (at most `bound`); how long that took.
    async fn settle(&self, quiet: Duration, bound: Duration) -> Duration {
        let t0 = Instant::now();
        let mut last = self.traffic.snapshot().writes;
        let mut since = Instant::now();
        while since.elapsed() < quiet && t0.elapsed() < bound {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let now = self.traffic.snapshot().writes;
            if now != last {
                last = now;
                since = Instant::now();
            }
        }
        t0.elapsed()
    }
}

/// CPU seconds (user + system) used so far by each process of interest: the control plane's by
/// name, the operator's and this benchmark's (its watches and the proxy) by pid.
fn cpu_seconds(operator_pid: u32) -> BTreeMap<&'static str, f64> {
    let ticks = 100.0; // USER_HZ on Linux
    let of = |pid: &str| -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Fields after the command, which ends with the last ')': utime and stime are the 12th and 13th.
        let fields: Vec<&str> = stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
        fields.get(11).and_then(|u| u.parse::<f64>().ok()).unwrap_or(0.0) + fields.get(12).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0)
    };
    let mut cpu = BTreeMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        let name = match comm.trim() {
            "kube-apiserver" => "kube-apiserver",
            "etcd" => "etcd",
            "kube-controller" | "kube-controller-manager" => "kube-controller-manager",
            _ => continue,
        };
        *cpu.entry(name).or_default() += of(&pid) / ticks;
    }
    cpu.insert("operator", of(&operator_pid.to_string()) / ticks);
    cpu.insert("benchmark (watches, proxy)", of("self") / ticks);
    cpu
}

fn cpu_since(now: &BTreeMap<&'static str, f64>, before: &BTreeMap<&'static str, f64>) -> String {
    now.iter().map(|(k, v)| format!("{k} {:.0}", v - before.get(k).copied().unwrap_or(0.0))).collect::<Vec<_>>().join(", ")
}

/// The API server's priority-and-fairness queueing of the operator's requests (priority level
/// `workload-low`, where ServiceAccounts land): (requests dispatched, seconds waited in queues in all).
async fn apf_wait(client: &Client) -> (f64, f64) {
    let text = client.request_text(http::Request::get("/metrics").body(Vec::new()).unwrap()).await.unwrap_or_default();
    let sum = |metric: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(metric) && l.contains("priority_level=\"workload-low\"") && l.contains("execute=\"true\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    (sum("apiserver_flowcontrol_request_wait_duration_seconds_count"), sum("apiserver_flowcontrol_request_wait_duration_seconds_sum"))
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

fn per(count: u64, n: usize) -> String {
    format!("{:.1}", count as f64 / n as f64)
}

/// Requests of a `kubectl -v=6` run, by verb (both log formats client-go has used).
fn kubectl_requests(log: &str) -> BTreeMap<String, u64> {
    let mut verbs = BTreeMap::new();
    for line in log.lines() {
        let verb = if let Some(i) = line.find("\"Response\" verb=\"") {
            line[i + 17..].split('"').next()
        } else {
            ["GET", "PATCH", "POST", "PUT", "DELETE"].into_iter().find(|v| line.contains(&format!("] {v} https://")))
        };
        if let Some(verb) = verb {
            *verbs.entry(verb.to_string()).or_default() += 1;
        }
    }
    verbs
}

async fn run_size(client: &Client, operator: &Operator, run: &str, n: usize, steady: Duration) {
    let bound = Duration::from_secs(std::env::var("BENCH_PROFILES_TIMEOUT_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(if n > 1000 { 1200 } else { 600 }));
    let names: Vec<String> = (0..n).map(|i| format!("bp{run}-{n}-{i:05}")).collect();
    let profiles: Api<Profile> = Api::all(client.clone());
    eprintln!("== {n} Profiles (bound {})", secs(bound));

    // Converge.
    let before = operator.traffic.snapshot();
    let cpu_before = cpu_seconds(operator.process.pid());
    let apf_before = apf_wait(client).await;
    let own_before = operator.own_counters().await;
    let failures_before = operator.failures();
    let t0 = Instant::now();
    let tracker = Arc::new(Mutex::new(Tracker::new(&names, t0)));
    let watches = watch_all(&tracker, client, run);
    let created: Vec<Result<Profile, kube::Error>> = futures::stream::iter(names.iter().map(|name| profile_object(name, run)).collect::<Vec<_>>())
        .map(|p| {
            let profiles = profiles.clone();
            async move { profiles.create(&PostParams::default(), &p).await }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let created_in = t0.elapsed();
    if let Some(Err(e)) = created.iter().find(|r| r.is_err()) {
        panic!("creating the Profiles: {e}");
    }
    eprintln!("   {n} Profiles created in {}", secs(created_in));
    let mut last_report = Instant::now();
    loop {
        let (complete, all_done) = {
            let t = tracker.lock().unwrap();
            (t.complete, t.all_done_at)
        };
        if all_done.is_some() && complete == n {
            break;
        }
        if t0.elapsed() >= bound {
            break;
        }
        if last_report.elapsed() >= Duration::from_secs(15) {
            eprintln!("   {}: {complete}/{n} complete ({})", secs(t0.elapsed()), tracker.lock().unwrap().reached());
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (converged, done_at, reached) = {
        let t = tracker.lock().unwrap();
        (t.all_done_at.filter(|_| t.complete == n), t.done_at.iter().flatten().copied().collect::<Vec<_>>(), t.reached())
    };
    watches.iter().for_each(|w| w.abort());
    let (rss, _) = operator.rss_mib();
    let cpu_converged = cpu_seconds(operator.process.pid());
    let apf_converged = apf_wait(client).await;
    let convergence = operator.traffic.snapshot().since(&before);
    let own_converged = operator.own_counters().await;
    let failures: BTreeMap<String, u64> = operator
        .failures()
        .into_iter()
        .map(|(k, v)| {
            let b = failures_before.get(&k).copied().unwrap_or(0);
            (k, v - b)
        })
        .filter(|(_, v)| *v > 0)
        .collect();
    eprintln!("   converged: {converged:?} ({} complete); {} writes so far", done_at.len(), convergence.writes);

    // Objects as the reference renders them? Checked on the first Profile.
    let first = profiles.get(&names[0]).await.unwrap();
    let owner_reference = json!({"apiVersion": "kubeflow.org/v1", "kind": "Profile", "name": names[0], "uid": first.uid().unwrap(), "controller": true, "blockOwnerDeletion": true});
    let mut mismatches = Vec::new();
    for want in tenant_objects(&names[0], &operator.settings, Some(&owner_reference), None) {
        let resource = api_resource(&want);
        let api: Api<DynamicObject> = match want["metadata"]["namespace"].as_str() {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        let name = want["metadata"]["name"].as_str().unwrap();
        match api.get_opt(name).await {
            Ok(Some(live)) if contains(&serde_json::to_value(&live).unwrap(), &want) => {}
            other => mismatches.push(format!("{} {name}: {:?}", want["kind"], other.map(|o| o.map(|o| serde_json::to_value(o).unwrap())))),
        }
    }
    if !mismatches.is_empty() {
        eprintln!("   NOTE: the reference's rendering differs from the operator's objects for {}:\n   {}", names[0], mismatches.join("\n   "));
    }

    // Steady state.
    let settled_after = operator.settle(Duration::from_secs(5), bound).await;
    let settled = operator.traffic.snapshot();
    let trailing = settled.since(&before).writes - convergence.writes;
    tokio::time::sleep(steady).await;
    let quiet = operator.traffic.snapshot().since(&settled);
    let (rss_steady, hwm) = operator.rss_mib();
    let (anon_steady, file_steady) = operator.rss_split_mib();
    let own_after = operator.own_counters().await;
    eprintln!("   settled after {} ({trailing} more writes); steady {}: {quiet:?}", secs(settled_after), secs(steady));

    // Reference: the same objects for other names, one kubectl apply --server-side.
    let reference_names: Vec<String> = (0..n).map(|i| format!("br{run}-{n}-{i:05}")).collect();
    let objects: Vec<Value> = reference_names.iter().flat_map(|name| tenant_objects(name, &operator.settings, None, Some(run))).collect();
    let file = std::env::temp_dir().join(unique_name("bench-profiles-reference.yaml"));
    std::fs::write(&file, kubeflow_manifests::yaml_stream(objects.iter().cloned())).unwrap();
    let kubectl = kubectl_bin();
    let cpu_reference_before = cpu_seconds(operator.process.pid());
    let t0 = Instant::now();
    let output = tokio::time::timeout(
        bound,
        tokio::process::Command::new(&kubectl)
            .args(["apply", "--server-side", "--force-conflicts", "--field-manager", "bench-reference", "-v=6", "-f", file.to_str().unwrap()])
            .kill_on_drop(true)
            .output(),
    )
    .await;
    let reference = t0.elapsed();
    let cpu_reference = cpu_seconds(operator.process.pid());
    let _ = std::fs::remove_file(&file);
    let (reference_ok, reference_requests) = match output {
        Ok(Ok(out)) => {
            if !out.status.success() {
                eprintln!("   kubectl apply failed: {}", String::from_utf8_lossy(&out.stderr).lines().filter(|l| !l.contains("round_trippers")).take(10).collect::<Vec<_>>().join("\n"));
            }
            (out.status.success(), kubectl_requests(&String::from_utf8_lossy(&out.stderr)))
        }
        Ok(Err(e)) => panic!("run {kubectl}: {e}"),
        Err(_) => (false, BTreeMap::new()),
    };
    let reference_writes: u64 = reference_requests.iter().filter(|(v, _)| v.as_str() != "GET").map(|(_, c)| c).sum();
    let reference_reads: u64 = reference_requests.get("GET").copied().unwrap_or(0);
    eprintln!("   reference: {} ({reference_requests:?}, ok: {reference_ok})", secs(reference));

    // The table.
    let mut done_at = done_at;
    done_at.sort();
    let ratio = |a: f64, b: f64| {
        if b > 0.0 { format!("{:.2}×", a / b) } else { "—".into() }
    };
    let (upstream_time, upstream_rss, target_time, target_rss) = if n == 1000 {
        (format!("≈ {:.0} s", UPSTREAM_1000.0), format!("≈ {:.0} MiB", UPSTREAM_1000.1), format!("≤ {:.0} s", TARGET_1000.0), format!("≤ {:.0} MiB", TARGET_1000.1))
    } else {
        ("—".into(), "—".into(), "—".into(), "—".into())
    };
    let converge_cell = match converged {
        Some(t) => secs(t),
        None => format!("not within {}: {}/{n} complete ({reached})", secs(bound), done_at.len()),
    };
    let converge_secs = converged.map_or(bound.as_secs_f64(), |t| t.as_secs_f64());
    let reference_cell = if reference_ok { format!("{} ({} objects)", secs(reference), objects.len()) } else { format!("failed or not within {} ({} objects)", secs(bound), objects.len()) };
    let own_fmt = |v: (Option<f64>, Option<f64>), b: (Option<f64>, Option<f64>)| {
        let d = |a: Option<f64>, b: Option<f64>| a.map_or("not reported".to_string(), |a| format!("{:.0}", a - b.unwrap_or(0.0)));
        format!("{} (all) / {} (`{OPERATOR_FIELD_MANAGER}`)", d(v.0, b.0), d(v.1, b.1))
    };
    println!("\n## Profiles (bench-profiles): {n} Profiles\n");
    println!("| figure | operator | reference: `kubectl apply --server-side` | operator / reference | upstream profile-controller | issue target |");
    println!("| --- | --- | --- | --- | --- | --- |");
    println!(
        "| {n} Profiles with quotas created at once → all Ready with namespace, RoleBindings, ServiceAccounts, AuthorizationPolicy, ResourceQuota | {converge_cell} | {reference_cell} | {} | {upstream_time} | {target_time} |",
        ratio(converge_secs, reference.as_secs_f64())
    );
    if !done_at.is_empty() {
        println!(
            "| per Profile: created → complete, p50 / p99 / max | {} / {} / {} | — | — | — | — |",
            secs(percentile(&done_at, 0.5)),
            secs(percentile(&done_at, 0.99)),
            secs(*done_at.last().unwrap())
        );
    }
    println!("| creating the {n} Profiles (32 requests in flight) | {} | — | — | — | — |", secs(created_in));
    if !operator.counted {
        println!("| API requests | not counted (BENCH_PROFILES_PROXY=0: no proxy) | {reference_writes} writes | — | — | — |");
    }
    if operator.counted {
        println!(
            "| API writes until converged (counted at the proxy) | {} ({} per Profile) | {reference_writes} ({} per Profile) | {} | — | — |",
            convergence.writes,
            per(convergence.writes, n),
            per(reference_writes, n),
            ratio(convergence.writes as f64, reference_writes as f64)
        );
        println!("| API writes after convergence until 5 s without one (settled after {}) | {trailing} | — | — | — | — |", secs(settled_after));
        println!("| API reads (GET, LIST) until converged | {} ({} per Profile) | {reference_reads} | — | — | — |", convergence.reads, per(convergence.reads, n));
        println!("| error answers until converged, by status | {} | — | — | — | — |", if convergence.errors.is_empty() { "none".into() } else { format!("{:?}", convergence.errors) });
        println!("| API writes over {} at steady state | {} | — | — | — | 0 |", secs(steady), quiet.writes);
        println!("| API reads over {} at steady state | {} | — | — | — | — |", secs(steady), quiet.reads);
    }
    println!("| failed reconciles logged until converged, by category | {} | — | — | — | — |", if failures.is_empty() { "none".into() } else { format!("{failures:?}") });
    println!("| operator's own `kfop_writes_total` / `kfop_writes_by_field_manager_total` until converged | {} | — | — | — | — |", own_fmt(own_converged, own_before));
    println!("| the same until the end of the steady window | {} | — | — | — | — |", own_fmt(own_after, own_before));
    println!("| operator RSS: converged / after the steady window / peak (VmHWM, whole process life) | {rss:.1} / {rss_steady:.1} / {hwm:.1} MiB | — | — | {upstream_rss} | {target_rss} |");
    println!("| operator RSS after the steady window: anonymous (heap, stacks) / file-backed (the binary's code pages) | {anon_steady:.1} / {file_steady:.1} MiB | — | — | — | — |");
    println!("| operator RSS before the benchmark's Profiles (after one warm-up Profile) | {:.1} MiB | — | — | — | — |", operator.idle_rss.get().copied().unwrap_or(0.0));
    println!("| CPU seconds until converged / until applied | {} | {} | — | — | — |", cpu_since(&cpu_converged, &cpu_before), cpu_since(&cpu_reference, &cpu_reference_before));
    let (dispatched, waited) = (apf_converged.0 - apf_before.0, apf_converged.1 - apf_before.1);
    if dispatched > 0.0 {
        println!("| API server queueing (priority and fairness, level `workload-low`) until converged: requests, mean wait | {dispatched:.0}, {:.0} ms | — | — | — | — |", waited / dispatched * 1e3);
    }
    if operator.counted {
        println!("\nRequests of the operator until converged, by verb and resource (per Profile):\n");
        println!("| request | count | per Profile |\n| --- | --- | --- |");
        for (request, count) in convergence.by_request.iter().filter(|(r, _)| !r.starts_with("WATCH")) {
            println!("| {request} | {count} | {} |", per(*count, n));
        }
        if !quiet.by_request.is_empty() {
            println!("\nAt steady state: {:?}", quiet.by_request);
        }
    }
    println!("\nkubectl's requests (from -v=6): {reference_requests:?}\n");

    cleanup(client, run, Duration::from_secs(1800)).await;
}

/// Deletes this run's Profiles (the operator removes its finalizer; garbage collection deletes
/// their namespaces) and the reference's namespaces, then waits until all are gone (bounded).
async fn cleanup(client: &Client, run: &str, bound: Duration) {
    let t0 = Instant::now();
    let profiles: Api<Profile> = Api::all(client.clone());
    let mine = ListParams::default().labels(&format!("{RUN_LABEL}={run}"));
    if let Err(e) = profiles.delete_collection(&DeleteParams::default(), &mine).await {
        eprintln!("cleanup: deleting Profiles: {e}");
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let references = ListParams::default().labels(&format!("{REFERENCE_LABEL}={run}"));
    let names: Vec<String> = namespaces.list_metadata(&references).await.map(|l| l.items.iter().map(|n| n.name_any()).collect()).unwrap_or_default();
    futures::stream::iter(names)
        .map(|name| {
            let namespaces = namespaces.clone();
            async move {
                let _ = namespaces.delete(&name, &DeleteParams::default()).await;
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    let prefix = format!("bp{run}-");
    let mut last_report = Instant::now();
    let mut finalizers_dropped = false;
    loop {
        let left_profiles = profiles.list_metadata(&mine).await.map(|l| l.items.len()).unwrap_or(usize::MAX);
        let owned = ListParams::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}"));
        let left_ns = namespaces.list_metadata(&owned).await.map(|l| l.items.iter().filter(|n| n.name_any().starts_with(&prefix)).count()).unwrap_or(usize::MAX);
        let left_refs = namespaces.list_metadata(&references).await.map(|l| l.items.len()).unwrap_or(usize::MAX);
        if left_profiles == 0 && left_ns == 0 && left_refs == 0 {
            eprintln!("cleanup: everything of run {run} deleted in {}", secs(t0.elapsed()));
            return;
        }
        // A Profile whose finalizer nobody removes (operator gone) would keep its namespace.
        if left_profiles > 0 && !finalizers_dropped && t0.elapsed() > Duration::from_secs(600) {
            eprintln!("cleanup: {left_profiles} Profiles still there after 600 s; dropping their finalizers");
            for p in profiles.list_metadata(&mine).await.map(|l| l.items).unwrap_or_default() {
                let _ = profiles.patch(&p.name_any(), &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}}))).await;
            }
            finalizers_dropped = true;
        }
        if t0.elapsed() >= bound {
            eprintln!("cleanup: gave up after {}: {left_profiles} Profiles, {left_ns} profile namespaces and {left_refs} reference namespaces left (the cluster goes on deleting them)", secs(bound));
            return;
        }
        if last_report.elapsed() >= Duration::from_secs(60) {
            eprintln!("cleanup: {}: {left_profiles} Profiles, {left_ns} profile namespaces, {left_refs} reference namespaces left", secs(t0.elapsed()));
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

/// SIGTERM (e.g. `make` stopped): cleaned up like Ctrl-C.
async fn terminated() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut signal) => {
            signal.recv().await;
        }
        Err(_) => std::future::pending().await,
    }
}

fn main() {
    // The operator runs standalone, as deploy/profiles runs it: the environment's NATS_URL (from
    // its env file) would put it in NATS mode, without credentials for that server. Removed
    // before any other thread exists.
    unsafe { std::env::remove_var("NATS_URL") };
    tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(bench_main());
}

async fn bench_main() {
    let sizes: Vec<usize> = std::env::var("BENCH_PROFILES").unwrap_or_else(|_| "1000,5000".into()).split(',').map(|s| s.trim().parse().expect("BENCH_PROFILES: comma-separated counts")).collect();
    let steady = Duration::from_secs(std::env::var("BENCH_STEADY_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(30));
    let client = client().await;
    let run = format!("{:04x}", (std::process::id() ^ std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos()) & 0xffff);
    let strays = Api::<Profile>::all(client.clone()).list_metadata(&ListParams::default()).await.map(|l| l.items.len()).unwrap_or(0);
    if strays > 0 {
        eprintln!("NOTE: {strays} Profiles exist before the run; the operator reconciles them too (before the counters' baseline)");
    }

    // The operator as tests/profiles.rs runs it, through the counting proxy.
    install_crds(&client).await;
    serve_kind(&client, "security.istio.io", "AuthorizationPolicy", "authorizationpolicies", &["v1beta1"]).await;
    let ns = TestNamespace::create(&client, "bench-profiles").await;
    let target = TestNamespace::adopt(format!("{}-kf", ns.name));
    let service_account = install_package(&client, "profiles").await;
    let traffic = Arc::new(Traffic::default());
    // BENCH_PROFILES_PROXY=0: the operator talks to the API server itself (requests not counted).
    let counted = std::env::var("BENCH_PROFILES_PROXY").map_or(true, |v| v != "0");
    let proxied = if counted { start_proxy(&service_account, traffic.clone()).await } else { service_account.clone() };
    let process = OperatorProcess::start("profiles-operator", &["--namespace", &ns.name], &[("KUBECONFIG", proxied.to_str().unwrap())]);
    process.wait_ready().await;
    let controllers: Api<ProfileController> = Api::namespaced(client.clone(), &ns.name);
    let resource: ProfileController = serde_json::from_value(json!({
        "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "ProfileController", "metadata": {"name": "profiles"},
        "spec": {"version": "v1.3.0", "targetNamespace": target.name},
    }))
    .unwrap();
    let settings = resource.spec.clone();
    controllers.create(&PostParams::default(), &resource).await.unwrap();
    eventually("ProfileController Ready", || async {
        let c = controllers.get("profiles").await.map_err(|e| e.to_string())?;
        if c.status.as_ref().is_some_and(|s| s.phase == Some(ComponentPhase::Ready)) { Ok(()) } else { Err(format!("{:?} (log: {})", c.status, process.log.display())) }
    })
    .await;
    let operator = Arc::new(Operator { process, traffic, settings, idle_rss: std::sync::OnceLock::new(), counted });

    // Warm-up: one Profile through the whole path, then deleted.
    let profiles: Api<Profile> = Api::all(client.clone());
    let warmup = format!("bp{run}-warmup");
    profiles.create(&PostParams::default(), &profile_object(&warmup, &run)).await.unwrap();
    eventually("warm-up Profile Ready", || async {
        let p = profiles.get(&warmup).await.map_err(|e| e.to_string())?;
        let ready = p.status.as_ref().is_some_and(|s| s.observed_generation == p.metadata.generation && s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == ConditionStatus::from(true)));
        if ready { Ok(()) } else { Err(format!("{:?}", p.status)) }
    })
    .await;
    profiles.delete(&warmup, &DeleteParams::default()).await.unwrap();
    gone(&profiles, &warmup).await;
    operator.settle(Duration::from_secs(3), Duration::from_secs(60)).await;
    let _ = operator.idle_rss.set(operator.rss_mib().0);

    let bench = {
        let (client, operator, run) = (client.clone(), operator.clone(), run.clone());
        tokio::spawn(async move {
            for n in sizes {
                run_size(&client, &operator, &run, n, steady).await;
            }
        })
    };
    let bench_abort = bench.abort_handle();
    let outcome = tokio::select! {
        result = bench => result.map_err(|e| if e.is_panic() { "the benchmark failed".to_string() } else { e.to_string() }),
        _ = tokio::signal::ctrl_c() => { bench_abort.abort(); Err("interrupted".to_string()) }
        _ = terminated() => { bench_abort.abort(); Err("terminated".to_string()) }
    };
    if let Err(why) = &outcome {
        eprintln!("{why}: cleaning up");
    }
    cleanup(&client, &run, Duration::from_secs(1800)).await;
    controllers.delete("profiles", &DeleteParams::default()).await.unwrap();
    gone(&controllers, "profiles").await;
    let kept = std::env::temp_dir().join(format!("bench-profiles-operator-{run}.log"));
    if std::fs::copy(&operator.process.log, &kept).is_ok() {
        let log = std::fs::read_to_string(&kept).unwrap_or_default();
        let failed = log.lines().filter(|l| l.contains("reconcile failed")).count();
        eprintln!("operator log: {} ({failed} lines \"reconcile failed\")", kept.display());
    }
    drop(operator);
    if counted {
        let _ = std::fs::remove_file(&proxied);
    }
    let _ = std::fs::remove_file(&service_account);
    if outcome.is_err() {
        std::process::exit(1);
    }
}
