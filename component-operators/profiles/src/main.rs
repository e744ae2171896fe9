//! The profiles component operator: installs Kubeflow's Profile API as a component
//! (`ProfileController`, `components.kubeflow.org/v1alpha1`), reconciles Profiles
//! (`kubeflow.org/v1`) and serves the KFAM-compatible contributors API.

use std::sync::Arc;

use clap::{Args, FromArgMatches};
use component_framework::OperatorArgs;
use profiles_operator::{ProfilesComponent, cloud, controller, kfam, settings};

#[derive(Args, Debug)]
struct ProfilesArgs {
    /// Address of the KFAM-compatible API (e.g. 0.0.0.0:8081); not served when unset.
    #[arg(long, env = "KFAM_ADDR")]
    kfam_addr: Option<std::net::SocketAddr>,
    /// The ProfileController whose settings apply to every Profile, as <namespace>/<name>, or
    /// <namespace> for the oldest managed one there. By default the oldest managed one in
    /// --platform-namespace, else in the operator's own namespace (--namespace, else
    /// POD_NAMESPACE, else the leader election's namespace, else the pod's). Every other
    /// ProfileController is Degraded and installs nothing.
    #[arg(long = "settings", env = "PROFILE_SETTINGS", value_name = "NAMESPACE[/NAME]")]
    settings: Option<String>,
    /// The platform admin's KfDef namespace (deploy/ sets it): the meta-operator puts that
    /// KfDef's ProfileController there, so its oldest managed one is the settings.
    #[arg(long = "platform-namespace", env = "PLATFORM_NAMESPACE")]
    platform_namespace: Option<String>,
}

fn main() -> std::process::ExitCode {
    let command = clap::Command::new("profiles-operator").version(env!("CARGO_PKG_VERSION")).about("Kubeflow Profiles component operator");
    let matches = ProfilesArgs::augment_args(OperatorArgs::augment_args(command)).get_matches();
    let operator = OperatorArgs::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let profiles = ProfilesArgs::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let _telemetry = component_framework::telemetry::init("profiles-operator");
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let result: Result<(), String> = runtime.block_on(async move {
        let config = kube::Config::infer().await.map_err(|e| format!("cannot configure a Kubernetes client: {e}"))?;
        let client = operator_runtime::client::client_for(config).map_err(|e| format!("cannot build a Kubernetes client: {e}"))?;
        let pod_namespace = std::env::var("POD_NAMESPACE").ok();
        let own = [operator.namespace.as_deref(), pod_namespace.as_deref(), operator.leader_election.lease_namespace.as_deref()];
        let designation = settings::Designation::from_args(profiles.settings.as_deref(), profiles.platform_namespace.as_deref(), &own, client.default_namespace())?;
        tracing::info!(?designation, "the cluster's Profile settings");
        let source = settings::Source::start(client.clone(), designation);
        // Whether a ProfileController in the operators' namespace is the oldest there needs their
        // list: wait for it (a while) before reconciling any.
        if tokio::time::timeout(std::time::Duration::from_secs(30), source.wait_until_ready()).await.is_err() {
            tracing::warn!("the ProfileControllers of the settings' namespace are not listed yet; those there wait");
        }
        settings::install(source.clone());
        let shared = kfam::Shared::default();
        if let Some(addr) = profiles.kfam_addr {
            // Registration claims go where every replica may write Leases: the election's
            // namespace, else the pod's.
            let claims = operator.leader_election.lease_namespace.as_deref().or(pod_namespace.as_deref());
            kfam::start(addr, shared.clone(), claims).await.map_err(|e| format!("cannot serve the KFAM API on {addr}: {e}"))?;
        }
        tokio::spawn(controller::run(client, source, Arc::new(cloud::Unconfigured), shared));
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
