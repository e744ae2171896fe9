//! Kubeflow as kubeflow/manifests releases it (`../shared/manifests`), installed by the operators
//! from its KfDef on the real control plane: every application Ready with no failed reconcile and
//! no drift reverted; for v1.10.2, on a cluster where `make demo`'s KfDef was installed and
//! deleted first, each object upstream's `kustomize build` renders for any
//! application (those the built-in components install too) is in the cluster, in the namespace
//! upstream puts it, and a KfUpgrade to a later release built on its archive (images moved on, a pinned remote
//! base added) is planned, approved and applied; v1.11.0 installs likewise, its remote bases
//! served by a loopback mirror; kfctl's v1.2.0 KfDef installs too; and a
//! standalone Istio installs its release from v1.10.2's archive through a mirror.
//!
//! The environment answers for the webhook backends kwok's pods cannot run (e2e/env's pods'
//! network stand-in), so cert-manager's, Istio's, Knative's and KServe's `failurePolicy: Fail`
//! webhooks admit what the install writes, as they would on a cluster once their pods serve.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::{Api, Client};
use kubeflow_crds::component::DeletionPolicy;
use kubeflow_crds::{ComponentKind, KfDef};
use kubeflow_crds::kfupgrade::{KfUpgrade, KfUpgradeStatus, UpgradePhase};
use kubeflow_crds::kfdef::{KfDefPhase, KustomizeRelease};
use kubeflow_e2e::*;
use kubeflow_manifests::{Kustomize, fixtures};
use serde_json::{Value, json};

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

/// A release installed from its KfDef by every operator.
struct Installed {
    client: Client,
    api: Api<KfDef>,
    done: KfDef,
    unpacked: std::path::PathBuf,
    root: std::path::PathBuf,
    namespace: String,
    /// The ClusterRoles operators had made before this install (the environment is shared).
    roles_before: BTreeSet<String>,
    /// The labels of the KfDef's namespace before the install, which labels it as upstream does.
    labels_before: BTreeMap<String, String>,
    /// The namespaces there just before the KfDef was made (`make demo`'s leave some).
    namespaces_before: BTreeSet<String>,
    _stack: OperatorStack,
    server: fixtures::Server,
}

