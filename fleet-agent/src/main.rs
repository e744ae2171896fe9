//! The fleet agent of a spoke cluster: see the library's documentation.

use std::sync::Arc;

use clap::Parser;
use kubeflow_crds::bus::Identity;
use kubeflow_crds::fleet::{self, ClusterName};
use operator_runtime::metrics::Metrics;

/// Relays a spoke cluster's desired state from the hub and its status to the hub.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    /// This cluster's name, as registered on the hub (its JetStream domain too).
    #[arg(long, env = "FLEET_CLUSTER")]
    cluster: ClusterName,
    /// The cluster's own NATS server(s), whose leaf node connection reaches the hub.
    #[arg(long, env = "NATS_URL", default_value = "nats://127.0.0.1:4222")]
    nats_url: String,
    /// Copies of each of the cluster's buckets the agent makes (3 on a three-node JetStream cluster).
    #[arg(long, env = "NATS_REPLICAS", default_value_t = 1)]
    nats_replicas: usize,
    #[command(flatten)]
    nats_credentials: operator_runtime::nats::BusCredentials,
    /// Address of the health and metrics endpoint.
    #[arg(long, env = "METRICS_ADDR", default_value = "127.0.0.1:8080")]
    metrics_addr: std::net::SocketAddr,
    #[command(flatten)]
    scrape_token: operator_runtime::server::ScrapeToken,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let _telemetry = operator_runtime::telemetry::init("fleet-agent");
    let metrics = Arc::new(Metrics::new("fleet-agent"));
    if let Err(e) = operator_runtime::server::start(cli.metrics_addr, metrics.clone(), cli.scrape_token.clone()).await {
        tracing::error!(error = %e, addr = %cli.metrics_addr, "cannot serve the health endpoint");
        return std::process::ExitCode::FAILURE;
    }
    let inbox = fleet::agent_inbox_prefix(&cli.cluster);
    let (client, _) = match operator_runtime::nats::connect_with_inbox(&cli.nats_url, Identity::FleetAgent, &inbox, &cli.nats_credentials).await {
        Ok(connected) => connected,
        Err(e) => {
            tracing::error!(error = %e, "cannot connect to the cluster's NATS server");
            return std::process::ExitCode::FAILURE;
        }
    };
    let local = async_nats::jetstream::new(client.clone());
    // The desired bucket is read through the hub's gate, the status bucket written in its domain.
    let hub_gate = async_nats::jetstream::with_prefix(client.clone(), &fleet::leaf_api_prefix(&cli.cluster));
    let hub = async_nats::jetstream::with_domain(client, fleet::HUB_DOMAIN);
    metrics.set_ready();
    tracing::info!(cluster = %cli.cluster, "fleet agent started");
    let desired = fleet_agent::relay_desired(cli.cluster.clone(), hub_gate, local.clone(), cli.nats_replicas);
    let status = fleet_agent::relay_status(cli.cluster, hub, local, cli.nats_replicas);
    tokio::select! {
        _ = desired => {}
        _ = status => {}
        _ = operator_runtime::stop_signal() => tracing::info!("stopping"),
    }
    std::process::ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        super::Cli::command().debug_assert();
    }
}
