//! `kfop`: kfctl-style commands for KfDefs, made of the operators' own functions.
//!
//! - `build -f kfdef.yaml -o DIR`: the meta-operator's plan (which component installs which
//!   application), then each component's objects exactly as its operator builds them (labels,
//!   owner annotation, namespace, applied hash), in apply order: `DIR/<component>.yaml`. No
//!   cluster needed: kinds a package uses without shipping their CRD are taken for namespaced
//!   custom resources. Repositories may also be local directories, tarballs or `file://` URLs.
//!   Objects of API versions Kubernetes no longer serves are written converted, each listed
//!   ([`kubeflow_manifests::convert`]).
//! - `apply -f kfdef.yaml`: the same plan as component resources in the KfDef's namespace (named
//!   after it, labelled [`KFOP_LABEL`]), each reconciled by its component's controller running in
//!   this process — no operator needed — until every application is Ready; then it exits.
//!   Component resources of the KfDef whose component left the plan are deleted. Repositories
//!   are fetched as the operators fetch them: http(s) archives only.
//! - `plan -f kfdef.yaml`: what `apply` (or the operators) would change in the cluster, writing
//!   nothing: per component its version now and then, and per object whether it is added,
//!   changed (the fields a server-side dry-run apply with the operator's field manager changes),
//!   unchanged, pruned (made by the KfDef's resource, no longer rendered) or left as it is (not
//!   made by this KfDef); for CRDs, the served and storage versions and the schemas that change.
//! - `plan --from old.yaml -f new.yaml`: what moving a KfDef from one to the other does, from the
//!   two renders alone, no cluster read ([`component_framework::render_diff`]): each application
//!   added, removed, moved to another component, changed or unchanged; each object added,
//!   changed (the fields, and images as `old → new`), pruned or kept (CRDs, namespaces and
//!   PersistentVolumeClaims); each component's version; the release notes' manual steps.
//! - `delete -f kfdef.yaml`: deletes those resources and runs their controllers until the
//!   finalizers removed every object they made (CRDs and namespaces stay).
//! - `init --release <tag>`: the KfDef of a kubeflow/manifests release, one application per entry
//!   of its `example/kustomization.yaml` ([`kubeflow_manifests::example`]).
//! - `local-bus DIR --port P`: a secured NATS bus for operators run on this machine: a CA and
//!   server certificate for 127.0.0.1, an NKey seed per operator (`DIR/identities/<operator>.nk`)
//!   and `DIR/<name>.conf` for `nats-server -c`, with the permissions of the bus contract.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use component_framework::api::component::{ComponentKind, InventoryEntry, Platform};
use component_framework::api::KfDef;
use component_framework::OperatorArgs;
use component_framework::render_diff::Rendered;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, Client, ResourceExt};
use kubeflow_component_registry::RegisteredComponent;
use meta_operator::catalog::Catalog;
use meta_operator::plan::{Plan, plan};
use serde_json::{Value, json};

/// `kfop local-bus`: generates the bus material unless DIR already has it, then writes the
/// server's configuration.
fn local_bus(dir: &std::path::Path, name: &str, port: u16, monitor_port: Option<u16>, store_dir: &std::path::Path) -> Result<(), String> {
    use operator_runtime::bus_security::LocalBus;
    let bus = if dir.join("ca.crt").exists() { LocalBus { dir: dir.to_path_buf() } } else { LocalBus::create(dir).map_err(|e| format!("cannot write {}: {e}", dir.display()))? };
    let config = bus.write_server_config(name, port, monitor_port, store_dir, None).map_err(|e| format!("cannot write the configuration: {e}"))?;
    println!("{}", config.display());
    Ok(())
}

/// Label on the component resources `kfop apply` made, naming their KfDef.
pub const KFOP_LABEL: &str = "kfop.kubeflow.org/kfdef";
const FIELD_MANAGER: &str = "kfop";

