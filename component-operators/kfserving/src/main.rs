//! The kfserving component operator: reconciles `components.kubeflow.org` resources of its kind.

use clap::Parser;
use component_framework::OperatorArgs;

/// Kubeflow kfserving component operator.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    operator: OperatorArgs,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    component_framework::init_tracing();
    tracing::error!(?cli, "the kfserving reconcile loop is not implemented in this release");
    std::process::ExitCode::from(2)
}
