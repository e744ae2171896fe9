//! The hub's FleetCluster controller. For each registered cluster it serves the cluster's gate to
//! the hub's JetStream API ([`nats::serve_leaf_api`]) and keeps a watch of the cluster's status
//! bucket on the hub: what the cluster reports goes into
//! [`BusState::fleet`](crate::controller::BusState) and triggers the KfDefs it concerns. It writes
//! the registration's status (connected, last heard from, operators), and forgets a cluster whose
//! registration is gone.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use backoff::backoff::Backoff;
use futures::{FutureExt, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::core::DeserializeGuard;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use kubeflow_crds::KfDef;
use kubeflow_crds::fleet::{self, ClusterName};
use kubeflow_crds::fleet_cluster::FleetCluster;
use operator_runtime::{nats, retry};
use serde_json::json;
use tokio::sync::{Mutex, mpsc};
use tokio::task::JoinHandle;
use tracing::{info, instrument, warn};

use crate::controller::{BusState, Context, FIELD_MANAGER};
use crate::fleet::{self as placement, Changed};

/// How often a registration's status is looked at again: it goes stale without any event.
const RECHECK: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot write the status of FleetCluster {cluster}: {source}")]
    Status { cluster: String, source: kube::Error },
}

impl Error {
    /// Label of `kfop_reconcile_errors_total{kind}`.
    pub fn category(&self) -> &'static str {
        match self {
            Error::Status { .. } => "fleet_status",
        }
    }
}

/// Where a cluster's reports are sent on.
#[derive(Clone)]
pub struct Triggers {
    /// A KfDef a report is about.
    pub kfdef: mpsc::UnboundedSender<ObjectRef<DeserializeGuard<KfDef>>>,
    /// Every KfDef: a cluster's liveness or releases changed.
    pub all_kfdefs: mpsc::UnboundedSender<()>,
    /// The registration of a cluster whose liveness changed.
    pub cluster: mpsc::UnboundedSender<ObjectRef<FleetCluster>>,
}

pub struct FleetContext {
    pub kfdefs: Arc<Context>,
    /// Copies of each bucket made on the hub.
    pub replicas: usize,
    pub triggers: Triggers,
    watchers: Mutex<BTreeMap<ClusterName, JoinHandle<()>>>,
}

impl FleetContext {
    pub fn new(kfdefs: Arc<Context>, replicas: usize, triggers: Triggers) -> Self {
        Self { kfdefs, replicas, triggers, watchers: Mutex::default() }
    }
}

#[instrument(skip_all, fields(cluster = %registration.name_any()))]
pub async fn reconcile(registration: Arc<FleetCluster>, ctx: Arc<FleetContext>) -> Result<Action, Error> {
    let state = &ctx.kfdefs.state;
    forget_unregistered(&ctx).await;
    let name = registration.name_any();
    if let Ok(cluster) = name.parse::<ClusterName>() {
        let js = state.bus.read().await.as_ref().map(|bus| bus.js.clone());
        let mut watchers = ctx.watchers.lock().await;
        let running = watchers.get(&cluster).is_some_and(|task| !task.is_finished());
        if let (false, Some(js)) = (running, js) {
            info!("watching the cluster's reports and serving its gate");
            let gate = nats::serve_leaf_api(js.client(), cluster.clone());
            let task = tokio::spawn(futures::future::join(watch_cluster(js, cluster.clone(), ctx.replicas, state.clone(), ctx.triggers.clone()), gate).map(drop));
            watchers.insert(cluster, task);
        }
    }
    let observed = match name.parse::<ClusterName>() {
        Ok(cluster) => state.fleet.read().await.get(&cluster).cloned(),
        Err(_) => None,
    };
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let next = placement::fleet_cluster_status(registration.status.as_ref(), &name, observed.as_ref(), registration.meta().generation, nats::now_unix(), &now);
    ctx.kfdefs.metrics.set_phase("FleetCluster", "", &name, Some(&connection_state(&next)));
    if registration.status.as_ref() != Some(&next) {
        let api: Api<FleetCluster> = Api::all(ctx.kfdefs.client.clone());
        let patch = json!({"apiVersion": "fleet.kubeflow.org/v1alpha1", "kind": "FleetCluster", "status": next});
        api.patch_status(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&patch)).await.map_err(|source| Error::Status { cluster: name.clone(), source })?;
    }
    Ok(Action::requeue(RECHECK))
}

