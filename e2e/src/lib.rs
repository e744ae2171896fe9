//! Helpers shared by the end-to-end tests. They talk to the environment `e2e/env/up.sh` started,
//! found through `KUBECONFIG` and `NATS_URL` (both written to `$STATE_DIR/env`).

pub mod fleet;
pub mod kubelet;
pub mod olm;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, Client};
use kubeflow_crds::component::ComponentKind;
use kubeflow_crds::bus::Identity;
pub use operator_runtime::bus_security::LocalBus;

/// Field manager the tests apply with.
pub const FIELD_MANAGER: &str = "kubeflow-e2e";

/// Upper bound for anything the tests wait on; a guard against hanging, not a speed assertion.
pub const WAIT: Duration = Duration::from_secs(60);

/// A client for the environment's API server (`KUBECONFIG`).
pub async fn client() -> Client {
    assert!(
        std::env::var_os("KUBECONFIG").is_some(),
        "KUBECONFIG is not set: start the environment with `make env-up` and `source ~/.cache/kubeflow-operator/run/env`"
    );
    let config = kube::Config::infer().await.expect("client configuration from KUBECONFIG");
    operator_runtime::client::client_for(config).expect("client from KUBECONFIG")
}

/// NATS URL of the environment's nats-server (`NATS_URL`).
pub fn nats_url() -> String {
    std::env::var("NATS_URL").expect("NATS_URL is not set: source ~/.cache/kubeflow-operator/run/env")
}

/// The environment's bus material (`KFOP_BUS_DIR`, written by `kfop local-bus`).
pub fn env_bus() -> LocalBus {
    LocalBus { dir: std::env::var("KFOP_BUS_DIR").expect("KFOP_BUS_DIR is not set: source ~/.cache/kubeflow-operator/run/env").into() }
}

/// A NATS client connected as `identity` to the server at `url` with the material of `bus`.
pub async fn bus_client(url: &str, bus: &LocalBus, identity: Identity) -> async_nats::Client {
    let (client, _) = within("connect to NATS", operator_runtime::nats::connect(url, identity, &bus.credentials(identity))).await.expect("connect to NATS");
    client
}

/// A name no earlier run used: `prefix-<pid><nanos>` trimmed to a DNS label.
pub fn unique_name(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let mut name = format!("{prefix}-{}{nanos:09}", std::process::id());
    name.truncate(63);
    name
}

/// Awaits `future`, failing the test with `what` if it does not finish within [`WAIT`].
pub async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, future).await.unwrap_or_else(|_| panic!("timed out after {WAIT:?} waiting for {what}"))
}

/// Whether `pod` can serve: Ready and not terminating (what a Service counts as an endpoint).
pub fn pod_serving(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Polls `check` until it returns `Some`, failing after [`WAIT`] with the last observed state.
pub async fn eventually<T, S: Debug, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, S>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match check().await {
            Ok(value) => return value,
            Err(state) if tokio::time::Instant::now() >= deadline => {
                panic!("timed out after {WAIT:?} waiting for {what}; last state: {state:?}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Watches object `name` for `window` and fails with the first state `check` refuses: for
/// "stays so" assertions, which a sleep followed by one read could not make.
pub async fn holds_for<K>(api: &Api<K>, name: &str, window: Duration, check: impl Fn(&K) -> Result<(), String>)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + Debug + Send + 'static,
{
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut objects = std::pin::pin!(watcher(api.clone(), config).applied_objects());
    let watched = tokio::time::timeout(window, async {
        while let Some(object) = objects.next().await {
            match object {
                Ok(object) => check(&object).unwrap_or_else(|state| panic!("{name} changed within {window:?}: {state}")),
                Err(e) => panic!("watch of {name} failed: {e}"),
            }
        }
    })
    .await;
    assert!(watched.is_err(), "the watch of {name} ended before {window:?}");
}

/// Waits until object `name` no longer exists (finalizers done), failing with its finalizers and
/// deletion time if it lingers.
pub async fn gone<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + Debug,
{
    eventually(&format!("{} {name} deleted", std::any::type_name::<K>().rsplit("::").next().unwrap_or_default()), || async {
        match api.get_opt(name).await {
            Ok(None) => Ok(()),
            Ok(Some(o)) => Err(format!("still there: finalizers {:?}, deletionTimestamp {:?}", o.meta().finalizers, o.meta().deletion_timestamp)),
            Err(e) => Err(e.to_string()),
        }
    })
    .await
}

/// Applies every CRD the project generates and waits until each is Established.
pub async fn install_crds(client: &Client) -> Vec<String> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut names = Vec::new();
    for crd in kubeflow_crds::crdgen::all_crds() {
        let name = crd.metadata.name.clone().unwrap();
        api.patch(&name, &params, &Patch::Apply(&crd)).await.unwrap_or_else(|e| panic!("apply CRD {name}: {e}"));
        names.push(name);
    }
    for name in &names {
        within(&format!("CRD {name} Established"), await_condition(api.clone(), name, conditions::is_crd_established()))
            .await
            .unwrap();
    }
    names
}

/// The API resource of `crd`'s first version.
fn api_resource(crd: &CustomResourceDefinition) -> kube::core::ApiResource {
    let version = &crd.spec.versions[0].name;
    kube::core::ApiResource {
        group: crd.spec.group.clone(),
        version: version.clone(),
        api_version: format!("{}/{version}", crd.spec.group),
        kind: crd.spec.names.kind.clone(),
        plural: crd.spec.names.plural.clone(),
    }
}

/// Drops the operators' finalizers from component resources left in `namespace` by a failed test
/// (its operator is gone, so nobody else will), letting the namespace be deleted.
async fn release_finalizers(client: &Client, namespace: &str) {
    use kube::api::DynamicObject;
    for crd in kubeflow_crds::crdgen::all_crds() {
        let resource = api_resource(&crd);
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        for object in api.list(&Default::default()).await.map(|l| l.items).unwrap_or_default() {
            if let Some(name) = object.metadata.name {
                let patch = serde_json::json!({"metadata": {"finalizers": null}});
                let _ = api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await;
            }
        }
    }
}

/// Label on a cluster-scoped object of the project's kinds that a test makes: the name of the
/// test's [`TestNamespace`], whose end (also on panic) releases the object's finalizers and
/// deletes it. A failed test leaves nothing behind that an operator no longer running would have
/// to finalize, which would hold its CRD's deletion in the tests after.
pub const TEST_NAMESPACE_LABEL: &str = "e2e.kubeflow.org/test-namespace";

/// Releases and deletes the cluster-scoped objects of the project's kinds labelled
/// [`TEST_NAMESPACE_LABEL`]` = namespace`.
async fn release_cluster_scoped(client: &Client, namespace: &str) {
    use kube::api::DynamicObject;
    for crd in kubeflow_crds::crdgen::all_crds().into_iter().chain(kubeflow_crds::crdgen::component_installed_crds()).filter(|crd| crd.spec.scope == "Cluster") {
        let resource = api_resource(&crd);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let labelled = ListParams::default().labels(&format!("{TEST_NAMESPACE_LABEL}={namespace}"));
        for object in api.list(&labelled).await.map(|l| l.items).unwrap_or_default() {
            if let Some(name) = object.metadata.name {
                let _ = api.patch(&name, &PatchParams::default(), &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}}))).await;
                let _ = api.delete(&name, &DeleteParams::default()).await;
            }
        }
    }
}

/// A namespace created for one test and deleted when the test ends (also on panic, best effort).
pub struct TestNamespace {
    pub name: String,
}

impl TestNamespace {
    /// A namespace someone else (e.g. an operator) will create; deleted when the test ends.
    pub fn adopt(name: String) -> Self {
        Self { name }
    }

    /// A namespace for a platform admin's KfDef: its installer account (`kubeflow-installer`,
    /// which the component operators act as) is bound to `cluster-admin`, as deploy/ binds the
    /// one in `kubeflow`.
    pub async fn create(client: &Client, prefix: &str) -> Self {
        let ns = Self::create_tenant(client, prefix).await;
        ns.grant_installer(client, "ClusterRoleBinding", "cluster-admin").await;
        ns
    }

