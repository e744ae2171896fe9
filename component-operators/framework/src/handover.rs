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
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, Preconditions};
use kube::core::Selector;
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use tracing::info;

use crate::build::{OWNER_ANNOTATION, PART_OF_LABEL};

/// Label on a ReplicaSet left running by a replaced Deployment, naming that Deployment.
pub const RETIRED_LABEL: &str = "components.kubeflow.org/retired-from";
/// Annotation on a Deployment listing the retired ReplicaSets to delete once it is Available.
pub const RETIRING_ANNOTATION: &str = "components.kubeflow.org/retiring-replicasets";
/// How long a replaced object may take to disappear before the reconcile gives up and retries.
pub const DELETION_TIMEOUT: Duration = Duration::from_secs(30);

/// Why an object could not be replaced.
#[derive(Debug, thiserror::Error)]
pub enum ReplaceError {
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error("its selector cannot be read: {0}")]
    Selector(String),
    #[error("watching its deletion failed: {0}")]
    Watch(#[from] kube::runtime::wait::Error),
    #[error("it was still being deleted after {DELETION_TIMEOUT:?}")]
    StillDeleting,
}

/// Label selector of a live object's `spec.selector` (`matchLabels` and `matchExpressions`);
/// `None` when it selects nothing specific (an empty selector would select every pod).
fn selector_of(selector: &Value) -> Result<Option<Selector>, ReplaceError> {
    let parsed: LabelSelector = serde_json::from_value(selector.clone()).map_err(|e| ReplaceError::Selector(e.to_string()))?;
    let selector = Selector::try_from(parsed).map_err(|e| ReplaceError::Selector(e.to_string()))?;
    Ok((!selector.selects_all()).then_some(selector))
}

fn deployments(client: &Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &crate::kinds::lookup("apps/v1", "Deployment").expect("known kind").api_resource())
}

fn params(field_manager: &str) -> PatchParams {
    PatchParams { field_manager: Some(field_manager.to_string()), ..Default::default() }
}

/// Deletes the object `live` of `api` (only that incarnation: the delete is conditional on its uid)
/// with `delete`, and waits until it is gone, watching it.
pub async fn delete_and_wait(api: &Api<DynamicObject>, live: &Value, delete: DeleteParams) -> Result<(), ReplaceError> {
    let name = live["metadata"]["name"].as_str().unwrap_or_default();
    let uid = live["metadata"]["uid"].as_str().unwrap_or_default();
    let delete = DeleteParams { preconditions: Some(Preconditions { uid: Some(uid.to_string()), resource_version: None }), ..delete };
    match api.delete(name, &delete).await {
        Ok(_) => {}
        // Gone already, or replaced by another object since it was read: either way not there.
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    match tokio::time::timeout(DELETION_TIMEOUT, await_condition(api.clone(), name, conditions::is_deleted(uid))).await {
        Ok(result) => result.map(|_| ()).map_err(ReplaceError::from),
        Err(_) => Err(ReplaceError::StillDeleting),
    }
}

/// Orphans the ReplicaSets and pods of `live` (a Deployment made by `owner`) and deletes it,
/// returning once it is gone. The pods receive the labels of `desired`'s selector; the ReplicaSets
/// the retired label and the owner annotation (which later proves they are ours to delete).
/// Returns the names of the retired ReplicaSets.
pub async fn retire(client: &Client, live: &Value, desired: &Value, component: &str, owner: &str, field_manager: &str) -> Result<Vec<String>, ReplaceError> {
    let namespace = live["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = live["metadata"]["name"].as_str().unwrap_or_default();
    let uid = live["metadata"]["uid"].as_str().unwrap_or_default();
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut owned = Vec::new();
    if let Some(selector) = selector_of(&live["spec"]["selector"])? {
        for rs in replica_sets.list(&ListParams::default().labels_from(&selector)).await?.items {
            if rs.owner_references().iter().any(|o| o.uid == uid) {
                owned.push(rs);
            }
        }
    }
    let new_labels = desired["spec"]["selector"]["matchLabels"].clone();
    for rs in &owned {
        let patch = json!({"metadata": {"labels": {RETIRED_LABEL: name, PART_OF_LABEL: component}, "annotations": {OWNER_ANNOTATION: owner}}});
        replica_sets.patch(&rs.name_any(), &params(field_manager), &Patch::Merge(&patch)).await?;
        let rs_selector = json!(rs.spec.as_ref().map(|s| &s.selector));
        if let (Some(selector), true) = (selector_of(&rs_selector)?, new_labels.as_object().is_some_and(|m| !m.is_empty())) {
            for pod in pods.list(&ListParams::default().labels_from(&selector)).await?.items {
                let patch = json!({"metadata": {"labels": new_labels}});
                pods.patch(&pod.name_any(), &params(field_manager), &Patch::Merge(&patch)).await?;
            }
        }
    }
    // The garbage collector removes the owner references, then the object; the new Deployment can
    // only be created after that.
    delete_and_wait(&deployments(client, namespace), live, DeleteParams::orphan()).await?;
    info!(deployment = %format!("{namespace}/{name}"), replicasets = owned.len(), "replaced Deployment; its pods serve until the new one is Available");
    Ok(owned.iter().map(|rs| rs.name_any()).collect())
}

/// The retired ReplicaSets of Deployment `namespace/name` that `owner` made and no Deployment
/// controls.
async fn retired_by(client: &Client, namespace: &str, name: &str, owner: &str) -> Result<Vec<ReplicaSet>, kube::Error> {
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), namespace);
    let list = replica_sets.list(&ListParams::default().labels(&format!("{RETIRED_LABEL}={name}"))).await?;
    // A retired ReplicaSet the new Deployment adopted (its selector matched) is the Deployment's to scale down.
    Ok(list
        .items
        .into_iter()
        .filter(|rs| rs.owner_references().iter().all(|o| o.controller != Some(true)))
        .filter(|rs| rs.annotations().get(OWNER_ANNOTATION).map(String::as_str) == Some(owner))
        .collect())
}

