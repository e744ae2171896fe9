//! KfUpgrade decisions (pure): which components move, in what order, from and to which versions,
//! and whether each move is allowed by the component's release edges, as its operator announced
//! them ([`Catalog`]).

use std::collections::{BTreeMap, VecDeque};

use kubeflow_crds::bus::ReleaseInfo;
use kubeflow_crds::component::ComponentKind;
use kubeflow_crds::kfdef::{KfDef, Repo};
use kubeflow_crds::kfupgrade::{KfUpgradeSpec, StepPhase, UpgradeStep};

use crate::catalog::{Catalog, Unresolved};
use crate::plan::{Plan, PlanError, generic_version, pinned_repos, with_pinned};

/// Shortest chain of direct upgrades from `from` to `to` among `releases`.
pub fn path(releases: &[ReleaseInfo], from: &str, to: &str) -> Option<Vec<String>> {
    let mut previous: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([from]);
    while let Some(at) = queue.pop_front() {
        if at == to {
            let mut chain = vec![to.to_string()];
            let mut cur = to;
            while let Some(p) = previous.get(cur) {
                chain.push(p.to_string());
                cur = p;
            }
            chain.reverse();
            return Some(chain);
        }
        for next in releases.iter().filter(|r| r.upgrades_from.iter().any(|f| f == at)) {
            if next.version != from && !previous.contains_key(next.version.as_str()) {
                previous.insert(&next.version, at);
                queue.push_back(&next.version);
            }
        }
    }
    None
}

/// Why a component may not move from one version to another.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoveRefused {
    #[error("{component}: version {to} is not shipped; shipped versions: {shipped}")]
    NotShipped { component: ComponentKind, to: String, shipped: String },
    #[error("{component}: {from} → {to} is a downgrade, which KfUpgrade does not do; versions after {from}: {later}")]
    Downgrade { component: ComponentKind, from: String, to: String, later: String },
    #[error("{component}: cannot upgrade from {from} to {to} directly; {allowed}")]
    NoDirectEdge { component: ComponentKind, from: String, to: String, allowed: String },
}

/// Whether `component` may move from `from` to `to` in one step: `to` is shipped, later than
/// `from`, and lists `from` among the versions it upgrades from.
pub fn check_move(component: ComponentKind, releases: &[ReleaseInfo], from: &str, to: &str) -> Result<(), MoveRefused> {
    let index = |v: &str| releases.iter().position(|r| r.version == v);
    let versions = |from: usize| releases[from..].iter().map(|r| r.version.as_str()).collect::<Vec<_>>().join(", ");
    let Some(to_index) = index(to) else {
        return Err(MoveRefused::NotShipped { component, to: to.into(), shipped: versions(0) });
    };
    if let Some(from_index) = index(from).filter(|f| to_index < *f) {
        return Err(MoveRefused::Downgrade { component, from: from.into(), to: to.into(), later: versions(from_index + 1) });
    }
    let target = &releases[to_index];
    if !target.upgrades_from.iter().any(|f| f == from) {
        let allowed = match path(releases, from, to) {
            Some(chain) => format!("allowed path: {}, one KfUpgrade per step", chain.join(" → ")),
            None => format!("{to} can be reached from: {}", target.upgrades_from.join(", ")),
        };
        return Err(MoveRefused::NoDirectEdge { component, from: from.into(), to: to.into(), allowed });
    }
    Ok(())
}

/// A change of component versions that no KfUpgrade made (an edit of `spec.version`, pins
/// removed by hand, …), checked against what is published with the rules of [`steps`]: each
/// component that moves must reach a shipped, later version over a direct edge. Pinned versions
/// are a KfUpgrade's, which validated them (and rolls back with them).
pub fn check_edit(plan: &Plan, published: &BTreeMap<ComponentKind, String>, catalog: &Catalog) -> Result<(), EditRefused> {
    // The generic component has no releases: it moves with the KfDef and its packages.
    for (component, wanted) in plan.components.iter().filter(|(c, p)| !p.pinned && **c != ComponentKind::GENERIC) {
        let Some(from) = published.get(component).filter(|from| **from != wanted.version) else { continue };
        let releases = catalog.releases(*component).map_err(EditRefused::NotAnnounced)?;
        check_move(*component, releases, from, &wanted.version).map_err(EditRefused::Move)?;
    }
    Ok(())
}

