//! The Profile controller: keeps each Profile's tenant objects ([`crate::tenant`]) in place.
//!
//! It starts once the Profile CRD is Established (the component installs it) and reconciles with
//! the cluster's settings ([`crate::settings`]: the ProfileController `--settings` names, else the
//! oldest managed one in the operator's namespace); with none, Profiles are left as they are.
//! Reconciles are triggered by the Profile, by changes to any object it made (labelled,
//! owner-referenced: a deleted or edited object is put back), by settings changes and by Istio's
//! CRDs appearing (which mesh authorization a namespace gets). What it made is known from
//! label-selected watches of metadata only ([`crate::made`]): a reconcile of a converged Profile reads
//! nothing from the API server and writes nothing (an object is applied again only when what it
//! should hold changed, or someone else changed or deleted it). Per reconcile: refuse a reserved
//! name, validate (a bad Profile changes nothing and says which field), refuse a namespace someone
//! else made, create a missing namespace (a create, so a namespace made meanwhile is not adopted), apply,
//! drop labels the settings remove, prune what this Profile made and no longer wants (the quota
//! once `hard` is empty, opt-in objects switched off), grant plugin identities, report status.
//! Deleting a Profile deletes its namespace (owner reference, as upstream), after the finalizer
//! revoked the plugin grants.

use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use component_framework::api::ProfileController;
use component_framework::api::common::ConditionStatus;
use component_framework::api::profile::{self, Profile};
use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PartialObjectMeta, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::{EventType, Recorder, Reporter};
use kube::core::DeserializeGuard;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use operator_runtime::finalizer::{Step, with_finalizer};
use operator_runtime::retry::Backoffs;
use operator_runtime::synced::WatchesSynced;
use operator_runtime::watches::{self, Change};
use serde_json::{Value, json};
use tracing::{info, warn};

use crate::cloud::CloudIdentity;
use crate::made::{Made, Shown, Uid, Version};
use crate::settings::Source;
use crate::tenant::{self, MANAGED_BY, MANAGED_BY_LABEL, Mesh, PROFILE_LABEL};

/// Field manager of the tenant objects (the component install uses `kubeflow-profiles-operator`).
pub const FIELD_MANAGER: &str = "kubeflow-profile-controller";
/// Profiles reconciled at once, each sending one request at a time: so at most this many requests
/// are in flight. Every one holds an HTTP/1.1 connection with its TLS state and buffers, which the
/// client keeps for reuse: unbounded, a thousand new Profiles opened thousands of connections
/// (most of the operator's memory) only to queue at the API server's priority and fairness; with
/// each reconcile's objects sent at once, 16 reconciles still held over a hundred.
const RECONCILE_CONCURRENCY: u16 = 32;
/// Upstream's finalizer name, so Profiles made for the upstream controller are cleaned up too.
pub const FINALIZER: &str = "profile-finalizer";
const AUTHORIZATION_POLICY_CRD: &str = "authorizationpolicies.security.istio.io";
const SERVICE_ROLE_CRD: &str = "serviceroles.rbac.istio.io";

/// A reconcile step that failed, with the object it failed on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading namespace {name}: {source}")]
    ReadNamespace { name: String, source: kube::Error },
    #[error("applying {object}: {source}")]
    Apply { object: String, source: kube::Error },
    #[error("pruning {object}: {source}")]
    Prune { object: String, source: kube::Error },
    #[error("writing the status of Profile {name}: {source}")]
    Status { name: String, source: kube::Error },
    #[error("finalizer of Profile {name}: {source}")]
    Finalizer { name: String, source: kube::Error },
    #[error("plugin {plugin} of Profile {name}: {message}")]
    Plugin { name: String, plugin: String, message: String },
}

impl Error {
    /// Label of the error metric / log field.
    pub fn category(&self) -> &'static str {
        match self {
            Error::ReadNamespace { .. } => "read",
            Error::Apply { .. } => "apply",
            Error::Prune { .. } => "prune",
            Error::Status { .. } => "status",
            Error::Finalizer { .. } => "finalizer",
            Error::Plugin { .. } => "plugin",
        }
    }
}

