//! What to write to the `kubeflow-desired` bucket for one KfDef (pure): a put for each component
//! whose spec differs from what is published, a delete for each that left the KfDef. A component
//! whose version cannot be resolved keeps what is published.

use std::collections::BTreeMap;

use kubeflow_crds::bus::{self, DesiredComponent, KfDefRef, Preview};
use kubeflow_crds::component::ComponentKind;

use crate::plan::Plan;

/// What the bucket holds for one component of the KfDef.
#[derive(Debug, Clone, PartialEq)]
pub struct Published {
    /// Revision of the key (0 when it never existed); part of the message id.
    pub revision: u64,
    /// The current value; `None` when deleted or undecodable.
    pub desired: Option<DesiredComponent>,
}

/// One write to the desired bucket.
#[derive(Debug, Clone, PartialEq)]
pub enum Publication {
    Put { key: String, msg_id: String, message: DesiredComponent },
    Delete { component: ComponentKind, key: String },
}

/// The component versions `published` holds.
pub fn published_versions(published: &BTreeMap<ComponentKind, Published>) -> BTreeMap<ComponentKind, String> {
    published
        .iter()
        .filter_map(|(c, p)| p.desired.as_ref().and_then(|d| d.spec["version"].as_str()).map(|v| (*c, v.to_string())))
        .collect()
}

/// The writes that make the bucket hold `plan` for the KfDef `kfdef`, each component with the spec
/// `preview` (a KfUpgrade's target, [`crate::plan::preview_plan`]) gives it, when that differs.
/// `cluster`: the fleet cluster the bucket is that of ([`DesiredComponent::cluster`]).
pub fn publications(kfdef: &KfDefRef, cluster: Option<&str>, plan: &Plan, preview: Option<&Plan>, published: &BTreeMap<ComponentKind, Published>, traceparent: Option<String>) -> Vec<Publication> {
    let mut writes = Vec::new();
    for component in ComponentKind::ALL {
        let key = bus::key(component, &kfdef.namespace, &kfdef.name);
        let current = published.get(&component);
        let desired = current.and_then(|p| p.desired.as_ref());
        match plan.components.get(&component) {
            Some(wanted) => {
                let preview = preview
                    .and_then(|p| p.components.get(&component))
                    .filter(|p| p.spec_hash != wanted.spec_hash)
                    .map(|p| Preview { spec_hash: p.spec_hash.clone(), spec: p.spec.clone() });
                let preview_hash = preview.as_ref().map(|p| p.spec_hash.as_str());
                if desired.is_some_and(|d| d.spec_hash == wanted.spec_hash && d.kfdef.uid == kfdef.uid && d.cluster.as_deref() == cluster && d.preview.as_ref().map(|p| p.spec_hash.as_str()) == preview_hash) {
                    continue;
                }
                let revision = current.map_or(0, |p| p.revision);
                // Besides uid, generation and component, the id carries the spec hash and the key's
                // current revision: a KfUpgrade pin changes a spec without a new generation, and a
                // rollback returns to an earlier spec; both must not be dropped as duplicates, while
                // a retried publish of the same change (same revision) still is.
                let hashes = match preview_hash {
                    Some(preview) => format!("{}+{preview}", wanted.spec_hash),
                    None => wanted.spec_hash.clone(),
                };
                let msg_id = format!("{}.{}.{component}.{hashes}.{revision}", kfdef.uid, kfdef.generation);
                let message = DesiredComponent { kfdef: kfdef.clone(), component, spec_hash: wanted.spec_hash.clone(), spec: wanted.spec.clone(), traceparent: traceparent.clone(), preview, cluster: cluster.map(String::from) };
                writes.push(Publication::Put { key, msg_id, message });
            }
            None if desired.is_some() && !plan.unresolved.contains_key(&component) => writes.push(Publication::Delete { component, key }),
            None => {}
        }
    }
    writes
}

