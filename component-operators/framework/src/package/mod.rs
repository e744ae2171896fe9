//! Upstream's packages, rendered: what every component that installs from a kustomize package
//! (the generic component, and a built-in whose resource names its KfDef's packages in
//! `spec.sources`) shares.
//!
//! Each source names a repository archive (`repoUri`, optional `repoSha256`), the package `path`,
//! `overlays` and `parameters`. Each repository is fetched once (bounded, checked, fenced,
//! cached: [`kubeflow_manifests::RepoCache`]), each package built with the real kustomize
//! ([`kubeflow_manifests::Renderer`], in the renderer pod in a cluster: [`renderer`]) by the rules
//! of the resource's era (kfctl's, or upstream's `kustomize build`), and objects of removed API
//! versions converted ([`kubeflow_manifests::convert`]). Kinds outside the framework's list are
//! learned from the CRDs in the same render or from the API server's discovery; an application
//! with a kind the cluster does not serve waits, alone. An object several applications render is
//! applied once ([`merge_applications`]). Renders are memoised by spec, so reconciles triggered
//! by owned objects do not run kustomize again.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use kube::core::GroupVersionKind;
use kube::{Client, Resource, ResourceExt};
use kubeflow_crds::NameValue;
use kubeflow_crds::component::{ApplicationBuild, ComponentResource, KustomizeSource, RenderMode};
use kubeflow_crds::kfdef::KustomizeRelease;
use kubeflow_manifests::remote_bases::Mirror;
use futures::StreamExt;
use kubeflow_manifests::{AppSpec, Conversion, FetchedRepo, Mode, RenderContext, Renderer, RepoCache, RepoError, RepoErrorReason, RepoSource};
use serde_json::{Value, json};

use crate::build::{APPLICATION_ANNOTATION, target_namespace};
use crate::component::{ApplicationFailure, Rendered};
use crate::kinds;
use crate::{Component, InvalidSpec};

pub mod command;
pub mod patch;
pub mod renderer;

pub use kubeflow_manifests::FetchOptions;

/// Where fetched repositories and render work directories live (`KFOP_MANIFESTS_CACHE`, default
/// `$TMPDIR/kubeflow-operator-manifests`).
pub fn cache_dir() -> std::path::PathBuf {
    std::env::var_os("KFOP_MANIFESTS_CACHE").map(Into::into).unwrap_or_else(|| std::env::temp_dir().join("kubeflow-operator-manifests"))
}

/// How the operator fetches repositories: set once by its `main` from the command line
/// ([`command::FetchArgs`]); unset, the defaults — fenced to public addresses, no exemptions.
static FETCH_OPTIONS: OnceLock<FetchOptions> = OnceLock::new();

/// Sets the options packages are fetched with; once per process (`Err` gives them back
/// when already set).
pub fn set_fetch_options(options: FetchOptions) -> Result<(), FetchOptions> {
    FETCH_OPTIONS.set(options)
}

/// The options packages are fetched with.
pub fn fetch_options() -> FetchOptions {
    FETCH_OPTIONS.get().cloned().unwrap_or_default()
}

/// Renders by spec, so reconciles caused by owned-object events do not rebuild (bounded).
fn memo() -> &'static Mutex<HashMap<String, Arc<Rendered>>> {
    static MEMO: OnceLock<Mutex<HashMap<String, Arc<Rendered>>>> = OnceLock::new();
    MEMO.get_or_init(Default::default)
}
const MEMO_ENTRIES: usize = 64;

fn field(index: usize, name: &str) -> String {
    format!("spec.sources[{index}].{name}")
}

/// The application a source describes, with what it must have.
pub fn app_spec(index: usize, source: &KustomizeSource) -> Result<(RepoSource, AppSpec), InvalidSpec> {
    let uri = source.repo_uri.clone().filter(|u| !u.is_empty()).ok_or_else(|| InvalidSpec::new(field(index, "repoUri"), "required: the manifests archive (https://…/archive/<ref>.tar.gz)"))?;
    let path = source.path.clone().filter(|p| !p.is_empty()).ok_or_else(|| InvalidSpec::new(field(index, "path"), "required: the package inside the repository"))?;
    let repo = RepoSource { name: uri.clone(), uri, sha256: source.repo_sha256.clone() };
    let app = AppSpec { name: source.application.clone(), path, overlays: source.overlays.clone(), parameters: source.parameters.iter().map(|p| NameValue { name: p.name.clone(), value: p.value.clone() }).collect(), kustomize: source.repo_kustomize, components: Vec::new() };
    Ok((repo, app))
}

pub use crate::build::identity;

/// One application's rendered objects: `(application, objects)`, in `spec.sources` order.
pub type ApplicationObjects = (String, Vec<Value>);

/// Annotation listing every application that renders an object, when more than one renders it
/// identically (`components.kubeflow.org/application` names the first).
pub const APPLICATIONS_ANNOTATION: &str = "components.kubeflow.org/applications";

/// Per application, what it should be told while it stays Ready.
pub type ApplicationNotes = BTreeMap<String, Vec<String>>;

