//! Which applications a kustomize `Component` changes.
//!
//! Upstream's `example/kustomization.yaml` lists its Components under `components:`, so kustomize
//! applies each to the build of every entry under `resources:`. A KfDef lists such a Component as
//! an application after the ones it changes; it is applied to the earlier applications of its
//! repository it reaches ([`Reach`]), each built with it, which gives the same objects as the
//! whole build whenever the Component changes objects one application at a time (generators
//! merging into a ConfigMap, patches, labels, images: every Component kubeflow/manifests ships).
//! An application can also name the one it applies to (`componentOf`).

use std::path::Path;

use serde_json::Value as Json;
use serde_yaml_ng::Value;

use crate::refs::{fields, kustomization_file, load};

/// An object a Component changes: its kind, name and namespace when the Component names them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub kind: Option<String>,
    pub name: Option<String>,
    pub namespace: Option<String>,
    /// A generator merging into (or replacing) a generated ConfigMap or Secret, whose name
    /// carries the content hash kustomize appends.
    pub generated: bool,
}

impl Target {
    /// Whether `object` (as rendered) is this target.
    pub fn matches(&self, object: &Json) -> bool {
        let text = |pointer: &str| object.pointer(pointer).and_then(Json::as_str).unwrap_or_default();
        let name = text("/metadata/name");
        let name_matches = match &self.name {
            None => true,
            Some(wanted) if self.generated => name == wanted || name.strip_prefix(wanted.as_str()).and_then(|rest| rest.strip_prefix('-')).is_some_and(is_name_hash),
            Some(wanted) => name == wanted,
        };
        self.kind.as_deref().is_none_or(|k| k == text("/kind")) && name_matches && self.namespace.as_deref().is_none_or(|n| n == text("/metadata/namespace"))
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let namespace = self.namespace.as_deref().map(|n| format!("{n}/")).unwrap_or_default();
        write!(f, "{} {namespace}{}", self.kind.as_deref().unwrap_or("any kind"), self.name.as_deref().unwrap_or("(any name)"))
    }
}

/// The suffix kustomize appends to a generated object's name: ten characters of its alphabet.
fn is_name_hash(text: &str) -> bool {
    text.len() == 10 && text.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c))
}

/// What a Component changes in the build it is part of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reach {
    /// Every object (labels, images, a namespace, …): the field that says so.
    Every(String),
    /// Only these objects; none: it only adds objects of its own.
    Objects(Vec<Target>),
}

impl Reach {
    /// Whether a build with `objects` is one this Component changes.
    pub fn reaches(&self, objects: &[Json]) -> bool {
        match self {
            Reach::Every(_) => true,
            Reach::Objects(targets) => targets.iter().any(|t| objects.iter().any(|o| t.matches(o))),
        }
    }

    /// Whether the Component changes nothing but what it adds: built on its own.
    pub fn adds_only(&self) -> bool {
        matches!(self, Reach::Objects(targets) if targets.is_empty())
    }
}

/// Fields that change nothing outside the Component: what it adds, and how.
const OWN_FIELDS: &[&str] = &["apiVersion", "kind", "metadata", "resources", "crds", "generatorOptions"];

/// The reach of the Component in `dir`, nested Components included; `None` when `dir` holds no
/// `kind: Component`. `Err` when its kustomization cannot be read.
pub fn reach(dir: &Path) -> Result<Option<Reach>, String> {
    if !crate::refs::is_component(dir) {
        return Ok(None);
    }
    let mut targets = Vec::new();
    if let Some(every) = collect(dir, &mut targets, 0)? {
        return Ok(Some(Reach::Every(every)));
    }
    Ok(Some(Reach::Objects(targets)))
}

/// Adds the targets of the Component in `dir` to `out`; returns the field that makes it reach
/// every object, if one does.
fn collect(dir: &Path, out: &mut Vec<Target>, depth: usize) -> Result<Option<String>, String> {
    if depth > 16 {
        return Err(format!("{}: Components nested too deep", dir.display()));
    }
    let file = kustomization_file(dir).ok_or_else(|| format!("{}: no kustomization", dir.display()))?;
    let Value::Mapping(doc) = load(&file).map_err(|why| format!("{}: {why}", file.display()))? else {
        return Ok(None);
    };
    let at = |what: &str| format!("{}: {what}", file.display());
    for key in doc.keys().filter_map(Value::as_str) {
        let known = OWN_FIELDS.iter().chain(&["configMapGenerator", "secretGenerator", "patchesStrategicMerge", "patches", "patchesJson6902", "components"]).any(|f| f.eq_ignore_ascii_case(key));
        if !known {
            return Ok(Some(format!("{key} (in {})", file.display())));
        }
    }
    for (field, kind) in [("configMapGenerator", "ConfigMap"), ("secretGenerator", "Secret")] {
        for (_, list) in fields(&doc, field) {
            for generator in list.as_sequence().into_iter().flatten() {
                let text = |name: &str| generator.get(name).and_then(Value::as_str).map(String::from);
                if matches!(text("behavior").as_deref(), Some("merge" | "replace")) {
                    out.push(Target { kind: Some(kind.into()), name: text("name"), namespace: text("namespace"), generated: true });
                }
            }
        }
    }
    for (_, list) in fields(&doc, "patchesStrategicMerge") {
        for entry in list.as_sequence().into_iter().flatten().filter_map(Value::as_str) {
            out.extend(patch_targets(dir, entry).map_err(|why| at(&why))?);
        }
    }
    for field in ["patches", "patchesJson6902"] {
        for (_, list) in fields(&doc, field) {
            for patch in list.as_sequence().into_iter().flatten() {
                if let Some(target) = patch.get("target") {
                    let text = |name: &str| target.get(name).and_then(Value::as_str).map(String::from);
                    if text("labelSelector").is_some() || text("annotationSelector").is_some() {
                        return Ok(Some(format!("{field} selecting by label or annotation (in {})", file.display())));
                    }
                    out.push(Target { kind: text("kind"), name: text("name"), namespace: text("namespace"), generated: false });
                } else if let Some(entry) = patch.get("path").or_else(|| patch.get("patch")).and_then(Value::as_str) {
                    out.extend(patch_targets(dir, entry).map_err(|why| at(&why))?);
                }
            }
        }
    }
    for (_, list) in fields(&doc, "components") {
        for entry in list.as_sequence().into_iter().flatten().filter_map(Value::as_str) {
            // Checked by `refs::check` before any build: inside the repository, not remote.
            if let Some(every) = collect(&dir.join(entry), out, depth + 1)? {
                return Ok(Some(every));
            }
        }
    }
    Ok(None)
}