/// Names of the retired ReplicaSets of Deployment `namespace/name` made by `owner` still present.
pub async fn retired_replica_sets(client: &Client, namespace: &str, name: &str, owner: &str) -> Result<Vec<String>, kube::Error> {
    Ok(retired_by(client, namespace, name, owner).await?.iter().map(|rs| rs.name_any()).collect())
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

/// Deletes the retired ReplicaSets (and so their pods) `live` names that `owner` made, then drops
/// the annotation.
pub async fn finish(client: &Client, live: &Value, owner: &str, field_manager: &str) -> Result<(), kube::Error> {
    let namespace = live["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = live["metadata"]["name"].as_str().unwrap_or_default();
    let named = retiring(live);
    let retired = retired_by(client, namespace, name, owner).await?;
    delete_replica_sets(client, namespace, retired.iter().filter(|rs| named.contains(&rs.name_any()))).await?;
    // Removed under the operator's field manager, which applied it.
    let patch = json!({"metadata": {"annotations": {RETIRING_ANNOTATION: null}}});
    deployments(client, namespace).patch(name, &params(field_manager), &Patch::Merge(&patch)).await?;
    info!(deployment = %format!("{namespace}/{name}"), "new Deployment Available; retired ReplicaSets deleted");
    Ok(())
}

/// Deletes the retired ReplicaSets of Deployment `namespace/name` made by `owner` (the Deployment is removed).
pub async fn delete_retired(client: &Client, namespace: &str, name: &str, owner: &str) -> Result<(), kube::Error> {
    delete_replica_sets(client, namespace, retired_by(client, namespace, name, owner).await?.iter()).await
}

/// Deletes `replica_sets` (their pods follow through the garbage collector), each conditional on
/// the uid whose labels and annotation were checked.
async fn delete_replica_sets<'a>(client: &Client, namespace: &str, replica_sets: impl Iterator<Item = &'a ReplicaSet>) -> Result<(), kube::Error> {
    let api: Api<ReplicaSet> = Api::namespaced(client.clone(), namespace);
    for rs in replica_sets {
        let delete = DeleteParams { preconditions: Some(Preconditions { uid: rs.uid(), resource_version: None }), ..DeleteParams::background() };
        match api.delete(&rs.name_any(), &delete).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
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
    fn selectors_become_label_queries_including_expressions() {
        let selector = |v: Value| selector_of(&v).unwrap().map(|s| s.to_string());
        assert_eq!(selector(json!({"matchLabels": {"app": "dex", "tier": "auth"}})).as_deref(), Some("app=dex,tier=auth"));
        assert_eq!(
            selector(json!({"matchLabels": {"app": "dex"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["auth", "web"]}]})).as_deref(),
            Some("app=dex,tier in (auth,web)")
        );
        assert_eq!(selector(json!({})), None, "an empty selector must not select every pod");
        assert!(selector_of(&json!({"matchExpressions": [{"key": "a", "operator": "Sometimes"}]})).is_err());
    }
}