    /// A tenant's namespace: its installer account exists and may do nothing yet.
    pub async fn create_tenant(client: &Client, prefix: &str) -> Self {
        let name = unique_name(prefix);
        let ns = Namespace { metadata: ObjectMeta { name: Some(name.clone()), ..Default::default() }, ..Default::default() };
        Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.expect("create test namespace");
        // Pods of a namespace are refused until kube-controller-manager has made its `default`
        // ServiceAccount (and a refused ReplicaSet backs off exponentially); Kubernetes' own e2e
        // framework waits for it too. Many manifests' workloads run as `default`.
        let accounts = Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(client.clone(), &name);
        within(&format!("ServiceAccount {name}/default made"), await_condition(accounts, "default", |sa: Option<&_>| sa.is_some())).await.unwrap();
        create_installer(client, &name).await;
        Self { name }
    }

    /// Binds the namespace's installer account to ClusterRole `role` (see [`grant_installer`]).
    pub async fn grant_installer(&self, client: &Client, kind: &str, role: &str) {
        grant_installer(client, &self.name, kind, role).await;
    }
}

/// Creates `namespace`'s installer account, `kubeflow-installer`, with no rights yet.
pub async fn create_installer(client: &Client, namespace: &str) {
    let account = serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": kubeflow_crds::kfdef::DEFAULT_INSTALLER, "namespace": namespace}});
    Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &serde_json::from_value(account).unwrap())
        .await
        .expect("create the installer account");
}

/// Binds `namespace`'s installer account to ClusterRole `role`: cluster-wide with `kind`
/// `ClusterRoleBinding` (owned by the namespace, so it goes with it), else in the namespace.
pub async fn grant_installer(client: &Client, namespace: &str, kind: &str, role: &str) {
    use kube::api::DynamicObject;
    use kube::core::ApiResource;
    let uid = Api::<Namespace>::all(client.clone()).get(namespace).await.expect("the test namespace").metadata.uid;
    let cluster_wide = kind == "ClusterRoleBinding";
    let mut binding = serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
        "metadata": {"name": format!("{}-{role}", kubeflow_crds::kfdef::DEFAULT_INSTALLER)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": kubeflow_crds::kfdef::DEFAULT_INSTALLER, "namespace": namespace}],
    });
    if cluster_wide {
        binding["metadata"]["name"] = format!("{}-{}-{role}", kubeflow_crds::kfdef::DEFAULT_INSTALLER, namespace).into();
        binding["metadata"]["ownerReferences"] = serde_json::json!([{"apiVersion": "v1", "kind": "Namespace", "name": namespace, "uid": uid}]);
    } else {
        binding["metadata"]["namespace"] = namespace.to_string().into();
    }
    let plural = if cluster_wide { "clusterrolebindings" } else { "rolebindings" };
    let resource = ApiResource { group: "rbac.authorization.k8s.io".into(), version: "v1".into(), api_version: "rbac.authorization.k8s.io/v1".into(), kind: kind.into(), plural: plural.into() };
    let api: Api<DynamicObject> = if cluster_wide { Api::all_with(client.clone(), &resource) } else { Api::namespaced_with(client.clone(), namespace, &resource) };
    api.create(&PostParams::default(), &serde_json::from_value(binding).unwrap()).await.expect("bind the installer account");
}

/// What the cluster said about `namespace`, for a failed test's output: its Warning events (e.g. a
/// ReplicaSet's FailedCreate) and each Deployment's and ReplicaSet's replica counts.
async fn print_namespace_story(client: &Client, namespace: &str) {
    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
    use k8s_openapi::api::core::v1::Event;
    let mut lines = Vec::new();
    let events = Api::<Event>::namespaced(client.clone(), namespace).list(&Default::default()).await.map(|l| l.items).unwrap_or_default();
    for e in events.iter().filter(|e| e.type_.as_deref() == Some("Warning")) {
        let object = format!("{}/{}", e.involved_object.kind.as_deref().unwrap_or("?"), e.involved_object.name.as_deref().unwrap_or("?"));
        lines.push(format!("event {object} {} (x{}): {}", e.reason.as_deref().unwrap_or(""), e.count.unwrap_or(1), e.message.as_deref().unwrap_or("")));
    }
    for d in Api::<Deployment>::namespaced(client.clone(), namespace).list(&Default::default()).await.map(|l| l.items).unwrap_or_default() {
        let s = d.status.unwrap_or_default();
        lines.push(format!("Deployment {}: generation {:?} observed {:?}, replicas {:?} updated {:?} available {:?}", d.metadata.name.unwrap_or_default(), d.metadata.generation, s.observed_generation, s.replicas, s.updated_replicas, s.available_replicas));
    }
    for r in Api::<ReplicaSet>::namespaced(client.clone(), namespace).list(&Default::default()).await.map(|l| l.items).unwrap_or_default() {
        let s = r.status.unwrap_or_default();
        lines.push(format!("ReplicaSet {}: replicas {} ready {:?}", r.metadata.name.unwrap_or_default(), s.replicas, s.ready_replicas));
    }
    eprintln!("--- namespace {namespace} after the failure ---\n{}", lines.join("\n"));
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        let name = self.name.clone();
        let failed = std::thread::panicking();
        // Drop cannot await, and the test's own client is driven by the test's runtime, which this
        // thread blocks; so delete with a fresh client on a short-lived runtime of its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                if let Ok(client) = Client::try_default().await {
                    if failed {
                        print_namespace_story(&client, &name).await;
                    }
                    release_finalizers(&client, &name).await;
                    release_cluster_scoped(&client, &name).await;
                    let _ = Api::<Namespace>::all(client.clone()).delete(&name, &DeleteParams::default()).await;
                }
            });
        })
        .join();
    }
}

/// The `p` quantile (0–1) of `sorted` samples, for the benchmarks: the smallest sample with at
/// least that share of the samples at or below it.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

/// Directory holding the built operator binaries (`KFOP_BIN_DIR`, else where the one build,
/// `hack/cargo.sh build`, puts them in the workspace's target directory).
pub fn bin_dir() -> std::path::PathBuf {
    match std::env::var_os("KFOP_BIN_DIR") {
        Some(dir) => dir.into(),
        None => std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/x86_64-unknown-linux-gnu/debug"),
    }
}

/// A port nothing listens on, for a server a test starts. Taken below the kernel's ephemeral range
/// (32768 and up by default): a port the kernel hands out there can become the local port of any
/// outgoing connection before the server binds it (a chaos run's NATS route failed so); and above
/// the environment's own ports (e2e/env/versions.sh, 23790–28222), which chaos frees while it
/// restarts a server. Never the same port twice in one process, so parallel tests do not race.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> = std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let port = rand::random_range(29000..32768u16);
        if GIVEN.lock().unwrap().insert(port) && std::net::TcpListener::bind(("0.0.0.0", port)).is_ok() {
            return port;
        }
    }
}

/// The scrape token of this test process's operators: a file written once with a new token, given
/// to every operator, renderer and exporter it starts (`KFOP_METRICS_TOKEN_FILE`, as deploy/ gives
/// the mounted Secret) and presented by [`OperatorProcess::metric`] and [`Prometheus`].
pub fn scrape_token_file() -> &'static std::path::Path {
    static FILE: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    FILE.get_or_init(|| {
        let file = std::env::temp_dir().join(format!("{}.token", unique_name("kfop-scrape")));
        let token: String = (0..32).map(|_| format!("{:02x}", rand::random::<u8>())).collect();
        std::fs::write(&file, token).unwrap();
        file
    })
}

/// `GET url` presenting the scrape token, as Prometheus does.
pub async fn scrape(url: &str) -> Result<String, String> {
    let token = std::fs::read_to_string(scrape_token_file()).map_err(|e| e.to_string())?;
    http_get_with(url, &format!("Authorization: Bearer {token}\r\n")).await
}