/// Joins the applications' objects, each annotated with its application, the way kfctl applied
/// them one after the other without ever refusing one: an object an earlier application renders
/// too is applied once — owned jointly when identical (both named in
/// [`APPLICATIONS_ANNOTATION`]), and for a Namespace also when only its labels or annotations
/// differ (merged, the earlier application's value winning a key both set; namespaces are only
/// ever created). An object two applications render differently is applied as the later one
/// renders it, as kfctl's second apply left it; both applications stay Ready, each told about
/// the other in the returned notes.
pub fn merge_applications(rendered: Vec<ApplicationObjects>) -> (Vec<Value>, ApplicationNotes) {
    let mut owners: BTreeMap<(String, String, String, String), usize> = BTreeMap::new();
    let mut out: Vec<Value> = Vec::new();
    let mut notes = ApplicationNotes::new();
    for (application, objects) in rendered {
        for mut object in objects {
            let Some(&at) = owners.get(&identity(&object)) else {
                owners.insert(identity(&object), out.len());
                object["metadata"]["annotations"][APPLICATION_ANNOTATION] = json!(application);
                out.push(object);
                continue;
            };
            let earlier = &mut out[at];
            let first = earlier["metadata"]["annotations"][APPLICATION_ANNOTATION].as_str().unwrap_or_default().to_string();
            if object["kind"] == "Namespace" && object["apiVersion"] == "v1" {
                for field in ["labels", "annotations"] {
                    let Some(theirs) = object["metadata"][field].as_object().cloned() else { continue };
                    if !earlier["metadata"][field].is_object() {
                        earlier["metadata"][field] = json!({});
                    }
                    let ours = earlier["metadata"][field].as_object_mut().expect("made an object above");
                    for (key, value) in theirs {
                        ours.entry(key).or_insert(value);
                    }
                }
            } else if !same_object(earlier, &object) {
                let what = format!("{} {}", object["kind"].as_str().unwrap_or_default(), object["metadata"]["name"].as_str().unwrap_or_default());
                notes.entry(application.clone()).or_default().push(format!("{what}: application {first:?} renders it otherwise; this application's version is applied (the later application wins, as with kfctl)"));
                notes.entry(first.clone()).or_default().push(format!("{what}: application {application:?}, later in the KfDef, renders it otherwise; its version is applied"));
                object["metadata"]["annotations"][APPLICATION_ANNOTATION] = json!(application);
                *earlier = object;
                continue;
            }
            let joint = earlier["metadata"]["annotations"][APPLICATIONS_ANNOTATION].as_str().unwrap_or(&first).to_string();
            if !joint.split(',').any(|a| a == application) {
                earlier["metadata"]["annotations"][APPLICATIONS_ANNOTATION] = json!(format!("{joint},{application}"));
            }
        }
    }
    (out, notes)
}

/// Whether two renders of one object are the same object, the annotations this component adds
/// aside.
fn same_object(earlier: &Value, later: &Value) -> bool {
    let strip = |object: &Value| {
        let mut object = object.clone();
        if let Some(annotations) = object.pointer_mut("/metadata/annotations").and_then(Value::as_object_mut) {
            annotations.remove(APPLICATION_ANNOTATION);
            annotations.remove(APPLICATIONS_ANNOTATION);
            if annotations.is_empty() {
                object["metadata"].as_object_mut().map(|m| m.remove("annotations"));
            }
        }
        object
    };
    strip(earlier) == strip(later)
}

/// The namespaces Kubernetes itself makes: objects use them (cert-manager's leader election Role
/// in `kube-system`), no install creates them, and upstream's builds render none.
pub const SYSTEM_NAMESPACES: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];

/// `objects` preceded by a Namespace for each namespace they use that they do not create
/// themselves, Kubernetes' own aside ([`SYSTEM_NAMESPACES`]; kfctl created the KfDef's namespace;
/// namespaces are only ever created, never changed or deleted). Namespaced objects without a
/// namespace go to `target`. Kinds are those install `owner` of `component` knows
/// ([`kinds::lookup_for`]).
pub fn with_namespaces(component: &str, owner: &str, objects: Vec<Value>, target: &str) -> Vec<Value> {
    let rendered: std::collections::BTreeSet<&str> = objects.iter().filter(|o| o["kind"] == "Namespace").filter_map(|o| o["metadata"]["name"].as_str()).collect();
    let mut used = std::collections::BTreeSet::new();
    for object in &objects {
        let namespaced = kinds::lookup_for(component, owner, object["apiVersion"].as_str().unwrap_or_default(), object["kind"].as_str().unwrap_or_default()).is_some_and(|k| !k.cluster_scoped);
        if namespaced {
            used.insert(object["metadata"]["namespace"].as_str().unwrap_or(target).to_string());
        }
    }
    let mut out: Vec<Value> = used.into_iter().filter(|n| !rendered.contains(n.as_str()) && !SYSTEM_NAMESPACES.contains(&n.as_str())).map(|n| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}})).collect();
    out.extend(objects);
    out
}

/// Where kinds outside the framework's built-in list are learned from, besides the CRDs
/// rendered alongside.
#[derive(Clone, Copy)]
pub enum Discovery<'a> {
    /// The API server's discovery (the operator, `kfop apply`).
    Cluster(&'a Client),
    /// No cluster (`kfop build`): such kinds are taken for namespaced custom resources.
    Offline,
}

/// Makes every kind in `objects` known to install `owner` of `component`: a kind the cluster serves (discovery)
/// to every install, a kind a CRD rendered alongside defines (or, offline, a guess) to this install
/// only ([`kinds::set_rendered`]), so a tenant's CRD can never change how another install's objects
/// are written. Returns the `(apiVersion, kind)`s the cluster does not serve, or why no kind of
/// this render can be learned.
async fn learn_kinds(component: &str, owner: &str, discovery: Discovery<'_>, objects: &[Value]) -> Result<BTreeSet<(String, String)>, InvalidSpec> {
    let mut defined = Vec::new();
    for crd in objects.iter().filter(|o| o["kind"] == "CustomResourceDefinition" && o["apiVersion"].as_str().is_some_and(|v| v.starts_with("apiextensions.k8s.io/"))) {
        let spec = &crd["spec"];
        let (group, kind, plural) = (spec["group"].as_str().unwrap_or_default(), spec["names"]["kind"].as_str().unwrap_or_default(), spec["names"]["plural"].as_str().unwrap_or_default());
        let cluster = spec["scope"] == "Cluster";
        let versions: Vec<&str> = match spec["versions"].as_array() {
            Some(list) => list.iter().filter_map(|v| v["name"].as_str()).collect(),
            None => spec["version"].as_str().into_iter().collect(), // apiextensions v1beta1
        };
        defined.extend(versions.into_iter().map(|version| (group.to_string(), version.to_string(), kind.to_string(), plural.to_string(), cluster)));
    }
    let is_defined = |defined: &[(String, String, String, String, bool)], group: &str, version: &str, kind: &str| defined.iter().any(|(g, v, k, _, _)| g == group && v == version && k == kind);
    let mut unserved = BTreeSet::new();
    for object in objects {
        let (api_version, kind) = (object["apiVersion"].as_str().unwrap_or_default(), object["kind"].as_str().unwrap_or_default());
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        if kinds::lookup(api_version, kind).is_some() || is_defined(&defined, group, version, kind) || unserved.contains(&(api_version.to_string(), kind.to_string())) {
            continue;
        }
        let Discovery::Cluster(client) = discovery else {
            defined.push((group.to_string(), version.to_string(), kind.to_string(), format!("{}s", kind.to_lowercase()), false));
            continue;
        };
        match kube::discovery::pinned_kind(client, &GroupVersionKind::gvk(group, version, kind)).await {
            // What the API server serves is the truth for every install.
            Ok((resource, capabilities)) if kinds::register(group, version, kind, &resource.plural, capabilities.scope == kube::discovery::Scope::Cluster).is_some() => {}
            _ => {
                unserved.insert((api_version.to_string(), kind.to_string()));
            }
        }
    }
    kinds::set_rendered(component, owner, &defined).map_err(|why| InvalidSpec::new("spec.sources", format!("the kinds of this install cannot be learned: {why}")))?;
    Ok(unserved)
}

