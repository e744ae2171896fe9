//! What applying desired objects over a cluster would change, before anything is written (pure).
//!
//! The driver (`kfop plan`) reads each desired object's live counterpart and asks the API server
//! for a server-side dry-run apply with the operator's field manager; this module compares the
//! two and names what differs, and what a CRD's new release changes in its versions and schemas.

use serde_json::Value;

/// Most paths listed per changed object; the rest are counted.
pub const MAX_PATHS: usize = 8;

/// Metadata the API server (not the object's author) changes on every write.
const SERVER_METADATA: &[&str] = &["managedFields", "resourceVersion", "generation", "creationTimestamp", "uid"];

/// The leaf paths at which `after` (a dry-run apply's answer) differs from `live`, outside
/// `status`, server-written metadata and the applied hash; arrays are compared by index where
/// both have as many items, else whole.
pub fn changed_paths(live: &Value, after: &Value) -> Vec<String> {
    let mut paths = Vec::new();
    diff("", live, after, &mut paths);
    paths.retain(|p| {
        let top = p.split(['.', '[']).next().unwrap_or_default();
        let server_written = SERVER_METADATA.iter().any(|m| p.strip_prefix("metadata.").and_then(|rest| rest.strip_prefix(m)).is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '['])));
        // The applied hash changes with anything else that changes: it is no change of its own.
        let own_bookkeeping = *p == format!("metadata.annotations.{}", crate::build::HASH_ANNOTATION);
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
        let after = json!({"metadata": {"name": "web", "resourceVersion": "8", "labels": {"a": "1", "b": "2"}, "managedFields": [{"manager": "y"}],
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
