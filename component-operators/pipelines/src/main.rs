//! The Pipelines component operator: reconciles `Pipelines` resources (`components.kubeflow.org/v1alpha1`).

use clap::Parser;
use component_framework::OperatorArgs;

/// Kubeflow Pipelines component operator.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    operator: OperatorArgs,
}

fn main() -> std::process::ExitCode {
    component_framework::main::<pipelines_operator::PipelinesComponent>(Cli::parse().operator)
}
