//! Kubeflow as kubeflow/manifests releases it (`../shared/manifests`), installed by the operators
//! from its KfDef on the real control plane: every application Ready with no failed reconcile,
//! and each object upstream's `kustomize build` renders for an application the generic component
//! installs is in the cluster, in the namespace upstream puts it.
//!
//! The environment answers for the webhook backends kwok's pods cannot run (e2e/env's pods'
//! network stand-in), so cert-manager's, Istio's, Knative's and KServe's `failurePolicy: Fail`
//! webhooks admit what the install writes, as they would on a cluster once their pods serve.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use kube::runtime::wait::await_condition;
use kube::{Api, Client};
use kubeflow_crds::KfDef;
use kubeflow_crds::kfdef::{KfDefPhase, KustomizeRelease};
use kubeflow_e2e::*;
use kubeflow_manifests::{Kustomize, fixtures};
use serde_json::Value;

/// A bound on the whole install (about 600 objects, 60 workloads); a guard against hanging.
const INSTALL_WAIT: Duration = Duration::from_secs(900);

/// `(apiVersion, kind, namespace, name)` of each object upstream's `kustomize build <path>`
/// renders, a namespaced object without a namespace in `default_namespace` (where the install
/// puts such objects, as `kubectl apply -n` would).
async fn upstream_objects(root: &std::path::Path, path: &str, home: &std::path::Path, default_namespace: &str, client: &Client) -> Vec<(String, String, String, String)> {
    let mut out = Vec::new();
    for object in upstream_build(root, path, home).await {
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let (api_version, kind) = (text(&object["apiVersion"]), text(&object["kind"]));
        let namespaced = resource(client, &api_version, &kind).await.1;
        let namespace = match object["metadata"]["namespace"].as_str() {
            _ if !namespaced => String::new(),
            Some(namespace) => namespace.to_string(),
            None => default_namespace.to_string(),
        };
        out.push((api_version, kind, namespace, text(&object["metadata"]["name"])));
    }
    out
}

/// Upstream's `kustomize build <path>` (the real kustomize v5).
async fn upstream_build(root: &std::path::Path, path: &str, home: &std::path::Path) -> Vec<Value> {
    static KUSTOMIZE: tokio::sync::OnceCell<Kustomize> = tokio::sync::OnceCell::const_new();
    let kustomize = KUSTOMIZE.get_or_init(|| async { Kustomize::locate_release(KustomizeRelease::V5).await.unwrap_or_else(|e| panic!("this test runs the real kustomize: {e}")) }).await;
    let output = kustomize.build(&root.join(path), home, &[root.to_path_buf()]).await.unwrap_or_else(|e| panic!("upstream's build of {path}: {e}"));
    kubeflow_manifests::parse_objects(&output).unwrap().into_iter().map(|o| serde_json::to_value(o).unwrap()).collect()
}

/// The API resource of a kind the cluster serves, and whether it is namespaced.
async fn resource(client: &Client, api_version: &str, kind: &str) -> (ApiResource, bool) {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let (resource, capabilities) = kube::discovery::pinned_kind(client, &GroupVersionKind::gvk(group, version, kind)).await.unwrap_or_else(|e| panic!("the cluster serves no {kind} ({api_version}): {e}"));
    (resource, capabilities.scope == kube::discovery::Scope::Namespaced)
}

