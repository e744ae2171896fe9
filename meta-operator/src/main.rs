//! The meta-operator: watches KfDef and KfUpgrade resources.

use clap::Parser;

/// Kubeflow meta-operator.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    /// NATS server the component operators listen on.
    #[arg(long, env = "NATS_URL", default_value = "nats://127.0.0.1:4222")]
    nats_url: String,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let _telemetry = component_framework::telemetry::init("meta-operator");
    tracing::error!(?cli, "the KfDef reconcile loop is not implemented in this release");
    std::process::ExitCode::from(2)
}
