//! The meta-operator's driver: KfDef → plan → desired state on NATS → status from NATS → KfDef
//! status. Everything that talks to the API server or NATS is here; the decisions are in
//! [`crate::plan`] and [`crate::aggregate`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, kv};
use kubeflow_crds::bus::{self, DesiredComponent, Heartbeat, KfDefRef, StatusReport};
use operator_runtime::metrics::Metrics;
use operator_runtime::nats;
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::finalizer::{self, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client, Resource, ResourceExt};
use kubeflow_crds::component::{ComponentKind, Platform};
use kubeflow_crds::kfdef::{KfDef, KfDefPhase};
use serde_json::json;
use tokio::sync::{RwLock, mpsc};
use tracing::{info, instrument, warn};

use crate::aggregate::{self, Observed};
use crate::catalog::Catalog;
use crate::plan::{self, Plan};

pub const FINALIZER: &str = "kfdef.apps.kubeflow.org/cleanup";
pub const FIELD_MANAGER: &str = "kubeflow-meta-operator";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API call failed: {0}")]
    Kube(#[from] kube::Error),
    #[error("finalizer handling failed: {0}")]
    Finalizer(#[source] Box<finalizer::Error<Error>>),
    #[error("NATS: {0}")]
    Bus(String),
}

impl Error {
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "api",
            Error::Finalizer(_) => "finalizer",
            Error::Bus(_) => "nats",
        }
    }
}

/// NATS handles, once connected.
#[derive(Clone)]
pub struct Bus {
    pub js: jetstream::Context,
    pub desired: kv::Store,
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
}

pub struct Context {
    pub client: Client,
    pub state: Arc<BusState>,
    pub platform: Platform,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
}

/// OpenShift serves `security.openshift.io` (SecurityContextConstraints); plain Kubernetes does not.
pub async fn detect_platform(client: &Client) -> Result<Platform, kube::Error> {
    let groups = client.list_api_groups().await?;
    Ok(if groups.groups.iter().any(|g| g.name == "security.openshift.io") { Platform::OpenShift } else { Platform::Kubernetes })
}

#[instrument(skip_all, fields(kfdef = %kfdef.name_any(), namespace = kfdef.namespace().unwrap_or_default()))]
pub async fn reconcile(kfdef: Arc<KfDef>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    ctx.metrics.reconcile_started();
    let api: Api<KfDef> = Api::namespaced(ctx.client.clone(), &kfdef.namespace().unwrap_or_default());
    let result = finalizer(&api, FINALIZER, kfdef, |event| async {
        match event {
            finalizer::Event::Apply(kfdef) => apply(&kfdef, &ctx).await,
            finalizer::Event::Cleanup(kfdef) => cleanup(&kfdef, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)));
    ctx.metrics.reconcile_finished(started.elapsed());
    result
}

pub fn error_policy_upgrade(_up: Arc<kubeflow_crds::KfUpgrade>, error: &Error, ctx: Arc<Context>) -> Action {
    warn!(%error, "KfUpgrade reconcile failed");
    ctx.metrics.error(error.metric_label());
    Action::requeue(Duration::from_secs(5))
}

pub fn error_policy(_kfdef: Arc<KfDef>, error: &Error, ctx: Arc<Context>) -> Action {
    warn!(%error, "reconcile failed");
    ctx.metrics.error(error.metric_label());
    Action::requeue(Duration::from_secs(5))
}

async fn apply(kfdef: &KfDef, ctx: &Context) -> Result<Action, Error> {
    let catalog = ctx.state.catalog.read().await.clone();
    let plan = plan::plan(kfdef, ctx.platform, &catalog);
    let bus_error = match &plan {
        Ok(plan) => publish(kfdef, plan, ctx).await.err().map(|e| e.to_string()),
        Err(_) => None,
    };
    let key = (kfdef.namespace().unwrap_or_default(), kfdef.name_any());
    let reports = ctx.state.reports.read().await.get(&key).cloned().unwrap_or_default();
    let heartbeats = ctx.state.heartbeats.read().await.clone();
    let observed = Observed { reports: &reports, heartbeats: &heartbeats, now_unix: nats::now_unix(), bus_error };
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let platform = format!("{:?}", ctx.platform);
    let next = aggregate::kfdef_status(kfdef.status.as_ref(), kfdef.meta().generation, plan.as_ref(), &observed, &platform, &now);
    if kfdef.status.as_ref() != Some(&next) {
        let api: Api<KfDef> = Api::namespaced(ctx.client.clone(), &key.0);
        let patch = json!({"apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef", "status": next});
        ctx.metrics.write();
        api.patch_status(&key.1, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&patch)).await?;
        let before = kfdef.status.as_ref().and_then(|s| s.phase);
        if before != next.phase {
            let (type_, reason) = match next.phase {
                Some(KfDefPhase::Available) => (EventType::Normal, "Available"),
                Some(KfDefPhase::Degraded) => (EventType::Warning, "Degraded"),
                _ => (EventType::Normal, "Progressing"),
            };
            let note = next.conditions.iter().find(|c| c.type_ == if reason == "Available" { "Available" } else { reason }).map(|c| c.message.clone()).unwrap_or_default();
            let event = Event { type_, reason: reason.into(), note: Some(note), action: "Reconcile".into(), secondary: None };
            ctx.metrics.write();
            let _ = ctx.recorder.publish(&event, &kfdef.object_ref(&())).await;
        }
    }
    // Status reports and operator heartbeats arrive as triggers; the requeue notices operators
    // that stop sending heartbeats.
    Ok(Action::requeue(if next.phase == Some(KfDefPhase::Available) { Duration::from_secs(30) } else { Duration::from_secs(5) }))
}

