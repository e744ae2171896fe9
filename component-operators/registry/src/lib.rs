//! The component operators, registered once. A component is declared in the API
//! ([`kubeflow_crds::component::ComponentKind`]: name, kind, kfctl applications, upgrade position)
//! and implemented by a crate implementing [`Component`]; [`all`] has one line per such crate.
//! The deploy packages, the OLM bundles and the end-to-end tests and benchmarks derive their lists
//! from here. (The meta-operator does not link the components: it learns their releases from the
//! running operators' heartbeats.)

use component_framework::component::{InvalidSpec, Rendered, shipped_objects};
use component_framework::package::{self, FetchOptions};
use component_framework::kinds::KindInfo;
use component_framework::run::RunError;
use component_framework::{Component, Inputs, OperatorArgs};
use futures::future::BoxFuture;
use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::Resource;
use kube::core::ApiResource;
use kubeflow_crds::bus::ReleaseInfo;
use kubeflow_crds::component::{ComponentKind, ComponentResource};
use serde_json::{Value, json};

/// Everything outside a component operator needs to know about it, without its types.
pub struct RegisteredComponent {
    pub kind: ComponentKind,
    /// The operator's binary, Deployment and ServiceAccount name: `<component>-operator`.
    pub operator: String,
    /// The CRD of the component resource.
    pub crd: Value,
    /// ClusterRole rules derived from the operator's code.
    pub rules: Vec<PolicyRule>,
    /// Kinds of the objects its releases ship and it watches.
    pub watched_kinds: Vec<&'static KindInfo>,
    /// Built-in releases, oldest first.
    pub releases: Vec<ReleaseInfo>,
    /// Title of its OLM package.
    pub display_name: &'static str,
    /// What it installs, completing "Installs and upgrades …".
    pub installs: &'static str,
    /// Component-specific spec fields of the OLM package's example resource.
    pub example_spec: Value,
    /// Component-specific spec fields tests and benchmarks create the resource with.
    pub test_spec: Value,
    /// Endpoints the operator serves besides health and metrics.
    pub endpoints: &'static [component_framework::Endpoint],
    /// [`Component::VERSION_IMAGES`]: the images that run the component, tagged with its version.
    pub version_images: &'static [&'static str],
    /// [`Component::RENDERS_PACKAGES`]: deploy/all runs a renderer beside the operator.
    pub renders_packages: bool,
    /// [`Component::INSTALLED_KINDS`]: the kinds upstream's packages of its releases install.
    pub installed_kinds: &'static [&'static str],
    /// [`Component::UPSTREAM_RELEASES`]: where upstream ships each release.
    pub upstream_releases: &'static [component_framework::UpstreamRelease],
    /// The objects the operator applies for a resource `name` in `namespace` with `spec`: from
    /// its built-in releases, or from the packages [`RegisteredComponent::render_packages`]
    /// rendered for it.
    pub render: fn(&str, &str, &Value, Option<Rendered>) -> Result<Vec<Value>, InvalidSpec>,
    /// The packages the resource `name` in `namespace` with `spec` installs from, rendered with no
    /// cluster (kinds outside the framework's list taken for namespaced custom resources), when
    /// the component renders packages and the spec names them (`None` otherwise).
    pub render_packages: fn(String, String, Value, FetchOptions) -> BoxFuture<'static, Option<Result<Rendered, InvalidSpec>>>,
    /// Runs the component's controller in this process until SIGTERM/SIGINT (or until the
    /// future is dropped): what the operator binary runs, for `kfop apply`/`delete`.
    pub run: fn(OperatorArgs) -> BoxFuture<'static, Result<(), RunError>>,
    /// Every object of every release, rendered with default parameters.
    pub shipped_objects: fn() -> Vec<Value>,
}

impl RegisteredComponent {
    /// The version of this component that belongs to Kubeflow `kubeflow` (`1.3`, `v1.3.1`): the
    /// one listed for that patch release, else for its minor release.
    pub fn version_for(&self, kubeflow: &str) -> Option<&str> {
        kubeflow_crds::bus::release_for(&self.releases, kubeflow).map(|r| r.version.as_str())
    }

    /// Where the API server serves the component resource.
    pub fn api_resource(&self) -> ApiResource {
        self.kind.api_resource()
    }
}

fn resource<C: Component>(name: &str, namespace: &str, spec: &Value) -> Result<C::Resource, InvalidSpec> {
    serde_json::from_value(json!({
        "apiVersion": C::Resource::api_version(&()), "kind": C::Resource::kind(&()),
        "metadata": {"name": name, "namespace": namespace}, "spec": spec,
    }))
    .map_err(|e| InvalidSpec::new("spec", e.to_string()))
}