/// Renders one application from its repository as fetched for every application of the spec
/// (`fetched`, by repository and pin): its package built, objects of removed API versions
/// converted (counted per kind).
async fn render_source(index: usize, source: &KustomizeSource, components: Vec<(String, String)>, fetched: &HashMap<(&str, Option<&str>), Result<FetchedRepo, RepoError>>, repos: &RepoCache, mirrors: &[Mirror], renderer: &Renderer, context: &RenderContext) -> Result<(Vec<Value>, Vec<Conversion>, KustomizeRelease), InvalidSpec> {
    let (_, mut app) = app_spec(index, source)?;
    app.components = components;
    // A download may fail for a while (network, server); the spec may be right: retry. A fenced
    // destination stays fenced until the spec (or the operator's flags) change.
    let fetched = fetched.get(&repo_key(source)).expect("every valid source's repository is fetched first").as_ref().map_err(|e| {
        let fenced = matches!(e.reason, RepoErrorReason::Fenced(_));
        let invalid = InvalidSpec::new(field(index, "repoUri"), tenant_text(&e.to_string(), None));
        if fenced { invalid } else { invalid.retryable() }
    })?;
    let remote = kubeflow_manifests::RemoteBases { cache: repos, mirrors };
    let rendered = renderer.render_application(fetched, &app, context, Some(remote)).await.map_err(|e| {
        let invalid = InvalidSpec::new(format!("spec.sources[{index}]"), tenant_text(&e.to_string(), Some(fetched)));
        if e.is_transient() { invalid.retryable() } else { invalid }
    })?;
    let (release, why) = &rendered.kustomize;
    tracing::info!(application = %source.application, kustomize = %release, reason = %why, "rendered");
    for warning in &rendered.warnings {
        tracing::warn!(application = %source.application, "{warning}");
    }
    let objects = rendered.objects.iter().map(|o| serde_json::to_value(o).expect("objects serialise")).collect();
    Ok((objects, rendered.conversions, *release))
}

/// `text` as a tenant may read it (status, events): a path inside the operator's cache becomes
/// the path inside its repository (`apps/…` for `repo`, the path below the archive's cache key
/// for a remote base) or inside the render's directory; nothing names where the operator keeps
/// its files.
fn tenant_text(text: &str, repo: Option<&FetchedRepo>) -> String {
    use kubeflow_manifests::server_paths::{ServerDir, without_server_paths};
    let dir = cache_dir();
    let mut roots = vec![dir.clone()];
    roots.extend(std::fs::canonicalize(&dir).ok().filter(|c| *c != dir));
    let mut dirs = Vec::new();
    if let Some(repo) = repo {
        let canonical = std::fs::canonicalize(&repo.root).ok().filter(|c| *c != repo.root);
        dirs.extend([Some(repo.root.clone()), canonical].into_iter().flatten().map(|root| ServerDir::inside(&root)));
    }
    for root in &roots {
        dirs.extend([ServerDir::entries_of(&root.join("repos").join("repos")), ServerDir::entries_of(&root.join("work"))]);
    }
    dirs.extend(roots.iter().map(|root| ServerDir::inside(root)));
    without_server_paths(text, &dirs)
}

/// The repository a source renders from, as fetched: its archive and pin.
fn repo_key(source: &KustomizeSource) -> (&str, Option<&str>) {
    (source.repo_uri.as_deref().unwrap_or_default(), source.repo_sha256.as_deref())
}

/// How many applications of one resource render at a time: kustomize is a process of its own
/// (here, or in the renderer pod), so a KfDef's 20-odd generic applications need not wait for
/// each other; bounded so that one resource cannot take every core.
fn render_concurrency() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get() * 2).clamp(2, 8)
}

/// Whether `resource` installs from packages: its `spec.sources` name them (a repository and a
/// path each). A source without either, beside others that have them, is refused by [`render`].
pub fn names_packages<K: ComponentResource>(resource: &K) -> bool {
    resource.core().sources.iter().any(|s| s.repo_uri.as_deref().is_some_and(|u| !u.is_empty()))
}

/// What component `C` renders from packages for `resource`, if anything: the spec's packages when
/// the component renders packages and the spec names them (always, for a component without
/// releases); else the packages of its release in the Kubeflow release's archive
/// ([`release_sources`]) unless `fetch.built_in_templates`; after refusing a component-specific field they would
/// not apply ([`check_fields`]). `None`: the built-in release. The operators
/// ([`Component::render_external`]) and `kfop` (the registry) both decide here.
pub async fn render_for<C: Component + ?Sized>(resource: &C::Resource, discovery: Discovery<'_>, fetch: FetchOptions) -> Option<Result<Rendered, InvalidSpec>> {
    if !C::RENDERS_PACKAGES {
        return None;
    }
    let defaulted;
    let resource = if C::releases().is_empty() || names_packages(resource) {
        resource
    } else if resource.core().version_from_package {
        return Some(Err(crate::build::package_required()));
    } else if !fetch.built_in_templates {
        match release_sources::<C>(resource, &fetch.remote_base_mirrors)? {
            Ok(with_sources) => {
                defaulted = with_sources;
                &defaulted
            }
            Err(invalid) => return Some(Err(invalid)),
        }
    } else {
        return None;
    };
    if let Err(unapplied) = check_fields::<C>(resource) {
        return Some(Err(unapplied));
    }
    Some(render::<C>(resource, discovery, fetch).await)
}

