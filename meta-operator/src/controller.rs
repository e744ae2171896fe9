//! The meta-operator's driver: KfDef → plan → desired state on NATS → status from NATS → KfDef
//! status. Everything that talks to the API server or NATS is here; the decisions are in
//! [`crate::plan`], [`crate::publish`], [`crate::upgrade`] and [`crate::aggregate`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, kv};
use backoff::backoff::Backoff;
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{EventType, Recorder};
use kube::core::DeserializeGuard;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client, Resource, ResourceExt};
use kubeflow_crds::bus::{self, DesiredComponent, Heartbeat, KfDefRef, StatusReport};
use kubeflow_crds::component::{ComponentKind, DeletionPolicy, Platform};
use kubeflow_crds::fleet::{self, ClusterName};
use kubeflow_crds::fleet_cluster::{FleetCluster, Placement};
use kubeflow_crds::kfdef::{KfDef, KfDefPhase};
use kube::runtime::reflector::Store;
use operator_runtime::finalizer::{Step, with_finalizer};
use operator_runtime::metrics::Metrics;
use operator_runtime::nats;
use operator_runtime::retry::{self, Backoffs};
use serde_json::json;
use tokio::sync::{RwLock, mpsc};
use tracing::{info, instrument, warn};

use crate::aggregate::{self, Observed};
use crate::catalog::Catalog;
use crate::fleet::{self as placement, ClusterObserved, Selected};
use crate::plan::{self, PINNED_BY_ANNOTATION, PINS_ANNOTATION};
use crate::publish::{self, Publication, Published};
use crate::upgrade::{self, EditRefused};
use crate::upgrade_controller::{self, LOCK_ANNOTATION};

pub const FINALIZER: &str = "kfdef.apps.kubeflow.org/cleanup";
/// The field manager of every write the meta-operator makes.
pub const FIELD_MANAGER: &str = "kubeflow-meta-operator";

/// Parameters of the meta-operator's merge patches: named after [`FIELD_MANAGER`].
pub fn merge_params() -> PatchParams {
    PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() }
}

/// A failure to read or write the desired state on NATS.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error("not connected to NATS yet")]
    NotConnected,
    #[error("cannot read desired state {key}: {source}")]
    Read { key: String, source: kv::EntryError },
    #[error("cannot publish desired state {key}: {source}")]
    Publish { key: String, source: nats::BusError },
    #[error("cannot delete desired state {key}: {source}")]
    Delete { key: String, source: kv::DeleteError },
}

/// Why a reconcile failed, with the object it failed on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error("cannot write the status of KfDef {kfdef}: {source}")]
    Status { kfdef: String, source: kube::Error },
    #[error("cannot remove the pins of KfDef {kfdef} that spec.version now names: {source}")]
    Unpin { kfdef: String, source: kube::Error },
    #[error("cannot write the finalizer of KfDef {kfdef}: {source}")]
    Finalizer { kfdef: String, source: kube::Error },
    #[error(transparent)]
    Upgrade(#[from] upgrade_controller::UpgradeError),
    #[error("cannot withdraw desired state from a fleet cluster: {0}")]
    Fleet(String),
    #[error("purging KfDef {kfdef}: waiting for {}", waiting.join("; "))]
    Purging { kfdef: String, waiting: Vec<String> },
}

impl Error {
    /// Label of `kfop_reconcile_errors_total{kind}`.
    pub fn category(&self) -> &'static str {
        match self {
            Error::Bus(_) => "nats",
            Error::Status { .. } => "status",
            Error::Unpin { .. } => "pins",
            Error::Finalizer { .. } => "finalizer",
            Error::Upgrade(_) => "upgrade",
            Error::Fleet(_) => "fleet",
            Error::Purging { .. } => "purge",
        }
    }
}

/// NATS handles, once connected.
#[derive(Clone)]
pub struct Bus {
    pub js: jetstream::Context,
    /// Each component's desired-state bucket.
    pub desired: BTreeMap<ComponentKind, kv::Store>,
}

impl Bus {
    fn desired(&self, component: ComponentKind) -> &kv::Store {
        &self.desired[&component]
    }
}

