//! What the Profile controller knows of the objects Profiles made (labelled managed-by): one
//! watch of metadata per kind, filed per namespace, and what the controller last applied.
//!
//! An object is applied again only when what it should hold changed (another hash) or when
//! someone else wrote it: its resource version moved past the one the apply returned, or it
//! vanished after the watch had shown it. So a reconcile of a converged Profile sends nothing.
//!
//! Only what the controller decides on is kept of each object ([`Shown`]): resource version, uid,
//! Profile owners, whether its profile label names its namespace, and for namespaces their label
//! keys and owner annotation. Resource versions are kept as numbers and uids as 16 bytes, so a
//! Profile's nine objects take about 2 KB. A reflector store would keep every object's whole
//! metadata, over ten times as much: at 1,000 Profiles (9,000 objects) most of the operator's
//! memory.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use component_framework::api::profile::Profile;
use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::api::{DynamicObject, PartialObjectMeta};
use kube::runtime::watcher::Event;

use crate::tenant::{self, PROFILE_LABEL};

/// A key of a namespace's objects: `(kind, name)`.
pub(crate) type Key = (&'static str, Box<str>);

/// A resource version. The API server's are etcd revisions, kept as numbers; one that is not a
/// number is kept as text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Version {
    Revision(u64),
    Opaque(Box<str>),
}

impl Version {
    pub fn of(text: &str) -> Self {
        text.parse().map(Version::Revision).unwrap_or_else(|_| Version::Opaque(text.into()))
    }

    /// Whether this is older than `other`. A version that is not a number is never older (the
    /// object is applied again).
    pub fn older_than(&self, other: &Version) -> bool {
        matches!((self, other), (Version::Revision(a), Version::Revision(b)) if a < b)
    }
}

/// A uid. The API server's are UUIDs in canonical text (lowercase, hyphenated), kept as their 16
/// bytes instead of 36 characters; any other is kept as text.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Uid {
    Uuid([u8; 16]),
    Other(Box<str>),
}

/// The positions of the hyphens in a UUID's canonical text.
const UUID_HYPHENS: [usize; 4] = [8, 13, 18, 23];

/// The 16 bytes of `text` if it is a UUID in canonical text.
fn uuid_bytes(text: &str) -> Option<[u8; 16]> {
    let text = text.as_bytes();
    if text.len() != 36 {
        return None;
    }
    let mut bytes = [0u8; 16];
    let mut nibble = 0;
    for (i, &c) in text.iter().enumerate() {
        if UUID_HYPHENS.contains(&i) {
            if c != b'-' {
                return None;
            }
            continue;
        }
        let value = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            _ => return None,
        };
        bytes[nibble / 2] |= if nibble % 2 == 0 { value << 4 } else { value };
        nibble += 1;
    }
    Some(bytes)
}

impl Uid {
    pub fn of(text: &str) -> Self {
        uuid_bytes(text).map(Uid::Uuid).unwrap_or_else(|| Uid::Other(text.into()))
    }

    /// Whether this is the uid `text`.
    pub fn is(&self, text: &str) -> bool {
        match self {
            Uid::Uuid(bytes) => uuid_bytes(text) == Some(*bytes),
            Uid::Other(other) => **other == *text,
        }
    }
}

impl std::fmt::Display for Uid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Uid::Uuid(bytes) => {
                for (i, byte) in bytes.iter().enumerate() {
                    if matches!(i, 4 | 6 | 8 | 10) {
                        f.write_str("-")?;
                    }
                    write!(f, "{byte:02x}")?;
                }
                Ok(())
            }
            Uid::Other(text) => f.write_str(text),
        }
    }
}

/// What a watch showed of one object: what the controller decides on, nothing else.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Shown {
    pub resource_version: Version,
    pub uid: Uid,
    /// The uids of its owners of kind Profile.
    pub profile_owners: Box<[Uid]>,
    /// Its `profiles.kubeflow.org/profile` label names the namespace it is filed under (for a
    /// Namespace: itself).
    pub labelled_here: bool,
    /// Namespaces only: what a namespace's checks read.
    pub namespace: Option<Box<NamespaceShown>>,
}

