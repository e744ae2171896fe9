//! Splitting a KfDef into one desired spec per component (pure).
//!
//! * Each application maps to at most one component ([`ComponentKind::from_application`]); its
//!   kustomize overlays and parameters travel in the component spec's `sources`.
//! * Component versions come from the KfDef's Kubeflow version ([`crate::distribution`]).
//! * Namespaced objects go to the KfDef's namespace, unless one of the component's applications
//!   sets the kfctl parameter `namespace` — so two KfDefs in two namespaces never share objects.
//! * `platform` is what API discovery found (OpenShift or Kubernetes).

use std::collections::BTreeMap;

use kube::ResourceExt;
use kubeflow_crds::component::{ComponentKind, KustomizeSource, Platform};
use kubeflow_crds::kfdef::{ApplicationStatus, KfDef};
use serde_json::{Value, json};

use crate::distribution::{self, UnsupportedRelease};

/// The desired spec of one component and the applications it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct ComponentPlan {
    pub spec: Value,
    pub spec_hash: String,
    pub version: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub components: BTreeMap<ComponentKind, ComponentPlan>,
    pub applications: Vec<ApplicationStatus>,
}

/// Annotation (JSON map component → version) pinning components to versions other than the
/// KfDef's Kubeflow release; written by KfUpgrade while it moves components one at a time.
pub const PINS_ANNOTATION: &str = "kfdef.apps.kubeflow.org/component-versions";

/// Component versions pinned on `kfdef`.
pub fn pins(kfdef: &KfDef) -> BTreeMap<ComponentKind, String> {
    kfdef.annotations().get(PINS_ANNOTATION).and_then(|v| serde_json::from_str(v).ok()).unwrap_or_default()
}

pub fn plan(kfdef: &KfDef, platform: Platform) -> Result<Plan, UnsupportedRelease> {
    let version = kfdef.spec.version.clone().unwrap_or_default();
    let versions = distribution::component_versions(&version)?;
    let pins = pins(kfdef);
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
        });
        applications.push(ApplicationStatus { name: app.name.clone(), component: Some(component.name().into()), state: "Mapped".into(), message: String::new() });
    }
    let namespace = kfdef.namespace().unwrap_or_default();
    let components = sources
        .into_iter()
        .map(|(component, sources)| {
            let version = pins.get(&component).or_else(|| versions.get(&component)).cloned().unwrap_or_default();
            let target = sources.iter().flat_map(|s| &s.parameters).find(|p| p.name == "namespace").map_or(namespace.clone(), |p| p.value.clone());
            let spec = json!({"version": version, "targetNamespace": target, "platform": platform, "sources": sources});
            let spec_hash = operator_runtime::content_hash(&spec);
            (component, ComponentPlan { spec, spec_hash, version })
        })
        .collect();
    Ok(Plan { components, applications })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kfdef(yaml: &str) -> KfDef {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn example() -> KfDef {
        let mut k = kfdef(&std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/kfdef-kfctl-istio-dex.yaml")).unwrap());
        k.spec.version = Some("v1.2.0".into());
        k
    }

    #[test]
    fn kfctl_kfdef_splits_into_five_components_and_lists_every_application() {
        let kfdef = example();
        let plan = plan(&kfdef, Platform::Kubernetes).unwrap();
        assert_eq!(plan.components.keys().copied().collect::<Vec<_>>(), ComponentKind::ALL.iter().copied().collect::<std::collections::BTreeSet<_>>().into_iter().collect::<Vec<_>>());
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
        let plan = plan(&k, Platform::OpenShift).unwrap();
        assert_eq!(plan.components[&ComponentKind::Istio].spec["targetNamespace"], "istio-system");
        assert_eq!(plan.components[&ComponentKind::Katib].spec["targetNamespace"], "team");
        assert_eq!(plan.components[&ComponentKind::Katib].spec["platform"], "OpenShift");
        assert_eq!(plan.components[&ComponentKind::Istio].version, "1.9.6");
        assert_eq!(plan.components.len(), 2);
    }

    #[test]
    fn spec_hash_changes_only_with_the_component_spec() {
        let mut k = example();
        let before = plan(&k, Platform::Kubernetes).unwrap();
        k.spec.applications.retain(|a| a.name != "spark-operator" && a.name != "profiles");
        let after = plan(&k, Platform::Kubernetes).unwrap();
        assert_eq!(before.components, after.components, "removing unmapped applications changed component specs");
        k.spec.applications.iter_mut().find(|a| a.name == "katib-controller").unwrap().kustomize_config.as_mut().unwrap().overlays.push("extra".into());
        let edited = plan(&k, Platform::Kubernetes).unwrap();
        assert_ne!(edited.components[&ComponentKind::Katib].spec_hash, before.components[&ComponentKind::Katib].spec_hash);
        assert_eq!(edited.components[&ComponentKind::Istio].spec_hash, before.components[&ComponentKind::Istio].spec_hash);
    }

    #[test]
    fn unsupported_kubeflow_version_is_refused() {
        let mut k = example();
        k.spec.version = Some("v0.7.0".into());
        assert!(plan(&k, Platform::Kubernetes).unwrap_err().to_string().contains("supported: v1.2.x, v1.3.x"));
    }
}
