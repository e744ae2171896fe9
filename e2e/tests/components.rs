//! Every component operator, run standalone (no NATS) as a host process against the real control
//! plane, through the whole lifecycle of its resource: install → Ready → heal deletes (namespaced
//! and cluster-scoped) → revert an edit → no-op reconcile writes nothing → switch version →
//! refuse an unsupported version without touching anything → delete, CRDs retained.

use std::collections::BTreeMap;

use component_framework::Component;
use component_framework::api::component::{ComponentPhase, ComponentResource, InventoryEntry};
use component_framework::build::PART_OF_LABEL;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Api, Client, Resource, ResourceExt};
use kubeflow_e2e::*;
use serde_json::{Value, json};

fn dynamic_api(client: &Client, entry: &InventoryEntry) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(&entry.group, &entry.version, &entry.kind);
    let info = component_framework::kinds::lookup(&gvk.api_version(), &entry.kind).expect("known kind");
    let resource: ApiResource = info.api_resource();
    match &entry.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

/// uid and resourceVersion of every object in `inventory`.
async fn snapshot(client: &Client, inventory: &[InventoryEntry]) -> BTreeMap<String, (String, String)> {
    let mut out = BTreeMap::new();
    for entry in inventory {
        let object = dynamic_api(client, entry).get(&entry.name).await.unwrap_or_else(|e| panic!("{entry:?}: {e}"));
        out.insert(format!("{}/{:?}/{}", entry.kind, entry.namespace, entry.name), (object.uid().unwrap(), object.resource_version().unwrap()));
    }
    out
}

async fn wait_phase<K: ComponentResource>(api: &Api<K>, name: &str, what: &str, check: impl Fn(&K) -> bool) -> K {
    eventually(what, || async {
        let object = api.get(name).await.map_err(|e| e.to_string())?;
        if check(&object) { Ok(object) } else { Err(format!("{:?}", object.component_status())) }
    })
    .await
}

fn ready_at<K: ComponentResource>(version: &str) -> impl Fn(&K) -> bool + '_ {
    move |k: &K| {
        k.component_status().is_some_and(|s| {
            s.phase == Some(ComponentPhase::Ready) && s.installed_version.as_deref() == Some(version) && s.observed_generation == k.meta().generation
        })
    }
}

