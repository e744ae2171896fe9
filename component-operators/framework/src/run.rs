//! Wiring a [`Component`] into a running controller: the watch on its resource, label-selected
//! watches on every kind it ships (namespaced and cluster-scoped) feeding the caches reconciles
//! read from, the health/metrics endpoint (ready once the caches have synced).

use std::collections::BTreeSet;
use std::sync::Arc;

use futures::StreamExt;
use kube::api::DynamicObject;
use kube::core::DeserializeGuard;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, watcher};
use kube::{Api, ResourceExt};
use kubeflow_crds::component::{ComponentKind, ComponentResource};
use tracing::{info, warn};

use crate::OperatorArgs;
use crate::build::{OWNER_ANNOTATION, PART_OF_LABEL};
use crate::component::Component;
use crate::kinds::{self, KindInfo};
use crate::live::LiveObjects;
use crate::metrics::Metrics;
use crate::installer::Impersonation;
use crate::reconcile::{self, Context};

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot build a Kubernetes client (KUBECONFIG or in-cluster config): {0}")]
    Client(#[source] kube::Error),
    #[error("cannot serve the health endpoint: {0}")]
    Server(#[from] std::io::Error),
    #[error(transparent)]
    LeaderElection(#[from] operator_runtime::leader::LeaderElectionError),
}

/// Kinds that appear in any built-in release of `C`, its templates' or upstream's packages'
/// ([`Component::INSTALLED_KINDS`]) (every built-in kind when it manages any kind), and are
/// watched (shared kinds are not).
pub fn watched_kinds<C: Component>() -> Vec<&'static KindInfo> {
    // No operator reads Secrets cluster-wide: those it installs are read, when needed, as the
    // account that installs them.
    let watched = |k: &&KindInfo| !k.is_shared() && k.kind != "Secret";
    if C::MANAGES_ANY_KIND {
        return kinds::KINDS.iter().filter(watched).collect();
    }
    let mut seen: BTreeSet<&str> = crate::component::shipped_objects::<C>()
        .iter()
        .filter_map(|object| kinds::lookup(object["apiVersion"].as_str().unwrap_or_default(), object["kind"].as_str().unwrap_or_default()))
        .map(|info| info.kind)
        .collect();
    seen.extend(C::INSTALLED_KINDS);
    kinds::KINDS.iter().filter(|k| seen.contains(k.kind)).filter(watched).collect()
}

/// Maps an owned object to the component resource named in its owner annotation.
/// Objects of resources outside the watched namespace (if any) are ignored.
fn owner_of<K: ComponentResource>(object: &DynamicObject, watched: Option<&str>) -> Option<ObjectRef<DeserializeGuard<K>>> {
    let owner = object.annotations().get(OWNER_ANNOTATION)?;
    let (namespace, name) = owner.split_once('/')?;
    if watched.is_some_and(|w| w != namespace) {
        return None;
    }
    Some(ObjectRef::new(name).within(namespace))
}

/// The field manager of `component`'s operator: its applies, deletes and status writes (and
/// `kfop plan`'s dry runs, which must see the fields as that manager owns them).
pub fn field_manager(component: ComponentKind) -> String {
    format!("kubeflow-{component}-operator")
}

/// Runs the operator for component `C` until SIGTERM/SIGINT.
pub async fn run<C: Component>(args: OperatorArgs) -> Result<(), RunError> {
    let component = C::Resource::COMPONENT;
    crate::component::register_custom_kinds::<C>();
    let metrics = Arc::new(Metrics::new(component.name()));
    // Every write the operator sends (applies, deletes, status, events, NATS-mode resources) is
    // counted by the client itself, per field manager.
    let client = operator_runtime::client::counted_client(metrics.clone()).await.map_err(RunError::Client)?;
    let field_manager = field_manager(component);
    crate::server::start(args.metrics_addr, metrics.clone(), args.scrape_token.clone()).await?;
    args.scrape_token_maker.clone().spawn(client.clone());
    tokio::spawn(operator_runtime::memory::release_freed_periodically());
    // A standby replica stops here: it neither watches nor reads the bus until it leads.
    let leadership = args.leader_election.lead(client.clone(), &field_manager, &metrics).await?;

    let resources: Api<DeserializeGuard<C::Resource>> = match &args.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let mut live = LiveObjects::default();
    let deleted = live.report_deletions();
    let (store, changed) = live.synced.reflect(resources, watcher::Config::default().any_semantic());
    let mut controller = Controller::for_stream(changed, store.clone());
    let selector = format!("{PART_OF_LABEL}={}", component.name());
    // One watch per shipped kind: it fills the cache reconciles read live objects from, and each
    // event triggers the resource that owns the object.
    for info in watched_kinds::<C>() {
        let stream = live.watch(&client, info, &selector);
        let watched = args.namespace.clone();
        let store = store.clone();
        let is_crd = info.is_crd();
        controller = controller.watches_stream_with(
            stream,
            move |o| {
                // A shared CRD concerns every resource of the component this operator watches.
                let all: Vec<ObjectRef<DeserializeGuard<C::Resource>>> = if is_crd { store.state().iter().map(|r| ObjectRef::from_obj(r.as_ref())).collect() } else { Vec::new() };
                owner_of::<C::Resource>(&o, watched.as_deref()).into_iter().chain(all)
            },
            info.api_resource(),
        );
    }
    // The CRDs of custom kinds another install brings (KServe's cert-manager Issuer): their
    // objects wait for them (reconcile), and a change of one (created, Established) brings every
    // resource back. Only names; operators that may list CRDs (those that ship some).
    let foreign_crds: BTreeSet<String> = C::CUSTOM_KINDS.iter().map(|(group, _, _, plural, _)| kinds::crd_name(group, plural)).collect();
    if !foreign_crds.is_empty() && watched_kinds::<C>().iter().any(|k| k.is_crd()) {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        use kube::core::PartialObjectMeta;
        let crds = operator_runtime::watches::touched(Api::<PartialObjectMeta<CustomResourceDefinition>>::all(client.clone()), watcher::Config::default());
        let store = store.clone();
        controller = controller.watches_stream(crds, move |crd| {
            let concerned = foreign_crds.contains(&crd.name_any());
            concerned.then(|| store.state().iter().map(|r| ObjectRef::from_obj(r.as_ref())).collect::<Vec<_>>()).unwrap_or_default()
        });
    }
    let recorder = Recorder::new(client.clone(), Reporter::from(field_manager.as_str()));
    let status_sender = args.nats_url.clone().map(|url| crate::nats_mode::start::<C>(client.clone(), url, args.nats_credentials.clone(), args.namespace.clone()));
    // Ready once every cache holds its first full list: before that a reconcile would take
    // existing objects for missing ones.
    let (synced, ready) = (live.clone(), metrics.clone());
    tokio::spawn(async move {
        synced.wait_until_ready().await;
        ready.set_ready();
        info!("caches synced; ready");
    });
    let impersonation = match args.install_as_self {
        false => Some(Impersonation::new(kube::Config::infer().await.map_err(|e| RunError::Client(kube::Error::InferConfig(e)))?, metrics.clone(), args.default_service_account.clone())),
        true => None,
    };
    let ctx = Arc::new(Context::<C>::new(client.clone(), field_manager.clone(), recorder, metrics.clone(), status_sender, live, impersonation));
    tokio::spawn(crate::heal::run(deleted, store.clone(), ctx.desired.clone(), field_manager, metrics.clone()));
    info!(%component, namespace = args.namespace.as_deref().unwrap_or("<all>"), "controller started");
    controller
        // The controller pauses every trigger after an error from any watch; keep that short.
        .trigger_backoff(operator_runtime::watches::backoff())
        .shutdown_on_signal()
        .run(reconcile::reconcile::<C>, reconcile::error_policy::<C>, ctx)
        .for_each(|result| async move {
            match result {
                // Owned objects of a resource that is gone (e.g. deleted during cleanup).
                Err(kube::runtime::controller::Error::ObjectNotFound(obj)) => tracing::debug!(%obj, "resource gone"),
                Err(e) => warn!(error = %e, "reconcile failed"),
                Ok(_) => {}
            }
        })
        .await;
    leadership.release().await;
    Ok(())
}