pub struct Context {
    pub client: Client,
    /// The cluster's settings; a ProfileController that cannot be decoded is skipped (the
    /// component operator reports it on the resource).
    settings: Source,
    crds: Store<PartialObjectMeta<CustomResourceDefinition>>,
    recorder: Recorder,
    cloud: Arc<dyn CloudIdentity>,
    backoffs: Backoffs<String>,
    made: Made,
    /// Where each kind the controller makes is served.
    resources: HashMap<&'static str, ApiResource>,
    statuses: StatusWrites,
    /// Every Profile, for KFAM's listings (the controller's own cache), and whether it is listed.
    profiles: Store<DeserializeGuard<Profile>>,
    profiles_synced: WatchesSynced,
    /// KFAM's bindings, for its listings.
    pub bindings: crate::bindings::Bindings,
}

/// What the controller last wrote to each Profile's status (by uid): a hash of the Ready
/// condition it wrote and the resource version the write returned. A reconcile often runs on a
/// Profile from the cache that does not show that write yet; the same condition is then not
/// written again.
#[derive(Default)]
struct StatusWrites(Mutex<HashMap<Uid, (u64, Version)>>);

/// The parts of a status write that matter: observed generation, Ready's status, reason, message.
#[derive(Hash)]
struct ReadyWritten<'a>(Option<i64>, bool, &'a str, &'a str);


impl StatusWrites {
    /// Whether `ready` was written to Profile `uid` by a write the cached Profile (at
    /// `resource_version`) does not show yet.
    fn written_and_not_yet_seen(&self, uid: &str, ready: &ReadyWritten, resource_version: &str) -> bool {
        let writes = self.0.lock().expect("not poisoned");
        writes.get(&Uid::of(uid)).is_some_and(|(written, version)| *written == hash_of(ready) && Version::of(resource_version).older_than(version))
    }

    fn record(&self, uid: &str, ready: &ReadyWritten, resource_version: &str) {
        let mut writes = self.0.lock().expect("not poisoned");
        writes.insert(Uid::of(uid), (hash_of(ready), Version::of(resource_version)));
    }

    fn forget(&self, uid: &str) {
        self.0.lock().expect("not poisoned").remove(&Uid::of(uid));
    }
}

fn hash_of(value: &impl Hash) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

/// `(apiVersion, kind, plural)` of every kind the controller makes: the Namespace and
/// [`tenant::PRUNABLE`].
fn made_kinds() -> impl Iterator<Item = (&'static str, &'static str, &'static str)> {
    std::iter::once(("v1", "Namespace", "namespaces")).chain(tenant::PRUNABLE)
}

/// `kind` as one of the kinds the controller makes ("" for any other).
fn kind_static(kind: &str) -> &'static str {
    made_kinds().find(|(_, k, _)| *k == kind).map(|(_, k, _)| k).unwrap_or_default()
}