/// A bucket a KfDef's desired specs are written to: this cluster's bucket of each component, or
/// the hub's bucket of a fleet cluster, holding every component's.
enum Desired<'a> {
    Local(&'a Bus),
    Cluster { js: &'a jetstream::Context, cluster: &'a ClusterName, store: &'a kv::Store },
}

impl Desired<'_> {
    fn store(&self, component: ComponentKind) -> &kv::Store {
        match self {
            Desired::Local(bus) => bus.desired(component),
            Desired::Cluster { store, .. } => store,
        }
    }

    fn js(&self) -> &jetstream::Context {
        match self {
            Desired::Local(bus) => &bus.js,
            Desired::Cluster { js, .. } => js,
        }
    }

    fn bucket(&self, component: ComponentKind) -> String {
        match self {
            Desired::Local(_) => bus::desired_bucket(component),
            Desired::Cluster { cluster, .. } => fleet::desired_bucket(cluster),
        }
    }

    fn cluster(&self) -> Option<&str> {
        match self {
            Desired::Local(_) => None,
            Desired::Cluster { cluster, .. } => Some(cluster.as_str()),
        }
    }
}

/// What the bus watcher learned, shared with reconciles.
#[derive(Default)]
pub struct BusState {
    pub bus: RwLock<Option<Bus>>,
    /// Latest report per KfDef (namespace, name) and component.
    pub reports: RwLock<BTreeMap<(String, String), BTreeMap<ComponentKind, StatusReport>>>,
    pub heartbeats: RwLock<BTreeMap<ComponentKind, u64>>,
    /// Releases each component operator announced; kept when its heartbeat goes stale.
    pub catalog: RwLock<Catalog>,
    /// What each registered fleet cluster reported ([`crate::fleet`]).
    pub fleet: RwLock<BTreeMap<ClusterName, ClusterObserved>>,
    /// Each registered fleet cluster's desired bucket on the hub, once made.
    pub fleet_desired: RwLock<BTreeMap<ClusterName, kv::Store>>,
}

pub struct Context {
    pub client: Client,
    pub state: Arc<BusState>,
    pub platform: Platform,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    /// Retry delays per object (namespace, name) after failed reconciles.
    pub backoffs: Backoffs<(String, String)>,
    /// The fleet clusters registered on this hub (none on a single cluster).
    pub clusters: Store<FleetCluster>,
}

fn object_key<K: Resource>(object: &K) -> (String, String) {
    (object.namespace().unwrap_or_default(), object.name_any())
}

/// OpenShift serves `security.openshift.io` (SecurityContextConstraints); plain Kubernetes does not.
pub async fn detect_platform(client: &Client) -> Result<Platform, kube::Error> {
    let groups = client.list_api_groups().await?;
    Ok(if groups.groups.iter().any(|g| g.name == "security.openshift.io") { Platform::OpenShift } else { Platform::Kubernetes })
}

/// Entry point of the KfDef controller. A KfDef the types cannot decode is reported (log and
/// Warning Event) and skipped until it changes; the watch and every other KfDef carry on.
#[instrument(skip_all, fields(kfdef = %guard.name_any(), namespace = guard.namespace().unwrap_or_default()))]
pub async fn reconcile(guard: Arc<DeserializeGuard<KfDef>>, ctx: Arc<Context>) -> Result<Action, Error> {
    match &guard.0 {
        Ok(kfdef) => reconcile_kfdef(kfdef, ctx).await,
        Err(invalid) => {
            operator_runtime::invalid::report::<KfDef>(&ctx.recorder, invalid).await;
            ctx.metrics.error("invalid_object");
            Ok(Action::await_change())
        }
    }
}

async fn reconcile_kfdef(kfdef: &KfDef, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    ctx.metrics.reconcile_started();
    let key = object_key(kfdef);
    let api: Api<KfDef> = Api::namespaced(ctx.client.clone(), &key.0);
    let step = with_finalizer(&api, FINALIZER, FIELD_MANAGER, kfdef.clone(), |step| async {
        match step {
            Step::Apply(kfdef) => apply(&kfdef, &ctx).await,
            Step::Cleanup(kfdef) => cleanup(&kfdef, &ctx).await,
        }
    })
    .await;
    let result = match step {
        Ok(Ok(action)) => Ok(action),
        Ok(Err(source)) => Err(Error::Finalizer { kfdef: format!("{}/{}", key.0, key.1), source }),
        Err(error) => Err(error),
    };
    ctx.metrics.reconcile_finished(started.elapsed());
    if result.is_ok() {
        ctx.backoffs.reset(&key);
    }
    result
}