#[derive(Parser, Debug)]
#[command(name = "kfop", version, about = "kfctl-style commands for Kubeflow KfDefs, run with the operators' own functions")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Write what each component's operator would apply for a KfDef to DIR/<component>.yaml.
    Build {
        #[command(flatten)]
        kfdef: KfDefArg,
        /// Output directory (created when missing).
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
        /// Build for OpenShift (fixed user and group ids dropped from pods).
        #[arg(long)]
        openshift: bool,
    },
    /// Install a KfDef with the component controllers running in this process, until Ready.
    Apply {
        #[command(flatten)]
        kfdef: KfDefArg,
        /// Give up (exit 1) when not every application is Ready after this many seconds.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
    },
    /// Show what applying a KfDef would change in the cluster (server-side dry runs; writes
    /// nothing), or with --from, what moving from one KfDef to another changes (no cluster).
    Plan {
        #[command(flatten)]
        kfdef: KfDefArg,
        /// The KfDef installed now (e.g. the previous release's): compare the two renders.
        #[arg(long)]
        from: Option<PathBuf>,
        /// Render for OpenShift (with --from).
        #[arg(long)]
        openshift: bool,
    },
    /// Uninstall a KfDef `kfop apply` installed (CRDs and namespaces stay).
    Delete {
        #[command(flatten)]
        kfdef: KfDefArg,
        #[arg(long, default_value_t = 600)]
        timeout: u64,
    },
    /// Write the KfDef of a kubeflow/manifests release from its example/kustomization.yaml: one
    /// application per entry of its resources, in order, then of its components.
    Init {
        /// The release's tag, e.g. v1.11.0.
        #[arg(long)]
        release: String,
        /// The release's archive the KfDef names (default: github.com's archive of the tag).
        #[arg(long)]
        repo_uri: Option<String>,
        /// Where to read the archive from, when not from --repo-uri: a mirror's URL, or a local
        /// tarball or directory (an air-gapped machine). Fetched as the operators fetch, bounded
        /// and checked.
        #[arg(long)]
        fetch_from: Option<String>,
        /// Where to write it (default: standard output).
        #[arg(short = 'o', long = "output")]
        output: Option<PathBuf>,
        #[arg(long, default_value = "kubeflow")]
        name: String,
        #[arg(long, default_value = "kubeflow")]
        namespace: String,
    },
    /// Write a secured NATS bus (TLS, one NKey per operator) for operators run on this machine.
    LocalBus {
        /// Directory for the certificates, seeds and configuration (created when missing).
        dir: PathBuf,
        /// Server name; the configuration is DIR/<name>.conf.
        #[arg(long, default_value = "nats")]
        name: String,
        #[arg(long, default_value_t = 4222)]
        port: u16,
        #[arg(long)]
        monitor_port: Option<u16>,
        /// JetStream store directory.
        #[arg(long)]
        store_dir: PathBuf,
    },
}

#[derive(clap::Args, Debug)]
struct KfDefArg {
    /// The KfDef (kfctl format, kfdef.apps.kubeflow.org/v1); namespace `kubeflow` unless it names one.
    #[arg(short = 'f', long = "file")]
    file: PathBuf,
}

impl KfDefArg {
    fn read(&self) -> Result<KfDef, String> {
        let text = std::fs::read_to_string(&self.file).map_err(|e| format!("{}: {e}", self.file.display()))?;
        let mut kfdef: KfDef = serde_yaml_ng::from_str(&text).map_err(|e| format!("{}: not a KfDef: {e}", self.file.display()))?;
        if kfdef.metadata.namespace.is_none() {
            kfdef.metadata.namespace = Some("kubeflow".into());
        }
        Ok(kfdef)
    }
}

/// What the component operators would announce on NATS: their built-in releases.
fn catalog(registry: &[RegisteredComponent]) -> Catalog {
    let mut catalog = Catalog::default();
    for component in registry {
        catalog.learn(component.kind, component.releases.clone());
    }
    catalog
}

/// The meta-operator's plan for `kfdef`, refused when a component cannot be resolved.
fn plan_of(kfdef: &KfDef, platform: Platform, registry: &[RegisteredComponent]) -> Result<Plan, String> {
    let plan = plan(kfdef, platform, &catalog(registry)).map_err(|e| e.to_string())?;
    match plan.unresolved.iter().next() {
        Some((component, why)) => Err(format!("{component}: {why}")),
        None => Ok(plan),
    }
}

fn resource(registered: &RegisteredComponent, kfdef: &KfDef, spec: &Value) -> Value {
    let api = registered.api_resource();
    json!({
        "apiVersion": api.api_version, "kind": api.kind,
        "metadata": {"name": kfdef.name_any(), "namespace": kfdef.namespace(), "labels": {KFOP_LABEL: kfdef.name_any()}},
        "spec": spec,
    })
}

/// What component `registered`'s operator applies for the resource `kfdef` plans for it.
struct Desired {
    objects: Vec<Value>,
    /// The applications that fail, with why.
    failed: Vec<String>,
    /// Their names: what they installed before stays.
    held: std::collections::BTreeSet<String>,
    /// Each object converted from a removed API version, with its application.
    conversions: Vec<String>,
}

