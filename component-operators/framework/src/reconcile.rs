//! The reconcile driver: dereference → validate/build (pure, see [`crate::build`]) → server-side
//! apply → prune → status → events. Everything that talks to the API server is here. Live objects
//! are read from the watches' caches ([`crate::live`]); deletes only touch objects whose live
//! labels and annotations prove this resource made them ([`build::made_by`]).

use std::collections::{BTreeMap, BTreeSet};
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::core::DeserializeGuard;
use kube::runtime::controller::Action;
use kube::runtime::events::{EventType, Recorder};
use kube::{Api, Client, Resource, ResourceExt};
use kubeflow_crds::component::{ApplicationBuild, ChangePlan, ComponentResource, ComponentStatus, CrdRemovalPolicy, DeletionPolicy, InventoryEntry, ManagementState, PREVIEW_HASH_ANNOTATION, PREVIEW_SPEC_ANNOTATION, PlanList};
use operator_runtime::finalizer::{Step, with_finalizer};
use operator_runtime::retry::Backoffs;
use serde_json::{Value, json};
use tracing::{info, instrument, warn};

use crate::build::{self, APPLICATION_ANNOTATION, Claim, HASH_ANNOTATION, OWNER_ANNOTATION, PART_OF_LABEL};
use crate::component::{ApplicationFailure, Component, InvalidSpec, Inputs};
use crate::handover::{self, ReplaceError};
use crate::installer::{self, Access, Impersonation, Installer};
use crate::heal::LastDesired;
use crate::kinds::{self, KindInfo};
use crate::live::LiveObjects;
use crate::manifest;
use crate::metrics::Metrics;
use crate::readiness;
use crate::status::{self, Finding, Outcome};
use crate::webhook_gate;

/// Finalizer that makes deletion of a component resource remove what it installed.
pub const FINALIZER: &str = "components.kubeflow.org/cleanup";

/// Errors a reconcile can end with, one kind per step, each naming what it failed on. The API
/// server or the cluster is expected to recover; the resource is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading Secret {secret}: {source}")]
    Dereference { secret: String, source: kube::Error },
    #[error("applying {object}: {source}")]
    Apply { object: String, source: kube::Error },
    #[error("replacing {object}: {source}")]
    Replace { object: String, source: ReplaceError },
    #[error("pruning {object}: {source}")]
    Prune { object: String, source: kube::Error },
    #[error("writing the status of {resource}: {source}")]
    Status { resource: String, source: kube::Error },
    #[error("writing the finalizer of {resource}: {source}")]
    Finalizer { resource: String, source: kube::Error },
    #[error("CustomResourceDefinition {crd} is not Established, so its custom resources cannot be applied yet")]
    NotEstablished { crd: String },
    #[error("planning the preview of {resource}: {source}")]
    Plan { resource: String, source: crate::plan::PlanError },
    #[error("reading Namespace {namespace} to tell whose it is: {source}")]
    Namespace { namespace: String, source: kube::Error },
    /// A `deletionPolicy: Purge` uninstall waits for these (listed in `status.purging`).
    #[error("purging {resource}: waiting for {}", waiting.join("; "))]
    Purging { resource: String, waiting: Vec<String> },
}

impl Error {
    /// The step that failed, the `kind` label of `kfop_reconcile_errors_total`.
    pub fn category(&self) -> &'static str {
        match self {
            Error::Dereference { .. } => "dereference",
            Error::Apply { .. } => "apply",
            Error::Replace { .. } => "replace",
            Error::Prune { .. } => "prune",
            Error::Status { .. } => "status",
            Error::Finalizer { .. } => "finalizer",
            Error::NotEstablished { .. } => "establish",
            Error::Plan { .. } => "plan",
            Error::Namespace { .. } => "dereference",
            Error::Purging { .. } => "purge",
        }
    }
}

/// Shared state of one component operator.
pub struct Context<C> {
    pub client: Client,
    pub field_manager: String,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    /// In NATS mode, where status reports of KfDef-made resources go.
    pub status_sender: Option<crate::nats_mode::StatusSender>,
    /// Live objects of every kind the component ships.
    pub live: LiveObjects,
    /// What each resource last wanted, for the heal fast path.
    pub desired: Arc<LastDesired>,
    /// Retry delay per resource (`namespace/name`) after failed reconciles.
    backoffs: Backoffs<String>,
    /// Clients acting as the accounts resources install as (see [`crate::installer`]). `None`
    /// only in `kfop`, which runs as the user asking: writes then use [`Context::client`].
    pub impersonation: Option<Impersonation>,
    /// Objects whose apply would change nothing although they read otherwise than rendered (the
    /// API server stores `1000m` as `1`, leaves a default out): (uid, resourceVersion, hash).
    settled: Arc<std::sync::Mutex<BTreeSet<(String, String, String)>>>,
    _component: PhantomData<fn() -> C>,
}

impl<C: Component> Context<C> {
    pub fn new(
        client: Client,
        field_manager: String,
        recorder: Recorder,
        metrics: Arc<Metrics>,
        status_sender: Option<crate::nats_mode::StatusSender>,
        live: LiveObjects,
        impersonation: Option<Impersonation>,
    ) -> Self {
        Self { client, field_manager, recorder, metrics, status_sender, live, desired: Default::default(), backoffs: Backoffs::default(), impersonation, settled: Default::default(), _component: PhantomData }
    }

    /// Whether applying `desired` over `live` (same content hash, yet not a subset of it) would
    /// change nothing: a server-side dry run, asked once per version of the object. Without it
    /// every reconcile would "revert drift" that is only how the API server stores a field.
    async fn applies_nothing(&self, api: &Api<DynamicObject>, name: &str, params: &PatchParams, desired: &Value, live: &Value) -> bool {
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let key = (text(&live["metadata"]["uid"]), text(&live["metadata"]["resourceVersion"]), text(&desired["metadata"]["annotations"][HASH_ANNOTATION]));
        if self.settled.lock().expect("settled objects").contains(&key) {
            return true;
        }
        let dry_run = PatchParams { dry_run: true, ..params.clone() };
        let Ok(result) = api.patch(name, &dry_run, &Patch::Apply(desired)).await else { return false };
        // What the apply sets, as the API server would store it, against what is stored: fields
        // others write meanwhile (status, a controller's annotations) do not count.
        let same = manifest::is_subset(&as_stored(desired, &serde_json::to_value(result).expect("objects serialise")), live);
        if same {
            let mut settled = self.settled.lock().expect("settled objects");
            if settled.len() >= 16_384 {
                settled.clear();
            }
            settled.insert(key);
        }
        same
    }

    /// Who `resource`'s applies, prunes and deletes are made as (see [`crate::installer`]).
    pub fn installer(&self, resource: &C::Resource) -> Result<Installer, InvalidSpec> {
        let Some(impersonation) = &self.impersonation else { return Ok(Installer::Operator(self.client.clone())) };
        let namespace = resource.namespace().unwrap_or_default();
        let name = installer::account_name(resource.core().service_account_name.as_deref(), impersonation.default_account.as_deref(), &namespace)?;
        let client = impersonation
            .client(&namespace, name)
            .map_err(|e| InvalidSpec::new("spec.serviceAccountName", format!("cannot act as ServiceAccount {namespace}/{name}: {e}")).retryable())?;
        Ok(Installer::Account { client, account: format!("{namespace}/{name}") })
    }

    /// Hands the resource's status to the NATS publisher (NATS mode, KfDef-made resources only).
    fn report(&self, resource: &C::Resource, status: Option<&kubeflow_crds::component::ComponentStatus>) {
        let Some(sender) = &self.status_sender else { return };
        let empty = kubeflow_crds::component::ComponentStatus::default();
        if let Some((key, report)) = crate::nats_mode::report(resource, status.unwrap_or(&empty)) {
            let _ = sender.send((key, status.map(|_| report)));
        }
    }

    /// An API for reading objects of `info` with the operator's own rights.
    fn dynamic_api(&self, info: &KindInfo, namespace: Option<&str>) -> Api<DynamicObject> {
        info.api(&self.client, namespace)
    }

    /// The live object at `entry`: from the watch cache, or read once by `installer` for kinds
    /// not watched.
    async fn live(&self, info: &KindInfo, entry: &InventoryEntry, installer: &Installer) -> Result<Option<Value>, kube::Error> {
        if self.live.caches(info) {
            return Ok(self.live.get(info, entry.namespace.as_deref(), &entry.name));
        }
        // Namespaces the operator may read itself; other kinds it does not watch, the installer.
        let reader = if info.is_shared() { &self.client } else { installer.client() };
        let object = match info.api(reader, entry.namespace.as_deref()).get_opt(&entry.name).await {
            Ok(object) => object,
            // The kind itself is not served yet (its CRD comes earlier in this very apply).
            Err(kube::Error::Api(status)) if status.code == 404 => None,
            // 403 included: an object nobody can tell the maker of is not written over (callers).
            Err(e) => return Err(e),
        };
        Ok(object.map(|o| serde_json::to_value(o).expect("objects serialise")))
    }

    /// Whether the live object at `entry` was rendered for one of `applications`.
    async fn held_by(&self, owner: &str, entry: &InventoryEntry, applications: &BTreeSet<&str>, installer: &Installer) -> Result<bool, Error> {
        let Some(info) = kinds::lookup_for(C::Resource::COMPONENT.name(), owner, &entry.api_version(), &entry.kind) else { return Ok(false) };
        let live = match self.live(info, entry, installer).await {
            Ok(live) => live,
            // Whose it is cannot be told: kept, not pruned.
            Err(kube::Error::Api(status)) if status.code == 403 => return Ok(true),
            Err(source) => return Err(Error::Prune { object: describe(info, entry), source }),
        };
        Ok(live.is_some_and(|live| live["metadata"]["annotations"][APPLICATION_ANNOTATION].as_str().is_some_and(|a| applications.contains(a))))
    }

