//! Splitting a KfDef into one desired spec per component (pure).
//!
//! * Each application goes to exactly one component ([`installer`]): the one that covers it by
//!   name where that component has a release of the KfDef's Kubeflow version, else the generic
//!   component, which renders it from its own kustomize package. Its repository, path, overlays
//!   and parameters travel in the component spec's `sources` (references, never rendered YAML).
//! * Component versions come from the KfDef's Kubeflow version, looked up in what the component
//!   operators announced ([`Catalog`]), unless the KfDef pins them ([`PINS_ANNOTATION`]). A
//!   component whose version cannot be resolved is left as it is published ([`Plan::unresolved`]).
//! * Namespaced objects go to the KfDef's namespace, unless one of the component's applications
//!   sets the kfctl parameter `namespace` — so two KfDefs in two namespaces never share objects.
//! * `platform` is what API discovery found (OpenShift or Kubernetes).
//! * Applications install in the KfDef's order across components: while an application's
//!   installer is not known yet (the component that covers it by name has not announced its
//!   releases), no component with an application after it is published
//!   ([`Unresolved::EarlierApplicationUndecided`]) — Istio's CRDs and webhooks before the
//!   gateways and policies that need them, as in kubeflow/manifests' example.

use std::collections::BTreeMap;

use kube::ResourceExt;
use kubeflow_crds::component::{ComponentKind, KustomizeSource, Platform, RenderMode, UnknownComponent};
use kubeflow_crds::kfdef::{Application, ApplicationStatus, KfDef, Repo};
use kubeflow_crds::kfupgrade::ClusterPins;
use serde::{Deserialize, Serialize};
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

impl ComponentPlan {
    /// Whether the version installed is the one the packages run, `version` or later
    /// (`spec.versionFromPackage`: a Kubeflow release later than the component's).
    pub fn version_from_package(&self) -> bool {
        self.spec["versionFromPackage"].as_bool() == Some(true)
    }

    /// Whether the component renders packages of the KfDef's repositories (not a built-in
    /// release's own objects), so its packages move with those repositories.
    pub fn names_packages(&self) -> bool {
        self.spec["sources"].as_array().is_some_and(|sources| sources.iter().any(|s| s["repoUri"].is_string()))
    }

    /// Whether `installed` (a component's report) is the version this plan installs.
    pub fn installs(&self, installed: Option<&str>) -> bool {
        match installed {
            Some(installed) if self.version_from_package() => kubeflow_crds::validation::version_numbers(installed) >= kubeflow_crds::validation::version_numbers(&self.version),
            installed => installed == Some(self.version.as_str()),
        }
    }
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

/// Annotation (JSON map component → list of `spec.repos` entries) pinning the repositories a
/// component renders its packages from, over `spec.repos` by name; written by a KfUpgrade step
/// that moves the component's packages with its version (a list alone, as earlier releases of
/// this operator wrote it, is the generic component's).
pub const REPOS_ANNOTATION: &str = "kfdef.apps.kubeflow.org/repos";

/// Repositories pinned per component (by component name), over `spec.repos` by name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(from = "ReposPins")]
pub struct ComponentRepos(pub BTreeMap<String, Vec<Repo>>);

impl ComponentRepos {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The two shapes [`REPOS_ANNOTATION`] has had.
#[derive(Deserialize)]
#[serde(untagged)]
enum ReposPins {
    ByComponent(BTreeMap<String, Vec<Repo>>),
    Generic(Vec<Repo>),
}

impl From<ReposPins> for ComponentRepos {
    fn from(pins: ReposPins) -> Self {
        match pins {
            ReposPins::ByComponent(by_name) => ComponentRepos(by_name),
            ReposPins::Generic(repos) => ComponentRepos([(ComponentKind::GENERIC.name().to_string(), repos)].into()),
        }
    }
}

/// Repositories pinned per component.
pub type PinnedRepos = BTreeMap<ComponentKind, Vec<Repo>>;

/// `pinned` as [`REPOS_ANNOTATION`] holds it; `None` when nothing is pinned.
pub fn repos_annotation(pinned: &PinnedRepos) -> Option<String> {
    let by_name: BTreeMap<&str, &Vec<Repo>> = pinned.iter().filter(|(_, r)| !r.is_empty()).map(|(c, r)| (c.name(), r)).collect();
    (!by_name.is_empty()).then(|| serde_json::to_string(&by_name).expect("repositories serialise"))
}

/// A KfDef the plan cannot be made for.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("annotation {PINS_ANNOTATION} is not a JSON map of component to version: {source}")]
    MalformedPins { source: serde_json::Error },
    #[error("annotation {REPOS_ANNOTATION} is not a JSON map of component to a list of repositories ({{name, uri, sha256}}): {source}")]
    MalformedRepos { source: serde_json::Error },
    #[error("annotation {REPOS_ANNOTATION}: {source}")]
    UnknownReposComponent { source: UnknownComponent },
    #[error("annotation {PINS_ANNOTATION}: {source}")]
    UnknownPinnedComponent { source: UnknownComponent },
    #[error("annotation {PREVIEW_ANNOTATION} is not a JSON object {{components: {{component: version}}, repos: [...]}}: {source}")]
    MalformedPreview { source: serde_json::Error },
    #[error("annotation {PREVIEW_ANNOTATION}: {source}")]
    UnknownPreviewComponent { source: UnknownComponent },
    #[error("annotation {CLUSTER_PINS_ANNOTATION} is not a JSON map of cluster to {{components: {{component: version}}, repos: [...]}}: {source}")]
    MalformedClusterPins { source: serde_json::Error },
    #[error("annotation {CLUSTER_PINS_ANNOTATION}: {source}")]
    UnknownClusterPinnedComponent { source: UnknownComponent },
    #[error("annotation {CLUSTER_PREVIEWS_ANNOTATION} is not a JSON map of cluster to {{components: {{component: version}}, repos: [...]}}: {source}")]
    MalformedClusterPreviews { source: serde_json::Error },
}

/// Annotation on a KfDef naming where a validated KfUpgrade will move it ([`PreviewTargets`]).
/// While it is there, each component whose spec would change is published with that spec as a
/// preview, and its operator reports what applying it would change, writing nothing.
pub const PREVIEW_ANNOTATION: &str = "kfupgrade.apps.kubeflow.org/preview";

/// The versions (and the repositories of the components whose packages move) an upgrade moves a
/// KfDef to.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct PreviewTargets {
    pub components: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "ComponentRepos::is_empty")]
    pub repos: ComponentRepos,
}

