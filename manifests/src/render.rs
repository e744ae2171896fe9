//! Rendering applications: per-application (kfctl v1.0.x) and stacks (v1.1+).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kube::api::DynamicObject;
use kubeflow_crds::NameValue;
use kubeflow_crds::kfdef::{Application, Era, KfDef, KfDefSpec, KustomizeRelease};
use serde::Deserialize;
use serde_yaml_ng::{Mapping, Value};

use crate::archive::safe_relative;
use crate::convert::{Conversion, Unconvertible, convert_objects};
use crate::error::RenderError;
use crate::fetch::{FetchedRepo, RepoCache, RepoSource};
use crate::kfctl;
use crate::kustomize::Kustomize;
use crate::remote::RemoteRenderer;
use crate::order::sort_install_order;
use crate::refs;
use crate::component_reach::Reach;
use crate::remote_bases::{self, Mirror, RemoteRef};

/// The application whose presence makes a KfDef a stacks KfDef (kfctl's `UsingStacks`).
pub const STACKS_APPLICATION: &str = "kubeflow-apps";

/// Namespace kfctl used for a KfDef without one.
pub const DEFAULT_NAMESPACE: &str = "kubeflow";

/// kfctl's two rendering modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// v1.0.x: base + overlays merged into a generated kustomization, `params.env` rewritten.
    PerApplication,
    /// v1.1+: each application's path is built as it is; overlays and parameters are not applied.
    Stacks,
}

impl Mode {
    /// Stacks when an application is named `kubeflow-apps`, as kfctl decided.
    pub fn of(spec: &KfDefSpec) -> Mode {
        if spec
            .applications
            .iter()
            .any(|a| a.name == STACKS_APPLICATION)
        {
            Mode::Stacks
        } else {
            Mode::PerApplication
        }
    }
}

/// One application to render.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AppSpec {
    pub name: String,
    /// `kustomizeConfig.repoRef.path`: the package inside the repository.
    pub path: String,
    pub overlays: Vec<String>,
    pub parameters: Vec<NameValue>,
    /// The kustomize release its repository asks for; unset: chosen from the package
    /// ([`refs::check`] reports the first field kustomize v3.1.0 does not know).
    pub kustomize: Option<KustomizeRelease>,
    /// `(application, path)` of the `kind: Component` packages of the same repository applied
    /// to this one (their `componentOf`), in KfDef order: built with it, as upstream's example
    /// lists them under `components:`.
    pub components: Vec<(String, String)>,
}

/// What a render may fetch besides its repository: the remote bases its packages name
/// ([`crate::remote_bases`]), into `cache`, through `mirrors`.
#[derive(Clone, Copy)]
pub struct RemoteBases<'a> {
    pub cache: &'a RepoCache,
    pub mirrors: &'a [Mirror],
}

/// The remote bases a package names, fetched: per kustomization file, each reference and the
/// local copy it stands for; and the directories holding the copies.
#[derive(Debug, Default)]
struct RemoteCopies {
    files: BTreeMap<PathBuf, BTreeMap<String, PathBuf>>,
    roots: Vec<PathBuf>,
}

/// Which application each application is a Component of: for each `(name, componentOf,
/// repository)` in KfDef order, `Ok(None)` for an application built on its own, `Ok(Some(i))`
/// for a Component applied to application `i`, or why it cannot be. The target is the first
/// application of that name; it must come from the same repository and not be a Component itself.
pub fn component_targets(apps: &[(&str, Option<&str>, &str)]) -> Vec<Result<Option<usize>, String>> {
    apps.iter()
        .map(|(name, component_of, repo)| {
            let Some(target) = component_of else { return Ok(None) };
            let found = apps.iter().position(|(other, _, _)| other == target);
            match found.map(|i| (i, &apps[i])) {
                None => Err(format!("componentOf names application {target:?}, which this KfDef's generic applications do not include (one a built-in component installs cannot take a Component)")),
                Some((_, (other, _, _))) if other == name => Err("componentOf names the application itself".to_string()),
                Some((_, (_, Some(_), _))) => Err(format!("componentOf names application {target:?}, itself a Component: a Component applies to an application built on its own")),
                Some((_, (_, _, other_repo))) if other_repo != repo => Err(format!("componentOf names application {target:?}, of another repository: a Component applies to an application of its own repository")),
                Some((i, _)) => Ok(Some(i)),
            }
        })
        .collect()
}

/// The Component at `app`'s path, with what it reaches ([`crate::component_reach`]); `None` when
/// the package is no `kind: Component`.
pub fn component_reach(repo_root: &Path, app: &AppSpec) -> Result<Option<Reach>, RenderError> {
    let (root, rel) = package_dir(repo_root, app)?;
    crate::component_reach::reach(&root.join(rel)).map_err(|reason| RenderError::Component { app: app.name.clone(), reason })
}

/// Which of the `earlier` applications (position, rendered objects) of its repository a Component
/// without `componentOf` is applied to, as upstream's example applies its `components:` to the
/// build of every entry before: those it `reach`es. `Err` says what it would change that none
/// of them renders.
pub fn trailing_targets(reach: &Reach, earlier: &[(usize, &[serde_json::Value])]) -> Result<Vec<usize>, String> {
    let targets: Vec<usize> = earlier.iter().filter(|(_, objects)| reach.reaches(objects)).map(|(position, _)| *position).collect();
    if targets.is_empty() {
        let what = match reach {
            Reach::Every(field) => format!("every object ({field})"),
            Reach::Objects(targets) => targets.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
        };
        return Err(format!("a Component changes {what}, which no application before it of the same repository (in this install) renders; list it after the application it changes, or name that one in componentOf"));
    }
    Ok(targets)
}

/// What a Component applied to `applications` is told.
pub fn applied_note(applications: &[String]) -> String {
    format!("a Component, applied to the applications before it that it changes, as upstream's example applies its components: {}", applications.join(", "))
}

