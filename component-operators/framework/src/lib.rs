//! The framework shared by the component operators: one reconcile pipeline for every component.
//!
//! dereference (read referenced Secrets) → validate + build the desired objects for `spec.version`
//! ([`build`], pure) → server-side apply with the operator's field manager, skipping objects already
//! as desired ([`reconcile`]) → prune what left the set (from the inventory in status) → status
//! ([`status`], pure) → Events. A component only supplies its releases and parameters
//! ([`component::Component`]).
//!
//! It re-exports `kube` and `k8s-openapi` so every operator builds against one version of each.

pub use k8s_openapi;
pub use kube;
pub use kubeflow_crds as api;
pub use kubeflow_crds::bus;
pub use operator_runtime::{metrics, server, telemetry};

pub mod build;
pub mod component;
pub mod handover;
pub mod heal;
pub mod installer;
pub mod kinds;
pub mod live;
pub mod manifest;
pub mod nats_mode;
pub mod package;
pub mod plan;
pub mod rbac;
pub mod readiness;
pub mod render_diff;
pub mod reconcile;
pub mod run;
pub mod status;
pub mod webhook_gate;

pub use component::{Component, Endpoint, InvalidSpec, Inputs, Release, UpstreamRelease};
pub use manifest::Params;
pub use run::run;

use clap::Args;

/// Command-line options every component operator accepts.
#[derive(Args, Debug, Clone)]
pub struct OperatorArgs {
    /// Namespace to watch component resources in; all namespaces when unset.
    #[arg(long, env = "WATCH_NAMESPACE")]
    pub namespace: Option<String>,
    /// NATS server(s) for desired state and status (e.g. tls://nats:4222, or a comma-separated
    /// list of a cluster's nodes); standalone when unset.
    #[arg(long, env = "NATS_URL")]
    pub nats_url: Option<String>,
    #[command(flatten)]
    pub nats_credentials: operator_runtime::nats::BusCredentials,
    #[command(flatten)]
    pub leader_election: operator_runtime::leader::LeaderElection,
    /// Address of the health and metrics endpoint.
    #[arg(long, env = "METRICS_ADDR", default_value = "127.0.0.1:8080")]
    pub metrics_addr: std::net::SocketAddr,
    #[command(flatten)]
    pub scrape_token: operator_runtime::server::ScrapeToken,
    #[command(flatten)]
    pub scrape_token_maker: operator_runtime::server::ScrapeTokenMaker,
    /// ServiceAccount (in each resource's namespace) that resources of a component installing as
    /// a ServiceAccount (the generic one) use when they name none; without it such resources are
    /// refused, never installed with the operator's own rights.
    #[arg(long, env = "DEFAULT_SERVICE_ACCOUNT")]
    pub default_service_account: Option<String>,
    /// Install with this process's own identity instead of a ServiceAccount's: only for `kfop`,
    /// which runs as the very user asking for the install. Never set for an operator.
    #[arg(skip)]
    pub install_as_self: bool,
}

/// The whole `main` of a component operator binary: parse the command line (`--help` names the
/// component), log, run until a signal.
pub fn main<C: Component>() -> std::process::ExitCode {
    use clap::{Args, FromArgMatches};
    use kubeflow_crds::component::ComponentResource;
    let name = format!("{}-operator", C::Resource::COMPONENT.name());
    let mut command = OperatorArgs::augment_args(clap::Command::new(name.clone()).version(env!("CARGO_PKG_VERSION")).about(format!("Kubeflow {} component operator", C::DISPLAY_NAME)));
    if C::RENDERS_PACKAGES {
        command = package::command::augment(command);
    }
    let matches = command.get_matches();
    if let Some((tool, sub)) = matches.subcommand() {
        let _telemetry = telemetry::init(&format!("{}-renderer", C::Resource::COMPONENT.name()));
        return package::command::run_tool(tool, sub);
    }
    let args = OperatorArgs::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let _telemetry = telemetry::init(&name);
    if C::RENDERS_PACKAGES
        && let Err(e) = package::command::configure(&matches)
    {
        tracing::error!(error = %e, "operator stopped");
        eprintln!("{name}: {e}");
        return std::process::ExitCode::FAILURE;
    }
    run_until_stopped::<C>(args)
}

/// Runs the operator of `C` with `args` until a signal (telemetry already set up): the end of
/// every operator's `main`.
pub fn run_until_stopped<C: Component>(args: OperatorArgs) -> std::process::ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    match runtime.block_on(run::<C>(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "operator stopped");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    /// clap checks a command's arguments (unique names, valid defaults) only when it is built.
    #[test]
    fn the_operator_command_line_is_well_formed() {
        use clap::Args;
        super::OperatorArgs::augment_args(clap::Command::new("katib-operator")).debug_assert();
    }
}
