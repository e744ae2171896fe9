//! The pipelines component operator: reconciles `components.kubeflow.org` resources of its kind.

use clap::Parser;
use component_framework::OperatorArgs;

/// Kubeflow pipelines component operator.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    operator: OperatorArgs,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    component_framework::init_tracing();
    tracing::error!(?cli, "the pipelines reconcile loop is not implemented in this release");
    std::process::ExitCode::from(2)
}
