//! Which component versions make up each Kubeflow release (pure). Which component each kfctl
//! application belongs to is declared with the components ([`ComponentKind::from_application`]);
//! which version of a component belongs to which Kubeflow release, with its releases
//! ([`component_framework::Release::kubeflow`]).

use std::collections::{BTreeMap, BTreeSet};

use kubeflow_crds::component::ComponentKind;

use crate::upgrade::releases;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("spec.version: Kubeflow version {given:?} is not supported; supported: {}", supported())]
pub struct UnsupportedRelease {
    pub given: String,
}

/// Kubeflow releases (major.minor) some component version is tagged with.
fn kubeflow_releases() -> BTreeSet<&'static str> {
    ComponentKind::ALL.iter().flat_map(|c| releases(*c)).flat_map(|r| r.kubeflow.iter().copied()).collect()
}

fn supported() -> String {
    kubeflow_releases().iter().map(|r| format!("v{r}.x")).collect::<Vec<_>>().join(", ")
}

/// `v1.2.0`, `1.2`, `v1.2-branch` → `1.2`.
fn release_of(version: &str) -> Option<String> {
    let digits = version.trim_start_matches('v');
    let mut parts = digits.split(|c: char| !c.is_ascii_digit());
    let (major, minor) = (parts.next()?, parts.next()?);
    (!major.is_empty() && !minor.is_empty()).then(|| format!("{major}.{minor}"))
}

/// Component versions of Kubeflow `version`.
pub fn component_versions(version: &str) -> Result<BTreeMap<ComponentKind, String>, UnsupportedRelease> {
    let unsupported = || UnsupportedRelease { given: version.to_string() };
    let release = release_of(version).filter(|r| kubeflow_releases().contains(r.as_str())).ok_or_else(unsupported)?;
    Ok(ComponentKind::ALL
        .iter()
        .filter_map(|c| releases(*c).iter().find(|r| r.kubeflow.contains(&release.as_str())).map(|r| (*c, r.version.to_string())))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kfctl_version_spellings_resolve_to_a_release() {
        for v in ["v1.2.0", "1.2", "v1.2-branch", "v1.2.1"] {
            assert_eq!(component_versions(v).unwrap()[&ComponentKind::Katib], "v0.10.0", "{v}");
        }
        assert_eq!(component_versions("v1.3.0").unwrap()[&ComponentKind::Istio], "1.9.6");
        let err = component_versions("v1.0.2").unwrap_err().to_string();
        assert!(err.contains("spec.version") && err.contains("v1.2.x, v1.3.x"), "{err}");
    }
}