/// Installs `kfdef_file` of the releases folder over `archive` (served on loopback), on a cluster
/// cleared of the CRDs and namespaces `cleared` names, `(kind, name)` (the environment is shared:
/// other tests serve some of the release's kinds by hand, and an uninstall keeps CRDs and
/// namespaces, v1.10.2's with restricted pod security; a cluster new to Kubeflow has none).
/// Checks every application Ready, and no failed reconcile or reverted drift in any log.
/// `served` are served beside the archive, and with `mirrored` the KfDef fetches remote bases
/// on github.com from that server (`spec.remoteBaseMirrors`). With `after_demo`, `make demo`'s
/// KfDef is installed and deleted first by the same operators: what it leaves (CRDs it kept,
/// shared roles, namespaces) must not stand in the way.
async fn install(kfdef_file: &str, archive: &str, cleared: &[(String, String)], served: BTreeMap<String, Vec<u8>>, mirrored: bool, after_demo: bool) -> Installed {
    let client = client().await;
    let releases = fixtures::upstream_releases();
    let tarball = std::fs::read(releases.join(archive)).unwrap();
    let mut kfdef: KfDef = serde_yaml_ng::from_str(&std::fs::read_to_string(releases.join(kfdef_file)).unwrap()).unwrap();
    let mut files = served;
    files.insert(format!("archive/{archive}"), tarball.clone());
    let server = fixtures::Server::start(files).await;
    kfdef.spec.repos[0].uri = server.url(&format!("archive/{archive}"));
    if mirrored {
        kfdef.spec.remote_base_mirrors = vec![format!("https://github.com/={}", server.url(""))];
    }
    let namespace = kfdef.metadata.namespace.clone().unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt(&namespace).await.unwrap().is_none() {
        namespaces.create(&PostParams::default(), &serde_json::from_value(serde_json::json!({"metadata": {"name": namespace}})).unwrap()).await.unwrap();
    }
    let unpacked = tempfile_dir(archive);
    let root = unpack(&tarball, &unpacked);
    clear(&client, cleared, &namespace).await;
    let roles_before = roles_made(&client).await;
    let labels_before = namespaces.get(&namespace).await.unwrap().metadata.labels.unwrap_or_default();
    // As `make demo` runs them: the platform's settings in the KfDef's namespace, where the
    // demo's `profiles` application makes them.
    let stack = if after_demo { OperatorStack::start_in(&client, &[], &namespace).await } else { OperatorStack::start(&client, &[]).await };
    let api: Api<KfDef> = Api::namespaced(client.clone(), &namespace);
    if after_demo {
        install_and_delete_demo(&client, &namespace, &stack).await;
    }
    let namespaces_before = namespaces.list_metadata(&ListParams::default()).await.unwrap().items.into_iter().filter_map(|n| n.metadata.name).collect();
    api.create(&PostParams::default(), &kfdef).await.unwrap();

    let available = |k: Option<&KfDef>| {
        k.is_some_and(|k| k.status.as_ref().is_some_and(|s| s.observed_generation == k.metadata.generation && s.phase == Some(KfDefPhase::Available)))
    };
    let logs: Vec<_> = std::iter::once(&stack.meta).chain(stack.components.values()).map(|p| p.log.display().to_string()).collect();
    if tokio::time::timeout(INSTALL_WAIT, await_condition(api.clone(), "kubeflow", available)).await.is_err() {
        let status = api.get("kubeflow").await.unwrap().status;
        panic!("{kfdef_file} not Available after {INSTALL_WAIT:?}: {}; logs: {logs:?}", serde_json::to_string_pretty(&status).unwrap());
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
    Installed { client, api, done, unpacked, root, namespace, roles_before, labels_before, namespaces_before, _stack: stack, server }
}

/// `make demo`'s KfDef (`examples/kfdef-kfctl-istio-dex.yaml`, its packages from the stand-in
/// repository the demo serves) installed in `namespace` until Available, then deleted, and
/// waited for until it and its component resources are gone.
async fn install_and_delete_demo(client: &Client, namespace: &str, stack: &OperatorStack) {
    let api: Api<KfDef> = Api::namespaced(client.clone(), namespace);
    let yaml = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/kfdef-kfctl-istio-dex.yaml")).unwrap();
    let mut demo: KfDef = serde_yaml_ng::from_str(&yaml).unwrap();
    demo.metadata.namespace = Some(namespace.to_string());
    let server = fixtures::Server::start(BTreeMap::from([("archive/stand-in.tar.gz".to_string(), fixtures::stand_in_repo(&demo))])).await;
    demo.spec.repos[0].uri = server.url("archive/stand-in.tar.gz");
    let name = demo.metadata.name.clone().unwrap();
    api.create(&PostParams::default(), &demo).await.unwrap();
    let available = |k: Option<&KfDef>| k.is_some_and(|k| k.status.as_ref().is_some_and(|s| s.observed_generation == k.metadata.generation && s.phase == Some(KfDefPhase::Available)));
    if tokio::time::timeout(INSTALL_WAIT, await_condition(api.clone(), &name, available)).await.is_err() {
        panic!("the demo's KfDef not Available after {INSTALL_WAIT:?}: {}; meta-operator log {}", serde_json::to_string_pretty(&api.get(&name).await.unwrap().status).unwrap(), stack.meta.log.display());
    }
    let uid = api.get(&name).await.unwrap().metadata.uid.unwrap();
    api.delete(&name, &DeleteParams::default()).await.unwrap();
    tokio::time::timeout(INSTALL_WAIT, await_condition(api.clone(), &name, kube::runtime::conditions::is_deleted(&uid))).await.expect("the demo's KfDef is deleted").unwrap();
    for component in kubeflow_component_registry::all() {
        let resources: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &component.api_resource());
        let Some(resource) = resources.get_opt(&name).await.unwrap() else { continue };
        let uid = resource.metadata.uid.unwrap();
        let cleaned = await_condition(resources, &name, kube::runtime::conditions::is_deleted(&uid));
        tokio::time::timeout(INSTALL_WAIT, cleaned).await.unwrap_or_else(|_| panic!("the demo's {} not cleaned up after {INSTALL_WAIT:?}", component.kind.kind())).unwrap();
    }
}

/// Deletes the CRDs and namespaces `cleared` names (`(kind, name)`), `kept` aside, waiting until
/// each is gone.
async fn clear(client: &Client, cleared: &[(String, String)], kept: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for (kind, name) in cleared {
        match kind.as_str() {
            "CustomResourceDefinition" => delete_crd(client, name).await,
            "Namespace" if name != kept && namespaces.get_opt(name).await.unwrap().is_some() => {
                // Its contents go first (hundreds of objects after v1.10.2): watched, bounded like an install.
                let uid = namespaces.get(name).await.unwrap().metadata.uid.unwrap();
                namespaces.delete(name, &DeleteParams::default()).await.unwrap();
                let deleted = await_condition(namespaces.clone(), name, kube::runtime::conditions::is_deleted(&uid));
                tokio::time::timeout(INSTALL_WAIT, deleted).await.unwrap_or_else(|_| panic!("Namespace {name} not deleted after {INSTALL_WAIT:?}")).unwrap();
            }
            _ => {}
        }
    }
}

/// Deletes CRD `name` and waits until it is gone: after the API server has deleted every object
/// of its kind (hundreds after an install), so bounded like an install.
async fn delete_crd(client: &Client, name: &str) {
    let definitions: Api<CustomResourceDefinition> = Api::all(client.clone());
    if let Some(crd) = definitions.get_opt(name).await.unwrap() {
        definitions.delete(name, &DeleteParams::default()).await.unwrap();
        let uid = crd.metadata.uid.unwrap();
        let deleted = await_condition(definitions.clone(), name, kube::runtime::conditions::is_deleted(&uid));
        tokio::time::timeout(INSTALL_WAIT, deleted).await.unwrap_or_else(|_| panic!("CustomResourceDefinition {name} not deleted after {INSTALL_WAIT:?}")).unwrap();
    }
}