/// Where objects of `api_version` `kind` with `plural` are served.
fn api_resource(api_version: &str, kind: &str, plural: &str) -> ApiResource {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

impl Context {
    /// Every decodable Profile, once the cache holds its first list (and the KFAM bindings theirs).
    pub fn cached_profiles(&self) -> Option<Vec<Profile>> {
        if !self.bindings.is_ready() || !self.made.listed("Namespace") || !self.profiles_synced.is_synced() {
            return None;
        }
        Some(self.profiles.state().iter().filter_map(|guard| guard.0.as_ref().ok().cloned()).collect())
    }

    /// Whether `profile`'s namespace is the one made for it (as [`tenant::made_for`], from the watch).
    pub fn made_namespace_of(&self, profile: &Profile) -> bool {
        self.made.shown("Namespace", None, &profile.name_any()).is_some_and(|shown| shown.made_for(profile))
    }

    /// The settings that apply now: the cluster's settings ([`Source::current`]), never another
    /// ProfileController's, however old.
    pub fn settings(&self) -> Option<Arc<ProfileController>> {
        self.settings.current()
    }
}

fn params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

/// Where `object` (from [`tenant::desired_objects`] or a KFAM binding) is served.
pub(crate) fn api_for(client: &Client, object: &Value) -> Api<DynamicObject> {
    let kind = object["kind"].as_str().unwrap_or_default();
    let plural = made_kinds().find(|(_, k, _)| *k == kind).map(|(_, _, p)| p).unwrap_or_default();
    let resource = api_resource(object["apiVersion"].as_str().unwrap_or_default(), kind, plural);
    match object["metadata"]["namespace"].as_str() {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

fn describe(object: &Value) -> String {
    let namespace = object["metadata"]["namespace"].as_str().map(|n| format!("{n}/")).unwrap_or_default();
    format!("{} {namespace}{}", object["kind"].as_str().unwrap_or_default(), object["metadata"]["name"].as_str().unwrap_or_default())
}

impl Context {
    fn serves(&self, crd: &str) -> bool {
        self.crds.get(&ObjectRef::new(crd)).is_some()
    }

    /// The mesh authorization API profile namespaces get with `settings`.
    pub fn mesh(&self, settings: &component_framework::api::component::ProfileControllerSpec) -> Mesh {
        Mesh::resolve(settings.mesh_authorization, self.serves(AUTHORIZATION_POLICY_CRD), self.serves(SERVICE_ROLE_CRD))
    }

    async fn event(&self, profile: &Profile, type_: EventType, reason: &str, note: String) {
        let event = operator_runtime::event(type_, reason, note, "Reconcile");
        if let Err(e) = self.recorder.publish(&event, &profile.object_ref(&())).await {
            warn!(error = %e, "cannot publish event");
        }
    }

    /// Writes `Ready` (and observedGeneration) when it differs from what the Profile shows.
    async fn set_ready(&self, profile: &Profile, ready: bool, reason: &str, message: &str) -> Result<(), Error> {
        let generation = profile.meta().generation;
        let mut status = profile.status.clone().unwrap_or_default();
        let before = status.clone();
        status.observed_generation = generation;
        operator_runtime::conditions::set_condition(&mut status.conditions, "Ready", ConditionStatus::from(ready), reason, message, generation, &Time(k8s_openapi::jiff::Timestamp::now()));
        if status == before {
            return Ok(());
        }
        let uid = profile.uid().unwrap_or_default();
        let written = ReadyWritten(generation, ready, reason, message);
        if self.statuses.written_and_not_yet_seen(&uid, &written, &profile.resource_version().unwrap_or_default()) {
            return Ok(());
        }
        let api: Api<Profile> = Api::all(self.client.clone());
        let patch = json!({"status": status});
        let patched = api
            .patch_status(&profile.name_any(), &PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() }, &Patch::Merge(&patch))
            .await
            .map_err(|source| Error::Status { name: profile.name_any(), source })?;
        self.statuses.record(&uid, &written, &patched.resource_version().unwrap_or_default());
        Ok(())
    }

    async fn refuse(&self, profile: &Profile, reason: &str, message: String) -> Result<Action, Error> {
        self.set_ready(profile, false, reason, &message).await?;
        self.event(profile, EventType::Warning, reason, message).await;
        Ok(Action::await_change())
    }

    async fn apply(&self, profile: &Profile, settings: &ProfileController) -> Result<Action, Error> {
        let spec = &settings.spec;
        let name = profile.name_any();
        // Before anything else: a reserved name is refused whether or not its namespace exists.
        if let Some(reserved) = tenant::reserved_refusal(&name, spec) {
            return self.refuse(profile, "ReservedName", reserved.to_string()).await;
        }
        let mesh = self.mesh(spec);
        let desired = match tenant::desired_objects(profile, spec, mesh) {
            Ok(desired) => desired,
            Err(invalid) => return self.refuse(profile, "InvalidSpec", invalid.to_string()).await,
        };
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        // The watch shows only namespaces Profiles made; one it does not show is created.
        let existing: Option<Shown> = match self.made.shown("Namespace", None, &name) {
            Some(ns) => Some(ns),
            None => {
                // A missing namespace is created, never applied: an apply would adopt a namespace
                // someone created since. Only a create proves it is ours.
                let namespace: Namespace = serde_json::from_value(json!({"metadata": {
                    "name": name, "ownerReferences": [tenant::owner_reference(profile)],
                    "labels": {PROFILE_LABEL: name, MANAGED_BY_LABEL: MANAGED_BY},
                }}))
                .expect("a namespace");
                let params = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
                match namespaces.create(&params, &namespace).await {
                    Ok(_) => None,
                    // It exists: made by someone else, or by this Profile and not yet watched.
                    Err(kube::Error::Api(e)) if e.code == 409 => {
                        let ns = namespaces.get_metadata_opt(&name).await.map_err(|source| Error::ReadNamespace { name: name.clone(), source })?;
                        // Deleted meanwhile: the next reconcile makes it.
                        let Some(ns) = ns else { return Ok(Action::requeue(Duration::from_secs(1))) };
                        Some(Shown::of("Namespace", &ns.metadata))
                    }
                    Err(source) => return Err(Error::Apply { object: format!("Namespace {name}"), source }),
                }
            }
        };
        if let Some(ns) = &existing
            && !ns.made_for(profile)
        {
            let owner = ns.owner_annotation().map(|o| format!(" (owner annotation {o:?})")).unwrap_or_default();
            let message = format!("namespace {name} already exists and was not made for this Profile{owner}; it is never adopted: delete the Profile or choose another name");
            // The namespace is not watched (not ours): look again later.
            self.refuse(profile, "NamespaceOwnedByOther", message).await?;
            return Ok(Action::requeue(Duration::from_secs(300)));
        }
        // The Namespace first (the others live in it), one request at a time (see
        // RECONCILE_CONCURRENCY).
        for object in &desired {
            self.apply_object(object).await?;
        }
        // Labels the settings remove (empty value) may have been set by someone else, e.g. the
        // upstream controller this one replaced: remove them explicitly.
        let (_, remove) = tenant::namespace_labels(spec);
        if let Some(ns) = existing {
            let present: Vec<&String> = remove.iter().filter(|l| ns.has_label(l)).collect();
            if !present.is_empty() {
                let labels: serde_json::Map<String, Value> = present.iter().map(|l| (l.to_string(), Value::Null)).collect();
                let patch = json!({"metadata": {"labels": labels}});
                namespaces
                    .patch(&name, &PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() }, &Patch::Merge(&patch))
                    .await
                    .map_err(|source| Error::Apply { object: format!("Namespace {name} labels"), source })?;
            }
        }
        self.prune(profile, &desired).await?;
        for plugin in &profile.spec.plugins {
            self.cloud.grant(profile, plugin).await.map_err(|message| Error::Plugin { name: name.clone(), plugin: plugin.kind.clone(), message })?;
        }
        let message = format!("namespace {name} and its {} objects are in place", desired.len() - 1);
        self.set_ready(profile, true, "Reconciled", &message).await?;
        Ok(Action::await_change())
    }

    /// Applies `object` unless it holds what was last applied ([`Made::unchanged`]).
    async fn apply_object(&self, object: &Value) -> Result<(), Error> {
        let kind = kind_static(object["kind"].as_str().unwrap_or_default());
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let namespace = object["metadata"]["namespace"].as_str();
        let hash = hash_of(&object.to_string());
        if self.made.unchanged(kind, namespace, name, hash) {
            return Ok(());
        }
        let applied = api_for(&self.client, object).patch(name, &params(), &Patch::Apply(object)).await.map_err(|source| Error::Apply { object: describe(object), source })?;
        self.made.record(kind, namespace, name, hash, &applied.resource_version().unwrap_or_default());
        Ok(())
    }

    /// Deletes objects this Profile made (label + owner reference) that are no longer desired.
    async fn prune(&self, profile: &Profile, desired: &[Value]) -> Result<(), Error> {
        let name = profile.name_any();
        let wanted: BTreeSet<(&str, &str)> = desired.iter().map(|o| (o["kind"].as_str().unwrap_or_default(), o["metadata"]["name"].as_str().unwrap_or_default())).collect();
        for ((kind, object_name), object) in self.made.shown_in(&name) {
            if wanted.contains(&(kind, &*object_name)) || !object.made_here_for(profile) {
                continue;
            }
            let Some(resource) = self.resources.get(kind) else { continue };
            let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &name, resource);
            let params = DeleteParams { preconditions: Some(Preconditions { uid: Some(object.uid.to_string()), resource_version: None }), ..Default::default() };
            match api.delete(&object_name, &params).await {
                Ok(_) => info!(profile = %name, %kind, object = %object_name, "pruned"),
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                Err(source) => return Err(Error::Prune { object: format!("{kind} {name}/{object_name}"), source }),
            }
            self.made.forget(kind, &name, &object_name);
        }
        Ok(())
    }

    async fn cleanup(&self, profile: &Profile) -> Result<Action, Error> {
        for plugin in &profile.spec.plugins {
            self.cloud.revoke(profile, plugin).await.map_err(|message| Error::Plugin { name: profile.name_any(), plugin: plugin.kind.clone(), message })?;
        }
        let name = profile.name_any();
        let namespace = Api::<Namespace>::all(self.client.clone()).get_opt(&name).await.ok().flatten();
        let note = if namespace.is_some_and(|ns| tenant::made_for(ns.owner_references(), profile)) {
            format!("namespace {name} and everything in it are deleted with the Profile")
        } else {
            format!("namespace {name} was not made for this Profile and is left as it is")
        };
        self.event(profile, EventType::Normal, "Deleting", note).await;
        self.statuses.forget(&profile.uid().unwrap_or_default());
        Ok(Action::await_change())
    }
}

