//! What the Profile controller knows of the objects Profiles made (labelled managed-by): one
//! watch of metadata per kind, filed per namespace, and what the controller last applied.
//!
//! An object is applied again only when what it should hold changed (another hash) or when
//! someone else wrote it: its resource version moved past the one the apply returned, or it
//! vanished after the watch had shown it. So a reconcile of a converged Profile sends nothing.
//!
//! Only what the controller decides on is kept of each object ([`Shown`]): resource version, uid,
//! Profile owners, profile label, and for namespaces their label keys and owner annotation. A
//! reflector store would keep every object's whole metadata, about ten times as much: at 1,000
//! Profiles (9,000 objects) most of the operator's memory.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use component_framework::api::profile::Profile;
use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::api::{DynamicObject, PartialObjectMeta};
use kube::runtime::watcher::Event;

use crate::tenant::{self, PROFILE_LABEL};

/// A key of a namespace's objects: `(kind, name)`.
pub(crate) type Key = (&'static str, String);

/// What a watch showed of one object: what the controller decides on, nothing else.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Shown {
    pub resource_version: Box<str>,
    pub uid: Box<str>,
    /// The uids of its owners of kind Profile.
    pub profile_owners: Box<[Box<str>]>,
    /// Its `profiles.kubeflow.org/profile` label.
    pub profile_label: Option<Box<str>>,
    /// Namespaces only: the keys of its labels (which of those the settings remove are present).
    pub label_keys: Box<[Box<str>]>,
    /// Namespaces only: its owner annotation (named when the namespace is refused).
    pub owner_annotation: Option<Box<str>>,
}

impl Shown {
    /// What is kept of an object of `kind` with `meta`.
    pub fn of(kind: &str, meta: &ObjectMeta) -> Self {
        let boxed = |s: &String| Box::<str>::from(s.as_str());
        let namespace = kind == "Namespace";
        Shown {
            resource_version: meta.resource_version.as_ref().map(boxed).unwrap_or_default(),
            uid: meta.uid.as_ref().map(boxed).unwrap_or_default(),
            profile_owners: meta.owner_references.iter().flatten().filter(|o| o.kind == "Profile").map(|o| boxed(&o.uid)).collect(),
            profile_label: meta.labels.as_ref().and_then(|l| l.get(PROFILE_LABEL)).map(boxed),
            label_keys: if namespace { meta.labels.iter().flatten().map(|(k, _)| boxed(k)).collect() } else { Box::default() },
            owner_annotation: if namespace { meta.annotations.as_ref().and_then(|a| a.get(tenant::OWNER_ANNOTATION)).map(boxed) } else { None },
        }
    }

    /// Whether it was made for `profile`: owned by it (by uid), as [`tenant::made_for`].
    pub fn made_for(&self, profile: &Profile) -> bool {
        let uid = profile.uid().unwrap_or_default();
        !uid.is_empty() && self.profile_owners.iter().any(|o| **o == *uid)
    }

    /// Whether it was made here for `profile`: its profile label names it and it is owned by it.
    pub fn made_here_for(&self, profile: &Profile) -> bool {
        self.profile_label.as_deref() == Some(profile.name_any().as_str()) && self.made_for(profile)
    }

    pub fn has_label(&self, key: &str) -> bool {
        self.label_keys.iter().any(|k| **k == *key)
    }
}

/// The last apply of one object.
#[derive(Debug)]
struct Applied {
    /// Hash of the applied object.
    hash: u64,
    /// The resource version the apply returned.
    resource_version: Box<str>,
    /// The watch has shown the object at that version (or later): from then on, its absence
    /// means it was deleted rather than not yet seen.
    shown: bool,
}

#[derive(Debug, Default)]
struct Entry {
    /// What the watch shows; `None`: not shown (not yet, or deleted).
    shown: Option<Shown>,
    applied: Option<Applied>,
}

/// Per namespace (a Namespace filed under its own name), its objects. Shared with the watches,
/// which file what they show.
#[derive(Clone, Default)]
pub(crate) struct Made(Arc<Mutex<HashMap<String, BTreeMap<Key, Entry>>>>);

/// Whether resource version `a` is older than `b`. Resource versions are etcd revisions; a
/// version that is not a number is never called older (the object is applied again).
pub(crate) fn older(a: &str, b: &str) -> bool {
    matches!((a.parse::<u64>(), b.parse::<u64>()), (Ok(a), Ok(b)) if a < b)
}