    /// Why the live object at `entry` is not ours to apply, if it is not: it exists and was
    /// neither made by this resource (label and owner annotation, see [`build::made_by`]) nor
    /// handed to it (`spec.adoptExisting`, or the object annotated [`build::ADOPT_ANNOTATION`] with
    /// this resource), nor left by a component resource that no longer exists. The watch cache
    /// holds only this component's objects, so a miss is confirmed with the API server: an
    /// inventory in status is no proof that a missing object is ours to create over.
    /// Returns the note saying why.
    async fn foreign(&self, info: &KindInfo, entry: &InventoryEntry, live: Option<&Value>, owner: &str, adopt_existing: bool) -> Result<Option<String>, kube::Error> {
        let component = C::Resource::COMPONENT.name();
        let read;
        let live = match live {
            Some(live) => live,
            // Namespaces are only ever created; uncached kinds were read from the API server.
            None if info.is_shared() || !self.live.caches(info) => return Ok(None),
            None => match self.dynamic_api(info, entry.namespace.as_deref()).get_opt(&entry.name).await {
                Ok(Some(object)) => {
                    read = serde_json::to_value(object).expect("objects serialise");
                    &read
                }
                Ok(None) => return Ok(None),
                Err(kube::Error::Api(status)) if status.code == 404 => return Ok(None),
                // Who made it cannot be told, so it is not written over.
                Err(kube::Error::Api(status)) if status.code == 403 => {
                    return Ok(Some(format!("{}: the operator may not read it to tell who made it ({}); left as it is", describe(info, entry), status.message)));
                }
                Err(e) => return Err(e),
            },
        };
        let note = || foreign_note(&describe(info, entry), live, C::Resource::COMPONENT.kind(), owner);
        Ok(match build::claim(live, info, component, owner, adopt_existing) {
            Claim::Ours | Claim::HandedOver => None,
            Claim::OtherResource => (!self.orphan(live).await?).then(note),
            Claim::NotOurs => Some(note()),
        })
    }