impl AppSpec {
    /// The application and the name of the repository its `repoRef` points into.
    pub fn from_application(app: &Application) -> Result<(AppSpec, String), RenderError> {
        let cfg = app.kustomize_config.as_ref();
        let repo_ref =
            cfg.and_then(|c| c.repo_ref.as_ref())
                .ok_or_else(|| RenderError::NoRepoRef {
                    app: app.name.clone(),
                })?;
        let spec = AppSpec {
            name: app.name.clone(),
            path: repo_ref.path.clone(),
            overlays: cfg.map(|c| c.overlays.clone()).unwrap_or_default(),
            parameters: cfg.map(|c| c.parameters.clone()).unwrap_or_default(),
            kustomize: None,
            components: Vec::new(),
        };
        Ok((spec, repo_ref.name.clone()))
    }
}

/// What the KfDef contributes to every application.
#[derive(Clone, Debug, PartialEq)]
pub struct RenderContext {
    /// Default target namespace: the KfDef's namespace.
    pub namespace: String,
    /// The KfDef's name (fills `appName=` in `params.env`).
    pub kfdef_name: String,
    /// kfctl's mode, for a kfctl-era build.
    pub mode: Mode,
    /// Whose rules build the packages: kfctl's, upstream's, or the repository's layout decides.
    pub era: Era,
}

impl RenderContext {
    pub fn of(kfdef: &KfDef) -> RenderContext {
        RenderContext {
            namespace: kfdef
                .metadata
                .namespace
                .clone()
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| DEFAULT_NAMESPACE.into()),
            kfdef_name: kfdef.metadata.name.clone().unwrap_or_default(),
            mode: Mode::of(&kfdef.spec),
            era: Era::of_version(kfdef.spec.version.as_deref()),
        }
    }
}

/// One rendered application: its objects in install order.
#[derive(Clone, Debug)]
pub struct RenderedApp {
    pub name: String,
    pub objects: Vec<DynamicObject>,
    /// Things that were ignored, e.g. overlays on a stacks application.
    pub warnings: Vec<String>,
    /// Objects rewritten from API versions Kubernetes no longer serves ([`crate::convert`]).
    pub conversions: Vec<Conversion>,
    /// The kustomize release that rendered it, and why that one.
    pub kustomize: (KustomizeRelease, String),
}

impl RenderedApp {
    /// The objects as a multi-document YAML stream, in install order.
    pub fn to_yaml(&self) -> String {
        objects_to_yaml(&self.objects)
    }
}

/// Objects as a multi-document YAML stream.
pub fn objects_to_yaml(objects: &[DynamicObject]) -> String {
    yaml_stream(objects.iter().map(|o| serde_json::to_value(o).expect("a DynamicObject serialises")))
}

/// Objects as a multi-document YAML stream that every YAML parser reads back the same: each
/// document is written as JSON (which is YAML). A YAML 1.2 writer leaves strings such as `ON`,
/// `yes` or `off` unquoted, and kubectl and kustomize, which read YAML 1.1, take them for booleans.
pub fn yaml_stream(objects: impl IntoIterator<Item = serde_json::Value>) -> String {
    objects.into_iter().map(|o| format!("---\n{}\n", serde_json::to_string_pretty(&o).expect("values serialise"))).collect()
}

/// Parses `kustomize build` output into objects (empty documents skipped) in install order.
pub fn parse_objects(yaml: &str) -> Result<Vec<DynamicObject>, String> {
    let mut objects = Vec::new();
    for (i, doc) in serde_yaml_ng::Deserializer::from_str(yaml).enumerate() {
        let value =
            serde_json::Value::deserialize(doc).map_err(|e| format!("document {}: {e}", i + 1))?;
        if value.is_null() {
            continue;
        }
        let object: DynamicObject =
            serde_json::from_value(value).map_err(|e| format!("document {}: {e}", i + 1))?;
        if object
            .types
            .as_ref()
            .is_none_or(|t| t.kind.is_empty() || t.api_version.is_empty())
        {
            return Err(format!("document {}: no apiVersion/kind", i + 1));
        }
        objects.push(object);
    }
    sort_install_order(&mut objects);
    Ok(objects)
}

/// `objects` with every object of a removed API version converted ([`crate::convert`]).
fn convert_removed_versions(
    objects: Vec<DynamicObject>,
) -> Result<(Vec<DynamicObject>, Vec<Conversion>), Unconvertible> {
    let values = objects
        .into_iter()
        .map(|o| serde_json::to_value(o).expect("a DynamicObject serialises"))
        .collect();
    let (values, conversions) = convert_objects(values)?;
    let objects = values
        .into_iter()
        .map(|v| serde_json::from_value(v).expect("a converted object is still an object"))
        .collect();
    Ok((objects, conversions))
}

/// Renders applications from fetched repositories with kustomize. Each render works in its own
/// temporary directory under `work_root`, removed afterwards; cached repositories are only read.
#[derive(Clone, Debug)]
pub struct Renderer {
    engine: Engine,
    work_root: PathBuf,
}

/// Where kustomize runs.
#[derive(Clone, Debug)]
enum Engine {
    /// Here, as a confined child ([`crate::sandbox`]): v3.1.0 for kfctl-era packages, and the
    /// other releases found (v5 for packages that use what v3.1.0 lacks, [`refs::check`]; v3.2.0
    /// for the Kubeflow releases that name it); a package needing a release not found is an
    /// error naming what it uses.
    Local { v3: Kustomize, more: BTreeMap<KustomizeRelease, Kustomize> },
    /// In the renderer, a process with no credential and no network ([`crate::remote`]).
    Remote(RemoteRenderer),
}

fn io(app: &str, context: impl Into<String>) -> impl FnOnce(std::io::Error) -> RenderError {
    let (app, context) = (app.to_string(), context.into());
    move |e| RenderError::Io {
        app,
        context,
        error: e.to_string(),
    }
}

impl Renderer {
    pub fn new(kustomize: Kustomize, work_root: impl Into<PathBuf>) -> Result<Self, String> {
        Self::with_engine(Engine::Local { v3: kustomize, more: BTreeMap::new() }, work_root)
    }

    /// Rendering in the renderer ([`crate::remote`]) instead of here.
    pub fn remote(renderer: RemoteRenderer, work_root: impl Into<PathBuf>) -> Result<Self, String> {
        Self::with_engine(Engine::Remote(renderer), work_root)
    }

