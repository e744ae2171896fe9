//! The framework shared by the component operators. It re-exports `kube` and `k8s-openapi` so
//! every operator builds against one version of each.

pub use k8s_openapi;
pub use kube;
pub use kubeflow_crds as api;

use clap::Args;

/// Command-line options every component operator accepts.
#[derive(Args, Debug, Clone)]
pub struct OperatorArgs {
    /// Namespace to watch component resources in; all namespaces when unset.
    #[arg(long, env = "WATCH_NAMESPACE")]
    pub namespace: Option<String>,
    /// NATS server for desired state and status (e.g. nats://127.0.0.1:4222); standalone when unset.
    #[arg(long, env = "NATS_URL")]
    pub nats_url: Option<String>,
    /// Address of the health and metrics endpoint.
    #[arg(long, env = "METRICS_ADDR", default_value = "127.0.0.1:8080")]
    pub metrics_addr: std::net::SocketAddr,
}

/// Installs the `tracing` subscriber, filtered by `RUST_LOG` (default `info`).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).init();
}