/// Builds what component `registered`'s operator applies for the resource `kfdef` plans for it:
/// from its built-in release, or from the packages the spec names.
async fn desired(registered: &RegisteredComponent, kfdef: &KfDef, spec: &Value) -> Result<Desired, String> {
    let (name, namespace) = (kfdef.name_any(), kfdef.namespace().unwrap_or_default());
    // The KfDef file is the user's own: local repositories are fine here, and so is any address
    // (see `unfenced`).
    let fetch = kubeflow_manifests::FetchOptions { allow_local: true, ..unfenced() };
    let rendered = (registered.render_packages)(name.clone(), namespace.clone(), spec.clone(), fetch).await.transpose().map_err(|e| format!("{}: {e}", registered.kind))?;
    let (mut failed, mut held, mut conversions) = (Vec::new(), std::collections::BTreeSet::new(), Vec::new());
    if let Some(rendered) = &rendered {
        failed = rendered.failed.iter().map(|f| format!("application {:?}: {}", f.application, f.error)).collect();
        held = rendered.failed.iter().map(|f| f.application.clone()).collect();
        conversions = rendered.conversion_details.iter().flat_map(|(application, lines)| lines.iter().map(move |line| format!("{application}: {line}"))).collect();
    }
    let objects = (registered.render)(&name, &namespace, spec, rendered).map_err(|e| format!("{}: {e}", registered.kind))?;
    Ok(Desired { objects, failed, held, conversions })
}

#[derive(Default)]
struct PlanTotals {
    add: usize,
    change: usize,
    unchanged: usize,
    prune: usize,
    keep: usize,
    foreign: usize,
}

/// `kfop plan`: every line says what would happen to one object; nothing is written.
async fn plan_command(client: Client, kfdef: &KfDef) -> Result<(), String> {
    use component_framework::plan as diff;
    let registry = kubeflow_component_registry::all();
    let platform = meta_operator::controller::detect_platform(&client).await.map_err(|e| format!("reading the API groups: {e}"))?;
    let plan = plan_of(kfdef, platform, &registry)?;
    let (namespace, name) = (kfdef.namespace().unwrap_or_default(), kfdef.name_any());
    let owner = format!("{namespace}/{name}");
    let mut totals = PlanTotals::default();
    let mut failures = Vec::new();
    let mut manual_steps = Vec::new();
    for (component, planned) in &plan.components {
        let registered = registry.iter().find(|r| r.kind == *component).expect("every component is registered");
        let Desired { objects, failed, held, .. } = desired(registered, kfdef, &planned.spec).await?;
        failures.extend(failed);
        let installed = match dynamic_api(&client, registered, &namespace).get_opt(&name).await {
            Ok(found) => found,
            // The component's CRD is not installed: nothing of it yet.
            Err(kube::Error::Api(status)) if status.code == 404 => None,
            Err(e) => return Err(format!("reading {} {owner}: {e}", registered.kind.kind())),
        };
        let from = installed.as_ref().and_then(|r| r.data["status"]["version"].as_str().or(r.data["spec"]["version"].as_str()).map(String::from));
        println!("{} {owner}: {} → {} ({})", registered.kind.kind(), from.as_deref().unwrap_or("not installed"), planned.version, applications_of(&plan, *component).join(", "));
        // The generic component's version is the KfDef's Kubeflow version.
        if *component == ComponentKind::GENERIC {
            manual_steps = meta_operator::release_notes::manual_steps(from.as_deref().unwrap_or_default(), &planned.version);
        }
        let adopt = planned.spec["adoptExisting"] == true;
        let inventory: Vec<InventoryEntry> = installed.as_ref().and_then(|r| serde_json::from_value(r.data["status"]["inventory"].clone()).ok()).unwrap_or_default();
        let changes = diff::compute(&client, *component, &owner, adopt, &objects, &inventory, &held, &diff::PlanRules::RETAIN).await.map_err(|e| e.to_string())?;
        for (verb, lines) in [("add", &changes.add), ("change", &changes.change), ("prune", &changes.prune), ("keep", &changes.keep), ("leave", &changes.leave), ("failed", &changes.failed)] {
            for line in lines {
                println!("  {verb:<9} {line}");
            }
        }
        for line in &changes.crd_changes {
            println!("  crd       {line}");
        }
        for a in &changes.applications {
            println!("  app       {}: {} to add, {} to change, {} to prune, {} kept", a.name, a.add, a.change, a.prune, a.keep);
        }
        failures.extend(changes.failed.iter().cloned());
        totals.add += changes.add.len();
        totals.change += changes.change.len();
        totals.prune += changes.prune.len();
        totals.keep += changes.keep.len();
        totals.unchanged += changes.unchanged as usize;
        totals.foreign += changes.leave.len();
    }
    for step in &manual_steps {
        println!("manual    {step}");
    }
    println!(
        "KfDef {owner}: {} to add, {} to change, {} to prune, {} kept, {} unchanged, {} left as they are (not made by this KfDef); nothing was written",
        totals.add, totals.change, totals.prune, totals.keep, totals.unchanged, totals.foreign
    );
    match failures.is_empty() {
        true => Ok(()),
        false => Err(failures.join("\n")),
    }
}