    fn with_engine(engine: Engine, work_root: impl Into<PathBuf>) -> Result<Self, String> {
        let work_root = work_root.into();
        std::fs::create_dir_all(&work_root)
            .map_err(|e| format!("creating {}: {e}", work_root.display()))?;
        Ok(Renderer { engine, work_root })
    }

    /// With kustomize v5 for the packages that need it (a local renderer).
    pub fn with_v5(self, kustomize_v5: Kustomize) -> Self {
        self.with_release(KustomizeRelease::V5, kustomize_v5)
    }

    /// With `kustomize` for the packages `release` builds (a local renderer).
    pub fn with_release(self, release: KustomizeRelease, kustomize: Kustomize) -> Self {
        match self.engine {
            Engine::Local { v3, mut more } => {
                more.insert(release, kustomize);
                Renderer { engine: Engine::Local { v3, more }, ..self }
            }
            Engine::Remote(_) => self,
        }
    }

    /// The local binary of `release`, when kustomize runs here and it was found.
    pub fn local_release(&self, release: KustomizeRelease) -> Option<&Kustomize> {
        match &self.engine {
            Engine::Local { v3, .. } if release == KustomizeRelease::V3 => Some(v3),
            Engine::Local { more, .. } => more.get(&release),
            Engine::Remote(_) => None,
        }
    }

    /// The local binaries (v3.1.0, v5), when kustomize runs here.
    pub fn local(&self) -> Option<(&Kustomize, Option<&Kustomize>)> {
        match &self.engine {
            Engine::Local { v3, more } => Some((v3, more.get(&KustomizeRelease::V5))),
            Engine::Remote(_) => None,
        }
    }

    /// The renderer [`RemoteRenderer::from_env`] names, when it names one. Else both local
    /// releases from where [`Kustomize::locate_release`] finds them; all but v3.1.0 are optional
    /// (a package that needs one missing then fails, naming what it uses). Why one is missing is
    /// returned beside the renderer, for a log line.
    pub async fn locate(work_root: impl Into<PathBuf>) -> Result<(Self, Option<String>), String> {
        if let Some(remote) = RemoteRenderer::from_env() {
            return Ok((Renderer::remote(remote?, work_root)?, None));
        }
        let v3 = Kustomize::locate_release(KustomizeRelease::V3).await.map_err(|e| e.to_string())?;
        let mut renderer = Renderer::new(v3, work_root)?;
        let mut missing = Vec::new();
        for release in [KustomizeRelease::V3_2, KustomizeRelease::V5] {
            match Kustomize::locate_release(release).await {
                Ok(kustomize) => renderer = renderer.with_release(release, kustomize),
                Err(e) => missing.push(format!("{release}: {e}")),
            }
        }
        Ok((renderer, (!missing.is_empty()).then(|| missing.join("; "))))
    }

    /// The release that renders `app`: its repository's choice; else v5 for a package built as
    /// upstream builds it; else (kfctl's era) v5 when the package uses what v3.1.0 lacks, v3.1.0
    /// otherwise. With the reason, for status and logs.
    fn choose(app: &AppSpec, build: &Build) -> (KustomizeRelease, String) {
        match (app.kustomize, build) {
            (Some(release), _) => (release, "the repository's kustomize field, or the one the Kubeflow release names (3.2.0 for 1.3 to 1.6)".to_string()),
            (None, _) if !app.components.is_empty() => (KustomizeRelease::V5, "Components are applied to it (componentOf), which kustomize v3.1.0 cannot build".to_string()),
            (None, Build::Upstream) => (KustomizeRelease::V5, "kubeflow/manifests' layout (Kubeflow 1.3 and later), built as upstream builds it".to_string()),
            (None, Build::Kfctl(Some((file, what)))) => (KustomizeRelease::V5, format!("{} uses {what}", file.display())),
            (None, Build::Kfctl(None)) => (KustomizeRelease::V3, "kfctl's release: nothing in the package needs a newer one".to_string()),
        }
    }

    /// `kustomize build <dir>` with `release`, reading only `roots` (and a home of its own).
    async fn build(&self, app: &AppSpec, release: KustomizeRelease, why: &str, dir: &Path, home: &Path, roots: &[PathBuf]) -> Result<String, RenderError> {
        let kustomize_error = |source| RenderError::Kustomize { app: app.name.clone(), source };
        match &self.engine {
            Engine::Local { .. } => {
                let kustomize = self.local_release(release).ok_or_else(|| RenderError::NoKustomize {
                    app: app.name.clone(),
                    release,
                    why: why.to_string(),
                    error: format!("set {} or run `e2e/env/build.sh kustomize`", crate::kustomize::env_of(release)),
                })?;
                kustomize.build(dir, home, roots).await.map_err(kustomize_error)
            }
            Engine::Remote(remote) => remote.build(release, dir, roots).await.map_err(kustomize_error),
        }
    }

