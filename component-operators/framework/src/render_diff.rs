//! What moving from one render to another does, decided from the two renders alone (no cluster):
//! `kfop plan --from` between two KfDefs, and the plan of an upgrade to a whole target KfDef.
//!
//! Objects are matched by group, kind, namespace and name across every component, so an object
//! an application keeps while it moves to another component is changed in place (or unchanged),
//! never pruned and added again. The rules are the apply's ([`crate::plan::compute`]): what
//! leaves the render is pruned, but for CRDs, namespaces and PersistentVolumeClaims, which are
//! kept and listed; an object whose immutable field changes is replaced.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::build::{APPLICATION_ANNOTATION, identity};
use crate::kinds;
use crate::plan::{changed_paths, describe};

/// One rendered object with the KfDef application and component it belongs to.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    pub object: Value,
    pub application: String,
    pub component: String,
}

impl Rendered {
    /// `object` of `component`, attributed to the application its annotation names, else to
    /// `default_application` (a component installing a single application).
    pub fn new(object: Value, component: &str, default_application: &str) -> Self {
        let application = object["metadata"]["annotations"][APPLICATION_ANNOTATION].as_str().unwrap_or(default_application).to_string();
        Rendered { object, application, component: component.to_string() }
    }
}

/// What becomes of one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Only the new render has it.
    Add,
    /// Both have it, with other fields: which (leaf paths), the container images that change
    /// (`path: old → new`), and the immutable field that has it replaced rather than patched.
    Change { paths: Vec<String>, images: Vec<String>, replaced: Option<&'static str> },
    /// Only the old render has it: deleted.
    Prune,
    /// Only the old render has it, and it stays: why.
    Keep(&'static str),
    Unchanged,
}

/// One object's verdict, with the application (the new render's, else the old one's) it is
/// counted for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMove {
    /// `Kind namespace/name`, or `Kind name`.
    pub object: String,
    pub application: String,
    pub verdict: Verdict,
}

impl ObjectMove {
    /// `verb object: details`, as `kfop plan` prints it.
    pub fn line(&self) -> String {
        let (verb, details) = match &self.verdict {
            Verdict::Add => ("add", String::new()),
            Verdict::Change { paths, images, replaced } => {
                // What a reader looks for first: a replacement, then the images, then every field.
                let mut parts: Vec<String> = replaced.iter().map(|field| format!("replaced ({field} cannot change in place)")).collect();
                parts.extend(images.iter().map(|image| format!("image {image}")));
                parts.push(crate::plan::summarize(paths));
                ("change", parts.join("; "))
            }
            Verdict::Prune => ("prune", String::new()),
            Verdict::Keep(why) => ("keep", why.to_string()),
            Verdict::Unchanged => ("unchanged", String::new()),
        };
        match details.is_empty() {
            true => format!("{verb:<9} {} [{}]", self.object, self.application),
            false => format!("{verb:<9} {} [{}]: {details}", self.object, self.application),
        }
    }
}

/// Why an object that leaves the render stays, if it does.
fn kept(object: &Value) -> Option<&'static str> {
    let info = kinds::lookup(object["apiVersion"].as_str().unwrap_or_default(), object["kind"].as_str().unwrap_or_default())?;
    if info.is_crd() {
        Some("CRD: retained with its custom resources")
    } else if info.is_shared() {
        Some("namespace: retained")
    } else if info.holds_data() {
        Some("holds data: never pruned")
    } else {
        None
    }
}

/// `object` without what the operators write on every object (`components.kubeflow.org/`
/// labels and annotations: the applied hash, the version, the owner, the application), which
/// moves with any release and is no change of its own.
fn authored(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(metadata) = object["metadata"].as_object_mut() {
        for field in ["labels", "annotations"] {
            if let Some(map) = metadata.get_mut(field).and_then(Value::as_object_mut) {
                map.retain(|key, _| !key.starts_with("components.kubeflow.org/"));
            }
            if metadata.get(field).is_some_and(|m| m.as_object().is_some_and(|m| m.is_empty())) {
                metadata.remove(field);
            }
        }
    }
    object
}