/// Publishes each component's desired spec unless NATS already holds it, and deletes the desired
/// state of components that left the KfDef.
async fn publish(kfdef: &KfDef, plan: &Plan, ctx: &Context) -> Result<(), Error> {
    let bus = ctx.state.bus.read().await.clone().ok_or_else(|| Error::Bus("not connected to NATS yet".into()))?;
    let (namespace, name) = (kfdef.namespace().unwrap_or_default(), kfdef.name_any());
    let kfdef_ref = KfDefRef { namespace: namespace.clone(), name: name.clone(), uid: kfdef.uid().unwrap_or_default(), generation: kfdef.meta().generation.unwrap_or(0) };
    for component in ComponentKind::ALL {
        let key = bus::key(component, &namespace, &name);
        let entry = bus.desired.entry(&key).await.map_err(|e| Error::Bus(e.to_string()))?;
        let revision = entry.as_ref().map_or(0, |e| e.revision);
        let current: Option<DesiredComponent> = entry.filter(|e| e.operation == kv::Operation::Put).and_then(|e| serde_json::from_slice(&e.value).ok());
        match plan.components.get(&component) {
            Some(wanted) => {
                if current.as_ref().is_some_and(|c| c.spec_hash == wanted.spec_hash && c.kfdef.uid == kfdef_ref.uid) {
                    continue;
                }
                let message = DesiredComponent {
                    kfdef: kfdef_ref.clone(),
                    component,
                    spec_hash: wanted.spec_hash.clone(),
                    spec: wanted.spec.clone(),
                    traceparent: nats::current_traceparent(),
                };
                // Besides uid, generation and component, the id carries the spec hash and the key's
                // current revision: a KfUpgrade pin changes a spec without a new generation, and a
                // rollback returns to an earlier spec; both must not be dropped as duplicates, while
                // a retried publish of the same change (same revision) still is.
                let msg_id = format!("{}.{}.{component}.{}.{revision}", kfdef_ref.uid, kfdef_ref.generation, wanted.spec_hash);
                nats::put_with_id(&bus.js, bus::DESIRED_BUCKET, &key, &msg_id, &message).await.map_err(|e| Error::Bus(e.to_string()))?;
                info!(%key, version = %wanted.version, "published desired state");
            }
            None if current.is_some() && !plan.unresolved.contains_key(&component) => {
                bus.desired.delete(&key).await.map_err(|e| Error::Bus(e.to_string()))?;
                info!(%key, "component left the KfDef; desired state deleted");
            }
            None => {}
        }
    }
    Ok(())
}

/// KfDef deleted: withdraw every component's desired state. The component resources are owned by
/// the KfDef, so the garbage collector deletes them and their operators uninstall.
async fn cleanup(kfdef: &KfDef, ctx: &Context) -> Result<Action, Error> {
    let bus = ctx.state.bus.read().await.clone().ok_or_else(|| Error::Bus("not connected to NATS yet; cannot withdraw desired state".into()))?;
    for component in ComponentKind::ALL {
        let key = bus::key(component, &kfdef.namespace().unwrap_or_default(), &kfdef.name_any());
        if bus.desired.get(&key).await.map_err(|e| Error::Bus(e.to_string()))?.is_some() {
            bus.desired.delete(&key).await.map_err(|e| Error::Bus(e.to_string()))?;
        }
    }
    info!("KfDef deleted; desired state of its components withdrawn");
    Ok(Action::await_change())
}

/// Connects to NATS and keeps `state` in step with the status and operators buckets, relisting
/// after every reconnect. Sends the KfDef a report is about to `trigger`, and `()` to
/// `trigger_all` when an operator appears.
pub async fn watch_bus(url: String, state: Arc<BusState>, trigger: mpsc::UnboundedSender<ObjectRef<KfDef>>, trigger_all: mpsc::UnboundedSender<()>) {
    let (nats, mut connected) = match nats::connect(&url, "meta-operator").await {
        Ok(c) => c,
        Err(e) => return warn!(error = %e, %url, "invalid NATS options"),
    };
    let js = jetstream::new(nats);
    loop {
        let (desired, status, operators) = match nats::buckets(&js).await {
            Ok(b) => b,
            Err(e) => {
                warn!(error = %e, "NATS not ready; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        *state.bus.write().await = Some(Bus { js: js.clone(), desired });
        connected.mark_unchanged();
        let (mut reports, mut beats) = match (status.watch_all_from_revision(1).await, operators.watch_all_from_revision(1).await) {
            (Ok(r), Ok(b)) => (r, b),
            _ => {
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        state.reports.write().await.clear();
        let _ = trigger_all.send(());
        loop {
            tokio::select! {
                entry = reports.next() => {
                    let Some(Ok(entry)) = entry else { break };
                    let Some((component, namespace, name)) = bus::parse_key(&entry.key) else { continue };
                    let mut all = state.reports.write().await;
                    let reports = all.entry((namespace.clone(), name.clone())).or_default();
                    match (entry.operation, serde_json::from_slice::<StatusReport>(&entry.value)) {
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
