//! The Dex component operator: reconciles `Dex` resources (`components.kubeflow.org/v1alpha1`).

fn main() -> std::process::ExitCode {
    component_framework::main::<dex_operator::DexComponent>()
}