/// The images among `paths` (`…containers[i].image`, `…initContainers[i].image`), as
/// `path: old → new`.
fn images(paths: &[String], before: &Value, after: &Value) -> Vec<String> {
    let at = |object: &Value, path: &str| -> Option<String> {
        let pointer = path.split('.').flat_map(|part| match part.split_once('[') {
            Some((key, index)) => vec![key.to_string(), index.trim_end_matches(']').to_string()],
            None => vec![part.to_string()],
        });
        let pointer: String = pointer.map(|p| format!("/{p}")).collect();
        object.pointer(&pointer).and_then(Value::as_str).map(String::from)
    };
    paths
        .iter()
        .filter(|p| p.ends_with(".image") && (p.contains("containers[") || p.contains("Containers[")))
        .map(|p| format!("{p}: {} → {}", at(before, p).unwrap_or_else(|| "none".into()), at(after, p).unwrap_or_else(|| "none".into())))
        .collect()
}

/// Every object of `before` and `after`, each with its verdict: the new render's objects in its
/// order, then those only the old one has, in its order.
pub fn between(before: &[Rendered], after: &[Rendered]) -> Vec<ObjectMove> {
    let old: BTreeMap<_, &Rendered> = before.iter().map(|r| (identity(&r.object), r)).collect();
    let mut seen = BTreeSet::new();
    let mut moves = Vec::new();
    for new in after {
        let id = identity(&new.object);
        if !seen.insert(id.clone()) {
            continue;
        }
        let verdict = match old.get(&id) {
            None => Verdict::Add,
            Some(old) => {
                let (was, will) = (authored(&old.object), authored(&new.object));
                let paths = changed_paths(&was, &will);
                if paths.is_empty() {
                    Verdict::Unchanged
                } else {
                    let info = kinds::lookup(will["apiVersion"].as_str().unwrap_or_default(), will["kind"].as_str().unwrap_or_default());
                    let replaced = info.and_then(|info| info.immutable_field_changed(&will, &was));
                    Verdict::Change { images: images(&paths, &was, &will), paths, replaced }
                }
            }
        };
        moves.push(ObjectMove { object: describe(&new.object), application: new.application.clone(), verdict });
    }
    for old in before {
        if !seen.insert(identity(&old.object)) {
            continue;
        }
        let verdict = kept(&old.object).map_or(Verdict::Prune, Verdict::Keep);
        moves.push(ObjectMove { object: describe(&old.object), application: old.application.clone(), verdict });
    }
    moves
}

/// What becomes of one KfDef application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplicationVerdict {
    Added,
    Removed,
    /// Installed by another component (from, to); its objects' verdicts say what else moves.
    Moved { from: String, to: String },
    Changed,
    Unchanged,
}

/// One application's verdict and how many of its objects are added, changed, pruned, kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplicationMove {
    pub name: String,
    pub component: String,
    pub verdict: ApplicationVerdict,
    pub add: usize,
    pub change: usize,
    pub prune: usize,
    pub keep: usize,
    pub unchanged: usize,
}

impl ApplicationMove {
    pub fn line(&self) -> String {
        let verdict = match &self.verdict {
            ApplicationVerdict::Added => "added".to_string(),
            ApplicationVerdict::Removed => "removed".to_string(),
            ApplicationVerdict::Moved { from, to } => format!("moved from {from} to {to}"),
            ApplicationVerdict::Changed => "changed".to_string(),
            ApplicationVerdict::Unchanged => "unchanged".to_string(),
        };
        format!(
            "{} ({}): {verdict}; {} to add, {} to change, {} to prune, {} kept, {} unchanged",
            self.name, self.component, self.add, self.change, self.prune, self.keep, self.unchanged
        )
    }
}