/// An operator binary running on the host against the environment, killed on drop.
pub struct OperatorProcess {
    child: std::process::Child,
    /// The port of its health endpoint (`/readyz`; the renderer's: its builds').
    pub metrics_port: u16,
    /// The port of its `/metrics`: the health endpoint's, or the renderer's own.
    pub scrape_port: u16,
    pub log: std::path::PathBuf,
}

/// A loopback copy of what github.com serves of Kubeflow here (`fixtures::upstream_github`: the
/// release archives and the remote bases), shared by every test of the process, as
/// `--remote-base-mirror` takes it: `https://github.com/=<its URL>`. It runs on a thread of its
/// own, so it outlives the test that started it.
pub fn github_mirror() -> &'static str {
    static MIRROR: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    MIRROR.get_or_init(|| {
        let (url, receive) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async move {
                let server = kubeflow_manifests::fixtures::Server::start(kubeflow_manifests::fixtures::upstream_github()).await;
                url.send(server.url("")).unwrap();
                std::future::pending::<()>().await;
            });
        });
        format!("https://github.com/={}", receive.recv().expect("the github.com mirror started"))
    })
}

/// What every operator started here runs with besides what deploy/ gives it: github.com
/// mirrored on loopback ([`github_mirror`]), which the fetch fence then allows, as an air-gapped
/// cluster's operators run. A resource that names no repository installs its release from
/// upstream's archive there.
fn air_gapped() -> [(&'static str, &'static str); 2] {
    [("KFOP_REMOTE_BASE_MIRROR", github_mirror()), ("KFOP_ALLOW_FETCH_FROM", "127.0.0.1")]
}

/// `--built-in-templates` as an operator's environment gives it.
pub const BUILT_IN_TEMPLATES_ENV: &str = "KFOP_BUILT_IN_TEMPLATES";

/// Whether operators this test process starts install a resource that names no repository from
/// their hand-written template (`--built-in-templates`) rather than from upstream's archive
/// ([`still_on_built_in_templates`]).
static BUILT_IN_TEMPLATES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Operators this test process starts from now on install a resource that names no repository
/// from their hand-written template instead of upstream's archive. For the test files whose
/// fixtures assume the templates (per-install names of cluster-scoped objects, objects in the
/// KfDef's namespace); it goes with the templates.
pub fn still_on_built_in_templates() {
    BUILT_IN_TEMPLATES.store(true, std::sync::atomic::Ordering::SeqCst);
}

impl OperatorProcess {
    /// Starts operator `binary` on `nats` as `identity`, with `args` after `--nats-url` and extra
    /// environment `env` (e.g. `KUBECONFIG`).
    pub fn on_bus(binary: &str, nats: &NatsServer, identity: Identity, args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut all = nats.env(identity);
        all.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let all: Vec<(&str, &str)> = all.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let url = nats.url();
        Self::start(binary, &[&["--nats-url", url.as_str()], args].concat(), &all)
    }

    /// Starts `binary` with `args` and extra environment `env`, logging to `$TMPDIR/<binary>-….log`.
    pub fn start(binary: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        let metrics_port = free_port();
        let mut command = std::process::Command::new(bin_dir().join(binary));
        command
            .args(args)
            .arg(format!("--metrics-addr=127.0.0.1:{metrics_port}"))
            // KFOP_OPERATOR_LOG overrides the operators' log filter (e.g. `component_framework=debug`).
            .env("RUST_LOG", std::env::var("KFOP_OPERATOR_LOG").unwrap_or_else(|_| "info,kube=warn".into()))
            // As deploy/ runs every operator: resources naming no installer account use this one.
            .env("DEFAULT_SERVICE_ACCOUNT", kubeflow_crds::kfdef::DEFAULT_INSTALLER)
            .env("KFOP_METRICS_TOKEN_FILE", scrape_token_file())
            .envs(air_gapped())
            .env(BUILT_IN_TEMPLATES_ENV, BUILT_IN_TEMPLATES.load(std::sync::atomic::Ordering::SeqCst).to_string())
            .envs(env.iter().copied());
        Self::spawn(binary, command, metrics_port)
    }

    /// `binary` with exactly `args`, serving its `/metrics` on `port` (as its args say).
    pub fn command(binary: &str, args: &[&str], port: u16) -> Self {
        let mut command = std::process::Command::new(bin_dir().join(binary));
        command.args(args).env("RUST_LOG", std::env::var("KFOP_OPERATOR_LOG").unwrap_or_else(|_| "info".into())).env("KFOP_METRICS_TOKEN_FILE", scrape_token_file());
        Self::spawn(binary, command, port)
    }

    /// The renderer (`kustomize-operator render-server`) on loopback `port`, answering the caller
    /// whose public NKey is `caller`. As in its pod, it gets no credential: an empty environment
    /// but where the kustomize binaries are.
    pub fn renderer(caller: &str, port: u16) -> Self {
        let scrape_port = free_port();
        let mut command = std::process::Command::new(bin_dir().join("kustomize-operator"));
        command.env_clear().args(["render-server", "--listen", &format!("127.0.0.1:{port}"), "--callers", caller, "--metrics-listen", &format!("127.0.0.1:{scrape_port}")]);
        command.env("RUST_LOG", std::env::var("KFOP_OPERATOR_LOG").unwrap_or_else(|_| "info".into())).env("KFOP_METRICS_TOKEN_FILE", scrape_token_file());
        for name in ["HOME", "KFOP_CACHE_DIR", kubeflow_manifests::KUSTOMIZE_ENV, kubeflow_manifests::KUSTOMIZE_V5_ENV] {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        let mut process = Self::spawn("kustomize-renderer", command, port);
        process.scrape_port = scrape_port;
        process
    }

    fn spawn(name: &str, mut command: std::process::Command, metrics_port: u16) -> Self {
        let log = std::env::temp_dir().join(format!("{name}-{}.log", unique_name("op")));
        let file = std::fs::File::create(&log).unwrap();
        let child = command
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("start {:?} (build it with `cargo build --workspace --bins`): {e}", command.get_program()));
        Self { child, metrics_port, scrape_port: metrics_port, log }
    }

    /// One sample of the operator's Prometheus metric `name` (first series).
    pub async fn metric(&self, name: &str) -> Option<f64> {
        let url = format!("http://127.0.0.1:{}/metrics", self.scrape_port);
        let body = scrape(&url).await.ok()?;
        body.lines().find(|l| l.starts_with(name) && l[name.len()..].starts_with('{')).and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }

    /// The sample of the operator's Prometheus metric `name` whose labels include `labels`.
    pub async fn metric_with_labels(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let url = format!("http://127.0.0.1:{}/metrics", self.scrape_port);
        let body = scrape(&url).await.ok()?;
        let wanted: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
        body.lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{'))
            .find(|l| wanted.iter().all(|w| l.split_once('}').is_some_and(|(series, _)| series.contains(w.as_str()))))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }

    /// Waits until no reconcile is in flight (started == finished) and returns
    /// (finished reconciles, writes) read in that idle moment.
    pub async fn quiescent(&self) -> (f64, f64) {
        eventually(&format!("operator idle (log: {})", self.log.display()), || async {
            let started = self.metric("kfop_reconciles_total").await.ok_or("no metrics")?;
            let finished = self.metric("kfop_reconcile_duration_seconds_count").await.ok_or("no metrics")?;
            let writes = self.metric("kfop_writes_total").await.ok_or("no metrics")?;
            let again = self.metric("kfop_reconciles_total").await.ok_or("no metrics")?;
            if started == finished && again == started { Ok((finished, writes)) } else { Err(format!("{started} started, {finished} finished")) }
        })
        .await
    }

    /// Waits until the operator answers `/readyz`.
    pub async fn wait_ready(&self) {
        let url = format!("http://127.0.0.1:{}/readyz", self.metrics_port);
        eventually(&format!("operator ready (log: {})", self.log.display()), || async { http_get(&url).await.map(|_| ()) }).await;
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Whether the process has exited (reaped if so).
    pub fn exited(&mut self) -> bool {
        self.child.try_wait().map_or(true, |status| status.is_some())
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        self.kill();
        // A failed test shows what the operator said, since CI keeps no files; a passed one
        // leaves no log behind unless KFOP_KEEP_LOGS is set.
        if std::thread::panicking() {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            eprintln!("--- {} (last lines, NATS connection events left out) ---\n{}", self.log.display(), log_excerpt(&text, 60));
        } else if std::env::var_os("KFOP_KEEP_LOGS").is_none() {
            let _ = std::fs::remove_file(&self.log);
        }
    }
}

/// The last `lines` lines of an operator log without colour codes and without the client's NATS
/// connection events, which repeat every few milliseconds while a server is down.
pub fn log_excerpt(text: &str, lines: usize) -> String {
    let plain: Vec<String> = text.lines().map(strip_ansi).filter(|l| !l.is_empty() && !l.contains("async_nats") && !l.contains("NATS connection event")).collect();
    plain[plain.len().saturating_sub(lines)..].join("\n")
}

/// `line` without ANSI escape sequences (`ESC [ … letter`).
pub fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            chars.by_ref().find(|c| c.is_ascii_alphabetic());
        } else {
            out.push(c);
        }
    }
    out
}

