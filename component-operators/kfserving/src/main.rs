//! The KFServing component operator: reconciles `KFServing` resources (`components.kubeflow.org/v1alpha1`).

fn main() -> std::process::ExitCode {
    // Before any reconcile, prune or cleanup looks up the kinds of KServe's template.
    kfserving_operator::register_kinds();
    component_framework::main::<kfserving_operator::KFServingComponent>()
}