    /// Renders every application of a KfDef in spec order (an application name seen before is
    /// skipped, as kfctl did), fetching each repository once. Stops at the first error.
    pub async fn render_kfdef(
        &self,
        cache: &RepoCache,
        kfdef: &KfDef,
    ) -> Result<Vec<RenderedApp>, RenderError> {
        let ctx = RenderContext::of(kfdef);
        let mut fetched: BTreeMap<String, FetchedRepo> = BTreeMap::new();
        let mut seen = std::collections::BTreeSet::new();
        let mut out = Vec::new();
        let specs = kfdef.spec.applications.iter().map(AppSpec::from_application).collect::<Result<Vec<_>, _>>()?;
        let mirrors = crate::remote_bases::merged(&kfdef.spec.remote_base_mirrors, &cache.options().remote_base_mirrors).map_err(|(index, reason)| RenderError::RemoteBase {
            app: String::new(),
            reference: kfdef.spec.remote_base_mirrors[index].clone(),
            reason: format!("spec.remoteBaseMirrors[{index}]: {reason}"),
        })?;
        let links: Vec<(&str, Option<&str>, &str)> = kfdef
            .spec
            .applications
            .iter()
            .zip(&specs)
            .map(|(app, (_, repo))| (app.name.as_str(), app.kustomize_config.as_ref().and_then(|c| c.component_of.as_deref()), repo.as_str()))
            .collect();
        let mut components: BTreeMap<usize, Vec<(String, String)>> = BTreeMap::new();
        for (index, target) in component_targets(&links).into_iter().enumerate() {
            match target {
                Ok(None) => {}
                Ok(Some(target)) => components.entry(target).or_default().push((specs[index].0.name.clone(), specs[index].0.path.clone())),
                Err(reason) => return Err(RenderError::Component { app: specs[index].0.name.clone(), reason }),
            }
        }
        // Components without `componentOf` wait for the applications before them.
        let mut trailing: Vec<(usize, AppSpec, String, Reach)> = Vec::new();
        let mut rendered_at: BTreeMap<usize, usize> = BTreeMap::new();
        for (index, app) in kfdef.spec.applications.iter().enumerate() {
            if !seen.insert(app.name.clone()) {
                continue;
            }
            let (mut spec, repo_name) = specs[index].clone();
            if let Some(target) = links[index].1 {
                // Built with its application: nothing of its own.
                out.push(RenderedApp {
                    name: spec.name,
                    objects: Vec::new(),
                    warnings: vec![format!("a Component applied to application {target:?} (componentOf): built with it")],
                    conversions: Vec::new(),
                    kustomize: (KustomizeRelease::V5, format!("built with application {target:?}")),
                });
                continue;
            }
            spec.components = components.remove(&index).unwrap_or_default();
            if !fetched.contains_key(&repo_name) {
                let repo = kfdef
                    .spec
                    .repos
                    .iter()
                    .find(|r| r.name == repo_name)
                    .ok_or_else(|| RenderError::UnknownRepo {
                        app: app.name.clone(),
                        repo: repo_name.clone(),
                        known: kfdef.spec.repos.iter().map(|r| r.name.clone()).collect(),
                    })?;
                fetched.insert(
                    repo_name.clone(),
                    cache.fetch(&RepoSource::from(repo)).await?,
                );
            }
            spec.kustomize = kfdef.spec.repos.iter().find(|r| r.name == repo_name).and_then(|r| r.kustomize_for(kfdef.spec.version.as_deref()));
            // A package that cannot be read as one is rendered as any other, which says why.
            if let Ok(Some(reach)) = component_reach(&fetched[&repo_name].root, &spec)
                && !reach.adds_only()
            {
                out.push(RenderedApp { name: spec.name.clone(), objects: Vec::new(), warnings: Vec::new(), conversions: Vec::new(), kustomize: (KustomizeRelease::V5, String::new()) });
                trailing.push((out.len() - 1, spec, repo_name, reach));
                continue;
            }
            rendered_at.insert(out.len(), index);
            out.push(
                self.render_application(&fetched[&repo_name], &spec, &ctx, Some(RemoteBases { cache, mirrors: &mirrors }))
                    .await?,
            );
        }
        // Each such Component built with the earlier applications of its repository it reaches.
        let mut applied: BTreeMap<usize, Vec<(String, String)>> = BTreeMap::new();
        for (at, component, repo_name, reach) in &trailing {
            let earlier: Vec<(usize, Vec<serde_json::Value>)> = rendered_at
                .iter()
                .filter(|(position, index)| *position < at && specs[**index].1 == *repo_name)
                .map(|(position, _)| (*position, out[*position].objects.iter().map(|o| serde_json::to_value(o).expect("objects serialise")).collect()))
                .collect();
            let earlier: Vec<(usize, &[serde_json::Value])> = earlier.iter().map(|(position, objects)| (*position, objects.as_slice())).collect();
            let targets = trailing_targets(reach, &earlier).map_err(|reason| RenderError::Component { app: component.name.clone(), reason })?;
            let names: Vec<String> = targets.iter().map(|position| out[*position].name.clone()).collect();
            out[*at].warnings.push(applied_note(&names));
            out[*at].kustomize.1 = format!("built with applications {names:?}");
            for position in targets {
                applied.entry(position).or_default().push((component.name.clone(), component.path.clone()));
            }
        }
        for (position, components) in applied {
            let index = rendered_at[&position];
            let (mut spec, repo_name) = specs[index].clone();
            spec.kustomize = kfdef.spec.repos.iter().find(|r| r.name == repo_name).and_then(|r| r.kustomize_for(kfdef.spec.version.as_deref()));
            spec.components.extend(components);
            out[position] = self.render_application(&fetched[&repo_name], &spec, &ctx, Some(RemoteBases { cache, mirrors: &mirrors })).await?;
        }
        Ok(out)
    }

    /// Renders one application from a fetched repository.
    /// Remote bases the package names are fetched with `remote` (none: refused, as before).
    pub async fn render_application(
        &self,
        repo: &FetchedRepo,
        app: &AppSpec,
        ctx: &RenderContext,
        remote: Option<RemoteBases<'_>>,
    ) -> Result<RenderedApp, RenderError> {
        let work = tempfile::Builder::new()
            .prefix("render-")
            .tempdir_in(&self.work_root)
            .map_err(io(&app.name, "creating a work directory"))?;
        let copies = match remote {
            Some(remote) => fetch_remote_bases(&repo.root, app, remote).await?,
            None => RemoteCopies::default(),
        };
        let remote_roots = copies.roots.clone();
        let (build_dir, warnings, build) = {
            let (repo_root, work_dir, spec, ctx) = (
                repo.root.clone(),
                work.path().to_path_buf(),
                app.clone(),
                ctx.clone(),
            );
            tokio::task::spawn_blocking(move || prepare(&repo_root, &work_dir, &spec, &ctx, &copies))
                .await
                .map_err(|e| RenderError::Io {
                    app: app.name.clone(),
                    context: "preparing".into(),
                    error: e.to_string(),
                })??
        };
        let home = work.path().join("home");
        std::fs::create_dir_all(&home).map_err(io(&app.name, "creating a work directory"))?;
        let (release, why) = Self::choose(app, &build);
        // kustomize may read the repository and this render's work directory, nothing else.
        let mut roots = vec![repo.root.clone(), work.path().to_path_buf()];
        roots.extend(remote_roots);
        let output = self.build(app, release, &why, &build_dir, &home, &roots).await?;
        let objects = parse_objects(&output).map_err(|reason| RenderError::Output {
            app: app.name.clone(),
            reason,
        })?;
        let (objects, conversions) = convert_removed_versions(objects).map_err(|source| {
            RenderError::Unconvertible {
                app: app.name.clone(),
                source,
            }
        })?;
        Ok(RenderedApp {
            name: app.name.clone(),
            objects,
            warnings,
            conversions,
            kustomize: (release, why),
        })
    }
}