/// The objects a strategic-merge patch (inline, or a file relative to `dir`) names.
fn patch_targets(dir: &Path, entry: &str) -> Result<Vec<Target>, String> {
    let text = if entry.contains('\n') { entry.to_string() } else { std::fs::read_to_string(dir.join(entry)).map_err(|e| format!("patch {entry}: {e}"))? };
    let mut out = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let doc: Value = serde::Deserialize::deserialize(doc).map_err(|e| format!("patch {entry}: {e}"))?;
        let text = |value: Option<&Value>| value.and_then(Value::as_str).map(String::from);
        let metadata = doc.get("metadata");
        if doc.is_mapping() {
            out.push(Target { kind: text(doc.get("kind")), name: text(metadata.and_then(|m| m.get("name"))), namespace: text(metadata.and_then(|m| m.get("namespace"))), generated: false });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn component(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            std::fs::create_dir_all(dir.path().join(path).parent().unwrap()).unwrap();
            std::fs::write(dir.path().join(path), text).unwrap();
        }
        dir
    }

    const HEAD: &str = "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n";

    /// Kubeflow 1.11's `common/security/PSS/dynamic/baseline`: a merge into the profile
    /// controller's generated `namespace-labels-data`, whatever its hash.
    #[test]
    fn a_merging_generator_reaches_the_generated_object_it_names() {
        let dir = component(&[("kustomization.yaml", &format!("{HEAD}configMapGenerator:\n- name: namespace-labels-data\n  namespace: kubeflow\n  behavior: merge\n  files: [namespace-labels.yaml]\n"))]);
        let reach = reach(dir.path()).unwrap().unwrap();
        let cm = |name: &str, namespace: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}});
        assert!(reach.reaches(&[cm("other", "kubeflow"), cm("namespace-labels-data-2k29b64d74", "kubeflow")]));
        assert!(reach.reaches(&[cm("namespace-labels-data", "kubeflow")]));
        assert!(!reach.reaches(&[cm("namespace-labels-data-2k29b64d74", "team")]), "another namespace");
        assert!(!reach.reaches(&[cm("namespace-labels-data-extra", "kubeflow")]), "not a hash suffix");
        assert!(!reach.reaches(&[json!({"kind": "Secret", "metadata": {"name": "namespace-labels-data", "namespace": "kubeflow"}})]));
        assert!(!reach.adds_only());
    }

    #[test]
    fn patches_reach_what_they_name_and_a_transformer_reaches_everything() {
        let dir = component(&[
            ("kustomization.yaml", &format!("{HEAD}patchesStrategicMerge: [smp.yaml]\npatches:\n- target: {{kind: Deployment, name: web}}\n  patch: '[]'\n- path: named.yaml\nresources: [cm.yaml]\n")),
            ("smp.yaml", "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: db, namespace: data}\n"),
            ("named.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: api}\n"),
            ("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: added}\n"),
        ]);
        let Reach::Objects(targets) = reach(dir.path()).unwrap().unwrap() else { panic!("reaches named objects only") };
        let names: Vec<String> = targets.iter().map(ToString::to_string).collect();
        assert_eq!(names, ["StatefulSet data/db", "Deployment web", "Service api"]);
        assert!(targets[1].matches(&json!({"kind": "Deployment", "metadata": {"name": "web", "namespace": "any"}})));
        assert!(!targets[1].matches(&json!({"kind": "Deployment", "metadata": {"name": "web-2"}})), "only generators' names carry a hash");

        let labels = component(&[("kustomization.yaml", &format!("{HEAD}labels: [{{pairs: {{team: a}}}}]\n"))]);
        assert!(matches!(reach(labels.path()).unwrap().unwrap(), Reach::Every(field) if field.starts_with("labels")));
        let selector = component(&[("kustomization.yaml", &format!("{HEAD}patches: [{{target: {{labelSelector: app=x}}, patch: '[]'}}]\n"))]);
        assert!(matches!(reach(selector.path()).unwrap().unwrap(), Reach::Every(_)));
        let adds = component(&[("kustomization.yaml", &format!("{HEAD}resources: [cm.yaml]\nconfigMapGenerator: [{{name: new, literals: [a=b]}}]\n")), ("cm.yaml", "")]);
        assert!(reach(adds.path()).unwrap().unwrap().adds_only());
        // A nested Component's reach is the Component's.
        let nested = component(&[("kustomization.yaml", &format!("{HEAD}components: [inner]\n")), ("inner/kustomization.yaml", &format!("{HEAD}images: [{{name: x, newTag: v2}}]\n"))]);
        assert!(matches!(reach(nested.path()).unwrap().unwrap(), Reach::Every(field) if field.starts_with("images")));
        let kustomization = component(&[("kustomization.yaml", "resources: [a.yaml]\n")]);
        assert_eq!(reach(kustomization.path()).unwrap(), None, "not a Component");
    }
}