/// What is kept of a Namespace beyond [`Shown`].
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct NamespaceShown {
    /// The keys of its labels (which of those the settings remove are present).
    pub label_keys: Box<[Box<str>]>,
    /// Its owner annotation (named when the namespace is refused).
    pub owner_annotation: Option<Box<str>>,
}

impl Shown {
    /// What is kept of an object of `kind` with `meta`.
    pub fn of(kind: &str, meta: &ObjectMeta) -> Self {
        let filed = filed_under(kind, meta.namespace.as_deref(), meta.name.as_deref().unwrap_or_default());
        let namespace = (kind == "Namespace").then(|| {
            Box::new(NamespaceShown {
                label_keys: meta.labels.iter().flatten().map(|(k, _)| k.as_str().into()).collect(),
                owner_annotation: meta.annotations.as_ref().and_then(|a| a.get(tenant::OWNER_ANNOTATION)).map(|a| a.as_str().into()),
            })
        });
        Shown {
            resource_version: Version::of(meta.resource_version.as_deref().unwrap_or_default()),
            uid: Uid::of(meta.uid.as_deref().unwrap_or_default()),
            profile_owners: meta.owner_references.iter().flatten().filter(|o| o.kind == "Profile").map(|o| Uid::of(&o.uid)).collect(),
            labelled_here: meta.labels.as_ref().and_then(|l| l.get(PROFILE_LABEL)).is_some_and(|label| *label == filed),
            namespace,
        }
    }

    /// Whether it was made for `profile`: owned by it (by uid), as [`tenant::made_for`].
    pub fn made_for(&self, profile: &Profile) -> bool {
        let uid = profile.uid().unwrap_or_default();
        !uid.is_empty() && self.profile_owners.iter().any(|o| o.is(&uid))
    }

    /// Whether an object filed under `profile`'s namespace ([`Made::shown_in`]) was made there for
    /// it: its profile label names that namespace and it is owned by `profile`.
    pub fn made_here_for(&self, profile: &Profile) -> bool {
        self.labelled_here && self.made_for(profile)
    }

    pub fn has_label(&self, key: &str) -> bool {
        self.namespace.iter().flat_map(|n| n.label_keys.iter()).any(|k| **k == *key)
    }

    pub fn owner_annotation(&self) -> Option<&str> {
        self.namespace.as_ref()?.owner_annotation.as_deref()
    }
}

/// The last apply of one object.
#[derive(Debug)]
struct Applied {
    /// Hash of the applied object.
    hash: u64,
    /// The resource version the apply returned.
    resource_version: Version,
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

/// One namespace's objects, sorted by key. About nine per Profile: a vector sized to them holds
/// them without a tree's spare slots.
#[derive(Debug, Default)]
struct Objects(Vec<(Key, Entry)>);

impl Objects {
    fn find(&self, kind: &str, name: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|((k, n), _)| (*k, &**n).cmp(&(kind, name)))
    }

    fn get(&self, kind: &str, name: &str) -> Option<&Entry> {
        self.find(kind, name).ok().map(|i| &self.0[i].1)
    }

    fn get_mut(&mut self, kind: &str, name: &str) -> Option<&mut Entry> {
        self.find(kind, name).ok().map(|i| &mut self.0[i].1)
    }

    /// The entry of `kind` `name`, made empty if there is none.
    fn entry(&mut self, kind: &'static str, name: &str) -> &mut Entry {
        let i = match self.find(kind, name) {
            Ok(i) => i,
            Err(i) => {
                // Grown one at a time while small (no spare capacity), by doubling beyond.
                if self.0.len() < 16 {
                    self.0.reserve_exact(1);
                }
                self.0.insert(i, ((kind, name.into()), Entry::default()));
                i
            }
        };
        &mut self.0[i].1
    }

    fn remove(&mut self, kind: &str, name: &str) {
        if let Ok(i) = self.find(kind, name) {
            self.0.remove(i);
        }
    }
}