/// Entry point of the Profile controller. A Profile the types cannot decode (a `v1beta1` write
/// with a shape `v1` does not accept, or one stored before a schema change) is reported (log and
/// Warning Event) and skipped until it changes; the watch and every other Profile carry on.
async fn reconcile(guard: Arc<DeserializeGuard<Profile>>, ctx: Arc<Context>) -> Result<Action, Error> {
    match &guard.0 {
        Ok(profile) => reconcile_profile(Arc::new(profile.clone()), ctx).await,
        Err(invalid) => {
            operator_runtime::invalid::report::<Profile>(&ctx.recorder, invalid).await;
            Ok(Action::await_change())
        }
    }
}

async fn reconcile_profile(profile: Arc<Profile>, ctx: Arc<Context>) -> Result<Action, Error> {
    // Decide nothing before the settings and CRD caches hold their first list: an empty CRD cache
    // would resolve the mesh to none and call the Profile Ready without its authorization
    // policy. The controller keeps polling their watches meanwhile.
    ctx.settings.wait_until_ready().await;
    if ctx.crds.wait_until_ready().await.is_err() {
        return Ok(Action::await_change());
    }
    let Some(settings) = ctx.settings() else {
        // No settings (the cluster's ProfileController is missing, not managed or being deleted):
        // Profiles (and their namespaces) are left exactly as they are.
        return Ok(Action::await_change());
    };
    let api: Api<Profile> = Api::all(ctx.client.clone());
    let name = profile.name_any();
    let result = with_finalizer(&api, FINALIZER, FIELD_MANAGER, (*profile).clone(), |step| async {
        match step {
            Step::Apply(p) => ctx.apply(&p, &settings).await,
            Step::Cleanup(p) => ctx.cleanup(&p).await,
        }
    })
    .await?;
    let action = result.map_err(|source| Error::Finalizer { name: name.clone(), source })?;
    ctx.backoffs.reset(&name);
    Ok(action)
}