/// The plan `kfdef` would have with the targets of its [`PREVIEW_ANNOTATION`] pinned; `None`
/// without the annotation.
pub fn preview_plan(kfdef: &KfDef, platform: Platform, catalog: &Catalog) -> Result<Option<Plan>, PlanError> {
    let Some(text) = kfdef.annotations().get(PREVIEW_ANNOTATION) else { return Ok(None) };
    let targets: PreviewTargets = serde_json::from_str(text).map_err(|source| PlanError::MalformedPreview { source })?;
    let mut pinned = pins(kfdef)?;
    for (name, version) in targets.components {
        pinned.insert(name.parse().map_err(|source| PlanError::UnknownPreviewComponent { source })?, version);
    }
    let mut repos = pinned_repos(kfdef)?;
    repos.extend(component_repos(targets.repos)?);
    let mut moved = kfdef.clone();
    let pinned: BTreeMap<&str, &String> = pinned.iter().map(|(c, v)| (c.name(), v)).collect();
    moved.annotations_mut().insert(PINS_ANNOTATION.into(), serde_json::to_string(&pinned).expect("a map of strings"));
    set_repos_annotation(&mut moved, &repos);
    plan(&moved, platform, catalog).map(Some)
}

/// Annotation on a placed KfDef (JSON map cluster → [`ClusterPins`]) pinning a fleet cluster's
/// components over the KfDef's own pins: written by a KfUpgrade's waves as they move clusters one
/// at a time, so that `spec.version` and the KfDef's pins stay what every other cluster runs.
pub const CLUSTER_PINS_ANNOTATION: &str = "kfupgrade.apps.kubeflow.org/cluster-pins";

/// The pins of every fleet cluster of `kfdef` ([`CLUSTER_PINS_ANNOTATION`]).
pub fn cluster_pins(kfdef: &KfDef) -> Result<BTreeMap<String, ClusterPins>, PlanError> {
    let Some(text) = kfdef.annotations().get(CLUSTER_PINS_ANNOTATION) else { return Ok(BTreeMap::new()) };
    serde_json::from_str(text).map_err(|source| PlanError::MalformedClusterPins { source })
}

/// Annotation on a placed KfDef naming the pins a validated wave upgrade would give each of its
/// clusters. While it is there and the upgrade holds the KfDef, each such cluster gets its
/// components' specs at those pins as previews, and its operators report what applying them
/// would change, writing nothing: the cluster's plan, shown before any wave starts.
pub const CLUSTER_PREVIEWS_ANNOTATION: &str = "kfupgrade.apps.kubeflow.org/cluster-previews";

/// The preview pins of every fleet cluster of `kfdef` ([`CLUSTER_PREVIEWS_ANNOTATION`]).
pub fn cluster_previews(kfdef: &KfDef) -> Result<BTreeMap<String, ClusterPins>, PlanError> {
    let Some(text) = kfdef.annotations().get(CLUSTER_PREVIEWS_ANNOTATION) else { return Ok(BTreeMap::new()) };
    serde_json::from_str(text).map_err(|source| PlanError::MalformedClusterPreviews { source })
}

/// The plan fleet cluster `cluster` would have at its preview pins (its entry of
/// [`CLUSTER_PREVIEWS_ANNOTATION`] in place of its pins); `None` when it has no entry.
pub fn cluster_preview_plan(kfdef: &KfDef, cluster: &str, platform: Platform, catalog: &Catalog) -> Result<Option<Plan>, PlanError> {
    let Some(target) = cluster_previews(kfdef)?.remove(cluster) else { return Ok(None) };
    let mut pins = cluster_pins(kfdef)?;
    pins.insert(cluster.to_string(), target);
    let mut view = kfdef.clone();
    view.annotations_mut().insert(CLUSTER_PINS_ANNOTATION.into(), serde_json::to_string(&pins).expect("pins serialise"));
    plan(&*for_cluster(&view, cluster)?, platform, catalog).map(Some)
}

/// `kfdef` as fleet cluster `cluster` runs it: its own pins and pinned repositories with the
/// cluster's over them. The KfDef itself when the cluster has none.
pub fn for_cluster<'k>(kfdef: &'k KfDef, cluster: &str) -> Result<std::borrow::Cow<'k, KfDef>, PlanError> {
    let Some(own) = cluster_pins(kfdef)?.remove(cluster) else { return Ok(std::borrow::Cow::Borrowed(kfdef)) };
    let mut pinned: BTreeMap<String, String> = pins(kfdef)?.into_iter().map(|(c, v)| (c.name().to_string(), v)).collect();
    for (name, version) in &own.components {
        name.parse::<ComponentKind>().map_err(|source| PlanError::UnknownClusterPinnedComponent { source })?;
        pinned.insert(name.clone(), version.clone());
    }
    let mut view = kfdef.clone();
    view.annotations_mut().insert(PINS_ANNOTATION.into(), serde_json::to_string(&pinned).expect("a map of strings"));
    if !own.repos.is_empty() {
        // A cluster's pinned repositories are those of each component it pins and of the generic
        // component (a built-in release without packages reads none).
        let mut repos = pinned_repos(kfdef)?;
        let moved = own.components.keys().filter_map(|name| name.parse::<ComponentKind>().ok());
        for component in moved.chain([ComponentKind::GENERIC]) {
            let entry = repos.entry(component).or_default();
            *entry = with_pinned(entry, &own.repos);
        }
        set_repos_annotation(&mut view, &repos);
    }
    Ok(std::borrow::Cow::Owned(view))
}

/// Component versions pinned on `kfdef`.
pub fn pins(kfdef: &KfDef) -> Result<BTreeMap<ComponentKind, String>, PlanError> {
    let Some(text) = kfdef.annotations().get(PINS_ANNOTATION) else { return Ok(BTreeMap::new()) };
    let by_name: BTreeMap<String, String> = serde_json::from_str(text).map_err(|source| PlanError::MalformedPins { source })?;
    by_name.into_iter().map(|(name, version)| Ok((name.parse().map_err(|source| PlanError::UnknownPinnedComponent { source })?, version))).collect()
}