#[tokio::test]
async fn kubeflow_1_10_2_installs_from_its_kfdef_with_every_object_where_upstream_puts_it() {
    let client = client().await;
    let releases = fixtures::upstream_releases();
    let tarball = std::fs::read(releases.join("manifests-1.10.2.tar.gz")).unwrap();
    let mut kfdef: KfDef = serde_yaml_ng::from_str(&std::fs::read_to_string(releases.join("kfdef-1.10.2.yaml")).unwrap()).unwrap();
    let server = fixtures::Server::start([("archive/v1.10.2.tar.gz".to_string(), tarball.clone())].into()).await;
    kfdef.spec.repos[0].uri = server.url("archive/v1.10.2.tar.gz");
    let namespace = kfdef.metadata.namespace.clone().unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt(&namespace).await.unwrap().is_none() {
        namespaces.create(&PostParams::default(), &serde_json::from_value(serde_json::json!({"metadata": {"name": namespace}})).unwrap()).await.unwrap();
    }
    // The environment is shared with tests that serve some of the release's kinds by hand (their
    // CRDs stay): a cluster new to Kubeflow has none of them.
    let unpacked = tempfile_dir("kubeflow-1.10.2");
    let root = unpack(&tarball, &unpacked);
    std::fs::create_dir_all(unpacked.join("home-example")).unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in upstream_build(&root, "example", &unpacked.join("home-example")).await.into_iter().filter(|o| o["kind"] == "CustomResourceDefinition") {
        let name = crd["metadata"]["name"].as_str().unwrap();
        if crds.get_opt(name).await.unwrap().is_some() {
            crds.delete(name, &DeleteParams::default()).await.unwrap();
            gone(&crds, name).await;
        }
    }
    let stack = OperatorStack::start(&client, &[]).await;
    let api: Api<KfDef> = Api::namespaced(client.clone(), &namespace);
    api.create(&PostParams::default(), &kfdef).await.unwrap();

    let available = |k: Option<&KfDef>| {
        k.is_some_and(|k| k.status.as_ref().is_some_and(|s| s.observed_generation == k.metadata.generation && s.phase == Some(KfDefPhase::Available)))
    };
    let logs: Vec<_> = std::iter::once(&stack.meta).chain(stack.components.values()).map(|p| p.log.display().to_string()).collect();
    if tokio::time::timeout(INSTALL_WAIT, await_condition(api.clone(), "kubeflow", available)).await.is_err() {
        let status = api.get("kubeflow").await.unwrap().status;
        panic!("Kubeflow v1.10.2 not Available after {INSTALL_WAIT:?}: {}; logs: {logs:?}", serde_json::to_string_pretty(&status).unwrap());
    }
    let done = api.get("kubeflow").await.unwrap();
    let status = done.status.as_ref().unwrap();
    assert_eq!(status.applications.len(), done.spec.applications.len(), "an application is missing from status");
    for application in &status.applications {
        assert_eq!(application.state, "Ready", "{application:?}");
    }
    for process in std::iter::once(&stack.meta).chain(stack.components.values()) {
        let text = std::fs::read_to_string(&process.log).unwrap();
        assert!(!text.contains("reconcile failed"), "a failed reconcile was logged: {}\n{}", process.log.display(), log_excerpt(&text, 40));
        // Nobody changes the install meanwhile: an object the API server stores otherwise than
        // rendered (`1000m` as `1`, a cluster-scoped object's namespace left out) is no drift.
        let drift: Vec<&str> = text.lines().filter(|l| l.contains("reverting drift")).take(5).collect();
        assert!(drift.is_empty(), "drift reverted where nobody changed anything: {}\n{drift:#?}", process.log.display());
    }

    // Each application the generic component installs: upstream's objects, where upstream puts them.
    let generic: BTreeSet<&str> = status.applications.iter().filter(|a| a.component.as_deref() == Some("kustomize")).map(|a| a.name.as_str()).collect();
    assert!(generic.len() >= 20, "the generic component installs the applications no built-in covers: {generic:?}");
    let (mut checked, mut missing) = (0, Vec::new());
    for application in done.spec.applications.iter().filter(|a| generic.contains(a.name.as_str())) {
        let path = &application.kustomize_config.as_ref().unwrap().repo_ref.as_ref().unwrap().path;
        let home = unpacked.join(format!("home-{}", application.name));
        std::fs::create_dir_all(&home).unwrap();
        for (api_version, kind, object_namespace, name) in upstream_objects(&root, path, &home, &namespace, &client).await {
            let (resource, namespaced) = resource(&client, &api_version, &kind).await;
            let objects: Api<DynamicObject> = if namespaced { Api::namespaced_with(client.clone(), &object_namespace, &resource) } else { Api::all_with(client.clone(), &resource) };
            checked += 1;
            if objects.get_opt(&name).await.unwrap().is_none() {
                missing.push(format!("{} {kind} {object_namespace}/{name}", application.name));
            }
        }
    }
    assert!(missing.is_empty(), "{} of {checked} objects upstream renders are not where upstream puts them: {missing:#?}", missing.len());

    let uid = done.metadata.uid.clone().unwrap();
    api.delete("kubeflow", &DeleteParams::default()).await.unwrap();
    tokio::time::timeout(INSTALL_WAIT, await_condition(api.clone(), "kubeflow", kube::runtime::conditions::is_deleted(&uid))).await.expect("the KfDef is deleted with what it installed").unwrap();
    gone(&Api::<ValidatingWebhookConfiguration>::all(client.clone()), "cert-manager-webhook").await;
    let _ = std::fs::remove_dir_all(&unpacked);
}

fn tempfile_dir(prefix: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(unique_name(prefix));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Unpacks a GitHub archive into `dir`, returning its top folder.
fn unpack(tarball: &[u8], dir: &std::path::Path) -> std::path::PathBuf {
    let status = std::process::Command::new("tar").args(["xzf", "-", "-C"]).arg(dir).stdin(std::process::Stdio::piped()).spawn().and_then(|mut child| {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(tarball)?;
        child.wait()
    });
    assert!(status.unwrap().success(), "tar could not unpack the release");
    std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).find(|p| p.is_dir() && p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("manifests"))).expect("the archive's top folder")
}