/// Per namespace (a Namespace filed under its own name), its objects. Shared with the watches,
/// which file what they show.
#[derive(Clone, Default)]
pub(crate) struct Made(Arc<Mutex<HashMap<String, Objects>>>, Arc<Mutex<BTreeSet<&'static str>>>);

/// The namespace an object is filed under: its own, or a Namespace's name.
fn filed_under<'a>(kind: &str, namespace: Option<&'a str>, name: &'a str) -> &'a str {
    if kind == "Namespace" { name } else { namespace.unwrap_or_default() }
}

impl Made {
    fn namespaces(&self) -> MutexGuard<'_, HashMap<String, Objects>> {
        self.0.lock().expect("not poisoned")
    }

    /// Whether the watch of `kind` has delivered its first full list.
    pub fn listed(&self, kind: &'static str) -> bool {
        self.1.lock().expect("not poisoned").contains(kind)
    }

    /// What the watch shows of `kind` `namespace/name`.
    pub fn shown(&self, kind: &'static str, namespace: Option<&str>, name: &str) -> Option<Shown> {
        let filed = filed_under(kind, namespace, name);
        self.namespaces().get(filed)?.get(kind, name)?.shown.clone()
    }

    /// Whether `kind` `namespace/name` (with `hash`) holds what was last applied to it.
    pub fn unchanged(&self, kind: &'static str, namespace: Option<&str>, name: &str, hash: u64) -> bool {
        let filed = filed_under(kind, namespace, name);
        let namespaces = self.namespaces();
        let Some(entry) = namespaces.get(filed).and_then(|n| n.get(kind, name)) else { return false };
        let Some(last) = &entry.applied else { return false };
        last.hash == hash
            && match &entry.shown {
                // At the version the apply returned, or an older one whose newer event is on its way.
                Some(shown) => shown.resource_version == last.resource_version || shown.resource_version.older_than(&last.resource_version),
                // Not yet shown by the watch, rather than deleted since.
                None => !last.shown,
            }
    }

    /// Files an apply of `kind` `namespace/name` with `hash` that returned `resource_version`.
    pub fn record(&self, kind: &'static str, namespace: Option<&str>, name: &str, hash: u64, resource_version: &str) {
        let filed = filed_under(kind, namespace, name);
        let mut namespaces = self.namespaces();
        let entry = namespaces.entry(filed.to_string()).or_default().entry(kind, name);
        let resource_version = Version::of(resource_version);
        let shown = entry.shown.as_ref().is_some_and(|s| !s.resource_version.older_than(&resource_version));
        entry.applied = Some(Applied { hash, resource_version, shown });
    }

    /// Forgets the last apply of `kind` `namespace/name` (pruned).
    pub fn forget(&self, kind: &'static str, namespace: &str, name: &str) {
        let mut namespaces = self.namespaces();
        let Some(objects) = namespaces.get_mut(namespace) else { return };
        if let Some(entry) = objects.get_mut(kind, name) {
            entry.applied = None;
            if entry.shown.is_none() {
                objects.remove(kind, name);
            }
        }
    }

    /// The objects the watches show in `namespace` (not the Namespace itself), with what they show.
    pub fn shown_in(&self, namespace: &str) -> Vec<(Key, Shown)> {
        let namespaces = self.namespaces();
        let objects = namespaces.get(namespace).into_iter().flat_map(|o| o.0.iter());
        objects.filter(|((kind, _), _)| *kind != "Namespace").filter_map(|(key, entry)| Some((key.clone(), entry.shown.clone()?))).collect()
    }

    /// Files what a watch of `kind` showed of `meta` (`exists`: not deleted); returns the
    /// namespace it is filed under.
    pub fn observed(&self, kind: &'static str, meta: &ObjectMeta, exists: bool) -> String {
        let name = meta.name.as_deref().unwrap_or_default();
        let filed = filed_under(kind, meta.namespace.as_deref(), name).to_string();
        let mut namespaces = self.namespaces();
        if kind == "Namespace" && !exists {
            // The namespace and everything in it are gone.
            namespaces.remove(&filed);
            return filed;
        }
        let objects = namespaces.entry(filed.clone()).or_default();
        if exists {
            let shown = Shown::of(kind, meta);
            let entry = objects.entry(kind, name);
            if let Some(last) = &mut entry.applied {
                last.shown |= !shown.resource_version.older_than(&last.resource_version);
            }
            entry.shown = Some(shown);
        } else if let Some(entry) = objects.get_mut(kind, name) {
            entry.shown = None;
            if entry.applied.is_none() {
                objects.remove(kind, name);
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
            objects.0.retain_mut(|((k, name), entry)| {
                if *k != kind || entry.shown.is_none() || listed.contains(&(namespace.clone(), name.to_string())) {
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
                    self.1.lock().expect("not poisoned").insert(kind);
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
        meta_labelled(kind, resource_version, "alice")
    }

    /// `alice/edit` (or Namespace `alice`) at `resource_version`, its profile label `label`.
    fn meta_labelled(kind: &str, resource_version: &str, label: &str) -> ObjectMeta {
        let namespace = (kind != "Namespace").then_some("alice");
        let name = if kind == "Namespace" { "alice" } else { "edit" };
        serde_json::from_value(json!({"name": name, "namespace": namespace, "resourceVersion": resource_version, "uid": "u-1",
            "labels": {PROFILE_LABEL: label, "team": "a"}, "annotations": {tenant::OWNER_ANNOTATION: "alice@example.com"},
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
        let older = |a: &str, b: &str| Version::of(a).older_than(&Version::of(b));
        assert!(older("9", "10"));
        assert!(!older("10", "10"));
        assert!(!older("11", "10"));
        assert!(!older("a", "10"));
        assert!(!older("10", "a"));
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
        assert_eq!(binding.resource_version, Version::Revision(10));
        assert_eq!(binding.uid, Uid::Other("u-1".into()));
        assert_eq!(binding.profile_owners[..], [Uid::Other("p-1".into())], "owners of kind Profile only");
        assert!(binding.labelled_here);
        assert!(binding.namespace.is_none() && !binding.has_label("team") && binding.owner_annotation().is_none());
        assert!(!Shown::of("RoleBinding", &meta_labelled("RoleBinding", "10", "bob")).labelled_here, "labelled for namespace bob, in alice");
        let namespace = Shown::of("Namespace", &meta("Namespace", "10"));
        assert!(namespace.labelled_here);
        assert!(namespace.has_label("team") && namespace.has_label(PROFILE_LABEL) && !namespace.has_label("other"));
        assert_eq!(namespace.owner_annotation(), Some("alice@example.com"));
        assert!(!Shown::of("Namespace", &meta_labelled("Namespace", "10", "bob")).labelled_here);
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
        let labelled_for_bob = Shown::of("RoleBinding", &meta_labelled("RoleBinding", "10", "bob"));
        assert!(!labelled_for_bob.made_here_for(&profile("alice", "p-1")), "labelled for another Profile");
        assert!(!binding.made_for(&profile("alice", "")), "a Profile without uid owns nothing");
    }

    #[test]
    fn uids_in_canonical_uuid_text_are_kept_as_their_bytes_and_read_back_unchanged() {
        let text = "0f4b7f0e-5b1c-4d47-9d6c-3e1c2a9b8f71";
        let uid = Uid::of(text);
        assert_eq!(uid, Uid::Uuid([0x0f, 0x4b, 0x7f, 0x0e, 0x5b, 0x1c, 0x4d, 0x47, 0x9d, 0x6c, 0x3e, 0x1c, 0x2a, 0x9b, 0x8f, 0x71]));
        assert_eq!(uid.to_string(), text);
        assert!(uid.is(text));
        assert!(!uid.is("0f4b7f0e-5b1c-4d47-9d6c-3e1c2a9b8f72"));
        assert!(!uid.is("0F4B7F0E-5B1C-4D47-9D6C-3E1C2A9B8F71"), "another text is another uid");
        // Anything else is kept as text: upper case, no hyphens, a hyphen misplaced, not a UUID.
        for other in ["0F4B7F0E-5B1C-4D47-9D6C-3E1C2A9B8F71", "0f4b7f0e5b1c4d479d6c3e1c2a9b8f71", "0f4b7f0e-5b1c-4d479-d6c-3e1c2a9b8f71", "u-1", ""] {
            let uid = Uid::of(other);
            assert_eq!(uid, Uid::Other(other.into()));
            assert_eq!(uid.to_string(), other);
            assert!(uid.is(other) && !uid.is(text));
        }
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
