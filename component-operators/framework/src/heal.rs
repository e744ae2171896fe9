//! The heal fast path: an owned object deleted by someone else is applied again straight from its
//! watch event, without waiting behind the full reconciles queued for its resource. The full
//! reconcile the same event triggers still runs (and finds the object in place).
//!
//! Only an object whose deleted state proves the resource made it ([`build::made_by`]) and that
//! is in the resource's last desired set is re-applied, and only while the resource exists and is
//! `Managed`. A reconcile records its desired set before it prunes anything, and removal (finalizer,
//! `Removed`, `Unmanaged`) forgets it before deleting, so the operator's own deletes are never
//! undone here.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use kube::api::{DynamicObject, Patch, PatchParams};
use kube::core::DeserializeGuard;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use kubeflow_crds::component::{ComponentResource, ManagementState};
use serde_json::Value;
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::build::{self, OWNER_ANNOTATION};
use crate::kinds::KindInfo;
use crate::metrics::Metrics;

/// `(kind, namespace, name)` of a desired object.
type ObjectKey = (String, Option<String>, String);

/// The last desired object set of every resource (by owner id, `namespace/name`), and the uids of
/// the objects the operator is deleting itself (a replacement or a handover), which must not be
/// applied again from their deletion event: the reconcile creates their successor itself, with
/// what only it knows (e.g. the ReplicaSets being retired).
#[derive(Default)]
pub struct LastDesired {
    sets: Mutex<HashMap<String, Arc<DesiredSet>>>,
    deleting: Mutex<HashSet<String>>,
}

fn key_of(object: &Value) -> ObjectKey {
    let metadata = &object["metadata"];
    (object["kind"].as_str().unwrap_or_default().to_string(), metadata["namespace"].as_str().map(String::from), metadata["name"].as_str().unwrap_or_default().to_string())
}

/// What one resource last wanted, and the client its writes are made with (see
/// [`crate::installer`]).
struct DesiredSet {
    objects: BTreeMap<ObjectKey, Value>,
    writer: Client,
}

impl LastDesired {
    /// Records what `owner` wants now (before anything that left the set is pruned), and who
    /// writes it.
    pub fn remember(&self, owner: &str, objects: &[Value], writer: &Client) {
        let objects = objects.iter().map(|o| (key_of(o), o.clone())).collect();
        self.sets.lock().expect("desired sets").insert(owner.to_string(), Arc::new(DesiredSet { objects, writer: writer.clone() }));
    }

    /// `owner` is being removed or left alone: nothing of it is healed any more.
    pub fn forget(&self, owner: &str) {
        self.sets.lock().expect("desired sets").remove(owner);
    }

    /// The operator is about to delete the object `uid` itself.
    pub fn deleting(&self, uid: &str) {
        self.deleting.lock().expect("deletions").insert(uid.to_string());
    }

    /// Whether the deletion of `uid` was the operator's own (and forgets it).
    fn deleted_by_us(&self, uid: &str) -> bool {
        self.deleting.lock().expect("deletions").remove(uid)
    }

    /// The desired state of `deleted` in `owner`'s last set, and who writes it.
    fn get(&self, owner: &str, deleted: &Value) -> Option<(Value, Client)> {
        let sets = self.sets.lock().expect("desired sets");
        let set = sets.get(owner)?;
        Some((set.objects.get(&key_of(deleted))?.clone(), set.writer.clone()))
    }
}

/// Re-applies the objects reported on `deleted` (deleted objects of the watched kinds) when the
/// rules above allow it; runs until the watches end.
pub async fn run<K: ComponentResource>(
    mut deleted: mpsc::UnboundedReceiver<(&'static KindInfo, DynamicObject)>,
    resources: Store<DeserializeGuard<K>>,
    desired: Arc<LastDesired>,
    field_manager: String,
    metrics: Arc<Metrics>,
) {
    let component = K::COMPONENT.name();
    let params = PatchParams::apply(&field_manager).force();
    while let Some((info, object)) = deleted.recv().await {
        let Some(owner) = object.annotations().get(OWNER_ANNOTATION).cloned() else { continue };
        let Some((namespace, name)) = owner.split_once('/') else { continue };
        let managed = resources.get(&ObjectRef::new(name).within(namespace)).is_some_and(|guard| {
            guard.0.as_ref().is_ok_and(|r| r.meta().deletion_timestamp.is_none() && r.core().management_state == ManagementState::Managed)
        });
        let mut live = serde_json::to_value(&object).expect("objects serialise");
        live["kind"] = info.kind.into();
        if desired.deleted_by_us(&object.uid().unwrap_or_default()) || !managed || !build::made_by(&live, info, component, &owner) {
            continue;
        }
        let Some((wanted, writer)) = desired.get(&owner, &live) else { continue };
        let api = info.api(&writer, live["metadata"]["namespace"].as_str());
        let what = format!("{} {}", info.kind, live["metadata"]["name"].as_str().unwrap_or_default());
        match api.patch(&object.name_any(), &params, &Patch::Apply(&wanted)).await {
            Ok(_) => {
                metrics.healed();
                info!(object = %what, %owner, "deleted object applied again");
            }
            // The reconcile got there first, or the API server is unavailable: the reconcile the
            // same event triggered takes care of it.
            Err(error) => warn!(object = %what, %error, "fast heal left to the reconcile"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A client that is never called: the sets only hand it on (built inside a runtime).
    fn client() -> Client {
        Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap()
    }

    fn wanted(desired: &LastDesired, owner: &str, deleted: &Value) -> Option<Value> {
        desired.get(owner, deleted).map(|(wanted, _)| wanted)
    }

    // A runtime only because building a client spawns its request buffer.
    #[tokio::test]
    async fn only_objects_of_the_last_desired_set_of_their_owner_are_healed() {
        let desired = LastDesired::default();
        let ui = json!({"kind": "Deployment", "metadata": {"name": "katib-ui", "namespace": "team"}, "spec": {"replicas": 1}});
        let role = json!({"kind": "ClusterRole", "metadata": {"name": "katib-ui-team"}});
        desired.remember("team/katib", &[ui.clone(), role.clone()], &client());
        let deleted = json!({"kind": "Deployment", "metadata": {"name": "katib-ui", "namespace": "team", "uid": "1"}, "spec": {"replicas": 7}});
        assert_eq!(wanted(&desired, "team/katib", &deleted), Some(ui.clone()), "the desired object, not the deleted state");
        assert_eq!(wanted(&desired, "team/katib", &json!({"kind": "ClusterRole", "metadata": {"name": "katib-ui-team"}})), Some(role));
        assert_eq!(wanted(&desired, "other/katib", &deleted), None, "another resource's set");
        assert_eq!(wanted(&desired, "team/katib", &json!({"kind": "Deployment", "metadata": {"name": "katib-ui", "namespace": "other"}})), None);
        // A new set (a version switch) replaces the old one before anything is pruned.
        desired.remember("team/katib", std::slice::from_ref(&ui), &client());
        assert_eq!(wanted(&desired, "team/katib", &json!({"kind": "ClusterRole", "metadata": {"name": "katib-ui-team"}})), None);
        desired.forget("team/katib");
        assert_eq!(wanted(&desired, "team/katib", &deleted), None);
        // Deletions the operator makes itself are recognised once.
        desired.deleting("uid-1");
        assert!(desired.deleted_by_us("uid-1"));
        assert!(!desired.deleted_by_us("uid-1"));
        assert!(!desired.deleted_by_us("uid-2"));
    }
}