fn render<C: Component>(name: &str, namespace: &str, spec: &Value, rendered: Option<Rendered>) -> Result<Vec<Value>, InvalidSpec> {
    component_framework::build::desired_objects::<C>(&resource::<C>(name, namespace, spec)?, &Inputs { rendered, ..Default::default() })
}

fn render_packages<C: Component>(name: String, namespace: String, spec: Value, fetch: FetchOptions) -> BoxFuture<'static, Option<Result<Rendered, InvalidSpec>>> {
    Box::pin(async move {
        let resource = match resource::<C>(&name, &namespace, &spec) {
            Ok(resource) => resource,
            Err(e) => return Some(Err(e)),
        };
        package::render_for::<C>(&resource, package::Discovery::Offline, fetch).await
    })
}

fn run<C: Component>(args: OperatorArgs) -> BoxFuture<'static, Result<(), RunError>> {
    Box::pin(component_framework::run::run::<C>(args))
}

fn register<C: Component>() -> RegisteredComponent
where
    C::Resource: kube::CustomResourceExt,
{
    let kind = C::Resource::COMPONENT;
    RegisteredComponent {
        kind,
        operator: format!("{kind}-operator"),
        crd: serde_json::to_value(<C::Resource as kube::CustomResourceExt>::crd()).expect("CRDs serialise"),
        rules: component_framework::rbac::cluster_role_rules::<C>(),
        watched_kinds: component_framework::run::watched_kinds::<C>(),
        releases: component_framework::component::announced_releases::<C>(),
        display_name: C::DISPLAY_NAME,
        installs: C::INSTALLS,
        example_spec: C::example_spec(),
        test_spec: C::test_spec(),
        endpoints: C::ENDPOINTS,
        renders_packages: C::RENDERS_PACKAGES,
        upstream_releases: C::UPSTREAM_RELEASES,
        installed_kinds: C::INSTALLED_KINDS,
        render: render::<C>,
        render_packages: render_packages::<C>,
        version_images: C::VERSION_IMAGES,
        run: run::<C>,
        shipped_objects: shipped_objects::<C>,
    }
}

/// Every component operator, in the order of [`ComponentKind::ALL`].
pub fn all() -> Vec<RegisteredComponent> {
    vec![
        register::<istio_operator::IstioComponent>(),
        register::<dex_operator::DexComponent>(),
        register::<kfserving_operator::KFServingComponent>(),
        register::<katib_operator::KatibComponent>(),
        register::<pipelines_operator::PipelinesComponent>(),
        register::<profiles_operator::ProfilesComponent>(),
        register::<kustomize_operator::KustomizeComponent>(),
    ]
}

