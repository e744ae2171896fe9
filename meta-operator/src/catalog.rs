//! The component releases the meta-operator knows (pure): what each component operator announced
//! in its heartbeat — its versions, their upgrade edges and the Kubeflow releases each belongs to.
//! An operator that stops beating keeps its entry: a restart does not make its releases unknown.

use std::collections::BTreeMap;

use kubeflow_crds::bus::ReleaseInfo;
use kubeflow_crds::component::ComponentKind;

/// Releases per component, as last announced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Catalog {
    releases: BTreeMap<ComponentKind, Vec<ReleaseInfo>>,
}

/// Why a component's version cannot be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unresolved {
    #[error("waiting for {component}-operator: it has not announced its releases on NATS")]
    NotAnnounced { component: ComponentKind },
    #[error("Kubeflow version {given:?} has no {component} release; {component}-operator ships {shipped}")]
    UnsupportedKubeflow { component: ComponentKind, given: String, shipped: String },
    /// Applications install in the KfDef's order: one listed earlier has no installer yet.
    #[error("waiting for {waiting_for}-operator to announce its releases: application {application:?}, listed before this component's, may be its to install")]
    EarlierApplicationUndecided { waiting_for: ComponentKind, application: String },
}

pub use kubeflow_crds::bus::kubeflow_release;

impl Catalog {
    /// Records what `component`'s operator announced; an empty list (an operator too old to
    /// announce releases) changes nothing. Whether the catalog changed.
    pub fn learn(&mut self, component: ComponentKind, releases: Vec<ReleaseInfo>) -> bool {
        if releases.is_empty() || self.releases.get(&component) == Some(&releases) {
            return false;
        }
        self.releases.insert(component, releases);
        true
    }

    /// `component`'s releases, oldest first, once its operator announced them.
    pub fn releases(&self, component: ComponentKind) -> Result<&[ReleaseInfo], Unresolved> {
        self.releases.get(&component).map(Vec::as_slice).ok_or(Unresolved::NotAnnounced { component })
    }

    /// The version of `component` that belongs to Kubeflow `version` (e.g. `v1.3.0`): the one
    /// announced for that patch release, else for its minor release.
    pub fn version_for(&self, component: ComponentKind, version: &str) -> Result<String, Unresolved> {
        let releases = self.releases(component)?;
        kubeflow_crds::bus::release_for(releases, version)
            .map(|r| r.version.clone())
            .ok_or_else(|| Unresolved::UnsupportedKubeflow { component, given: version.to_string(), shipped: describe(releases) })
    }

    /// For a Kubeflow `version` later than every one `component` lists, the release whose
    /// knowledge installs its packages at the version they run
    /// ([`kubeflow_crds::bus::later_release_for`]), if its operator announced one.
    pub fn later_release(&self, component: ComponentKind, version: &str) -> Option<String> {
        let releases = self.releases.get(&component)?;
        kubeflow_crds::bus::release_for(releases, version).is_none().then(|| kubeflow_crds::bus::later_release_for(releases, version)).flatten().map(|r| r.version.clone())
    }

    /// The Kubeflow release (major.minor) whose versions of the components in `versions` are
    /// exactly those, if one is.
    pub fn kubeflow_of(&self, versions: &BTreeMap<ComponentKind, String>) -> Option<String> {
        let mut candidates: Vec<&String> = self.releases.values().flatten().flat_map(|r| &r.kubeflow).collect();
        candidates.sort();
        candidates.dedup();
        candidates.into_iter().find(|tag| versions.iter().all(|(c, v)| self.version_for(*c, tag).is_ok_and(|found| &found == v))).cloned()
    }
}

