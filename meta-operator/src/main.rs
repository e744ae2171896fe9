//! The meta-operator: splits each KfDef into one desired spec per component, publishes them over
//! NATS JetStream to the component operators, and folds their status reports into the KfDef.

use meta_operator::provision::{FleetRole, Server, Spoke};
use meta_operator::{controller, fleet_controller, upgrade_controller};

use std::sync::Arc;

use clap::Parser;
use operator_runtime::metrics::Metrics;
use operator_runtime::synced::WatchesSynced;
use operator_runtime::watches;
use futures::StreamExt;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::{Controller, watcher};
use kube::{Api, ResourceExt};
use kube::runtime::reflector::ObjectRef;
use kube::core::DeserializeGuard;
use kubeflow_crds::fleet_cluster::FleetCluster;
use kubeflow_crds::{KfDef, KfUpgrade};
use tokio::sync::mpsc;

/// Kubeflow meta-operator.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    /// NATS server(s) the component operators listen on (a comma-separated list of a cluster's nodes).
    #[arg(long, env = "NATS_URL", default_value = "nats://127.0.0.1:4222")]
    nats_url: String,
    #[command(flatten)]
    nats_credentials: operator_runtime::nats::BusCredentials,
    #[command(flatten)]
    leader_election: operator_runtime::leader::LeaderElection,
    /// Copies of each bucket the meta-operator creates (3 on a three-node JetStream cluster).
    #[arg(long, env = "NATS_REPLICAS", default_value_t = 1)]
    nats_replicas: usize,
    /// Namespace to provision the bus's TLS and identity Secrets in (the operators' own);
    /// nothing is provisioned when unset.
    #[arg(long, env = "BUS_NAMESPACE")]
    bus_namespace: Option<String>,
    /// Also apply the NATS server itself (a StatefulSet of `--nats-replicas` nodes) in the bus
    /// namespace: for installs whose packages cannot carry it (OLM).
    #[arg(long, env = "PROVISION_NATS_SERVER")]
    provision_nats_server: bool,
    /// Provision the server as the fleet's hub (with `--provision-nats-server`): JetStream domain
    /// `hub`, and a leaf port (Service `nats-leaf`, a LoadBalancer) where each registered
    /// FleetCluster's key is accepted; the configuration follows the registrations.
    #[arg(long, env = "FLEET_LEAF_PORT", requires = "provision_nats_server")]
    fleet_leaf_port: Option<u16>,
    /// This cluster is a spoke of a fleet, registered on the hub under this name: provision the
    /// server (with `--provision-nats-server`) as that spoke's, with a leaf connection out to
    /// `--fleet-hub-url`, and the cluster's NKey (Secret `nats-fleet-leaf`). A spoke's
    /// meta-operator provisions its bus and nothing else: its desired state comes from the hub.
    #[arg(long, env = "FLEET_CLUSTER", requires_all = ["provision_nats_server", "bus_namespace", "fleet_hub_url"], conflicts_with = "fleet_leaf_port")]
    fleet_cluster: Option<kubeflow_crds::fleet::ClusterName>,
    /// The hub's leaf port a spoke connects out to: `tls://<host>:<port>`.
    #[arg(long, env = "FLEET_HUB_URL", requires = "fleet_cluster", value_parser = meta_operator::provision::hub_url)]
    fleet_hub_url: Option<String>,
    /// Image of the sidecar serving each provisioned NATS server's metrics (`meta-operator
    /// nats-exporter`: this operator's own image); none when unset.
    #[arg(long, env = "NATS_EXPORTER_IMAGE")]
    nats_exporter_image: Option<String>,
    /// Make deploy/monitoring's objects (PodMonitors, PrometheusRule, dashboards) in the bus
    /// namespace once the Prometheus Operator's kinds are served: for installs whose packages
    /// cannot carry them (OLM).
    #[arg(long, env = "MONITORING_OBJECTS", requires = "bus_namespace")]
    monitoring_objects: bool,
    /// Names the spokes reach the hub's leaf port by (comma-separated): the bus certificate is
    /// issued for them too.
    #[arg(long, env = "FLEET_HUB_HOSTS", value_delimiter = ',')]
    fleet_hub_hosts: Vec<String>,
    /// Namespace to watch KfDefs in; all namespaces when unset.
    #[arg(long, env = "WATCH_NAMESPACE")]
    namespace: Option<String>,
    /// Address of the health and metrics endpoint.
    #[arg(long, env = "METRICS_ADDR", default_value = "127.0.0.1:8080")]
    metrics_addr: std::net::SocketAddr,
    #[command(flatten)]
    scrape_token: operator_runtime::server::ScrapeToken,
    #[command(flatten)]
    scrape_token_maker: operator_runtime::server::ScrapeTokenMaker,
}

