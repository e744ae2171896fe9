//! The Katib component operator: reconciles `Katib` resources (`components.kubeflow.org/v1alpha1`).

fn main() -> std::process::ExitCode {
    component_framework::main::<katib_operator::KatibComponent>()
}