/// Retries an object after a failure with its own exponential backoff (reset on success).
pub fn error_policy<K: Resource>(object: Arc<K>, error: &Error, ctx: Arc<Context>) -> Action {
    warn!(%error, "reconcile failed");
    ctx.metrics.error(error.category());
    Action::requeue(ctx.backoffs.next(&object_key(object.as_ref())))
}

async fn apply(kfdef: &KfDef, ctx: &Context) -> Result<Action, Error> {
    if let Some(placement) = &kfdef.spec.placement {
        return apply_placed(kfdef, placement, ctx).await;
    }
    let catalog = ctx.state.catalog.read().await.clone();
    let plan = plan::plan(kfdef, ctx.platform, &catalog);
    let bus = ctx.state.bus.read().await.clone();
    let mut bus_error = None;
    let mut edit_refused = None;
    if let Ok(plan) = &plan {
        // A KfUpgrade's targets, planned by the operators before it moves anything; a malformed
        // annotation previews nothing (the KfUpgrade reads it too, and says why).
        // Only while a KfUpgrade holds the KfDef: a preview left behind is not published.
        let preview = match kfdef.annotations().contains_key(LOCK_ANNOTATION) {
            true => plan::preview_plan(kfdef, ctx.platform, &catalog).unwrap_or_else(|error| {
                warn!(%error, "no preview published");
                None
            }),
            false => None,
        };
        let published = match &bus {
            Some(bus) => publish(kfdef, &Desired::Local(bus), plan, preview.as_ref(), &catalog).await,
            None => Err(BusError::NotConnected),
        };
        match published {
            Ok(refused) => edit_refused = refused,
            // Shown in status; the bus watcher triggers the KfDef again once NATS is back.
            Err(e) => bus_error = Some(e.to_string()),
        }
        if edit_refused.is_none() && bus_error.is_none() {
            remove_redundant_pins(kfdef, plan, ctx).await?;
        }
    }
    // Placed on fleet clusters before: taken off them (what its status lists), as it is now
    // installed here instead.
    let placed_on: Vec<String> = kfdef.status.iter().flat_map(|s| s.clusters.iter().map(|c| c.name.clone())).collect();
    let withdrawn = match &bus {
        _ if placed_on.is_empty() => true,
        Some(bus) => match withdraw_from_clusters(kfdef, &placed_on, bus, ctx).await {
            Ok(()) => true,
            Err(error) => {
                bus_error.get_or_insert(error);
                false
            }
        },
        None => false,
    };
    let key = object_key(kfdef);
    let reports = ctx.state.reports.read().await.get(&key).cloned().unwrap_or_default();
    let heartbeats = ctx.state.heartbeats.read().await.clone();
    let spec_version = kfdef.spec.version.clone().unwrap_or_default();
    let pinned_drift = plan.as_ref().ok().and_then(|p| plan::pinned_drift(p, &spec_version, kfdef.annotations().get(PINNED_BY_ANNOTATION).map(String::as_str), &catalog));
    let observed = Observed { reports: &reports, heartbeats: &heartbeats, now_unix: nats::now_unix(), bus_error, edit_refused: edit_refused.as_ref(), pinned_drift };
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let platform = format!("{:?}", ctx.platform);
    let mut next = aggregate::kfdef_status(kfdef.status.as_ref(), kfdef.meta().generation, plan.as_ref(), &observed, &platform, &now);
    if withdrawn {
        next.clusters.clear();
    }
    write_status(kfdef, next.clone(), ctx).await?;
    // Status reports and operator heartbeats arrive as triggers; the requeue notices operators
    // that stop sending heartbeats.
    Ok(Action::requeue(if next.phase == Some(KfDefPhase::Available) { Duration::from_secs(30) } else { Duration::from_secs(5) }))
}

