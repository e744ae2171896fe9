//! The KFServing component operator: reconciles `KFServing` resources (`components.kubeflow.org/v1alpha1`).

fn main() -> std::process::ExitCode {
    component_framework::main::<kfserving_operator::KFServingComponent>()
}
