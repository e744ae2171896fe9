//! The KFAM bindings, watched: every RoleBinding that this API or the Profile controller made
//! (label `app.kubernetes.io/managed-by: kfam | profiles-operator`) and that stands for a binding
//! (`user` and `role` annotations), kept as the few strings a listing needs. `GET
//! /kfam/v1/bindings` reads this, the Profile cache and the made namespaces, and asks the API
//! server nothing, however many Profiles there are.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};

use crate::kfam::{self, Binding, RoleRef, Subject};
use crate::tenant::{MANAGED_BY_LABEL, ROLE_ANNOTATION, USER_ANNOTATION};

/// The bindings by namespace, then RoleBinding name.
type Table = HashMap<String, BTreeMap<String, Binding>>;

#[derive(Clone, Default)]
pub struct Bindings {
    table: Arc<Mutex<Table>>,
    ready: Arc<std::sync::atomic::AtomicBool>,
}

/// The binding a RoleBinding stands for: one with `user` and `role` annotations and a subject.
pub fn binding_of(rb: &RoleBinding) -> Option<Binding> {
    let (Some(role), Some(_)) = (rb.annotations().get(ROLE_ANNOTATION), rb.annotations().get(USER_ANNOTATION)) else { return None };
    let subject = rb.subjects.as_ref().and_then(|s| s.first())?;
    Some(Binding {
        user: Some(Subject { kind: subject.kind.clone(), name: subject.name.clone(), api_group: None }),
        referred_namespace: rb.namespace().unwrap_or_default(),
        role_ref: Some(RoleRef { kind: "ClusterRole".into(), name: role.clone(), api_group: None }),
        status: None,
    })
}

impl Bindings {
    /// Starts the watch (in the background) and returns its cache.
    pub fn start(client: Client) -> Self {
        let bindings = Self::default();
        let selector = format!("{MANAGED_BY_LABEL} in ({},{})", kfam::MANAGED_BY, crate::tenant::MANAGED_BY);
        let events = watcher::watcher(Api::<RoleBinding>::all(client), watcher::Config::default().labels(&selector));
        let filed = bindings.clone();
        tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            let mut next: Option<Table> = None;
            while let Some(event) = events.next().await {
                match event {
                    Ok(event) => filed.file(event, &mut next),
                    Err(e) => tracing::debug!(error = %e, "KFAM bindings watch"),
                }
            }
        });
        bindings
    }

    /// Files one watch event; a relist is built aside in `next` and replaces the table at its end.
    fn file(&self, event: Event<RoleBinding>, next: &mut Option<Table>) {
        let key = |rb: &RoleBinding| (rb.namespace().unwrap_or_default(), rb.name_any());
        let mut table = self.table.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match event {
            Event::Init => *next = Some(Table::new()),
            Event::InitApply(rb) => {
                if let (Some(next), Some(binding)) = (next.as_mut(), binding_of(&rb)) {
                    let (namespace, name) = key(&rb);
                    next.entry(namespace).or_default().insert(name, binding);
                }
            }
            Event::InitDone => {
                *table = next.take().unwrap_or_default();
                self.ready.store(true, std::sync::atomic::Ordering::Release);
            }
            Event::Apply(rb) => {
                let (namespace, name) = key(&rb);
                match binding_of(&rb) {
                    Some(binding) => drop(table.entry(namespace).or_default().insert(name, binding)),
                    None => drop(table.get_mut(&namespace).map(|n| n.remove(&name))),
                }
            }
            Event::Delete(rb) => {
                let (namespace, name) = key(&rb);
                if let Some(in_namespace) = table.get_mut(&namespace) {
                    in_namespace.remove(&name);
                    if in_namespace.is_empty() {
                        table.remove(&namespace);
                    }
                }
            }
        }
    }

    /// Whether the first list is in.
    pub fn is_ready(&self) -> bool {
        self.ready.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The bindings in `namespace`.
    pub fn in_namespace(&self, namespace: &str) -> Vec<Binding> {
        let table = self.table.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        table.get(namespace).map(|n| n.values().cloned().collect()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn role_binding(namespace: &str, name: &str, user: Option<&str>) -> RoleBinding {
        let annotations = user.map(|u| json!({USER_ANNOTATION: u, ROLE_ANNOTATION: "edit"})).unwrap_or(json!({}));
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kubeflow-edit"},
            "subjects": [{"kind": "User", "name": user.unwrap_or("nobody")}],
        }))
        .unwrap()
    }

    fn users(bindings: &Bindings, namespace: &str) -> Vec<String> {
        bindings.in_namespace(namespace).into_iter().map(|b| b.user.unwrap().name).collect()
    }

    #[test]
    fn the_cache_follows_lists_edits_and_deletes() {
        let bindings = Bindings::default();
        let mut next = None;
        bindings.file(Event::Init, &mut next);
        bindings.file(Event::InitApply(role_binding("team", "a", Some("alice@example.com"))), &mut next);
        bindings.file(Event::InitApply(role_binding("team", "plain", None)), &mut next);
        assert!(!bindings.is_ready());
        assert!(users(&bindings, "team").is_empty(), "a relist shows only when complete");
        bindings.file(Event::InitDone, &mut next);
        assert!(bindings.is_ready());
        assert_eq!(users(&bindings, "team"), ["alice@example.com"], "a RoleBinding without annotations is no binding");
        bindings.file(Event::Apply(role_binding("team", "b", Some("bob@example.com"))), &mut next);
        assert_eq!(users(&bindings, "team"), ["alice@example.com", "bob@example.com"]);
        // Its annotations removed: no longer a binding.
        bindings.file(Event::Apply(role_binding("team", "a", None)), &mut next);
        bindings.file(Event::Delete(role_binding("team", "b", Some("bob@example.com"))), &mut next);
        assert!(users(&bindings, "team").is_empty());
        // A relist replaces everything, what was deleted meanwhile included.
        bindings.file(Event::Apply(role_binding("other", "c", Some("carol@example.com"))), &mut next);
        bindings.file(Event::Init, &mut next);
        bindings.file(Event::InitApply(role_binding("team", "d", Some("dave@example.com"))), &mut next);
        bindings.file(Event::InitDone, &mut next);
        assert_eq!(users(&bindings, "team"), ["dave@example.com"]);
        assert!(users(&bindings, "other").is_empty());
    }
}