/// `kfop init`: the release's archive fetched as `kfop build` fetches (bounded, checked), its
/// example read, the KfDef written.
async fn init(release: &str, repo_uri: Option<String>, fetch_from: Option<String>, output: Option<&std::path::Path>, name: &str, namespace: &str) -> Result<(), String> {
    use kubeflow_manifests::example;
    if !kubeflow_crds::validation::is_version(release) {
        return Err(format!("--release {release:?}: expected a release tag such as v1.11.0"));
    }
    let uri = repo_uri.unwrap_or_else(|| example::upstream_archive(release));
    let cache_dir = component_framework::package::cache_dir().join("repos");
    let options = kubeflow_manifests::FetchOptions { allow_local: true, ..unfenced() };
    let cache = kubeflow_manifests::RepoCache::new(cache_dir, options).map_err(|e| format!("the repository cache: {e}"))?;
    let from = fetch_from.unwrap_or_else(|| uri.clone());
    let repo = cache.fetch(&kubeflow_manifests::RepoSource { name: "manifests".into(), uri: from.clone(), sha256: None }).await.map_err(|e| e.to_string())?;
    let text = std::fs::read_to_string(repo.root.join(example::EXAMPLE)).map_err(|e| format!("{from}: {}: {e} (not a kubeflow/manifests release of Kubeflow 1.3 or later?)", example::EXAMPLE))?;
    let kfdef = example::kfdef_of_example(&text, release, &uri, name, namespace)?;
    let yaml = example::kfdef_yaml(&kfdef, release);
    match output {
        Some(path) => std::fs::write(path, yaml).map_err(|e| format!("{}: {e}", path.display())),
        None => {
            print!("{yaml}");
            Ok(())
        }
    }
}

/// One component's part of a KfDef's render.
struct BuiltComponent {
    component: ComponentKind,
    operator: String,
    version: String,
    spec: Value,
    desired: Desired,
}

/// Every component's objects for `kfdef`, as the operators build them, each Namespace as the
/// KfDef renders it ([`namespaces_as_rendered`]); with the plan that assigned the applications.
async fn render_kfdef(kfdef: &KfDef, platform: Platform) -> Result<(Plan, Vec<BuiltComponent>), String> {
    let registry = kubeflow_component_registry::all();
    let plan = plan_of(kfdef, platform, &registry)?;
    let mut built = Vec::new();
    for (component, planned) in &plan.components {
        let registered = registry.iter().find(|r| r.kind == *component).expect("every component is registered");
        let desired = desired(registered, kfdef, &planned.spec).await?;
        built.push(BuiltComponent { component: *component, operator: registered.operator.clone(), version: planned.version.clone(), spec: planned.spec.clone(), desired });
    }
    let mut objects: Vec<Vec<Value>> = built.iter_mut().map(|b| std::mem::take(&mut b.desired.objects)).collect();
    namespaces_as_rendered(&mut objects);
    for (b, objects) in built.iter_mut().zip(objects) {
        b.desired.objects = objects;
    }
    Ok((plan, built))
}

/// The applications `plan` gives `component`.
fn applications_of<'a>(plan: &'a Plan, component: ComponentKind) -> Vec<&'a str> {
    plan.applications.iter().filter(|a| a.component.as_deref() == Some(component.name())).map(|a| a.name.as_str()).collect()
}

