//! What applying desired objects over a cluster would change, before anything is written.
//!
//! [`compute`] reads each desired object's live counterpart and asks the API server for a
//! server-side dry-run apply with the operator's field manager; the pure functions below compare
//! the two and name what differs, and what a CRD's new release changes in its versions and
//! schemas. The operators compute the plan of a preview spec with it (the installer's rights),
//! `kfop plan` with the caller's.

use std::collections::BTreeSet;

use kube::Client;
use kube::api::{Patch, PatchParams};
use kubeflow_crds::component::{ChangePlan, ComponentKind, InventoryEntry, PlanList};
use serde_json::Value;

use crate::build::{APPLICATION_ANNOTATION, Claim, claim, identity, made_by};
use crate::kinds;

/// `Kind namespace/name`, or `Kind name` for a cluster-scoped object.
pub fn describe(object: &Value) -> String {
    let (_, kind, namespace, name) = identity(object);
    if namespace.is_empty() { format!("{kind} {name}") } else { format!("{kind} {namespace}/{name}") }
}

/// A plan could not be computed: the API server could not be asked (not a refusal of the spec,
/// which the plan lists under `failed`).
#[derive(Debug, thiserror::Error)]
#[error("planning {object}: {source}")]
pub struct PlanError {
    pub object: String,
    #[source]
    pub source: kube::Error,
}

/// What the apply decides beyond the objects: the resource's CRD removal policy (CRDs are pruned
/// only with `Delete`) and which live CRDs a newer release of the component applied (left as
/// they are).
pub struct PlanRules<'a> {
    pub delete_crds: bool,
    pub newer_crd: &'a (dyn Fn(&Value) -> bool + Sync),
}

impl PlanRules<'_> {
    /// `kfop plan`'s: CRDs retained, none taken for a newer release's.
    pub const RETAIN: PlanRules<'static> = PlanRules { delete_crds: false, newer_crd: &|_| false };
}

/// Whether the API server answered for good (a refusal the plan reports) rather than failed.
fn refusal(error: &kube::Error) -> Option<String> {
    match error {
        kube::Error::Api(status) if (400..500).contains(&status.code) && ![404, 409, 429].contains(&status.code) => Some(status.message.clone()),
        _ => None,
    }
}