/// Deletes the KfDef and waits, the operators still running, until it is gone with what it
/// installed: the KfDef goes first, each component resource once its cleanup has removed its
/// objects (cert-manager's webhook configuration, which both releases install, is checked too).
/// Then the CRDs among `cleared`, which an uninstall keeps labelled for the component that made
/// them (v1.2.0's Katib CRDs for the generic one): the tests after this one install those kinds
/// with other components, as on a cluster new to Kubeflow.
async fn uninstall(installed: Installed, cleared: &[(String, String)]) {
    uninstall_with(installed, cleared, DeletionPolicy::Retain).await
}

/// [`uninstall`] with the KfDef's `spec.deletionPolicy` set to `policy` just before its delete.
/// With `Purge`, a user's custom resource of one of the install's CRDs (a PodDefault in the
/// KfDef's namespace) holds the uninstall, listed in the KfDef's `status.purging`, until the user
/// deletes it; then every namespace the install made and every CRD it installed (`cleared`) is
/// gone, and the KfDef's namespace, which was there before, stays.
async fn uninstall_with(installed: Installed, cleared: &[(String, String)], policy: DeletionPolicy) {
    let uid = installed.done.metadata.uid.clone().unwrap();
    // The ClusterRoles the install made: deleted with it, and not made again by Kubernetes'
    // aggregation controller (`kubeflow-view` was, as a bare role the next install refused).
    let roles: Api<ClusterRole> = Api::all(installed.client.clone());
    let made: Vec<String> = roles_made(&installed.client).await.difference(&installed.roles_before).cloned().collect();
    assert!(!made.is_empty());
    let purge = policy == DeletionPolicy::Purge;
    let pod_defaults = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("kubeflow.org", "v1alpha1", "PodDefault"), "poddefaults");
    let users_pod_defaults: Api<DynamicObject> = Api::namespaced_with(installed.client.clone(), &installed.namespace, &pod_defaults);
    if purge {
        assert!(cleared.contains(&("CustomResourceDefinition".into(), "poddefaults.kubeflow.org".into())), "the release installs PodDefaults: {cleared:?}");
        let users: DynamicObject = serde_json::from_value(json!({"apiVersion": "kubeflow.org/v1alpha1", "kind": "PodDefault", "metadata": {"name": "user-data"}, "spec": {"selector": {"matchLabels": {"user-data": "true"}}, "desc": "a user's"}})).unwrap();
        users_pod_defaults.create(&PostParams::default(), &users).await.unwrap();
        installed.api.patch("kubeflow", &PatchParams::default(), &Patch::Merge(json!({"spec": {"deletionPolicy": "Purge"}}))).await.unwrap();
    }
    installed.api.delete("kubeflow", &DeleteParams::default()).await.unwrap();
    if purge {
        let waits = format!("CustomResourceDefinition poddefaults.kubeflow.org: custom resources left, e.g. {}/user-data", installed.namespace);
        let listed = |k: Option<&KfDef>| k.and_then(|k| k.status.as_ref()).is_some_and(|s| s.purging.iter().any(|p| p.ends_with(&waits)));
        if tokio::time::timeout(INSTALL_WAIT, await_condition(installed.api.clone(), "kubeflow", listed)).await.is_err() {
            let status = installed.api.get_opt("kubeflow").await.unwrap().and_then(|k| k.status);
            panic!("the KfDef's status does not list {waits:?} after {INSTALL_WAIT:?}: {}", serde_json::to_string_pretty(&status).unwrap());
        }
        // Held while the user's PodDefault is there, and the CRD with it.
        assert!(Api::<CustomResourceDefinition>::all(installed.client.clone()).get("poddefaults.kubeflow.org").await.unwrap().metadata.deletion_timestamp.is_none());
        users_pod_defaults.delete("user-data", &DeleteParams::default()).await.unwrap();
    }
    let deleted = await_condition(installed.api.clone(), "kubeflow", kube::runtime::conditions::is_deleted(&uid));
    tokio::time::timeout(INSTALL_WAIT, deleted).await.expect("the KfDef is deleted").unwrap();
    for component in kubeflow_component_registry::all() {
        let api: Api<DynamicObject> = Api::namespaced_with(installed.client.clone(), &installed.namespace, &component.api_resource());
        let Some(resource) = api.get_opt("kubeflow").await.unwrap() else { continue };
        let uid = resource.metadata.uid.unwrap();
        let cleaned = await_condition(api, "kubeflow", kube::runtime::conditions::is_deleted(&uid));
        tokio::time::timeout(INSTALL_WAIT, cleaned).await.unwrap_or_else(|_| panic!("{} kubeflow not cleaned up after {INSTALL_WAIT:?}", component.kind.kind())).unwrap();
    }
    gone(&Api::<ValidatingWebhookConfiguration>::all(installed.client.clone()), "cert-manager-webhook").await;
    let mut left = Vec::new();
    for name in made {
        if let Some(role) = roles.get_opt(&name).await.unwrap() {
            left.push(format!("{name} (labels {:?}, made by {:?})", role.metadata.labels, role.metadata.managed_fields.unwrap_or_default().iter().map(|f| f.manager.clone()).collect::<Vec<_>>()));
        }
    }
    assert!(left.is_empty(), "ClusterRoles the install made are still there after it was deleted: {left:#?}");
    if purge {
        // Nothing of the install is left: the namespaces it made and the CRDs it installed are
        // gone, and the namespaces there before it (the KfDef's own, those `make demo`'s install
        // left) stay.
        let definitions: Api<CustomResourceDefinition> = Api::all(installed.client.clone());
        let namespaces: Api<Namespace> = Api::all(installed.client.clone());
        let mut made = 0;
        for (kind, name) in cleared {
            match kind.as_str() {
                "CustomResourceDefinition" => gone(&definitions, name).await,
                "Namespace" if !installed.namespaces_before.contains(name) => {
                    made += 1;
                    gone(&namespaces, name).await
                }
                _ => {}
            }
        }
        assert!(made > 0, "the install made no namespace: {cleared:?}, before: {:?}", installed.namespaces_before);
        // The namespaces a purge could take: those the install renders or lives in. Others listed
        // before it may be another test's, deleted and still terminating then.
        let rendered: BTreeSet<&str> = cleared.iter().filter(|(kind, _)| kind == "Namespace").map(|(_, name)| name.as_str()).chain([installed.namespace.as_str()]).collect();
        for name in installed.namespaces_before.iter().filter(|name| rendered.contains(name.as_str())) {
            let live = namespaces.get_opt(name).await.unwrap();
            assert!(live.is_some_and(|n| n.metadata.deletion_timestamp.is_none()), "Namespace {name} was there before the install and is deleted");
        }
    }
    for (_, name) in cleared.iter().filter(|(kind, _)| kind == "CustomResourceDefinition") {
        delete_crd(&installed.client, name).await;
    }
    // The namespace stays, with the labels the install gave it (upstream's Pod Security
    // `restricted` among them): the tests after this one get it as it was.
    let namespaces: Api<Namespace> = Api::all(installed.client.clone());
    let live = namespaces.get(&installed.namespace).await.unwrap().metadata.labels.unwrap_or_default();
    let restored: serde_json::Map<String, Value> = live.keys().filter(|k| !installed.labels_before.contains_key(*k)).map(|k| (k.clone(), Value::Null)).chain(installed.labels_before.iter().map(|(k, v)| (k.clone(), Value::from(v.as_str())))).collect();
    namespaces.patch(&installed.namespace, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": restored}}))).await.unwrap();
    let _ = std::fs::remove_dir_all(&installed.unpacked);
}