/// Validates `repoRef.path` and returns it resolved inside the repository.
fn package_dir(repo_root: &Path, app: &AppSpec) -> Result<(PathBuf, PathBuf), RenderError> {
    let invalid = |reason: &str| RenderError::InvalidPath {
        app: app.name.clone(),
        path: app.path.clone(),
        reason: reason.into(),
    };
    if app.path.trim().is_empty() {
        return Err(invalid("empty"));
    }
    let rel = safe_relative(Path::new(&app.path))
        .map_err(|r| invalid(&format!("{r}; it must be relative to the repository root")))?;
    let root = std::fs::canonicalize(repo_root)
        .map_err(io(&app.name, format!("resolving {}", repo_root.display())))?;
    let not_found = || RenderError::PathNotFound {
        app: app.name.clone(),
        path: app.path.clone(),
    };
    let resolved = std::fs::canonicalize(root.join(&rel)).map_err(|_| not_found())?;
    if !resolved.starts_with(&root) {
        return Err(invalid("resolves outside the repository"));
    }
    if !resolved.is_dir() {
        return Err(not_found());
    }
    Ok((root, rel))
}

/// How a package is built.
#[derive(Debug)]
enum Build {
    /// With kfctl's rules; the first feature of the package kustomize v3.1.0 lacks, if any.
    Kfctl(Option<refs::NewerFeature>),
    /// As upstream builds it (`kustomize build <path>`, v5).
    Upstream,
}

/// Whether `ctx` builds the packages of the repository at `root` as upstream builds them.
fn upstream_era(ctx: &RenderContext, root: &Path) -> bool {
    match ctx.era {
        Era::Upstream => true,
        Era::Kfctl => false,
        Era::FromRepository => root.join("example/kustomization.yaml").is_file(),
    }
}

/// Sets up the directory to build and returns it, with warnings and how it is built.
fn prepare(
    repo_root: &Path,
    work: &Path,
    app: &AppSpec,
    ctx: &RenderContext,
    remote: &RemoteCopies,
) -> Result<(PathBuf, Vec<String>, Build), RenderError> {
    let (root, rel) = package_dir(repo_root, app)?;
    let not_a_package = || RenderError::NotAPackage {
        app: app.name.clone(),
        path: app.path.clone(),
    };
    let forbidden = |(file, reference, reason): refs::Violation| RenderError::ForbiddenReference {
        app: app.name.clone(),
        file: file.display().to_string(),
        reference,
        reason,
    };
    // A package of kfctl's shape (`base/` and `overlays/`, nothing to build at the path itself)
    // has no upstream build: kfctl's rules build it whatever the era, and a later KfDef is told so.
    let kfctl_package = refs::kustomization_file(&root.join(&rel)).is_none() && refs::kustomization_file(&root.join(&rel).join("base")).is_some();
    let upstream_layout = upstream_era(ctx, &root);
    let upstream = upstream_layout && !kfctl_package;
    if upstream || ctx.mode == Mode::Stacks {
        // Each path as it is: kfctl's stacks, or upstream's layout.
        let dir = root.join(&rel);
        refs::kustomization_file(&dir).ok_or_else(not_a_package)?;
        let how = if upstream { "a package built as upstream builds it (Kubeflow 1.3 and later)" } else { "a stacks application" };
        let mut warnings = Vec::new();
        if !app.overlays.is_empty() {
            warnings.push(format!("overlays {:?} are not applied to {how}", app.overlays));
        }
        if !app.parameters.is_empty() {
            let names: Vec<_> = app.parameters.iter().map(|p| p.name.as_str()).collect();
            warnings.push(format!("parameters {names:?} are not applied to {how}"));
        }
        let (dir, roots) = with_remote_copies(&root, &rel, work, dir, remote, app)?;
        let newer = refs::check(&dir, &roots).map_err(forbidden)?;
        let dir = wrap_component(work, dir, &mut warnings).map_err(io(&app.name, "wrapping the Component"))?;
        let dir = with_components(&root, work, dir, app)?;
        return Ok((dir, warnings, if upstream { Build::Upstream } else { Build::Kfctl(newer) }));
    }

    let tree = work.join("tree");
    let pkg = mirror(&root, &tree, &rel)
        .map_err(io(&app.name, "copying the package into the work directory"))?;
    let tree_canon =
        std::fs::canonicalize(&tree).map_err(io(&app.name, "resolving the work directory"))?;
    let roots = [tree_canon, root];
    // kfctl gave the packages it built a namespace; a package only kustomize v5 builds (which
    // kfctl never built) is built as upstream builds it, its objects' namespaces kept.
    let upstream_package = match app.kustomize {
        Some(release) => release == KustomizeRelease::V5,
        None => refs::check(&pkg, &roots).map_err(forbidden)?.is_some(),
    };
    let mut warnings = per_application(&pkg, app, ctx, !upstream_package)?;
    if kfctl_package && upstream_layout {
        warnings.push("a kfctl-style package (base/ and overlays/, no kustomization at its path) in a KfDef built as upstream builds it: built with kfctl's rules, as kfctl built it".into());
    }
    let newer = refs::check(&pkg, &roots).map_err(forbidden)?;
    let pkg = wrap_component(work, pkg, &mut warnings).map_err(io(&app.name, "wrapping the Component"))?;
    let pkg = with_components(&roots[1], work, pkg, app)?;
    Ok((pkg, warnings, Build::Kfctl(newer)))
}