/// Writes `next` as the KfDef's status unless it already is, and announces a phase change.
async fn write_status(kfdef: &KfDef, next: kubeflow_crds::kfdef::KfDefStatus, ctx: &Context) -> Result<(), Error> {
    let (namespace, name) = object_key(kfdef);
    ctx.metrics.set_phase("KfDef", &namespace, &name, next.phase.map(|p| format!("{p:?}")).as_deref());
    let applications: Vec<(String, String)> = next.applications.iter().map(|a| (format!("{name}/{}", a.name), a.state.clone())).collect();
    ctx.metrics.set_phases(APPLICATION_KIND, &namespace, &format!("{name}/"), &applications);
    if kfdef.status.as_ref() == Some(&next) {
        return Ok(());
    }
    let api: Api<KfDef> = Api::namespaced(ctx.client.clone(), &namespace);
    let patch = json!({"apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef", "status": next});
    api.patch_status(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&patch))
        .await
        .map_err(|source| Error::Status { kfdef: format!("{namespace}/{name}"), source })?;
    announce(kfdef, &next, ctx).await;
    Ok(())
}

/// A KfDef with `spec.placement`: its components' desired specs go to each selected fleet
/// cluster's bucket on the hub, planned against the releases that cluster's operators announced;
/// none stay in this cluster's buckets, nor in those of clusters it no longer selects. Its status
/// sums up what each cluster reports.
async fn apply_placed(kfdef: &KfDef, placement: &Placement, ctx: &Context) -> Result<Action, Error> {
    let key = object_key(kfdef);
    let generation = kfdef.meta().generation;
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let now_unix = nats::now_unix();
    let previous = kfdef.status.as_ref();
    let registrations: Vec<FleetCluster> = ctx.clusters.state().iter().map(|c| (**c).clone()).collect();
    let selection = match placement::select(&key.0, placement, &registrations) {
        Ok(selection) => selection,
        Err(invalid) => {
            write_status(kfdef, placement::placed_status(previous, generation, Err(invalid), None, &now), ctx).await?;
            return Ok(Action::await_change());
        }
    };
    let bus = ctx.state.bus.read().await.clone();
    let mut bus_error = None;
    let stores = ctx.state.fleet_desired.read().await.clone();
    if let Some(bus) = &bus {
        let used: Vec<&ClusterName> = selection.iter().filter_map(|s| if let Selected::Use { cluster, .. } = s { Some(cluster) } else { None }).collect();
        let left: Vec<String> = previous.iter().flat_map(|s| s.clusters.iter().map(|c| c.name.clone())).filter(|name| !used.iter().any(|c| c.as_str() == name)).collect();
        if let Err(e) = withdraw(kfdef, &Desired::Local(bus)).await {
            bus_error = Some(e.to_string());
        }
        if let Err(e) = withdraw_from_clusters(kfdef, &left, bus, ctx).await {
            bus_error = Some(e);
        }
    } else {
        bus_error = Some(BusError::NotConnected.to_string());
    }
    let mut clusters = Vec::new();
    for selected in selection {
        let (cluster, platform) = match selected {
            Selected::Unusable(status) => {
                clusters.push(status);
                continue;
            }
            Selected::Use { cluster, platform } => (cluster, platform),
        };
        let observed = ctx.state.fleet.read().await.get(&cluster).cloned().unwrap_or_default();
        // The cluster's pins (a wave upgrade's) over the KfDef's.
        let plan = plan::for_cluster(kfdef, cluster.as_str()).and_then(|view| plan::plan(&view, platform, &observed.catalog));
        let previous_entry = previous.and_then(|s| s.clusters.iter().find(|c| c.name == cluster.as_str()));
        let mut entry = placement::cluster_status(&cluster, &key, generation, plan.as_ref(), &observed, previous_entry, now_unix, &now);
        if let (Ok(plan), Some(bus)) = (&plan, &bus) {
            // A wave upgrade's targets for this cluster, planned by its operators first (only
            // while the upgrade holds the KfDef, as on a single cluster).
            let preview = match kfdef.annotations().contains_key(LOCK_ANNOTATION) {
                true => plan::cluster_preview_plan(kfdef, cluster.as_str(), platform, &observed.catalog).unwrap_or_else(|error| {
                    warn!(%error, %cluster, "no preview published");
                    None
                }),
                false => None,
            };
            let published = match stores.get(&cluster) {
                Some(store) => publish(kfdef, &Desired::Cluster { js: &bus.js, cluster: &cluster, store }, plan, preview.as_ref(), &observed.catalog).await.map_err(|e| e.to_string()),
                None => Err(format!("the hub's bucket {} is not made yet", fleet::desired_bucket(&cluster))),
            };
            match published {
                Ok(Some(refused)) => {
                    entry.state = kubeflow_crds::fleet_cluster::ClusterState::Degraded;
                    entry.message = refused.to_string();
                }
                Ok(None) => {}
                Err(e) => bus_error = Some(format!("cluster {cluster}: {e}")),
            }
        }
        clusters.push(entry);
    }
    let next = placement::placed_status(previous, generation, Ok(clusters), bus_error.as_deref(), &now);
    write_status(kfdef, next, ctx).await?;
    // Reports arrive as triggers; the requeue notices a cluster whose agent falls silent.
    Ok(Action::requeue(Duration::from_secs(10)))
}