#[tokio::test]
async fn kubeflow_1_10_2_installs_from_its_kfdef_with_every_object_where_upstream_puts_it() {
    let _serial = SERIAL.lock().await;
    let scratch = tempfile_dir("example-1.10.2");
    let root = unpack(&std::fs::read(fixtures::upstream_releases().join("manifests-1.10.2.tar.gz")).unwrap(), &scratch);
    let cleared = cluster_objects(upstream_build(&root, "example", &scratch).await);
    let _ = std::fs::remove_dir_all(&scratch);
    // A later release for the upgrade below, built on v1.10.2's archive: the dashboard's image
    // moves on, and its overlay adds a pinned remote base (fetched through the KfDef's mirror).
    let later = later_release(&std::fs::read(fixtures::upstream_releases().join("manifests-1.10.2.tar.gz")).unwrap());
    let served = BTreeMap::from([("archive/manifests-1.10.3.tar.gz".to_string(), later), ("example/dashboard-extras/archive/v1.0.0.tar.gz".to_string(), dashboard_extras())]);
    let installed = install("kfdef-1.10.2.yaml", "manifests-1.10.2.tar.gz", &cleared, served, true, true).await;
    let (client, done) = (&installed.client, &installed.done);
    let status = done.status.as_ref().unwrap();

    // Every application, those the built-in components install included (they render the KfDef's
    // packages): upstream's objects, where upstream puts them.
    let by_component: BTreeMap<&str, &str> = status.applications.iter().map(|a| (a.name.as_str(), a.component.as_deref().unwrap_or_default())).collect();
    for (application, component) in [("istio-install", "istio"), ("dex", "dex"), ("pipeline", "pipelines"), ("katib", "katib"), ("kserve", "kfserving"), ("models-web-app", "kfserving"), ("jupyter-web-app", "kustomize")] {
        assert_eq!(by_component.get(application), Some(&component), "{application}");
    }
    upstream_objects_in_place(&installed, &installed.root).await;
    upstream_namespace_labels(&installed, &installed.root).await;

    // A KfUpgrade to the later release: planned, shown, approved, applied.
    let upgrades: Api<KfUpgrade> = Api::namespaced(client.clone(), &installed.namespace);
    let upgrade: KfUpgrade = serde_json::from_value(json!({
        "apiVersion": "kfupgrade.apps.kubeflow.org/v1alpha1", "kind": "KfUpgrade", "metadata": {"name": "to-1-10-3"},
        "spec": {"currentKfDef": {"name": "kubeflow"}, "approval": "Manual", "healthTimeoutSeconds": 120,
                 "newKfDef": {"name": "kubeflow", "version": "v1.10.3", "repos": [{"name": "manifests", "uri": installed.server.url("archive/manifests-1.10.3.tar.gz")}]}},
    }))
    .unwrap();
    upgrades.create(&PostParams::default(), &upgrade).await.unwrap();
    let shown = upgrade_phase(&upgrades, &[UpgradePhase::AwaitingApproval, UpgradePhase::Failed, UpgradePhase::RolledBack, UpgradePhase::Succeeded]).await;
    assert_eq!(shown.phase, Some(UpgradePhase::AwaitingApproval), "{shown:#?}");
    let step = shown.plan.iter().find(|p| p.component == ComponentKind::GENERIC).unwrap_or_else(|| panic!("no step of the generic component: {shown:#?}"));
    assert_eq!((step.from_version.as_str(), step.to_version.as_str()), ("v1.10.2", "v1.10.3"));
    let changes = &step.changes;
    assert!(changes.change.iter().any(|c| c.starts_with("Deployment kubeflow/centraldashboard:") && c.contains("spec.template.spec.containers[0].image")), "{changes:#?}");
    assert_eq!(changes.add, ["ConfigMap kubeflow/dashboard-extras"], "{changes:#?}");
    assert!(changes.failed.is_empty() && changes.prune.is_empty(), "{changes:#?}");
    // The built-in Katib renders the KfDef's packages: its step moves them to the new archive,
    // at the same Katib version (else its objects would stay 1.10.2's under a 1.10.3 KfDef).
    let katib = shown.plan.iter().find(|p| p.component == ComponentKind::Katib).unwrap_or_else(|| panic!("no step of katib: {shown:#?}"));
    assert_eq!((katib.from_version.as_str(), katib.to_version.as_str()), ("v0.18.0", "v0.18.0"));
    assert!(katib.changes.change.iter().any(|c| c.starts_with("Deployment kubeflow/katib-ui:") && c.contains("image")), "{katib:#?}");
    let katib_step = shown.steps.iter().find(|s| s.component == ComponentKind::Katib).unwrap();
    assert_eq!(katib_step.to_repos.iter().map(|r| r.uri.as_str()).collect::<Vec<_>>(), [installed.server.url("archive/manifests-1.10.3.tar.gz")]);
    let dashboard = |d: Deployment| d.spec.unwrap().template.spec.unwrap().containers[0].image.clone().unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "kubeflow");
    assert_eq!(dashboard(deployments.get("centraldashboard").await.unwrap()), "ghcr.io/kubeflow/kubeflow/central-dashboard:v1.10.0", "moved before approval");
    assert_eq!(dashboard(deployments.get("katib-ui").await.unwrap()), "ghcr.io/kubeflow/katib/katib-ui:v0.18.0", "moved before approval");
    upgrades.patch("to-1-10-3", &PatchParams::default(), &Patch::Merge(json!({"spec": {"approved": true}}))).await.unwrap();
    let done = upgrade_phase(&upgrades, &[UpgradePhase::Succeeded, UpgradePhase::Failed, UpgradePhase::RolledBack]).await;
    assert_eq!(done.phase, Some(UpgradePhase::Succeeded), "{done:#?}");
    assert_eq!(dashboard(deployments.get("centraldashboard").await.unwrap()), "ghcr.io/kubeflow/kubeflow/central-dashboard:v1.10.3");
    assert_eq!(dashboard(deployments.get("katib-ui").await.unwrap()), "ghcr.io/kubeflow/katib/katib-ui:v0.18.1", "the built-in's objects are the new release's");
    Api::<ConfigMap>::namespaced(client.clone(), "kubeflow").get("dashboard-extras").await.expect("the remote base's ConfigMap is installed");
    upgrades.delete("to-1-10-3", &DeleteParams::default()).await.unwrap();

    // Uninstalled with `deletionPolicy: Purge`: the cluster is left as it was.
    uninstall_with(installed, &cleared, DeletionPolicy::Purge).await;
}

