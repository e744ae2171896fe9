//! Released versions of the operators, oldest first. Every package (meta-operator and each
//! component operator) is released with the same version; each release replaces the one before it
//! in the `stable` channel and skips every earlier one, so OLM can upgrade from any of them.
//!
//! The newest release is the one in development: its bundles are rendered from the code. Every
//! older one is published, and its bundles stay as they were then: `bundlegen` reads them back
//! from `bundle/` and checks them against the digest recorded here. To cut a release: record the
//! digest of the current one (`cargo run -p kubeflow-bundle --bin bundlegen -- --digest <version>`),
//! add the next version here and to the workspace, and run `make generate`.

use kubeflow_crds::bus::ReleaseInfo;

/// One released version of the operators.
#[derive(Debug, Clone, Copy)]
pub struct OperatorRelease {
    /// Semantic version; the newest one is the workspace's crate version.
    pub version: &'static str,
    /// Release date, written into the CSV's `createdAt` (fixed so bundles render reproducibly).
    pub created_at: &'static str,
    /// Kubeflow releases (major.minor) this version installs: the component operators ship the
    /// component versions tagged with these ([`kubeflow_crds::bus::ReleaseInfo::kubeflow`]).
    pub kubeflow: &'static [&'static str],
    /// SHA-256 of the published bundles ([`crate::release_digest`]); `None` while in development.
    pub digest: Option<&'static str>,
}

impl OperatorRelease {
    /// Whether the release is published (its bundles are frozen).
    pub fn is_released(&self) -> bool {
        self.digest.is_some()
    }
}

pub const OPERATOR_RELEASES: &[OperatorRelease] = &[
    OperatorRelease { version: "0.1.0", created_at: "2026-10-05T00:00:00Z", kubeflow: &["1.2"], digest: Some("sha256:c12ee1c3c99d167dab50302844ddd95f08053fdf01bbeb86137b9edc0bcb26dd") },
    OperatorRelease { version: "0.2.0", created_at: "2026-11-21T00:00:00Z", kubeflow: &["1.2", "1.3", "1.10", "1.11"], digest: None },
];

/// Packages that appeared after the first release, with the version that introduced them.
pub const INTRODUCED: &[(&str, &str)] = &[("kubeflow-profiles-operator", "0.2.0"), ("kubeflow-kustomize-operator", "0.2.0"), ("kubeflow-fleet-spoke", "0.2.0")];

/// Index of the first release that has package `name`.
pub fn first_release(name: &str) -> usize {
    INTRODUCED
        .iter()
        .find(|(package, _)| *package == name)
        .and_then(|(_, version)| OPERATOR_RELEASES.iter().position(|r| r.version == *version))
        .unwrap_or(0)
}

/// `olm.skipRange` of release `index`: every earlier release.
pub fn skip_range(index: usize) -> String {
    format!(">={} <{}", OPERATOR_RELEASES[0].version, OPERATOR_RELEASES[index].version)
}

/// Versions among a component's `releases` that operator release `release` ships, oldest first:
/// those of the Kubeflow releases it installs.
pub fn shipped_versions(releases: &[ReleaseInfo], release: &OperatorRelease) -> Vec<String> {
    releases.iter().filter(|r| r.kubeflow.iter().any(|k| release.kubeflow.contains(&k.as_str()))).map(|r| r.version.clone()).collect()
}
