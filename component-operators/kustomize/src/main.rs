//! The generic component operator: reconciles `KustomizeApplication` resources
//! (`components.kubeflow.org/v1alpha1`).

fn main() -> std::process::ExitCode {
    component_framework::main::<kustomize_operator::KustomizeComponent>()
}