/// Every object upstream's `kustomize build <path>` of `root` renders for an application of the
/// install (those the built-in components install included: they render the KfDef's packages)
/// is in the cluster, in the namespace upstream puts it.
async fn upstream_objects_in_place(installed: &Installed, root: &std::path::Path) {
    let client = &installed.client;
    let (mut checked, mut missing) = (0, Vec::new());
    for application in &installed.done.spec.applications {
        let path = &application.kustomize_config.as_ref().unwrap().repo_ref.as_ref().unwrap().path;
        // A `kind: Component` is built only with what it changes (upstream's example builds it so).
        if kubeflow_manifests::refs::is_component(&root.join(path)) {
            continue;
        }
        let home = installed.unpacked.join(format!("home-{}", application.name));
        std::fs::create_dir_all(&home).unwrap();
        for (api_version, kind, object_namespace, name) in upstream_objects(root, path, &home, &installed.namespace, client).await {
            let (resource, namespaced) = resource(client, &api_version, &kind).await;
            let objects: Api<DynamicObject> = if namespaced { Api::namespaced_with(client.clone(), &object_namespace, &resource) } else { Api::all_with(client.clone(), &resource) };
            checked += 1;
            if objects.get_opt(&name).await.unwrap().is_none() {
                missing.push(format!("{} {kind} {object_namespace}/{name}", application.name));
            }
        }
    }
    assert!(missing.is_empty(), "{} of {checked} objects upstream renders are not where upstream puts them: {missing:#?}", missing.len());
}

