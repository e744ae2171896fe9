//! What a component operator provides to the framework: its resource type, its built-in versions,
//! and the pure steps that turn a resource into parameters for the version's manifest.

use std::collections::BTreeMap;

use kubeflow_crds::bus::ReleaseInfo;
use kubeflow_crds::component::{ApplicationBuild, ComponentResource, SecretKeyRef};
use serde_json::{Value, json};

use crate::manifest::Params;

/// One built-in version of a component.
#[derive(Debug, Clone, Copy)]
pub struct Release {
    pub version: &'static str,
    /// Multi-document YAML template (see [`crate::manifest`]); usually shared by all releases.
    pub manifest: &'static str,
    /// Parameters that differ between releases (images, labels, optional objects).
    pub params: &'static [(&'static str, &'static str)],
    /// Versions a component may be upgraded from directly to this one.
    pub upgrades_from: &'static [&'static str],
    /// Kubeflow releases (major.minor, e.g. `"1.3"`) whose version of the component this is.
    pub kubeflow: &'static [&'static str],
}

impl Release {
    /// How the operator announces this release on the bus.
    pub fn info(&self) -> ReleaseInfo {
        ReleaseInfo {
            version: self.version.to_string(),
            upgrades_from: self.upgrades_from.iter().map(|v| v.to_string()).collect(),
            kubeflow: self.kubeflow.iter().map(|v| v.to_string()).collect(),
            covers_later: false,
        }
    }
}

/// `C`'s releases as its operator announces them, oldest first: the latest also covers later
/// Kubeflow releases ([`ReleaseInfo::covers_later`]) when the component renders upstream's packages
/// and can tell their version from its own images ([`Component::VERSION_IMAGES`]).
pub fn announced_releases<C: Component + ?Sized>() -> Vec<ReleaseInfo> {
    let mut releases: Vec<ReleaseInfo> = C::releases().iter().map(Release::info).collect();
    if let Some(latest) = releases.last_mut() {
        latest.covers_later = C::RENDERS_PACKAGES && !C::VERSION_IMAGES.is_empty();
    }
    releases
}

/// Where upstream ships one of a component's releases: the Kubeflow release (kubeflow/manifests
/// tag) whose archive holds it, and the component's applications in it. A resource that names no
/// repository renders these ([`crate::package::render_for`]) unless the operator runs with
/// `--built-in-templates`, the archive rewritten by the remote base mirrors (an air-gapped
/// cluster's copy). Every built-in release of a component that renders packages has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpstreamRelease {
    /// The component's version ([`Release::version`]): what the release's packages run
    /// ([`Component::VERSION_IMAGES`] are tagged with it there).
    pub version: &'static str,
    /// The kubeflow/manifests tag, e.g. `v1.11.0`.
    pub kubeflow: &'static str,
    /// `(KfDef application, path in the archive)`, in install order.
    pub applications: &'static [(&'static str, &'static str)],
}

impl UpstreamRelease {
    /// The release's archive on github.com.
    pub fn archive(&self) -> String {
        kubeflow_manifests::example::upstream_archive(self.kubeflow)
    }

    /// The rules its packages are built by.
    pub fn era(&self) -> kubeflow_crds::kfdef::Era {
        kubeflow_crds::kfdef::Era::of_version(Some(self.kubeflow))
    }

    /// How they are built: kfctl's stacks for a kfctl-era release (its KfDefs list them), one
    /// `kustomize build` per application after.
    pub fn mode(&self) -> kubeflow_crds::component::RenderMode {
        match self.era() {
            kubeflow_crds::kfdef::Era::Kfctl => kubeflow_crds::component::RenderMode::Stacks,
            _ => kubeflow_crds::component::RenderMode::PerApplication,
        }
    }

    /// The kustomize the release names for its packages, if one.
    pub fn kustomize(&self) -> Option<kubeflow_crds::kfdef::KustomizeRelease> {
        kubeflow_crds::kfdef::KustomizeRelease::of_kubeflow(self.kubeflow)
    }
}

/// An HTTP endpoint an operator serves besides health and metrics (e.g. an API for users).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    /// Port name, and the suffix of its Service (`<operator>-<name>`).
    pub name: &'static str,
    pub port: u16,
    /// Command-line flag that takes the listen address, e.g. `--kfam-addr`.
    pub flag: &'static str,
}

/// A field of the resource's spec that is invalid, with what is allowed instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InvalidSpec {
    /// JSON path of the field, e.g. `spec.overrides.images.katib-ui`.
    pub field: String,
    pub message: String,
    /// Whether waiting may fix it (e.g. a referenced Secret not created yet).
    pub retry: bool,
}

