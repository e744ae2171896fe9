//! A malformed object never stops a watch: objects the API server stored but the operators' types
//! cannot decode (written before a schema change, or through a looser CRD version) are reported
//! with a Warning Event and skipped, and every other object keeps being reconciled.

use kube::api::{DeleteParams, PostParams};
use kube::{Api, ResourceExt};
use kubeflow_crds::component::ComponentPhase;
use kubeflow_crds::{ComponentKind, Katib, KfDef};
use kubeflow_e2e::*;
use serde_json::json;

const REASON: &str = "InvalidObject";

fn kfdef(name: &str, version: &str) -> KfDef {
    serde_json::from_value(json!({
        "apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef", "metadata": {"name": name},
        "spec": {"version": version, "applications": [{"name": "katib-crds"}]},
    }))
    .unwrap()
}

/// Waits until the meta-operator has written status for the KfDef's current generation.
async fn reconciled(api: &Api<KfDef>, name: &str) -> KfDef {
    eventually(&format!("KfDef {name} reconciled"), || async {
        let k = api.get(name).await.map_err(|e| e.to_string())?;
        let observed = k.status.as_ref().and_then(|s| s.observed_generation);
        if observed.is_some() && observed == k.metadata.generation { Ok(k) } else { Err(format!("{:?}", k.status)) }
    })
    .await
}

async fn warned(client: &kube::Client, namespace: &str, name: &str) -> String {
    eventually(&format!("{REASON} event for {name}"), || async {
        let events = warning_events(client, namespace, name, REASON).await;
        events.first().and_then(|e| e.note.clone()).ok_or("no event")
    })
    .await
}

#[tokio::test]
async fn undecodable_kfdefs_are_reported_and_skipped_while_the_others_converge() {
    let client = client().await;
    install_crds(&client).await;
    let ns = TestNamespace::create(&client, "e2e-malformed").await;
    let n = ns.name.as_str();
    // `spec.version` is a string to the types; this one is a number. Stored before the operator
    // starts, so its first list holds it: a list that failed to decode would never finish and
    // the operator would never become ready.
    store_undecodable(&client, "kfdefs.kfdef.apps.kubeflow.org", Some(n), json!({
        "kind": "KfDef", "metadata": {"name": "listed-broken", "namespace": n}, "spec": {"version": 12},
    }))
    .await;
    let stack = OperatorStack::start(&client, &ComponentKind::ALL).await;
    let note = warned(&client, n, "listed-broken").await;
    assert!(note.to_lowercase().contains("invalid type integer `12`. expected a string"), "{note}");

    // One arriving through the watch while the operator runs.
    store_undecodable(&client, "kfdefs.kfdef.apps.kubeflow.org", Some(n), json!({
        "kind": "KfDef", "metadata": {"name": "watched-broken", "namespace": n}, "spec": {"applications": "katib"},
    }))
    .await;
    warned(&client, n, "watched-broken").await;

    // A valid KfDef created after both is reconciled, and so is an edit of it.
    let api: Api<KfDef> = Api::namespaced(client.clone(), n);
    api.create(&PostParams::default(), &kfdef("kubeflow", "v1.2.0")).await.unwrap();
    let first = reconciled(&api, "kubeflow").await;
    assert!(first.finalizers().iter().any(|f| f.contains("kubeflow")), "{:?}", first.finalizers());
    let mut edited = first.clone();
    edited.spec.version = Some("v1.3.0".into());
    api.replace("kubeflow", &PostParams::default(), &edited).await.unwrap();
    let second = reconciled(&api, "kubeflow").await;
    assert!(second.metadata.generation > first.metadata.generation);
    // The broken ones are left as they are: no finalizer, no status.
    for name in ["listed-broken", "watched-broken"] {
        let raw: Api<kube::api::DynamicObject> = Api::namespaced_with(client.clone(), n, &kube::core::ApiResource::erase::<KfDef>(&()));
        let broken = raw.get(name).await.unwrap();
        assert!(broken.metadata.finalizers.is_none() && broken.data.get("status").is_none(), "{broken:?}");
    }
    api.delete("kubeflow", &DeleteParams::default()).await.unwrap();
    gone(&api, "kubeflow").await;
    drop(stack);
}

#[tokio::test]
async fn an_undecodable_component_resource_is_reported_and_skipped_while_the_others_reconcile() {
    let client = client().await;
    install_crds(&client).await;
    let ns = TestNamespace::create(&client, "e2e-malformed-katib").await;
    let n = ns.name.as_str();
    // `overrides.replicas` is a map to the types; this one is a string.
    store_undecodable(&client, "katibs.components.kubeflow.org", Some(n), json!({
        "kind": "Katib", "metadata": {"name": "broken", "namespace": n}, "spec": {"version": "v0.11.0", "overrides": {"replicas": "three"}},
    }))
    .await;
    let operator = OperatorProcess::start("katib-operator", &["--namespace", n], &[]);
    operator.wait_ready().await;
    let note = warned(&client, n, "broken").await;
    assert!(note.contains("three"), "{note}");

    // A valid resource next to it is reconciled (Unmanaged: reported, nothing installed).
    let api: Api<Katib> = Api::namespaced(client.clone(), n);
    let katib: Katib = serde_json::from_value(json!({
        "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Katib", "metadata": {"name": "katib"},
        "spec": {"version": "v0.11.0", "managementState": "Unmanaged"},
    }))
    .unwrap();
    api.create(&PostParams::default(), &katib).await.unwrap();
    eventually("Katib katib Unmanaged", || async {
        let k = api.get("katib").await.map_err(|e| e.to_string())?;
        let phase = k.status.as_ref().and_then(|s| s.phase);
        if phase == Some(ComponentPhase::Unmanaged) { Ok(()) } else { Err(format!("{:?} (log: {})", k.status, operator.log.display())) }
    })
    .await;
    let raw: Api<kube::api::DynamicObject> = Api::namespaced_with(client.clone(), n, &kube::core::ApiResource::erase::<Katib>(&()));
    let broken = raw.get("broken").await.unwrap();
    assert!(broken.metadata.finalizers.is_none() && broken.data.get("status").is_none(), "{broken:?}");
    api.delete("katib", &DeleteParams::default()).await.unwrap();
    gone(&api, "katib").await;
}