/// Every Namespace upstream's `kustomize build example` of `root` renders carries upstream's
/// labels: `kubeflow` too, which existed bare before the install and which the built-ins'
/// objects use before the application that renders it comes.
async fn upstream_namespace_labels(installed: &Installed, root: &std::path::Path) {
    let home = installed.unpacked.join("home-example");
    std::fs::create_dir_all(&home).unwrap();
    let namespaces: Api<Namespace> = Api::all(installed.client.clone());
    let mut unlabelled = Vec::new();
    let upstream_namespaces: Vec<Value> = upstream_build(root, "example", &home).await.into_iter().filter(|o| o["kind"] == "Namespace").collect();
    assert!(upstream_namespaces.iter().any(|n| n["metadata"]["name"] == "kubeflow" && n["metadata"]["labels"]["istio-injection"] == "enabled"));
    for object in &upstream_namespaces {
        let name = object["metadata"]["name"].as_str().unwrap();
        let live = namespaces.get(name).await.unwrap();
        for (key, value) in object["metadata"]["labels"].as_object().into_iter().flatten() {
            if live.metadata.labels.as_ref().and_then(|l| l.get(key)).map(String::as_str) != value.as_str() {
                unlabelled.push(format!("{name}: {key}={value} (live: {:?})", live.metadata.labels));
            }
        }
    }
    assert!(unlabelled.is_empty(), "Namespaces without upstream's labels: {unlabelled:#?}");
}

/// Kubeflow v1.11.0's KfDef as released: Pipelines' Argo Workflows and Trainer's JobSet are remote
/// bases, fetched by the operators from a loopback mirror in the layout of
/// `../shared/manifests/README.md` (`spec.remoteBaseMirrors`); every application Ready, every
/// object upstream renders where upstream puts it (upstream's build reading the same remote
/// bases from `remote/`), every Namespace with upstream's labels, the profiles application
/// upstream's controller.
#[tokio::test]
async fn kubeflow_1_11_0_installs_from_its_kfdef_with_its_remote_bases_through_a_mirror() {
    let _serial = SERIAL.lock().await;
    let scratch = tempfile_dir("example-1.11.0");
    let root = unpack(&std::fs::read(fixtures::upstream_releases().join("manifests-1.11.0.tar.gz")).unwrap(), &scratch);
    let offline_dir = scratch.join("offline");
    std::fs::create_dir_all(&offline_dir).unwrap();
    let (offline, _) = fixtures::with_upstream_remote_bases_local(&root, &offline_dir);
    let cleared = cluster_objects(upstream_build(&offline, "example", &scratch).await);
    let installed = install("kfdef-1.11.0.yaml", "manifests-1.11.0.tar.gz", &cleared, fixtures::upstream_remote_bases(), true, false).await;
    let status = installed.done.status.as_ref().unwrap();
    let by_component: BTreeMap<&str, &str> = status.applications.iter().map(|a| (a.name.as_str(), a.component.as_deref().unwrap_or_default())).collect();
    for (application, component) in [("pipeline", "pipelines"), ("trainer", "kustomize"), ("profiles", "kustomize"), ("security-pss-dynamic-baseline", "kustomize")] {
        assert_eq!(by_component.get(application), Some(&component), "{application}");
    }
    Api::<Deployment>::namespaced(installed.client.clone(), "kubeflow").get("profiles-deployment").await.expect("upstream's profile controller");
    // Each application says the kustomize that built it: 1.11's, v5 (the Component is built with
    // `profiles`).
    for application in status.applications.iter().filter(|a| a.name != "security-pss-dynamic-baseline") {
        assert_eq!(application.build.kustomize, Some(KustomizeRelease::V5), "{application:?}");
    }
    upstream_objects_in_place(&installed, &offline).await;
    upstream_namespace_labels(&installed, &offline).await;
    uninstall(installed, &cleared).await;
    let _ = std::fs::remove_dir_all(&scratch);
}

/// The names of the ClusterRoles an operator made (labelled with the component they are part of).
async fn roles_made(client: &Client) -> BTreeSet<String> {
    let roles: Api<ClusterRole> = Api::all(client.clone());
    roles.list(&ListParams::default().labels("components.kubeflow.org/part-of")).await.unwrap().items.into_iter().map(|r| r.metadata.name.unwrap()).collect()
}

/// A KfUpgrade's status once its phase is one of `phases`.
async fn upgrade_phase(api: &Api<KfUpgrade>, phases: &[UpgradePhase]) -> KfUpgradeStatus {
    let reached = |u: Option<&KfUpgrade>| u.and_then(|u| u.status.as_ref()).and_then(|s| s.phase).is_some_and(|p| phases.contains(&p));
    match tokio::time::timeout(INSTALL_WAIT, await_condition(api.clone(), "to-1-10-3", reached)).await {
        Ok(reached) => reached.unwrap().unwrap().status.unwrap(),
        Err(_) => panic!("KfUpgrade not in {phases:?} after {INSTALL_WAIT:?}: {:#?}", api.get("to-1-10-3").await.unwrap().status),
    }
}

