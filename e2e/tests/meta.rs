//! The meta-operator and the component operators in NATS mode, each test with a nats-server of
//! its own: KfDefs converge, report every application, survive NATS outages and operator restarts,
//! and leave nothing behind when deleted. Tests in this file run one at a time (they start
//! operators that watch every namespace).

use std::collections::BTreeMap;

use component_framework::api::component::ComponentKind;
use component_framework::api::{Istio, Katib, KfDef};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use kubeflow_crds::kfdef::KfDefPhase;
use kubeflow_e2e::*;
use serde_json::{Value, json};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
// Each test runs the operators on their hand-written templates (`still_on_built_in_templates`):
// the fixtures assume per-install objects in the KfDef's namespace and Kubeflow 1.3.0, which has no
// archive here.

/// A KfDef of built-in applications whose sources name no repository: each component installs its
/// built-in release (a repository would make it render that repository's packages instead).
fn kfdef(namespace: &str, version: &str, applications: &[&str]) -> KfDef {
    let apps: Vec<Value> = applications.iter().map(|a| json!({"name": a, "kustomizeConfig": {"repoRef": {"name": "manifests", "path": a}}})).collect();
    serde_json::from_value(json!({
        "apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef", "metadata": {"name": "kubeflow", "namespace": namespace},
        "spec": {"version": version, "applications": apps},
    }))
    .unwrap()
}

async fn wait_kfdef(api: &Api<KfDef>, what: &str, check: impl Fn(&KfDef) -> bool) -> KfDef {
    eventually(what, || async {
        let k = api.get("kubeflow").await.map_err(|e| e.to_string())?;
        if check(&k) { Ok(k) } else { Err(serde_json::to_string(&k.status).unwrap()) }
    })
    .await
}

fn available(k: &KfDef) -> bool {
    k.status.as_ref().is_some_and(|s| s.phase == Some(KfDefPhase::Available) && s.observed_generation == k.metadata.generation)
}

async fn component_versions(client: &Client, ns: &str) -> BTreeMap<ComponentKind, Option<String>> {
    installed_versions(client, ns, "kubeflow").await
}

/// Objects any component operator made for resources in `ns` (namespaced ones in `ns`,
/// cluster-scoped ones named after it), CRDs excepted.
async fn leftovers(client: &Client, ns: &str) -> Vec<String> {
    let selector = ListParams::default().labels(component_framework::build::PART_OF_LABEL);
    let mut left: Vec<String> = Api::<Deployment>::namespaced(client.clone(), ns)
        .list(&selector)
        .await
        .unwrap()
        .items
        .iter()
        .filter(|d| d.metadata.deletion_timestamp.is_none())
        .map(|d| format!("Deployment {}", d.name_any()))
        .collect();
    left.extend(Api::<ClusterRole>::all(client.clone()).list(&selector).await.unwrap().items.iter().map(|c| c.name_any()).filter(|n| n.ends_with(&format!("-{ns}"))).map(|n| format!("ClusterRole {n}")));
    left
}