async fn build(kfdef: &KfDef, output: &std::path::Path, platform: Platform) -> Result<(), String> {
    let (plan, built) = render_kfdef(kfdef, platform).await?;
    std::fs::create_dir_all(output).map_err(|e| format!("{}: {e}", output.display()))?;
    let mut failures = Vec::new();
    for BuiltComponent { component, operator, version, spec, desired: Desired { objects, failed, conversions, .. } } in built {
        let yaml = kubeflow_manifests::yaml_stream(objects.iter().cloned());
        let path = output.join(format!("{component}.yaml"));
        std::fs::write(&path, yaml).map_err(|e| format!("{}: {e}", path.display()))?;
        println!("{}: {} objects ({operator} {version}: {})", path.display(), objects.len(), applications_of(&plan, component).join(", "));
        let releases: std::collections::BTreeSet<&str> = spec["sources"].as_array().into_iter().flatten().filter_map(|s| s["repoKustomize"].as_str()).collect();
        if !releases.is_empty() {
            let names: Vec<&str> = releases.into_iter().collect();
            println!("  kustomize {} (the repository's kustomize field, or the one Kubeflow {} names)", names.join(", "), kfdef.spec.version.as_deref().unwrap_or("?"));
        }
        if !conversions.is_empty() {
            println!("  {} objects converted from API versions Kubernetes no longer serves (written converted):", conversions.len());
            for line in &conversions {
                println!("    {line}");
            }
        }
        failures.extend(failed);
    }
    match failures.is_empty() {
        true => Ok(()),
        false => Err(failures.join("\n")),
    }
}

/// Every object of a KfDef's render with its application, and the `(application, component)`
/// pairs of its plan.
fn attributed(plan: &Plan, built: &[BuiltComponent]) -> (Vec<Rendered>, Vec<(String, String)>) {
    let objects = built
        .iter()
        .flat_map(|b| {
            let applications = applications_of(plan, b.component);
            // A component installing one application: its objects are that application's.
            let default = if applications.len() == 1 { applications[0] } else { b.component.name() };
            b.desired.objects.iter().map(move |o| Rendered::new(o.clone(), b.component.name(), default))
        })
        .collect();
    let pairs = plan.applications.iter().map(|a| (a.name.clone(), a.component.clone().unwrap_or_default())).collect();
    (objects, pairs)
}

/// `kfop plan --from old -f new`: what moving a KfDef from `before` to `after` does, from the
/// two renders alone (no cluster): per application added, removed, moved, changed or unchanged,
/// per object add, change (the fields, images named), prune or keep; each component's version,
/// and the release notes' manual steps. Refused, nothing else said, when either does not render.
async fn plan_between(before: &KfDef, after: &KfDef, platform: Platform) -> Result<(), String> {
    use component_framework::render_diff;
    let (old_plan, old_built) = render_kfdef(before, platform).await?;
    let (new_plan, new_built) = render_kfdef(after, platform).await?;
    let failed: Vec<String> = [("--from", &old_built), ("-f", &new_built)]
        .into_iter()
        .flat_map(|(flag, built)| built.iter().flat_map(move |b| b.desired.failed.iter().map(move |f| format!("{flag}: {}: {f}", b.component))))
        .collect();
    if !failed.is_empty() {
        return Err(format!("cannot plan: not every application renders\n{}", failed.join("\n")));
    }
    let version = |k: &KfDef| k.spec.version.clone().unwrap_or_else(|| "?".into());
    println!("KfDef {}/{}: {} → {}", after.namespace().unwrap_or_default(), after.name_any(), version(before), version(after));
    let versions = |built: &[BuiltComponent]| built.iter().map(|b| (b.component, b.version.clone())).collect::<BTreeMap<_, _>>();
    let (old_versions, new_versions) = (versions(&old_built), versions(&new_built));
    for component in old_versions.keys().chain(new_versions.keys().filter(|c| !old_versions.contains_key(c))) {
        let of = |v: &BTreeMap<ComponentKind, String>| v.get(component).cloned().unwrap_or_else(|| "not installed".into());
        println!("component {component}: {} → {}", of(&old_versions), of(&new_versions));
    }
    let ((old_objects, old_apps), (new_objects, new_apps)) = (attributed(&old_plan, &old_built), attributed(&new_plan, &new_built));
    let moves = render_diff::between(&old_objects, &new_objects);
    let applications = render_diff::applications(&old_apps, &new_apps, &moves);
    for application in &applications {
        println!("application {}", application.line());
    }
    for m in moves.iter().filter(|m| m.verdict != render_diff::Verdict::Unchanged) {
        println!("  {}", m.line());
    }
    for step in meta_operator::release_notes::manual_steps(&version(before), &version(after)) {
        println!("manual    {step}");
    }
    let count = |f: fn(&render_diff::Verdict) -> bool| moves.iter().filter(|m| f(&m.verdict)).count();
    let apps = |f: fn(&render_diff::ApplicationVerdict) -> bool| applications.iter().filter(|a| f(&a.verdict)).count();
    use render_diff::{ApplicationVerdict as A, Verdict as V};
    println!(
        "applications: {} added, {} removed, {} moved, {} changed, {} unchanged; objects: {} to add, {} to change, {} to prune, {} kept, {} unchanged; no cluster was read",
        apps(|v| *v == A::Added),
        apps(|v| *v == A::Removed),
        apps(|v| matches!(v, A::Moved { .. })),
        apps(|v| *v == A::Changed),
        apps(|v| *v == A::Unchanged),
        count(|v| *v == V::Add),
        count(|v| matches!(v, V::Change { .. })),
        count(|v| *v == V::Prune),
        count(|v| matches!(v, V::Keep(_))),
        count(|v| *v == V::Unchanged),
    );
    Ok(())
}

