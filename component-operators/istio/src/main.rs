//! The Istio component operator: reconciles `Istio` resources (`components.kubeflow.org/v1alpha1`).

use clap::Parser;
use component_framework::OperatorArgs;

/// Kubeflow Istio component operator.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    operator: OperatorArgs,
}

fn main() -> std::process::ExitCode {
    component_framework::main::<istio_operator::IstioComponent>(Cli::parse().operator)
}