fn error_policy(profile: Arc<DeserializeGuard<Profile>>, error: &Error, ctx: Arc<Context>) -> Action {
    warn!(profile = %profile.name_any(), category = error.category(), error = %error, "reconcile failed");
    Action::requeue(ctx.backoffs.next(&profile.name_any()))
}

/// The watch of kind `info` (apiVersion, kind, plural) of the objects Profiles made, filed in
/// `made` as they come: where the kind is served, and the stream of the Profiles whose objects
/// changed or were deleted (also while the watch was down, so the Profile puts them back). A kind
/// a CRD serves is watched once that CRD is established (no failing LIST meanwhile).
fn made_objects(client: &Client, (api_version, kind, plural): (&'static str, &'static str, &'static str), made: Made) -> (ApiResource, impl Stream<Item = ObjectRef<DeserializeGuard<Profile>>> + Send + 'static) {
    let resource = api_resource(api_version, kind, plural);
    let group = resource.group.clone();
    let config = watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}"));
    let events = watches::log_errors(watches::watch(Api::<PartialObjectMeta<DynamicObject>>::all_with(client.clone(), &resource), config)).filter_map(|event| std::future::ready(event.ok()));
    // Tenant objects live in their Profile's namespace, named as the Profile.
    let profiles = made.file(kind, events).map(|namespace| ObjectRef::new(&namespace));
    let crd = (!group.is_empty() && !group.ends_with("k8s.io")).then(|| format!("{plural}.{group}"));
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let gated = futures::stream::once(async move {
        if let Some(crd) = crd
            && let Err(e) = kube::runtime::wait::await_condition(crds, &crd, kube::runtime::conditions::is_crd_established()).await
        {
            warn!(%crd, error = %e, "cannot wait for the CRD; watching its objects anyway");
        }
        profiles
    })
    .flatten();
    (resource, gated)
}

/// A mapper from a change of `S` to every Profile, when `state` (what matters of `S` to the
/// Profiles) differs from what it was at the last change.
fn all_profiles_when_changed<T, S: PartialEq + Send + 'static>(store: Store<DeserializeGuard<Profile>>, state: impl Fn() -> S) -> impl Fn(T) -> Vec<ObjectRef<DeserializeGuard<Profile>>> {
    let last: Mutex<Option<S>> = Mutex::new(None);
    move |_| {
        let now = state();
        let mut last = last.lock().expect("not poisoned");
        if last.as_ref() == Some(&now) {
            return Vec::new();
        }
        *last = Some(now);
        store.state().iter().map(|p| ObjectRef::from_obj(p.as_ref())).collect()
    }
}