/// What applying `objects` for resource `owner` of `component` would change, reading and dry-running
/// as `client`; `inventory` is what the resource applied so far (its prune candidates, but those of
/// the `held` applications, which did not render and keep what they have). Nothing is written.
pub async fn compute(client: &Client, component: ComponentKind, owner: &str, adopt: bool, objects: &[Value], inventory: &[InventoryEntry], held: &BTreeSet<String>, rules: &PlanRules<'_>) -> Result<ChangePlan, PlanError> {
    let mut plan = ChangePlan::default();
    let params = PatchParams::apply(&crate::run::field_manager(component)).force().dry_run();
    let mut rendered = BTreeSet::new();
    for object in objects {
        let what = describe(object);
        let application = object["metadata"]["annotations"][APPLICATION_ANNOTATION].as_str();
        let Some(info) = kinds::lookup_for(component.name(), owner, object["apiVersion"].as_str().unwrap_or_default(), object["kind"].as_str().unwrap_or_default()) else {
            rendered.insert(identity(object));
            plan.record(application, PlanList::Add, format!("{what} (a kind the cluster does not serve yet)"));
            continue;
        };
        // Where it lives, as the inventory names it.
        let (group, kind, _, name) = identity(object);
        rendered.insert((group, kind, crate::build::location(object, info).unwrap_or_default(), name));
        let api = info.api(client, object["metadata"]["namespace"].as_str());
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let live = match api.get_opt(name).await {
            Ok(live) => live.map(|l| serde_json::to_value(l).expect("objects serialise")),
            // Its CRD comes with this install.
            Err(kube::Error::Api(status)) if status.code == 404 => None,
            Err(e) if refusal(&e).is_some() => {
                plan.record(application, PlanList::Failed, format!("{what}: cannot be read: {}", refusal(&e).unwrap_or_default()));
                continue;
            }
            Err(source) => return Err(PlanError { object: what, source }),
        };
        let Some(live) = live else {
            // A dry-run create: schema, admission and the installer's rights are checked as the
            // apply would meet them (a kind whose CRD comes with this install is not served yet).
            match api.patch(name, &params, &Patch::Apply(object)).await {
                Ok(_) => plan.record(application, PlanList::Add, what),
                Err(kube::Error::Api(status)) if status.code == 404 => plan.record(application, PlanList::Add, format!("{what} (its kind is served once its CRD is applied)")),
                Err(e) if refusal(&e).is_some() => plan.record(application, PlanList::Failed, format!("{what}: refused: {}", refusal(&e).unwrap_or_default())),
                Err(source) => return Err(PlanError { object: what, source }),
            }
            continue;
        };
        // A newer release of the component applied this CRD: the apply leaves it as it is.
        if info.is_crd() && (rules.newer_crd)(&live) {
            plan.unchanged += 1;
            continue;
        }
        match claim(&live, info, component.name(), owner, adopt) {
            Claim::OtherResource | Claim::NotOurs => {
                plan.record(application, PlanList::Leave, what);
                continue;
            }
            // Shared objects (namespaces) are only ever created, and labelled as rendered.
            Claim::Ours if info.is_shared() => {
                match crate::build::namespace_metadata(object).filter(|_| !crate::build::namespace_settled(object, &live)) {
                    Some(metadata) => plan.record(application, PlanList::Change, format!("{what}: labels and annotations {}", metadata["metadata"])),
                    None => plan.unchanged += 1,
                }
                continue;
            }
            Claim::Ours | Claim::HandedOver => {}
        }
        // The API server would refuse the field in place (a dry run says "field is immutable"):
        // the operator replaces its own object instead, as the apply would.
        if let Some(field) = info.immutable_field_changed(object, &live).filter(|_| made_by(&live, info, component.name(), owner)) {
            let how = if info.kind == "Deployment" { "; the old pods serve until the new Deployment is Available" } else { "" };
            plan.record(application, PlanList::Change, format!("{what}: replaced ({field} cannot change in place{how})"));
            continue;
        }
        let after = match api.patch(name, &params, &Patch::Apply(object)).await {
            Ok(after) => serde_json::to_value(after).expect("objects serialise"),
            Err(e) if refusal(&e).is_some() => {
                plan.record(application, PlanList::Failed, format!("{what}: refused: {}", refusal(&e).unwrap_or_default()));
                continue;
            }
            Err(source) => return Err(PlanError { object: what, source }),
        };
        let paths = changed_paths(&live, &after);
        if paths.is_empty() {
            plan.unchanged += 1;
            continue;
        }
        plan.record(application, PlanList::Change, format!("{what}: {}", summarize(&paths)));
        if info.is_crd() {
            for change in crd_changes(&live, object) {
                plan.record(application, PlanList::CrdChanges, format!("{what}: {change}"));
            }
        }
    }
    for entry in inventory {
        let Some(info) = kinds::lookup_for(component.name(), owner, &entry.api_version(), &entry.kind) else { continue };
        let namespace = crate::build::entry_location(&entry, info).unwrap_or_default();
        if rendered.contains(&(entry.group.clone(), entry.kind.clone(), namespace, entry.name.clone())) {
            continue;
        }
        let live = match info.api(client, entry.namespace.as_deref()).get_opt(&entry.name).await {
            Ok(live) => live.map(|l| serde_json::to_value(l).expect("objects serialise")),
            Err(e) if refusal(&e).is_some() => continue,
            Err(source) => return Err(PlanError { object: format!("{} {}", entry.kind, entry.name), source }),
        };
        // Only what the live object proves this resource made is pruned (a status can be written by others).
        let Some(live) = live.filter(|live| made_by(live, info, component.name(), owner)) else { continue };
        let application = live["metadata"]["annotations"][APPLICATION_ANNOTATION].as_str();
        if application.is_some_and(|application| held.contains(application)) {
            continue;
        }
        let shared = crate::build::shared_by_installs(info, &live);
        let others = crate::build::users(&live, Some(&crate::build::user_key(component.name(), owner)));
        if crate::build::tracks_users(info, &live) && !others.is_empty() {
            let names: Vec<String> = others.iter().map(|(component, owner)| format!("{component} {owner}")).collect();
            plan.record(application, PlanList::Keep, format!("{} (also used by {})", describe(&live), names.join(", ")));
        } else if crate::build::tracks_users(info, &live) {
            plan.record(application, PlanList::Prune, describe(&live));
        } else if info.is_shared() || (shared && !rules.delete_crds) {
            plan.record(application, PlanList::Keep, format!("{} (retained: removing it is an explicit opt-in)", describe(&live)));
        } else if info.holds_data() {
            plan.record(application, PlanList::Keep, format!("{} (holds data: never pruned; delete it yourself once migrated)", describe(&live)));
        } else {
            plan.record(application, PlanList::Prune, describe(&live));
        }
    }
    Ok(plan)
}