/// `v0.10.0 (Kubeflow 1.2), v0.11.0 (Kubeflow 1.3), v0.12.0`.
fn describe(releases: &[ReleaseInfo]) -> String {
    releases
        .iter()
        .map(|r| if r.kubeflow.is_empty() { r.version.clone() } else { format!("{} (Kubeflow {})", r.version, r.kubeflow.join(", ")) })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
pub mod fixtures {
    use super::*;

    pub fn release(version: &str, upgrades_from: &[&str], kubeflow: &[&str]) -> ReleaseInfo {
        ReleaseInfo { version: version.into(), upgrades_from: upgrades_from.iter().map(|v| v.to_string()).collect(), kubeflow: kubeflow.iter().map(|v| v.to_string()).collect(), covers_later: false }
    }

    /// What the six operators announce: two releases each, Kubeflow 1.2 and 1.3; Katib also a
    /// later one reachable only from v0.11.0.
    pub fn catalog() -> Catalog {
        let mut c = Catalog::default();
        c.learn(ComponentKind::Istio, vec![release("1.3.1", &[], &["1.2"]), release("1.9.6", &["1.3.1"], &["1.3"])]);
        c.learn(ComponentKind::Dex, vec![release("v2.22.0", &[], &["1.2"]), release("v2.24.0", &["v2.22.0"], &["1.3"])]);
        c.learn(ComponentKind::KFServing, vec![release("v0.4.1", &[], &["1.2"]), release("v0.5.1", &["v0.4.1"], &["1.3"])]);
        c.learn(
            ComponentKind::Katib,
            vec![release("v0.10.0", &[], &["1.2"]), release("v0.11.0", &["v0.10.0"], &["1.3"]), release("v0.12.0", &["v0.11.0"], &[])],
        );
        c.learn(ComponentKind::Pipelines, vec![release("1.0.4", &[], &["1.2"]), release("1.5.0", &["1.0.4"], &["1.3"])]);
        c.learn(ComponentKind::ProfileController, vec![release("v1.2.0", &[], &["1.2"]), release("v1.3.0", &["v1.2.0"], &["1.3"])]);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;

    #[test]
    fn kfctl_version_spellings_resolve_to_the_announced_versions() {
        let c = catalog();
        for v in ["v1.2.0", "1.2", "v1.2-branch", "v1.2.1"] {
            assert_eq!(c.version_for(ComponentKind::Katib, v).unwrap(), "v0.10.0", "{v}");
        }
        assert_eq!(c.version_for(ComponentKind::Istio, "v1.3.0").unwrap(), "1.9.6");
        assert_eq!(
            c.version_for(ComponentKind::Katib, "v1.0.2").unwrap_err().to_string(),
            "Kubeflow version \"v1.0.2\" has no katib release; katib-operator ships v0.10.0 (Kubeflow 1.2), v0.11.0 (Kubeflow 1.3), v0.12.0"
        );
    }

    #[test]
    fn a_patch_release_listed_on_its_own_takes_its_version_and_later_patches_keep_it() {
        let mut c = Catalog::default();
        c.learn(ComponentKind::Katib, vec![release("v0.11.0", &[], &["1.3"]), release("v0.11.1", &["v0.11.0"], &["1.3.1"])]);
        for (kubeflow, katib) in [("v1.3.0", "v0.11.0"), ("v1.3.1", "v0.11.1"), ("1.3.1", "v0.11.1"), ("v1.3.1-rc.2", "v0.11.1"), ("1.3", "v0.11.0"), ("v1.3-branch", "v0.11.0"), ("v1.3.2", "v0.11.1")] {
            assert_eq!(c.version_for(ComponentKind::Katib, kubeflow).unwrap(), katib, "{kubeflow}");
        }
        assert!(c.version_for(ComponentKind::Katib, "v1.4.1").is_err());
        let pins = BTreeMap::from([(ComponentKind::Katib, "v0.11.1".to_string())]);
        assert_eq!(c.kubeflow_of(&pins).as_deref(), Some("1.3.1"));
    }

    #[test]
    fn an_operator_that_never_announced_is_named_and_an_empty_announcement_forgets_nothing() {
        let mut c = Catalog::default();
        assert_eq!(c.version_for(ComponentKind::Dex, "v1.2.0"), Err(Unresolved::NotAnnounced { component: ComponentKind::Dex }));
        assert_eq!(Unresolved::NotAnnounced { component: ComponentKind::Dex }.to_string(), "waiting for dex-operator: it has not announced its releases on NATS");
        assert!(c.learn(ComponentKind::Dex, vec![release("v2.22.0", &[], &["1.2"])]));
        assert!(!c.learn(ComponentKind::Dex, vec![release("v2.22.0", &[], &["1.2"])]), "the same announcement again is no change");
        assert!(!c.learn(ComponentKind::Dex, Vec::new()));
        assert_eq!(c.version_for(ComponentKind::Dex, "v1.2.0").unwrap(), "v2.22.0");
    }

    #[test]
    fn pinned_versions_name_their_kubeflow_release() {
        let c = catalog();
        let pins = BTreeMap::from([(ComponentKind::Istio, "1.9.6".to_string()), (ComponentKind::Katib, "v0.11.0".to_string())]);
        assert_eq!(c.kubeflow_of(&pins).as_deref(), Some("1.3"));
        let mixed = BTreeMap::from([(ComponentKind::Istio, "1.9.6".to_string()), (ComponentKind::Katib, "v0.10.0".to_string())]);
        assert_eq!(c.kubeflow_of(&mixed), None);
    }
}