/// Minimal HTTP/1.1 GET over loopback; errors on non-200 answers.
pub async fn http_get(url: &str) -> Result<String, String> {
    http_get_with(url, "").await
}

/// `GET url` with `headers` (each line ending in CRLF): the body of a 200, else the status line.
pub async fn http_get_with(url: &str, headers: &str) -> Result<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").ok_or("not an http URL")?;
    let (host, path) = rest.split_once('/').map(|(h, p)| (h, format!("/{p}"))).unwrap_or((rest, "/".into()));
    let mut stream = tokio::net::TcpStream::connect(host).await.map_err(|e| e.to_string())?;
    stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{headers}Connection: close\r\n\r\n").as_bytes()).await.map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.map_err(|e| e.to_string())?;
    let (head, body) = response.split_once("\r\n\r\n").ok_or("malformed response")?;
    if head.starts_with("HTTP/1.1 200") { Ok(body.to_string()) } else { Err(head.lines().next().unwrap_or_default().to_string()) }
}

/// A real Prometheus (Debian's `prometheus`, which hack/prereqs.sh installs) on loopback, scraping
/// `targets` (ports on loopback) every second, presenting the scrape token as the shipped
/// PodMonitors do, and evaluating `rules` (a rule file's YAML) every second; killed on drop, its
/// data with it.
pub struct Prometheus {
    child: std::process::Child,
    pub port: u16,
    dir: std::path::PathBuf,
}

impl Prometheus {
    pub fn start(targets: &[u16], rules: &str) -> Self {
        let dir = std::env::temp_dir().join(unique_name("prometheus"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("rules.yaml"), rules).unwrap();
        let targets: Vec<String> = targets.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let config = serde_json::json!({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [dir.join("rules.yaml")],
            "scrape_configs": [{
                "job_name": "kubeflow-operators",
                "authorization": {"type": "Bearer", "credentials_file": scrape_token_file()},
                "static_configs": [{"targets": targets}],
            }],
        });
        std::fs::write(dir.join("prometheus.yml"), serde_yaml_ng::to_string(&config).unwrap()).unwrap();
        let port = free_port();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = std::process::Command::new("prometheus")
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start prometheus (Debian package prometheus; hack/prereqs.sh installs it): {e}"));
        Self { child, port, dir }
    }

    /// The `data` of an API answer (`/api/v1/...`, `path` with its query string encoded).
    pub async fn api(&self, path: &str) -> Result<serde_json::Value, String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await.map_err(|e| e.to_string())?;
        // HTTP/1.0: the answer comes whole, not chunked.
        stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes()).await.map_err(|e| e.to_string())?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await.map_err(|e| e.to_string())?;
        let (_, body) = response.split_once("\r\n\r\n").ok_or("malformed response")?;
        let answer: serde_json::Value = serde_json::from_str(body).map_err(|e| format!("{e}: {body}"))?;
        if answer["status"] != "success" {
            return Err(body.to_string());
        }
        Ok(answer["data"].clone())
    }

    /// Prometheus's log, for a failure's message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Minimal HTTP/1.1 request over loopback with extra `headers` and a JSON `body`: the status code
/// and the body, whatever the status.
pub async fn http_request(method: &str, url: &str, headers: &[(&str, &str)], body: Option<&serde_json::Value>) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").expect("an http URL");
    let (host, path) = rest.split_once('/').map(|(h, p)| (h, format!("/{p}"))).unwrap_or((rest, "/".into()));
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n", body.len());
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(&body);
    let mut stream = tokio::net::TcpStream::connect(host).await.unwrap_or_else(|e| panic!("connect {host}: {e}"));
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).expect("a status code");
    (status, body.to_string())
}

/// The environment's kubectl (`KFOP_KUBE_BIN` from `e2e/env/up.sh`), else the one on the PATH.
pub fn kubectl_bin() -> String {
    std::env::var("KFOP_KUBE_BIN").map_or_else(|_| "kubectl".into(), |dir| format!("{dir}/kubectl"))
}