    /// Whether `live` names, in its labels and owner annotation, a component resource that no
    /// longer exists (deleted while its operator could not clean up): nobody's, so it is adopted.
    /// An object that names no owner because every install of its component shares it (a CRD,
    /// or one marked shared) is nobody's once no install uses it: a CRD kept when the install
    /// that made it was deleted (`crdRemovalPolicy: Retain`) goes to the next install that
    /// renders it, whichever component that is.
    async fn orphan(&self, live: &Value) -> Result<bool, kube::Error> {
        let shared = live["metadata"]["annotations"][build::SHARED_ANNOTATION] == "true" || live["kind"] == "CustomResourceDefinition";
        if shared && live["metadata"]["annotations"][OWNER_ANNOTATION].is_null() {
            return self.abandoned_shared(live).await;
        }
        let component = live["metadata"]["labels"][PART_OF_LABEL].as_str().and_then(|c| c.parse::<kubeflow_crds::component::ComponentKind>().ok());
        let owner = live["metadata"]["annotations"][OWNER_ANNOTATION].as_str().and_then(|o| o.split_once('/'));
        let (Some(component), Some((namespace, name))) = (component, owner) else { return Ok(false) };
        match Api::<DynamicObject>::namespaced_with(self.client.clone(), namespace, &component.api_resource()).get_opt(name).await {
            Ok(found) => Ok(found.is_none()),
            // Not allowed to look: not ours to take.
            Err(kube::Error::Api(status)) if status.code == 403 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Whether no install uses the shared object `live` any more: none of the installs recorded on
    /// it exists, or, for one that records nobody (applied before installs recorded themselves),
    /// no resource of its component exists anywhere.
    async fn abandoned_shared(&self, live: &Value) -> Result<bool, kube::Error> {
        if !build::users(live, None).is_empty() {
            return Ok(self.existing_users(live, None).await?.is_empty());
        }
        let Some(component) = live["metadata"]["labels"][PART_OF_LABEL].as_str().and_then(|c| c.parse::<kubeflow_crds::component::ComponentKind>().ok()) else {
            return Ok(false);
        };
        match Api::<DynamicObject>::all_with(self.client.clone(), &component.api_resource()).list_metadata(&kube::api::ListParams::default().limit(1)).await {
            Ok(found) => Ok(found.items.is_empty()),
            Err(kube::Error::Api(status)) if status.code == 403 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The installs recorded on the shared object `live` (but `except`, a [`build::user_key`])
    /// whose resource still exists; one the operator may not look up counts as existing.
    async fn existing_users(&self, live: &Value, except: Option<&str>) -> Result<Vec<String>, kube::Error> {
        let mut existing = Vec::new();
        for (component, owner) in build::users(live, except) {
            let (Ok(kind), Some((namespace, name))) = (component.parse::<kubeflow_crds::component::ComponentKind>(), owner.split_once('/')) else { continue };
            match Api::<DynamicObject>::namespaced_with(self.client.clone(), namespace, &kind.api_resource()).get_opt(name).await {
                Ok(None) => {}
                Ok(Some(_)) => existing.push(build::user_value(&component, &owner)),
                Err(kube::Error::Api(status)) if status.code == 403 => existing.push(build::user_value(&component, &owner)),
                Err(e) => return Err(e),
            }
        }
        Ok(existing)
    }

    /// Takes the aggregation rule off every aggregated ClusterRole among `targets` that `owner`
    /// made and is the last user of, before any of them is deleted. Kubernetes' aggregation controller
    /// re-applies the rules of every aggregated ClusterRole when any ClusterRole changes, from a
    /// cache that can still hold one just deleted: deleting `kubeflow-admin`, then `kubeflow-edit`,
    /// then `kubeflow-view` made it create an empty `kubeflow-view` again, which nobody owns and
    /// which the next install would refuse to write over. A role without the rule is not synced.
    async fn quiet_aggregations(&self, installer: &Installer, targets: &[(&KindInfo, &InventoryEntry)], owner: &str) -> Result<(), (String, kube::Error)> {
        let key = build::user_key(C::Resource::COMPONENT.name(), owner);
        for (info, entry) in targets.iter().filter(|(info, _)| info.kind == "ClusterRole") {
            let api = info.api(installer.client(), None);
            let live = match api.get_opt(&entry.name).await {
                Ok(Some(live)) => serde_json::to_value(live).expect("objects serialise"),
                Ok(None) => continue,
                Err(kube::Error::Api(status)) if status.code == 403 => continue,
                Err(e) => return Err((describe(info, entry), e)),
            };
            // A role one install made (kfctl-era `kubeflow-apps` renders `kubeflow-view`), or a
            // shared one whose last user this install is.
            let shared = build::tracks_users(info, &live);
            if !build::made_by(&live, info, C::Resource::COMPONENT.name(), owner) || live["aggregationRule"].is_null() {
                continue;
            }
            if shared && !self.existing_users(&live, Some(&key)).await.map_err(|e| (describe(info, entry), e))?.is_empty() {
                continue;
            }
            let patch = json!({"metadata": {"resourceVersion": live["metadata"]["resourceVersion"]}, "aggregationRule": null});
            let manager = if shared { build::user_field_manager(&self.field_manager, C::Resource::COMPONENT.name(), owner) } else { self.field_manager.clone() };
            let params = PatchParams { field_manager: Some(manager), ..Default::default() };
            match api.patch(&entry.name, &params, &Patch::Merge(&patch)).await {
                // Changed since (another install recorded itself): the delete decides again.
                Ok(_) => {}
                Err(kube::Error::Api(status)) if [403, 404, 409].contains(&status.code) => {}
                Err(e) => return Err((describe(info, entry), e)),
            }
        }
        Ok(())
    }

    /// Ends the use `owner` of this component makes of the shared object `live`: deleted when no
    /// other existing install uses it, else only the owner's user annotation goes. Both writes are
    /// conditional on the resourceVersion read, so two installs going at once cannot each leave it
    /// to the other; a conflict reads it again.
    async fn release_shared(&self, deleter: &Api<DynamicObject>, mut live: Value, owner: &str) -> Result<Released, kube::Error> {
        let key = build::user_key(C::Resource::COMPONENT.name(), owner);
        let mut attempts = 0;
        loop {
            attempts += 1;
            let name = live["metadata"]["name"].as_str().unwrap_or_default().to_string();
            let resource_version = live["metadata"]["resourceVersion"].as_str().map(String::from);
            let others = self.existing_users(&live, Some(&key)).await?;
            let written = if others.is_empty() {
                let uid = live["metadata"]["uid"].as_str().map(String::from);
                let delete = DeleteParams { preconditions: Some(Preconditions { uid, resource_version }), ..DeleteParams::background() };
                deleter.delete(&name, &delete).await.map(|_| Released::Deleted)
            } else if live["metadata"]["annotations"][&key].is_null() {
                return Ok(Released::UsedBy(others));
            } else {
                let patch = json!({"metadata": {"resourceVersion": resource_version, "annotations": {&key: null}}});
                let params = PatchParams { field_manager: Some(build::user_field_manager(&self.field_manager, C::Resource::COMPONENT.name(), owner)), ..Default::default() };
                deleter.patch(&name, &params, &Patch::Merge(&patch)).await.map(|_| Released::UsedBy(others))
            };
            match written {
                Err(kube::Error::Api(status)) if status.code == 404 => return Ok(Released::Gone),
                Err(kube::Error::Api(status)) if status.code == 409 && attempts < 5 => match deleter.get_opt(&name).await? {
                    Some(again) => live = serde_json::to_value(again).expect("objects serialise"),
                    None => return Ok(Released::Gone),
                },
                other => return other,
            }
        }
    }

    async fn event(&self, resource: &C::Resource, type_: EventType, reason: &str, note: String) {
        let event = operator_runtime::event(type_, reason, note, "Reconcile");
        if let Err(e) = self.recorder.publish(&event, &resource.object_ref(&())).await {
            warn!(error = %e, "cannot publish event");
        }
    }
}

/// What became of a shared object an install stopped using ([`Context::release_shared`]).
#[derive(Debug)]
enum Released {
    /// Its last user went: deleted.
    Deleted,
    /// Other installs still use it (named): only this one's record went.
    UsedBy(Vec<String>),
    Gone,
}

fn backoff_key<K: ResourceExt>(resource: &K) -> String {
    format!("{}/{}", resource.namespace().unwrap_or_default(), resource.name_any())
}

/// Entry point the controller calls for every change of a component resource or an owned object.
#[instrument(skip_all, fields(component = C::Resource::COMPONENT.name(), name = %guard.name_any(), namespace = guard.namespace().unwrap_or_default()))]
pub async fn reconcile<C: Component>(guard: Arc<DeserializeGuard<C::Resource>>, ctx: Arc<Context<C>>) -> Result<Action, Error> {
    let started = Instant::now();
    ctx.metrics.reconcile_started();
    let resource = match &guard.0 {
        Ok(resource) => resource.clone(),
        Err(invalid) => {
            // Stored before a schema change or through a looser CRD version: reported and skipped
            // until it changes; the watch and every other resource carry on.
            operator_runtime::invalid::report::<C::Resource>(&ctx.recorder, invalid).await;
            ctx.metrics.error("invalid_object");
            return Ok(Action::await_change());
        }
    };
    let api: Api<C::Resource> = Api::namespaced(ctx.client.clone(), &resource.namespace().unwrap_or_default());
    let key = backoff_key(&resource);
    let step = with_finalizer(&api, FINALIZER, &ctx.field_manager, resource, |step| async {
        match step {
            Step::Apply(resource) => apply::<C>(&resource, &ctx).await,
            Step::Cleanup(resource) => cleanup::<C>(&resource, &ctx).await,
        }
    })
    .await;
    let result = match step {
        Ok(Ok(action)) => Ok(action),
        Ok(Err(source)) => Err(Error::Finalizer { resource: key.clone(), source }),
        Err(error) => Err(error),
    };
    if result.is_ok() {
        ctx.backoffs.reset(&key);
    }
    ctx.metrics.reconcile_finished(started.elapsed());
    result
}

/// Requeue policy for failed reconciles: exponential backoff with jitter, per resource.
pub fn error_policy<C: Component>(guard: Arc<DeserializeGuard<C::Resource>>, error: &Error, ctx: Arc<Context<C>>) -> Action {
    let delay = ctx.backoffs.next(&backoff_key(guard.as_ref()));
    warn!(%error, step = error.category(), retry_in = ?delay, "reconcile failed");
    ctx.metrics.error(error.category());
    Action::requeue(delay)
}

/// Whether the API server refused an object for good (not a passing failure such as a conflict
/// or throttling): said in status, then retried with backoff like any error.
fn refused(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if (400..500).contains(&status.code) && ![409, 429].contains(&status.code))
}

async fn apply<C: Component>(resource: &C::Resource, ctx: &Context<C>) -> Result<Action, Error> {
    let core = resource.core();
    let owner = build::owner_id(resource);
    let mut retry_failed = false;
    // Only a managed resource plans a preview.
    let mut plan = None;
    let installer = match core.management_state {
        ManagementState::Unmanaged => None,
        _ => match ctx.installer(resource) {
            Ok(installer) => Some(installer),
            Err(invalid) => {
                write_status(resource, ctx, &Outcome::Invalid { field: invalid.field.clone(), message: invalid.message.clone() }, Some(&invalid), None).await?;
                return Ok(if invalid.retry { Action::requeue(Duration::from_secs(10)) } else { Action::await_change() });
            }
        },
    };
    let outcome = match (core.management_state, installer) {
        (ManagementState::Unmanaged, _) | (_, None) => {
            ctx.desired.forget(&owner);
            Outcome::Unmanaged
        }
        (ManagementState::Removed, Some(installer)) => {
            ctx.desired.forget(&owner);
            let inventory = resource.component_status().map(|s| s.inventory.clone()).unwrap_or_default();
            delete_entries(resource, ctx, &installer, &inventory, core.crd_removal_policy, Prune::Everything).await?;
            Outcome::Removed
        }
        (ManagementState::Managed, Some(installer)) => match desired::<C>(resource, ctx, &installer).await? {
            Err(invalid) => {
                let retry = invalid.retry;
                write_status(resource, ctx, &Outcome::Invalid { field: invalid.field.clone(), message: invalid.message.clone() }, Some(&invalid), None).await?;
                // A missing Secret may appear; a wrong spec needs an edit, which triggers us anyway.
                return Ok(if retry { Action::requeue(Duration::from_secs(10)) } else { Action::await_change() });
            }
            Ok(desired) => {
                // Before anything that left the set is pruned: the heal fast path must not bring it back.
                ctx.desired.remember(&owner, &desired.objects, installer.client());
                let mut outcome = match apply_objects(resource, ctx, &installer, &desired).await {
                    Ok(outcome) => outcome,
                    Err(Error::Apply { object, source }) if refused(&source) => {
                        let message = match &source {
                            kube::Error::Api(status) => format!("{object}: {}", status.message),
                            other => format!("{object}: {other}"),
                        };
                        write_status(resource, ctx, &Outcome::Invalid { field: "apply".into(), message }, None, None).await?;
                        return Err(Error::Apply { object, source });
                    }
                    Err(e) => return Err(e),
                };
                let previous: Vec<InventoryEntry> = resource.component_status().map(|s| s.inventory.iter().map(|e| located(C::Resource::COMPONENT.name(), &owner, e.clone())).collect()).unwrap_or_default();
                let Outcome::Applied { inventory, failed, .. } = &mut outcome else { unreachable!() };
                let keep: BTreeSet<InventoryEntry> = inventory.iter().cloned().collect();
                // Objects of an application that did not render or apply stay as they are, and listed.
                let held: BTreeSet<&str> = failed.iter().filter_map(|f| f.application.as_deref()).collect();
                // A failure that names no application (a built-in release, whose objects name
                // none, with an object refused or not ours) holds everything: nothing is pruned
                // while the install is not applied in full.
                let hold_all = failed.iter().any(|f| f.application.is_none());
                retry_failed = failed.iter().any(|f| f.retry);
                let mut left = Vec::new();
                for entry in previous.into_iter().filter(|e| !keep.contains(e)) {
                    if hold_all || (!held.is_empty() && ctx.held_by(&build::owner_id(resource), &entry, &held, &installer).await?) {
                        inventory.push(entry);
                    } else {
                        left.push(entry);
                    }
                }
                delete_entries(resource, ctx, &installer, &left, core.crd_removal_policy, Prune::KeepData).await?;
                // What was applied is written to status whatever the preview's plan meets: a
                // failed plan is tried again, the status of the apply stands.
                plan = match preview_plan(resource, ctx).await {
                    Ok(plan) => plan,
                    Err(error) => {
                        warn!(%error, "cannot plan the preview yet; retrying");
                        ctx.metrics.error(error.category());
                        retry_failed = true;
                        None
                    }
                };
                outcome
            }
        },
    };
    write_status(resource, ctx, &outcome, None, plan.as_ref()).await?;
    Ok(match outcome {
        // An application that failed for a passing reason (a download) is tried again.
        _ if retry_failed => Action::requeue(Duration::from_secs(10)),
        // Owned objects' watches bring us back when workloads change; the requeue is a safety net.
        Outcome::Applied { not_ready, .. } if !not_ready.is_empty() => Action::requeue(Duration::from_secs(30)),
        _ => Action::requeue(Duration::from_secs(300)),
    })
}

/// The objects a resource wants, and the applications that could not be rendered.
struct Desired {
    /// The version the objects are: `spec.version`, or what the packages run
    /// ([`crate::component::Rendered::version`]).
    version: String,
    objects: Vec<Value>,
    /// Every application, when the component renders several ([`crate::component::Rendered`]).
    applications: Vec<String>,
    failed: Vec<ApplicationFailure>,
    builds: BTreeMap<String, ApplicationBuild>,
    notes: BTreeMap<String, Vec<String>>,
}

/// Dereference and build; the inner error is bad input (nothing touched), the outer an API failure.
async fn desired<C: Component>(resource: &C::Resource, ctx: &Context<C>, installer: &Installer) -> Result<Result<Desired, InvalidSpec>, Error> {
    let inputs = match dereference::<C>(resource, ctx, installer).await? {
        Ok(inputs) => inputs,
        Err(invalid) => return Ok(Err(invalid)),
    };
    let objects = match build::desired_objects::<C>(resource, &inputs) {
        Ok(objects) => objects,
        Err(invalid) => return Ok(Err(invalid)),
    };
    if let Some(invalid) = tenant_namespace(resource, ctx, &objects).await? {
        return Ok(Err(invalid));
    }
    let version = build::installed_version::<C>(resource, &inputs).to_string();
    let (applications, failed, builds, notes) = inputs.rendered.map(|r| (r.applications, r.failed, r.builds, r.notes)).unwrap_or_default();
    Ok(Ok(Desired { version, objects, applications, failed, builds, notes }))
}

/// A namespace a Profile made is a tenant's: no component installs into it, binds an account
/// of it, routes the API server to a Service of it or admits its principals, but a resource that
/// lives there itself (the tenant's own KfDef). Otherwise a tenant could register a Profile named
/// like a namespace a platform release uses and later receive the platform's objects (its
/// Secrets among them) or its grants (a ClusterRoleBinding to `monitoring:prometheus`). Reads
/// each named namespace once per reconcile, with the operator's own rights (every operator may
/// read namespaces).
async fn tenant_namespace<C: Component>(resource: &C::Resource, ctx: &Context<C>, objects: &[Value]) -> Result<Option<InvalidSpec>, Error> {
    let own = resource.namespace().unwrap_or_default();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(ctx.client.clone());
    for (namespace, (object, field)) in build::named_namespaces(objects).into_iter().filter(|(n, _)| *n != own) {
        let live = namespaces.get_opt(namespace).await.map_err(|source| Error::Namespace { namespace: namespace.to_string(), source })?;
        if let Some(owner) = live.as_ref().and_then(build::tenant_owner) {
            return Ok(Some(InvalidSpec::new(
                "spec",
                format!(
                    "{object}: {field} names namespace {namespace}, and namespace {namespace} belongs to {owner}, a tenant's namespace: no component installs into it, binds or admits its accounts or routes to its Services (only a resource in that namespace may); nothing is installed"
                ),
            )
            .retryable()));
        }
    }
    Ok(None)
}

/// Reads what the spec references, as the installer: the operator itself reads no Secrets, and a
/// spec can only name what its account may read.
async fn dereference<C: Component>(resource: &C::Resource, ctx: &Context<C>, installer: &Installer) -> Result<Result<Inputs, InvalidSpec>, Error> {
    let namespace = resource.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(installer.client().clone(), &namespace);
    let mut inputs = Inputs::default();
    for (field, reference) in C::secret_refs(resource) {
        let secret = match secrets.get_opt(&reference.name).await {
            Err(kube::Error::Api(status)) if status.code == 403 => {
                let msg = format!("Secret {:?} in namespace {namespace:?} may not be read by the installer account: {}", reference.name, status.message);
                return Ok(Err(InvalidSpec::new(format!("{field}.name"), msg).retryable()));
            }
            read => read.map_err(|source| Error::Dereference { secret: format!("{namespace}/{}", reference.name), source })?,
        };
        let Some(secret) = secret else {
            let msg = format!("Secret {:?} not found in namespace {namespace:?}", reference.name);
            return Ok(Err(InvalidSpec::new(format!("{field}.name"), msg).retryable()));
        };
        let data = secret.data.unwrap_or_default();
        let Some(value) = data.get(&reference.key) else {
            let keys: Vec<_> = data.keys().cloned().collect();
            let msg = format!("Secret {:?} has no key {:?}; keys: {}", reference.name, reference.key, keys.join(", "));
            return Ok(Err(InvalidSpec::new(format!("{field}.key"), msg).retryable()));
        };
        let text = String::from_utf8_lossy(&value.0).into_owned();
        inputs.secrets.insert((reference.name.clone(), reference.key.clone()), text);
    }
    match C::render_external(resource, &ctx.client).await {
        Some(Ok(objects)) => inputs.rendered = Some(objects),
        Some(Err(invalid)) => return Ok(Err(invalid)),
        None => {}
    }
    Ok(Ok(inputs))
}

/// The plan status carries: that of the spec in annotation [`PREVIEW_SPEC_ANNOTATION`], computed
/// once per preview hash with the preview's installer; none without a preview. A preview that
/// is not a valid spec of this kind, or does not render, is a plan whose `failed` says why.
async fn preview_plan<C: Component>(resource: &C::Resource, ctx: &Context<C>) -> Result<Option<ChangePlan>, Error> {
    let annotations = resource.annotations();
    let Some(text) = annotations.get(PREVIEW_SPEC_ANNOTATION) else { return Ok(None) };
    // Echoed in status: bounded like a content hash.
    let hash: String = annotations.get(PREVIEW_HASH_ANNOTATION).map(|h| h.chars().take(64).collect()).unwrap_or_default();
    if let Some(plan) = resource.component_status().and_then(|s| s.plan.as_ref()).filter(|p| p.spec_hash == hash) {
        return Ok(Some(plan.clone()));
    }
    let mut plan = ChangePlan { spec_hash: hash.clone(), ..Default::default() };
    let field = format!("metadata.annotations[{PREVIEW_SPEC_ANNOTATION}]");
    // The preview as a resource of this kind: the same metadata and inventory, the preview's spec.
    let mut value = serde_json::to_value(resource).expect("resources serialise");
    value["spec"] = match serde_json::from_str(text) {
        Ok(spec) => spec,
        Err(e) => {
            plan.push(PlanList::Failed, format!("{field}: not JSON: {e}"));
            return Ok(Some(plan));
        }
    };
    // The plan is reported under the hash; a hash that is not the spec's would report a plan of
    // one spec as another's.
    if operator_runtime::content_hash(&value["spec"]) != hash {
        plan.push(PlanList::Failed, format!("metadata.annotations[{PREVIEW_HASH_ANNOTATION}]: {hash:?} is not the hash of the preview's spec"));
        return Ok(Some(plan));
    }
    let preview: C::Resource = match serde_json::from_value(value) {
        Ok(preview) => preview,
        Err(e) => {
            plan.push(PlanList::Failed, format!("{field}: not a {} spec: {e}", C::Resource::kind(&())));
            return Ok(Some(plan));
        }
    };
    plan.version = preview.core().version.chars().take(64).collect();
    let installer = match ctx.installer(&preview) {
        Ok(installer) => installer,
        Err(invalid) => {
            plan.push(PlanList::Failed, invalid.to_string());
            return Ok(Some(plan));
        }
    };
    let desired = match desired::<C>(&preview, ctx, &installer).await? {
        Ok(desired) => desired,
        Err(invalid) => {
            plan.push(PlanList::Failed, invalid.to_string());
            return Ok(Some(plan));
        }
    };
    let inventory = resource.component_status().map(|s| s.inventory.clone()).unwrap_or_default();
    let owner = build::owner_id(resource);
    let held: BTreeSet<String> = desired.failed.iter().map(|f| f.application.clone()).collect();
    plan.version = desired.version.chars().take(64).collect();
    let version = desired.version.clone();
    let newer_crd = move |live: &Value| build::crd_belongs_to_newer_release::<C>(live, &version);
    let rules = crate::plan::PlanRules { delete_crds: preview.core().crd_removal_policy == CrdRemovalPolicy::Delete, newer_crd: &newer_crd };
    let mut computed = crate::plan::compute(installer.client(), C::Resource::COMPONENT, &owner, preview.core().adopt_existing, &desired.objects, &inventory, &held, &rules)
        .await
        .map_err(|e| Error::Plan { resource: owner.clone(), source: e })?;
    let (failed, omitted) = (std::mem::take(&mut computed.failed), computed.omitted);
    plan = ChangePlan { spec_hash: plan.spec_hash, version: plan.version, omitted: plan.omitted + omitted, ..computed };
    // Render failures first, then the objects refused; the list stays bounded.
    for line in desired.failed.iter().map(|f| format!("application {:?}: {}", f.application, f.error)).chain(failed) {
        plan.push(PlanList::Failed, line);
    }
    info!(hash = %plan.spec_hash, version = %plan.version, totals = %plan.totals(), "preview planned");
    Ok(Some(plan))
}

/// The inventory entry of the rendered `object`, named where it lives ([`build::location`]).
fn entry_of(object: &Value, info: &KindInfo) -> InventoryEntry {
    InventoryEntry {
        group: info.group.into(),
        version: info.version.into(),
        kind: info.kind.into(),
        namespace: build::location(object, info),
        name: object["metadata"]["name"].as_str().unwrap_or_default().into(),
    }
}

/// `entry` as inventories name it now ([`entry_of`]): those written before named a cluster-scoped
/// object with the namespace kustomize rendered on it, and the object they list is the one
/// applied now, not one to prune.
fn located(component: &str, owner: &str, mut entry: InventoryEntry) -> InventoryEntry {
    if let Some(info) = kinds::lookup_for(component, owner, &entry.api_version(), &entry.kind) {
        entry.namespace = crate::build::entry_location(&entry, info);
    }
    entry
}

/// `Kind namespace/name` (or `Kind name`) for messages.
fn describe(info: &KindInfo, entry: &InventoryEntry) -> String {
    match &entry.namespace {
        Some(ns) => format!("{} {ns}/{}", info.kind, entry.name),
        None => format!("{} {}", info.kind, entry.name),
    }
}

/// The application `object` was rendered for, if it names one.
fn application_of(object: &Value) -> Option<&str> {
    object["metadata"]["annotations"][APPLICATION_ANNOTATION].as_str()
}

/// Why `live` is not applied over: who it belongs to, or that nobody handed it to `kind` `owner`.
fn foreign_note(what: &str, live: &Value, kind: &str, owner: &str) -> String {
    let (part_of, other) = (&live["metadata"]["labels"][PART_OF_LABEL], &live["metadata"]["annotations"][OWNER_ANNOTATION]);
    match part_of.as_str() {
        Some(part_of) => {
            let other = other.as_str().map(|o| format!(" {o}")).unwrap_or_default();
            format!("{what} belongs to {part_of}{other} (label {PART_OF_LABEL}); left as it is: an object has one owner")
        }
        None => format!(
            "{what} exists, not made by {kind} {owner}; left as it is (to take it over, set spec.adoptExisting: true or annotate it {}={owner})",
            build::ADOPT_ANNOTATION
        ),
    }
}

/// Applies the desired objects in order, skipping those already as desired and those another
/// resource owns, and reports readiness.
async fn apply_objects<C: Component>(resource: &C::Resource, ctx: &Context<C>, installer: &Installer, desired: &Desired) -> Result<Outcome, Error> {
    let writer = installer.client();
    let objects = &desired.objects;
    let component = C::Resource::COMPONENT.name();
    let owner = build::owner_id(resource);
    let version = &desired.version;
    let previous: BTreeSet<InventoryEntry> = resource.component_status().map(|s| s.inventory.iter().cloned().collect()).unwrap_or_default();
    let params = PatchParams::apply(&ctx.field_manager).force();
    let mut inventory = Vec::new();
    let mut not_ready = Vec::new();
    let mut changed = Vec::new();
    let targets: Vec<(&Value, &KindInfo, InventoryEntry)> = objects
        .iter()
        .map(|desired| {
            let info = kinds::lookup_for(C::Resource::COMPONENT.name(), &owner, desired["apiVersion"].as_str().unwrap_or_default(), desired["kind"].as_str().unwrap_or_default())
                .expect("build only emits known kinds");
            (desired, info, entry_of(desired, info))
        })
        .collect();
    let mut failed: Vec<Finding> = desired.failed.iter().map(|f| Finding { retry: f.error.retry, ..Finding::new(Some(&f.application), f.error.to_string()) }).collect();
    let mut lives = Vec::with_capacity(targets.len());
    let mut foreign = BTreeSet::new();
    for (index, (desired, info, entry)) in targets.iter().enumerate() {
        let live = match ctx.live(info, entry, installer).await {
            Ok(live) => live,
            // The installer may not read it: who made it cannot be told, so it is not written.
            Err(kube::Error::Api(status)) if status.code == 403 => {
                let note = format!("{}: the installer may not read it to tell who made it ({}); left as it is", describe(info, entry), status.message);
                failed.push(Finding::new(application_of(desired), note));
                foreign.insert(index);
                lives.push(None);
                continue;
            }
            Err(source) => return Err(Error::Apply { object: describe(info, entry), source }),
        };
        if let Some(note) = ctx.foreign(info, entry, live.as_ref(), &owner, resource.core().adopt_existing).await.map_err(|source| Error::Apply { object: describe(info, entry), source })? {
            // Retried: the other owner may let it go, or someone may hand it over.
            failed.push(Finding::new(application_of(desired), note).retryable());
            foreign.insert(index);
        }
        lives.push(live);
    }
    // Installing as a ServiceAccount: an application with any write the account may not make is
    // left out whole, before anything of it is written, and each such write is named.
    if let Installer::Account { client, account } = installer {
        let mut accesses: Vec<(usize, Access)> = Vec::new();
        for (index, ((desired, info, entry), live)) in targets.iter().zip(&lives).enumerate() {
            if foreign.contains(&index) {
                continue;
            }
            let verbs: &[&'static str] = match live {
                Some(live) if up_to_date(desired, live, info) => &[],
                Some(live) if info.is_crd() && build::crd_belongs_to_newer_release::<C>(live, version) => &[],
                Some(_) => &["patch"],
                None if info.is_shared() => &["create"],
                None => &["create", "patch"],
            };
            for verb in verbs {
                accesses.push((index, Access { verb, kind: info, namespace: entry.namespace.clone(), name: entry.name.clone() }));
            }
        }
        let asked: Vec<Access> = accesses.iter().map(|(_, access)| access.clone()).collect();
        let denied = installer::denied(client, asked).await.map_err(|source| Error::Apply { object: format!("access review as ServiceAccount {account}"), source })?;
        let mut refused: BTreeMap<Option<&str>, Vec<String>> = BTreeMap::new();
        for access in &denied {
            let (index, _) = accesses.iter().find(|(_, a)| a == access).expect("a denied access was asked");
            refused.entry(application_of(targets[*index].0)).or_default().push(access.describe());
        }
        for (application, writes) in &refused {
            let whole = application.map(|a| format!("; nothing of application {a:?} is applied")).unwrap_or_default();
            failed.push(Finding::new(*application, format!("ServiceAccount {account} may not {}{whole}", writes.join(", "))));
        }
        for (index, (desired, _, _)) in targets.iter().enumerate() {
            if refused.contains_key(&application_of(desired)) {
                foreign.insert(index);
            }
        }
    }
    // Deployments whose selector changed hand their pods over before anything is written, so the
    // old pods carry the new selector's labels before a Service moves to it. Only our own.
    let mut handed_over: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for (index, ((desired, info, entry), live)) in targets.iter().zip(lives.iter_mut()).enumerate() {
        let Some(current) = live.as_ref() else { continue };
        if foreign.contains(&index) {
            continue;
        }
        if info.kind == "Deployment" && info.immutable_field_changed(desired, current).is_some() && build::made_by(current, info, component, &owner) {
            ctx.desired.deleting(current["metadata"]["uid"].as_str().unwrap_or_default());
            let retired = handover::retire(writer, current, desired, component, &owner, &ctx.field_manager)
                .await
                .map_err(|source| Error::Replace { object: describe(info, entry), source })?;
            *live = None;
            handed_over.insert(index, retired);
        }
    }
    // Webhooks' backends are ready before what the webhooks admit is written (webhook_gate).
    let gates = webhook_gate::gates(&targets.iter().map(|(desired, info, _)| (*desired, *info)).collect::<Vec<_>>());
    let unready_backends: BTreeMap<usize, String> = gates
        .iter()
        .flat_map(|gate| gate.backends.iter().copied())
        .filter_map(|index| {
            let why = match &lives[index] {
                Some(live) => readiness::not_ready_reason(live)?,
                None => format!("{} does not exist yet", describe(targets[index].1, &targets[index].2)),
            };
            Some((index, why))
        })
        .collect();
    // Custom resources need their CRDs Established first (a CRD applied this round is not yet):
    // the install waits for the CRDs it applied or found as rendered (all rank before custom
    // resources). A custom resource whose CRD it did not apply (one another install brings, like
    // KServe's cert-manager Issuer; one of its own that was refused or is another's; one a newer
    // release keeps) waits, held like a webhook's objects, until the cluster serves its kind and
    // version: written first, it fails.
    let rendered_crds: BTreeSet<String> = targets.iter().filter(|(_, info, _)| info.is_crd()).map(|(_, _, e)| e.name.clone()).collect();
    let mut current_crds: Vec<String> = Vec::new();
    let mut crds_established = false;
    let mut unserved: BTreeMap<(String, &str), bool> = BTreeMap::new();
    for (index, ((desired, info, entry), live)) in targets.into_iter().zip(lives).enumerate() {
        if foreign.contains(&index) {
            continue;
        }
        if !crds_established && info.rank >= kinds::CUSTOM_RESOURCE_RANK {
            wait_established(&ctx.client, &current_crds).await?;
            crds_established = true;
        }
        let what = describe(info, &entry);
        let crd = crd_name(info);
        let kind_unserved = if info.rank == kinds::CUSTOM_RESOURCE_RANK && !current_crds.contains(&crd) {
            let key = (crd.clone(), info.version);
            let unserved = match unserved.get(&key) {
                Some(unserved) => *unserved,
                None => {
                    let serves = serves_kind(&ctx.client, &crd, info.version).await.map_err(|source| Error::Apply { object: format!("CustomResourceDefinition {crd}"), source })?;
                    unserved.insert(key, !serves);
                    !serves
                }
            };
            let whose = if rendered_crds.contains(&crd) { "which this install did not apply this round" } else { "which another install brings" };
            unserved.then(|| format!("waits for CustomResourceDefinition {crd}, {whose}, to serve {}", info.version))
        } else {
            None
        };
        if let Some(why) = kind_unserved.or_else(|| webhook_gate::held(&gates, index, info, &unready_backends)) {
            // Not written this round. One that exists is still the resource's, so prune leaves it
            // alone; one that does not is not listed, or its first write would count as
            // recreating a deleted object.
            not_ready.push(Finding::new(application_of(desired), format!("{what}: {why}")));
            if !info.is_shared() && live.is_some() {
                inventory.push(entry);
            }
            continue;
        }
        let api = info.api(writer, entry.namespace.as_deref());
        let mut kept_newer = false;
        let settled = match &live {
            Some(current) if up_to_date(desired, current, info) => true,
            Some(current) if current["metadata"]["deletionTimestamp"].is_null() && current["metadata"]["annotations"][HASH_ANNOTATION] == desired["metadata"]["annotations"][HASH_ANNOTATION] => {
                ctx.applies_nothing(&api, &entry.name, &params, desired, current).await
            }
            _ => false,
        };
        let live = match live {
            Some(live) if settled => live,
            // A shared CRD another install keeps at a newer release stays as it is (its custom
            // resources ask the cluster whether it serves their version).
            Some(live) if info.is_crd() && build::crd_belongs_to_newer_release::<C>(&live, version) => {
                kept_newer = true;
                live
            }
            // A namespace that exists gets the labels and annotations its application renders,
            // nothing else: applied as the installer, so a tenant cannot label a namespace it
            // may not patch.
            Some(_) if info.is_shared() => {
                let Some(metadata) = build::namespace_metadata(desired) else { continue };
                match api.patch(&entry.name, &params, &Patch::Apply(&metadata)).await {
                    Ok(applied) => {
                        changed.push(format!("labelled {what} as its application renders it"));
                        serde_json::to_value(applied).expect("objects serialise")
                    }
                    Err(source) => {
                        let detail = crate::nats_mode::short_error(&source);
                        failed.push(Finding::new(application_of(desired), format!("labelling {what}: {detail}")).retryable());
                        continue;
                    }
                }
            }
            // Shared objects (namespaces) are otherwise only ever created, so the operator needs
            // no right to delete them.
            None if info.is_shared() => {
                // Made by this resource: a Purge uninstall may delete it (see `purge`).
                let mut created = desired.clone();
                created["metadata"]["annotations"][build::CREATED_BY_ANNOTATION] = json!(build::user_value(component, &owner));
                let object: DynamicObject = serde_json::from_value(created).expect("desired objects are objects");
                let post = PostParams { field_manager: Some(ctx.field_manager.clone()), ..Default::default() };
                match api.create(&post, &object).await {
                    Ok(created) => serde_json::to_value(created).expect("objects serialise"),
                    Err(kube::Error::Api(status)) if status.code == 409 => desired.clone(),
                    Err(source) => return Err(Error::Apply { object: what, source }),
                }
            }
            live => {
                let retiring = match handed_over.get(&index) {
                    Some(retired) => retired.clone(),
                    None => live.as_ref().map(handover::retiring).unwrap_or_default(),
                };
                // A Deployment that existed is missing: deleted, or handed over by a reconcile that
                // stopped before creating the new one. Looked up after the heal, off its path.
                let look_for_retired = live.is_none() && info.kind == "Deployment" && previous.contains(&entry) && !handed_over.contains_key(&index);
                if handed_over.contains_key(&index) {
                    changed.push(format!("replaced {what} (spec.selector changed; the old pods serve until it is Available)"));
                } else if live.is_none() && previous.contains(&entry) {
                    ctx.metrics.healed();
                    info!(object = %what, "recreating deleted object");
                    changed.push(format!("recreated {what}"));
                } else if let Some(live) = &live {
                    match info.immutable_field_changed(desired, live) {
                        // The API server refuses to change this field in place: replace the object,
                        // if it is ours (applying over someone else's then fails and says so).
                        Some(field) if build::made_by(live, info, component, &owner) => {
                            ctx.desired.deleting(live["metadata"]["uid"].as_str().unwrap_or_default());
                            handover::delete_and_wait(&api, live, DeleteParams::background())
                                .await
                                .map_err(|source| Error::Replace { object: what.clone(), source })?;
                            changed.push(format!("replaced {what} ({field} changed)"));
                        }
                        Some(_) => {}
                        None if live["metadata"]["annotations"][HASH_ANNOTATION] == desired["metadata"]["annotations"][HASH_ANNOTATION] => {
                            ctx.metrics.healed();
                            let path = manifest::first_difference(desired, live).unwrap_or_default();
                            info!(object = %what, %path, "reverting drift");
                            changed.push(format!("reverted drift in {what} ({path})"));
                        }
                        None => {}
                    }
                }
                // A shared object is applied with this install's own field manager, so its user
                // annotation stays when another install applies the object (build::USER_ANNOTATION_PREFIX).
                let own_params = build::tracks_users(info, desired).then(|| PatchParams::apply(&build::user_field_manager(&ctx.field_manager, component, &owner)).force());
                let (api, params, what, name) = (&api, own_params.as_ref().unwrap_or(&params), &what, entry.name.as_str());
                let apply = move |retiring: Vec<String>| {
                    let object = handover::with_retiring(desired, &retiring);
                    async move { api.patch(name, params, &Patch::Apply(&object)).await.map_err(|source| Error::Apply { object: what.clone(), source }) }
                };
                let mut applied = match apply(retiring).await {
                    Ok(applied) => applied,
                    // One application's object the API server refuses (or cannot take now: a
                    // webhook without a backend) stops that application, not the others.
                    Err(Error::Apply { object, source }) if application_of(desired).is_some() => {
                        let detail = crate::nats_mode::short_error(&source);
                        failed.push(Finding::new(application_of(desired), format!("applying {object}: {detail}")).retryable());
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                if look_for_retired {
                    let namespace = entry.namespace.as_deref().unwrap_or_default();
                    let retired = handover::retired_replica_sets(writer, namespace, &entry.name, &owner)
                        .await
                        .map_err(|source| Error::Apply { object: what.clone(), source })?;
                    if !retired.is_empty() {
                        applied = apply(retired).await?;
                    }
                }
                serde_json::to_value(applied).expect("objects serialise")
            }
        };
        match readiness::not_ready_reason(&live) {
            Some(reason) => not_ready.push(Finding::new(application_of(desired), reason)),
            None if !handover::retiring(&live).is_empty() => {
                handover::finish(writer, &live, &owner, &ctx.field_manager).await.map_err(|source| Error::Apply { object: describe(info, &entry), source })?;
            }
            None => {}
        }
        if info.is_crd() && !kept_newer {
            current_crds.push(entry.name.clone());
        }
        if !info.is_shared() {
            inventory.push(entry);
        }
    }
    if !changed.is_empty() {
        let note = changed.join("; ");
        ctx.event(resource, EventType::Normal, "Healed", note).await;
    }
    Ok(Outcome::Applied { version: version.clone(), inventory, not_ready, failed, applications: desired.applications.clone(), builds: desired.builds.clone(), notes: desired.notes.clone() })
}

/// Waits (bounded) until every CRD in `names` is Established.
async fn wait_established(client: &Client, names: &[String]) -> Result<(), Error> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in names {
        let established = kube::runtime::wait::await_condition(api.clone(), name, kube::runtime::conditions::is_crd_established());
        match tokio::time::timeout(Duration::from_secs(60), established).await {
            Ok(Ok(_)) => {}
            _ => return Err(Error::NotEstablished { crd: name.clone() }),
        }
    }
    Ok(())
}

/// The fields of `desired`, with the values `stored` (a dry run's result) has for them; a field
/// the server does not keep (a cluster-scoped object's namespace) is left out.
fn as_stored(desired: &Value, stored: &Value) -> Value {
    match (desired, stored) {
        (Value::Object(wanted), Value::Object(kept)) => Value::Object(wanted.iter().filter_map(|(k, v)| kept.get(k).map(|s| (k.clone(), as_stored(v, s)))).collect()),
        (Value::Array(wanted), Value::Array(kept)) if wanted.len() == kept.len() => Value::Array(wanted.iter().zip(kept).map(|(w, k)| as_stored(w, k)).collect()),
        _ => stored.clone(),
    }
}

/// The name of the CRD that defines `info`'s kind.
fn crd_name(info: &KindInfo) -> String {
    kinds::crd_name(info.group, info.plural)
}

/// Whether CRD `name` exists, is Established and serves `version`. One the operator may not read
/// counts as serving (the write then says what is wrong).
async fn serves_kind(client: &Client, name: &str, version: &str) -> Result<bool, kube::Error> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crd = match Api::<CustomResourceDefinition>::all(client.clone()).get_opt(name).await {
        Ok(crd) => crd,
        Err(kube::Error::Api(status)) if status.code == 403 => return Ok(true),
        Err(e) => return Err(e),
    };
    let Some(crd) = crd else { return Ok(false) };
    use kube::runtime::wait::Condition;
    let established = kube::runtime::conditions::is_crd_established().matches_object(Some(&crd));
    Ok(established && crd.spec.versions.iter().any(|v| v.name == version && v.served))
}

fn up_to_date(desired: &Value, live: &Value, info: &KindInfo) -> bool {
    if info.is_shared() {
        return build::namespace_settled(desired, live); // created when missing, only labelled
    }
    live["metadata"]["deletionTimestamp"].is_null()
        && live["metadata"]["annotations"][HASH_ANNOTATION] == desired["metadata"]["annotations"][HASH_ANNOTATION]
        && manifest::is_subset(desired, live)
}

/// What a delete of inventory entries leaves.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Prune {
    /// Objects that left the render: PersistentVolumeClaims stay (they hold data; an upgrade
    /// that drops one from its packages never deletes a database).
    KeepData,
    /// The resource is removed or deleted: everything it made goes (but CRDs and namespaces, as
    /// `policy` says).
    Everything,
}

/// Deletes the objects of `entries` that `resource` made, webhooks first; namespaces are never
/// deleted and CRDs only when the resource opted in with `crdRemovalPolicy: Delete`. An entry whose
/// live object does not prove it was made by `resource` (see [`build::made_by`]) is kept and named
/// in a Warning Event: an inventory can be written by anyone who can write the status.
async fn delete_entries<C: Component>(resource: &C::Resource, ctx: &Context<C>, installer: &Installer, entries: &[InventoryEntry], policy: CrdRemovalPolicy, prune: Prune) -> Result<(), Error> {
    let component = C::Resource::COMPONENT.name();
    let owner = build::owner_id(resource);
    let mut targets: Vec<(&KindInfo, &InventoryEntry)> = entries
        .iter()
        .filter_map(|e| kinds::lookup_for(C::Resource::COMPONENT.name(), &owner, &e.api_version(), &e.kind).map(|info| (info, e)))
        .filter(|(info, _)| !info.is_shared() && (!info.is_crd() || policy == CrdRemovalPolicy::Delete))
        .collect();
    targets.sort_by_key(|(info, _)| std::cmp::Reverse(info.rank));
    let (data, targets): (Vec<_>, Vec<_>) = targets.into_iter().partition(|(info, _)| prune == Prune::KeepData && info.holds_data());
    if !data.is_empty() {
        let names: Vec<String> = data.iter().map(|(info, entry)| describe(info, entry)).collect();
        let note = format!("kept {}: no longer rendered, but it holds data; delete it yourself once its data is migrated", names.join(", "));
        ctx.event(resource, EventType::Normal, "DataKept", note).await;
    }
    ctx.quiet_aggregations(installer, &targets, &owner).await.map_err(|(object, source)| Error::Prune { object, source })?;
    let mut kept = Vec::new();
    // Objects the installer may not read or delete (e.g. its rights went with a namespace being
    // deleted): left, named in an Event, never retried forever.
    let mut denied = Vec::new();
    for (info, entry) in targets {
        let what = describe(info, entry);
        let api = ctx.dynamic_api(info, entry.namespace.as_deref());
        let deleter = info.api(installer.client(), entry.namespace.as_deref());
        // Objects not labelled for this operator are not in the cache: read them to tell a gone
        // object from a foreign one.
        let live = match ctx.live.get(info, entry.namespace.as_deref(), &entry.name) {
            Some(live) => Some(live),
            // Kinds the operator does not watch it may not read either: the installer reads them.
            None => match match ctx.live.caches(info) { true => &api, false => &deleter }.get_opt(&entry.name).await {
                Ok(object) => object.map(|o| serde_json::to_value(o).expect("objects serialise")),
                // The kind is no longer served (its CRD was deleted): no object of it is left.
                Err(kube::Error::Api(status)) if status.code == 404 => None,
                Err(kube::Error::Api(status)) if status.code == 403 => {
                    denied.push(format!("{what} ({})", status.message));
                    continue;
                }
                Err(source) => return Err(Error::Prune { object: what.clone(), source }),
            },
        };
        let Some(live) = live else { continue };
        // Shared by the installs recorded on it: the last one to go deletes it.
        if build::tracks_users(info, &live) && build::made_by(&live, info, component, &owner) {
            match ctx.release_shared(&deleter, live, &owner).await {
                Ok(Released::Deleted) => info!(object = %what, "deleted (its last user)"),
                Ok(Released::UsedBy(others)) => info!(object = %what, users = ?others, "kept: other installs use it"),
                Ok(Released::Gone) => {}
                Err(kube::Error::Api(status)) if status.code == 403 => denied.push(format!("{what} ({})", status.message)),
                Err(source) => return Err(Error::Prune { object: what, source }),
            }
            continue;
        }
        // Shared by every install, like the CRDs: they stay unless the CRDs go too.
        if build::shared_by_installs(info, &live) && policy != CrdRemovalPolicy::Delete {
            continue;
        }
        // A role of this name Kubernetes' aggregation controller re-created bare after an earlier
        // delete of ours is nobody's: it goes too.
        if !build::made_by(&live, info, component, &owner) && !build::aggregation_leftover(&live, info) {
            warn!(object = %what, "listed in the inventory but not made by this resource; kept");
            kept.push(what);
            continue;
        }
        // Only the incarnation whose labels were checked: a delete conditional on its uid.
        let uid = live["metadata"]["uid"].as_str().map(String::from);
        let delete = DeleteParams { preconditions: Some(Preconditions { uid, resource_version: None }), ..DeleteParams::background() };
        match deleter.delete(&entry.name, &delete).await {
            Ok(_) => info!(object = %what, "deleted"),
            // Gone, or replaced by another object since it was read (a later reconcile judges that one).
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
            Err(kube::Error::Api(status)) if status.code == 403 => {
                denied.push(format!("{what} ({})", status.message));
                continue;
            }
            Err(source) => return Err(Error::Prune { object: what, source }),
        }
        if info.kind == "Deployment" {
            handover::delete_retired(installer.client(), entry.namespace.as_deref().unwrap_or_default(), &entry.name, &owner)
                .await
                .map_err(|source| Error::Prune { object: format!("retired ReplicaSets of {what}"), source })?;
        }
    }
    if !kept.is_empty() {
        let note = format!(
            "kept {}: listed in status.inventory but not made by {} {owner} (label {PART_OF_LABEL}={component} and annotation {OWNER_ANNOTATION}={owner} missing)",
            kept.join(", "),
            C::Resource::COMPONENT.kind()
        );
        ctx.event(resource, EventType::Warning, "ForeignObjectsKept", note).await;
    }
    if !denied.is_empty() {
        let note = format!("not deleted, the installer may not: {}", denied.join("; "));
        ctx.event(resource, EventType::Warning, "NotDeleted", note).await;
    }
    Ok(())
}

/// `deletionPolicy: Purge`, after the resource's other objects are deleted: deletes, as the
/// installer, the namespaces among `entries` this resource created (annotated
/// [`build::CREATED_BY_ANNOTATION`] with it at creation) once they hold no
/// PersistentVolumeClaim and no object labelled for any install, and the CRDs among `entries` of
/// its component that no other existing install uses, once no custom resource of theirs is left.
/// Returns what it still waits for; empty: purged.
async fn purge<C: Component>(resource: &C::Resource, ctx: &Context<C>, installer: &Installer, entries: &[InventoryEntry]) -> Result<Vec<String>, Error> {
    let component = C::Resource::COMPONENT.name();
    let owner = build::owner_id(resource);
    let client = installer.client();
    let mut waiting = Vec::new();
    let prune_error = |object: String| move |source| Error::Prune { object, source };
    // A listing the installer may not make is waited on, never guessed.
    let any = |api: Api<DynamicObject>, params: kube::api::ListParams| async move {
        match api.list_metadata(&params.limit(1)).await {
            Ok(found) => Ok(Ok(found.items.first().map(|o| format!("{}/{}", o.metadata.namespace.clone().unwrap_or_default(), o.metadata.name.clone().unwrap_or_default())))),
            Err(kube::Error::Api(status)) if status.code == 403 || status.code == 404 && status.reason == "Forbidden" => Ok(Err(status.message)),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(Ok(None)),
            Err(e) => Err(e),
        }
    };
    let delete_once = |uid: Option<String>| DeleteParams { preconditions: Some(Preconditions { uid, resource_version: None }), ..DeleteParams::background() };
    for entry in entries.iter().filter(|e| e.kind == "Namespace" && e.namespace.is_none()) {
        let what = format!("Namespace {}", entry.name);
        let namespaces: Api<DynamicObject> = kinds::lookup("v1", "Namespace").expect("a built-in kind").api(client, None);
        let live = match namespaces.get_opt(&entry.name).await {
            Ok(live) => live,
            Err(kube::Error::Api(status)) if status.code == 403 => {
                waiting.push(format!("{what}: the installer may not read it ({})", status.message));
                continue;
            }
            Err(source) => return Err(prune_error(what)(source)),
        };
        let Some(live) = live else { continue };
        if live.annotations().get(build::CREATED_BY_ANNOTATION) != Some(&build::user_value(component, &owner)) || live.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let mut held = None;
        for info in kinds::KINDS.iter().filter(|info| !info.cluster_scoped) {
            let api = info.api(client, Some(&entry.name));
            let params = match info.kind == "PersistentVolumeClaim" {
                true => kube::api::ListParams::default(),
                false => kube::api::ListParams::default().labels(PART_OF_LABEL),
            };
            match any(api, params).await.map_err(prune_error(what.clone()))? {
                Ok(None) => {}
                Ok(Some(found)) => {
                    held = Some(format!("{what}: holds {} {found}", info.kind));
                    break;
                }
                Err(denied) => {
                    held = Some(format!("{what}: the installer may not list its {} ({denied})", info.kind));
                    break;
                }
            }
        }
        match held {
            Some(why) => waiting.push(why),
            None => match namespaces.delete(&entry.name, &delete_once(live.metadata.uid.clone())).await {
                Ok(_) => info!(object = %what, "purged"),
                Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
                Err(kube::Error::Api(status)) if status.code == 403 => waiting.push(format!("{what}: the installer may not delete it ({})", status.message)),
                Err(source) => return Err(prune_error(what)(source)),
            },
        }
    }
    let own_key = build::user_key(component, &owner);
    for entry in entries.iter().filter(|e| e.kind == "CustomResourceDefinition") {
        let what = format!("CustomResourceDefinition {}", entry.name);
        let info = kinds::lookup("apiextensions.k8s.io/v1", "CustomResourceDefinition").expect("a built-in kind");
        let definitions = info.api(client, None);
        let live = match definitions.get_opt(&entry.name).await {
            Ok(live) => live.map(|o| serde_json::to_value(o).expect("objects serialise")),
            Err(kube::Error::Api(status)) if status.code == 403 => {
                waiting.push(format!("{what}: the installer may not read it ({})", status.message));
                continue;
            }
            Err(source) => return Err(prune_error(what)(source)),
        };
        let Some(live) = live else { continue };
        // Another component's, or kept for another install of this one: not this uninstall's.
        if !build::made_by(&live, info, component, &owner) || !live["metadata"]["deletionTimestamp"].is_null() || !ctx.existing_users(&live, Some(&own_key)).await.map_err(prune_error(what.clone()))?.is_empty() {
            continue;
        }
        let spec = &live["spec"];
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let version = spec["versions"].as_array().into_iter().flatten().find(|v| v["storage"] == true).map(|v| text(&v["name"])).unwrap_or_default();
        let (group, kind, plural) = (text(&spec["group"]), text(&spec["names"]["kind"]), text(&spec["names"]["plural"]));
        let served = kube::api::ApiResource { api_version: format!("{group}/{version}"), group, version, kind, plural };
        match any(Api::all_with(client.clone(), &served), kube::api::ListParams::default()).await.map_err(prune_error(what.clone()))? {
            Ok(Some(found)) => waiting.push(format!("{what}: custom resources left, e.g. {}", found.trim_start_matches('/'))),
            Err(denied) => waiting.push(format!("{what}: the installer may not list its custom resources ({denied})")),
            Ok(None) => match definitions.delete(&entry.name, &delete_once(live["metadata"]["uid"].as_str().map(String::from))).await {
                Ok(_) => info!(object = %what, "purged"),
                Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
                Err(kube::Error::Api(status)) if status.code == 403 => waiting.push(format!("{what}: the installer may not delete it ({})", status.message)),
                Err(source) => return Err(prune_error(what)(source)),
            },
        }
    }
    Ok(waiting)
}

async fn cleanup<C: Component>(resource: &C::Resource, ctx: &Context<C>) -> Result<Action, Error> {
    ctx.desired.forget(&build::owner_id(resource));
    let core = resource.core();
    let mut entries: BTreeSet<InventoryEntry> = resource.component_status().map(|s| s.inventory.iter().cloned().collect()).unwrap_or_default();
    if core.management_state != ManagementState::Unmanaged {
        match ctx.installer(resource) {
            Ok(installer) => {
                // Objects applied by a reconcile whose status write never landed are not in the inventory.
                if let Ok(Ok(desired)) = desired::<C>(resource, ctx, &installer).await {
                    for object in &desired.objects {
                        let info = kinds::lookup_for(C::Resource::COMPONENT.name(), &build::owner_id(resource), object["apiVersion"].as_str().unwrap_or_default(), object["kind"].as_str().unwrap_or_default());
                        if let Some(info) = info {
                            entries.insert(entry_of(object, info));
                        }
                    }
                }
                let entries: Vec<InventoryEntry> = entries.into_iter().collect();
                delete_entries(resource, ctx, &installer, &entries, core.crd_removal_policy, Prune::Everything).await?;
                if core.deletion_policy == DeletionPolicy::Purge {
                    let waiting = purge(resource, ctx, &installer, &entries).await?;
                    let mut status = resource.component_status().cloned().unwrap_or_default();
                    if status.purging != waiting {
                        status.purging = waiting.clone();
                        let api: Api<C::Resource> = Api::namespaced(ctx.client.clone(), &resource.namespace().unwrap_or_default());
                        let patch = json!({"apiVersion": C::Resource::api_version(&()), "kind": C::Resource::kind(&()), "status": status});
                        let status_error = |source| Error::Status { resource: build::owner_id(resource), source };
                        api.patch_status(&resource.name_any(), &PatchParams::apply(&ctx.field_manager).force(), &Patch::Apply(&patch)).await.map_err(status_error)?;
                    }
                    if !waiting.is_empty() {
                        ctx.report(resource, Some(&status));
                        return Err(Error::Purging { resource: build::owner_id(resource), waiting });
                    }
                }
                ctx.event(resource, EventType::Normal, "Uninstalled", format!("removed the objects of {} {}", C::Resource::COMPONENT.kind(), resource.name_any())).await;
            }
            // Nobody to delete as: nothing is deleted with the operator's own rights.
            Err(invalid) => {
                let note = format!("left the objects of {} {} as they are: {invalid}", C::Resource::COMPONENT.kind(), resource.name_any());
                ctx.event(resource, EventType::Warning, "NotUninstalled", note).await;
            }
        }
    }
    ctx.report(resource, None);
    // The kinds its own CRDs defined were its alone.
    kinds::forget_rendered(C::Resource::COMPONENT.name(), &build::owner_id(resource));
    Ok(Action::await_change())
}

/// Writes the status computed from `outcome`, with `plan` as the preview's plan (none: no
/// preview, or not planned yet), if it differs from the current one.
async fn write_status<C: Component>(resource: &C::Resource, ctx: &Context<C>, outcome: &Outcome, invalid: Option<&InvalidSpec>, plan: Option<&ChangePlan>) -> Result<(), Error> {
    let now = Time(jiff_now());
    let cached = resource.component_status();
    let next_status = |current| ComponentStatus { plan: plan.cloned(), ..status::next_status(current, resource.meta().generation, outcome, &now) };
    let next = next_status(cached);
    ctx.report(resource, Some(&next));
    if cached == Some(&next) {
        return Ok(());
    }
    let status_error = |source| Error::Status { resource: build::owner_id(resource), source };
    let api: Api<C::Resource> = Api::namespaced(ctx.client.clone(), &resource.namespace().unwrap_or_default());
    // The cached resource can predate this operator's own last status write (its watch event not
    // seen yet): compare with the stored status before writing the same one again.
    let Some(stored) = api.get_opt(&resource.name_any()).await.map_err(status_error)? else { return Ok(()) };
    let current = stored.component_status();
    let next = next_status(current);
    if current == Some(&next) {
        tracing::debug!("status already current in the API server");
        return Ok(());
    }
    tracing::debug!(phase = ?next.phase, conditions = ?next.conditions.iter().map(|c| (&c.type_, &c.status, &c.message)).collect::<Vec<_>>(), "status changes");
    let patch = json!({
        "apiVersion": C::Resource::api_version(&()),
        "kind": C::Resource::kind(&()),
        "status": next,
    });
    api.patch_status(&resource.name_any(), &PatchParams::apply(&ctx.field_manager).force(), &Patch::Apply(&patch)).await.map_err(status_error)?;
    let was_degraded = current.and_then(|s| s.phase) == Some(kubeflow_crds::component::ComponentPhase::Degraded);
    let degraded = |s: Option<&ComponentStatus>| s.and_then(|s| s.conditions.iter().find(|c| c.type_ == "Degraded" && c.reason == "NotApplied").map(|c| c.message.clone()));
    let not_applied = degraded(Some(&next)).filter(|now| degraded(current).as_ref() != Some(now));
    // A Ready application with a message has a note (an object another application renders
    // otherwise, [`crate::component::Rendered::notes`]): said in a Warning when it first appears.
    let notes = |s: Option<&ComponentStatus>| -> BTreeMap<String, String> {
        s.map(|s| s.applications.iter().filter(|a| a.state == kubeflow_crds::component::ComponentPhase::Ready && !a.message.is_empty()).map(|a| (a.name.clone(), a.message.clone())).collect()).unwrap_or_default()
    };
    let before = notes(current);
    for (application, note) in notes(Some(&next)) {
        if before.get(&application) != Some(&note) {
            ctx.event(resource, EventType::Warning, "RenderedOtherwise", format!("application {application:?}: {note}")).await;
        }
    }
    match (invalid, next.phase) {
        (Some(invalid), _) => ctx.event(resource, EventType::Warning, "InvalidSpec", invalid.to_string()).await,
        (None, _) if not_applied.is_some() => ctx.event(resource, EventType::Warning, "NotApplied", not_applied.unwrap_or_default()).await,
        (None, Some(kubeflow_crds::component::ComponentPhase::Ready)) if current.and_then(|s| s.installed_version.as_ref()) != next.installed_version.as_ref() || was_degraded => {
            ctx.event(resource, EventType::Normal, "Installed", format!("version {} is ready", next.installed_version.as_deref().unwrap_or(&resource.core().version))).await
        }
        _ => {}
    }
    Ok(())
}

fn jiff_now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::now()
}

#[cfg(test)]
mod stored_tests {
    use super::*;
    use serde_json::json;

