//! What upstream's release notes ask of an operator by hand between Kubeflow releases (pure):
//! steps no manifest can express (data migrations, objects another release left behind). A
//! KfUpgrade lists those of every release it crosses in its status, next to its plan, before
//! anything is written. Sources and the component versions of each release:
//! docs/kubeflow-releases.md.

/// One release's steps: (Kubeflow release `major.minor`, step).
const MANUAL_STEPS: &[(&str, &str)] = &[
    (
        "1.10",
        "Kubeflow 1.10: ClusterRoleBinding meta-controller-cluster-role-binding, which 1.9 made, is no longer used: \
         it is pruned when this KfDef made it; otherwise delete it by hand",
    ),
    (
        "1.11",
        "Kubeflow 1.11: Pipelines' default object store moves from MinIO to SeaweedFS (which takes over Service minio-service). \
         Before approving, back up what MinIO holds (bucket mlpipeline); after the upgrade copy it into SeaweedFS with an S3 client. \
         MinIO's PersistentVolumeClaim is kept (an upgrade never deletes one): delete it once the data is copied",
    ),
    (
        "1.11",
        "Kubeflow 1.11 needs Kubernetes 1.33 or later and renders with kustomize 5.7 or later (the generic component's bundled kustomize)",
    ),
];

/// `(major, minor)` of a Kubeflow version such as `v1.10.2`, `1.11` or `26.03`, comparable.
fn release(version: &str) -> Option<(u32, u32)> {
    let release = crate::catalog::kubeflow_release(version)?;
    let (major, minor) = release.split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// The manual steps of every release after `from` up to and including `to`, oldest first; none
/// when either version is not a Kubeflow release or `to` is not later.
pub fn manual_steps(from: &str, to: &str) -> Vec<String> {
    let (Some(from), Some(to)) = (release(from), release(to)) else { return Vec::new() };
    MANUAL_STEPS.iter().filter(|(at, _)| release(at).is_some_and(|at| from < at && at <= to)).map(|(_, step)| step.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upgrade_lists_the_steps_of_the_releases_it_crosses_and_no_others() {
        let to_111 = manual_steps("v1.10.2", "v1.11.0");
        assert_eq!(to_111.len(), 2, "{to_111:?}");
        assert!(to_111[0].starts_with("Kubeflow 1.11: Pipelines' default object store moves from MinIO to SeaweedFS"), "{to_111:?}");
        assert!(manual_steps("v1.9.1", "v1.11.0")[0].contains("meta-controller-cluster-role-binding"));
        assert_eq!(manual_steps("v1.9.1", "v1.11.0").len(), 3);
        // A patch release within 1.11, a dated release after it, a downgrade, and versions that name no release.
        assert!(manual_steps("v1.11.0", "v1.11.1").is_empty());
        assert!(manual_steps("v1.11.0", "26.03").is_empty());
        assert!(manual_steps("v1.11.0", "v1.10.0").is_empty());
        assert!(manual_steps("v1.0.2", "latest").is_empty());
    }
}