/// The whole lifecycle of component `C`, whose operator binary is `binary`. `spec` is merged into
/// the resource's spec (component-specific required fields); `prepare` creates what it references.
async fn lifecycle<C: Component>(binary: &str, spec: Value) {
    let client = client().await;
    install_crds(&client).await;
    let ns = TestNamespace::create(&client, &format!("e2e-{}", C::Resource::COMPONENT.name())).await;
    let _volumes = VolumeProvisioner::start(&client, &ns.name);
    let operator = OperatorProcess::start(binary, &["--namespace", &ns.name]);
    operator.wait_ready().await;

    let releases = C::releases();
    let (first, second) = (releases[0].version, releases[1].version);
    let mut full_spec = json!({"version": first, "targetNamespace": ns.name});
    full_spec.as_object_mut().unwrap().extend(spec.as_object().unwrap().clone());
    let resource: C::Resource = serde_json::from_value(json!({
        "apiVersion": C::Resource::api_version(&()), "kind": C::Resource::kind(&()),
        "metadata": {"name": "e2e"}, "spec": full_spec,
    }))
    .unwrap();
    let api: Api<C::Resource> = Api::namespaced(client.clone(), &ns.name);
    api.create(&PostParams::default(), &resource).await.unwrap();

    // Installed and Ready, readiness taken from the real Deployments (kwok makes them Available).
    let ready = wait_phase(&api, "e2e", &format!("{first} Ready"), ready_at::<C::Resource>(first)).await;
    let inventory = ready.component_status().unwrap().inventory.clone();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let selector = kube::api::ListParams::default().labels(&format!("{PART_OF_LABEL}={}", C::Resource::COMPONENT.name()));
    let live = deployments.list(&selector).await.unwrap().items;
    assert!(!live.is_empty(), "no Deployments installed");
    for d in &live {
        let available = d.status.as_ref().and_then(|s| s.conditions.as_ref()).into_iter().flatten().any(|c| c.type_ == "Available" && c.status == "True");
        assert!(available, "{} is not Available but the component reports Ready", d.name_any());
    }
    let before = snapshot(&client, &inventory).await;
    assert_eq!(before.len(), inventory.len());

    // Heal: delete one namespaced and one cluster-scoped object.
    let namespaced = inventory.iter().find(|e| e.kind == "Deployment").unwrap().clone();
    let cluster = inventory.iter().find(|e| e.namespace.is_none() && e.kind != "CustomResourceDefinition").expect("a cluster-scoped object").clone();
    for entry in [&namespaced, &cluster] {
        let api = dynamic_api(&client, entry);
        let old_uid = api.get(&entry.name).await.unwrap().uid();
        api.delete(&entry.name, &DeleteParams::background()).await.unwrap();
        eventually(&format!("{} {} recreated", entry.kind, entry.name), || async {
            match api.get_opt(&entry.name).await {
                Ok(Some(o)) if o.uid() != old_uid && o.metadata.deletion_timestamp.is_none() => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
    }

    // Drift: scale a Deployment by hand; the operator puts the desired count back.
    let desired_replicas = deployments.get(&namespaced.name).await.unwrap().spec.unwrap().replicas;
    deployments.patch(&namespaced.name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 7}}))).await.unwrap();
    eventually("edited replicas reverted", || async {
        let replicas = deployments.get(&namespaced.name).await.map_err(|e| e.to_string())?.spec.unwrap().replicas;
        if replicas == desired_replicas { Ok(()) } else { Err(format!("replicas {replicas:?}")) }
    })
    .await;
    wait_phase(&api, "e2e", "Ready again after healing", ready_at::<C::Resource>(first)).await;

    // A reconcile with nothing to change writes nothing: touch the resource's metadata only.
    let writes = operator.metric("kfop_writes_total").await.unwrap();
    let reconciles = operator.metric("kfop_reconciles_total").await.unwrap();
    api.patch("e2e", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {"e2e/touch": "1"}}}))).await.unwrap();
    eventually("a reconcile after the touch", || async {
        let now = operator.metric("kfop_reconciles_total").await.unwrap_or(0.0);
        if now > reconciles { Ok(()) } else { Err(now) }
    })
    .await;
    assert_eq!(operator.metric("kfop_writes_total").await.unwrap(), writes, "a no-op reconcile issued writes");

    // Switch to the other release.
    api.patch("e2e", &PatchParams::default(), &Patch::Merge(json!({"spec": {"version": second}}))).await.unwrap();
    let upgraded = wait_phase(&api, "e2e", &format!("{second} Ready"), ready_at::<C::Resource>(second)).await;
    let inventory = upgraded.component_status().unwrap().inventory.clone();
    for d in deployments.list(&selector).await.unwrap().items {
        assert_eq!(d.labels().get("components.kubeflow.org/version").map(String::as_str), Some(second), "{}", d.name_any());
    }

    // An unsupported version: Degraded, naming the field and the supported versions; nothing touched.
    let before = snapshot(&client, &inventory).await;
    api.patch("e2e", &PatchParams::default(), &Patch::Merge(json!({"spec": {"version": "v99.0.0"}}))).await.unwrap();
    let degraded = wait_phase(&api, "e2e", "Degraded for v99.0.0", |k: &C::Resource| {
        k.component_status().is_some_and(|s| s.phase == Some(ComponentPhase::Degraded) && s.observed_generation == k.meta().generation)
    })
    .await;
    let status = degraded.component_status().unwrap();
    let condition = status.conditions.iter().find(|c| c.type_ == "Degraded").unwrap();
    assert!(condition.message.contains("spec.version") && condition.message.contains(first) && condition.message.contains(second), "{}", condition.message);
    assert_eq!(status.installed_version.as_deref(), Some(second));
    assert_eq!(snapshot(&client, &inventory).await, before, "objects changed while the spec was invalid");
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), &ns.name);
    eventually("an InvalidSpec event", || async {
        let list = events.list(&Default::default()).await.map_err(|e| e.to_string())?;
        if list.items.iter().any(|e| e.reason.as_deref() == Some("InvalidSpec")) { Ok(()) } else { Err(format!("{} events", list.items.len())) }
    })
    .await;

    // Delete: every object goes, cluster-scoped included; CRDs stay.
    api.delete("e2e", &DeleteParams::default()).await.unwrap();
    eventually("the resource's finalizer to finish", || async {
        match api.get_opt("e2e").await {
            Ok(None) => Ok(()),
            other => Err(format!("{:?}", other.map(|o| o.map(|o| o.meta().finalizers.clone())))),
        }
    })
    .await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for entry in &inventory {
        let present = dynamic_api(&client, entry).get_opt(&entry.name).await.unwrap();
        if entry.kind == "CustomResourceDefinition" {
            assert!(crds.get_opt(&entry.name).await.unwrap().is_some(), "CRD {} was removed", entry.name);
        } else {
            let gone = present.is_none() || present.unwrap().metadata.deletion_timestamp.is_some();
            assert!(gone, "{} {:?}/{} left behind", entry.kind, entry.namespace, entry.name);
        }
    }
}

#[tokio::test]
async fn katib_lifecycle() {
    lifecycle::<katib_operator::KatibComponent>("katib-operator", json!({})).await;
}