/// An Event when the phase changes, and a Warning when a version change is newly refused.
async fn announce(kfdef: &KfDef, next: &kubeflow_crds::kfdef::KfDefStatus, ctx: &Context) {
    let degraded = |s: Option<&kubeflow_crds::kfdef::KfDefStatus>| s.and_then(|s| s.conditions.iter().find(|c| c.type_ == "Degraded").cloned());
    let (before, after) = (degraded(kfdef.status.as_ref()), degraded(Some(next)));
    let mut events = Vec::new();
    if let Some(refused) = after.filter(|c| c.reason == "VersionChangeRefused" && before.as_ref().map(|b| (&b.reason, &b.message)) != Some((&c.reason, &c.message))) {
        events.push((EventType::Warning, "VersionChangeRefused", refused.message));
    } else if kfdef.status.as_ref().and_then(|s| s.phase) != next.phase {
        let (type_, reason) = match next.phase {
            Some(KfDefPhase::Available) => (EventType::Normal, "Available"),
            Some(KfDefPhase::Degraded) => (EventType::Warning, "Degraded"),
            _ => (EventType::Normal, "Progressing"),
        };
        let note = next.conditions.iter().find(|c| c.type_ == reason).map(|c| c.message.clone()).unwrap_or_default();
        events.push((type_, reason, note));
    }
    for (type_, reason, note) in events {
        let event = operator_runtime::event(type_, reason, note, "Reconcile");
        if let Err(e) = ctx.recorder.publish(&event, &kfdef.object_ref(&())).await {
            warn!(error = %e, reason, "cannot publish event");
        }
    }
}

/// Removes the pins once `spec.version` names the same versions (one patch).
async fn remove_redundant_pins(kfdef: &KfDef, plan: &plan::Plan, ctx: &Context) -> Result<(), Error> {
    let annotations = kfdef.annotations();
    if !plan::pins_redundant(plan, annotations.contains_key(PINS_ANNOTATION), annotations.contains_key(LOCK_ANNOTATION)) {
        return Ok(());
    }
    let (namespace, name) = object_key(kfdef);
    let mut annotations = json!({PINS_ANNOTATION: null, PINNED_BY_ANNOTATION: null});
    // Pinned repositories go too once spec.repos names the same ones.
    if plan::repos_redundant(kfdef) {
        annotations[plan::REPOS_ANNOTATION] = json!(null);
    }
    let patch = json!({"metadata": {"annotations": annotations}});
    Api::<KfDef>::namespaced(ctx.client.clone(), &namespace)
        .patch(&name, &merge_params(), &Patch::Merge(&patch))
        .await
        .map_err(|source| Error::Unpin { kfdef: format!("{namespace}/{name}"), source })?;
    info!("spec.version names the pinned versions; pins removed");
    Ok(())
}

/// What `desired` holds for each component of the KfDef.
async fn read_published(kfdef: &KfDef, desired: &Desired<'_>) -> Result<BTreeMap<ComponentKind, Published>, BusError> {
    let (namespace, name) = object_key(kfdef);
    let mut published = BTreeMap::new();
    for component in ComponentKind::ALL {
        let key = bus::key(component, &namespace, &name);
        let entry = desired.store(component).entry(&key).await.map_err(|source| BusError::Read { key: key.clone(), source })?;
        let revision = entry.as_ref().map_or(0, |e| e.revision);
        let value = entry.filter(|e| e.operation == kv::Operation::Put).and_then(|e| match serde_json::from_slice::<DesiredComponent>(&e.value) {
            Ok(d) => Some(d),
            Err(error) => {
                warn!(%key, %error, "published desired state is undecodable; it will be replaced");
                None
            }
        });
        published.insert(component, Published { revision, desired: value });
    }
    Ok(published)
}