    /// What a dry run shows for the rendered fields is what drift is judged on.
    #[test]
    fn rendered_fields_are_compared_as_the_server_stores_them() {
        let desired = json!({"metadata": {"name": "r", "namespace": "kubeflow"}, "spec": {"containers": [{"resources": {"limits": {"cpu": "1000m"}}}]}});
        let stored = json!({"metadata": {"name": "r", "uid": "u"}, "spec": {"containers": [{"resources": {"limits": {"cpu": "1"}}, "imagePullPolicy": "Always"}]}, "status": {}});
        assert_eq!(as_stored(&desired, &stored), json!({"metadata": {"name": "r"}, "spec": {"containers": [{"resources": {"limits": {"cpu": "1"}}}]}}));
        let live = json!({"metadata": {"name": "r", "uid": "u", "annotations": {"deployment.kubernetes.io/revision": "2"}}, "spec": {"containers": [{"resources": {"limits": {"cpu": "1"}}, "imagePullPolicy": "Always"}]}});
        assert!(manifest::is_subset(&as_stored(&desired, &stored), &live));
        let changed = json!({"metadata": {"name": "r"}, "spec": {"containers": [{"resources": {"limits": {"cpu": "2"}}}]}});
        assert!(!manifest::is_subset(&as_stored(&desired, &stored), &changed), "a value someone changed is drift");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_scoped_object_is_listed_without_the_namespace_kustomize_gave_it() {
        let decorator = KindInfo { group: "metacontroller.k8s.io", version: "v1alpha1", kind: "DecoratorController", plural: "decoratorcontrollers", cluster_scoped: true, ..*kinds::lookup("v1", "ConfigMap").unwrap() };
        let rendered = json!({"kind": "DecoratorController", "metadata": {"name": "kubeflow-pipelines-profile-controller", "namespace": "kubeflow"}});
        assert_eq!(entry_of(&rendered, &decorator).namespace, None);
        let config_map = kinds::lookup("v1", "ConfigMap").unwrap();
        assert_eq!(entry_of(&json!({"metadata": {"name": "c", "namespace": "kubeflow"}}), config_map).namespace.as_deref(), Some("kubeflow"));
    }

    #[test]
    fn an_inventory_that_gave_a_cluster_scoped_object_a_namespace_names_the_object_applied_now() {
        let entry = |kind: &str, group: &str, namespace: Option<&str>| InventoryEntry { group: group.into(), version: "v1".into(), kind: kind.into(), namespace: namespace.map(String::from), name: "x".into() };
        assert_eq!(located("pipelines", "kubeflow/pipelines", entry("ClusterRole", "rbac.authorization.k8s.io", Some("kubeflow"))), entry("ClusterRole", "rbac.authorization.k8s.io", None));
        assert_eq!(located("pipelines", "kubeflow/pipelines", entry("ConfigMap", "", Some("kubeflow"))), entry("ConfigMap", "", Some("kubeflow")));
    }

    #[test]
    fn a_selector_that_drops_a_label_is_a_change_of_an_immutable_field() {
        let info = kinds::lookup("apps/v1", "Deployment").unwrap();
        let live = json!({"spec": {"selector": {"matchLabels": {"app": "ui", "app.kubernetes.io/name": "kfp"}}}});
        let narrower = json!({"spec": {"selector": {"matchLabels": {"app": "ui"}}}});
        assert_eq!(info.immutable_field_changed(&narrower, &live), Some("spec.selector"));
        assert_eq!(info.immutable_field_changed(&live, &live), None);
    }

    #[test]
    fn claim_templates_compare_ignoring_server_defaults() {
        let info = kinds::lookup("apps/v1", "StatefulSet").unwrap();
        let desired = json!({"spec": {"serviceName": "s", "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}]}});
        let live = json!({"spec": {"serviceName": "s", "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem"}, "status": {"phase": "Pending"}}]}});
        assert_eq!(info.immutable_field_changed(&desired, &live), None);
        let renamed = json!({"spec": {"serviceName": "t"}});
        assert_eq!(info.immutable_field_changed(&renamed, &live), Some("spec.serviceName"));
    }
}
