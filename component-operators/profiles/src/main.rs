//! The profiles component operator: installs Kubeflow's Profile API as a component
//! (`ProfileController`, `components.kubeflow.org/v1alpha1`), reconciles Profiles
//! (`kubeflow.org/v1`) and serves the KFAM-compatible contributors API.

use std::sync::Arc;

use clap::{Args, FromArgMatches};
use component_framework::OperatorArgs;
use profiles_operator::{ProfilesComponent, cloud, controller, kfam};

#[derive(Args, Debug)]
struct ProfilesArgs {
    /// Address of the KFAM-compatible API (e.g. 0.0.0.0:8081); not served when unset.
    #[arg(long, env = "KFAM_ADDR")]
    kfam_addr: Option<std::net::SocketAddr>,
}

fn main() -> std::process::ExitCode {
    let command = clap::Command::new("profiles-operator").version(env!("CARGO_PKG_VERSION")).about("Kubeflow Profiles component operator");
    let matches = ProfilesArgs::augment_args(OperatorArgs::augment_args(command)).get_matches();
    let operator = OperatorArgs::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let profiles = ProfilesArgs::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let _telemetry = component_framework::telemetry::init("profiles-operator");
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let result: Result<(), String> = runtime.block_on(async move {
        let client = kube::Client::try_default().await.map_err(|e| format!("cannot build a Kubernetes client: {e}"))?;
        let shared = kfam::Shared::default();
        if let Some(addr) = profiles.kfam_addr {
            kfam::start(addr, shared.clone()).await.map_err(|e| format!("cannot serve the KFAM API on {addr}: {e}"))?;
        }
        let namespace = operator.namespace.clone();
        tokio::spawn(controller::run(client, namespace, Arc::new(cloud::Unconfigured), shared));
        component_framework::run::<ProfilesComponent>(operator).await.map_err(|e| e.to_string())
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "operator stopped");
            std::process::ExitCode::FAILURE
        }
    }
}