/// `resource` (which names no repository) with the sources of its release as upstream ships it
/// ([`Component::UPSTREAM_RELEASES`]), each at its path in the Kubeflow release's archive,
/// rewritten by the resource's then the operator's mirrors (`operator_mirrors`): those
/// `spec.sources` names when each is an application of the release, else every application of it.
/// A name the release does not use (`katib-controller` of a kfctl-era KfDef listing applications
/// by name only) stands for the component, and what upstream ships of it is installed once, however
/// many such names the KfDef lists. `None` when the operator knows no archive for the version: it
/// installs its built-in release.
pub fn release_sources<C: Component + ?Sized>(resource: &C::Resource, operator_mirrors: &[Mirror]) -> Option<Result<C::Resource, InvalidSpec>> {
    let spec = resource.core();
    let upstream = C::UPSTREAM_RELEASES.iter().find(|u| u.version == spec.version)?;
    Some((|| {
        let mirrors = kubeflow_manifests::remote_bases::merged(&spec.remote_base_mirrors, operator_mirrors).map_err(|(index, reason)| InvalidSpec::new(format!("spec.remoteBaseMirrors[{index}]"), reason))?;
        let archive = kubeflow_manifests::remote_bases::mirrored(&upstream.archive(), &mirrors);
        let source = |application: &str, path: &str, named: Option<&KustomizeSource>| KustomizeSource {
            application: application.to_string(),
            repo_uri: Some(archive.clone()),
            path: Some(path.to_string()),
            repo_kustomize: named.and_then(|n| n.repo_kustomize).or(upstream.kustomize()),
            ..named.cloned().unwrap_or_default()
        };
        let path_of = |name: &str| upstream.applications.iter().find(|(application, _)| *application == name).map(|(_, path)| *path);
        let selected = !spec.sources.is_empty() && spec.sources.iter().all(|named| path_of(&named.application).is_some());
        let sources: Vec<KustomizeSource> = if selected {
            spec.sources.iter().map(|named| source(&named.application, path_of(&named.application).expect("selected"), Some(named))).collect()
        } else {
            upstream.applications.iter().map(|(application, path)| source(application, path, None)).collect()
        };
        let mut value = serde_json::to_value(resource).expect("resources serialise");
        value["spec"]["sources"] = serde_json::to_value(&sources).expect("sources serialise");
        value["spec"]["era"] = serde_json::to_value(upstream.era()).expect("eras serialise");
        value["spec"]["mode"] = serde_json::to_value(upstream.mode()).expect("modes serialise");
        serde_json::from_value(value).map_err(|e| InvalidSpec::new("spec.sources", format!("the release's sources do not fit the resource: {e}")))
    })())
}

/// Refuses a component-specific spec field that `resource` (which names packages) sets to other
/// than its default, unless the component applies it to packages
/// ([`Component::PACKAGE_FIELDS`]): the package's own configuration is what is installed.
pub fn check_fields<C: Component + ?Sized>(resource: &C::Resource) -> Result<(), InvalidSpec> {
    let spec = serde_json::to_value(resource).expect("resources serialise")["spec"].clone();
    let core = serde_json::to_value(resource.core()).expect("specs serialise");
    let defaults: Option<C::Resource> = serde_json::from_value(json!({
        "apiVersion": C::Resource::api_version(&()), "kind": C::Resource::kind(&()),
        "metadata": {"name": "defaults"}, "spec": {"version": resource.core().version},
    }))
    .ok();
    let defaults = defaults.map(|d| serde_json::to_value(d).expect("resources serialise")["spec"].clone()).unwrap_or_default();
    for (field, value) in spec.as_object().into_iter().flatten() {
        if core.get(field).is_some() || C::PACKAGE_FIELDS.contains(&field.as_str()) || defaults.get(field) == Some(value) {
            continue;
        }
        return Err(InvalidSpec::new(
            format!("spec.{field}"),
            "applies to the operator's built-in template only (--built-in-templates), not to upstream's packages, which the resource installs: set it in the package (its params.env or a patch there), or leave it unset",
        ));
    }
    Ok(())
}