/// Runs `kubectl` (from the environment's build) with `args`, failing the test on error.
pub fn kubectl(args: &[&str]) -> String {
    let kubectl = kubectl_bin();
    let output = std::process::Command::new(&kubectl).args(args).output().unwrap_or_else(|e| panic!("run {kubectl}: {e}"));
    assert!(output.status.success(), "kubectl {args:?} failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A nats-server of a test's own (JetStream on a temporary store), or a cluster of them on
/// loopback, secured as deployed (TLS, one NKey per operator, the contract's permissions), so a
/// test can stop and restart it without disturbing others. Killed on drop.
pub struct NatsServer {
    /// Client port of the first node.
    pub port: u16,
    pub bus: LocalBus,
    pub nodes: Vec<NatsNode>,
}

/// One nats-server process of a [`NatsServer`].
pub struct NatsNode {
    pub port: u16,
    pub monitor_port: u16,
    config: std::path::PathBuf,
    child: Option<std::process::Child>,
}

impl NatsServer {
    pub async fn start() -> Self {
        Self::start_cluster(1).await
    }

    /// `nodes` servers; more than one form a JetStream cluster whose routes authenticate each
    /// other with the bus's server certificate.
    pub async fn start_cluster(nodes: usize) -> Self {
        let dir = std::env::temp_dir().join(unique_name("nats"));
        let bus = LocalBus::create(&dir).expect("write the bus material");
        let ports: Vec<(u16, u16, u16)> = (0..nodes).map(|_| (free_port(), free_port(), free_port())).collect();
        let routes: Vec<String> = ports.iter().map(|(_, _, route)| format!("nats-route://127.0.0.1:{route}")).collect();
        let nodes = ports
            .iter()
            .enumerate()
            .map(|(i, &(port, monitor_port, route_port))| {
                let name = format!("nats-{i}");
                let cluster = (nodes > 1).then(|| operator_runtime::bus_security::Cluster { name: "kubeflow".into(), port: route_port, routes: routes.clone() });
                let config = bus.write_server_config(&name, port, Some(monitor_port), &dir.join(&name), cluster).expect("write the server configuration");
                NatsNode { port, monitor_port, config, child: None }
            })
            .collect();
        let mut server = Self { port: ports[0].0, bus, nodes };
        server.resume().await;
        if server.nodes.len() > 1 {
            for i in 0..server.nodes.len() {
                server.await_jetstream(i).await;
            }
        }
        server
    }

    /// One node named `name` whose configuration `adjust` changes first (a fleet's hub or spoke:
    /// its JetStream domain and leaf nodes). Servers joined by leaf nodes need distinct names: the
    /// hub refuses a second leaf connection from a name it already has.
    pub async fn start_configured(name: &str, adjust: impl FnOnce(&mut operator_runtime::bus_security::ServerConfig)) -> Self {
        let dir = std::env::temp_dir().join(unique_name("nats"));
        let bus = LocalBus::create(&dir).expect("write the bus material");
        let (port, monitor_port) = (free_port(), free_port());
        let mut config = bus.server_config(name, port, Some(monitor_port), &dir.join(name), None).expect("the server configuration");
        adjust(&mut config);
        let config = bus.write(name, &config).expect("write the server configuration");
        let mut server = Self { port, bus, nodes: vec![NatsNode { port, monitor_port, config, child: None }] };
        server.resume().await;
        server.await_jetstream(0).await;
        server
    }

    /// The client URLs of every node, comma-separated (a client fails over between them).
    pub fn url(&self) -> String {
        self.nodes.iter().map(|n| format!("tls://127.0.0.1:{}", n.port)).collect::<Vec<_>>().join(",")
    }

    /// A client connected as `identity`.
    pub async fn client(&self, identity: Identity) -> async_nats::Client {
        bus_client(&self.url(), &self.bus, identity).await
    }

    /// Environment variables that make an operator connect as `identity`.
    pub fn env(&self, identity: Identity) -> Vec<(String, String)> {
        let credentials = self.bus.credentials(identity);
        let path = |p: Option<std::path::PathBuf>| p.unwrap().to_string_lossy().into_owned();
        vec![("NATS_NKEY_FILE".into(), path(credentials.nkey_file)), ("NATS_CA_FILE".into(), path(credentials.ca_file))]
    }

    /// Stops every node (their JetStream stores stay on disk).
    pub fn stop(&mut self) {
        (0..self.nodes.len()).for_each(|i| self.stop_node(i));
    }

    /// Starts every node again on the same ports and stores.
    pub async fn resume(&mut self) {
        for i in 0..self.nodes.len() {
            self.resume_node(i).await;
        }
    }

    /// Kills node `i` (SIGKILL: what a crashed pod does).
    pub fn stop_node(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts node `i` again and waits until it listens.
    pub async fn resume_node(&mut self, i: usize) {
        let binary = std::env::var("KFOP_NATS_SERVER").expect("KFOP_NATS_SERVER from the env file");
        let node = &mut self.nodes[i];
        let log = std::fs::OpenOptions::new().create(true).append(true).open(node.config.with_extension("log")).expect("open the server's log");
        let child = std::process::Command::new(binary)
            .args(["-c", node.config.to_str().unwrap()])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start nats-server");
        node.child = Some(child);
        let addr = format!("127.0.0.1:{}", node.port);
        eventually(&format!("nats-server listening (log: {})", node.config.with_extension("log").display()), || async { tokio::net::TcpStream::connect(&addr).await.map(|_| ()).map_err(|e| e.to_string()) }).await;
    }

    /// Waits until node `i` reports JetStream healthy (in a cluster: a meta leader is known).
    pub async fn await_jetstream(&self, i: usize) {
        let url = format!("http://127.0.0.1:{}/healthz", self.nodes[i].monitor_port);
        eventually(&format!("JetStream healthy on node {i}"), || async { http_get(&url).await.map(|_| ()) }).await;
    }

    /// Node `i`'s monitor's answer at `path` (e.g. `/leafz`), decoded; a large answer comes in
    /// chunks, around the one JSON object.
    pub async fn monitor(&self, i: usize, path: &str) -> Result<serde_json::Value, String> {
        nats_monitor(self.nodes[i].monitor_port, path).await
    }

    /// Clients connected to node `i` (its monitor's `/connz`).
    pub async fn connections(&self, i: usize) -> usize {
        self.monitor(i, "/connz?limit=1").await.ok().and_then(|v| v["num_connections"].as_u64()).unwrap_or(0) as usize
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.stop();
        // A failed test leaves the servers' logs and stores for a look.
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.bus.dir);
        }
    }
}

/// The answer of the nats-server monitor on loopback `port` at `path` (e.g. `/leafz`), decoded;
/// a large answer comes in chunks, around the one JSON object.
pub async fn nats_monitor(port: u16, path: &str) -> Result<serde_json::Value, String> {
    let body = http_get(&format!("http://127.0.0.1:{port}{path}")).await?;
    let json = body.find('{').zip(body.rfind('}')).map(|(a, b)| &body[a..=b]).ok_or_else(|| format!("no JSON object in {body:?}"))?;
    serde_json::from_str(json).map_err(|e| e.to_string())
}

/// Installs `deploy/<package>` with `kubectl apply -k` (as a platform engineer would), waits for the
/// operator Deployment to become Available, and returns a kubeconfig that authenticates as the
/// operator's ServiceAccount, so a host process proves the package's RBAC is sufficient.
pub async fn install_package(client: &Client, package: &str) -> std::path::PathBuf {
    let admin = std::path::PathBuf::from(std::env::var("KUBECONFIG").expect("KUBECONFIG from the env file"));
    install_package_with(client, &admin, package).await
}

/// As [`install_package`], on the cluster whose admin kubeconfig is `admin` (`client` is its).
pub async fn install_package_with(client: &Client, admin: &std::path::Path, package: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy").join(package);
    kubectl(&["--kubeconfig", admin.to_str().unwrap(), "apply", "--server-side", "--force-conflicts", "-k", dir.to_str().unwrap()]);
    let name = format!("{package}-operator");
    deployment_available(client, OPERATORS_NAMESPACE, &name).await;
    service_account_kubeconfig_with(client, admin, OPERATORS_NAMESPACE, &name).await
}

/// Waits for operator `name`'s Deployment (from a deploy/ package) to be Available and returns a
/// kubeconfig with a token of its ServiceAccount.
pub async fn operator_kubeconfig(client: &Client, name: &str) -> std::path::PathBuf {
    deployment_available(client, OPERATORS_NAMESPACE, name).await;
    service_account_kubeconfig(client, OPERATORS_NAMESPACE, name).await
}

/// Waits until Deployment `namespace/name` is Available (through kwok, its pods run nothing) and
/// returns it.
pub async fn deployment_available(client: &Client, namespace: &str, name: &str) -> k8s_openapi::api::apps::v1::Deployment {
    use k8s_openapi::api::apps::v1::Deployment;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    eventually(&format!("Deployment {namespace}/{name} Available"), || async {
        let d = deployments.get(name).await.map_err(|e| e.to_string())?;
        let available = d.status.as_ref().and_then(|s| s.conditions.as_ref()).into_iter().flatten().any(|c| c.type_ == "Available" && c.status == "True");
        if available { Ok(d) } else { Err(format!("{:?}", d.status)) }
    })
    .await
}

/// A kubeconfig for the environment's API server that authenticates with a token of
/// ServiceAccount `namespace/name`, so a host process runs with exactly that account's RBAC.
pub async fn service_account_kubeconfig(client: &Client, namespace: &str, name: &str) -> std::path::PathBuf {
    let admin = std::path::PathBuf::from(std::env::var("KUBECONFIG").expect("KUBECONFIG from the env file"));
    service_account_kubeconfig_with(client, &admin, namespace, name).await
}

/// As [`service_account_kubeconfig`], for the cluster whose admin kubeconfig is `admin`.
pub async fn service_account_kubeconfig_with(client: &Client, admin: &std::path::Path, namespace: &str, name: &str) -> std::path::PathBuf {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let request = TokenRequest { spec: TokenRequestSpec { expiration_seconds: Some(3600), ..Default::default() }, ..Default::default() };
    let token = accounts.create_token_request(name, &PostParams::default(), &request).await.unwrap().status.unwrap().token;
    let admin = std::fs::read_to_string(admin).unwrap_or_else(|e| panic!("read {}: {e}", admin.display()));
    let mut config: serde_yaml_ng::Value = serde_yaml_ng::from_str(&admin).unwrap();
    config["users"][0]["user"] = serde_yaml_ng::from_str(&format!("token: {token}")).unwrap();
    let path = std::env::temp_dir().join(unique_name(&format!("kubeconfig-{name}")));
    std::fs::write(&path, serde_yaml_ng::to_string(&config).unwrap()).unwrap();
    path
}

/// A client that authenticates as `kubeconfig` says (e.g. one of [`service_account_kubeconfig`]).
pub async fn client_from(kubeconfig: &std::path::Path) -> Client {
    let config = kube::config::Kubeconfig::read_from(kubeconfig).unwrap_or_else(|e| panic!("read {}: {e}", kubeconfig.display()));
    Client::try_from(kube::Config::from_custom_kubeconfig(config, &Default::default()).await.unwrap()).unwrap()
}

/// Whether `client`'s identity may `verb` `resource` of API `group` (in `namespace`, or
/// cluster-wide), as the API server's authorizer answers it.
pub async fn may(client: &Client, verb: &str, group: &str, resource: &str, namespace: Option<&str>) -> bool {
    use k8s_openapi::api::authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec};
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes { verb: Some(verb.into()), group: Some(group.into()), resource: Some(resource.into()), namespace: namespace.map(Into::into), ..Default::default() }),
            ..Default::default()
        },
        ..Default::default()
    };
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    reviews.create(&PostParams::default(), &review).await.unwrap().status.unwrap().allowed
}