/// The registered component `kind`.
pub fn get(kind: ComponentKind) -> RegisteredComponent {
    all().into_iter().find(|c| c.kind == kind).unwrap_or_else(|| panic!("component {kind} is declared in the API but not registered"))
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;

    #[test]
    fn the_registry_covers_exactly_the_declared_components() {
        assert_eq!(all().iter().map(|c| c.kind).collect::<Vec<_>>(), ComponentKind::ALL);
        assert_eq!(get(ComponentKind::Katib).operator, "katib-operator");
        assert_eq!(get(ComponentKind::Pipelines).api_resource().plural, "pipelines");
    }

    #[test]
    fn each_kubeflow_release_has_at_most_one_version_of_each_component_and_the_kfctl_releases_have_all() {
        let registry = all();
        let tags: BTreeSet<&str> = registry.iter().flat_map(|c| &c.releases).flat_map(|r| &r.kubeflow).map(String::as_str).collect();
        assert_eq!(tags, BTreeSet::from(["1.2", "1.3", "1.3.1", "1.10", "1.10.2", "1.11"]));
        for tag in &tags {
            for component in registry.iter().filter(|c| !c.releases.is_empty()) {
                let versions: Vec<&str> = component.releases.iter().filter(|r| r.kubeflow.iter().any(|k| k == tag)).map(|r| r.version.as_str()).collect();
                assert!(versions.len() <= 1, "Kubeflow {tag} has versions {versions:?} of {}", component.kind);
            }
        }
        // The generic component has no built-in releases: what it installs is what its spec renders.
        assert!(get(ComponentKind::KustomizeApplication).releases.is_empty());
        // Kubeflow 1.2 and 1.3 (kfctl's) in full; from 1.10 the components that ship it, the rest
        // of such a KfDef goes to the generic component (profiles: only when the KfDef names it).
        let of = |tag: &str| registry.iter().filter_map(|c| c.version_for(tag).map(|v| (c.kind.name(), v))).collect::<BTreeMap<_, _>>();
        assert_eq!(of("1.2"), BTreeMap::from([("istio", "1.3.1"), ("dex", "v2.22.0"), ("kfserving", "v0.4.1"), ("katib", "v0.10.0"), ("pipelines", "1.0.4"), ("profiles", "v1.2.0")]));
        assert_eq!(of("1.3"), BTreeMap::from([("istio", "1.9.6"), ("dex", "v2.24.0"), ("kfserving", "v0.5.1"), ("katib", "v0.11.0"), ("pipelines", "1.5.0"), ("profiles", "v1.3.0")]));
        assert_eq!(of("1.10"), BTreeMap::from([("istio", "1.24.3"), ("dex", "v2.41.1"), ("kfserving", "v0.15.0"), ("katib", "v0.18.0"), ("pipelines", "2.5.0"), ("profiles", "v1.10.0")]));
        assert_eq!(of("1.11"), BTreeMap::from([("istio", "1.28.0"), ("dex", "v2.44.0"), ("kfserving", "v0.15.2"), ("katib", "v0.19.0"), ("pipelines", "2.15.0"), ("profiles", "v1.10.0")]));
        // Patch releases whose versions differ from their minor release's (what their archives
        // run; compared with ../shared/manifests in tests/upstream.rs).
        assert_eq!(of("v1.3.1"), BTreeMap::from([("istio", "1.9.6"), ("dex", "v2.24.0"), ("kfserving", "v0.5.1"), ("katib", "v0.11.1"), ("pipelines", "1.5.1"), ("profiles", "v1.3.0")]));
        assert_eq!(of("v1.10.2"), BTreeMap::from([("istio", "1.26.1"), ("dex", "v2.41.1"), ("kfserving", "v0.15.0"), ("katib", "v0.18.0"), ("pipelines", "2.5.0"), ("profiles", "v1.10.0")]));
        assert_eq!(of("v1.11.0"), of("1.11"));
    }

    /// A resource that names no repository installs its release from upstream's archive: every
    /// built-in release of a component that renders packages says where upstream ships it.
    #[test]
    fn every_release_of_a_component_that_renders_packages_names_its_upstream_archive() {
        for component in all().iter().filter(|c| c.renders_packages) {
            for release in &component.releases {
                let shipped: Vec<_> = component.upstream_releases.iter().filter(|u| u.version == release.version).collect();
                assert_eq!(shipped.len(), 1, "{} {}: {shipped:?}", component.kind, release.version);
                assert!(release.kubeflow.iter().all(|k| shipped[0].kubeflow.trim_start_matches('v').starts_with(k.as_str())), "{} {}: shipped in {}, announced for {:?}", component.kind, release.version, shipped[0].kubeflow, release.kubeflow);
            }
        }
    }

    /// What upstream's packages install is watched (healed) and readable, not only what the
    /// templates hold: e.g. Istio's HorizontalPodAutoscalers and PodDisruptionBudgets, Pipelines'
    /// NetworkPolicies and PriorityClass.
    #[test]
    fn each_operator_watches_the_kinds_upstreams_packages_install() {
        for component in all() {
            let watched: Vec<&str> = component.watched_kinds.iter().map(|k| k.kind).collect();
            for kind in component.installed_kinds {
                let info = component_framework::kinds::KINDS.iter().find(|k| k.kind == *kind).unwrap_or_else(|| panic!("{}: {kind} is not a built-in kind", component.kind));
                // Shared kinds (namespaces, CRDs) and Secrets are never watched (run::watched_kinds).
                assert_eq!(watched.contains(kind), !info.is_shared() && *kind != "Secret", "{} {kind}", component.kind);
            }
        }
        let pipelines = all().into_iter().find(|c| c.kind == ComponentKind::Pipelines).unwrap();
        assert!(pipelines.rules.iter().any(|r| r.resources.as_ref().is_some_and(|r| r.iter().any(|p| p == "networkpolicies"))), "{:?}", pipelines.rules);
    }

    #[test]
    fn test_specs_build_at_every_release() {
        for component in all() {
            for release in &component.releases {
                let mut spec = json!({"version": release.version, "targetNamespace": "team"});
                spec.as_object_mut().unwrap().extend(component.test_spec.as_object().cloned().unwrap_or_default());
                let objects = (component.render)("reference", "team", &spec, None).unwrap_or_else(|e| panic!("{} {}: {e}", component.kind, release.version));
                let workload = |o: &Value| o["kind"] == "Deployment" || o["kind"] == "StatefulSet";
                // Profiles ships no workload of its own: its operator is the controller.
                let ships_workloads = (component.shipped_objects)().iter().any(workload);
                assert!(!objects.is_empty() && (!ships_workloads || objects.iter().any(workload)), "{} {}", component.kind, release.version);
            }
        }
    }
}