/// Each bare Namespace a component creates only because its objects use it, replaced by the one
/// an application of the KfDef renders (labels included), as the operators create it: one
/// Namespace under one name in every file.
fn namespaces_as_rendered(components: &mut [Vec<Value>]) {
    let is_namespace = |o: &Value| o["apiVersion"] == "v1" && o["kind"] == "Namespace";
    // Only a name, and what we write on every object (the applied hash).
    let ours = |field: &Value| field.as_object().is_some_and(|m| m.keys().all(|k| k.starts_with("components.kubeflow.org/")));
    let bare = |o: &Value| o["metadata"].as_object().is_some_and(|m| m.iter().all(|(key, value)| key == "name" || (["labels", "annotations"].contains(&key.as_str()) && ours(value))));
    let rendered: BTreeMap<String, Value> =
        components.iter().flatten().filter(|o| is_namespace(o) && !bare(o)).filter_map(|o| Some((o["metadata"]["name"].as_str()?.to_string(), o.clone()))).rev().collect();
    for object in components.iter_mut().flatten().filter(|o| is_namespace(o) && bare(o)) {
        if let Some(namespace) = object["metadata"]["name"].as_str().and_then(|name| rendered.get(name)) {
            *object = namespace.clone();
        }
    }
}

/// Runs the controllers of `components` in this process, for resources in `namespace`.
/// How kfop fetches repositories: from anywhere. The operators fence fetches to public addresses
/// because a resource's author is not the operator's; kfop runs as the user, on the user's own
/// KfDef, and fetches only what the user can fetch anyway (an internal mirror, a local server).
fn unfenced() -> kubeflow_manifests::FetchOptions {
    kubeflow_manifests::FetchOptions { address_fence: false, ..Default::default() }
}

fn run_controllers(registry: &[RegisteredComponent], components: &[ComponentKind], namespace: &str) {
    // The controllers that render packages run here, in kfop: unfenced too (the first call sets it).
    let _ = component_framework::package::set_fetch_options(unfenced());
    for component in components {
        let registered = registry.iter().find(|r| r.kind == *component).expect("every component is registered");
        let args = OperatorArgs { namespace: Some(namespace.to_string()), nats_url: None, nats_credentials: Default::default(), leader_election: Default::default(), metrics_addr: "127.0.0.1:0".parse().expect("an address"), scrape_token: Default::default(), scrape_token_maker: Default::default(), default_service_account: None,
            // kfop runs as the very user asking for the install: their rights, not an account's.
            install_as_self: true };
        let run = (registered.run)(args);
        let name = registered.operator.clone();
        tokio::spawn(async move {
            if let Err(e) = run.await {
                eprintln!("error: {name}: {e}");
            }
        });
    }
}

fn dynamic_api(client: &Client, registered: &RegisteredComponent, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &registered.api_resource())
}

/// `Ready` at the current generation; the per-application states otherwise, for the user.
fn readiness(object: &DynamicObject) -> Result<(), String> {
    let status = &object.data["status"];
    let current = status["observedGeneration"].as_i64() == object.metadata.generation;
    if current && status["phase"] == "Ready" {
        return Ok(());
    }
    let conditions = status["conditions"].as_array().into_iter().flatten();
    let message = conditions.filter(|c| c["status"] == "True" && c["type"] != "Ready" || c["type"] == "Ready" && c["status"] == "False").filter_map(|c| c["message"].as_str()).find(|m| !m.is_empty()).unwrap_or_default();
    Err(format!("{} {}", status["phase"].as_str().unwrap_or("Pending"), message))
}