/// The version of each component installed for the resource `name` in `namespace` (its
/// `status.installedVersion`), for every registered component.
pub async fn installed_versions(client: &Client, namespace: &str, name: &str) -> BTreeMap<ComponentKind, Option<String>> {
    let mut versions = BTreeMap::new();
    for component in kubeflow_component_registry::all() {
        let api: Api<kube::api::DynamicObject> = Api::namespaced_with(client.clone(), namespace, &component.api_resource());
        let object = api.get_opt(name).await.unwrap_or_else(|e| panic!("read {} {namespace}/{name}: {e}", component.kind.kind()));
        let installed = object.and_then(|o| o.data["status"]["installedVersion"].as_str().map(String::from));
        versions.insert(component.kind, installed);
    }
    versions
}

/// The namespace deploy/ installs the operators in (their ServiceAccounts, the caller Secret).
pub const OPERATORS_NAMESPACE: &str = "kubeflow-operators";

/// NATS plus the six operators, run on the host with the ServiceAccount tokens of deploy/all
/// (so the package's RBAC is what they run with). `without` leaves component operators out.
pub struct OperatorStack {
    pub nats: NatsServer,
    pub meta: OperatorProcess,
    pub components: BTreeMap<ComponentKind, OperatorProcess>,
    kubeconfigs: BTreeMap<String, std::path::PathBuf>,
    /// Binary run for a component instead of its `<component>-operator`.
    binaries: BTreeMap<ComponentKind, String>,
    /// The operators' `PLATFORM_NAMESPACE`, as deploy/ sets it: where the platform KfDef (and its
    /// ProfileController, the cluster's Profile settings) lives.
    platform_namespace: Option<String>,
    /// The generic operator's repository cache and work directories (`KFOP_MANIFESTS_CACHE`), one
    /// per stack as a pod's `/tmp` is: a cached repository of an earlier stack's test server on a
    /// port the OS hands out again would otherwise stand in for this stack's.
    manifests_cache: std::path::PathBuf,
    /// The renderer the generic operator sends its builds to, as deploy/all runs it.
    pub renderer: OperatorProcess,
    /// Held while this stack runs: one stack at a time per test process ([`ONE_STACK`]).
    _one_stack: tokio::sync::OwnedMutexGuard<()>,
}

/// One [`OperatorStack`] at a time in a test process. A stack's meta-operator reconciles every
/// KfDef in the cluster and its component operators every component resource it publishes, so two
/// stacks side by side (tests of one file run in parallel) both install, report on and finalize
/// each other's KfDefs, and one test's assertions meet the other stack's writes.
static ONE_STACK: std::sync::LazyLock<std::sync::Arc<tokio::sync::Mutex<()>>> = std::sync::LazyLock::new(Default::default);

impl Drop for OperatorStack {
    fn drop(&mut self) {
        self.kubeconfigs.values().for_each(|path| drop(std::fs::remove_file(path)));
        drop(std::fs::remove_dir_all(&self.manifests_cache));
    }
}

impl OperatorStack {
    pub async fn start(client: &Client, without: &[ComponentKind]) -> Self {
        Self::start_with_binaries(client, without, &[]).await
    }

    /// As [`Self::start`], the platform KfDef being in `platform_namespace` (the operators'
    /// `PLATFORM_NAMESPACE`, as deploy/ sets it to `kubeflow`): a KfDef there with a `profiles`
    /// application holds the cluster's Profile settings, one elsewhere is `Degraded`.
    pub async fn start_in(client: &Client, without: &[ComponentKind], platform_namespace: &str) -> Self {
        Self::start_stack(client, without, &[], Some(platform_namespace)).await
    }

    /// As [`Self::start`], running `binary` (with the ServiceAccount of the component's operator)
    /// for each `(component, binary)` of `binaries`.
    pub async fn start_with_binaries(client: &Client, without: &[ComponentKind], binaries: &[(ComponentKind, &str)]) -> Self {
        Self::start_stack(client, without, binaries, None).await
    }

    async fn start_stack(client: &Client, without: &[ComponentKind], binaries: &[(ComponentKind, &str)], platform_namespace: Option<&str>) -> Self {
        let one_stack = ONE_STACK.clone().lock_owned().await;
        install_crds(client).await;
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/all");
        kubectl(&["apply", "--server-side", "--force-conflicts", "-k", dir.to_str().unwrap()]);
        let mut kubeconfigs = BTreeMap::new();
        let operators = kubeflow_component_registry::all().into_iter().map(|c| c.operator);
        for name in std::iter::once("meta-operator".to_string()).chain(operators) {
            let kubeconfig = operator_kubeconfig(client, &name).await;
            kubeconfigs.insert(name, kubeconfig);
        }
        let nats = NatsServer::start().await;
        let meta = Self::spawn("meta-operator", &nats, Identity::MetaOperator, &kubeconfigs["meta-operator"]);
        let binaries = binaries.iter().map(|(c, b)| (*c, b.to_string())).collect();
        // As in a fresh install: the generic operator makes its renderer's caller key, and the
        // renderer (started once that key exists) answers only it.
        let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), OPERATORS_NAMESPACE);
        let caller_secret = kubeflow_manifests::remote::renderer_caller_secret("kustomize-operator");
        if secrets.delete(&caller_secret, &Default::default()).await.is_ok() {
            gone(&secrets, &caller_secret).await;
        }
        // Until then, a renderer no one can call (it answers a key nobody holds).
        let renderer = OperatorProcess::renderer(kubeflow_manifests::remote::CallerKey::generate().public_key(), free_port());
        let mut stack = Self { nats, meta, components: BTreeMap::new(), kubeconfigs, binaries, platform_namespace: platform_namespace.map(str::to_string), manifests_cache: std::env::temp_dir().join(unique_name("stack-manifests")), renderer, _one_stack: one_stack };
        for component in ComponentKind::ALL.into_iter().filter(|c| !without.contains(c)) {
            stack.start_component(component);
        }
        if !without.contains(&ComponentKind::GENERIC) {
            stack.restart_renderer().await;
        }
        stack.meta.wait_ready().await;
        stack
    }

    /// As [`Self::start_in`] with every operator, returning once each component operator is ready.
    pub async fn start_ready_in(client: &Client, platform_namespace: &str) -> Self {
        let stack = Self::start_in(client, &[], platform_namespace).await;
        for p in stack.components.values() {
            p.wait_ready().await;
        }
        stack
    }

    fn spawn(binary: &str, nats: &NatsServer, identity: Identity, kubeconfig: &std::path::Path) -> OperatorProcess {
        OperatorProcess::on_bus(binary, nats, identity, &[], &[("KUBECONFIG", kubeconfig.to_str().unwrap())])
    }

    /// The kubeconfig `operator` (e.g. `kustomize-operator`) runs with: its ServiceAccount's token.
    pub fn kubeconfig(&self, operator: &str) -> &std::path::Path {
        &self.kubeconfigs[operator]
    }

    /// The public key of the generic operator's renderer caller Secret, once the operator made it.
    pub async fn renderer_caller(client: &Client) -> String {
        let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), OPERATORS_NAMESPACE);
        let name = kubeflow_manifests::remote::renderer_caller_secret("kustomize-operator");
        eventually("the generic operator's renderer caller Secret", || async {
            let secret = secrets.get_opt(&name).await.map_err(|e| e.to_string())?.ok_or("not there yet")?;
            let public = secret.data.unwrap_or_default().remove(kubeflow_manifests::remote::CALLER_PUBLIC_KEY).ok_or("no public key")?;
            String::from_utf8(public.0).map_err(|e| e.to_string())
        })
        .await
    }

    /// Starts the renderer again on its port, answering the caller key the generic operator keeps
    /// in its Secret (after `renderer.kill()`, or once the operator made the key).
    pub async fn restart_renderer(&mut self) {
        self.renderer.kill();
        let caller = Self::renderer_caller(&client().await).await;
        self.renderer = OperatorProcess::renderer(&caller, self.renderer.metrics_port);
        self.renderer.wait_ready().await;
    }

    /// Starts the meta-operator again (after `meta.kill()`).
    pub fn restart_meta(&mut self) {
        self.meta = Self::spawn("meta-operator", &self.nats, Identity::MetaOperator, &self.kubeconfigs["meta-operator"]);
    }

    pub fn start_component(&mut self, component: ComponentKind) {
        let operator = format!("{component}-operator");
        let binary = self.binaries.get(&component).cloned().unwrap_or_else(|| operator.clone());
        // Operators that render packages fetch the tests' repositories from loopback, which their
        // fence refuses; each keeps its own repository cache.
        let renders_packages = kubeflow_component_registry::all().iter().any(|c| c.kind == component && c.renders_packages);
        let args: &[&str] = if renders_packages { &["--allow-fetch-from", "127.0.0.1"] } else { &[] };
        let mut env = vec![("KUBECONFIG", self.kubeconfigs[&operator].to_str().unwrap().to_string())];
        if renders_packages {
            env.push(("KFOP_MANIFESTS_CACHE", self.manifests_cache.join(component.name()).display().to_string()));
        }
        env.extend(self.platform_namespace.as_deref().map(|ns| ("PLATFORM_NAMESPACE", ns.to_string())));
        // As deploy/ runs it: every build in the renderer, signed with the key it keeps in its
        // caller Secret in the operators' namespace.
        if component == ComponentKind::GENERIC {
            env.push((kubeflow_manifests::remote::RENDERER_URL_ENV, format!("http://127.0.0.1:{}", self.renderer.metrics_port)));
            env.push((kubeflow_manifests::remote::RENDERER_CALLER_SECRET_ENV, kubeflow_manifests::remote::renderer_caller_secret("kustomize-operator")));
            env.push(("POD_NAMESPACE", OPERATORS_NAMESPACE.to_string()));
        }
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let process = OperatorProcess::on_bus(&binary, &self.nats, Identity::Component(component), args, &env);
        self.components.insert(component, process);
    }
}