fn step(component: ComponentKind, from_version: String, to_version: String) -> UpgradeStep {
    UpgradeStep {
        component,
        from_version,
        to_version,
        phase: StepPhase::Pending,
        start_time: None,
        end_time: None,
        message: String::new(),
        failure: None,
        from_repos: Vec::new(),
        to_repos: Vec::new(),
    }
}

/// Why a version change made outside a KfUpgrade is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditRefused {
    #[error("the component versions changed outside a KfUpgrade and nothing was published: {0}; revert the change or use a KfUpgrade")]
    Move(MoveRefused),
    #[error("the component versions changed outside a KfUpgrade and cannot be checked: {0}")]
    NotAnnounced(Unresolved),
}

/// Why an upgrade is refused: which component, which versions, what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("spec.newKfDef.version: {0}")]
    Target(Unresolved),
    #[error("spec.components: {component} is not part of KfDef {kfdef:?}")]
    NotInKfDef { component: ComponentKind, kfdef: String },
    #[error(transparent)]
    Move(#[from] MoveRefused),
    #[error(transparent)]
    NotAnnounced(Unresolved),
    #[error("nothing to upgrade: every component already runs its target version")]
    NothingToDo,
    #[error("spec.components: {component} has no releases to move between; its applications follow the KfDef's spec.repos and spec.version")]
    NoReleases { component: ComponentKind },
}

/// What one component of a KfDef runs, as a KfUpgrade plans its step from it.
#[derive(Debug, Clone, PartialEq)]
pub struct Running {
    pub version: String,
    /// The repositories a KfUpgrade pinned for it (empty: `spec.repos`).
    pub pinned_repos: Vec<Repo>,
    /// The repositories it renders from: `spec.repos` with the pinned ones over them.
    pub repos: Vec<Repo>,
    /// Whether it renders packages of those repositories (else a built-in release's own objects).
    pub names_packages: bool,
}

/// What each component of `kfdef`'s `plan` runs.
pub fn running(plan: &Plan, kfdef: &KfDef) -> Result<BTreeMap<ComponentKind, Running>, PlanError> {
    let pinned = pinned_repos(kfdef)?;
    Ok(plan
        .components
        .iter()
        .map(|(component, planned)| {
            let pinned_repos = pinned.get(component).cloned().unwrap_or_default();
            let repos = with_pinned(&kfdef.spec.repos, &pinned_repos);
            (*component, Running { version: planned.version.clone(), pinned_repos, repos, names_packages: planned.names_packages() })
        })
        .collect())
}