#[tokio::test]
async fn full_kfdef_converges_reports_every_application_follows_edits_and_deletes_cleanly() {
    let _serial = SERIAL.lock().await;
    still_on_built_in_templates();
    let client = client().await;
    let ns = TestNamespace::create(&client, "e2e-kfdef-full").await;
    // The KfDef's `profiles` application makes the cluster's Profile settings: the platform's KfDef.
    let stack = OperatorStack::start_in(&client, &[], &ns.name).await;
    let yaml = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/kfdef-kfctl-istio-dex.yaml")).unwrap();
    let mut kfdef: KfDef = serde_yaml_ng::from_str(&yaml).unwrap();
    kfdef.metadata.namespace = Some(ns.name.clone());
    // The applications no built-in release covers come from the KfDef's manifests repository:
    // here a stand-in with a package at each of their paths, served on loopback.
    let server = kubeflow_manifests::fixtures::Server::start(BTreeMap::from([("archive/v1.2.0.tar.gz".to_string(), kubeflow_manifests::fixtures::stand_in_repo(&kfdef))])).await;
    kfdef.spec.repos[0].uri = server.url("archive/v1.2.0.tar.gz");
    let api: Api<KfDef> = Api::namespaced(client.clone(), &ns.name);
    api.create(&PostParams::default(), &kfdef).await.unwrap();

    let done = wait_kfdef(&api, "the kfctl KfDef Available", available).await;
    let status = done.status.clone().unwrap();
    // Every component: those with kfctl applications of their own, and the generic one for the rest.
    assert_eq!(status.components.len(), kubeflow_crds::ComponentKind::ALL.len(), "every component of the kfctl KfDef");
    assert!(status.components.values().all(|c| c.ready));
    assert_eq!(status.applications.len(), kfdef.spec.applications.len(), "an application is missing from status");
    assert!(status.applications.iter().all(|a| a.state == "Ready"), "{:?}", status.applications);
    let jupyter = status.applications.iter().find(|a| a.name == "jupyter-web-app").unwrap();
    assert_eq!(jupyter.component.as_deref(), Some("kustomize"));
    Api::<Deployment>::namespaced(client.clone(), &ns.name).get("jupyter-web-app").await.unwrap();
    assert_eq!(status.applications.iter().find(|a| a.name == "katib-controller").unwrap().component.as_deref(), Some("katib"));
    for c in ["Available", "Progressing", "Degraded"] {
        let cond = status.conditions.iter().find(|x| x.type_ == c).unwrap_or_else(|| panic!("no {c} condition"));
        assert_eq!(cond.observed_generation, done.metadata.generation);
    }
    let katib = Api::<Katib>::namespaced(client.clone(), &ns.name).get("kubeflow").await.unwrap();
    assert_eq!(katib.owner_references()[0].uid, done.uid().unwrap(), "component resource not owned by the KfDef");
    assert_eq!(katib.spec.core.sources.len(), 2);
    assert_eq!(component_versions(&client, &ns.name).await[&ComponentKind::Katib].as_deref(), Some("v0.10.0"));

    // Edit: drop Katib's applications → Katib leaves the cluster; the rest stays.
    let keep: Vec<Value> = kfdef.spec.applications.iter().filter(|a| !a.name.starts_with("katib")).map(|a| serde_json::to_value(a).unwrap()).collect();
    api.patch("kubeflow", &PatchParams::default(), &Patch::Merge(json!({"spec": {"applications": keep}}))).await.unwrap();
    wait_kfdef(&api, "Available without katib", |k| available(k) && !k.status.as_ref().unwrap().components.contains_key("katib")).await;
    eventually("Katib resource and objects removed", || async {
        let gone = Api::<Katib>::namespaced(client.clone(), &ns.name).get_opt("kubeflow").await.unwrap().is_none();
        let left = Api::<Deployment>::namespaced(client.clone(), &ns.name)
            .list(&ListParams::default().labels("components.kubeflow.org/part-of=katib"))
            .await
            .unwrap()
            .items
            .iter()
            .filter(|d| d.metadata.deletion_timestamp.is_none())
            .count();
        if gone && left == 0 { Ok(()) } else { Err(format!("resource gone: {gone}, deployments left: {left}")) }
    })
    .await;

    // Edit: a new Kubeflow version moves every remaining component.
    api.patch("kubeflow", &PatchParams::default(), &Patch::Merge(json!({"spec": {"version": "v1.3.0"}}))).await.unwrap();
    wait_kfdef(&api, "Available at v1.3.0", available).await;
    let versions = component_versions(&client, &ns.name).await;
    assert_eq!(versions[&ComponentKind::Istio].as_deref(), Some("1.9.6"));
    assert_eq!(versions[&ComponentKind::Pipelines].as_deref(), Some("1.5.0"));

    // Delete: nothing left but the CRDs (every CRD there before is there after).
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crds_before: Vec<String> = crds.list(&ListParams::default()).await.unwrap().items.into_iter().map(|c| c.name_any()).collect();
    assert!(crds_before.iter().any(|c| c == "profiles.kubeflow.org"), "the profiles application installs the Profile CRD");
    api.delete("kubeflow", &DeleteParams::default()).await.unwrap();
    eventually("KfDef and everything it made gone", || async {
        let kfdef_gone = api.get_opt("kubeflow").await.unwrap().is_none();
        let left = leftovers(&client, &ns.name).await;
        if kfdef_gone && left.is_empty() { Ok(()) } else { Err(format!("KfDef gone: {kfdef_gone}; left: {left:?}")) }
    })
    .await;
    for crd in &crds_before {
        assert!(crds.get_opt(crd).await.unwrap().is_some(), "CRD {crd} was removed");
    }
    drop(stack);
}

