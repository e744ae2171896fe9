//! The Pipelines component operator: reconciles `Pipelines` resources (`components.kubeflow.org/v1alpha1`).

fn main() -> std::process::ExitCode {
    component_framework::main::<pipelines_operator::PipelinesComponent>()
}
