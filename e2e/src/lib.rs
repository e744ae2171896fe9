//! Helpers shared by the end-to-end tests. They talk to the environment `e2e/env/up.sh` started,
//! found through `KUBECONFIG` and `NATS_URL` (both written to `$STATE_DIR/env`).

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, Client};

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
    Client::try_default().await.expect("client from KUBECONFIG")
}

/// NATS URL of the environment's nats-server (`NATS_URL`).
pub fn nats_url() -> String {
    std::env::var("NATS_URL").expect("NATS_URL is not set: source ~/.cache/kubeflow-operator/run/env")
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

/// A namespace created for one test and deleted when the test ends (also on panic, best effort).
pub struct TestNamespace {
    pub name: String,
}

impl TestNamespace {
    pub async fn create(client: &Client, prefix: &str) -> Self {
        let name = unique_name(prefix);
        let ns = Namespace { metadata: ObjectMeta { name: Some(name.clone()), ..Default::default() }, ..Default::default() };
        Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.expect("create test namespace");
        Self { name }
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        let name = self.name.clone();
        // Drop cannot await, and the test's own client is driven by the test's runtime, which this
        // thread blocks; so delete with a fresh client on a short-lived runtime of its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                if let Ok(client) = Client::try_default().await {
                    let _ = Api::<Namespace>::all(client).delete(&name, &DeleteParams::default()).await;
                }
            });
        })
        .join();
    }
}