/// Finds the remote bases the package of `app` names and fetches each through `remote`: pinned
/// ones only, after the mirrors, cached by URL. A fetched copy that names remote bases itself is
/// refused (one level is fetched).
async fn fetch_remote_bases(repo_root: &Path, app: &AppSpec, remote: RemoteBases<'_>) -> Result<RemoteCopies, RenderError> {
    let (root, spec) = (repo_root.to_path_buf(), app.clone());
    let found = tokio::task::spawn_blocking(move || -> Result<Vec<(PathBuf, String)>, RenderError> {
        let (root, rel) = package_dir(&root, &spec)?;
        refs::remote_references(&root.join(rel), std::slice::from_ref(&root))
            .map_err(|(file, reference, reason)| RenderError::ForbiddenReference { app: spec.name.clone(), file: file.display().to_string(), reference, reason })
    })
    .await
    .map_err(|e| RenderError::Io { app: app.name.clone(), context: "finding remote bases".into(), error: e.to_string() })??;
    let mut copies = RemoteCopies::default();
    let mut fetched: BTreeMap<String, PathBuf> = BTreeMap::new();
    for (file, reference) in found {
        let refused = |reason: String| RenderError::RemoteBase { app: app.name.clone(), reference: reference.clone(), reason };
        if let Some(local) = fetched.get(&reference) {
            copies.files.entry(file).or_default().insert(reference.clone(), local.clone());
            continue;
        }
        let parsed = remote_bases::parse(&reference).map_err(&refused)?;
        remote_bases::check_pinned(&parsed).map_err(&refused)?;
        let url = parsed.download_url(remote.mirrors);
        let (local, root) = match &parsed {
            RemoteRef::Git { repository, path, git_ref } => {
                // Over the git protocol; from the host's archive of the ref when the server does
                // not speak it (a mirror serving archives).
                let over_git = remote_bases::mirrored(repository, remote.mirrors);
                let git_ref = git_ref.as_deref().unwrap_or_default();
                let repo = match remote.cache.fetch_git(&over_git, git_ref).await.map_err(|e| refused(format!("fetching {over_git} at {git_ref}: {e}")))? {
                    Some(repo) => repo,
                    None => remote.cache.fetch(&RepoSource { name: reference.clone(), uri: url.clone(), sha256: None }).await.map_err(|e| refused(format!("fetching {url}: {e}")))?,
                };
                let root = std::fs::canonicalize(&repo.root).map_err(|e| refused(e.to_string()))?;
                let local = std::fs::canonicalize(root.join(path)).map_err(|_| refused(format!("{url} has no {path:?}")))?;
                if !local.starts_with(&root) || !local.is_dir() {
                    return Err(refused(format!("{path:?} is not a directory inside {url}")));
                }
                (local, root)
            }
            RemoteRef::File { .. } => {
                let file = remote.cache.fetch_file(&url).await.map_err(|e| refused(format!("fetching {url}: {e}")))?;
                let file = std::fs::canonicalize(file).map_err(|e| refused(e.to_string()))?;
                let root = file.parent().expect("a file in the cache").to_path_buf();
                (file, root)
            }
        };
        if local.is_dir() {
            let nested = refs::remote_references(&local, std::slice::from_ref(&root)).map_err(|(_, r, why)| refused(format!("{r}: {why}")))?;
            if let Some((_, other)) = nested.first() {
                return Err(refused(format!("it names another remote base ({other}); vendor that one, or mirror a copy that does not")));
            }
        }
        copies.roots.push(root);
        fetched.insert(reference.clone(), local.clone());
        copies.files.entry(file).or_default().insert(reference, local);
    }
    copies.roots.sort();
    copies.roots.dedup();
    Ok(copies)
}

/// The directory to build for package `dir` (at `rel` in the repository at `root`) and the roots
/// its references may reach: as it is, or, when it names remote bases, a copy of the repository
/// (symlinks, [`remote_bases::overlay_tree`]) whose kustomizations name the fetched copies instead.
fn with_remote_copies(root: &Path, rel: &Path, work: &Path, dir: PathBuf, remote: &RemoteCopies, app: &AppSpec) -> Result<(PathBuf, Vec<PathBuf>), RenderError> {
    if remote.files.is_empty() {
        return Ok((dir, vec![root.to_path_buf()]));
    }
    let tree = work.join("tree");
    std::fs::create_dir_all(&tree).map_err(io(&app.name, "creating a work directory"))?;
    let tree = std::fs::canonicalize(&tree).map_err(io(&app.name, "resolving the work directory"))?;
    let mut rewrites = BTreeMap::new();
    for (file, copies) in &remote.files {
        let text = std::fs::read_to_string(file).map_err(io(&app.name, format!("reading {}", file.display())))?;
        let relative = file.strip_prefix(root).map_err(|_| RenderError::Io { app: app.name.clone(), context: format!("{}", file.display()), error: "outside the repository".into() })?;
        // kustomize takes no absolute directory: each copy named relative to the rewritten file.
        let at = tree.join(relative).parent().expect("a file has a folder").to_path_buf();
        let local: BTreeMap<String, PathBuf> = copies.iter().map(|(reference, copy)| (reference.clone(), remote_bases::relative_path(&at, copy))).collect();
        let rewritten = remote_bases::rewrite(&text, &local).map_err(|e| RenderError::Io { app: app.name.clone(), context: format!("parsing {}", file.display()), error: e })?;
        if let Some(rewritten) = rewritten {
            rewrites.insert(relative.to_path_buf(), rewritten);
        }
    }
    remote_bases::overlay_tree(root, &tree, &rewrites).map_err(io(&app.name, "copying the repository's kustomizations"))?;
    let mut roots = vec![tree.clone(), root.to_path_buf()];
    roots.extend(remote.roots.iter().cloned());
    Ok((tree.join(rel), roots))
}