/// The steps of `spec` for a KfDef whose components run `current`. A component whose packages
/// come from the KfDef's repositories moves with `newKfDef.repos` when they are given: the
/// objects of a version are that version's packages, never the old ones relabelled. So its step
/// moves its repositories, and is a step even when its version stays (the packages moved). The
/// generic component has no release edges to check, and moves (last unless `order` says
/// otherwise) only with `newKfDef.repos`, to `newKfDef.version`.
pub fn steps(spec: &KfUpgradeSpec, current: &BTreeMap<ComponentKind, Running>, catalog: &Catalog) -> Result<Vec<UpgradeStep>, Refusal> {
    let explicit: BTreeMap<ComponentKind, &str> = spec.components.iter().map(|c| (c.component, c.version.as_str())).collect();
    if let Some(component) = explicit.keys().find(|c| !current.contains_key(c)) {
        return Err(Refusal::NotInKfDef { component: *component, kfdef: spec.current_kf_def.name.clone() });
    }
    if explicit.contains_key(&ComponentKind::GENERIC) {
        return Err(Refusal::NoReleases { component: ComponentKind::GENERIC });
    }
    let mut order: Vec<ComponentKind> = spec.order.clone();
    order.extend(ComponentKind::upgrade_order().into_iter().filter(|c| !spec.order.contains(c)));
    let mut steps = Vec::new();
    for component in order {
        let Some(running) = current.get(&component) else { continue };
        // Where its packages move: the new repositories over those it renders from now.
        let to_repos = ((running.names_packages || component == ComponentKind::GENERIC) && !spec.new_kf_def.repos.is_empty()).then(|| with_pinned(&running.pinned_repos, &spec.new_kf_def.repos));
        let packages_move = to_repos.as_ref().is_some_and(|to| with_pinned(&running.repos, to) != running.repos);
        let moved = |to_version: String| UpgradeStep {
            from_repos: running.pinned_repos.clone(),
            to_repos: to_repos.clone().unwrap_or_else(|| running.pinned_repos.clone()),
            ..step(component, running.version.clone(), to_version)
        };
        if component == ComponentKind::GENERIC {
            if !spec.new_kf_def.repos.is_empty() && !spec.only_listed {
                let to = spec.new_kf_def.version.as_deref().map_or_else(|| running.version.clone(), generic_version);
                steps.push(moved(to));
            }
            continue;
        }
        if spec.only_listed && !explicit.contains_key(&component) {
            continue;
        }
        let to = match (explicit.get(&component), &spec.new_kf_def.version) {
            (Some(v), _) => v.to_string(),
            (None, Some(kubeflow)) => catalog.version_for(component, kubeflow).map_err(Refusal::Target)?,
            (None, None) => running.version.clone(),
        };
        if running.version == to && !packages_move {
            continue;
        }
        if running.version != to {
            check_move(component, catalog.releases(component).map_err(Refusal::NotAnnounced)?, &running.version, &to)?;
        }
        steps.push(moved(to));
    }
    if steps.is_empty() {
        return Err(Refusal::NothingToDo);
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflow_crds::kfdef::Repo;
    use crate::catalog::fixtures::catalog;
    use kubeflow_crds::kfupgrade::KfUpgrade;

    fn spec(yaml: &str) -> KfUpgradeSpec {
        let full = format!("apiVersion: kfupgrade.apps.kubeflow.org/v1alpha1\nkind: KfUpgrade\nmetadata: {{name: u}}\nspec:\n{yaml}");
        serde_yaml_ng::from_str::<KfUpgrade>(&full).unwrap().spec
    }

    /// A built-in release (no packages) at `version`.
    fn release(version: &str) -> Running {
        Running { version: version.into(), pinned_repos: vec![], repos: vec![], names_packages: false }
    }

    fn v12() -> BTreeMap<ComponentKind, Running> {
        [(ComponentKind::Istio, "1.3.1"), (ComponentKind::Dex, "v2.22.0"), (ComponentKind::KFServing, "v0.4.1"), (ComponentKind::Katib, "v0.10.0"), (ComponentKind::Pipelines, "1.0.4")]
            .map(|(c, v)| (c, release(v)))
            .into()
    }

    fn steps_of(s: &KfUpgradeSpec) -> Vec<(ComponentKind, String, String)> {
        steps(s, &v12(), &catalog()).unwrap().into_iter().map(|s| (s.component, s.from_version, s.to_version)).collect()
    }

    #[test]
    fn release_upgrade_moves_every_component_in_dependency_order() {
        let s = spec("  currentKfDef: {name: kf, version: v1.2.0}\n  newKfDef: {name: kf, version: v1.3.0}\n");
        assert_eq!(
            steps_of(&s),
            [
                (ComponentKind::Istio, "1.3.1".into(), "1.9.6".into()),
                (ComponentKind::Dex, "v2.22.0".into(), "v2.24.0".into()),
                (ComponentKind::KFServing, "v0.4.1".into(), "v0.5.1".into()),
                (ComponentKind::Katib, "v0.10.0".into(), "v0.11.0".into()),
                (ComponentKind::Pipelines, "1.0.4".into(), "1.5.0".into()),
            ]
        );
    }

    #[test]
    fn order_and_subset_are_honoured() {
        let s = spec("  currentKfDef: {name: kf}\n  newKfDef: {name: kf, version: v1.3.0}\n  order: [katib, istio]\n  components: [{component: katib, version: v0.11.0}]\n  onlyListed: true\n");
        assert_eq!(steps_of(&s), [(ComponentKind::Katib, "v0.10.0".into(), "v0.11.0".into())]);
        let s = spec("  currentKfDef: {name: kf}\n  newKfDef: {name: kf, version: v1.3.0}\n  order: [pipelines]\n");
        assert_eq!(steps_of(&s)[0].0, ComponentKind::Pipelines);
    }

    #[test]
    fn downgrades_unknown_versions_skips_and_unsupported_releases_are_refused_with_the_reason() {
        let mut current = v12();
        current.insert(ComponentKind::Katib, release("v0.11.0"));
        let refuse = |yaml: &str, current: &BTreeMap<ComponentKind, Running>| steps(&spec(yaml), current, &catalog()).unwrap_err().to_string();
        assert_eq!(
            refuse("  currentKfDef: {name: kf}\n  newKfDef: {name: kf}\n  components: [{component: katib, version: v0.10.0}]\n", &current),
            "katib: v0.11.0 → v0.10.0 is a downgrade, which KfUpgrade does not do; versions after v0.11.0: v0.12.0"
        );
        assert_eq!(
            refuse("  currentKfDef: {name: kf}\n  newKfDef: {name: kf}\n  components: [{component: dex, version: v9.9.9}]\n", &v12()),
            "dex: version v9.9.9 is not shipped; shipped versions: v2.22.0, v2.24.0"
        );
        assert_eq!(
            refuse("  currentKfDef: {name: kf}\n  newKfDef: {name: kf}\n  components: [{component: katib, version: v0.12.0}]\n", &v12()),
            "katib: cannot upgrade from v0.10.0 to v0.12.0 directly; allowed path: v0.10.0 → v0.11.0 → v0.12.0, one KfUpgrade per step"
        );
        assert_eq!(
            refuse("  currentKfDef: {name: kf}\n  newKfDef: {name: kf, version: v2.0.0}\n", &v12()),
            "spec.newKfDef.version: Kubeflow version \"v2.0.0\" has no istio release; istio-operator ships 1.3.1 (Kubeflow 1.2), 1.9.6 (Kubeflow 1.3)"
        );
    }

    #[test]
    fn a_component_whose_operator_never_announced_cannot_be_upgraded() {
        let err = steps(&spec("  currentKfDef: {name: kf}\n  newKfDef: {name: kf, version: v1.3.0}\n"), &v12(), &Catalog::default()).unwrap_err();
        assert_eq!(err, Refusal::Target(Unresolved::NotAnnounced { component: ComponentKind::Istio }));
    }

    #[test]
    fn an_edit_outside_a_kfupgrade_follows_the_same_rules_and_pins_are_left_to_their_kfupgrade() {
        use crate::plan::ComponentPlan;
        let entry = |version: &str, pinned: bool| ComponentPlan { spec: serde_json::json!({}), spec_hash: String::new(), version: version.into(), pinned, release_version: None };
        let published: BTreeMap<ComponentKind, String> = [(ComponentKind::Katib, "v0.11.0".to_string()), (ComponentKind::Dex, "v2.22.0".to_string())].into();
        let plan = |katib: ComponentPlan| Plan { components: [(ComponentKind::Katib, katib), (ComponentKind::Dex, entry("v2.24.0", false))].into(), unresolved: BTreeMap::new(), applications: vec![] };
        // Dex v2.22.0 → v2.24.0 is a direct upgrade; Katib stays.
        assert_eq!(check_edit(&plan(entry("v0.11.0", false)), &published, &catalog()), Ok(()));
        assert_eq!(
            check_edit(&plan(entry("v0.10.0", false)), &published, &catalog()).unwrap_err().to_string(),
            "the component versions changed outside a KfUpgrade and nothing was published: katib: v0.11.0 → v0.10.0 is a downgrade, which KfUpgrade does not do; versions after v0.11.0: v0.12.0; revert the change or use a KfUpgrade"
        );
        // A KfUpgrade's rollback pins the older version: not an edit.
        assert_eq!(check_edit(&plan(entry("v0.10.0", true)), &published, &catalog()), Ok(()));
        // Nothing published yet (a new KfDef): nothing to check.
        assert_eq!(check_edit(&plan(entry("v0.10.0", false)), &BTreeMap::new(), &catalog()), Ok(()));
    }

    #[test]
    fn paths_follow_the_release_edges() {
        let katib = catalog();
        let releases = katib.releases(ComponentKind::Katib).unwrap();
        assert_eq!(path(releases, "v0.10.0", "v0.12.0").unwrap(), ["v0.10.0", "v0.11.0", "v0.12.0"]);
        assert_eq!(path(releases, "v0.11.0", "v0.10.0"), None);
    }

    #[test]
    fn the_generic_component_moves_to_new_repositories_last_and_only_when_given_them() {
        let repo = |uri: &str| Repo { name: "manifests".into(), uri: uri.into(), sha256: None, kustomize: None };
        let mut current = v12();
        let v121 = vec![repo("https://x/v1.2.1.tar.gz")];
        current.insert(ComponentKind::GENERIC, Running { version: "v1.2.0".into(), pinned_repos: v121.clone(), repos: v121.clone(), names_packages: true });
        let without = spec("  currentKfDef: {name: kf, version: v1.2.0}\n  newKfDef: {name: kf, version: v1.3.0}\n");
        assert!(steps(&without, &current, &catalog()).unwrap().iter().all(|s| s.component != ComponentKind::GENERIC), "no repositories, no generic step");
        let with = spec("  currentKfDef: {name: kf, version: v1.2.0}\n  newKfDef: {name: kf, version: v1.3.0, repos: [{name: manifests, uri: 'https://x/v1.3.0.tar.gz'}]}\n");
        let all = steps(&with, &current, &catalog()).unwrap();
        let generic = all.last().unwrap();
        assert_eq!((generic.component, generic.from_version.as_str(), generic.to_version.as_str()), (ComponentKind::GENERIC, "v1.2.0", "v1.3.0"));
        assert_eq!(generic.from_repos, v121, "a rollback restores the repositories pinned before");
        assert_eq!(generic.to_repos, [repo("https://x/v1.3.0.tar.gz")]);
        assert!(all.iter().filter(|s| s.component != ComponentKind::GENERIC).all(|s| s.to_repos.is_empty()), "built-in releases fetch nothing: their repositories stay");
        // A KfDef of generic applications only (a release without built-in manifests).
        let only: BTreeMap<ComponentKind, Running> = [(ComponentKind::GENERIC, Running { names_packages: true, ..release("v1.0.2") })].into();
        let v103 = spec("  currentKfDef: {name: kf}\n  newKfDef: {name: kf, version: v1.0.3, repos: [{name: manifests, uri: 'https://x/v1.0.3.tar.gz'}]}\n");
        let steps = steps(&v103, &only, &catalog()).unwrap();
        assert_eq!(steps.iter().map(|s| (s.component, s.to_version.as_str(), s.from_repos.len())).collect::<Vec<_>>(), [(ComponentKind::GENERIC, "v1.0.3", 0)]);
    }

    /// A built-in that renders the KfDef's packages moves to the new repositories with its
    /// version (else the new version's step would apply the old packages), and moves even when
    /// its version stays but its packages do not; when they stay too, it does not move.
    #[test]
    fn a_built_in_rendering_packages_moves_them_with_its_version() {
        let repo = |uri: &str| Repo { name: "manifests".into(), uri: uri.into(), sha256: None, kustomize: None };
        let packages = |version: &str, uri: &str| Running { version: version.into(), pinned_repos: vec![], repos: vec![repo(uri)], names_packages: true };
        let mut current = v12();
        current.insert(ComponentKind::Katib, packages("v0.10.0", "https://x/v1.2.0.tar.gz"));
        current.insert(ComponentKind::Dex, packages("v2.24.0", "https://x/v1.2.0.tar.gz"));
        current.insert(ComponentKind::Pipelines, packages("1.5.0", "https://x/v1.3.0.tar.gz"));
        let to = spec("  currentKfDef: {name: kf}\n  newKfDef: {name: kf, version: v1.3.0, repos: [{name: manifests, uri: 'https://x/v1.3.0.tar.gz'}]}\n");
        let all = steps(&to, &current, &catalog()).unwrap();
        let of = |c: ComponentKind| all.iter().find(|s| s.component == c).map(|s| (s.from_version.as_str(), s.to_version.as_str(), s.from_repos.clone(), s.to_repos.clone()));
        assert_eq!(of(ComponentKind::Katib), Some(("v0.10.0", "v0.11.0", vec![], vec![repo("https://x/v1.3.0.tar.gz")])));
        assert_eq!(of(ComponentKind::Dex), Some(("v2.24.0", "v2.24.0", vec![], vec![repo("https://x/v1.3.0.tar.gz")])), "same version, new packages");
        assert_eq!(of(ComponentKind::Pipelines), None, "already on those packages at that version");
        assert_eq!(of(ComponentKind::Istio).map(|s| s.3), Some(vec![]), "a built-in release moves its version only");
    }
}