/// Runs the Profile controller until the process stops; `shared` receives its context once it
/// starts (for the KFAM API).
pub async fn run(client: Client, settings: Source, cloud: Arc<dyn CloudIdentity>, shared: crate::kfam::Shared) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    info!("waiting for the Profile CRD to be established");
    if let Err(e) = kube::runtime::wait::await_condition(crds.clone(), profile::CRD_NAME, kube::runtime::conditions::is_crd_established()).await {
        warn!(error = %e, "cannot watch the Profile CRD; Profiles are not reconciled");
        return;
    }
    // A relist triggers the Profiles only once these stores hold it (`watches::changes`).
    let settings_changes = settings.changes().expect("one Profile controller per settings source");
    let (crd_store, crd_changes) = watches::reflect_metadata(Api::<PartialObjectMeta<CustomResourceDefinition>>::all(client.clone()), watcher::Config::default(), ());
    let crd_changes = crd_changes.map_ok(Change::object);
    let made = Made::default();
    let mut resources = HashMap::new();
    let mut streams = Vec::new();
    for info in made_kinds() {
        let (resource, stream) = made_objects(&client, info, made.clone());
        resources.insert(info.1, resource);
        streams.push(stream);
    }
    let profiles: Api<DeserializeGuard<Profile>> = Api::all(client.clone());
    // Built on a watch of our own so a relist triggers only once the store holds it.
    let mut profiles_synced = WatchesSynced::default();
    let (store, profile_changes) = profiles_synced.reflect(profiles, watcher::Config::default());
    let ctx = Arc::new(Context {
        profiles: store.clone(),
        profiles_synced,
        bindings: crate::bindings::Bindings::start(client.clone()),
        client: client.clone(),
        settings,
        crds: crd_store,
        recorder: Recorder::new(client.clone(), Reporter::from(FIELD_MANAGER)),
        cloud,
        backoffs: Backoffs::default(),
        made,
        resources,
        statuses: StatusWrites::default(),
    });
    let _ = shared.set(ctx.clone());
    let mut controller = Controller::for_stream(profile_changes, store.clone()).with_config(kube::runtime::controller::Config::default().concurrency(RECONCILE_CONCURRENCY));
    for stream in streams {
        controller = controller.reconcile_on(stream);
    }
    // Every Profile is reconciled again when the settings that apply change (not on a status
    // write to a ProfileController, nor on a change to one whose settings do not apply), and
    // when Istio's authorization CRDs come or go.
    let settings_ctx = ctx.clone();
    let effective = move || settings_ctx.settings().map(|s| serde_json::to_string(&s.spec).unwrap_or_default());
    let when_settings_change = all_profiles_when_changed(store.clone(), effective);
    let settings_changes = settings_changes.flat_map(move |()| futures::stream::iter(when_settings_change(())));
    let mesh_ctx = ctx.clone();
    let mesh_crds = move || (mesh_ctx.serves(AUTHORIZATION_POLICY_CRD), mesh_ctx.serves(SERVICE_ROLE_CRD));
    controller
        .reconcile_on(settings_changes)
        .watches_stream(crd_changes, all_profiles_when_changed(store, mesh_crds))
        .trigger_backoff(watches::backoff())
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "profile controller");
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_write_the_cached_profile_does_not_show_yet_is_not_sent_again() {
        let statuses = StatusWrites::default();
        let ready = ReadyWritten(Some(1), true, "Reconciled", "in place");
        assert!(!statuses.written_and_not_yet_seen("uid", &ready, "10"), "never written");
        statuses.record("uid", &ready, "12");
        assert!(statuses.written_and_not_yet_seen("uid", &ready, "11"), "the cache is behind the write");
        assert!(!statuses.written_and_not_yet_seen("uid", &ready, "12"), "the cache shows the write, and another status: written again");
        assert!(!statuses.written_and_not_yet_seen("uid", &ReadyWritten(Some(2), true, "Reconciled", "in place"), "11"), "another generation");
        assert!(!statuses.written_and_not_yet_seen("uid", &ReadyWritten(Some(1), false, "Failed", "x"), "11"), "another condition");
        assert!(!statuses.written_and_not_yet_seen("other", &ready, "11"), "another Profile");
        statuses.forget("uid");
        assert!(!statuses.written_and_not_yet_seen("uid", &ready, "11"), "forgotten with the Profile");
    }
}
