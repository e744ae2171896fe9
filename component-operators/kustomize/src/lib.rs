//! The generic component: any kfctl application, installed from its kustomize package.
//!
//! A `KustomizeApplication` names applications (`spec.sources`: repository archive, package path,
//! overlays, parameters) instead of carrying rendered YAML. They are rendered by the framework's
//! package path ([`component_framework::package`], which built-in components whose resources name
//! packages share) and installed like any component's: kfctl's apply order, CRDs Established
//! before their custom resources, readiness, heal and drift revert, prune, cleanup with CRDs and
//! namespaces retained.

use component_framework::api::KustomizeApplication;
use component_framework::{Component, InvalidSpec, Inputs, Params, Release};
use serde_json::{Value, json};

pub struct KustomizeComponent;

impl Component for KustomizeComponent {
    type Resource = KustomizeApplication;
    const DEFAULT_NAMESPACE: &'static str = "kubeflow";
    const DISPLAY_NAME: &'static str = "Kubeflow applications (kustomize)";
    const INSTALLS: &'static str = "any Kubeflow application of a KfDef, rendered from its kustomize package the way kfctl rendered it";
    const MANAGES_ANY_KIND: bool = true;
    const RENDERS_PACKAGES: bool = true;

    /// No built-in releases: what is installed is what the spec's packages render.
    fn releases() -> &'static [Release] {
        &[]
    }

    fn example_spec() -> Value {
        json!({"version": "v1.0.2", "sources": [{"application": "jupyter-web-app", "repoUri": "https://github.com/kubeflow/manifests/archive/v1.0.2.tar.gz", "path": "jupyter/jupyter-web-app", "overlays": ["istio", "application"]}]})
    }

    fn default_parameters() -> Params {
        Params::new()
    }

    fn parameters(_resource: &KustomizeApplication, _inputs: &Inputs) -> Result<Params, InvalidSpec> {
        Ok(Params::new())
    }
}
