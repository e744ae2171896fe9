//! Replacing a Deployment whose selector changed without an outage.
//!
//! The API server refuses to change `spec.selector` in place, so the Deployment must be deleted
//! and created again. Deleting it the usual way takes its pods with it, and nothing serves until
//! the new pods are up. Instead the old Deployment is deleted with orphan propagation: its
//! ReplicaSets and pods keep running, labelled as retired, and the old pods also receive the new
//! selector's labels so Services that moved to the new selector keep them as endpoints. The new
//! Deployment names the retired ReplicaSets in an annotation; once it is Available they are deleted.
//! A retired ReplicaSet never matches the new Deployment's ReplicaSets: those select on their own
//! `pod-template-hash`.

use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use tracing::info;

use crate::build::PART_OF_LABEL;

/// Label on a ReplicaSet left running by a replaced Deployment, naming that Deployment.
pub const RETIRED_LABEL: &str = "components.kubeflow.org/retired-from";
/// Annotation on a Deployment listing the retired ReplicaSets to delete once it is Available.
pub const RETIRING_ANNOTATION: &str = "components.kubeflow.org/retiring-replicasets";

/// Label selector (`k=v,…`) of a `matchLabels` map; `None` when there is none to select with.
fn selector_string(match_labels: &Value) -> Option<String> {
    let labels = match_labels.as_object().filter(|m| !m.is_empty())?;
    Some(labels.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())).collect::<Vec<_>>().join(","))
}

fn deployments(client: &Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &crate::kinds::lookup("apps/v1", "Deployment").expect("known kind").api_resource())
}

/// Orphans the ReplicaSets and pods of `live` (a Deployment) and deletes it, returning once it is
/// gone. The pods receive the labels of `desired`'s selector; the ReplicaSets the retired label.
/// Returns the names of the retired ReplicaSets.
pub async fn retire(client: &Client, live: &Value, desired: &Value, component: &str) -> Result<Vec<String>, kube::Error> {
    let namespace = live["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = live["metadata"]["name"].as_str().unwrap_or_default();
    let uid = live["metadata"]["uid"].as_str().unwrap_or_default();
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut owned = Vec::new();
    if let Some(selector) = selector_string(&live["spec"]["selector"]["matchLabels"]) {
        for rs in replica_sets.list(&ListParams::default().labels(&selector)).await?.items {
            if rs.owner_references().iter().any(|o| o.uid == uid) {
                owned.push(rs);
            }
        }
    }
    let new_labels = desired["spec"]["selector"]["matchLabels"].clone();
    for rs in &owned {
        let rs_name = rs.name_any();
        let patch = json!({"metadata": {"labels": {RETIRED_LABEL: name, PART_OF_LABEL: component}}});
        replica_sets.patch(&rs_name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        let rs_selector = json!(rs.spec.as_ref().and_then(|s| s.selector.match_labels.clone()));
        if let (Some(selector), true) = (selector_string(&rs_selector), new_labels.as_object().is_some_and(|m| !m.is_empty())) {
            for pod in pods.list(&ListParams::default().labels(&selector)).await?.items {
                let patch = json!({"metadata": {"labels": new_labels}});
                pods.patch(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
            }
        }
    }
    let deployments = deployments(client, namespace);
    match deployments.delete(name, &DeleteParams::orphan()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e),
    }
    // The garbage collector removes the owner references, then the object; the new Deployment can
    // only be created after that.
    for _ in 0..600 {
        match deployments.get_opt(name).await? {
            Some(d) if d.uid().as_deref() == Some(uid) => tokio::time::sleep(Duration::from_millis(50)).await,
            _ => break,
        }
    }
    info!(deployment = %format!("{namespace}/{name}"), replicasets = owned.len(), "replaced Deployment; its pods serve until the new one is Available");
    Ok(owned.iter().map(|rs| rs.name_any()).collect())
}

/// Names of the retired ReplicaSets of Deployment `namespace/name` still present.
pub async fn retired_replica_sets(client: &Client, namespace: &str, name: &str) -> Result<Vec<String>, kube::Error> {
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), namespace);
    let list = replica_sets.list(&ListParams::default().labels(&format!("{RETIRED_LABEL}={name}"))).await?;
    // A retired ReplicaSet the new Deployment adopted (its selector matched) is the Deployment's to scale down.
    Ok(list.items.iter().filter(|rs| rs.owner_references().iter().all(|o| o.controller != Some(true))).map(|rs| rs.name_any()).collect())
}

/// `desired` with the annotation naming `retiring` ReplicaSets (unchanged when there are none).
pub fn with_retiring(desired: &Value, retiring: &[String]) -> Value {
    let mut object = desired.clone();
    if !retiring.is_empty() {
        object["metadata"]["annotations"][RETIRING_ANNOTATION] = json!(retiring.join(","));
    }
    object
}

/// The retired ReplicaSets an Available Deployment `live` still names (pure).
pub fn retiring(live: &Value) -> Vec<String> {
    live["metadata"]["annotations"][RETIRING_ANNOTATION].as_str().map(|s| s.split(',').filter(|n| !n.is_empty()).map(String::from).collect()).unwrap_or_default()
}

/// Deletes the retired ReplicaSets (and so their pods) `live` names, then drops the annotation.
pub async fn finish(client: &Client, live: &Value, field_manager: &str) -> Result<(), kube::Error> {
    let namespace = live["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = live["metadata"]["name"].as_str().unwrap_or_default();
    delete_replica_sets(client, namespace, &retiring(live)).await?;
    // Removed under the operator's field manager, which applied it.
    let patch = json!({"metadata": {"annotations": {RETIRING_ANNOTATION: null}}});
    deployments(client, namespace).patch(name, &PatchParams { field_manager: Some(field_manager.to_string()), ..Default::default() }, &Patch::Merge(&patch)).await?;
    info!(deployment = %format!("{namespace}/{name}"), "new Deployment Available; retired ReplicaSets deleted");
    Ok(())
}

/// Deletes the retired ReplicaSets of Deployment `namespace/name` (the Deployment is removed).
pub async fn delete_retired(client: &Client, namespace: &str, name: &str) -> Result<(), kube::Error> {
    delete_replica_sets(client, namespace, &retired_replica_sets(client, namespace, name).await?).await
}

/// Deletes ReplicaSets `names` (their pods follow through the garbage collector).
async fn delete_replica_sets(client: &Client, namespace: &str, names: &[String]) -> Result<(), kube::Error> {
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), namespace);
    for rs in names {
        match replica_sets.delete(rs, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_retiring_annotation_round_trips() {
        let desired = json!({"metadata": {"name": "dex", "annotations": {"a": "b"}}});
        assert_eq!(with_retiring(&desired, &[]), desired);
        let annotated = with_retiring(&desired, &["dex-5d9f".into(), "dex-77c1".into()]);
        assert_eq!(retiring(&annotated), ["dex-5d9f", "dex-77c1"]);
        assert_eq!(annotated["metadata"]["annotations"]["a"], "b");
        assert!(retiring(&desired).is_empty());
    }

    #[test]
    fn selectors_are_rendered_for_label_queries() {
        assert_eq!(selector_string(&json!({"app": "dex", "tier": "auth"})).as_deref(), Some("app=dex,tier=auth"));
        assert_eq!(selector_string(&json!({})), None);
        assert_eq!(selector_string(&Value::Null), None);
    }
}