/// The namespace an object is filed under: its own, or a Namespace's name.
fn filed_under(kind: &str, namespace: Option<&str>, name: &str) -> String {
    if kind == "Namespace" { name.to_string() } else { namespace.unwrap_or_default().to_string() }
}

impl Made {
    fn namespaces(&self) -> MutexGuard<'_, HashMap<String, BTreeMap<Key, Entry>>> {
        self.0.lock().expect("not poisoned")
    }

    /// What the watch shows of `kind` `namespace/name`.
    pub fn shown(&self, kind: &'static str, namespace: Option<&str>, name: &str) -> Option<Shown> {
        let filed = filed_under(kind, namespace, name);
        self.namespaces().get(&filed)?.get(&(kind, name.to_string()))?.shown.clone()
    }

    /// Whether `kind` `namespace/name` (with `hash`) holds what was last applied to it.
    pub fn unchanged(&self, kind: &'static str, namespace: Option<&str>, name: &str, hash: u64) -> bool {
        let filed = filed_under(kind, namespace, name);
        let namespaces = self.namespaces();
        let Some(entry) = namespaces.get(&filed).and_then(|n| n.get(&(kind, name.to_string()))) else { return false };
        let Some(last) = &entry.applied else { return false };
        last.hash == hash
            && match &entry.shown {
                // At the version the apply returned, or an older one whose newer event is on its way.
                Some(shown) => shown.resource_version == last.resource_version || older(&shown.resource_version, &last.resource_version),
                // Not yet shown by the watch, rather than deleted since.
                None => !last.shown,
            }
    }

    /// Files an apply of `kind` `namespace/name` with `hash` that returned `resource_version`.
    pub fn record(&self, kind: &'static str, namespace: Option<&str>, name: &str, hash: u64, resource_version: &str) {
        let filed = filed_under(kind, namespace, name);
        let mut namespaces = self.namespaces();
        let entry = namespaces.entry(filed).or_default().entry((kind, name.to_string())).or_default();
        let shown = entry.shown.as_ref().is_some_and(|s| !older(&s.resource_version, resource_version));
        entry.applied = Some(Applied { hash, resource_version: resource_version.into(), shown });
    }

    /// Forgets the last apply of `kind` `namespace/name` (pruned).
    pub fn forget(&self, kind: &'static str, namespace: &str, name: &str) {
        let mut namespaces = self.namespaces();
        let Some(objects) = namespaces.get_mut(namespace) else { return };
        let key = (kind, name.to_string());
        if let Some(entry) = objects.get_mut(&key) {
            entry.applied = None;
            if entry.shown.is_none() {
                objects.remove(&key);
            }
        }
    }

    /// The objects the watches show in `namespace` (not the Namespace itself), with what they show.
    pub fn shown_in(&self, namespace: &str) -> Vec<(Key, Shown)> {
        let namespaces = self.namespaces();
        let objects = namespaces.get(namespace).into_iter().flatten();
        objects.filter(|((kind, _), _)| *kind != "Namespace").filter_map(|(key, entry)| Some((key.clone(), entry.shown.clone()?))).collect()
    }

    /// Files what a watch of `kind` showed of `meta` (`exists`: not deleted); returns the
    /// namespace it is filed under.
    pub fn observed(&self, kind: &'static str, meta: &ObjectMeta, exists: bool) -> String {
        let name = meta.name.clone().unwrap_or_default();
        let filed = filed_under(kind, meta.namespace.as_deref(), &name);
        let mut namespaces = self.namespaces();
        if kind == "Namespace" && !exists {
            // The namespace and everything in it are gone.
            namespaces.remove(&filed);
            return filed;
        }
        let objects = namespaces.entry(filed.clone()).or_default();
        let key = (kind, name);
        if exists {
            let shown = Shown::of(kind, meta);
            let entry = objects.entry(key).or_default();
            if let Some(last) = &mut entry.applied {
                last.shown |= !older(&shown.resource_version, &last.resource_version);
            }
            entry.shown = Some(shown);
        } else if let Some(entry) = objects.get_mut(&key) {
            entry.shown = None;
            if entry.applied.is_none() {
                objects.remove(&key);
            }
        }
        filed
    }

    /// After a (re)list of `kind` that showed `listed` (namespace, name): every object of `kind`
    /// shown before and not listed now is deleted. Returns the namespaces they were filed under.
    fn relisted(&self, kind: &'static str, listed: &BTreeSet<(String, String)>) -> Vec<String> {
        let mut namespaces = self.namespaces();
        let mut vanished = Vec::new();
        namespaces.retain(|namespace, objects| {
            let mut keep = true;
            objects.retain(|(k, name), entry| {
                if *k != kind || entry.shown.is_none() || listed.contains(&(namespace.clone(), name.clone())) {
                    return true;
                }
                vanished.push(namespace.clone());
                keep &= kind != "Namespace";
                entry.shown = None;
                entry.applied.is_some()
            });
            keep
        });
        vanished
    }

    /// Files the events of a watch of `kind`; yields the namespaces whose objects changed, each
    /// the name of the Profile that made them. The objects of a (re)list are yielded once the whole
    /// list is filed, with the namespaces of objects that vanished meanwhile.
    pub fn file<S>(self, kind: &'static str, events: S) -> impl Stream<Item = String> + Send + 'static
    where
        S: Stream<Item = Event<PartialObjectMeta<DynamicObject>>> + Send + 'static,
    {
        let mut listing: Option<BTreeSet<(String, String)>> = None;
        events.flat_map(move |event| {
            let changed = match event {
                Event::Apply(object) => vec![self.observed(kind, &object.metadata, true)],
                Event::Delete(object) => vec![self.observed(kind, &object.metadata, false)],
                Event::Init => {
                    listing = Some(BTreeSet::new());
                    Vec::new()
                }
                Event::InitApply(object) => {
                    let filed = self.observed(kind, &object.metadata, true);
                    listing.get_or_insert_default().insert((filed, object.name_any()));
                    Vec::new()
                }
                Event::InitDone => {
                    let listed = listing.take().unwrap_or_default();
                    let vanished = self.relisted(kind, &listed);
                    let changed: BTreeSet<String> = listed.into_iter().map(|(namespace, _)| namespace).chain(vanished).collect();
                    changed.into_iter().collect()
                }
            };
            futures::stream::iter(changed)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const HASH: u64 = 7;

    fn meta(kind: &str, resource_version: &str) -> ObjectMeta {
        let namespace = (kind != "Namespace").then_some("alice");
        let name = if kind == "Namespace" { "alice" } else { "edit" };
        serde_json::from_value(json!({"name": name, "namespace": namespace, "resourceVersion": resource_version, "uid": "u-1",
            "labels": {PROFILE_LABEL: "alice", "team": "a"}, "annotations": {tenant::OWNER_ANNOTATION: "alice@example.com"},
            "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "Profile", "name": "alice", "uid": "p-1"},
                                {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "c-1"}]}))
        .unwrap()
    }

    /// A [`Made`] of one RoleBinding `alice/edit`, shown and applied as the test says.
    struct Watch(Made);

    impl Watch {
        fn shows(&self, resource_version: &str) {
            self.0.observed("RoleBinding", &meta("RoleBinding", resource_version), true);
        }
        fn shows_deleted(&self, resource_version: &str) {
            self.0.observed("RoleBinding", &meta("RoleBinding", resource_version), false);
        }
        fn applied(&self, resource_version: &str) {
            self.0.record("RoleBinding", Some("alice"), "edit", HASH, resource_version);
        }
        fn unchanged(&self, hash: u64) -> bool {
            self.0.unchanged("RoleBinding", Some("alice"), "edit", hash)
        }
    }

    fn watch() -> Watch {
        Watch(Made::default())
    }

    #[test]
    fn an_object_never_applied_is_applied() {
        let watch = watch();
        assert!(!watch.unchanged(HASH));
        // Even when the watch shows it (made by an earlier run of the operator).
        watch.shows("10");
        assert!(!watch.unchanged(HASH));
    }

    #[test]
    fn an_object_at_the_applied_version_is_not_applied_again() {
        let watch = watch();
        watch.applied("10");
        // The watch has not shown it yet: not deleted, only not seen.
        assert!(watch.unchanged(HASH));
        watch.shows("10");
        assert!(watch.unchanged(HASH));
        // Another desired content is applied.
        assert!(!watch.unchanged(HASH + 1));
    }

    #[test]
    fn an_older_version_in_the_cache_is_awaited_not_reapplied() {
        let watch = watch();
        watch.shows("9");
        watch.applied("10");
        assert!(watch.unchanged(HASH));
    }

    #[test]
    fn an_object_someone_else_changed_is_applied_again() {
        let watch = watch();
        watch.applied("10");
        watch.shows("10");
        watch.shows("11");
        assert!(!watch.unchanged(HASH));
    }

    #[test]
    fn an_object_deleted_after_the_watch_showed_it_is_applied_again() {
        let watch = watch();
        watch.applied("10");
        watch.shows("10");
        watch.shows_deleted("12");
        assert!(!watch.unchanged(HASH));
    }

    #[test]
    fn a_resource_version_that_is_not_a_number_is_never_older() {
        assert!(older("9", "10"));
        assert!(!older("10", "10"));
        assert!(!older("11", "10"));
        assert!(!older("a", "10"));
        let watch = watch();
        watch.applied("10");
        watch.shows("opaque");
        assert!(!watch.unchanged(HASH));
    }

    #[test]
    fn a_deleted_namespace_forgets_what_was_applied_in_it() {
        let watch = watch();
        watch.applied("10");
        watch.shows("10");
        assert_eq!(watch.0.shown_in("alice").len(), 1);
        watch.0.observed("Namespace", &meta("Namespace", "20"), false);
        assert!(watch.0.shown_in("alice").is_empty());
        // Made again from nothing: the object in the new namespace is applied.
        assert!(!watch.unchanged(HASH));
    }

    #[test]
    fn only_what_decisions_need_is_kept_and_namespaces_keep_their_labels() {
        let binding = Shown::of("RoleBinding", &meta("RoleBinding", "10"));
        assert_eq!(binding.resource_version.as_ref(), "10");
        assert_eq!(binding.uid.as_ref(), "u-1");
        assert_eq!(binding.profile_owners.iter().map(|o| o.as_ref()).collect::<Vec<_>>(), ["p-1"], "owners of kind Profile only");
        assert_eq!(binding.profile_label.as_deref(), Some("alice"));
        assert!(binding.label_keys.is_empty() && binding.owner_annotation.is_none());
        let namespace = Shown::of("Namespace", &meta("Namespace", "10"));
        assert!(namespace.has_label("team") && namespace.has_label(PROFILE_LABEL) && !namespace.has_label("other"));
        assert_eq!(namespace.owner_annotation.as_deref(), Some("alice@example.com"));
    }

    fn profile(name: &str, uid: &str) -> Profile {
        serde_json::from_value(json!({"apiVersion": "kubeflow.org/v1", "kind": "Profile", "metadata": {"name": name, "uid": uid},
            "spec": {"owner": {"kind": "User", "name": "alice@example.com"}}}))
        .unwrap()
    }

    #[test]
    fn made_here_needs_both_the_profile_label_and_the_owner() {
        let binding = Shown::of("RoleBinding", &meta("RoleBinding", "10"));
        assert!(binding.made_here_for(&profile("alice", "p-1")));
        assert!(!binding.made_here_for(&profile("alice", "p-2")), "another Profile of that name");
        assert!(!binding.made_here_for(&profile("bob", "p-1")), "labelled for another Profile");
        assert!(!binding.made_for(&profile("alice", "")), "a Profile without uid owns nothing");
    }

    fn events(list: Vec<Event<PartialObjectMeta<DynamicObject>>>) -> Vec<String> {
        let made = Made::default();
        futures::executor::block_on(made.file("RoleBinding", futures::stream::iter(list)).collect())
    }

    fn object(namespace: &str, name: &str, resource_version: &str) -> PartialObjectMeta<DynamicObject> {
        serde_json::from_value(json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": resource_version}}))
        .unwrap()
    }

    #[test]
    fn a_relist_yields_its_namespaces_once_done_and_those_of_objects_that_vanished() {
        let made = Made::default();
        made.observed("RoleBinding", &object("gone", "edit", "5").metadata, true);
        made.record("RoleBinding", Some("gone"), "edit", HASH, "5");
        let list = vec![Event::Init, Event::InitApply(object("alice", "edit", "6")), Event::InitApply(object("alice", "view", "6")), Event::InitApply(object("bob", "edit", "7")), Event::InitDone];
        let changed: Vec<String> = futures::executor::block_on(made.clone().file("RoleBinding", futures::stream::iter(list)).collect());
        assert_eq!(changed, ["alice", "bob", "gone"]);
        // The vanished object is deleted: applied again, not awaited.
        assert!(!made.unchanged("RoleBinding", Some("gone"), "edit", HASH));
        assert!(made.shown_in("gone").is_empty());
        assert_eq!(made.shown_in("alice").len(), 2);
        // Single events pass through at once.
        assert_eq!(events(vec![Event::Apply(object("carol", "edit", "8")), Event::Delete(object("dave", "edit", "9"))]), ["carol", "dave"]);
    }
}