impl InvalidSpec {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { field: field.into(), message: message.into(), retry: false }
    }
    pub fn retryable(mut self) -> Self {
        self.retry = true;
        self
    }
}

/// An application that could not be rendered. What it installed before is kept as it is (not
/// applied, not pruned) while the component's other applications go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplicationFailure {
    pub application: String,
    pub error: InvalidSpec,
}

/// Objects rendered outside the built-in releases ([`Component::render_external`]), one group
/// per KfDef application.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rendered {
    /// Objects of the applications that rendered, each annotated with
    /// [`crate::build::APPLICATION_ANNOTATION`].
    pub objects: Vec<Value>,
    /// Every application, in spec order (those that failed included).
    pub applications: Vec<String>,
    pub failed: Vec<ApplicationFailure>,
    /// Per application that rendered, how: the kustomize release, its objects converted from
    /// removed API versions counted per kind.
    pub builds: BTreeMap<String, ApplicationBuild>,
    /// Per application, each conversion described (object, versions, what moved) for a reader.
    pub conversion_details: BTreeMap<String, Vec<String>>,
    /// Per application, what it is told while it stays Ready (an object another application
    /// renders otherwise, and whose version is applied): its status message and a Warning Event.
    pub notes: BTreeMap<String, Vec<String>>,
    /// With `spec.versionFromPackage`, the version the packages run
    /// ([`crate::package::package_version`]): the objects are labelled with it and it is reported.
    pub version: Option<String>,
}

/// Data read from the cluster that the spec refers to (dereference step).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Inputs {
    /// Values of referenced Secret keys, by (secret name, key).
    pub secrets: BTreeMap<(String, String), String>,
    /// Objects rendered outside the built-in releases ([`Component::render_external`]).
    pub rendered: Option<Rendered>,
}

impl Inputs {
    /// Whether the objects being built are upstream's packages ([`Inputs::rendered`]: the
    /// resource's sources, or its release's archive) rather than the built-in template; a
    /// component's typed spec is then written where the package keeps each setting.
    pub fn from_packages(&self) -> bool {
        self.rendered.is_some()
    }

    pub fn secret(&self, reference: &SecretKeyRef) -> Option<&str> {
        self.secrets.get(&(reference.name.clone(), reference.key.clone())).map(String::as_str)
    }
}

/// A custom resource kind a built-in release ships besides the framework's own kinds (its CRD
/// comes in the same release): (group, version, kind, plural, cluster-scoped).
pub type CustomKind = (&'static str, &'static str, &'static str, &'static str, bool);

/// Makes `C`'s [`Component::CUSTOM_KINDS`] known to [`crate::kinds::lookup`]; idempotent. Every
/// build does it, and the operator at start-up (a prune or cleanup may look them up first).
pub fn register_custom_kinds<C: Component>() {
    for (group, version, kind, plural, cluster_scoped) in C::CUSTOM_KINDS {
        // Interned once each; a full registry (kinds the operators' own code ships never fill it) is
        // answered where they are looked up.
        let _ = crate::kinds::register(group, version, kind, plural, *cluster_scoped);
    }
}