fn kfdef_ref(kfdef: &KfDef) -> KfDefRef {
    let (namespace, name) = object_key(kfdef);
    KfDefRef { namespace, name, uid: kfdef.uid().unwrap_or_default(), generation: kfdef.meta().generation.unwrap_or(0) }
}

async fn write(desired: &Desired<'_>, writes: Vec<Publication>) -> Result<(), BusError> {
    for write in writes {
        match write {
            Publication::Put { key, msg_id, message } => {
                nats::put_with_id(desired.js(), &desired.bucket(message.component), &key, &msg_id, &message).await.map_err(|source| BusError::Publish { key: key.clone(), source })?;
                info!(%key, cluster = desired.cluster(), version = %message.spec["version"], "published desired state");
            }
            Publication::Delete { component, key } => {
                desired.store(component).delete(&key).await.map_err(|source| BusError::Delete { key: key.clone(), source })?;
                info!(%key, cluster = desired.cluster(), "desired state withdrawn");
            }
        }
    }
    Ok(())
}

/// Publishes each component's desired spec to `desired` unless it already holds it, and deletes
/// the desired state of components that left the KfDef — unless the versions changed outside a
/// KfUpgrade in a way a KfUpgrade would refuse: then nothing is written and the refusal returned.
async fn publish(kfdef: &KfDef, desired: &Desired<'_>, plan: &plan::Plan, preview: Option<&plan::Plan>, catalog: &Catalog) -> Result<Option<EditRefused>, BusError> {
    let published = read_published(kfdef, desired).await?;
    if let Err(refused) = upgrade::check_edit(plan, &publish::published_versions(&published), catalog) {
        warn!(%refused, cluster = desired.cluster(), "version change refused; nothing published");
        return Ok(Some(refused));
    }
    write(desired, publish::publications(&kfdef_ref(kfdef), desired.cluster(), plan, preview, &published, nats::current_traceparent())).await?;
    Ok(None)
}

/// Takes the KfDef out of `desired`: the entries it wrote there, and no other.
async fn withdraw(kfdef: &KfDef, desired: &Desired<'_>) -> Result<(), BusError> {
    let published = read_published(kfdef, desired).await?;
    write(desired, publish::withdrawals(&kfdef_ref(kfdef), &published)).await
}

/// [`withdraw`] from each of the fleet clusters `names` whose bucket the hub has.
async fn withdraw_from_clusters(kfdef: &KfDef, names: &[String], bus: &Bus, ctx: &Context) -> Result<(), String> {
    let stores = ctx.state.fleet_desired.read().await.clone();
    for (cluster, store) in stores.iter().filter(|(c, _)| names.iter().any(|n| n == c.as_str())) {
        withdraw(kfdef, &Desired::Cluster { js: &bus.js, cluster, store }).await.map_err(|e| format!("cluster {cluster}: {e}"))?;
    }
    Ok(())
}

