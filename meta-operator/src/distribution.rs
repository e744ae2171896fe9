//! What a KfDef means in terms of components (pure): which component each kfctl application belongs
//! to, and which component versions make up each Kubeflow release.

use kubeflow_crds::component::ComponentKind;

use ComponentKind::{Dex, Istio, KFServing, Katib, Pipelines};

/// kfctl application name → component. Applications not listed belong to no component.
pub const APPLICATIONS: &[(&str, ComponentKind)] = &[
    ("istio-crds", Istio),
    ("istio-install", Istio),
    ("istio-stack", Istio),
    ("cluster-local-gateway", Istio),
    ("istio", Istio),
    ("kfserving-gateway", Istio),
    ("add-anonymous-user-filter", Istio),
    ("dex", Dex),
    ("dex-crds", Dex),
    ("dex-auth", Dex),
    ("kfserving-crds", KFServing),
    ("kfserving-install", KFServing),
    ("kfserving", KFServing),
    ("katib-crds", Katib),
    ("katib-controller", Katib),
    ("katib-db", Katib),
    ("katib-db-manager", Katib),
    ("katib-ui", Katib),
    ("katib", Katib),
    ("api-service", Pipelines),
    ("pipelines-ui", Pipelines),
    ("pipelines-viewer", Pipelines),
    ("persistent-agent", Pipelines),
    ("scheduledworkflow", Pipelines),
    ("pipeline-visualization-service", Pipelines),
    ("pipelines-runner", Pipelines),
    ("minio", Pipelines),
    ("mysql", Pipelines),
    ("argo", Pipelines),
    ("metadata", Pipelines),
    ("pipeline", Pipelines),
    ("kubeflow-pipelines", Pipelines),
];

/// Component an application belongs to.
pub fn component_of(application: &str) -> Option<ComponentKind> {
    APPLICATIONS.iter().find(|(name, _)| *name == application).map(|(_, c)| *c)
}

/// Kubeflow release (major.minor) → version of each component.
pub const RELEASES: &[(&str, [(ComponentKind, &str); 5])] = &[
    ("1.2", [(Istio, "1.3.1"), (Dex, "v2.22.0"), (KFServing, "v0.4.1"), (Katib, "v0.10.0"), (Pipelines, "1.0.4")]),
    ("1.3", [(Istio, "1.9.6"), (Dex, "v2.24.0"), (KFServing, "v0.5.1"), (Katib, "v0.11.0"), (Pipelines, "1.5.0")]),
];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("spec.version: Kubeflow version {given:?} is not supported; supported: {}", supported())]
pub struct UnsupportedRelease {
    pub given: String,
}

fn supported() -> String {
    RELEASES.iter().map(|(r, _)| format!("v{r}.x")).collect::<Vec<_>>().join(", ")
}

/// `v1.2.0`, `1.2`, `v1.2-branch` → `1.2`.
fn release_of(version: &str) -> Option<String> {
    let digits = version.trim_start_matches('v');
    let mut parts = digits.split(|c: char| !c.is_ascii_digit());
    let (major, minor) = (parts.next()?, parts.next()?);
    (!major.is_empty() && !minor.is_empty()).then(|| format!("{major}.{minor}"))
}

/// Component versions of Kubeflow `version`.
pub fn component_versions(version: &str) -> Result<&'static [(ComponentKind, &'static str); 5], UnsupportedRelease> {
    let release = release_of(version);
    RELEASES
        .iter()
        .find(|(r, _)| Some(*r) == release.as_deref())
        .map(|(_, versions)| versions)
        .ok_or_else(|| UnsupportedRelease { given: version.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_component_has_applications_and_names_are_unique() {
        for component in ComponentKind::ALL {
            assert!(APPLICATIONS.iter().any(|(_, c)| *c == component), "{component}");
        }
        let mut names: Vec<_> = APPLICATIONS.iter().map(|(n, _)| n).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), APPLICATIONS.len());
    }

    #[test]
    fn kfctl_version_spellings_resolve_to_a_release() {
        for v in ["v1.2.0", "1.2", "v1.2-branch", "v1.2.1"] {
            assert_eq!(component_versions(v).unwrap()[3], (Katib, "v0.10.0"), "{v}");
        }
        assert_eq!(component_versions("v1.3.0").unwrap()[0], (Istio, "1.9.6"));
        let err = component_versions("v1.0.2").unwrap_err().to_string();
        assert!(err.contains("spec.version") && err.contains("v1.2.x, v1.3.x"), "{err}");
    }
}