/// Repositories pinned on `kfdef`, per component (none: `spec.repos`).
pub fn pinned_repos(kfdef: &KfDef) -> Result<PinnedRepos, PlanError> {
    let Some(text) = kfdef.annotations().get(REPOS_ANNOTATION) else { return Ok(PinnedRepos::new()) };
    component_repos(serde_json::from_str(text).map_err(|source| PlanError::MalformedRepos { source })?)
}

fn component_repos(repos: ComponentRepos) -> Result<PinnedRepos, PlanError> {
    repos.0.into_iter().map(|(name, repos)| Ok((name.parse().map_err(|source| PlanError::UnknownReposComponent { source })?, repos))).collect()
}

fn set_repos_annotation(kfdef: &mut KfDef, repos: &PinnedRepos) {
    match repos_annotation(repos) {
        Some(text) => kfdef.annotations_mut().insert(REPOS_ANNOTATION.into(), text),
        None => kfdef.annotations_mut().remove(REPOS_ANNOTATION),
    };
}

/// Whether every repository pinned on `kfdef` is what `spec.repos` names, so the pins can go.
pub fn repos_redundant(kfdef: &KfDef) -> bool {
    pinned_repos(kfdef).is_ok_and(|pinned| !pinned.is_empty() && pinned.values().all(|repos| with_pinned(&kfdef.spec.repos, repos) == kfdef.spec.repos))
}

