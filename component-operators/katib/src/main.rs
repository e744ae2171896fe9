//! The katib component operator: reconciles `components.kubeflow.org` resources of its kind.

use clap::Parser;
use component_framework::OperatorArgs;

/// Kubeflow katib component operator.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    operator: OperatorArgs,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    component_framework::init_tracing();
    tracing::error!(?cli, "the katib reconcile loop is not implemented in this release");
    std::process::ExitCode::from(2)
}