/// Name of the CRD version [`store_undecodable`] serves for a moment.
const LOOSE_VERSION: &str = "v0e2eloose";

/// Stores `object` (which names `kind` and `metadata`, and whatever `spec` the test wants) in CRD
/// `crd_name` without the stored version's validation, as an object written before a schema
/// change or through a looser version would be: the CRD is served for a moment also as a version
/// whose schema accepts anything, the object is created through it (the API server converts it
/// to the storage version unchecked: the CRD has no conversion webhook) and the version is
/// removed again. Reading it through the real version then yields what the types cannot decode.
pub async fn store_undecodable(client: &Client, crd_name: &str, namespace: Option<&str>, mut object: serde_json::Value) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionVersion;
    use kube::api::DynamicObject;
    use kube::core::ApiResource;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let loose: CustomResourceDefinitionVersion = serde_json::from_value(serde_json::json!({
        "name": LOOSE_VERSION, "served": true, "storage": false,
        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
    }))
    .unwrap();
    let crd = crds.get(crd_name).await.unwrap();
    let resource = ApiResource {
        group: crd.spec.group.clone(),
        version: LOOSE_VERSION.into(),
        api_version: format!("{}/{LOOSE_VERSION}", crd.spec.group),
        kind: crd.spec.names.kind.clone(),
        plural: crd.spec.names.plural.clone(),
    };
    object["apiVersion"] = resource.api_version.clone().into();
    let object: DynamicObject = serde_json::from_value(object).unwrap();
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    // Retried as a whole: the new version is served once the API server has rebuilt the CRD's
    // handler, and an operator that owns the CRD may put its versions back in between.
    let created = eventually(&format!("create {:?} through version {LOOSE_VERSION} of {crd_name}", object.metadata.name), || async {
        let mut crd = crds.get(crd_name).await.map_err(|e| e.to_string())?;
        if !crd.spec.versions.iter().any(|v| v.name == LOOSE_VERSION) {
            crd.spec.versions.push(loose.clone());
            crds.replace(crd_name, &PostParams::default(), &crd).await.map_err(|e| e.to_string())?;
        }
        api.create(&PostParams::default(), &object).await.map_err(|e| e.to_string())
    })
    .await;
    eventually(&format!("remove version {LOOSE_VERSION} of {crd_name}"), || async {
        let mut crd = crds.get(crd_name).await.map_err(|e| e.to_string())?;
        crd.spec.versions.retain(|v| v.name != LOOSE_VERSION);
        crds.replace(crd_name, &PostParams::default(), &crd).await.map_err(|e| e.to_string())
    })
    .await;
    assert!(created.metadata.uid.is_some());
}

/// The Warning Events with `reason` about object `name` in `namespace` (events.k8s.io).
pub async fn warning_events(client: &Client, namespace: &str, name: &str, reason: &str) -> Vec<k8s_openapi::api::events::v1::Event> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), namespace);
    events
        .list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason) && e.type_.as_deref() == Some("Warning") && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .collect()
}

/// Kinds the components' upstream packages use and another application serves: cert-manager's
/// (`v1alpha2` for Kubeflow 1.3), Istio's for every component but Istio (whose operator takes its
/// own over), and kfctl's Application (Kubeflow 1.2's packages describe each application with one).
pub const PREREQUISITE_KINDS: [(&str, &str, &str, &[&str]); 6] = [
    ("cert-manager.io", "Certificate", "certificates", &["v1", "v1alpha2"]),
    ("cert-manager.io", "Issuer", "issuers", &["v1", "v1alpha2"]),
    ("app.k8s.io", "Application", "applications", &["v1beta1"]),
    ("networking.istio.io", "VirtualService", "virtualservices", &["v1", "v1beta1", "v1alpha3"]),
    ("networking.istio.io", "DestinationRule", "destinationrules", &["v1", "v1beta1", "v1alpha3"]),
    ("security.istio.io", "AuthorizationPolicy", "authorizationpolicies", &["v1", "v1beta1"]),
];

/// Serves [`PREREQUISITE_KINDS`] ([`serve_kind`]): what a component's upstream packages use that
/// the applications installed before it (cert-manager, Istio) would serve.
pub async fn serve_prerequisite_kinds(client: &Client) {
    for (group, kind, plural, versions) in PREREQUISITE_KINDS {
        serve_kind(client, group, kind, plural, versions).await;
    }
}

