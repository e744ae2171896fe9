//! Splitting a KfDef into one desired spec per component (pure).
//!
//! * Each application maps to at most one component ([`ComponentKind::from_application`]); its
//!   kustomize overlays and parameters travel in the component spec's `sources`.
//! * Component versions come from the KfDef's Kubeflow version, looked up in what the component
//!   operators announced ([`Catalog`]), unless the KfDef pins them ([`PINS_ANNOTATION`]). A
//!   component whose version cannot be resolved is left as it is published ([`Plan::unresolved`]).
//! * Namespaced objects go to the KfDef's namespace, unless one of the component's applications
//!   sets the kfctl parameter `namespace` — so two KfDefs in two namespaces never share objects.
//! * `platform` is what API discovery found (OpenShift or Kubernetes).

use std::collections::BTreeMap;

use kube::ResourceExt;
use kubeflow_crds::component::{ComponentKind, KustomizeSource, Platform, UnknownComponent};
use kubeflow_crds::kfdef::{ApplicationStatus, KfDef};
use serde_json::{Value, json};

use crate::catalog::{Catalog, Unresolved};

/// The desired spec of one component.
#[derive(Debug, Clone, PartialEq)]
pub struct ComponentPlan {
    pub spec: Value,
    pub spec_hash: String,
    pub version: String,
    /// Whether `version` comes from [`PINS_ANNOTATION`] rather than `spec.version`.
    pub pinned: bool,
    /// The version `spec.version` names for this component, when it names one.
    pub release_version: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub components: BTreeMap<ComponentKind, ComponentPlan>,
    /// Components of the KfDef whose version cannot be resolved: nothing is published for them.
    pub unresolved: BTreeMap<ComponentKind, Unresolved>,
    pub applications: Vec<ApplicationStatus>,
}

/// Annotation (JSON map component → version) pinning components to versions other than the
/// KfDef's Kubeflow release; written by KfUpgrade as it moves components, removed by the
/// meta-operator once `spec.version` names the same versions.
pub const PINS_ANNOTATION: &str = "kfdef.apps.kubeflow.org/component-versions";
/// Annotation naming the KfUpgrade that last wrote [`PINS_ANNOTATION`].
pub const PINNED_BY_ANNOTATION: &str = "kfdef.apps.kubeflow.org/pinned-by";

/// A KfDef the plan cannot be made for.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("annotation {PINS_ANNOTATION} is not a JSON map of component to version: {source}")]
    MalformedPins { source: serde_json::Error },
    #[error("annotation {PINS_ANNOTATION}: {source}")]
    UnknownPinnedComponent { source: UnknownComponent },
}

/// Component versions pinned on `kfdef`.
pub fn pins(kfdef: &KfDef) -> Result<BTreeMap<ComponentKind, String>, PlanError> {
    let Some(text) = kfdef.annotations().get(PINS_ANNOTATION) else { return Ok(BTreeMap::new()) };
    let by_name: BTreeMap<String, String> = serde_json::from_str(text).map_err(|source| PlanError::MalformedPins { source })?;
    by_name.into_iter().map(|(name, version)| Ok((name.parse().map_err(|source| PlanError::UnknownPinnedComponent { source })?, version))).collect()
}

/// Whether `kfdef`'s pins only repeat what `spec.version` names, so they can go: every pinned
/// component of the plan runs the version of the release `spec.version` names. Never while a
/// KfUpgrade holds the KfDef (`upgrading`): it writes the pins.
pub fn pins_redundant(plan: &Plan, has_pins: bool, upgrading: bool) -> bool {
    has_pins && !upgrading && plan.components.values().filter(|c| c.pinned).all(|c| c.release_version.as_deref() == Some(c.version.as_str()))
}