/// Most paths listed per changed object; the rest are counted.
pub const MAX_PATHS: usize = 8;

/// Metadata the API server (not the object's author) changes on every write.
const SERVER_METADATA: &[&str] = &["managedFields", "resourceVersion", "generation", "creationTimestamp", "uid"];

/// The leaf paths at which `after` (a dry-run apply's answer) differs from `live`, outside
/// `status`, server-written metadata, the applied hash and the version label; arrays are compared by index where
/// both have as many items, else whole.
pub fn changed_paths(live: &Value, after: &Value) -> Vec<String> {
    let mut paths = Vec::new();
    diff("", live, after, &mut paths);
    paths.retain(|p| {
        let top = p.split(['.', '[']).next().unwrap_or_default();
        let server_written = SERVER_METADATA.iter().any(|m| p.strip_prefix("metadata.").and_then(|rest| rest.strip_prefix(m)).is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '['])));
        // The applied hash changes with anything else that changes, the version label with every
        // release: neither is a change of its own.
        let own_bookkeeping = *p == format!("metadata.annotations.{}", crate::build::HASH_ANNOTATION) || *p == format!("metadata.labels.{}", crate::build::VERSION_LABEL);
        top != "status" && !server_written && !own_bookkeeping
    });
    paths
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() { key.to_string() } else { format!("{prefix}.{key}") }
}

fn diff(prefix: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    let empty = Value::Object(Default::default());
    match (a, b) {
        // A map that appears or goes: its leaves are what changes.
        (Value::Null, Value::Object(_)) => diff(prefix, &empty, b, out),
        (Value::Object(_), Value::Null) => diff(prefix, a, &empty, out),
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                diff(&join(prefix, key), a.get(key).unwrap_or(&Value::Null), b.get(key).unwrap_or(&Value::Null), out);
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                diff(&format!("{prefix}[{i}]"), x, y, out);
            }
        }
        _ if a != b => out.push(prefix.to_string()),
        _ => {}
    }
}

/// The paths of `changed_paths`, at most [`MAX_PATHS`], and how many more.
pub fn summarize(paths: &[String]) -> String {
    let shown = paths.iter().take(MAX_PATHS).cloned().collect::<Vec<_>>().join(", ");
    match paths.len().saturating_sub(MAX_PATHS) {
        0 => shown,
        more => format!("{shown} and {more} more"),
    }
}