/// The directory to build for package `dir` with the Components applied to it (`app.components`):
/// `dir` itself when there are none, else a Kustomization in the work directory listing `dir`
/// under `resources` and each Component under `components`, as upstream's example lists them.
/// Each Component is checked as a package is: inside the repository at `root`, no reference
/// leaving it, and a `kind: Component`.
fn with_components(root: &Path, work: &Path, dir: PathBuf, app: &AppSpec) -> Result<PathBuf, RenderError> {
    if app.components.is_empty() {
        return Ok(dir);
    }
    let wrapper = work.join("with-components");
    std::fs::create_dir_all(&wrapper).map_err(io(&app.name, "creating a work directory"))?;
    let link = |target: &Path, name: &str| std::os::unix::fs::symlink(target, wrapper.join(name)).map_err(io(&app.name, "linking a package into the work directory"));
    link(&dir, "application")?;
    let mut listed = Vec::new();
    for (index, (component, path)) in app.components.iter().enumerate() {
        let spec = AppSpec { name: component.clone(), path: path.clone(), ..AppSpec::default() };
        let (_, rel) = package_dir(root, &spec)?;
        let package = root.join(rel);
        refs::check(&package, &[root.to_path_buf()]).map_err(|(file, reference, reason)| RenderError::ForbiddenReference { app: component.clone(), file: file.display().to_string(), reference, reason })?;
        if !refs::is_component(&package) {
            return Err(RenderError::Component { app: component.clone(), reason: format!("componentOf is set, but {path} is not a kind: Component") });
        }
        let name = format!("component-{index}");
        link(&package, &name)?;
        listed.push(name);
    }
    let kustomization = format!("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [application]\ncomponents: [{}]\n", listed.join(", "));
    std::fs::write(wrapper.join("kustomization.yaml"), kustomization).map_err(io(&app.name, "writing the Components' kustomization"))?;
    Ok(wrapper)
}

/// The directory to build for package `dir`: itself, or, for a `kind: Component` (an entry of
/// kubeflow/manifests' `example/kustomization.yaml` under `components`), a Kustomization in the
/// work directory that lists it, as that file does. Built alone, a Component yields what it adds
/// (`resources`, generators); its patches reach only those, not other applications' objects,
/// which is said in a warning.
fn wrap_component(work: &Path, dir: PathBuf, warnings: &mut Vec<String>) -> std::io::Result<PathBuf> {
    if !refs::is_component(&dir) {
        return Ok(dir);
    }
    let wrapper = work.join("component");
    std::fs::create_dir_all(&wrapper)?;
    std::os::unix::fs::symlink(&dir, wrapper.join("package"))?;
    std::fs::write(
        wrapper.join("kustomization.yaml"),
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\ncomponents: [package]\n",
    )?;
    warnings.push(
        "a Component, built on its own: what it adds is installed; its patches and transformers change only that, not other applications' objects".into(),
    );
    Ok(wrapper)
}

/// Recreates the path to the package under `tree`: the package itself is copied (it gets
/// rewritten), everything beside the path is a symlink into the repository, so relative
/// references out of the package still resolve. Returns the package copy.
fn mirror(root: &Path, tree: &Path, rel: &Path) -> std::io::Result<PathBuf> {
    let (mut src, mut dst) = (root.to_path_buf(), tree.to_path_buf());
    for comp in rel.components() {
        std::fs::create_dir_all(&dst)?;
        for entry in std::fs::read_dir(&src)? {
            let entry = entry?;
            if entry.file_name() != comp.as_os_str() {
                std::os::unix::fs::symlink(entry.path(), dst.join(entry.file_name()))?;
            }
        }
        src.push(comp);
        dst.push(comp);
    }
    copy_tree(&src, &dst, root, 0)?;
    Ok(dst)
}

/// Copies a directory, following symlinks that stay inside `root` (others are an error).
fn copy_tree(src: &Path, dst: &Path, root: &Path, depth: usize) -> std::io::Result<()> {
    if depth > 64 {
        return Err(std::io::Error::other(format!(
            "{}: directories nested too deep (symlink loop?)",
            src.display()
        )));
    }
    std::fs::create_dir_all(dst)?;
    for entry in std::fs::read_dir(src)? {
        let entry = entry?;
        let (from, to) = (entry.path(), dst.join(entry.file_name()));
        let resolved = std::fs::canonicalize(&from);
        match resolved {
            Ok(r) if !r.starts_with(root) => {
                return Err(std::io::Error::other(format!(
                    "{} links outside the repository",
                    from.display()
                )));
            }
            Ok(r) if r.is_dir() => copy_tree(&r, &to, root, depth + 1)?,
            Ok(r) => {
                std::fs::copy(&r, &to)?;
            }
            Err(_) => {} // a dangling link: nothing to copy
        }
    }
    Ok(())
}

fn read_mapping(app: &str, file: &Path) -> Result<Mapping, RenderError> {
    let text =
        std::fs::read_to_string(file).map_err(io(app, format!("reading {}", file.display())))?;
    // A key given twice keeps its last value, as kustomize v3 reads it.
    match crate::yaml::parse(&text) {
        Ok(Value::Mapping(m)) => Ok(m),
        Ok(Value::Null) => Ok(Mapping::new()),
        Ok(_) => Err(RenderError::Io {
            app: app.into(),
            context: format!("parsing {}", file.display()),
            error: "not a mapping".into(),
        }),
        Err(e) => Err(RenderError::Io {
            app: app.into(),
            context: format!("parsing {}", file.display()),
            error: e.to_string(),
        }),
    }
}