/// A registration's state as its `Connected` condition says: `Connected`, else the reason it is
/// not (`Stale`, `NeverHeard`, …).
pub fn connection_state(status: &kubeflow_crds::fleet_cluster::FleetClusterStatus) -> String {
    match status.conditions.iter().find(|c| c.type_ == "Connected") {
        Some(c) if c.status == kubeflow_crds::ConditionStatus::True => "Connected".into(),
        Some(c) => c.reason.clone(),
        None => "Unknown".into(),
    }
}

pub fn error_policy(registration: Arc<FleetCluster>, error: &Error, ctx: Arc<FleetContext>) -> Action {
    warn!(%error, "FleetCluster reconcile failed");
    ctx.kfdefs.metrics.error(error.category());
    Action::requeue(ctx.kfdefs.backoffs.next(&(String::new(), registration.name_any())))
}

/// Stops watching clusters whose registration is gone, and forgets what they reported.
pub async fn forget_unregistered(ctx: &FleetContext) {
    let registered: BTreeSet<String> = ctx.kfdefs.clusters.state().iter().map(|c| c.name_any()).collect();
    let mut watchers = ctx.watchers.lock().await;
    let gone: Vec<ClusterName> = watchers.keys().filter(|c| !registered.contains(c.as_str())).cloned().collect();
    for cluster in gone {
        info!(%cluster, "registration removed; no longer watching the cluster");
        if let Some(task) = watchers.remove(&cluster) {
            task.abort();
        }
        ctx.kfdefs.state.fleet.write().await.remove(&cluster);
        ctx.kfdefs.state.fleet_desired.write().await.remove(&cluster);
    }
}

/// Makes `cluster`'s two hub buckets and follows its status bucket for as long as the task runs,
/// listing it again in full after any gap.
async fn watch_cluster(js: jetstream::Context, cluster: ClusterName, replicas: usize, state: Arc<BusState>, triggers: Triggers) {
    let mut delays = retry::exponential(Duration::from_millis(200), Duration::from_secs(5));
    loop {
        let opened = async {
            let (desired, status) = nats::ensure_fleet_buckets(&js, &cluster, replicas).await.map_err(|e| e.to_string())?;
            let watch = nats::watch(|| status.watch_all_from_revision(1)).await.map_err(|e| e.to_string())?;
            Ok::<_, String>((desired, watch))
        };
        let (desired, mut watch) = match opened.await {
            Ok(opened) => opened,
            Err(error) => {
                let delay = delays.next_backoff().unwrap_or(retry::MAX);
                warn!(%cluster, %error, ?delay, "cannot read the cluster's reports yet; retrying");
                tokio::time::sleep(delay).await;
                continue;
            }
        };
        delays.reset();
        state.fleet_desired.write().await.insert(cluster.clone(), desired);
        // Listed again in full: a report deleted during a gap goes.
        state.fleet.write().await.entry(cluster.clone()).or_default().reports.clear();
        // KfDefs placed here can publish now that the bucket exists.
        let _ = triggers.all_kfdefs.send(());
        while let Some(entry) = watch.next().await {
            let Ok(entry) = entry else { break };
            let changed = {
                let mut fleet = state.fleet.write().await;
                let observed = fleet.entry(cluster.clone()).or_default();
                match entry.operation {
                    async_nats::jetstream::kv::Operation::Put => match fleet::parse_report(&cluster, &entry.key, &entry.value) {
                        Ok(report) => observed.record(report, nats::now_unix()),
                        Err(reason) => {
                            warn!(%cluster, %reason, "ignoring a report the cluster's bucket holds");
                            Changed::Nothing
                        }
                    },
                    _ => observed.forget(&entry.key),
                }
            };
            match changed {
                Changed::Nothing => {}
                Changed::KfDef(namespace, name) => drop(triggers.kfdef.send(ObjectRef::new(&name).within(&namespace))),
                Changed::Cluster => {
                    let _ = triggers.all_kfdefs.send(());
                    let _ = triggers.cluster.send(ObjectRef::new(cluster.as_str()));
                }
            }
        }
        warn!(%cluster, "the cluster's report watch ended; listing again");
        tokio::time::sleep(delays.next_backoff().unwrap_or(retry::MAX)).await;
    }
}