/// Each application of either KfDef (`(name, component)` in plan order: the new KfDef's, then
/// those only the old one has), with its verdict from `moves`.
pub fn applications(before: &[(String, String)], after: &[(String, String)], moves: &[ObjectMove]) -> Vec<ApplicationMove> {
    let old: BTreeMap<&str, &str> = before.iter().map(|(a, c)| (a.as_str(), c.as_str())).collect();
    let new: BTreeMap<&str, &str> = after.iter().map(|(a, c)| (a.as_str(), c.as_str())).collect();
    let names = after.iter().map(|(a, _)| a.as_str()).chain(before.iter().map(|(a, _)| a.as_str()).filter(|a| !new.contains_key(a)));
    let mut seen = BTreeSet::new();
    names
        .filter(|name| seen.insert(*name))
        .map(|name| {
            let of = moves.iter().filter(|m| m.application == name);
            let count = |f: fn(&Verdict) -> bool| of.clone().filter(|m| f(&m.verdict)).count();
            let (add, change, prune) = (count(|v| *v == Verdict::Add), count(|v| matches!(v, Verdict::Change { .. })), count(|v| *v == Verdict::Prune));
            let (keep, unchanged) = (count(|v| matches!(v, Verdict::Keep(_))), count(|v| *v == Verdict::Unchanged));
            let verdict = match (old.get(name), new.get(name)) {
                (None, _) => ApplicationVerdict::Added,
                (_, None) => ApplicationVerdict::Removed,
                (Some(from), Some(to)) if from != to => ApplicationVerdict::Moved { from: from.to_string(), to: to.to_string() },
                _ if add + change + prune + keep > 0 => ApplicationVerdict::Changed,
                _ => ApplicationVerdict::Unchanged,
            };
            let component = new.get(name).or(old.get(name)).copied().unwrap_or_default().to_string();
            ApplicationMove { name: name.to_string(), component, verdict, add, change, prune, keep, unchanged }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(name: &str, image: &str, app: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "kubeflow", "labels": {"components.kubeflow.org/version": "x"}},
            "spec": {"selector": {"matchLabels": {"app": app}}, "template": {"metadata": {"labels": {"app": app}}, "spec": {"containers": [{"name": "main", "image": image}]}}}})
    }

    fn rendered(object: Value, application: &str) -> Rendered {
        Rendered { object, application: application.into(), component: "kustomize".into() }
    }

    fn verdicts(moves: &[ObjectMove]) -> Vec<(&str, &Verdict)> {
        moves.iter().map(|m| (m.object.as_str(), &m.verdict)).collect()
    }

    #[test]
    fn objects_are_added_changed_with_their_images_replaced_pruned_or_kept() {
        let pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "mysql-pv-claim", "namespace": "kubeflow"}});
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "pytorchjobs.kubeflow.org"}});
        let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubeflow-system"}});
        let config = |data: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "kubeflow"}, "data": {"k": data}});
        let before = [
            rendered(deployment("api", "kfp-api-server:2.5.0", "api"), "pipeline"),
            rendered(deployment("ui", "ui:1", "ui"), "pipeline"),
            rendered(config("same"), "pipeline"),
            rendered(pvc, "pipeline"),
            rendered(crd, "training-operator"),
            rendered(namespace, "training-operator"),
            rendered(deployment("training-operator", "t:1", "t"), "training-operator"),
        ];
        let mut relabelled = config("same");
        relabelled["metadata"]["labels"] = json!({"components.kubeflow.org/version": "2.15.0"});
        let after = [
            rendered(deployment("api", "kfp-api-server:2.15.0", "api"), "pipeline"),
            rendered(deployment("ui", "ui:1", "ui-v2"), "pipeline"),
            rendered(relabelled, "pipeline"),
            rendered(deployment("trainer", "trainer:2", "trainer"), "trainer"),
        ];
        let moves = between(&before, &after);
        let image = "spec.template.spec.containers[0].image";
        assert_eq!(
            verdicts(&moves),
            [
                ("Deployment kubeflow/api", &Verdict::Change { paths: vec![image.into()], images: vec![format!("{image}: kfp-api-server:2.5.0 → kfp-api-server:2.15.0")], replaced: None }),
                (
                    "Deployment kubeflow/ui",
                    &Verdict::Change { paths: vec!["spec.selector.matchLabels.app".into(), "spec.template.metadata.labels.app".into()], images: vec![], replaced: Some("spec.selector") }
                ),
                ("ConfigMap kubeflow/c", &Verdict::Unchanged),
                ("Deployment kubeflow/trainer", &Verdict::Add),
                ("PersistentVolumeClaim kubeflow/mysql-pv-claim", &Verdict::Keep("holds data: never pruned")),
                ("CustomResourceDefinition pytorchjobs.kubeflow.org", &Verdict::Keep("CRD: retained with its custom resources")),
                ("Namespace kubeflow-system", &Verdict::Keep("namespace: retained")),
                ("Deployment kubeflow/training-operator", &Verdict::Prune),
            ]
        );
        assert_eq!(moves[0].line(), format!("change    Deployment kubeflow/api [pipeline]: image {image}: kfp-api-server:2.5.0 → kfp-api-server:2.15.0; {image}"));
        assert_eq!(
            moves[1].line(),
            "change    Deployment kubeflow/ui [pipeline]: replaced (spec.selector cannot change in place); spec.selector.matchLabels.app, spec.template.metadata.labels.app"
        );
        assert_eq!(moves[7].line(), "prune     Deployment kubeflow/training-operator [training-operator]");
    }

    #[test]
    fn applications_are_added_removed_moved_changed_or_unchanged() {
        let before = [rendered(deployment("a", "a:1", "a"), "central-dashboard"), rendered(deployment("t", "t:1", "t"), "training-operator"), rendered(deployment("k", "k:1", "k"), "katib")];
        let after = [rendered(deployment("a", "a:1", "a"), "central-dashboard"), rendered(deployment("n", "n:1", "n"), "trainer"), rendered(deployment("k", "k:2", "k"), "katib")];
        let moves = between(&before, &after);
        let pairs = |list: &[(&str, &str)]| list.iter().map(|(a, c)| (a.to_string(), c.to_string())).collect::<Vec<_>>();
        let old = pairs(&[("central-dashboard", "kustomize"), ("training-operator", "kustomize"), ("katib", "katib"), ("istio", "istio")]);
        let new = pairs(&[("istio", "kustomize"), ("central-dashboard", "kustomize"), ("trainer", "kustomize"), ("katib", "katib")]);
        let apps = applications(&old, &new, &moves);
        let got: Vec<(&str, &ApplicationVerdict, usize, usize, usize)> = apps.iter().map(|a| (a.name.as_str(), &a.verdict, a.add, a.change, a.prune)).collect();
        assert_eq!(
            got,
            [
                ("istio", &ApplicationVerdict::Moved { from: "istio".into(), to: "kustomize".into() }, 0, 0, 0),
                ("central-dashboard", &ApplicationVerdict::Unchanged, 0, 0, 0),
                ("trainer", &ApplicationVerdict::Added, 1, 0, 0),
                ("katib", &ApplicationVerdict::Changed, 0, 1, 0),
                ("training-operator", &ApplicationVerdict::Removed, 0, 0, 1),
            ]
        );
        assert_eq!(apps[4].line(), "training-operator (kustomize): removed; 0 to add, 0 to change, 1 to prune, 0 kept, 0 unchanged");
    }

    #[test]
    fn an_object_is_attributed_to_the_application_its_annotation_names() {
        let mut object = deployment("a", "a:1", "a");
        object["metadata"]["annotations"] = json!({APPLICATION_ANNOTATION: "pipeline"});
        assert_eq!(Rendered::new(object, "pipelines", "kubeflow-pipelines").application, "pipeline");
        assert_eq!(Rendered::new(deployment("a", "a:1", "a"), "pipelines", "kubeflow-pipelines").application, "kubeflow-pipelines");
    }
}