/// Fetches and renders every application of `resource` (a resource of component `C`), each on
/// its own: one that fails is reported in [`Rendered::failed`] and the others go on.
/// `fetch` bounds downloads and fences them (see [`kubeflow_manifests::fetch::fence`]); only
/// `kfop build` allows local repositories, an operator never reads host paths on a resource's word.
pub async fn render<C: Component + ?Sized>(resource: &C::Resource, discovery: Discovery<'_>, fetch: FetchOptions) -> Result<Rendered, InvalidSpec> {
    let spec = resource.core();
    if spec.sources.is_empty() {
        return Err(InvalidSpec::new("spec.sources", "at least one application is required"));
    }
    let namespace = target_namespace::<C>(resource);
    let key = serde_json::to_string(&json!({"component": C::Resource::COMPONENT.name(), "version": spec.version, "fromPackage": spec.version_from_package, "sources": spec.sources, "mode": spec.mode, "era": spec.era, "mirrors": spec.remote_base_mirrors, "namespace": namespace, "name": resource.name_any()})).expect("specs serialise");
    let owner = crate::build::owner_id(resource);
    let memoized = memo().lock().expect("render memo").get(&key).cloned();
    if let Some(rendered) = memoized {
        // The kinds its CRDs define are learned again (forgotten when an install of the same name
        // was deleted), and what waits for a kind is asked again, without rebuilding.
        return hold_unserved::<C>(rendered.as_ref().clone(), &owner, discovery, &namespace, &spec.sources).await;
    }
    let dir = cache_dir();
    let repos = RepoCache::new(dir.join("repos"), fetch).map_err(|e| InvalidSpec::new("spec.sources", tenant_text(&format!("the operator cannot use its repository cache: {e}"), None)).retryable())?;
    let renderer = renderer::renderer(dir.join("work")).await.map_err(|e| InvalidSpec::new("spec.sources", tenant_text(&format!("the operator cannot render (no kustomize?): {e}"), None)).retryable())?;
    let mode = match spec.mode {
        RenderMode::PerApplication => Mode::PerApplication,
        RenderMode::Stacks => Mode::Stacks,
    };
    let context = RenderContext { namespace: namespace.clone(), kfdef_name: resource.name_any(), mode, era: spec.era };
    let (mut rendered, mut failed, mut built, mut conversion_details) = (Vec::new(), Vec::new(), BTreeMap::new(), BTreeMap::new());
    // The spec's mirrors of remote bases, then the operator's.
    let mirrors = kubeflow_manifests::remote_bases::merged(&spec.remote_base_mirrors, &repos.options().remote_base_mirrors)
        .map_err(|(index, reason)| InvalidSpec::new(format!("spec.remoteBaseMirrors[{index}]"), reason))?;
    // Components (`componentOf`) are built with the application they apply to, not on their own.
    let links: Vec<(&str, Option<&str>, &str)> = spec.sources.iter().map(|s| (s.application.as_str(), s.component_of.as_deref(), s.repo_uri.as_deref().unwrap_or_default())).collect();
    let targets = kubeflow_manifests::component_targets(&links);
    let mut components: BTreeMap<usize, Vec<(String, String)>> = BTreeMap::new();
    for (index, target) in targets.iter().enumerate() {
        match target {
            Ok(None) => {}
            Ok(Some(target)) => {
                let source = &spec.sources[index];
                components.entry(*target).or_default().push((source.application.clone(), source.path.clone().unwrap_or_default()));
            }
            Err(reason) => failed.push(ApplicationFailure { application: links[index].0.to_string(), error: InvalidSpec::new(field(index, "componentOf"), reason.clone()) }),
        }
    }
    // Each repository once (a KfDef has one or two), then the applications side by side, their
    // results taken in spec order: the order objects are merged and applied in.
    let mut fetched: HashMap<(&str, Option<&str>), Result<FetchedRepo, RepoError>> = HashMap::new();
    for (index, source) in spec.sources.iter().enumerate() {
        let Ok((repo, _)) = app_spec(index, source) else { continue };
        if source.component_of.is_some() {
            continue;
        }
        if !fetched.contains_key(&repo_key(source)) {
            fetched.insert(repo_key(source), repos.fetch(&repo).await);
        }
    }
    // A Component without `componentOf` is applied to the applications before it that it changes
    // (upstream's example applies its `components:` to the whole build): known once they are built.
    let mut trailing: BTreeMap<usize, kubeflow_manifests::component_reach::Reach> = BTreeMap::new();
    for (index, source) in spec.sources.iter().enumerate() {
        let (Ok((_, app)), None, Some(Ok(repo))) = (app_spec(index, source), &source.component_of, fetched.get(&repo_key(source))) else { continue };
        // A package that cannot be read as one is rendered as any other, which says why.
        if let Ok(Some(reach)) = kubeflow_manifests::component_reach(&repo.root, &app)
            && !reach.adds_only()
        {
            trailing.insert(index, reach);
        }
    }
    let skipped = |index: usize, source: &KustomizeSource| source.component_of.is_some() || trailing.contains_key(&index);
    // Collected first (not a lazy iterator's closures): the future must be `Send` for any lifetime.
    let mut builds = Vec::new();
    for (index, source) in spec.sources.iter().enumerate() {
        if skipped(index, source) {
            continue;
        }
        let applied = components.remove(&index).unwrap_or_default();
        let (fetched, repos, mirrors, renderer, context) = (&fetched, &repos, &mirrors, &renderer, &context);
        builds.push(async move { (index, source, applied.clone(), render_source(index, source, applied, fetched, repos, mirrors, renderer, context).await) });
    }
    let mut results: Vec<_> = futures::stream::iter(builds).buffered(render_concurrency()).collect().await;
    // The applications each such Component changes, built again with it.
    let mut again: BTreeMap<usize, Vec<(String, String)>> = BTreeMap::new();
    for (at, reach) in &trailing {
        let component = &spec.sources[*at];
        let earlier: Vec<(usize, &[Value])> = results
            .iter()
            .filter(|(index, source, _, _)| index < at && repo_key(source) == repo_key(component))
            .filter_map(|(index, _, _, result)| Some((*index, result.as_ref().ok()?.0.as_slice())))
            .collect();
        match kubeflow_manifests::trailing_targets(reach, &earlier) {
            Ok(targets) => {
                let names: Vec<String> = targets.iter().map(|index| spec.sources[*index].application.clone()).collect();
                tracing::info!(application = %component.application, "{}", kubeflow_manifests::applied_note(&names));
                for index in targets {
                    again.entry(index).or_default().push((component.application.clone(), component.path.clone().unwrap_or_default()));
                }
            }
            Err(reason) => failed.push(ApplicationFailure { application: component.application.clone(), error: InvalidSpec::new(field(*at, "path"), reason) }),
        }
    }
    for (index, source, applied, result) in results.iter_mut() {
        let Some(more) = again.remove(index) else { continue };
        applied.extend(more);
        *result = render_source(*index, source, applied.clone(), &fetched, &repos, &mirrors, &renderer, &context).await;
    }
    // With `versionFromPackage`, the version the first application that tells runs: the others
    // must run it too.
    let mut ran: Option<(String, String)> = None;
    let version_field = if spec.version_from_package { "spec.versionFromPackage" } else { "spec.version" };
    for (index, source, applied, result) in results {
        // An application is installed as the resource's version only when it runs that version.
        let result = result.and_then(|built| {
            let checked = if spec.version_from_package {
                package_version(C::VERSION_IMAGES, &spec.version, &built.0).and_then(|found| match (&ran, found) {
                    (Some((version, first)), Some(found)) if *version != found => Err(format!("runs version {found}, not {version}, which application {first:?} runs: one install runs one version")),
                    (None, Some(found)) => {
                        ran = Some((found, source.application.clone()));
                        Ok(())
                    }
                    _ => Ok(()),
                })
            } else {
                version_evidence(C::VERSION_IMAGES, &spec.version, &built.0)
            };
            match checked {
                Ok(()) => Ok(built),
                Err(reason) => Err(InvalidSpec::new(version_field, format!("application {:?} {reason}", source.application))),
            }
        });
        // A Component fails with the application it is built with, and is Ready with it.
        if let Err(error) = &result {
            for (component, _) in &applied {
                let message = format!("not applied: application {:?}, which it is a Component of, failed to render", source.application);
                let position = links.iter().position(|(name, _, _)| name == component).unwrap_or(index);
                failed.push(ApplicationFailure { application: component.clone(), error: InvalidSpec { retry: error.retry, ..InvalidSpec::new(field(position, "componentOf"), message) } });
            }
        }
        match result {
            Ok((objects, conversions, kustomize)) => {
                if !conversions.is_empty() {
                    conversion_details.insert(source.application.clone(), conversions.iter().map(ToString::to_string).collect());
                }
                built.insert(source.application.clone(), ApplicationBuild { kustomize: Some(kustomize), converted: kubeflow_manifests::convert::summarise(&conversions) });
                rendered.push((source.application.clone(), objects))
            }
            Err(error) => failed.push(ApplicationFailure { application: source.application.clone(), error }),
        }
    }
    let version = ran.map(|(version, _)| version);
    // Without a version nothing is installed: the objects would carry (and status report) one
    // nobody observed.
    if spec.version_from_package && version.is_none() {
        return Err(match failed.first() {
            Some(first) => InvalidSpec { message: format!("application {:?} failed, and no other tells which version the packages run: {}", first.application, first.error), ..first.error.clone() },
            None => InvalidSpec::new(
                "spec.versionFromPackage",
                format!("no application runs the component's own images ({}) at a version, so which version this is cannot be told: set spec.version to one this operator ships", C::VERSION_IMAGES.join(", ")),
            ),
        });
    }
    let (objects, notes) = merge_applications(rendered);
    let rendered = Rendered { objects, applications: spec.sources.iter().map(|s| s.application.clone()).collect(), failed, builds: built, conversion_details, notes, version };
    // Failures are not remembered: a download may come right. An application waiting for a kind
    // is: the build does not change while it waits, only the cluster does.
    if rendered.failed.is_empty() {
        let mut memo = memo().lock().expect("render memo");
        if memo.len() >= MEMO_ENTRIES {
            memo.clear();
        }
        memo.insert(key, Arc::new(rendered.clone()));
    }
    hold_unserved::<C>(rendered, &owner, discovery, &namespace, &spec.sources).await
}

