//! The KFServing component operator: reconciles `KFServing` resources (`components.kubeflow.org/v1alpha1`).

use clap::Parser;
use component_framework::OperatorArgs;

/// Kubeflow KFServing component operator.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    operator: OperatorArgs,
}

fn main() -> std::process::ExitCode {
    component_framework::main::<kfserving_operator::KFServingComponent>(Cli::parse().operator)
}