async fn apply(client: Client, kfdef: &KfDef, timeout: Duration) -> Result<(), String> {
    let registry = kubeflow_component_registry::all();
    let platform = meta_operator::controller::detect_platform(&client).await.map_err(|e| format!("reading the API groups: {e}"))?;
    let plan = plan_of(kfdef, platform, &registry)?;
    let namespace = kfdef.namespace().unwrap_or_default();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt(&namespace).await.map_err(|e| e.to_string())?.is_none() {
        let object = serde_json::from_value(json!({"metadata": {"name": namespace}})).expect("a namespace");
        namespaces.create(&PostParams::default(), &object).await.map_err(|e| format!("creating namespace {namespace}: {e}"))?;
    }
    // The component resources' CRDs, then the resources.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let involved: Vec<&RegisteredComponent> = registry.iter().filter(|r| plan.components.contains_key(&r.kind)).collect();
    for registered in &involved {
        let name = registered.crd["metadata"]["name"].as_str().unwrap_or_default().to_string();
        crds.patch(&name, &params, &Patch::Apply(&registered.crd)).await.map_err(|e| format!("applying CRD {name}: {e}"))?;
        tokio::time::timeout(Duration::from_secs(60), await_condition(crds.clone(), &name, conditions::is_crd_established()))
            .await
            .map_err(|_| format!("CRD {name} is not Established after 60 s"))?
            .map_err(|e| e.to_string())?;
    }
    for registered in &involved {
        let object = resource(registered, kfdef, &plan.components[&registered.kind].spec);
        dynamic_api(&client, registered, &namespace).patch(&kfdef.name_any(), &params, &Patch::Apply(&object)).await.map_err(|e| format!("applying {} {namespace}/{}: {e}", registered.kind.kind(), kfdef.name_any()))?;
    }
    // Components that left the KfDef since the last apply.
    let leaving = made_by_kfop(&client, &registry, kfdef).await?.into_iter().filter(|kind| !plan.components.contains_key(kind)).collect::<Vec<_>>();
    let mut components: Vec<ComponentKind> = plan.components.keys().copied().collect();
    components.extend(&leaving);
    run_controllers(&registry, &components, &namespace);
    delete_and_wait(&client, &registry, kfdef, &leaving, timeout).await?;
    let deadline = tokio::time::Instant::now() + timeout;
    let name = kfdef.name_any();
    for registered in &involved {
        let api = dynamic_api(&client, registered, &namespace);
        let ready = await_condition(api.clone(), &name, |o: Option<&DynamicObject>| o.is_some_and(|o| readiness(o).is_ok()));
        match tokio::time::timeout_at(deadline, ready).await {
            Ok(Ok(_)) => println!("{} {namespace}/{}: Ready", registered.kind.kind(), kfdef.name_any()),
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) => {
                let current = api.get(&kfdef.name_any()).await.map_err(|e| e.to_string())?;
                let applications: Vec<String> = current.data["status"]["applications"].as_array().into_iter().flatten().filter(|a| a["state"] != "Ready").map(|a| format!("\n  application {}: {} {}", a["name"].as_str().unwrap_or_default(), a["state"].as_str().unwrap_or_default(), a["message"].as_str().unwrap_or_default())).collect();
                return Err(format!("{} {namespace}/{} not Ready after {} s: {}{}", registered.kind.kind(), kfdef.name_any(), timeout.as_secs(), readiness(&current).unwrap_err(), applications.concat()));
            }
        }
    }
    println!("KfDef {namespace}/{}: every application is Ready ({} applications)", kfdef.name_any(), plan.applications.len());
    Ok(())
}

/// Components whose resource for `kfdef` exists and was made by `kfop apply`.
async fn made_by_kfop(client: &Client, registry: &[RegisteredComponent], kfdef: &KfDef) -> Result<Vec<ComponentKind>, String> {
    let namespace = kfdef.namespace().unwrap_or_default();
    let mut found = Vec::new();
    for registered in registry {
        let selector = ListParams::default().labels(&format!("{KFOP_LABEL}={}", kfdef.name_any()));
        match dynamic_api(client, registered, &namespace).list(&selector).await {
            Ok(list) if list.items.iter().any(|o| o.name_any() == kfdef.name_any()) => found.push(registered.kind),
            Ok(_) => {}
            // The component's CRD is not installed: nothing of it to find.
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(format!("listing {}: {e}", registered.kind.kind())),
        }
    }
    Ok(found)
}