/// The containers of `objects` that run the component itself, each with the object that runs
/// it: those whose image is one of `version_images` (repository paths matched at their end), with
/// a tag. Walked through every object's `containers` and `initContainers`, wherever they are
/// (a Deployment's template, a CronJob's job template, a custom resource's).
pub fn own_images<'a>(version_images: &[&str], objects: &'a [Value]) -> Vec<(&'a Value, &'a str)> {
    fn containers<'a>(value: &'a Value, found: &mut Vec<&'a Value>) {
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    if matches!(key.as_str(), "containers" | "initContainers")
                        && let Some(list) = child.as_array()
                    {
                        found.extend(list.iter().filter(|c| c.get("image").is_some()));
                    } else {
                        containers(child, found);
                    }
                }
            }
            Value::Array(list) => list.iter().for_each(|child| containers(child, found)),
            _ => {}
        }
    }
    let mut own = Vec::new();
    for object in objects {
        let mut found = Vec::new();
        containers(object, &mut found);
        for image in found.iter().filter_map(|c| c["image"].as_str()) {
            if let Some((repository, _)) = image_tag(image)
                && version_images.iter().any(|mine| repository == *mine || repository.ends_with(&format!("/{mine}")))
            {
                own.push((object, image));
            }
        }
    }
    own
}

/// The version `objects` (one application's render) run, for `spec.versionFromPackage`: the tag
/// every one of the component's own images with a versioned tag has ([`versioned_images`]), which
/// must be `floor` (the release whose knowledge installs it) or later. `None` when none has one
/// (CRDs, say); `Err` when two differ or the version is older than `floor`.
pub fn package_version(version_images: &[&str], floor: &str, objects: &[Value]) -> Result<Option<String>, String> {
    let mut found: Option<(&str, &str)> = None;
    for (object, image, tag) in versioned_images(version_images, objects) {
        match found {
            Some((first, at)) if first != tag => return Err(format!("runs {at} and {image} ({}): two versions of the component", crate::plan::describe(object))),
            Some(_) => {}
            None => found = Some((tag, image)),
        }
    }
    let Some((tag, image)) = found else { return Ok(None) };
    let numbers = kubeflow_crds::validation::version_numbers;
    if numbers(tag).is_none() || numbers(tag) < numbers(floor) {
        return Err(format!("runs {image}, older than release {floor}, whose knowledge installs a later Kubeflow's packages: name the KfDef's Kubeflow version, whose release this is"));
    }
    Ok(Some(tag.to_string()))
}

/// The component's own images ([`own_images`]) in `objects` that carry a versioned tag, each with
/// the object that runs it and the tag as written (`1.28.0`, `v0.19.0`). A floating tag
/// (`release-1.3-latest-daily`, `latest`) or a digest alone says nothing.
fn versioned_images<'a>(version_images: &[&str], objects: &'a [Value]) -> impl Iterator<Item = (&'a Value, &'a str, &'a str)> {
    own_images(version_images, objects).into_iter().filter_map(|(object, image)| {
        let tag = image_tag(image).map(|(_, tag)| tag).unwrap_or_default();
        let digits = tag.trim_start_matches('v');
        (digits.starts_with(|c: char| c.is_ascii_digit()) && digits.contains('.')).then_some((object, image, tag))
    })
}

/// Whether `objects` (one application's render) run `version` of the component: every one of
/// its own images ([`own_images`]) tagged with a version is tagged with this one (a leading `v`
/// aside). A floating tag (`release-1.3-latest-daily`, Kubeflow 1.2's Istio; `latest`) or a
/// digest alone says nothing; a package with none of them (CRDs, say) neither. `Err` names the
/// first that differs.
pub fn version_evidence(version_images: &[&str], version: &str, objects: &[Value]) -> Result<(), String> {
    let wanted = version.trim_start_matches('v');
    match versioned_images(version_images, objects).find(|(_, _, tag)| tag.trim_start_matches('v') != wanted) {
        Some((object, image, _)) => Err(format!(
            "runs {image} ({}), not version {version}: set spec.version to the version its package ships, or name the package of {version}",
            crate::plan::describe(object)
        )),
        None => Ok(()),
    }
}