/// Provisions the bus in `namespace` ([`meta_operator::provision::provision`]), retrying with
/// backoff until it is done.
async fn provision_bus(client: &kube::Client, namespace: &str, hosts: &[String], server: Option<&Server>) {
    let mut delays = operator_runtime::retry::exponential(std::time::Duration::from_millis(500), std::time::Duration::from_secs(30));
    while let Err(error) = meta_operator::provision::provision(client, namespace, hosts, server).await {
        tracing::warn!(%error, %namespace, "cannot provision the bus yet; retrying");
        tokio::time::sleep(backoff::backoff::Backoff::next_backoff(&mut delays).unwrap_or(operator_runtime::retry::MAX)).await;
    }
}

fn receiver_stream<T: Send + 'static>(rx: mpsc::UnboundedReceiver<T>) -> impl futures::Stream<Item = T> + Send + 'static {
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) })
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // The NATS server's metrics sidecar (nats_exporter), from the same image.
    if std::env::args().nth(1).as_deref() == Some("nats-exporter") {
        let args = <meta_operator::nats_exporter::ExporterArgs as clap::Parser>::parse_from(std::env::args().skip(1));
        let _telemetry = operator_runtime::telemetry::init("nats-exporter");
        return match meta_operator::nats_exporter::run(args).await {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(error) => {
                tracing::error!(%error, "nats-exporter stopped");
                std::process::ExitCode::FAILURE
            }
        };
    }
    let cli = Cli::parse();
    let _telemetry = operator_runtime::telemetry::init("meta-operator");
    let metrics = Arc::new(Metrics::new("meta"));
    // Every write is counted by the client itself, per field manager.
    let client = match operator_runtime::client::counted_client(metrics.clone()).await {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cannot build a Kubernetes client (KUBECONFIG or in-cluster config)");
            return std::process::ExitCode::FAILURE;
        }
    };
    if let Err(e) = operator_runtime::server::start(cli.metrics_addr, metrics.clone(), cli.scrape_token.clone()).await {
        tracing::error!(error = %e, addr = %cli.metrics_addr, "cannot serve the health endpoint");
        return std::process::ExitCode::FAILURE;
    }
    cli.scrape_token_maker.clone().spawn(client.clone());
    tokio::spawn(operator_runtime::memory::release_freed_periodically());
    let platform = match controller::detect_platform(&client).await {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(error = %e, "API discovery failed");
            return std::process::ExitCode::FAILURE;
        }
    };
    tracing::info!(?platform, "platform detected from API discovery");
    // A standby replica stops here: it provisions, publishes and reconciles nothing until it leads.
    let leadership = match cli.leader_election.lead(client.clone(), controller::FIELD_MANAGER, &metrics).await {
        Ok(leadership) => leadership,
        Err(e) => {
            tracing::error!(error = %e, "leader election failed");
            return std::process::ExitCode::FAILURE;
        }
    };

    if let (Some(cluster), Some(hub_url), Some(namespace)) = (cli.fleet_cluster.clone(), cli.fleet_hub_url.clone(), cli.bus_namespace.clone()) {
        let spoke = Server { replicas: cli.nats_replicas, fleet: Some(FleetRole::Spoke(Spoke { cluster, hub_url })), exporter_image: cli.nats_exporter_image.clone() };
        provision_bus(&client, &namespace, &cli.fleet_hub_hosts, Some(&spoke)).await;
        metrics.set_ready();
        tokio::select! {
            _ = meta_operator::provision::rotate_on_request(client, namespace) => {}
            _ = operator_runtime::stop_signal() => tracing::info!("stopping"),
        }
        leadership.release().await;
        return std::process::ExitCode::SUCCESS;
    }
    if let (true, Some(namespace)) = (cli.monitoring_objects, cli.bus_namespace.clone()) {
        tokio::spawn(meta_operator::monitoring::make_when_served(client.clone(), namespace));
    }
    if let Some(namespace) = cli.bus_namespace.clone() {
        // The hub's server is applied once the registrations are listed, not before: a restart
        // must not roll it onto a configuration without them.
        let server = (cli.provision_nats_server && cli.fleet_leaf_port.is_none()).then(|| Server::single_cluster(cli.nats_replicas).with_exporter(cli.nats_exporter_image.clone()));
        let (client, hosts, replicas, leaf_port, exporter) = (client.clone(), cli.fleet_hub_hosts.clone(), cli.nats_replicas, cli.fleet_leaf_port, cli.nats_exporter_image.clone());
        tokio::spawn(async move {
            provision_bus(&client, &namespace, &hosts, server.as_ref()).await;
            if let Some(leaf_port) = leaf_port {
                tokio::spawn(meta_operator::provision::follow_registrations(client.clone(), namespace.clone(), replicas, leaf_port, exporter));
            }
            meta_operator::provision::rotate_on_request(client, namespace).await;
        });
    }
    let state = Arc::new(controller::BusState::default());
    let (report_tx, mut report_rx) = mpsc::unbounded_channel::<ObjectRef<DeserializeGuard<KfDef>>>();
    let (all_tx, all_rx) = mpsc::unbounded_channel();
    let fleet_triggers = {
        let (cluster_tx, cluster_rx) = mpsc::unbounded_channel();
        (fleet_controller::Triggers { kfdef: report_tx.clone(), all_kfdefs: all_tx.clone(), cluster: cluster_tx }, cluster_rx)
    };
    // Each connection to the bus: every KfDef, and every registration (its cluster's watch
    // starts on the bus), is reconciled again.
    let (connected_tx, connected_rx) = mpsc::unbounded_channel();
    tokio::spawn(controller::watch_bus(cli.nats_url.clone(), cli.nats_credentials.clone(), cli.nats_replicas, state.clone(), report_tx, all_tx, connected_tx));
    // What the bus holds, for the metrics: measured by the leader only (this point).
    let (measured, streams_metrics) = (state.clone(), metrics.clone());
    tokio::spawn(async move {
        let mut every = tokio::time::interval(controller::STREAMS_MEASURED_EVERY);
        loop {
            every.tick().await;
            controller::measure_streams(&measured, &streams_metrics).await;
        }
    });

    // Decoded through `DeserializeGuard`: an object the types cannot read is reported and
    // skipped by the reconcilers instead of failing the watch for every other object.
    let kfdefs: Api<DeserializeGuard<KfDef>> = match &cli.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let recorder = Recorder::new(client.clone(), Reporter::from(controller::FIELD_MANAGER));
    let upgrades: Api<DeserializeGuard<KfUpgrade>> = match &cli.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    // The controllers are built on watches of our own, so readiness can be told without waiting
    // on a controller's store (see `operator_runtime::synced`).
    let mut synced = WatchesSynced::default();
    // Fleet clusters registered on this hub; none on a single cluster.
    let registrations: Api<FleetCluster> = Api::all(client.clone());
    let (cluster_store, cluster_changes) = synced.reflect_changes(registrations.clone(), watcher::Config::default().any_semantic());
    // A deleted registration is forgotten at once (its watch stopped), even the last one.
    let (unregistered_tx, mut unregistered_rx) = mpsc::unbounded_channel::<()>();
    let cluster_changes = futures::TryStreamExt::try_filter_map(cluster_changes, move |change| {
        if matches!(change, operator_runtime::watches::Change::Deleted(_)) {
            let _ = unregistered_tx.send(());
        }
        std::future::ready(Ok(change.applied()))
    });
    // The series of a resource that is gone go with it.
    let forgotten = metrics.clone();
    let ctx = Arc::new(controller::Context { client: client.clone(), state, platform, metrics: metrics.clone(), recorder, backoffs: Default::default(), clusters: cluster_store.clone() });
    let (fleet_triggers, cluster_rx) = fleet_triggers;
    let fleet_ctx = Arc::new(fleet_controller::FleetContext::new(ctx.clone(), cli.nats_replicas, fleet_triggers));
    let forgetting = fleet_ctx.clone();
    tokio::spawn(async move {
        while unregistered_rx.recv().await.is_some() {
            fleet_controller::forget_unregistered(&forgetting).await;
        }
    });
    let cluster_controller = Controller::for_stream(cluster_changes, cluster_store)
        .reconcile_on(receiver_stream(cluster_rx))
        .reconcile_all_on(receiver_stream(connected_rx))
        .trigger_backoff(watches::backoff())
        .shutdown_on_signal()
        .run(fleet_controller::reconcile, fleet_controller::error_policy, fleet_ctx)
        .for_each(|result| {
            let metrics = forgotten.clone();
            async move {
                match result {
                    Err(kube::runtime::controller::Error::ObjectNotFound(obj)) => metrics.forget("FleetCluster", "", &obj.name),
                    Err(e) => tracing::debug!(error = %e, "FleetCluster reconcile ended with an error"),
                    Ok(_) => {}
                }
            }
        });
    let (upgrade_store, upgrade_changes) = synced.reflect(upgrades, watcher::Config::default().any_semantic());
    let upgrade_controller = Controller::for_stream(upgrade_changes, upgrade_store.clone());
    // A component's report (status, or the plan of a preview) concerns its KfDef and the
    // KfUpgrades moving it.
    let (trigger_tx, trigger_rx) = mpsc::unbounded_channel();
    let (upgrade_tx, upgrade_rx) = mpsc::unbounded_channel();
    let reports_store = upgrade_store.clone();
    tokio::spawn(async move {
        while let Some(kfdef) = report_rx.recv().await {
            for upgrade in upgrade_controller::upgrades_of(&reports_store, kfdef.namespace.as_deref().unwrap_or_default(), &kfdef.name) {
                let _ = upgrade_tx.send(upgrade);
            }
            if trigger_tx.send(kfdef).is_err() {
                return;
            }
        }
    });
    // Component health reaches a KfUpgrade through its KfDef's status.
    let mapper_store = upgrade_store.clone();
    let upgrade_controller = upgrade_controller
        .watches_stream(watches::touched(kfdefs.clone(), watcher::Config::default().any_semantic()), move |kfdef: DeserializeGuard<KfDef>| match kfdef.0 {
            Ok(kfdef) => upgrade_controller::upgrades_of(&mapper_store, &kfdef.namespace().unwrap_or_default(), &kfdef.name_any()),
            Err(_) => Vec::new(),
        })
        .reconcile_on(receiver_stream(upgrade_rx))
        .trigger_backoff(watches::backoff())
        .shutdown_on_signal()
        .run(upgrade_controller::reconcile, controller::error_policy, ctx.clone())
        .for_each(|result| {
            let metrics = forgotten.clone();
            async move {
                match result {
                    // Deleted: its phase and deadline series go (a RolledBack one alerts while it exists).
                    Err(kube::runtime::controller::Error::ObjectNotFound(obj)) => upgrade_controller::forget_upgrade(&metrics, obj.namespace.as_deref().unwrap_or_default(), &obj.name),
                    Err(e) => tracing::debug!(error = %e, "KfUpgrade reconcile ended with an error"),
                    Ok(_) => {}
                }
            }
        });
    let (kfdef_store, kfdef_changes) = synced.reflect(kfdefs, watcher::Config::default().any_semantic());
    let kfdef_controller = Controller::for_stream(kfdef_changes, kfdef_store.clone());
    // Ready once both controllers have listed what they watch.
    tokio::spawn(async move {
        synced.wait().await;
        metrics.set_ready();
    });
    // A registration's change (labels, namespaces) concerns every KfDef placed by a selector or name.
    let kfdef_controller = kfdef_controller
        .watches_stream(watches::touched(registrations, watcher::Config::default().any_semantic()), move |_: FleetCluster| {
            kfdef_store.state().iter().filter(|k| k.0.as_ref().is_ok_and(|k| k.spec.placement.is_some())).map(|k| ObjectRef::from_obj(k.as_ref())).collect::<Vec<_>>()
        })
        .reconcile_on(receiver_stream(trigger_rx))
        .reconcile_all_on(receiver_stream(all_rx))
        .trigger_backoff(watches::backoff())
        .shutdown_on_signal()
        .run(controller::reconcile, controller::error_policy, ctx)
        .for_each(|result| {
            let metrics = forgotten.clone();
            async move {
                match result {
                    Err(kube::runtime::controller::Error::ObjectNotFound(obj)) => {
                        tracing::debug!(%obj, "KfDef gone");
                        controller::forget_kfdef(&metrics, &(obj.namespace.clone().unwrap_or_default(), obj.name.clone()));
                    }
                    Err(e) => tracing::warn!(error = %e, "reconcile failed"),
                    Ok(_) => {}
                }
            }
        });
    futures::join!(kfdef_controller, upgrade_controller, cluster_controller);
    leadership.release().await;
    std::process::ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// clap checks a command's arguments (unique names, valid defaults) only when it is built.
    #[test]
    fn the_command_line_is_well_formed() {
        super::Cli::command().debug_assert();
    }
}