/// `repos` with `pinned` in place of the entries of the same name.
pub fn with_pinned(repos: &[Repo], pinned: &[Repo]) -> Vec<Repo> {
    let mut out: Vec<Repo> = repos.iter().map(|r| pinned.iter().find(|p| p.name == r.name).unwrap_or(r).clone()).collect();
    out.extend(pinned.iter().filter(|p| !repos.iter().any(|r| r.name == p.name)).cloned());
    out
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

/// KfDef application that marks a kfctl v1.1+ "stacks" KfDef: each application's path is then
/// built as it is, without kfctl v1.0's generated base + overlays kustomization.
pub const STACKS_APPLICATION: &str = "kubeflow-apps";

/// The component that installs `application` of a KfDef at Kubeflow version `kubeflow`: the one
/// the application names (`installedBy`: that one, whatever its releases, so a Kubeflow version
/// it has no release of is said, not installed otherwise); else the component that covers it by
/// name when that component has a release of this Kubeflow version (or its operator has not
/// said yet which releases it has), or, for a later Kubeflow whose package the application
/// names, a release that covers later ones ([`Catalog::later_release`]); else the generic component.
pub fn installer(application: &Application, kubeflow: &str, catalog: &Catalog) -> ComponentKind {
    if let Some(named) = application.installed_by {
        return named;
    }
    let names_package = application.kustomize_config.as_ref().and_then(|c| c.repo_ref.as_ref()).is_some_and(|r| !r.name.is_empty() && !r.path.is_empty());
    match ComponentKind::from_application(&application.name) {
        Some(component) if !matches!(catalog.version_for(component, kubeflow), Err(Unresolved::UnsupportedKubeflow { .. })) => component,
        Some(component) if names_package && catalog.later_release(component, kubeflow).is_some() => component,
        _ => ComponentKind::GENERIC,
    }
}

/// The generic component's version: the KfDef's `spec.version` when it has the shape versions
/// have, `v0.0.0` otherwise (it only labels the objects; the packages decide what is installed).
pub fn generic_version(kubeflow: &str) -> String {
    if kubeflow_crds::validation::is_version(kubeflow) { kubeflow.to_string() } else { "v0.0.0".to_string() }
}

/// How a component spec's packages are built: kfctl's mode and rules for a kfctl-era KfDef,
/// upstream's `kustomize build` for a later one; and the KfDef's remote base mirrors.
fn package_rules(spec: &mut Value, kfdef: &KfDef) {
    let stacks = kfdef.spec.applications.iter().any(|a| a.name == STACKS_APPLICATION);
    spec["mode"] = json!(if stacks { RenderMode::Stacks } else { RenderMode::PerApplication });
    spec["era"] = json!(kubeflow_crds::kfdef::Era::of_version(kfdef.spec.version.as_deref()));
    if !kfdef.spec.remote_base_mirrors.is_empty() {
        spec["remoteBaseMirrors"] = json!(kfdef.spec.remote_base_mirrors);
    }
}

pub fn plan(kfdef: &KfDef, platform: Platform, catalog: &Catalog) -> Result<Plan, PlanError> {
    let kubeflow = kfdef.spec.version.clone().unwrap_or_default();
    let pins = pins(kfdef)?;
    // A component renders from the repositories a KfUpgrade pinned for it, if any.
    let pinned_repos = pinned_repos(kfdef)?;
    let mut repos_of: BTreeMap<ComponentKind, Vec<Repo>> = BTreeMap::new();
    let mut sources: BTreeMap<ComponentKind, Vec<KustomizeSource>> = BTreeMap::new();
    let mut applications = Vec::new();
    // The first application whose installer is not known yet, and the components with an
    // application after it. Such a component is held whole, keeping what was published (a spec
    // cut short would prune what the rest installed, e.g. while a restarted meta-operator waits
    // for the operators to announce again).
    let mut undecided: Option<(ComponentKind, String)> = None;
    let mut after_undecided: BTreeMap<ComponentKind, (ComponentKind, String)> = BTreeMap::new();
    for app in &kfdef.spec.applications {
        // A Component is built with the application it applies to, which only the generic
        // component renders from its package (it says so when that application is not its own).
        let is_component = app.kustomize_config.as_ref().is_some_and(|c| c.component_of.is_some());
        let component = if is_component { ComponentKind::GENERIC } else { installer(app, &kubeflow, catalog) };
        // (A component that has not announced waits for that itself.)
        let not_announced = component != ComponentKind::GENERIC && matches!(catalog.version_for(component, &kubeflow), Err(Unresolved::NotAnnounced { .. }));
        if let Some(first) = &undecided
            && !not_announced
        {
            after_undecided.entry(component).or_insert_with(|| first.clone());
        }
        if undecided.is_none() && not_announced {
            undecided = Some((component, app.name.clone()));
        }
        let config = app.kustomize_config.clone().unwrap_or_default();
        let repo_ref = config.repo_ref.unwrap_or_default();
        let repos = repos_of.entry(component).or_insert_with(|| with_pinned(&kfdef.spec.repos, pinned_repos.get(&component).map_or(&[], Vec::as_slice)));
        let repo = repos.iter().find(|r| r.name == repo_ref.name);
        sources.entry(component).or_default().push(KustomizeSource {
            application: app.name.clone(),
            repo_uri: repo.map(|r| r.uri.clone()),
            path: (!repo_ref.path.is_empty()).then_some(repo_ref.path),
            overlays: config.overlays,
            parameters: config.parameters,
            repo_sha256: repo.and_then(|r| r.sha256.clone()),
            repo_kustomize: repo.and_then(|r| r.kustomize_for(kfdef.spec.version.as_deref())),
            component_of: config.component_of,
        });
        applications.push(ApplicationStatus { name: app.name.clone(), component: Some(component.name().into()), state: "Pending".into(), ..Default::default() });
    }
    let namespace = kfdef.namespace().unwrap_or_default();
    // Every component installs with the rights of this account of the KfDef's namespace.
    let account = kfdef.spec.service_account_name.as_deref().unwrap_or(kubeflow_crds::kfdef::DEFAULT_INSTALLER);
    let mut components = BTreeMap::new();
    let mut unresolved = BTreeMap::new();
    for (component, sources) in sources {
        if let Some((waiting_for, application)) = after_undecided.remove(&component) {
            unresolved.insert(component, Unresolved::EarlierApplicationUndecided { waiting_for, application });
            continue;
        }
        if component == ComponentKind::GENERIC {
            // One resource renders every such application of the KfDef, in the KfDef's namespace
            // unless an application's own `namespace` parameter says otherwise (kfctl's rule).
            let release_version = generic_version(&kubeflow);
            let version = pins.get(&component).cloned().unwrap_or_else(|| release_version.clone());
            let mut spec = json!({"version": version, "targetNamespace": namespace, "platform": platform, "sources": sources, "serviceAccountName": account});
            package_rules(&mut spec, kfdef);
            uninstall_rules(&mut spec, kfdef);
            let spec_hash = operator_runtime::content_hash(&spec);
            components.insert(component, ComponentPlan { spec, spec_hash, release_version: Some(release_version), version, pinned: pins.contains_key(&component) });
            continue;
        }
        let names_packages = sources.iter().any(|s| s.repo_uri.is_some());
        // A Kubeflow release later than the component's: its latest knowledge, at the version the
        // packages run.
        let later = catalog.later_release(component, &kubeflow).filter(|_| names_packages && !pins.contains_key(&component));
        let release_version = match &later {
            Some(floor) => Ok(floor.clone()),
            None => catalog.version_for(component, &kubeflow),
        };
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
        let mut spec = json!({"version": version, "targetNamespace": target, "platform": platform, "sources": sources, "serviceAccountName": account});
        if later.is_some() {
            spec["versionFromPackage"] = json!(true);
        }
        // A built-in renders the KfDef's packages, by the same rules as the generic component.
        if names_packages {
            package_rules(&mut spec, kfdef);
        }
        uninstall_rules(&mut spec, kfdef);
        let spec_hash = operator_runtime::content_hash(&spec);
        components.insert(component, ComponentPlan { spec, spec_hash, version, pinned: pins.contains_key(&component), release_version: release_version.ok() });
    }
    Ok(Plan { components, unresolved, applications })
}

/// What every component of the KfDef takes over and leaves behind, as the KfDef says: objects
/// made by others adopted (`spec.adoptExisting`), and `spec.deletionPolicy` (absent when `Retain`,
/// so a spec written before the field hashes as it did).
fn uninstall_rules(spec: &mut Value, kfdef: &KfDef) {
    if kfdef.spec.adopt_existing {
        spec["adoptExisting"] = json!(true);
    }
    if kfdef.spec.deletion_policy != kubeflow_crds::component::DeletionPolicy::Retain {
        spec["deletionPolicy"] = json!(kfdef.spec.deletion_policy);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

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
    fn the_kfdef_names_the_installer_account_and_whether_existing_objects_are_taken_over() {
        let mut kfdef = example();
        kfdef.spec.service_account_name = Some("team-installer".into());
        kfdef.spec.adopt_existing = true;
        let plan = plan(&kfdef, Platform::Kubernetes, &catalog()).unwrap();
        assert_eq!(plan.components[&ComponentKind::GENERIC].spec["serviceAccountName"], "team-installer");
        assert_eq!(plan.components[&ComponentKind::GENERIC].spec["adoptExisting"], true);
        assert_eq!(plan.components[&ComponentKind::Katib].spec["adoptExisting"], true);
        assert_eq!(plan.components[&ComponentKind::Katib].spec["serviceAccountName"], "team-installer", "built-in releases install as the account too");
    }

    #[test]
    fn every_component_takes_the_kfdefs_deletion_policy_and_retain_leaves_specs_as_they_were() {
        let mut kfdef = example();
        let retained = plan(&kfdef, Platform::Kubernetes, &catalog()).unwrap();
        assert!(retained.components.values().all(|c| c.spec.get("deletionPolicy").is_none()));
        kfdef.spec.deletion_policy = kubeflow_crds::component::DeletionPolicy::Purge;
        let purged = plan(&kfdef, Platform::Kubernetes, &catalog()).unwrap();
        for (component, planned) in &purged.components {
            assert_eq!(planned.spec["deletionPolicy"], "Purge", "{component}");
            assert_ne!(planned.spec_hash, retained.components[component].spec_hash, "{component}: the policy is part of the published spec");
        }
    }

    /// A Component goes to the generic component with its `componentOf`; the KfDef's remote base
    /// mirrors and package rules go with every spec that names packages, a built-in's too (it
    /// renders the KfDef's packages), and with none that names none.
    #[test]
    fn components_and_remote_base_mirrors_travel_to_the_generic_component() {
        let mut kfdef = example();
        kfdef.spec.remote_base_mirrors = vec!["https://github.com/=https://mirror.example.com/gh/".into()];
        kfdef.spec.applications.push(serde_yaml_ng::from_str("{name: katib-controller-pss, kustomizeConfig: {repoRef: {name: manifests, path: pss/restricted}, componentOf: jupyter-web-app}}").unwrap());
        let plan = plan(&kfdef, Platform::Kubernetes, &catalog()).unwrap();
        let generic = &plan.components[&ComponentKind::GENERIC].spec;
        assert_eq!(generic["remoteBaseMirrors"], json!(["https://github.com/=https://mirror.example.com/gh/"]));
        let components: Vec<(&str, &str)> = generic["sources"].as_array().unwrap().iter().filter_map(|s| Some((s["application"].as_str()?, s["componentOf"].as_str()?))).collect();
        assert_eq!(components, [("katib-controller-pss", "jupyter-web-app")]);
        let katib = &plan.components[&ComponentKind::Katib].spec;
        assert_eq!(katib["remoteBaseMirrors"], generic["remoteBaseMirrors"]);
        assert_eq!((&katib["era"], &katib["mode"]), (&json!("Kfctl"), &json!("PerApplication")), "a kfctl-era KfDef without kubeflow-apps");
        let mut no_repository = example();
        no_repository.spec.repos.clear();
        no_repository.spec.remote_base_mirrors = kfdef.spec.remote_base_mirrors.clone();
        let katib = &super::plan(&no_repository, Platform::Kubernetes, &catalog()).unwrap().components[&ComponentKind::Katib].spec;
        assert!(katib.get("remoteBaseMirrors").is_none() && katib.get("era").is_none(), "a built-in release fetches nothing: {katib}");
    }

    #[test]
    fn kfctl_kfdef_splits_into_components_and_lists_every_application() {
        let kfdef = example();
        let plan = plan(&kfdef, Platform::Kubernetes, &catalog()).unwrap();
        assert_eq!(
            plan.components.keys().copied().collect::<Vec<_>>(),
            [ComponentKind::Istio, ComponentKind::Dex, ComponentKind::KFServing, ComponentKind::Katib, ComponentKind::Pipelines, ComponentKind::ProfileController, ComponentKind::GENERIC]
        );
        assert_eq!(plan.components[&ComponentKind::ProfileController].version, "v1.2.0");
        assert_eq!(plan.applications.len(), kfdef.spec.applications.len(), "an application was dropped");
        // Every application goes somewhere: what no component covers, the generic one renders.
        assert!(plan.applications.iter().all(|a| a.component.is_some()), "{:?}", plan.applications);
        let generic = &plan.components[&ComponentKind::GENERIC];
        let generic_apps: Vec<&str> = generic.spec["sources"].as_array().unwrap().iter().map(|s| s["application"].as_str().unwrap()).collect();
        assert!(generic_apps.contains(&"jupyter-web-app") && generic_apps.contains(&"cert-manager") && generic_apps.contains(&"namespaces"), "{generic_apps:?}");
        assert!(!generic_apps.contains(&"katib-controller"));
        assert_eq!((generic.version.as_str(), &generic.spec["mode"], &generic.spec["targetNamespace"]), ("v1.2.0", &json!("PerApplication"), &json!("kubeflow")));
        assert_eq!(generic.spec["serviceAccountName"], "kubeflow-installer", "installed as the KfDef namespace's default installer account");
        assert!(generic.spec.get("adoptExisting").is_none(), "nothing is taken over unless the KfDef asks");
        let web = generic.spec["sources"].as_array().unwrap().iter().find(|s| s["application"] == "jupyter-web-app").unwrap();
        assert_eq!(web["path"], "jupyter/jupyter-web-app");
        assert_eq!(web["repoUri"], "https://github.com/kubeflow/manifests/archive/v1.2.0.tar.gz");
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
        let mut after = plan(&k, Platform::Kubernetes, &catalog()).unwrap();
        assert_ne!(after.components.remove(&ComponentKind::GENERIC).unwrap().spec_hash, before.components[&ComponentKind::GENERIC].spec_hash);
        let mut before_named = before.components.clone();
        before_named.remove(&ComponentKind::GENERIC);
        assert_eq!(before_named, after.components, "removing generic applications changed other components' specs");
        k.spec.applications.iter_mut().find(|a| a.name == "katib-controller").unwrap().kustomize_config.as_mut().unwrap().overlays.push("extra".into());
        let edited = plan(&k, Platform::Kubernetes, &catalog()).unwrap();
        assert_ne!(edited.components[&ComponentKind::Katib].spec_hash, before.components[&ComponentKind::Katib].spec_hash);
        assert_eq!(edited.components[&ComponentKind::Istio].spec_hash, before.components[&ComponentKind::Istio].spec_hash);
    }

    #[test]
    fn a_later_kubeflow_goes_to_the_built_in_whose_latest_release_covers_it_at_the_version_its_packages_run() {
        let mut c = catalog();
        let mut katib = c.releases(ComponentKind::Katib).unwrap().to_vec();
        katib[1].covers_later = true;
        katib.truncate(2);
        c.learn(ComponentKind::Katib, katib);
        let mut k = example();
        k.spec.version = Some("v1.4.0".into());
        let plan = plan(&k, Platform::Kubernetes, &c).unwrap();
        let katib = &plan.components[&ComponentKind::Katib];
        assert_eq!((katib.version.as_str(), katib.spec["version"].as_str(), katib.spec["versionFromPackage"].as_bool()), ("v0.11.0", Some("v0.11.0"), Some(true)));
        assert!(katib.spec["sources"].as_array().unwrap().iter().all(|s| s["repoUri"].is_string()), "the KfDef's packages");
        assert_eq!(katib.spec["era"], json!(kubeflow_crds::kfdef::Era::of_version(Some("v1.4.0"))));
        assert!(plan.applications.iter().filter(|a| a.name.starts_with("katib")).all(|a| a.component.as_deref() == Some("katib")));
        // Its report counts at the floor or later, never earlier, never without a version.
        assert!(katib.installs(Some("v0.11.0")) && katib.installs(Some("v0.12.3")));
        assert!(!katib.installs(Some("v0.10.0")) && !katib.installs(None) && !katib.installs(Some("main")));
        // Components whose releases cover no later Kubeflow: the generic component, as before.
        assert!(!plan.components.contains_key(&ComponentKind::Dex));
        assert!(plan.applications.iter().filter(|a| a.name == "dex").all(|a| a.component.as_deref() == Some("kustomize")));
        // A version the catalog lists is its own release, exactly.
        k.spec.version = Some("v1.3.0".into());
        let listed = super::plan(&k, Platform::Kubernetes, &c).unwrap();
        assert!(listed.components[&ComponentKind::Katib].spec.get("versionFromPackage").is_none());
        assert!(!listed.components[&ComponentKind::Katib].installs(Some("v0.12.0")), "a listed release installs its version only");
    }

    #[test]
    fn a_kubeflow_version_without_built_in_releases_goes_to_the_generic_component_and_a_silent_operator_is_waited_for() {
        let mut k = example();
        k.spec.version = Some("v1.0.2".into());
        let plan = plan(&k, Platform::Kubernetes, &catalog()).unwrap();
        assert_eq!(plan.components.keys().copied().collect::<Vec<_>>(), [ComponentKind::GENERIC], "v1.0 has no built-in release: all generic");
        // ... but for the application that names its installer: that is said, not done otherwise.
        let shipped = "v1.2.0 (Kubeflow 1.2), v1.3.0 (Kubeflow 1.3)".to_string();
        let said = Unresolved::UnsupportedKubeflow { component: ComponentKind::ProfileController, given: "v1.0.2".into(), shipped };
        assert_eq!(plan.unresolved, BTreeMap::from([(ComponentKind::ProfileController, said)]));
        assert_eq!(plan.components[&ComponentKind::GENERIC].spec["sources"].as_array().unwrap().len(), k.spec.applications.len() - 1);
        assert_eq!(plan.components[&ComponentKind::GENERIC].version, "v1.0.2");
        assert!(plan.applications.iter().all(|a| a.component.as_deref() == Some(if a.name == "profiles" { "profiles" } else { "kustomize" })));
        k.spec.version = Some("master".into());
        assert_eq!(super::plan(&k, Platform::Kubernetes, &catalog()).unwrap().components[&ComponentKind::GENERIC].version, "v0.0.0");
        // An operator that has not announced its releases yet is waited for, not bypassed.
        let mut only_dex = crate::catalog::Catalog::default();
        only_dex.learn(ComponentKind::Dex, catalog().releases(ComponentKind::Dex).unwrap().to_vec());
        let plan = super::plan(&example(), Platform::Kubernetes, &only_dex).unwrap();
        assert_eq!(plan.unresolved[&ComponentKind::Katib], Unresolved::NotAnnounced { component: ComponentKind::Katib });
        assert_eq!(plan.unresolved[&ComponentKind::Istio], Unresolved::NotAnnounced { component: ComponentKind::Istio });
        // ... and so is every component with an application after one of its: the sample's
        // second application is Istio's, and every component has one after it.
        assert_eq!((plan.applications[0].name.as_str(), plan.applications[1].name.as_str()), ("namespaces", "istio-crds"));
        assert!(plan.components.is_empty(), "{:?}", plan.components.keys());
        let waiting = Unresolved::EarlierApplicationUndecided { waiting_for: ComponentKind::Istio, application: "istio-crds".into() };
        assert_eq!((&plan.unresolved[&ComponentKind::Dex], &plan.unresolved[&ComponentKind::GENERIC]), (&waiting, &waiting));
    }

    #[test]
    fn a_profiles_application_installs_upstreams_controller_unless_it_names_ours_in_any_release() {
        let mut k = example();
        let profiles = k.spec.applications.iter_mut().find(|a| a.name == "profiles").unwrap();
        assert_eq!(profiles.installed_by, Some(ComponentKind::ProfileController), "the demo asks for ours");
        profiles.installed_by = None;
        let plan = plan(&k, Platform::Kubernetes, &catalog()).unwrap();
        assert!(!plan.components.contains_key(&ComponentKind::ProfileController), "{:?}", plan.components.keys());
        let generic = plan.components[&ComponentKind::GENERIC].spec["sources"].as_array().unwrap().iter().find(|s| s["application"] == "profiles").unwrap();
        assert_eq!((&generic["path"], &generic["overlays"]), (&json!("profiles"), &json!(["application", "istio"])), "upstream's package, as the KfDef names it");
        // Named, ours installs it whatever the application is called, in any release it has.
        let profiles = k.spec.applications.iter_mut().find(|a| a.name == "profiles").unwrap();
        (profiles.name, profiles.installed_by) = ("profiles-pss".into(), Some(ComponentKind::ProfileController));
        k.spec.version = Some("v1.11.0".into());
        let mut later = catalog();
        let mut releases = later.releases(ComponentKind::ProfileController).unwrap().to_vec();
        releases.push(crate::catalog::fixtures::release("v1.10.0", &["v1.3.0"], &["1.10", "1.11"]));
        later.learn(ComponentKind::ProfileController, releases);
        let plan = super::plan(&k, Platform::Kubernetes, &later).unwrap();
        assert_eq!(plan.components.keys().copied().collect::<Vec<_>>(), [ComponentKind::ProfileController, ComponentKind::GENERIC]);
        let ours = &plan.components[&ComponentKind::ProfileController];
        assert_eq!(ours.version, "v1.10.0");
        assert_eq!(ours.spec["sources"].as_array().unwrap().iter().map(|s| s["application"].as_str().unwrap()).collect::<Vec<_>>(), ["profiles-pss"]);
        // A name that is no component is refused where the KfDef is read, with the allowed ones.
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/kfdef-kfctl-istio-dex.yaml")).unwrap();
        let error = serde_yaml_ng::from_str::<KfDef>(&text.replace("installedBy: profiles", "installedBy: seldon")).unwrap_err().to_string();
        assert!(error.contains("unknown variant `seldon`, expected one of `istio`, `dex`, `kfserving`, `katib`, `pipelines`, `profiles`, `kustomize`"), "{error}");
    }

    #[test]
    fn a_component_with_an_application_after_an_undecided_one_waits_and_one_before_it_is_published() {
        let k = kfdef("apiVersion: kfdef.apps.kubeflow.org/v1\nkind: KfDef\nmetadata: {name: kf, namespace: kubeflow}\nspec:\n  version: v1.2.0\n  repos: [{name: manifests, uri: 'https://example.com/m.tar.gz'}]\n  applications:\n  - name: cert-manager\n    kustomizeConfig: {repoRef: {name: manifests, path: cert-manager}}\n  - name: dex\n    kustomizeConfig: {repoRef: {name: manifests, path: dex-auth/dex-crds}}\n  - name: katib-crds\n    kustomizeConfig: {repoRef: {name: manifests, path: katib/katib-crds}}\n  - name: jupyter-web-app\n    kustomizeConfig: {repoRef: {name: manifests, path: jupyter/jupyter-web-app}}\n");
        let mut only_dex = crate::catalog::Catalog::default();
        only_dex.learn(ComponentKind::Dex, catalog().releases(ComponentKind::Dex).unwrap().to_vec());
        let plan = plan(&k, Platform::Kubernetes, &only_dex).unwrap();
        // Dex's application comes before Katib's; the generic component has one before and one
        // after (jupyter-web-app): it waits whole.
        assert_eq!(plan.components.keys().copied().collect::<Vec<_>>(), [ComponentKind::Dex]);
        assert_eq!(plan.unresolved.keys().copied().collect::<Vec<_>>(), [ComponentKind::Katib, ComponentKind::GENERIC]);
        assert_eq!(plan.unresolved[&ComponentKind::GENERIC], Unresolved::EarlierApplicationUndecided { waiting_for: ComponentKind::Katib, application: "katib-crds".into() });
        // Once Katib says it has the release, nothing waits.
        let plan = super::plan(&k, Platform::Kubernetes, &catalog()).unwrap();
        assert!(plan.unresolved.is_empty(), "{:?}", plan.unresolved);
    }

    #[test]
    fn a_stacks_kfdef_renders_each_path_as_it_is() {
        let k = kfdef("apiVersion: kfdef.apps.kubeflow.org/v1\nkind: KfDef\nmetadata: {name: kf, namespace: kubeflow}\nspec:\n  version: v1.2.0\n  repos: [{name: manifests, uri: 'https://example.com/m.tar.gz'}]\n  applications:\n  - name: istio\n    kustomizeConfig: {repoRef: {name: manifests, path: stacks/kubernetes/application/istio}}\n  - name: kubeflow-apps\n    kustomizeConfig: {repoRef: {name: manifests, path: stacks/kubernetes}}\n  - name: knative\n    kustomizeConfig: {repoRef: {name: manifests, path: knative/installs/generic}}\n");
        let plan = plan(&k, Platform::Kubernetes, &catalog()).unwrap();
        assert_eq!(plan.components.keys().copied().collect::<Vec<_>>(), [ComponentKind::Istio, ComponentKind::GENERIC]);
        let generic = &plan.components[&ComponentKind::GENERIC].spec;
        assert_eq!(generic["mode"], "Stacks");
        assert_eq!(generic["sources"].as_array().unwrap().iter().map(|s| s["path"].as_str().unwrap()).collect::<Vec<_>>(), ["stacks/kubernetes", "knative/installs/generic"]);
        assert_eq!(generic["sources"][0]["repoUri"], "https://example.com/m.tar.gz");
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
    fn a_fleet_clusters_pins_apply_to_that_cluster_alone_over_the_kfdefs_own() {
        let mut k = example();
        k.annotations_mut().insert(PINS_ANNOTATION.into(), r#"{"katib": "v0.11.0", "dex": "v2.22.0"}"#.into());
        k.annotations_mut().insert(CLUSTER_PINS_ANNOTATION.into(), r#"{"eu-1": {"components": {"dex": "v2.24.0"}}}"#.into());
        let version = |cluster: &str, component: ComponentKind| plan(&for_cluster(&k, cluster).unwrap(), Platform::Kubernetes, &catalog()).unwrap().components[&component].version.clone();
        assert_eq!(version("eu-1", ComponentKind::Dex), "v2.24.0");
        assert_eq!(version("eu-1", ComponentKind::Katib), "v0.11.0", "the KfDef's own pins stay under the cluster's");
        assert_eq!(version("us-1", ComponentKind::Dex), "v2.22.0", "another cluster follows the KfDef");
        assert!(matches!(for_cluster(&k, "us-1").unwrap(), std::borrow::Cow::Borrowed(_)));
        k.annotations_mut().insert(CLUSTER_PINS_ANNOTATION.into(), r#"{"eu-1": {"components": {"seldon": "v1"}}}"#.into());
        assert!(for_cluster(&k, "eu-1").unwrap_err().to_string().starts_with("annotation kfupgrade.apps.kubeflow.org/cluster-pins: unknown component \"seldon\""));
        k.annotations_mut().insert(CLUSTER_PINS_ANNOTATION.into(), "eu-1=dex".into());
        assert!(matches!(for_cluster(&k, "us-1").unwrap_err(), PlanError::MalformedClusterPins { .. }), "a malformed annotation is an error on every cluster");
    }

    #[test]
    fn a_clusters_preview_is_its_plan_at_the_preview_pins_over_its_own() {
        let mut k = example();
        k.annotations_mut().insert(CLUSTER_PINS_ANNOTATION.into(), r#"{"eu-1": {"components": {"dex": "v2.24.0"}}}"#.into());
        assert!(cluster_preview_plan(&k, "eu-1", Platform::Kubernetes, &catalog()).unwrap().is_none(), "no annotation, no preview");
        k.annotations_mut().insert(CLUSTER_PREVIEWS_ANNOTATION.into(), r#"{"eu-1": {"components": {"dex": "v2.24.0", "katib": "v0.11.0"}}}"#.into());
        let preview = cluster_preview_plan(&k, "eu-1", Platform::Kubernetes, &catalog()).unwrap().unwrap();
        let now = plan(&for_cluster(&k, "eu-1").unwrap(), Platform::Kubernetes, &catalog()).unwrap();
        let version = |p: &Plan, c: ComponentKind| p.components[&c].version.clone();
        assert_eq!((version(&now, ComponentKind::Katib), version(&preview, ComponentKind::Katib)), ("v0.10.0".into(), "v0.11.0".into()));
        assert_eq!(version(&preview, ComponentKind::Dex), "v2.24.0");
        assert_eq!(now.components[&ComponentKind::Istio].spec_hash, preview.components[&ComponentKind::Istio].spec_hash, "what does not move has the same spec");
        assert!(cluster_preview_plan(&k, "us-1", Platform::Kubernetes, &catalog()).unwrap().is_none(), "another cluster has no preview");
        assert_eq!(cluster_pins(&k).unwrap()["eu-1"].components.len(), 1, "the KfDef's cluster pins are left as they are");
        k.annotations_mut().insert(CLUSTER_PREVIEWS_ANNOTATION.into(), "eu-1=katib".into());
        assert!(matches!(cluster_preview_plan(&k, "eu-1", Platform::Kubernetes, &catalog()), Err(PlanError::MalformedClusterPreviews { .. })));
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

    /// A component renders from the repositories pinned for it and no other does; the list the
    /// annotation held before it named components is the generic component's.
    #[test]
    fn repositories_pinned_for_a_component_move_that_component_only() {
        let uri = |p: &Plan, c: ComponentKind| p.components[&c].spec["sources"].as_array().unwrap().iter().map(|s| s["repoUri"].as_str().unwrap().to_string()).collect::<BTreeSet<_>>();
        let v120 = "https://github.com/kubeflow/manifests/archive/v1.2.0.tar.gz";
        let mut k = example();
        k.annotations_mut().insert(REPOS_ANNOTATION.into(), r#"[{"name": "manifests", "uri": "https://x/v1.3.0.tar.gz"}]"#.into());
        k.annotations_mut().insert(PINS_ANNOTATION.into(), r#"{"kustomize": "v1.3.0"}"#.into());
        let p = plan(&k, Platform::Kubernetes, &catalog()).unwrap();
        let generic = &p.components[&ComponentKind::GENERIC];
        assert_eq!((generic.version.as_str(), generic.pinned, generic.release_version.as_deref()), ("v1.3.0", true, Some("v1.2.0")));
        assert_eq!(uri(&p, ComponentKind::GENERIC), BTreeSet::from(["https://x/v1.3.0.tar.gz".to_string()]));
        assert_eq!(uri(&p, ComponentKind::Katib), BTreeSet::from([v120.to_string()]));
        k.annotations_mut().insert(REPOS_ANNOTATION.into(), r#"{"katib": [{"name": "manifests", "uri": "https://x/v1.3.0.tar.gz"}]}"#.into());
        let p = plan(&k, Platform::Kubernetes, &catalog()).unwrap();
        assert_eq!(uri(&p, ComponentKind::Katib), BTreeSet::from(["https://x/v1.3.0.tar.gz".to_string()]));
        assert_eq!(uri(&p, ComponentKind::GENERIC), BTreeSet::from([v120.to_string()]));
        assert_eq!(uri(&p, ComponentKind::Pipelines), BTreeSet::from([v120.to_string()]));
        assert!(!repos_redundant(&k));
        k.annotations_mut().insert(REPOS_ANNOTATION.into(), format!(r#"{{"katib": [{{"name": "manifests", "uri": "{v120}"}}]}}"#));
        assert!(repos_redundant(&k), "spec.repos names what is pinned");
        k.annotations_mut().insert(REPOS_ANNOTATION.into(), r#"{"seldon": []}"#.into());
        assert!(matches!(plan(&k, Platform::Kubernetes, &catalog()), Err(PlanError::UnknownReposComponent { .. })));
        k.annotations_mut().insert(REPOS_ANNOTATION.into(), "manifests=x".into());
        assert!(matches!(plan(&k, Platform::Kubernetes, &catalog()), Err(PlanError::MalformedRepos { .. })));
    }

    #[test]
    fn a_preview_is_the_plan_with_the_targets_pinned_and_leaves_the_kfdef_as_it_is() {
        let mut k = example();
        assert!(preview_plan(&k, Platform::Kubernetes, &catalog()).unwrap().is_none(), "no annotation, no preview");
        k.annotations_mut().insert(PINS_ANNOTATION.into(), r#"{"dex": "v2.24.0"}"#.into());
        k.annotations_mut().insert(PREVIEW_ANNOTATION.into(), r#"{"components": {"katib": "v0.11.0", "kustomize": "v1.3.0"}, "repos": [{"name": "manifests", "uri": "https://x/v1.3.0.tar.gz"}]}"#.into());
        let now = plan(&k, Platform::Kubernetes, &catalog()).unwrap();
        let preview = preview_plan(&k, Platform::Kubernetes, &catalog()).unwrap().unwrap();
        let version = |p: &Plan, c: ComponentKind| p.components[&c].version.clone();
        assert_eq!((version(&now, ComponentKind::Katib), version(&preview, ComponentKind::Katib)), ("v0.10.0".into(), "v0.11.0".into()));
        assert_eq!(version(&preview, ComponentKind::Dex), "v2.24.0", "pins already there stay");
        assert_eq!(now.components[&ComponentKind::Istio].spec_hash, preview.components[&ComponentKind::Istio].spec_hash, "what does not move has the same spec");
        assert!(preview.components[&ComponentKind::GENERIC].spec["sources"].as_array().unwrap().iter().all(|s| s["repoUri"] == "https://x/v1.3.0.tar.gz"));
        assert!(now.components[&ComponentKind::GENERIC].spec["sources"].as_array().unwrap().iter().all(|s| s["repoUri"] != "https://x/v1.3.0.tar.gz"));
        k.annotations_mut().insert(PREVIEW_ANNOTATION.into(), r#"{"components": {"seldon": "v1"}}"#.into());
        assert!(matches!(preview_plan(&k, Platform::Kubernetes, &catalog()), Err(PlanError::UnknownPreviewComponent { .. })));
        k.annotations_mut().insert(PREVIEW_ANNOTATION.into(), "katib=v0.11.0".into());
        assert!(matches!(preview_plan(&k, Platform::Kubernetes, &catalog()), Err(PlanError::MalformedPreview { .. })));
    }
}