/// A CRD the cluster serves before an application uses its kind (as an installed Istio would
/// serve its own): schemaless, namespaced, at `versions` (the first stored). A CRD of that name
/// already there gets the versions it lacks.
pub async fn serve_kind(client: &Client, group: &str, kind: &str, plural: &str, versions: &[&str]) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = format!("{plural}.{group}");
    // Labelled as the component that ships this CRD would label it (e.g. the Istio operator),
    // which then takes it for its own; nobody takes over an unlabelled one.
    let shipped_by = kubeflow_component_registry::all()
        .into_iter()
        .find(|c| (c.shipped_objects)().iter().any(|o| o["kind"] == "CustomResourceDefinition" && o["metadata"]["name"] == name.as_str()))
        .map(|c| serde_json::json!({component_framework::build::PART_OF_LABEL: c.kind.name()}));
    // Groups under k8s.io are protected: the real app.k8s.io CRD says it is not approved, too.
    let crd: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": name, "labels": shipped_by.unwrap_or_default(), "annotations": {"api-approved.kubernetes.io": "unapproved, community CRD"}},
        "spec": {"group": group, "scope": "Namespaced", "names": {"kind": kind, "plural": plural},
                 "versions": []},
    }))
    .unwrap();
    let version = |name: &str, storage: bool| -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionVersion {
        serde_json::from_value(serde_json::json!({"name": name, "served": true, "storage": storage, "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}})).unwrap()
    };
    let mut crd = crd;
    crd.spec.versions = versions.iter().enumerate().map(|(i, v)| version(v, i == 0)).collect();
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let mut live = crds.get(&name).await.unwrap();
            let missing: Vec<&&str> = versions.iter().filter(|v| !live.spec.versions.iter().any(|l| l.name == **v)).collect();
            if !missing.is_empty() {
                live.spec.versions.extend(missing.into_iter().map(|v| version(v, false)));
                crds.replace(&name, &PostParams::default(), &live).await.unwrap_or_else(|e| panic!("add versions to CRD {name}: {e}"));
            }
        }
        Err(e) => panic!("create CRD {name}: {e}"),
    }
    within(&format!("{name} established"), await_condition(crds, &name, conditions::is_crd_established())).await.unwrap();
}

/// Prepares the cluster for the manifests fixture (`kubeflow_manifests::fixtures`) installed by
/// the generic component: the kinds its web-app overlays use (app.k8s.io Application, Istio
/// VirtualService) are served, and the kustomize-operator ServiceAccount may manage the fixture's
/// own API group (`demo.kubeflow.org`), granted as the README says to for groups outside
/// Kubeflow's. Removes a webhook configuration an earlier failed run left, which would refuse
/// this run's Tenant before its own webhook exists.
pub async fn prepare_manifests_fixture(client: &Client) {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    serve_kind(client, "app.k8s.io", "Application", "applications", &["v1beta1"]).await;
    serve_kind(client, "networking.istio.io", "VirtualService", "virtualservices", &["v1alpha3"]).await;
    let webhooks: Api<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration> = Api::all(client.clone());
    if webhooks.get_opt("tenant-defaulter").await.unwrap().is_some() {
        webhooks.delete("tenant-defaulter", &DeleteParams::default()).await.unwrap();
    }
    let grant = serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "kustomize-operator-demo"},
                       "rules": [{"apiGroups": ["demo.kubeflow.org"], "resources": ["tenants", "legacyjobs", "issuers", "gateways", "peerauthentications"], "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"]}]});
    let binding = serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "kustomize-operator-demo"},
                         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kustomize-operator-demo"},
                         "subjects": [{"kind": "ServiceAccount", "name": "kustomize-operator", "namespace": OPERATORS_NAMESPACE}]});
    for (object, plural) in [(grant, "clusterroles"), (binding, "clusterrolebindings")] {
        let kind = object["kind"].as_str().unwrap().to_string();
        let resource = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", &kind), plural);
        Api::<DynamicObject>::all_with(client.clone(), &resource).patch("kustomize-operator-demo", &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&object)).await.unwrap();
    }
}

/// Removes what an interrupted run of a test installing the modern fixture's example
/// (`fixtures::modern_example_kfdef`) left: it would be another install's. Namespace `kubeflow`
/// is shared (deploy/all makes it; the example only creates it where it is missing) and stays.
pub async fn reset_modern_example(client: &Client) {
    use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
    use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim};
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let gateways = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("demo.kubeflow.org", "v1", "Gateway"), "gateways");
    // (Not served before the first run: nothing to delete.)
    let _ = Api::<DynamicObject>::namespaced_with(client.clone(), "kubeflow", &gateways).delete("kubeflow-gateway", &DeleteParams::default()).await;
    for name in ["demo-certs", "demo-mesh"] {
        if namespaces.get_opt(name).await.unwrap().is_some() {
            namespaces.delete(name, &DeleteParams::default()).await.unwrap();
        }
        gone(&namespaces, name).await;
    }
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    if mutating.get_opt("demo-mesh-defaulter").await.unwrap().is_some() {
        mutating.delete("demo-mesh-defaulter", &DeleteParams::default()).await.unwrap();
    }
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    if validating.get_opt("demo-certs-validator").await.unwrap().is_some() {
        validating.delete("demo-certs-validator", &DeleteParams::default()).await.unwrap();
    }
    // The 1.10-shaped fixture's claim outlives its install by design.
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "kubeflow");
    if claims.get_opt("minio-pvc").await.unwrap().is_some() {
        claims.delete("minio-pvc", &DeleteParams::default()).await.unwrap();
    }
}

/// Watches `api` from now until `found` holds for an object; returns that object's resource
/// version (an etcd revision: comparable across objects, unlike timestamps). Watch errors (the
/// kind not served yet) are retried by the watcher.
pub fn revision_when<K>(api: Api<K>, name: &str, found: impl Fn(&K) -> bool + Send + 'static) -> tokio::task::JoinHandle<u64>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    tokio::spawn(async move {
        let mut objects = std::pin::pin!(watcher(api, config).applied_objects().filter_map(|o| async { o.ok() }));
        while let Some(object) = objects.next().await {
            if found(&object) {
                return kube::ResourceExt::resource_version(&object).unwrap().parse().unwrap();
            }
        }
        unreachable!("watches do not end")
    })
}

/// Whether every Deployment, StatefulSet and CRD among `objects` is ready in the cluster.
pub async fn all_workloads_ready(client: &Client, objects: &[serde_json::Value]) -> bool {
    for o in objects.iter().filter(|o| o["kind"] == "Deployment" || o["kind"] == "StatefulSet" || o["kind"] == "CustomResourceDefinition") {
        let info = component_framework::kinds::lookup(o["apiVersion"].as_str().unwrap(), o["kind"].as_str().unwrap()).unwrap();
        let api: Api<kube::api::DynamicObject> = match o["metadata"]["namespace"].as_str() {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &info.api_resource()),
            None => Api::all_with(client.clone(), &info.api_resource()),
        };
        let Ok(Some(live)) = api.get_opt(o["metadata"]["name"].as_str().unwrap()).await else { return false };
        if component_framework::readiness::not_ready_reason(&serde_json::to_value(live).unwrap()).is_some() {
            return false;
        }
    }
    true
}

/// Resident memory (VmRSS) of process `pid`, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok()).unwrap_or(0)
}

/// Deletes `name` and waits until the operator has made it again (another uid).
pub async fn delete_and_await_recreation<K>(api: &Api<K>, name: &str) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + Debug,
{
    let old = api.get(name).await.unwrap_or_else(|e| panic!("read {name}: {e}")).meta().uid.clone();
    api.delete(name, &DeleteParams::default()).await.unwrap_or_else(|e| panic!("delete {name}: {e}"));
    eventually(&format!("{name} recreated"), || async {
        match api.get_opt(name).await {
            Ok(Some(object)) if object.meta().uid != old => Ok(object),
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_excerpt_keeps_the_last_lines_without_colours_or_connection_events() {
        let log = "\u{1b}[2m2026-11-24T17:14:07Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m listing desired state\n\
                   2026-11-24T17:14:08Z  INFO async_nats: event: disconnected\n\
                   2026-11-24T17:14:08Z  INFO operator_runtime::nats: NATS connection event event=disconnected\n\
                   \n\
                   2026-11-24T17:14:09Z  WARN cannot publish heartbeat\n\
                   2026-11-24T17:14:10Z  INFO applied\n";
        assert_eq!(log_excerpt(log, 2), "2026-11-24T17:14:09Z  WARN cannot publish heartbeat\n2026-11-24T17:14:10Z  INFO applied");
        assert_eq!(log_excerpt(log, 10).lines().next(), Some("2026-11-24T17:14:07Z  INFO listing desired state"));
    }
}