#[tokio::test]
async fn a_missing_operator_is_named_and_killed_operators_catch_up_after_restart() {
    let _serial = SERIAL.lock().await;
    still_on_built_in_templates();
    let client = client().await;
    let mut stack = OperatorStack::start(&client, &[ComponentKind::Katib]).await;
    let ns = TestNamespace::create(&client, "e2e-kfdef-wait").await;
    let api: Api<KfDef> = Api::namespaced(client.clone(), &ns.name);
    api.create(&PostParams::default(), &kfdef(&ns.name, "v1.2.0", &["dex", "katib-crds", "katib-controller"])).await.unwrap();
    let waiting = wait_kfdef(&api, "katib waiting for its operator", |k| {
        k.status.as_ref().and_then(|s| s.components.get("katib")).is_some_and(|c| c.phase.as_deref() == Some("WaitingForOperator"))
    })
    .await;
    let message = &waiting.status.unwrap().components["katib"].message;
    assert!(message.contains("katib-operator"), "{message}");

    // Start it, kill it as soon as it has begun (its resource exists), start it again.
    stack.start_component(ComponentKind::Katib);
    let katibs: Api<Katib> = Api::namespaced(client.clone(), &ns.name);
    eventually("katib resource created", || async { katibs.get_opt("kubeflow").await.map_err(|e| e.to_string())?.ok_or_else(|| "not yet".to_string()).map(|_| ()) }).await;
    stack.components.get_mut(&ComponentKind::Katib).unwrap().kill();
    stack.start_component(ComponentKind::Katib);
    wait_kfdef(&api, "Available after the restart", available).await;
    assert_eq!(component_versions(&client, &ns.name).await[&ComponentKind::Katib].as_deref(), Some("v0.10.0"));

    // The meta-operator down during an edit: the edit converges once it is back.
    stack.meta.kill();
    api.patch("kubeflow", &PatchParams::default(), &Patch::Merge(json!({"spec": {"version": "v1.3.0"}}))).await.unwrap();
    stack.restart_meta();
    wait_kfdef(&api, "Available at v1.3.0 after the meta-operator restarted", available).await;
    assert_eq!(component_versions(&client, &ns.name).await[&ComponentKind::Katib].as_deref(), Some("v0.11.0"));
    api.delete("kubeflow", &DeleteParams::default()).await.unwrap();
    gone(&api, "kubeflow").await;
}

#[tokio::test]
async fn two_kfdefs_in_two_namespaces_converge_independently() {
    let _serial = SERIAL.lock().await;
    still_on_built_in_templates();
    let client = client().await;
    let _stack = OperatorStack::start(&client, &[]).await;
    let a = TestNamespace::create(&client, "e2e-kfdef-a").await;
    let b = TestNamespace::create(&client, "e2e-kfdef-b").await;
    let api_a: Api<KfDef> = Api::namespaced(client.clone(), &a.name);
    let api_b: Api<KfDef> = Api::namespaced(client.clone(), &b.name);
    api_a.create(&PostParams::default(), &kfdef(&a.name, "v1.2.0", &["katib-controller", "dex"])).await.unwrap();
    api_b.create(&PostParams::default(), &kfdef(&b.name, "v1.3.0", &["katib-controller", "kfserving-install"])).await.unwrap();
    wait_kfdef(&api_a, "KfDef a Available", available).await;
    wait_kfdef(&api_b, "KfDef b Available", available).await;
    assert_eq!(component_versions(&client, &a.name).await[&ComponentKind::Katib].as_deref(), Some("v0.10.0"));
    assert_eq!(component_versions(&client, &b.name).await[&ComponentKind::Katib].as_deref(), Some("v0.11.0"));

    api_a.delete("kubeflow", &DeleteParams::default()).await.unwrap();
    eventually("KfDef a and its objects gone", || async {
        let left = leftovers(&client, &a.name).await;
        if api_a.get_opt("kubeflow").await.unwrap().is_none() && left.is_empty() { Ok(()) } else { Err(left) }
    })
    .await;
    let b_now = api_b.get("kubeflow").await.unwrap();
    assert!(available(&b_now), "deleting KfDef a disturbed KfDef b: {:?}", b_now.status);
    assert!(!leftovers(&client, &b.name).await.is_empty(), "KfDef b's objects went with a's");
    api_b.delete("kubeflow", &DeleteParams::default()).await.unwrap();
    gone(&api_b, "kubeflow").await;
}

