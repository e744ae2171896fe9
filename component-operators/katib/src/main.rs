//! The Katib component operator: reconciles `Katib` resources (`components.kubeflow.org/v1alpha1`).

use clap::Parser;
use component_framework::OperatorArgs;

/// Kubeflow Katib component operator.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    operator: OperatorArgs,
}

fn main() -> std::process::ExitCode {
    component_framework::main::<katib_operator::KatibComponent>(Cli::parse().operator)
}