/// KfDef deleted: withdraw every component's desired state. The component resources are owned by
/// the KfDef, so the garbage collector deletes them and their operators uninstall.
async fn cleanup(kfdef: &KfDef, ctx: &Context) -> Result<Action, Error> {
    let bus = ctx.state.bus.read().await.clone().ok_or(BusError::NotConnected)?;
    let purge = kfdef.spec.deletion_policy == DeletionPolicy::Purge && kfdef.spec.placement.is_none();
    let key = object_key(kfdef);
    if purge {
        // Each component holds the Purge policy before its desired state is withdrawn: a KfDef set
        // to Purge and deleted at once is published first, and waited for.
        let catalog = ctx.state.catalog.read().await.clone();
        if let Ok(plan) = plan::plan(kfdef, ctx.platform, &catalog) {
            let reports = ctx.state.reports.read().await.get(&key).cloned().unwrap_or_default();
            let behind: Vec<String> = plan.components.iter().filter(|(c, p)| reports.get(c).is_some_and(|r| r.spec_hash != p.spec_hash)).map(|(c, _)| format!("{}: taking spec.deletionPolicy Purge", c.name())).collect();
            if !behind.is_empty() {
                publish(kfdef, &Desired::Local(&bus), &plan, None, &catalog).await?;
                return purging(kfdef, behind, ctx).await;
            }
        }
    }
    for component in ComponentKind::ALL {
        let key = bus::key(component, &kfdef.namespace().unwrap_or_default(), &kfdef.name_any());
        if bus.desired(component).get(&key).await.map_err(|source| BusError::Read { key: key.clone(), source })?.is_some() {
            bus.desired(component).delete(&key).await.map_err(|source| BusError::Delete { key: key.clone(), source })?;
        }
    }
    // From every fleet cluster: what this KfDef wrote there.
    let clusters: Vec<String> = ctx.state.fleet_desired.read().await.keys().map(|c| c.to_string()).collect();
    withdraw_from_clusters(kfdef, &clusters, &bus, ctx).await.map_err(Error::Fleet)?;
    if purge {
        // A component's report goes once its resource is gone, its purge done.
        let reports = ctx.state.reports.read().await.get(&key).cloned().unwrap_or_default();
        let waiting: Vec<String> = reports
            .iter()
            .flat_map(|(component, report)| match report.purging.is_empty() {
                true => vec![format!("{}: uninstalling", component.name())],
                false => report.purging.iter().map(|what| format!("{}: {what}", component.name())).collect(),
            })
            .collect();
        if !waiting.is_empty() {
            return purging(kfdef, waiting, ctx).await;
        }
        info!("KfDef deleted; its components uninstalled and purged");
        forget_kfdef(&ctx.metrics, &key);
        return Ok(Action::await_change());
    }
    info!("KfDef deleted; desired state of its components withdrawn");
    forget_kfdef(&ctx.metrics, &key);
    Ok(Action::await_change())
}

/// The metrics' kind of a KfDef's application (`<kfdef>/<application>`, its state as phase).
pub const APPLICATION_KIND: &str = "KfDefApplication";

/// The KfDef `(namespace, name)` is gone: its series and its applications' go with it.
pub fn forget_kfdef(metrics: &operator_runtime::metrics::Metrics, (namespace, name): &(String, String)) {
    metrics.forget("KfDef", namespace, name);
    metrics.set_phases(APPLICATION_KIND, namespace, &format!("{name}/"), &[]);
}

/// A Purge uninstall waits for `waiting`: listed in `status.purging`, and retried (the finalizer
/// stays until nothing is left).
async fn purging(kfdef: &KfDef, waiting: Vec<String>, ctx: &Context) -> Result<Action, Error> {
    let mut next = kfdef.status.clone().unwrap_or_default();
    next.purging = waiting.clone();
    write_status(kfdef, next, ctx).await?;
    let (namespace, name) = object_key(kfdef);
    Err(Error::Purging { kfdef: format!("{namespace}/{name}"), waiting })
}

/// How often the bus's streams are measured ([`measure_streams`]).
pub const STREAMS_MEASURED_EVERY: Duration = Duration::from_secs(30);

/// Measures what each stream of the bus holds (messages, bytes, consumers): every bucket of the
/// contract, and each registered fleet cluster's two on a hub. Nothing while NATS is away; a
/// stream that cannot be read is left as last measured (and logged).
pub async fn measure_streams(state: &BusState, metrics: &operator_runtime::metrics::Metrics) {
    let Some(bus) = state.bus.read().await.clone() else { return };
    let mut buckets: Vec<String> = ComponentKind::ALL.iter().map(|c| bus::desired_bucket(*c)).collect();
    buckets.extend([bus::STATUS_BUCKET.to_string(), bus::OPERATORS_BUCKET.to_string()]);
    for cluster in state.fleet_desired.read().await.keys() {
        buckets.extend([kubeflow_crds::fleet::desired_bucket(cluster), kubeflow_crds::fleet::status_bucket(cluster)]);
    }
    for bucket in buckets {
        let stream = format!("KV_{bucket}");
        let measured = async {
            let mut handle = bus.js.get_stream(&stream).await.map_err(|e| e.to_string())?;
            handle.info().await.map(|info| (info.state.messages, info.state.bytes, info.state.consumer_count)).map_err(|e| e.to_string())
        };
        match measured.await {
            Ok((messages, bytes, consumers)) => metrics.set_stream(&stream, messages, bytes, consumers),
            Err(error) => warn!(%stream, %error, "cannot measure the stream"),
        }
    }
}