#[tokio::test]
async fn nats_outage_during_an_edit_loses_nothing_and_applies_once() {
    let _serial = SERIAL.lock().await;
    still_on_built_in_templates();
    let client = client().await;
    let mut stack = OperatorStack::start(&client, &[]).await;
    let ns = TestNamespace::create(&client, "e2e-kfdef-nats").await;
    let api: Api<KfDef> = Api::namespaced(client.clone(), &ns.name);
    api.create(&PostParams::default(), &kfdef(&ns.name, "v1.3.0", &["katib-crds", "katib-controller"])).await.unwrap();
    wait_kfdef(&api, "Available", available).await;
    let katibs: Api<Katib> = Api::namespaced(client.clone(), &ns.name);
    // Applies of the Katib resource from desired state, by the katib operator's NATS-mode manager.
    let katib_operator = &stack.components[&ComponentKind::Katib];
    let applies = || async {
        let labels = [("component", "katib"), ("field_manager", "kubeflow-katib-operator-nats")];
        katib_operator.metric_with_labels("kfop_writes_by_field_manager_total", &labels).await.expect("kfop_writes_by_field_manager_total of the NATS-mode manager")
    };
    let applies_before = applies().await;

    stack.nats.stop();
    // Components keep healing from their resources while NATS is down.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let uid = deployments.get("katib-ui").await.unwrap().uid();
    deployments.delete("katib-ui", &DeleteParams::background()).await.unwrap();
    eventually("katib-ui recreated while NATS is down", || async {
        match deployments.get_opt("katib-ui").await {
            Ok(Some(d)) if d.uid() != uid => Ok(()),
            other => Err(format!("{:?}", other.map(|d| d.map(|d| d.uid())))),
        }
    })
    .await;
    // Edit the KfDef while NATS is down: a new overlay for katib-controller.
    let mut edited = api.get("kubeflow").await.unwrap();
    edited.spec.applications.iter_mut().find(|a| a.name == "katib-controller").unwrap().kustomize_config.as_mut().unwrap().overlays.push("application".into());
    let apps = serde_json::to_value(&edited.spec.applications).unwrap();
    api.patch("kubeflow", &PatchParams::default(), &Patch::Merge(json!({"spec": {"applications": apps}}))).await.unwrap();
    wait_kfdef(&api, "the KfDef saying NATS is unavailable", |k| {
        k.status.as_ref().is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "Progressing" && c.reason == "NatsUnavailable"))
    })
    .await;

    stack.nats.resume().await;
    let done = wait_kfdef(&api, "Available with the edit after NATS returned", available).await;
    assert!(done.status.unwrap().components["katib"].ready);
    let katib = katibs.get("kubeflow").await.unwrap();
    let overlays = &katib.spec.core.sources.iter().find(|s| s.application == "katib-controller").unwrap().overlays;
    assert_eq!(overlays, &["application".to_string()], "the edit made while NATS was down did not arrive");
    katib_operator.quiescent().await;
    assert_eq!(applies().await - applies_before, 1.0, "the edit was applied more or less than once");
    api.delete("kubeflow", &DeleteParams::default()).await.unwrap();
    gone(&api, "kubeflow").await;
}

#[tokio::test]
async fn openshift_is_detected_from_discovery_and_fixed_user_ids_are_dropped() {
    let _serial = SERIAL.lock().await;
    still_on_built_in_templates();
    let client = client().await;
    // The API group OpenShift serves for SecurityContextConstraints, as a CRD.
    let scc: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "securitycontextconstraints.security.openshift.io"},
        "spec": {"group": "security.openshift.io", "scope": "Cluster",
                 "names": {"kind": "SecurityContextConstraints", "plural": "securitycontextconstraints", "singular": "securitycontextconstraints"},
                 "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
    }))
    .unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.patch(&scc.name_any(), &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&scc)).await.unwrap();
    eventually("security.openshift.io served", || async {
        let groups = client.list_api_groups().await.map_err(|e| e.to_string())?;
        if groups.groups.iter().any(|g| g.name == "security.openshift.io") { Ok(()) } else { Err("not yet".to_string()) }
    })
    .await;

    let stack = OperatorStack::start(&client, &[]).await;
    let ns = TestNamespace::create(&client, "e2e-openshift").await;
    let api: Api<KfDef> = Api::namespaced(client.clone(), &ns.name);
    api.create(&PostParams::default(), &kfdef(&ns.name, "v1.3.0", &["istio-install"])).await.unwrap();
    let done = wait_kfdef(&api, "Available on OpenShift", available).await;
    assert_eq!(done.status.unwrap().platform.as_deref(), Some("OpenShift"));
    let istio = Api::<Istio>::namespaced(client.clone(), &ns.name).get("kubeflow").await.unwrap();
    assert_eq!(istio.spec.core.platform, component_framework::api::component::Platform::OpenShift);
    let deployments = Api::<Deployment>::namespaced(client.clone(), &ns.name).list(&ListParams::default().labels("components.kubeflow.org/part-of=istio")).await.unwrap();
    assert!(!deployments.items.is_empty());
    let text = serde_json::to_string(&deployments.items.iter().map(|d| &d.spec).collect::<Vec<_>>()).unwrap();
    assert!(!text.contains("runAsUser") && !text.contains("fsGroup"), "fixed ids left in OpenShift workloads");

    api.delete("kubeflow", &DeleteParams::default()).await.unwrap();
    gone(&api, "kubeflow").await;
    drop(stack);
    crds.delete(&scc.name_any(), &DeleteParams::default()).await.unwrap();
    eventually("security.openshift.io no longer served", || async {
        let groups = client.list_api_groups().await.map_err(|e| e.to_string())?;
        if groups.groups.iter().any(|g| g.name == "security.openshift.io") { Err("still served".to_string()) } else { Ok(()) }
    })
    .await;
}