/// Why the components run other versions than `spec.version` names, and what makes them follow
/// it again; `None` when they run what it names.
pub fn pinned_drift(plan: &Plan, spec_version: &str, pinned_by: Option<&str>, catalog: &Catalog) -> Option<String> {
    let drifted: BTreeMap<ComponentKind, String> =
        plan.components.iter().filter(|(_, c)| c.pinned && c.release_version.as_deref() != Some(c.version.as_str())).map(|(k, c)| (*k, c.version.clone())).collect();
    if drifted.is_empty() {
        return None;
    }
    let running = drifted.iter().map(|(c, v)| format!("{c} {v}")).collect::<Vec<_>>().join(", ");
    let by = pinned_by.map_or_else(|| format!("annotation {PINS_ANNOTATION}"), |name| format!("KfUpgrade {name}"));
    let follow = match catalog.kubeflow_of(&drifted) {
        Some(kubeflow) => format!("they are Kubeflow {kubeflow}'s: set spec.version to v{kubeflow}.x and the pins go"),
        None => "no Kubeflow release has these versions: the pins stay until spec.version names one that does".to_string(),
    };
    Some(format!("spec.version is {spec_version:?}, but components run pinned versions ({running}) written by {by}; {follow}"))
}

pub fn plan(kfdef: &KfDef, platform: Platform, catalog: &Catalog) -> Result<Plan, PlanError> {
    let kubeflow = kfdef.spec.version.clone().unwrap_or_default();
    let pins = pins(kfdef)?;
    let repos: BTreeMap<&str, &str> = kfdef.spec.repos.iter().map(|r| (r.name.as_str(), r.uri.as_str())).collect();
    let mut sources: BTreeMap<ComponentKind, Vec<KustomizeSource>> = BTreeMap::new();
    let mut applications = Vec::new();
    for app in &kfdef.spec.applications {
        let Some(component) = ComponentKind::from_application(&app.name) else {
            applications.push(ApplicationStatus {
                name: app.name.clone(),
                component: None,
                state: "Unmapped".into(),
                message: format!(
                    "application {:?} belongs to none of the managed components ({}); it is kept in the spec but not installed",
                    app.name,
                    ComponentKind::allowed_names()
                ),
            });
            continue;
        };
        let config = app.kustomize_config.clone().unwrap_or_default();
        let repo_ref = config.repo_ref.unwrap_or_default();
        sources.entry(component).or_default().push(KustomizeSource {
            application: app.name.clone(),
            repo_uri: repos.get(repo_ref.name.as_str()).map(|u| u.to_string()),
            path: (!repo_ref.path.is_empty()).then_some(repo_ref.path),
            overlays: config.overlays,
            parameters: config.parameters,
            repo_sha256: kfdef.spec.repos.iter().find(|r| r.name == repo_ref.name).and_then(|r| r.sha256.clone()),
        });
        applications.push(ApplicationStatus { name: app.name.clone(), component: Some(component.name().into()), state: "Mapped".into(), message: String::new() });
    }
    let namespace = kfdef.namespace().unwrap_or_default();
    let mut components = BTreeMap::new();
    let mut unresolved = BTreeMap::new();
    for (component, sources) in sources {
        let release_version = catalog.version_for(component, &kubeflow);
        let version = match (pins.get(&component), &release_version) {
            (_, Err(e @ Unresolved::NotAnnounced { .. })) => Err(e.clone()),
            (Some(pinned), _) => Ok(pinned.clone()),
            (None, resolved) => resolved.clone(),
        };
        let version = match version {
            Ok(v) => v,
            Err(e) => {
                unresolved.insert(component, e);
                continue;
            }
        };
        let target = sources.iter().flat_map(|s| &s.parameters).find(|p| p.name == "namespace").map_or(namespace.clone(), |p| p.value.clone());
        let spec = json!({"version": version, "targetNamespace": target, "platform": platform, "sources": sources});
        let spec_hash = operator_runtime::content_hash(&spec);
        components.insert(component, ComponentPlan { spec, spec_hash, version, pinned: pins.contains_key(&component), release_version: release_version.ok() });
    }
    Ok(Plan { components, unresolved, applications })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::catalog::fixtures::catalog;

    fn kfdef(yaml: &str) -> KfDef {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    fn example() -> KfDef {
        let mut k = kfdef(&std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/kfdef-kfctl-istio-dex.yaml")).unwrap());
        k.spec.version = Some("v1.2.0".into());
        k
    }

    #[test]
    fn kfctl_kfdef_splits_into_components_and_lists_every_application() {
        let kfdef = example();
        let plan = plan(&kfdef, Platform::Kubernetes, &catalog()).unwrap();
        assert_eq!(
            plan.components.keys().copied().collect::<Vec<_>>(),
            [ComponentKind::Istio, ComponentKind::Dex, ComponentKind::KFServing, ComponentKind::Katib, ComponentKind::Pipelines, ComponentKind::ProfileController]
        );
        assert_eq!(plan.components[&ComponentKind::ProfileController].version, "v1.2.0");
        assert_eq!(plan.applications.len(), kfdef.spec.applications.len(), "an application was dropped");
        let unmapped: Vec<_> = plan.applications.iter().filter(|a| a.state == "Unmapped").map(|a| a.name.as_str()).collect();
        assert!(unmapped.contains(&"jupyter-web-app") && unmapped.contains(&"cert-manager"), "{unmapped:?}");
        assert!(plan.applications.iter().filter(|a| a.state == "Unmapped").all(|a| a.message.contains("not installed")));
        let katib = &plan.components[&ComponentKind::Katib];
        assert_eq!(katib.version, "v0.10.0");
        assert_eq!(katib.spec["targetNamespace"], "kubeflow");
        let sources = katib.spec["sources"].as_array().unwrap();
        assert_eq!(sources.iter().map(|s| s["application"].as_str().unwrap()).collect::<Vec<_>>(), ["katib-crds", "katib-controller"]);
        assert_eq!(sources[1]["overlays"], json!(["istio", "application"]));
        assert_eq!(sources[1]["repoUri"], "https://github.com/kubeflow/manifests/archive/v1.2.0.tar.gz");
        // Parameters travel with their application.
        let pipelines = &plan.components[&ComponentKind::Pipelines].spec["sources"];
        let minio = pipelines.as_array().unwrap().iter().find(|s| s["application"] == "minio").unwrap();
        assert_eq!(minio["parameters"], json!([{"name": "minioPvcName", "value": "minio-pv-claim"}]));
    }

    #[test]
    fn namespace_parameter_and_platform_reach_the_spec() {
        let k = kfdef("apiVersion: kfdef.apps.kubeflow.org/v1\nkind: KfDef\nmetadata: {name: kf, namespace: team}\nspec:\n  version: v1.3.0\n  applications:\n  - name: istio-crds\n    kustomizeConfig: {parameters: [{name: namespace, value: istio-system}]}\n  - name: katib-controller\n");
        let plan = plan(&k, Platform::OpenShift, &catalog()).unwrap();
        assert_eq!(plan.components[&ComponentKind::Istio].spec["targetNamespace"], "istio-system");
        assert_eq!(plan.components[&ComponentKind::Katib].spec["targetNamespace"], "team");
        assert_eq!(plan.components[&ComponentKind::Katib].spec["platform"], "OpenShift");
        assert_eq!(plan.components[&ComponentKind::Istio].version, "1.9.6");
        assert_eq!(plan.components.len(), 2);
    }

    #[test]
    fn spec_hash_changes_only_with_the_component_spec() {
        let mut k = example();
        let before = plan(&k, Platform::Kubernetes, &catalog()).unwrap();
        k.spec.applications.retain(|a| a.name != "spark-operator" && a.name != "jupyter-web-app");
        let after = plan(&k, Platform::Kubernetes, &catalog()).unwrap();
        assert_eq!(before.components, after.components, "removing unmapped applications changed component specs");
        k.spec.applications.iter_mut().find(|a| a.name == "katib-controller").unwrap().kustomize_config.as_mut().unwrap().overlays.push("extra".into());
        let edited = plan(&k, Platform::Kubernetes, &catalog()).unwrap();
        assert_ne!(edited.components[&ComponentKind::Katib].spec_hash, before.components[&ComponentKind::Katib].spec_hash);
        assert_eq!(edited.components[&ComponentKind::Istio].spec_hash, before.components[&ComponentKind::Istio].spec_hash);
    }

    #[test]
    fn an_unsupported_kubeflow_version_or_a_silent_operator_leaves_the_component_unresolved() {
        let mut k = example();
        k.spec.version = Some("v0.7.0".into());
        let plan = plan(&k, Platform::Kubernetes, &catalog()).unwrap();
        assert!(plan.components.is_empty());
        assert_eq!(
            plan.unresolved[&ComponentKind::Dex].to_string(),
            "Kubeflow version \"v0.7.0\" has no dex release; dex-operator ships v2.22.0 (Kubeflow 1.2), v2.24.0 (Kubeflow 1.3)"
        );
        let mut only_dex = crate::catalog::Catalog::default();
        only_dex.learn(ComponentKind::Dex, catalog().releases(ComponentKind::Dex).unwrap().to_vec());
        let plan = super::plan(&example(), Platform::Kubernetes, &only_dex).unwrap();
        assert_eq!(plan.components.keys().copied().collect::<Vec<_>>(), [ComponentKind::Dex]);
        assert_eq!(plan.unresolved[&ComponentKind::Katib], Unresolved::NotAnnounced { component: ComponentKind::Katib });
    }

    #[test]
    fn pins_that_differ_from_spec_version_are_reported_and_matching_ones_can_go() {
        let mut k = example();
        k.annotations_mut().insert(PINS_ANNOTATION.into(), r#"{"istio": "1.9.6", "katib": "v0.11.0"}"#.into());
        let p = plan(&k, Platform::Kubernetes, &catalog()).unwrap();
        assert_eq!(
            pinned_drift(&p, "v1.2.0", Some("to-1-3"), &catalog()).unwrap(),
            "spec.version is \"v1.2.0\", but components run pinned versions (istio 1.9.6, katib v0.11.0) written by KfUpgrade to-1-3; they are Kubeflow 1.3's: set spec.version to v1.3.x and the pins go"
        );
        assert!(!pins_redundant(&p, true, false));
        k.spec.version = Some("v1.3.0".into());
        let p = plan(&k, Platform::Kubernetes, &catalog()).unwrap();
        assert_eq!(pinned_drift(&p, "v1.3.0", Some("to-1-3"), &catalog()), None);
        assert!(pins_redundant(&p, true, false));
        assert!(!pins_redundant(&p, true, true), "a running KfUpgrade owns the pins");
    }

    #[test]
    fn pins_override_the_release_and_bad_pins_are_an_error() {
        let mut k = example();
        k.annotations_mut().insert(PINS_ANNOTATION.into(), r#"{"katib": "v0.11.0"}"#.into());
        let p = plan(&k, Platform::Kubernetes, &catalog()).unwrap();
        let katib = &p.components[&ComponentKind::Katib];
        assert_eq!((katib.version.as_str(), katib.pinned, katib.release_version.as_deref()), ("v0.11.0", true, Some("v0.10.0")));
        assert_eq!(p.components[&ComponentKind::Dex].version, "v2.22.0");
        k.annotations_mut().insert(PINS_ANNOTATION.into(), "katib=v0.11.0".into());
        let err = plan(&k, Platform::Kubernetes, &catalog()).unwrap_err();
        assert!(matches!(err, PlanError::MalformedPins { .. }), "{err}");
        assert!(err.to_string().starts_with("annotation kfdef.apps.kubeflow.org/component-versions is not a JSON map of component to version: "), "{err}");
        k.annotations_mut().insert(PINS_ANNOTATION.into(), r#"{"seldon": "v1"}"#.into());
        assert_eq!(
            plan(&k, Platform::Kubernetes, &catalog()).unwrap_err().to_string(),
            "annotation kfdef.apps.kubeflow.org/component-versions: unknown component \"seldon\"; allowed: istio, dex, kfserving, katib, pipelines, profiles, kustomize"
        );
    }
}