/// `registry/path:tag` (or `path:tag@digest`) → `(registry/path, tag)`; `None` without a tag.
fn image_tag(image: &str) -> Option<(&str, &str)> {
    let named = image.split('@').next().unwrap_or(image);
    let (repository, tag) = named.rsplit_once(':')?;
    // A colon before the last slash is a registry's port, not a tag.
    (!tag.contains('/')).then_some((repository, tag))
}

/// `rendered` (merged, as built) for install `owner`: its kinds learned, each application that
/// renders a kind the cluster does not serve held back alone (failed, retryable), and the
/// Namespaces its objects use added.
async fn hold_unserved<C: Component + ?Sized>(mut rendered: Rendered, owner: &str, discovery: Discovery<'_>, namespace: &str, sources: &[KustomizeSource]) -> Result<Rendered, InvalidSpec> {
    let component = C::Resource::COMPONENT.name();
    let indexes: BTreeMap<&str, usize> = sources.iter().enumerate().map(|(i, s)| (s.application.as_str(), i)).collect();
    let unserved = learn_kinds(component, owner, discovery, &rendered.objects).await?;
    let mut waiting: BTreeMap<String, (String, String)> = BTreeMap::new();
    for object in &rendered.objects {
        let kind = (object["apiVersion"].as_str().unwrap_or_default().to_string(), object["kind"].as_str().unwrap_or_default().to_string());
        if unserved.contains(&kind) {
            let application = object["metadata"]["annotations"][APPLICATION_ANNOTATION].as_str().unwrap_or_default().to_string();
            waiting.entry(application).or_insert(kind);
        }
    }
    for (application, (api_version, kind)) in &waiting {
        let message = format!("application {application:?} renders {kind} ({api_version}), which the cluster does not serve: install the CRD (or the component) that provides it first");
        rendered.failed.push(ApplicationFailure { application: application.clone(), error: InvalidSpec::new(format!("spec.sources[{}]", indexes[application.as_str()]), message).retryable() });
    }
    let objects = std::mem::take(&mut rendered.objects).into_iter().filter(|o| o["metadata"]["annotations"][APPLICATION_ANNOTATION].as_str().is_none_or(|a| !waiting.contains_key(a))).collect();
    rendered.failed.sort_by_key(|f| indexes[f.application.as_str()]);
    rendered.objects = with_namespaces(component, owner, objects, namespace);
    Ok(rendered)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(application: &str, uri: Option<&str>, path: Option<&str>) -> KustomizeSource {
        KustomizeSource { application: application.into(), repo_uri: uri.map(String::from), path: path.map(String::from), ..Default::default() }
    }

    #[test]
    fn an_application_runs_the_version_its_own_images_are_tagged_with() {
        let deployment = |image: &str| json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "istiod", "namespace": "istio-system"},
            "spec": {"template": {"spec": {"initContainers": [{"name": "init", "image": "busybox:1.36"}], "containers": [{"name": "discovery", "image": image}]}}}});
        let own = ["istio/pilot"];
        assert_eq!(version_evidence(&own, "1.28.0", &[deployment("docker.io/istio/pilot:1.28.0")]), Ok(()));
        assert_eq!(version_evidence(&own, "v1.28.0", &[deployment("istio/pilot:1.28.0")]), Ok(()), "a leading v aside");
        assert_eq!(
            version_evidence(&own, "1.28.0", &[deployment("docker.io/istio/pilot:1.26.1")]).unwrap_err(),
            "runs docker.io/istio/pilot:1.26.1 (Deployment istio-system/istiod), not version 1.28.0: set spec.version to the version its package ships, or name the package of 1.28.0"
        );
        // In a CronJob's job template or a custom resource's containers alike.
        let cron = json!({"kind": "CronJob", "metadata": {"name": "c"}, "spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"image": "reg:5000/istio/pilot:1.9.6"}]}}}}}});
        assert!(version_evidence(&own, "1.28.0", &[cron]).unwrap_err().starts_with("runs reg:5000/istio/pilot:1.9.6 (CronJob c)"));
        // Other images, a floating tag, a digest alone, a registry port without a tag, or no
        // workload: no evidence.
        for quiet in ["gcr.io/istio-release/istio/pilot:release-1.3-latest-daily", "istio/pilot:latest", "docker.io/istio/proxyv2:1.26.1", "docker.io/not-istio/pilot-x:1.0", "docker.io/istio/pilot@sha256:abc", "reg:5000/istio/pilot"] {
            assert_eq!(version_evidence(&own, "1.28.0", &[deployment(quiet)]), Ok(()), "{quiet}");
        }
        assert_eq!(version_evidence(&own, "1.28.0", &[json!({"kind": "CustomResourceDefinition", "metadata": {"name": "gateways.networking.istio.io"}})]), Ok(()));
        // A component that names no image of its own is never refused.
        assert_eq!(version_evidence(&[], "1.28.0", &[deployment("docker.io/istio/pilot:1.26.1")]), Ok(()));
    }

    #[test]
    fn a_later_release_runs_the_one_version_its_own_images_say_from_the_floor_up() {
        let deployment = |name: &str, image: &str| json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "kubeflow"},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": image}]}}}});
        let own = ["katib-controller", "katib-ui"];
        let later = [deployment("katib-controller", "ghcr.io/kubeflow/katib/katib-controller:v0.20.1"), deployment("katib-ui", "ghcr.io/kubeflow/katib/katib-ui:v0.20.1")];
        assert_eq!(package_version(&own, "v0.19.0", &later), Ok(Some("v0.20.1".to_string())), "the tag as the images write it");
        assert_eq!(package_version(&own, "v0.19.0", &later[..1]), Ok(Some("v0.20.1".to_string())));
        assert_eq!(package_version(&own, "v0.20.1", &later), Ok(Some("v0.20.1".to_string())), "the floor itself");
        assert_eq!(
            package_version(&own, "v0.19.0", &[later[0].clone(), deployment("katib-ui", "ghcr.io/kubeflow/katib/katib-ui:v0.21.0")]).unwrap_err(),
            "runs ghcr.io/kubeflow/katib/katib-controller:v0.20.1 and ghcr.io/kubeflow/katib/katib-ui:v0.21.0 (Deployment kubeflow/katib-ui): two versions of the component"
        );
        assert!(package_version(&own, "v0.19.0", &[deployment("katib-controller", "ghcr.io/kubeflow/katib/katib-controller:v0.18.0")]).unwrap_err().starts_with("runs ghcr.io/kubeflow/katib/katib-controller:v0.18.0, older than release v0.19.0"));
        // Floating tags, other images, no workload: it cannot be told.
        for quiet in [deployment("katib-controller", "ghcr.io/kubeflow/katib/katib-controller:latest"), deployment("x", "docker.io/busybox:1.36"), json!({"kind": "CustomResourceDefinition", "metadata": {"name": "experiments.kubeflow.org"}})] {
            assert_eq!(package_version(&own, "v0.19.0", &[quiet.clone()]), Ok(None), "{quiet}");
        }
    }

    #[test]
    fn a_source_needs_an_archive_and_a_path() {
        assert_eq!(app_spec(0, &source("a", None, Some("p"))).unwrap_err().to_string(), "spec.sources[0].repoUri: required: the manifests archive (https://…/archive/<ref>.tar.gz)");
        assert_eq!(app_spec(2, &source("a", Some("https://x/a.tar.gz"), None)).unwrap_err().to_string(), "spec.sources[2].path: required: the package inside the repository");
        let (repo, app) = app_spec(1, &source("web", Some("https://x/a.tar.gz"), Some("demo/web"))).unwrap();
        assert_eq!((repo.uri.as_str(), app.name.as_str(), app.path.as_str()), ("https://x/a.tar.gz", "web", "demo/web"));
    }

    #[test]
    fn namespaces_the_objects_use_are_created_unless_rendered() {
        let objects = vec![
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tenants"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b", "namespace": "tenants"}}),
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "c", "namespace": "auth"}}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "d"}}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "e", "namespace": "kube-system"}}),
        ];
        let out = with_namespaces("kustomize", "kubeflow/test", objects, "kubeflow");
        let namespaces: Vec<&str> = out.iter().filter(|o| o["kind"] == "Namespace").map(|o| o["metadata"]["name"].as_str().unwrap()).collect();
        assert_eq!(namespaces, ["auth", "kubeflow", "tenants"], "kube-system is Kubernetes' own");
        assert_eq!(out.len(), 8);
    }

    #[test]
    fn an_object_two_applications_render_alike_is_applied_once_and_owned_jointly() {
        let cm = |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "kubeflow"}});
        let (merged, notes) = merge_applications(vec![("a".into(), vec![cm("one")]), ("b".into(), vec![cm("two"), cm("one")]), ("c".into(), vec![cm("one")])]);
        assert!(notes.is_empty(), "{notes:?}");
        let names: Vec<&str> = merged.iter().map(|o| o["metadata"]["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["one", "two"]);
        assert_eq!(merged[0]["metadata"]["annotations"], json!({APPLICATION_ANNOTATION: "a", APPLICATIONS_ANNOTATION: "a,b,c"}));
        assert_eq!(merged[1]["metadata"]["annotations"], json!({APPLICATION_ANNOTATION: "b"}));
        // Same name, other kind or namespace: two objects.
        let other_ns = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "one", "namespace": "team"}});
        assert_eq!(merge_applications(vec![("a".into(), vec![cm("one")]), ("b".into(), vec![other_ns])]).0.len(), 2);
    }

    /// kfctl v1.2's istio_dex KfDef: `namespaces` and `cert-manager` both render Namespace
    /// `cert-manager`, the latter with a label of its own.
    #[test]
    fn a_namespace_two_applications_render_is_one_namespace_with_both_labels() {
        let plain = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "cert-manager", "labels": {"control-plane": "kubeflow"}}});
        let labelled = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "cert-manager", "labels": {"certmanager.k8s.io/disable-validation": "true", "control-plane": "other"}}});
        let (merged, notes) = merge_applications(vec![("namespaces".into(), vec![plain]), ("cert-manager".into(), vec![labelled])]);
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0]["metadata"]["labels"], json!({"certmanager.k8s.io/disable-validation": "true", "control-plane": "kubeflow"}), "merged, the first application's value kept");
        assert_eq!(merged[0]["metadata"]["annotations"][APPLICATIONS_ANNOTATION], "namespaces,cert-manager");
    }

    /// kfctl applied each application in turn, so of an object two applications render
    /// differently the later one's version is what stayed. Both applications stay Ready; each is
    /// told about the other.
    #[test]
    fn an_object_rendered_two_ways_is_applied_as_the_later_application_renders_it() {
        let role = |verbs: Value| json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "kubeflow-view"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": verbs}]});
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b-config", "namespace": "kubeflow"}});
        let (merged, notes) = merge_applications(vec![("a".into(), vec![role(json!(["get"]))]), ("b".into(), vec![role(json!(["get", "list"])), cm])]);
        assert_eq!(merged.len(), 2, "b's other objects go on");
        assert_eq!(merged[0]["rules"][0]["verbs"], json!(["get", "list"]), "b's version is applied, as kfctl's second apply left it");
        assert_eq!(merged[0]["metadata"]["annotations"], json!({APPLICATION_ANNOTATION: "b"}));
        assert_eq!(merged[1]["metadata"]["annotations"][APPLICATION_ANNOTATION], "b");
        assert_eq!(
            notes,
            BTreeMap::from([
                ("a".to_string(), vec!["ClusterRole kubeflow-view: application \"b\", later in the KfDef, renders it otherwise; its version is applied".to_string()]),
                ("b".to_string(), vec!["ClusterRole kubeflow-view: application \"a\" renders it otherwise; this application's version is applied (the later application wins, as with kfctl)".to_string()]),
            ])
        );
    }
}
