//! The Istio component operator: reconciles `Istio` resources (`components.kubeflow.org/v1alpha1`).

fn main() -> std::process::ExitCode {
    // Before any reconcile, prune or cleanup looks up the kinds of the 1.24/1.28 template.
    istio_operator::register_kinds();
    component_framework::main::<istio_operator::IstioComponent>()
}