/// kfctl's per-application preparation of the package copy at `pkg`: overlays merged into the
/// base, parameters into params.env files, the namespace set where the `namespace` parameter
/// asks, or (`kfctl_namespace`) where the package sets none, as kfctl did.
/// Returns what was ignored (parameters the package does not declare).
fn per_application(pkg: &Path, app: &AppSpec, ctx: &RenderContext, kfctl_namespace: bool) -> Result<Vec<String>, RenderError> {
    let base_dir = pkg.join("base");
    let has_base = base_dir.join("kustomization.yaml").is_file();
    // The directories whose params.env the parameters apply to.
    let mut param_dirs = Vec::new();
    let mut overlays = Vec::new();
    if has_base {
        param_dirs.push(base_dir.clone());
        let available = || -> Vec<String> {
            let mut names: Vec<String> = std::fs::read_dir(pkg.join("overlays"))
                .into_iter()
                .flatten()
                .filter_map(Result::ok)
                .filter(|e| e.path().join("kustomization.yaml").is_file())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        };
        for name in &app.overlays {
            let valid_name = !name.is_empty()
                && name != "."
                && name != ".."
                && !name.contains(['/', '\\', '\0']);
            let dir = pkg.join("overlays").join(name);
            if !valid_name || !dir.join("kustomization.yaml").is_file() {
                return Err(RenderError::MissingOverlay {
                    app: app.name.clone(),
                    overlay: name.clone(),
                    available: available(),
                });
            }
            param_dirs.push(dir.clone());
            overlays.push((name.clone(), dir));
        }
    } else {
        if refs::kustomization_file(pkg).is_none() {
            return Err(RenderError::NotAPackage {
                app: app.name.clone(),
                path: app.path.clone(),
            });
        }
        if !app.overlays.is_empty() {
            return Err(RenderError::OverlaysWithoutBase {
                app: app.name.clone(),
                overlays: app.overlays.clone(),
            });
        }
        param_dirs.push(pkg.to_path_buf());
    }

    // Parameters: declared in a selected params.env, or `namespace`.
    let mut declared = std::collections::BTreeSet::from(["namespace".to_string()]);
    let mut params_files = Vec::new();
    for dir in &param_dirs {
        let file = dir.join("params.env");
        if file.is_file() {
            let text = std::fs::read_to_string(&file)
                .map_err(io(&app.name, format!("reading {}", file.display())))?;
            declared.extend(kfctl::params_env_names(&text));
            params_files.push((file, text));
        }
    }
    // kfctl (MergeKustomization's params.env rewrite) replaced the lines a params.env already had
    // and nothing else: a parameter no selected params.env declares changed nothing, silently —
    // the official v1.0 KfDefs rely on it (`reportUsage` for spartakus). Ignored here too, and said.
    let mut params = BTreeMap::new();
    let mut warnings = Vec::new();
    for p in &app.parameters {
        if !declared.contains(&p.name) {
            warnings.push(format!(
                "parameter {:?} is declared by no selected params.env (declared: {:?}); ignored, as kfctl ignored it",
                p.name,
                declared.iter().collect::<Vec<_>>()
            ));
            continue;
        }
        kfctl::check_param_value(&p.value).map_err(|reason| RenderError::InvalidParameter {
            app: app.name.clone(),
            parameter: p.name.clone(),
            reason,
        })?;
        params.insert(p.name.clone(), p.value.clone());
    }
    let namespace = params
        .get("namespace")
        .filter(|v| !v.is_empty())
        .cloned()
        .unwrap_or_else(|| ctx.namespace.clone());
    for (file, text) in params_files {
        let rewritten = kfctl::rewrite_params_env(&text, &params, &ctx.namespace, &ctx.kfdef_name);
        std::fs::write(&file, rewritten)
            .map_err(io(&app.name, format!("writing {}", file.display())))?;
    }

    if has_base {
        let base = read_mapping(&app.name, &base_dir.join("kustomization.yaml"))?;
        let mut loaded = Vec::new();
        for (name, dir) in overlays {
            loaded.push((
                name,
                read_mapping(&app.name, &dir.join("kustomization.yaml"))?,
            ));
        }
        let merged = kfctl::merge_kustomizations(&base, &loaded, &namespace);
        for n in ["kustomization.yaml", "kustomization.yml", "Kustomization"] {
            let _ = std::fs::remove_file(pkg.join(n));
        }
        write_mapping(&app.name, &pkg.join("kustomization.yaml"), &merged)?;
    } else {
        let file = refs::kustomization_file(pkg).expect("checked above");
        let mut k = read_mapping(&app.name, &file)?;
        let explicit = params.get("namespace").filter(|v| !v.is_empty());
        let has_ns = k
            .get("namespace")
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty());
        if explicit.is_some() || (kfctl_namespace && !has_ns) {
            k.insert(Value::String("namespace".into()), Value::String(namespace));
        }
        write_mapping(&app.name, &file, &k)?;
    }
    Ok(warnings)
}

fn write_mapping(app: &str, file: &Path, m: &Mapping) -> Result<(), RenderError> {
    let text = serde_yaml_ng::to_string(m).expect("a mapping serialises");
    std::fs::write(file, text).map_err(io(app, format!("writing {}", file.display())))
}

#[cfg(test)]
mod yaml_tests {
    #[test]
    fn strings_yaml_1_1_reads_as_booleans_stay_strings() {
        let config = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "p"}, "data": {"clusterRbacConfig": "ON", "enabled": "yes", "off": "off"}});
        let text = super::yaml_stream([config.clone()]);
        assert!(text.contains(r#""clusterRbacConfig": "ON""#) && text.contains(r#""enabled": "yes""#), "{text}");
        let back: Vec<serde_json::Value> = serde_yaml_ng::Deserializer::from_str(&text).map(|d| serde::Deserialize::deserialize(d).unwrap()).collect();
        assert_eq!(back, [config]);
    }
}

#[cfg(test)]
mod component_tests {
    use super::component_targets;

    #[test]
    fn a_component_applies_to_an_application_of_its_repository_built_on_its_own() {
        let apps = [
            ("profiles-pss", None, "manifests"),
            ("pss-restricted", Some("profiles-pss"), "manifests"),
            ("missing", Some("pipeline"), "manifests"),
            ("itself", Some("itself"), "manifests"),
            ("chained", Some("pss-restricted"), "manifests"),
            ("elsewhere", Some("profiles-pss"), "other"),
            ("later", Some("dashboard"), "manifests"),
            ("dashboard", None, "manifests"),
        ];
        let targets = component_targets(&apps);
        assert_eq!(targets[0], Ok(None));
        assert_eq!(targets[1], Ok(Some(0)));
        assert!(targets[2].as_ref().unwrap_err().contains("\"pipeline\", which this KfDef's generic applications do not include"), "{:?}", targets[2]);
        assert!(targets[3].as_ref().unwrap_err().contains("itself"), "{:?}", targets[3]);
        assert!(targets[4].as_ref().unwrap_err().contains("itself a Component"), "{:?}", targets[4]);
        assert!(targets[5].as_ref().unwrap_err().contains("another repository"), "{:?}", targets[5]);
        // Upstream's example lists components after every resource: a later application is fine.
        assert_eq!(targets[6], Ok(Some(7)));
        assert_eq!(targets[7], Ok(None));
    }
}