/// A Kubeflow component as the framework sees it.
pub trait Component: Send + Sync + 'static {
    type Resource: ComponentResource;

    /// Custom resource kinds its releases ship, at the versions their CRDs there serve.
    const CUSTOM_KINDS: &'static [CustomKind] = &[];

    /// Namespace the namespaced objects go to unless `spec.targetNamespace` says otherwise.
    const DEFAULT_NAMESPACE: &'static str;

    /// Built-in versions, oldest first.
    fn releases() -> &'static [Release];

    /// Title of the component's OLM package.
    const DISPLAY_NAME: &'static str = Self::Resource::COMPONENT.kind();

    /// What the operator installs, completing "Installs and upgrades …" on its OLM package page.
    const INSTALLS: &'static str;

    /// Whether the component installs objects of any kind (rendered from packages it does not
    /// ship) rather than only the kinds of its releases: then every built-in kind is watched,
    /// healed and granted to the operator.
    const MANAGES_ANY_KIND: bool = false;

    /// Kinds of [`crate::kinds::KINDS`] that upstream's packages of the component's releases
    /// install (`registry/tests/upstream.rs` holds this to the renders of every release archive
    /// kept in `../shared/manifests`): watched, healed and readable by the operator, besides the
    /// kinds of its built-in templates.
    const INSTALLED_KINDS: &'static [&'static str] = &[];

    /// Component-specific spec fields (top-level names) that [`Component::customize`] applies to
    /// the objects of packages too, as edits where upstream's package keeps the setting
    /// ([`crate::package::patch`]). Any other one a resource that names packages sets is refused,
    /// naming the field: it would otherwise be silently ignored.
    const PACKAGE_FIELDS: &'static [&'static str] = &[];

    /// Whether the operator renders packages it does not ship (untrusted input) with kustomize:
    /// deploy/all then runs its renderer beside it, a pod with no credential and no network
    /// (`kubeflow_manifests::remote`), and the operator sends every build there.
    const RENDERS_PACKAGES: bool = false;

    /// Where upstream ships the component's releases, for those it knows ([`UpstreamRelease`]).
    const UPSTREAM_RELEASES: &'static [UpstreamRelease] = &[];

    /// Images (repository paths, matched at their end: `istio/pilot`) that run the component
    /// itself and are tagged with its version in every release. A package that runs one at
    /// another tag is not the resource's version: that application is refused
    /// ([`crate::package::version_evidence`]) rather than installed and labelled as it.
    const VERSION_IMAGES: &'static [&'static str] = &[];

    /// Endpoints the operator serves besides health and metrics; deploy/ exposes each one.
    const ENDPOINTS: &'static [Endpoint] = &[];

    /// Component-specific spec fields of the example resource its OLM package shows.
    fn example_spec() -> Value {
        json!({})
    }

    /// Component-specific spec fields end-to-end tests and benchmarks create the resource with;
    /// they must build without any referenced Secret.
    fn test_spec() -> Value {
        json!({})
    }

    /// Secret keys the spec references, with the spec field that references each.
    fn secret_refs(_resource: &Self::Resource) -> Vec<(String, SecretKeyRef)> {
        Vec::new()
    }

    /// Default values of the parameters this component's templates use (besides the built-in
    /// `namespace`, `version`, `instance` and `instanceNamespace`). Only these may be overridden.
    fn default_parameters() -> Params;

    /// Parameters derived from the component-specific spec fields and dereferenced inputs (pure).
    fn parameters(resource: &Self::Resource, inputs: &Inputs) -> Result<Params, InvalidSpec>;

    /// ClusterRole rules for what the operator does besides installing its releases (e.g. a
    /// controller of its own resources); most components need none.
    fn extra_rules() -> Vec<k8s_openapi::api::rbac::v1::PolicyRule> {
        Vec::new()
    }

    /// Objects rendered outside the built-in releases: by default, when the resource's
    /// `spec.sources` name packages (a KfDef's applications), upstream's packages as they render
    /// ([`crate::package::render`]), for a component that renders packages. `Some` replaces the
    /// release template. Runs in the dereference step, so it may do I/O; kinds the objects use
    /// must be known to [`crate::kinds::lookup`] when it returns. `Err` refuses the whole spec; an
    /// application that fails alone goes to [`Rendered::failed`].
    fn render_external(resource: &Self::Resource, client: &kube::Client) -> impl std::future::Future<Output = Option<Result<Rendered, InvalidSpec>>> + Send {
        let (resource, client) = (resource.clone(), client.clone());
        async move { crate::package::render_for::<Self>(&resource, crate::package::Discovery::Cluster(&client), crate::package::fetch_options()).await }
    }

    /// Last adjustments to the rendered objects (pure; `inputs` holds the Secret keys
    /// [`Component::secret_refs`] named); most components need none.
    fn customize(_resource: &Self::Resource, _inputs: &Inputs, _objects: &mut Vec<Value>) -> Result<(), InvalidSpec> {
        Ok(())
    }
}

/// The release for `version`, or an error listing the versions this operator ships.
pub fn release<C: Component>(version: &str) -> Result<&'static Release, InvalidSpec> {
    C::releases().iter().find(|r| r.version == version).ok_or_else(|| {
        let supported: Vec<_> = C::releases().iter().map(|r| r.version).collect();
        InvalidSpec::new("spec.version", format!("version {version:?} is not supported; supported versions: {}", supported.join(", ")))
    })
}

/// Every object of every built-in release of `C`, rendered with default parameters (builtins
/// set to a placeholder). For questions about what a component can ship, not for applying.
pub fn shipped_objects<C: Component>() -> Vec<serde_json::Value> {
    use kubeflow_crds::component::ComponentResource;
    let mut params = C::default_parameters();
    for builtin in ["namespace", "version", "instance", "instanceNamespace"] {
        params.insert(builtin.into(), "x".into());
    }
    C::releases()
        .iter()
        .flat_map(|release| {
            let mut params = params.clone();
            params.extend(release.params.iter().map(|(k, v)| (k.to_string(), v.to_string())));
            crate::manifest::render(release.manifest, &params)
                .unwrap_or_else(|e| panic!("release {} of {}: {e}", release.version, C::Resource::COMPONENT))
        })
        .collect()
}