/// The deletes that take the KfDef `kfdef` out of a bucket it is no longer placed in: only of the
/// entries this KfDef (its uid) wrote; one of a KfDef of the same name made since is left.
pub fn withdrawals(kfdef: &KfDefRef, published: &BTreeMap<ComponentKind, Published>) -> Vec<Publication> {
    published
        .iter()
        .filter(|(_, p)| p.desired.as_ref().is_some_and(|d| d.kfdef.uid == kfdef.uid))
        .map(|(component, _)| Publication::Delete { component: *component, key: bus::key(*component, &kfdef.namespace, &kfdef.name) })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Unresolved;
    use crate::plan::ComponentPlan;
    use serde_json::json;

    fn kfdef() -> KfDefRef {
        KfDefRef { namespace: "team".into(), name: "kf".into(), uid: "u1".into(), generation: 4 }
    }

    fn wanted(version: &str) -> ComponentPlan {
        ComponentPlan { spec: json!({"version": version}), spec_hash: format!("h{version}"), version: version.into(), pinned: false, release_version: Some(version.into()) }
    }

    fn published(version: &str, revision: u64) -> Published {
        let desired = DesiredComponent { kfdef: kfdef(), component: ComponentKind::Katib, spec_hash: format!("h{version}"), spec: json!({"version": version}), traceparent: None, preview: None, cluster: None };
        Published { revision, desired: Some(desired) }
    }

    #[test]
    fn changed_specs_are_put_with_their_revision_and_departed_components_deleted() {
        let plan = Plan { components: [(ComponentKind::Katib, wanted("v0.11.0")), (ComponentKind::Dex, wanted("v2.24.0"))].into(), unresolved: BTreeMap::new(), applications: vec![] };
        let now: BTreeMap<_, _> = [(ComponentKind::Katib, published("v0.10.0", 7)), (ComponentKind::Dex, published("v2.24.0", 2)), (ComponentKind::Istio, published("1.3.1", 3))].into();
        let writes = publications(&kfdef(), None, &plan, None, &now, None);
        assert_eq!(writes.len(), 2, "{writes:?}");
        assert_eq!(writes[0], Publication::Delete { component: ComponentKind::Istio, key: "istio.team.kf".into() });
        let Publication::Put { key, msg_id, message } = &writes[1] else { panic!("{writes:?}") };
        assert_eq!((key.as_str(), msg_id.as_str()), ("katib.team.kf", "u1.4.katib.hv0.11.0.7"));
        assert_eq!(message.spec, json!({"version": "v0.11.0"}));
        assert_eq!(published_versions(&now)[&ComponentKind::Katib], "v0.10.0");
    }

    #[test]
    fn an_unresolved_component_keeps_what_is_published() {
        let plan = Plan { components: BTreeMap::new(), unresolved: [(ComponentKind::Katib, Unresolved::NotAnnounced { component: ComponentKind::Katib })].into(), applications: vec![] };
        let now: BTreeMap<_, _> = [(ComponentKind::Katib, published("v0.10.0", 7))].into();
        assert_eq!(publications(&kfdef(), None, &plan, None, &now, None), []);
    }

    #[test]
    fn a_clusters_bucket_gets_specs_naming_the_cluster_and_loses_only_this_kfdefs_entries() {
        let plan = Plan { components: [(ComponentKind::Katib, wanted("v0.11.0"))].into(), unresolved: BTreeMap::new(), applications: vec![] };
        let now: BTreeMap<_, _> = [(ComponentKind::Katib, published("v0.11.0", 7))].into();
        // The same spec, published for this cluster itself, is placed on a cluster anew.
        let Publication::Put { message, .. } = &publications(&kfdef(), Some("eu-1"), &plan, None, &now, None)[0] else { panic!() };
        assert_eq!(message.cluster.as_deref(), Some("eu-1"));
        let placed: BTreeMap<_, _> = [(ComponentKind::Katib, Published { revision: 8, desired: Some(message.clone()) })].into();
        assert_eq!(publications(&kfdef(), Some("eu-1"), &plan, None, &placed, None), []);
        assert_eq!(withdrawals(&kfdef(), &placed), [Publication::Delete { component: ComponentKind::Katib, key: "katib.team.kf".into() }]);
        let newer = KfDefRef { uid: "u2".into(), ..kfdef() };
        assert_eq!(withdrawals(&newer, &placed), [], "a KfDef of the same name made since keeps its entries");
    }

    #[test]
    fn a_preview_that_differs_is_published_with_the_spec_and_one_equal_to_it_is_not() {
        let plan = Plan { components: [(ComponentKind::Katib, wanted("v0.10.0")), (ComponentKind::Dex, wanted("v2.24.0"))].into(), unresolved: BTreeMap::new(), applications: vec![] };
        let target = Plan { components: [(ComponentKind::Katib, wanted("v0.11.0")), (ComponentKind::Dex, wanted("v2.24.0"))].into(), unresolved: BTreeMap::new(), applications: vec![] };
        let mut now: BTreeMap<_, _> = [(ComponentKind::Katib, published("v0.10.0", 7))].into();
        now.insert(ComponentKind::Dex, Published { revision: 2, desired: Some(DesiredComponent { component: ComponentKind::Dex, spec_hash: "hv2.24.0".into(), spec: json!({"version": "v2.24.0"}), ..published("v2.24.0", 2).desired.unwrap() }) });
        let writes = publications(&kfdef(), None, &plan, Some(&target), &now, None);
        assert_eq!(writes.len(), 1, "Dex's spec and target are the same: nothing to preview, nothing to write: {writes:?}");
        let Publication::Put { key, msg_id, message } = &writes[0] else { panic!("{writes:?}") };
        assert_eq!((key.as_str(), msg_id.as_str()), ("katib.team.kf", "u1.4.katib.hv0.10.0+hv0.11.0.7"));
        assert_eq!(message.spec, json!({"version": "v0.10.0"}), "the spec applied stays");
        assert_eq!(message.preview, Some(Preview { spec_hash: "hv0.11.0".into(), spec: json!({"version": "v0.11.0"}) }));
        // Once published, the same preview is not written again; without it, the preview goes.
        let mut after = now.clone();
        after.insert(ComponentKind::Katib, Published { revision: 8, desired: Some(message.clone()) });
        assert_eq!(publications(&kfdef(), None, &plan, Some(&target), &after, None), []);
        let Publication::Put { message, .. } = &publications(&kfdef(), None, &plan, None, &after, None)[0] else { panic!() };
        assert_eq!(message.preview, None);
    }
}