/// What applying CRD `desired` over `live` changes in its API: served versions added or removed,
/// the storage version, and per version kept, whether its schema changes (and where first).
pub fn crd_changes(live: &Value, desired: &Value) -> Vec<String> {
    let versions = |crd: &Value| -> Vec<(String, bool, bool, Value)> {
        crd["spec"]["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| (v["name"].as_str().unwrap_or_default().to_string(), v["served"] == true, v["storage"] == true, v["schema"]["openAPIV3Schema"].clone()))
            .collect()
    };
    let (before, after) = (versions(live), versions(desired));
    let served = |vs: &[(String, bool, bool, Value)]| vs.iter().filter(|v| v.1).map(|v| v.0.clone()).collect::<Vec<_>>();
    let storage = |vs: &[(String, bool, bool, Value)]| vs.iter().find(|v| v.2).map(|v| v.0.clone()).unwrap_or_default();
    let mut changes = Vec::new();
    let (served_before, served_after) = (served(&before), served(&after));
    let added: Vec<&String> = served_after.iter().filter(|v| !served_before.contains(v)).collect();
    let removed: Vec<&String> = served_before.iter().filter(|v| !served_after.contains(v)).collect();
    if !added.is_empty() {
        changes.push(format!("serves {} too", added.iter().map(|v| v.as_str()).collect::<Vec<_>>().join(", ")));
    }
    if !removed.is_empty() {
        changes.push(format!("stops serving {} (objects stored in it are read through the storage version)", removed.iter().map(|v| v.as_str()).collect::<Vec<_>>().join(", ")));
    }
    if storage(&before) != storage(&after) {
        changes.push(format!("storage version {} → {} (existing objects are rewritten only when next written)", storage(&before), storage(&after)));
    }
    for (name, _, _, schema) in &after {
        if let Some((_, _, _, old)) = before.iter().find(|v| &v.0 == name)
            && old != schema
        {
            let paths = changed_paths(old, schema);
            changes.push(format!("schema of {name} changes at {}", summarize(&paths)));
        }
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn changed_paths_name_the_leaves_that_differ_and_ignore_status_and_server_metadata() {
        let live = json!({"metadata": {"name": "web", "resourceVersion": "7", "labels": {"a": "1"}, "managedFields": [{"manager": "x"}]},
                          "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "web", "image": "web:v1"}]}}}, "status": {"replicas": 1}});
        let after = json!({"metadata": {"name": "web", "resourceVersion": "8", "labels": {"a": "1", "b": "2", crate::build::VERSION_LABEL: "v2"}, "managedFields": [{"manager": "y"}],
                                        "annotations": {crate::build::HASH_ANNOTATION: "h2"}},
                           "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "web", "image": "web:v2"}]}}}, "status": {"replicas": 2}});
        assert_eq!(changed_paths(&live, &after), ["metadata.labels.b", "spec.template.spec.containers[0].image"]);
        assert!(changed_paths(&live, &live).is_empty());
        // A list that grows or shrinks changes as a whole.
        let longer = json!({"spec": {"ports": [1, 2]}});
        assert_eq!(changed_paths(&json!({"spec": {"ports": [1]}}), &longer), ["spec.ports"]);
        // A field removed is a change too.
        assert_eq!(changed_paths(&json!({"data": {"a": "1", "b": "2"}}), &json!({"data": {"a": "1"}})), ["data.b"]);
    }

    #[test]
    fn summaries_stop_after_a_few_paths() {
        let paths: Vec<String> = (0..11).map(|i| format!("data.k{i}")).collect();
        assert_eq!(summarize(&paths[..2]), "data.k0, data.k1");
        assert!(summarize(&paths).ends_with("data.k7 and 3 more"), "{}", summarize(&paths));
    }

    fn crd(versions: Value) -> Value {
        json!({"kind": "CustomResourceDefinition", "spec": {"versions": versions}})
    }

    #[test]
    fn crd_changes_name_versions_served_storage_and_schemas() {
        let schema = |field: &str| json!({"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": {field: {"type": "string"}}}}}});
        let live = crd(json!([{"name": "v1beta1", "served": true, "storage": true, "schema": schema("image")}]));
        let desired = crd(json!([
            {"name": "v1beta1", "served": true, "storage": false, "schema": schema("images")},
            {"name": "v1", "served": true, "storage": true, "schema": schema("image")},
        ]));
        assert_eq!(
            crd_changes(&live, &desired),
            [
                "serves v1 too",
                "storage version v1beta1 → v1 (existing objects are rewritten only when next written)",
                "schema of v1beta1 changes at properties.spec.properties.image.type, properties.spec.properties.images.type",
            ]
        );
        let dropped = crd(json!([{"name": "v1", "served": true, "storage": true, "schema": schema("image")}]));
        assert_eq!(crd_changes(&desired, &dropped), ["stops serving v1beta1 (objects stored in it are read through the storage version)"]);
        assert!(crd_changes(&live, &live).is_empty());
    }
}