/// v1.10.2's archive as a later release: the dashboard's image at v1.10.3, and its overlay adding
/// the remote base `github.com/example/dashboard-extras/config?ref=v1.0.0`; Katib's UI (a built-in
/// component's package, at the same Katib version) at v0.18.1.
fn later_release(tarball: &[u8]) -> Vec<u8> {
    let dir = tempfile_dir("manifests-1.10.3");
    let root = unpack(tarball, &dir);
    let edit = |path: &str, from: &str, to: &str| {
        let file = root.join(path);
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.contains(from), "{path} has no {from:?}");
        std::fs::write(&file, text.replacen(from, to, 1)).unwrap();
    };
    edit("applications/centraldashboard/upstream/base/kustomization.yaml", "newTag: v1.10.0", "newTag: v1.10.3");
    edit("applications/katib/upstream/installs/katib-with-kubeflow/kustomization.yaml", "newName: ghcr.io/kubeflow/katib/katib-ui\n    newTag: v0.18.0", "newName: ghcr.io/kubeflow/katib/katib-ui\n    newTag: v0.18.1");
    edit("applications/centraldashboard/overlays/oauth2-proxy/kustomization.yaml", "-  ../../upstream/overlays/kserve", "-  ../../upstream/overlays/kserve\n- github.com/example/dashboard-extras/config?ref=v1.0.0");
    let packed = fixtures::pack_github_tarball(&root, "manifests-1.10.3");
    let _ = std::fs::remove_dir_all(&dir);
    packed
}

/// The remote base's repository, as GitHub serves the archive of tag v1.0.0.
fn dashboard_extras() -> Vec<u8> {
    let dir = tempfile_dir("dashboard-extras");
    std::fs::create_dir_all(dir.join("config")).unwrap();
    std::fs::write(dir.join("config/kustomization.yaml"), "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [configmap.yaml]\n").unwrap();
    std::fs::write(dir.join("config/configmap.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: dashboard-extras}\ndata: {links: \"[]\"}\n").unwrap();
    let packed = fixtures::pack_github_tarball(&dir, "dashboard-extras-1.0.0");
    let _ = std::fs::remove_dir_all(&dir);
    packed
}

/// kfctl's own v1.2.0 KfDef (`kfdef-1.2.0-istio-dex.yaml`: Istio, Dex, cert-manager, Knative,
/// KFServing and `kubeflow-apps`, the stacks application) installs with every application Ready.
/// What each renders is compared with kfctl's build in manifests/tests/upstream.rs.
#[tokio::test]
async fn kfctls_v1_2_0_kfdef_installs_with_every_application_ready() {
    let _serial = SERIAL.lock().await;
    let cleared = cluster_objects_of_v1_2_0().await;
    let installed = install("kfdef-1.2.0-istio-dex.yaml", "manifests-1.2.0.tar.gz", &cleared, BTreeMap::new(), false, false).await;
    assert!(installed.done.spec.applications.iter().any(|a| a.name == "kubeflow-apps"));
    uninstall(installed, &cleared).await;
}

/// A standalone Istio 1.26.1 (no `spec.sources`) on an operator run as shipped (no
/// `--built-in-templates`) installs Istio as Kubeflow v1.10.2 ships it: the release's archive on github.com, fetched
/// through the operator's `--remote-base-mirror` (an air-gapped cluster's copy, here on
/// loopback), and every object upstream renders for Istio's three applications in the cluster,
/// where upstream puts it; Ready at 1.26.1. Deleting the resource removes them.
#[tokio::test]
async fn a_standalone_resource_installs_its_release_from_upstreams_archive_through_a_mirror() {
    let _serial = SERIAL.lock().await;
    let client = client().await;
    let tarball = std::fs::read(fixtures::upstream_releases().join("manifests-1.10.2.tar.gz")).unwrap();
    let scratch = tempfile_dir("istio-1.26.1");
    let root = unpack(&tarball, &scratch);
    let paths = ["common/istio/istio-crds/base", "common/istio/istio-install/overlays/oauth2-proxy", "common/istio/cluster-local-gateway/base"];
    let mut rendered = Vec::new();
    for path in paths {
        rendered.extend(upstream_build(&root, path, &scratch).await);
    }
    let cleared = cluster_objects(rendered);
    assert!(cleared.iter().any(|(kind, name)| kind == "CustomResourceDefinition" && name == "gateways.networking.istio.io"), "{cleared:?}");
    let ns = TestNamespace::create(&client, "e2e-release-archive").await;
    clear(&client, &cleared, &ns.name).await;

    // Served where the mirror sends github.com's archive path; nothing else is.
    let server = fixtures::Server::start(BTreeMap::from([("kubeflow/manifests/archive/v1.10.2.tar.gz".to_string(), tarball)])).await;
    let mirror = format!("https://github.com/={}", server.url(""));
    let kubeconfig = install_package(&client, "istio").await;
    let cache = tempfile_dir("istio-cache");
    let args = ["--namespace", &ns.name, "--allow-fetch-from", "127.0.0.1", "--remote-base-mirror", &mirror];
    let operator = OperatorProcess::start("istio-operator", &args, &[("KUBECONFIG", kubeconfig.to_str().unwrap()), ("KFOP_MANIFESTS_CACHE", cache.to_str().unwrap())]);
    operator.wait_ready().await;

    let api: Api<kubeflow_crds::component::Istio> = Api::namespaced(client.clone(), &ns.name);
    api.create(&PostParams::default(), &serde_json::from_value(json!({"apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Istio", "metadata": {"name": "istio"}, "spec": {"version": "1.26.1"}})).unwrap()).await.unwrap();
    let ready = |istio: Option<&kubeflow_crds::component::Istio>| {
        istio.and_then(|i| i.status.as_ref().map(|s| (s.phase.clone(), s.installed_version.clone(), s.observed_generation == i.metadata.generation)))
            == Some((Some(kubeflow_crds::component::ComponentPhase::Ready), Some("1.26.1".to_string()), true))
    };
    if tokio::time::timeout(INSTALL_WAIT, await_condition(api.clone(), "istio", ready)).await.is_err() {
        panic!("Istio 1.26.1 not Ready after {INSTALL_WAIT:?}: {:?}; log: {}", api.get("istio").await.unwrap().status, operator.log.display());
    }
    let mut missing = Vec::new();
    for path in paths {
        for (api_version, kind, namespace, name) in upstream_objects(&root, path, &scratch, &ns.name, &client).await {
            let (resource, namespaced) = resource(&client, &api_version, &kind).await;
            let objects: Api<DynamicObject> = if namespaced { Api::namespaced_with(client.clone(), &namespace, &resource) } else { Api::all_with(client.clone(), &resource) };
            if objects.get_opt(&name).await.unwrap().is_none() {
                missing.push(format!("{kind} {namespace}/{name}"));
            }
        }
    }
    assert!(missing.is_empty(), "objects upstream renders are not where upstream puts them: {missing:#?}");
    let text = std::fs::read_to_string(&operator.log).unwrap();
    // Rendered from the package (the built-in template lacks some of those objects anyway).
    for application in ["istio-crds", "istio-install", "cluster-local-gateway"] {
        assert!(text.lines().map(strip_ansi).any(|l| l.contains(" rendered ") && l.contains(&format!("application={application} "))), "{application} not rendered from the archive:\n{}", log_excerpt(&text, 40));
    }
    assert!(!text.contains("reconcile failed"), "a failed reconcile was logged:\n{}", log_excerpt(&text, 40));

    // Deleting the resource removes what it installed.
    let uid = api.get("istio").await.unwrap().metadata.uid.unwrap();
    api.delete("istio", &DeleteParams::default()).await.unwrap();
    tokio::time::timeout(INSTALL_WAIT, await_condition(api.clone(), "istio", kube::runtime::conditions::is_deleted(&uid))).await.expect("the Istio resource is deleted").unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "istio-system");
    assert!(deployments.get_opt("istiod").await.unwrap().is_none(), "istiod outlives its resource");
    clear(&client, &cleared, &ns.name).await;
    let _ = std::fs::remove_dir_all(&scratch);
    let _ = std::fs::remove_dir_all(&cache);
}