/// Deletes the resources of `components` for `kfdef` and waits until their finalizers are done.
async fn delete_and_wait(client: &Client, registry: &[RegisteredComponent], kfdef: &KfDef, components: &[ComponentKind], timeout: Duration) -> Result<(), String> {
    let (namespace, name) = (kfdef.namespace().unwrap_or_default(), kfdef.name_any());
    for registered in registry.iter().filter(|r| components.contains(&r.kind)) {
        let api = dynamic_api(client, registered, &namespace);
        let Some(object) = api.get_opt(&name).await.map_err(|e| e.to_string())? else { continue };
        api.delete(&name, &DeleteParams::default()).await.map_err(|e| format!("deleting {} {namespace}/{name}: {e}", registered.kind.kind()))?;
        let uid = object.uid().unwrap_or_default();
        let deleted = await_condition(api, &name, conditions::is_deleted(&uid));
        tokio::time::timeout(timeout, deleted).await.map_err(|_| format!("{} {namespace}/{} still there after {} s", registered.kind.kind(), kfdef.name_any(), timeout.as_secs()))?.map_err(|e| e.to_string())?;
        println!("{} {namespace}/{}: deleted with everything it installed", registered.kind.kind(), kfdef.name_any());
    }
    Ok(())
}

async fn delete(client: Client, kfdef: &KfDef, timeout: Duration) -> Result<(), String> {
    let registry = kubeflow_component_registry::all();
    let components = made_by_kfop(&client, &registry, kfdef).await?;
    if components.is_empty() {
        println!("nothing of KfDef {}/{} to delete", kfdef.namespace().unwrap_or_default(), kfdef.name_any());
        return Ok(());
    }
    run_controllers(&registry, &components, &kfdef.namespace().unwrap_or_default());
    delete_and_wait(&client, &registry, kfdef, &components, timeout).await
}

async fn client() -> Result<Client, String> {
    Client::try_default().await.map_err(|e| format!("cannot reach the cluster (KUBECONFIG or in-cluster config): {e}"))
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    // The controllers' own logs only when asked for (RUST_LOG), as the operators write them.
    let _telemetry = std::env::var_os("RUST_LOG").map(|_| component_framework::telemetry::init("kfop"));
    let result = match cli.command {
        Command::Build { kfdef, output, openshift } => match kfdef.read() {
            Ok(k) => build(&k, &output, if openshift { Platform::OpenShift } else { Platform::Kubernetes }).await,
            Err(e) => Err(e),
        },
        Command::Apply { kfdef, timeout } => match (kfdef.read(), client().await) {
            (Ok(k), Ok(client)) => apply(client, &k, Duration::from_secs(timeout)).await,
            (Err(e), _) | (_, Err(e)) => Err(e),
        },
        Command::Plan { kfdef, from: Some(from), openshift } => match (KfDefArg { file: from }.read(), kfdef.read()) {
            (Ok(before), Ok(after)) => plan_between(&before, &after, if openshift { Platform::OpenShift } else { Platform::Kubernetes }).await,
            (Err(e), _) | (_, Err(e)) => Err(e),
        },
        Command::Plan { kfdef, from: None, .. } => match (kfdef.read(), client().await) {
            (Ok(k), Ok(client)) => plan_command(client, &k).await,
            (Err(e), _) | (_, Err(e)) => Err(e),
        },
        Command::Delete { kfdef, timeout } => match (kfdef.read(), client().await) {
            (Ok(k), Ok(client)) => delete(client, &k, Duration::from_secs(timeout)).await,
            (Err(e), _) | (_, Err(e)) => Err(e),
        },
        Command::Init { release, repo_uri, fetch_from, output, name, namespace } => init(&release, repo_uri, fetch_from, output.as_deref(), &name, &namespace).await,
        Command::LocalBus { dir, name, port, monitor_port, store_dir } => local_bus(&dir, &name, port, monitor_port, &store_dir),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn a_namespace_a_component_only_uses_is_written_as_the_kfdef_renders_it() {
        let bare = |name: &str| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "annotations": {"components.kubeflow.org/applied-hash": "1"}}});
        let labelled = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubeflow", "labels": {"istio-injection": "enabled"}}});
        let config = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kubeflow"}});
        let mut components = vec![vec![bare("kubeflow"), bare("auth"), config.clone()], vec![labelled.clone(), bare("auth")]];
        super::namespaces_as_rendered(&mut components);
        assert_eq!(components, [vec![labelled.clone(), bare("auth"), config], vec![labelled, bare("auth")]]);
    }
}