/// Connects to NATS and keeps `state` in step with the status and operators buckets, relisting
/// after every reconnect. Sends the KfDef a report is about to `trigger`, `()` to `trigger_all`
/// on each connection and when an operator appears or announces new releases, and `()` to
/// `on_connect` on each connection.
pub async fn watch_bus(url: String, credentials: nats::BusCredentials, replicas: usize, state: Arc<BusState>, trigger: mpsc::UnboundedSender<ObjectRef<DeserializeGuard<KfDef>>>, trigger_all: mpsc::UnboundedSender<()>, on_connect: mpsc::UnboundedSender<()>) {
    let (nats, mut connected) = match nats::connect(&url, bus::Identity::MetaOperator, &credentials).await {
        Ok(c) => c,
        Err(e) => return warn!(error = %e, %url, "invalid NATS options"),
    };
    let js = jetstream::new(nats);
    let mut retry = retry::exponential(Duration::from_millis(200), Duration::from_secs(5));
    loop {
        let watches = async {
            let (desired, status, operators) = nats::ensure_buckets(&js, replicas).await?;
            let reports = nats::watch(|| status.watch_all_from_revision(1)).await?;
            let beats = nats::watch(|| operators.watch_all_from_revision(1)).await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((desired, reports, beats))
        };
        let (desired, mut reports, mut beats) = match watches.await {
            Ok(w) => w,
            Err(error) => {
                let delay = retry.next_backoff().unwrap_or(retry::MAX);
                warn!(%error, ?delay, "NATS not ready; retrying");
                tokio::time::sleep(delay).await;
                continue;
            }
        };
        retry.reset();
        *state.bus.write().await = Some(Bus { js: js.clone(), desired });
        connected.mark_unchanged();
        state.reports.write().await.clear();
        let _ = trigger_all.send(());
        let _ = on_connect.send(());
        loop {
            tokio::select! {
                entry = reports.next() => {
                    let Some(Ok(entry)) = entry else { break };
                    let Some((component, namespace, name)) = bus::parse_key(&entry.key) else { continue };
                    let mut all = state.reports.write().await;
                    let reports = all.entry((namespace.clone(), name.clone())).or_default();
                    match (entry.operation, serde_json::from_slice::<StatusReport>(&entry.value)) {
                        // A refresh of an unchanged report changes nothing.
                        (kv::Operation::Put, Ok(report)) if reports.get(&component) == Some(&report) => continue,
                        (kv::Operation::Put, Ok(report)) => { reports.insert(component, report); }
                        (kv::Operation::Put, Err(e)) => { warn!(key = %entry.key, error = %e, "ignoring undecodable status report"); continue; }
                        _ => { reports.remove(&component); }
                    }
                    drop(all);
                    let _ = trigger.send(ObjectRef::new(&name).within(&namespace));
                }
                entry = beats.next() => {
                    let Some(Ok(entry)) = entry else { break };
                    let Ok(component) = entry.key.parse::<ComponentKind>() else { continue };
                    let beat = match serde_json::from_slice::<Heartbeat>(&entry.value) {
                        Ok(beat) => beat,
                        Err(e) => { warn!(key = %entry.key, error = %e, "ignoring undecodable heartbeat"); continue; }
                    };
                    let learned = state.catalog.write().await.learn(component, beat.releases);
                    let previous = state.heartbeats.write().await.insert(component, beat.at);
                    let was_alive = previous.is_some_and(|at| nats::now_unix().saturating_sub(at) <= bus::HEARTBEAT_STALE.as_secs());
                    if learned {
                        info!(%component, "component operator announced its releases");
                    }
                    if !was_alive {
                        info!(%component, "component operator is alive");
                    }
                    if learned || !was_alive {
                        let _ = trigger_all.send(());
                    }
                }
                changed = connected.changed() => {
                    if changed.is_err() { return; }
                    info!("NATS reconnected; listing status again");
                    break;
                }
            }
        }
    }
}