/// The CRDs and namespaces among `objects`, `(kind, name)`.
fn cluster_objects(objects: Vec<Value>) -> Vec<(String, String)> {
    let kept = |o: &Value| o["kind"] == "CustomResourceDefinition" || o["kind"] == "Namespace";
    objects.into_iter().filter(kept).map(|o| (o["kind"].as_str().unwrap().to_string(), o["metadata"]["name"].as_str().unwrap().to_string())).collect()
}

/// The CRDs and namespaces kfctl's v1.2.0 KfDef installs, as the render of `kfop build` lists
/// them (to clear a shared environment; not what the test checks).
async fn cluster_objects_of_v1_2_0() -> Vec<(String, String)> {
    let releases = fixtures::upstream_releases();
    let mut kfdef: KfDef = serde_yaml_ng::from_str(&std::fs::read_to_string(releases.join("kfdef-1.2.0-istio-dex.yaml")).unwrap()).unwrap();
    kfdef.spec.repos[0].uri = releases.join("manifests-1.2.0.tar.gz").display().to_string();
    let scratch = tempfile_dir("render-1.2.0");
    let cache = kubeflow_manifests::RepoCache::new(scratch.join("cache"), kubeflow_manifests::FetchOptions { allow_local: true, ..Default::default() }).unwrap();
    let (renderer, _) = kubeflow_manifests::Renderer::locate(scratch.join("work")).await.unwrap();
    let apps = renderer.render_kfdef(&cache, &kfdef).await.unwrap();
    let objects = apps.iter().flat_map(|a| a.objects.iter()).map(|o| serde_json::to_value(o).unwrap()).collect();
    let _ = std::fs::remove_dir_all(&scratch);
    cluster_objects(objects)
}

/// The tests share the cluster's `kubeflow` namespace and cluster-scoped objects.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

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
