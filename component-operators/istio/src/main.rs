//! The Istio component operator: reconciles `Istio` resources (`components.kubeflow.org/v1alpha1`).

fn main() -> std::process::ExitCode {
    component_framework::main::<istio_operator::IstioComponent>()
}
