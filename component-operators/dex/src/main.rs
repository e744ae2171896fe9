//! The Dex component operator: reconciles `Dex` resources (`components.kubeflow.org/v1alpha1`).

use clap::Parser;
use component_framework::OperatorArgs;

/// Kubeflow Dex component operator.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    operator: OperatorArgs,
}

fn main() -> std::process::ExitCode {
    component_framework::main::<dex_operator::DexComponent>(Cli::parse().operator)
}
