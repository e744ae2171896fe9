//! The component resources (`components.kubeflow.org/v1alpha1`): `Istio`, `Dex`, `KFServing`,
//! `Katib`, `Pipelines`, `ProfileController`. Each spec is the shared [`ComponentSpecCore`] (flattened) plus the fields
//! that only matter to that component; all share [`ComponentStatus`].

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{Condition, NameValue};

pub const GROUP: &str = "components.kubeflow.org";
pub const VERSION: &str = "v1alpha1";

/// Accepted shape of a component version; see [`crate::validation::VERSION`].
pub const VERSION_PATTERN: &str = crate::validation::VERSION;

/// Declares the component kinds, once: each one's enum variant, lower-case name, Kubernetes kind
/// and resource type, the kfctl applications it covers and its default position in an upgrade.
/// Everything that lists components derives from this.
macro_rules! component_kinds {
    ($(
        $variant:ident {
            name: $name:literal,
            resource: $resource:ident,
            kind: $kind:literal,
            upgrade_position: $position:literal,
            applications: [$($application:literal),* $(,)?] $(,)?
        }
    ),* $(,)?) => {
        /// The components the operators manage.
        #[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema)]
        pub enum ComponentKind {
            $(#[serde(rename = $name)] $variant,)*
        }

        impl ComponentKind {
            pub const ALL: [ComponentKind; [$($name),*].len()] = [$(Self::$variant),*];

            /// Lower-case name used in NATS subjects, labels and KfDef status keys.
            pub const fn name(self) -> &'static str {
                match self { $(Self::$variant => $name,)* }
            }

            /// Kubernetes kind of the component resource.
            pub const fn kind(self) -> &'static str {
                match self { $(Self::$variant => $kind,)* }
            }

            /// The kfctl applications (KfDef `spec.applications[].name`) this component installs.
            pub const fn applications(self) -> &'static [&'static str] {
                match self { $(Self::$variant => &[$($application),*],)* }
            }

            /// Position in an upgrade that names no order (lower moves first).
            pub const fn upgrade_position(self) -> u8 {
                match self { $(Self::$variant => $position,)* }
            }

            /// The CRD of the component resource.
            pub fn crd(self) -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
                match self { $(Self::$variant => <$resource as kube::CustomResourceExt>::crd(),)* }
            }
        }

        $(
            impl ComponentResource for $resource {
                const COMPONENT: ComponentKind = ComponentKind::$variant;
                fn core(&self) -> &ComponentSpecCore {
                    &self.spec.core
                }
                fn component_status(&self) -> Option<&ComponentStatus> {
                    self.status.as_ref()
                }
            }
        )*
    };
}

component_kinds! {
    Istio {
        name: "istio",
        resource: Istio,
        kind: "Istio",
        upgrade_position: 1,
        applications: ["istio-crds", "istio-install", "istio-stack", "cluster-local-gateway", "istio", "kfserving-gateway", "add-anonymous-user-filter"],
    },
    Dex {
        name: "dex",
        resource: Dex,
        kind: "Dex",
        upgrade_position: 2,
        applications: ["dex", "dex-crds", "dex-auth"],
    },
    KFServing {
        name: "kfserving",
        resource: KFServing,
        kind: "KFServing",
        upgrade_position: 3,
        // `kserve` and its models web app: Kubeflow 1.10/1.11's names (KServe releases; upstream's
        // example lists the web app as `models-web-app`). The built-in renders the web app, so it
        // covers that application too: no object of it is owned twice.
        applications: ["kfserving-crds", "kfserving-install", "kfserving", "kserve", "kserve-models-web-app", "models-web-app"],
    },
    Katib {
        name: "katib",
        resource: Katib,
        kind: "Katib",
        upgrade_position: 4,
        applications: ["katib-crds", "katib-controller", "katib-db", "katib-db-manager", "katib-ui", "katib"],
    },
    Pipelines {
        name: "pipelines",
        resource: Pipelines,
        kind: "Pipelines",
        upgrade_position: 5,
        applications: [
            "api-service", "pipelines-ui", "pipelines-viewer", "persistent-agent", "scheduledworkflow",
            "pipeline-visualization-service", "pipelines-runner", "minio", "mysql", "argo", "metadata",
            "pipeline", "kubeflow-pipelines",
        ],
    },
    ProfileController {
        name: "profiles",
        resource: ProfileController,
        kind: "ProfileController",
        upgrade_position: 6,
        // No application by name: a `profiles` application installs upstream's profile
        // controller (the generic component) unless the KfDef names this one (`installedBy`).
        applications: [],
    },
    // Every other application: no fixed list, it installs what no other component covers.
    KustomizeApplication {
        name: "kustomize",
        resource: KustomizeApplication,
        kind: "KustomizeApplication",
        upgrade_position: 7,
        applications: [],
    },
}

impl ComponentKind {
    /// The generic component: it installs every application no other component installs (or
    /// whose component has no release for the KfDef's Kubeflow version) from the application's
    /// own kustomize package. It has no built-in releases: what it installs is what the packages
    /// render, so its version only follows the KfDef's.
    pub const GENERIC: ComponentKind = ComponentKind::KustomizeApplication;

    /// The component that covers kfctl application `application` by name, if any.
    pub fn from_application(application: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.applications().contains(&application))
    }

    /// Every component in default upgrade order: the mesh first, then identity, then the
    /// workloads that depend on both.
    pub fn upgrade_order() -> Vec<Self> {
        let mut order = Self::ALL.to_vec();
        order.sort_by_key(|c| c.upgrade_position());
        order
    }

    /// Where the API server serves the component resource (from its CRD).
    pub fn api_resource(self) -> kube::core::ApiResource {
        let crd = self.crd();
        let version = crd.spec.versions.first().map(|v| v.name.clone()).unwrap_or_default();
        kube::core::ApiResource { api_version: format!("{}/{version}", crd.spec.group), group: crd.spec.group, version, kind: crd.spec.names.kind, plural: crd.spec.names.plural }
    }

    /// `istio, dex, …`: the names [`FromStr`] accepts.
    pub fn allowed_names() -> String {
        Self::ALL.map(Self::name).join(", ")
    }
}

impl fmt::Display for ComponentKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error for a component name that is none of [`ComponentKind::ALL`].
#[derive(Debug, thiserror::Error)]
#[error("unknown component {0:?}; allowed: {allowed}", allowed = ComponentKind::allowed_names())]
pub struct UnknownComponent(pub String);

impl FromStr for ComponentKind {
    type Err = UnknownComponent;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s) || k.kind() == s)
            .ok_or_else(|| UnknownComponent(s.to_string()))
    }
}

/// Whether the operator manages the component's objects.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ManagementState {
    /// Install and keep the component converged (heal deletes, revert drift).
    #[default]
    Managed,
    /// Uninstall the component's objects but keep this resource.
    Removed,
    /// Leave the objects as they are; the operator stops touching them.
    Unmanaged,
}

/// What happens to the CRDs a component installed when it is removed.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum CrdRemovalPolicy {
    /// Keep the CRDs and therefore every custom resource users created with them.
    #[default]
    Retain,
    /// Delete the CRDs; Kubernetes then deletes every custom resource of those kinds.
    Delete,
}

/// What an uninstall leaves behind (`spec.deletionPolicy`, on the KfDef and every component
/// resource it makes).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DeletionPolicy {
    /// Keep the namespaces the install made and the CRDs it installed (and so every custom
    /// resource of theirs).
    #[default]
    Retain,
    /// Delete them too: a namespace the install made once it holds no object of any install and
    /// no PersistentVolumeClaim, a CRD it installed once no custom resource of it is left (the
    /// resource lists in `status.purging` what it waits for). Nothing of a user's is deleted to
    /// get there.
    Purge,
}

/// Spec fields every component resource has.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComponentSpecCore {
    /// Component version to install, e.g. `v1.2.0`; must be one the operator ships.
    #[schemars(regex(pattern = crate::validation::VERSION), length(max = 64))]
    pub version: String,
    /// `spec.version` is the built-in release whose knowledge applies (health rules, typed fields,
    /// where settings live), and the version installed is the one `sources`' packages run (the
    /// tag of the component's own images there), that release or a later one: reported in
    /// `status.installedVersion` and labelled on the objects. For a Kubeflow release later than any
    /// the operator knows by name; the meta-operator sets it. Requires `sources` naming packages.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub version_from_package: bool,
    #[serde(default)]
    pub management_state: ManagementState,
    /// Namespace the component's namespaced objects go to; each component has a default. Never
    /// one of the cluster's own (`kube-system`, `kube-public`, `kube-node-lease`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        regex(pattern = crate::validation::DNS_LABEL),
        length(max = 63),
        extend("x-kubernetes-validations" = [{"rule": crate::validation::NOT_A_SYSTEM_NAMESPACE, "message": "must not be one of the cluster's own namespaces (kube-system, kube-public, kube-node-lease)"}])
    )]
    pub target_namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Overrides::is_empty")]
    pub overrides: Overrides,
    /// Kustomize packages of the KfDef applications this component was built from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["application"]), length(max = 256))]
    pub sources: Vec<KustomizeSource>,
    /// kfctl's mode, for a kfctl-era build of `sources` (`era`).
    #[serde(default, skip_serializing_if = "crate::is_default")]
    pub mode: RenderMode,
    /// Which rules build the packages of `sources`: kfctl's (the default) or upstream's `kustomize build`;
    /// the meta-operator sets it from the KfDef's version.
    #[serde(default, skip_serializing_if = "crate::is_default")]
    pub era: crate::kfdef::Era,
    /// Mirrors of the remote bases the packages name, `PREFIX=URI` (the KfDef's
    /// `remoteBaseMirrors`): a remote base whose URL starts with PREFIX is fetched from URI and
    /// the rest. Before the operator's own `--remote-base-mirror`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = crate::validation::MIRRORS_MAX), inner(length(max = crate::validation::URI_MAX_LENGTH), regex(pattern = crate::validation::MIRROR)))]
    pub remote_base_mirrors: Vec<String>,
    #[serde(default)]
    pub crd_removal_policy: CrdRemovalPolicy,
    /// What deleting this resource leaves behind; the meta-operator sets it from the KfDef's.
    #[serde(default, skip_serializing_if = "crate::is_default")]
    pub deletion_policy: DeletionPolicy,
    /// Whether objects the component renders that already exist, made by someone else (no
    /// `components.kubeflow.org/part-of` label and owner annotation of this resource), are taken
    /// over: applied, labelled as this resource's, and so later pruned or deleted with it. Off by
    /// default: such an object is left as it is and reported. One object can be handed over
    /// instead by annotating it `components.kubeflow.org/adopt: <namespace>/<name>` of this
    /// resource (as Helm adopts an object annotated with its release).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adopt_existing: bool,
    /// ServiceAccount in this resource's namespace whose rights install, prune and delete the
    /// component's objects and read the Secrets the spec references: the operator impersonates
    /// it, and what it may not do is reported (object and verb), never done with the operator's
    /// own rights. Unset: the operator's `--default-service-account`. The meta-operator sets it
    /// from the KfDef (`spec.serviceAccountName`, default [`crate::kfdef::DEFAULT_INSTALLER`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = crate::validation::DNS_SUBDOMAIN), length(min = 1, max = 253))]
    pub service_account_name: Option<String>,
    /// Platform the objects are built for; `OpenShift` drops fixed user and group ids from pods so
    /// the restricted SCC can assign them. The meta-operator sets it from API discovery.
    #[serde(default)]
    pub platform: Platform,
}

/// Kubernetes distribution the component runs on.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Platform {
    #[default]
    Kubernetes,
    OpenShift,
}

/// Per-object adjustments applied on top of the built-in manifests.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Overrides {
    /// Container image per container name, e.g. `{"katib-controller": "registry.local/katib:v1"}`.
    /// Every image names its registry host: its first segment contains a `.` or a `:port`, or is
    /// `localhost`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend(
        "maxProperties" = crate::validation::OVERRIDE_MAX_ENTRIES,
        "additionalProperties" = {
            "type": "string",
            "maxLength": crate::validation::IMAGE_MAX_LENGTH,
            "x-kubernetes-validations": [{
                "rule": format!("self.matches('{}')", crate::validation::IMAGE_WITH_REGISTRY),
                "message": "must be an image reference that names its registry host, e.g. registry.example.com/katib/katib-controller:v0.11.0 (the first segment contains a '.' or a ':port', or is localhost)",
            }],
        },
        "x-kubernetes-validations" = [{
            "rule": format!("self.all(k, k.size() <= 63 && k.matches('{}'))", crate::validation::DNS_LABEL),
            "message": "keys must be container names (DNS labels: lower-case alphanumerics and '-', at most 63 characters)",
        }],
    ))]
    pub images: BTreeMap<String, String>,
    /// Replica count per Deployment or StatefulSet name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend(
        "maxProperties" = crate::validation::OVERRIDE_MAX_ENTRIES,
        "additionalProperties" = {"type": "integer", "format": "int32", "minimum": 0, "maximum": i32::MAX},
        "x-kubernetes-validations" = [{
            "rule": format!("self.all(k, k.size() <= 253 && k.matches('{}'))", crate::validation::DNS_SUBDOMAIN),
            "message": "keys must be Deployment or StatefulSet names (DNS subdomains, at most 253 characters)",
        }],
    ))]
    pub replicas: BTreeMap<String, i32>,
    /// Free parameters, as in kfctl `params.env`; names are unique.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub parameters: Vec<NameValue>,
}

impl Overrides {
    pub fn is_empty(&self) -> bool {
        self.images.is_empty() && self.replicas.is_empty() && self.parameters.is_empty()
    }
}

/// A KfDef application's kustomize package, carried into the component that owns it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KustomizeSource {
    /// KfDef application name, e.g. `katib-controller`.
    #[schemars(regex(pattern = crate::validation::DNS_SUBDOMAIN), length(min = 1, max = 253))]
    pub application: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::validation::URI_MAX_LENGTH), regex(pattern = crate::validation::NO_WHITESPACE))]
    pub repo_uri: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = crate::validation::PATH_MAX_LENGTH),
        regex(pattern = crate::validation::PACKAGE_PATH),
        extend("x-kubernetes-validations" = [{"rule": crate::validation::NO_PARENT_SEGMENT, "message": "must stay inside the repository: no '..' segments"}])
    )]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = crate::validation::OVERLAYS_MAX), inner(length(max = 253), regex(pattern = crate::validation::OVERLAY_NAME)))]
    pub overlays: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]), length(max = crate::validation::PARAMETERS_MAX))]
    pub parameters: Vec<NameValue>,
    /// SHA-256 (lowercase hex) the repository archive must have; checked before unpacking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9a-f]{64}$"))]
    pub repo_sha256: Option<String>,
    /// The kustomize release for this repository (the KfDef repo's `kustomize`, else the one its
    /// Kubeflow release names: 3.2.0 for 1.3 to 1.6); unset: chosen from the package's
    /// kustomizations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo_kustomize: Option<crate::kfdef::KustomizeRelease>,
    /// This source is a `kind: Component` applied to the source of the application named here
    /// (the KfDef application's `kustomizeConfig.componentOf`); it is built with that one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = crate::validation::DNS_SUBDOMAIN), length(min = 1, max = 253))]
    pub component_of: Option<String>,
}

/// Lifecycle phase of a component.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ComponentPhase {
    #[default]
    Pending,
    Progressing,
    Ready,
    Degraded,
    Removed,
    Unmanaged,
}

/// Reference to an object the component applied.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InventoryEntry {
    /// API group; empty for the core group.
    #[serde(default)]
    pub group: String,
    pub version: String,
    pub kind: String,
    /// Empty for cluster-scoped objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
}

impl InventoryEntry {
    /// `group/version`, or `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }
}

/// Status every component resource reports.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComponentStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ComponentPhase>,
    /// Version whose objects are applied and ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installed_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `Progressing`, `Degraded`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Every object applied for `installedVersion`; what leaves this set is pruned.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inventory: Vec<InventoryEntry>,
    /// One entry per KfDef application, for components that install several applications from
    /// their own packages (the generic component): each one's state, and why when not `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub applications: Vec<ApplicationState>,
    /// What applying the spec in annotation [`PREVIEW_SPEC_ANNOTATION`] would change, computed
    /// without writing anything (a KfUpgrade asks for it before it moves the component).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<ChangePlan>,
    /// Being deleted with `deletionPolicy: Purge`: what is left to delete and why it waits
    /// (`CustomResourceDefinition x.example.com: 2 custom resources left, e.g. team/a`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub purging: Vec<String>,
}

/// Annotation on a component resource holding a spec (JSON) to plan, not apply: its plan is
/// written to `status.plan`.
pub const PREVIEW_SPEC_ANNOTATION: &str = "components.kubeflow.org/preview-spec";
/// Annotation naming the preview by the hash its requester knows it by; echoed in `status.plan`.
pub const PREVIEW_HASH_ANNOTATION: &str = "components.kubeflow.org/preview-spec-hash";

/// What applying a spec over the cluster would change, found by server-side dry runs with the
/// operator's field manager and the installer's rights. Each list holds one line per object
/// (`Kind namespace/name`, with the changed fields or the reason), at most
/// [`ChangePlan::MAX_LINES`]; `omitted` counts the lines left out.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChangePlan {
    /// The hash of the planned spec (annotation [`PREVIEW_HASH_ANNOTATION`]).
    pub spec_hash: String,
    /// The version the planned spec installs.
    pub version: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub add: Vec<String>,
    /// Objects whose fields change, and which fields.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub change: Vec<String>,
    /// Objects this resource made that the planned spec no longer renders: deleted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prune: Vec<String>,
    /// Objects that leave the render but are kept: they hold data (PersistentVolumeClaims), or
    /// are CRDs or namespaces.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keep: Vec<String>,
    /// What changes in the API of each CRD that changes: versions served, storage, schemas.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub crd_changes: Vec<String>,
    /// Objects that exist but were not made by this resource: left as they are.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub leave: Vec<String>,
    /// Why the planned spec cannot be applied as it is (an application that does not render, an
    /// object the API server refuses).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<String>,
    /// Objects whose fields stay as they are (the operator's version label and applied hash aside).
    #[serde(default)]
    pub unchanged: u32,
    /// Lines left out of the lists above.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted: u32,
    /// Per KfDef application (components that install several from packages), how many of its
    /// objects are added, changed, pruned and kept; every object counted, none omitted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub applications: Vec<ApplicationChanges>,
}

/// How many objects of one application a plan adds, changes, prunes and keeps.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationChanges {
    pub name: String,
    #[serde(default)]
    pub add: u32,
    #[serde(default)]
    pub change: u32,
    #[serde(default)]
    pub prune: u32,
    #[serde(default)]
    pub keep: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Which list of a [`ChangePlan`] a line goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanList {
    Add,
    Change,
    Prune,
    Keep,
    CrdChanges,
    Leave,
    Failed,
}

impl ChangePlan {
    /// Most lines kept per list: a plan travels in status (and over NATS) and must stay small.
    pub const MAX_LINES: usize = 40;
    /// Longest line kept, in bytes.
    pub const MAX_LINE: usize = 300;

    /// Adds `line` to `list`, or counts it in `omitted` once the list is full.
    pub fn push(&mut self, list: PlanList, mut line: String) {
        let lines = match list {
            PlanList::Add => &mut self.add,
            PlanList::Change => &mut self.change,
            PlanList::Prune => &mut self.prune,
            PlanList::Keep => &mut self.keep,
            PlanList::CrdChanges => &mut self.crd_changes,
            PlanList::Leave => &mut self.leave,
            PlanList::Failed => &mut self.failed,
        };
        if lines.len() >= Self::MAX_LINES {
            self.omitted += 1;
            return;
        }
        if line.len() > Self::MAX_LINE {
            let mut end = Self::MAX_LINE;
            while !line.is_char_boundary(end) {
                end -= 1;
            }
            line.truncate(end);
            line.push('…');
        }
        lines.push(line);
    }

    /// Adds `line` to `list` ([`ChangePlan::push`]) and counts it for `application`, if it names one.
    pub fn record(&mut self, application: Option<&str>, list: PlanList, line: String) {
        self.push(list, line);
        let Some(name) = application else { return };
        let index = match self.applications.iter().position(|a| a.name == name) {
            Some(index) => index,
            None => {
                self.applications.push(ApplicationChanges { name: name.to_string(), ..Default::default() });
                self.applications.len() - 1
            }
        };
        let counts = &mut self.applications[index];
        match list {
            PlanList::Add => counts.add += 1,
            PlanList::Change => counts.change += 1,
            PlanList::Prune => counts.prune += 1,
            PlanList::Keep => counts.keep += 1,
            PlanList::CrdChanges | PlanList::Leave | PlanList::Failed => {}
        }
    }

    /// Leaves out every line but the failures, counting them in `omitted`, and the per-application
    /// counts; `unchanged` stays (a plan's summary, made before, keeps its totals).
    pub fn drop_details(&mut self) {
        for lines in [&mut self.add, &mut self.change, &mut self.prune, &mut self.keep, &mut self.crd_changes, &mut self.leave] {
            self.omitted = self.omitted.saturating_add(u32::try_from(lines.len()).unwrap_or(u32::MAX));
            lines.clear();
        }
        self.applications.clear();
    }

    /// `N to add, M to change, K to prune, …`.
    pub fn totals(&self) -> String {
        let omitted = if self.omitted > 0 { format!(" ({} lines omitted)", self.omitted) } else { String::new() };
        format!(
            "{} to add, {} to change, {} to prune, {} kept, {} unchanged, {} left as they are (not made by this resource){omitted}",
            self.add.len(),
            self.change.len(),
            self.prune.len(),
            self.keep.len(),
            self.unchanged,
            self.leave.len()
        )
    }
}

/// Where one application of a component stands.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationState {
    /// KfDef application name.
    pub name: String,
    /// `Ready`, `Progressing` (objects applied, some not ready yet) or `Degraded` (not rendered or
    /// not applied; what it installed before stays as it was).
    pub state: ComponentPhase,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(flatten)]
    pub build: ApplicationBuild,
}

/// How an application's package was built, as the statuses report it beside its state.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationBuild {
    /// The kustomize release that built it (`v3`: 3.1.0, `v3.2`: 3.2.0, `v5`: 5.7.1): the
    /// repository's `kustomize` field, else the one its Kubeflow release pins, else the one its
    /// package needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kustomize: Option<crate::kfdef::KustomizeRelease>,
    /// Objects its package renders in API versions Kubernetes no longer serves, rewritten to the
    /// versions that replaced them, counted per kind (`kfop build` lists each one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub converted: Vec<ConvertedKind>,
}

/// How many objects of one kind an application's package renders in a removed API version, and
/// the version they were converted to.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConvertedKind {
    pub kind: String,
    /// The removed `apiVersion` the package renders.
    pub from: String,
    /// The `apiVersion` applied instead.
    pub to: String,
    pub count: u32,
}

/// Service type of the Istio ingress gateway.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum GatewayServiceType {
    #[default]
    ClusterIP,
    NodePort,
    LoadBalancer,
}

/// The Istio ingress gateway Kubeflow is reached through.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    // Both are ports of one Service, which cannot expose a port twice.
    "rule": "!has(self.httpPort) || !has(self.httpsPort) || self.httpPort != self.httpsPort",
    "message": "httpPort and httpsPort must differ: both are ports of the gateway Service",
    "fieldPath": ".httpsPort",
}]))]
pub struct IstioGateway {
    #[serde(default)]
    pub service_type: GatewayServiceType,
    #[serde(default = "default_http_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub http_port: i32,
    #[serde(default = "default_https_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub https_port: i32,
}

impl Default for IstioGateway {
    fn default() -> Self {
        Self { service_type: GatewayServiceType::default(), http_port: default_http_port(), https_port: default_https_port() }
    }
}

fn default_http_port() -> i32 {
    80
}
fn default_https_port() -> i32 {
    443
}
fn default_true() -> bool {
    true
}

/// Istio service mesh (`istio-crds`, `istio-install`, `cluster-local-gateway`, `istio`).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "components.kubeflow.org", version = "v1alpha1", kind = "Istio", plural = "istios",
    category = "kubeflow", namespaced, status = "ComponentStatus",
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".spec.version"}"#,
    printcolumn = r#"{"name":"Installed","type":"string","jsonPath":".status.installedVersion"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct IstioSpec {
    #[serde(flatten)]
    pub core: ComponentSpecCore,
    #[serde(default)]
    pub gateway: IstioGateway,
    /// Also install the cluster-local gateway KFServing uses for in-cluster traffic.
    #[serde(default = "default_true")]
    pub cluster_local_gateway: bool,
}

/// Reference to one key of a Secret in the component resource's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct SecretKeyRef {
    /// Secret name.
    #[schemars(regex(pattern = crate::validation::DNS_SUBDOMAIN), length(min = 1, max = 253))]
    pub name: String,
    /// Key inside the Secret (alphanumerics, `-`, `_`, `.`).
    #[schemars(regex(pattern = r"^[-._a-zA-Z0-9]+$"), length(min = 1, max = 253))]
    pub key: String,
}

/// Dex connector types Kubeflow deployments use.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DexConnectorType {
    Ldap,
    Oidc,
    Github,
    Gitlab,
    Google,
    Microsoft,
    Saml,
}

/// An upstream identity provider for Dex.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct DexConnector {
    #[serde(rename = "type")]
    pub type_: DexConnectorType,
    /// Connector id, part of Dex's callback URLs (`/dex/callback/<id>`); unique among connectors.
    #[schemars(regex(pattern = r"^[a-zA-Z0-9][-_.a-zA-Z0-9]*$"), length(min = 1, max = 128))]
    pub id: String,
    #[schemars(length(min = 1, max = 256))]
    pub name: String,
    /// Connector configuration, passed to Dex as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::common::free_form_object")]
    pub config: Option<serde_json::Value>,
}

/// Dex OpenID Connect provider (`dex`).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "components.kubeflow.org", version = "v1alpha1", kind = "Dex", plural = "dexes",
    category = "kubeflow", namespaced, status = "ComponentStatus",
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".spec.version"}"#,
    printcolumn = r#"{"name":"Installed","type":"string","jsonPath":".status.installedVersion"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct DexSpec {
    #[serde(flatten)]
    pub core: ComponentSpecCore,
    /// Issuer URL Dex announces, e.g. `http://dex.auth.svc.cluster.local:5556/dex`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^https?://"))]
    pub issuer: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["id"]))]
    pub connectors: Vec<DexConnector>,
    /// Secret key holding Dex `staticPasswords` (YAML list of email/hash/username/userID).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub static_passwords_secret_ref: Option<SecretKeyRef>,
}

/// Database engine for Katib's experiment store.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum KatibDatabaseType {
    #[default]
    MySQL,
    Postgres,
}

/// Where Katib keeps experiment observations.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.host) || has(self.secretRef)",
    "message": "secretRef is required when host names an external database",
}]))]
pub struct KatibDatabase {
    #[serde(default, rename = "type")]
    pub type_: KatibDatabaseType,
    /// External database host; when empty Katib runs its own database.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Secret key with the database password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretKeyRef>,
}

/// Katib hyperparameter tuning (`katib-crds`, `katib-controller`, `katib-db`, `katib-ui`).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "components.kubeflow.org", version = "v1alpha1", kind = "Katib", plural = "katibs",
    category = "kubeflow", namespaced, status = "ComponentStatus",
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".spec.version"}"#,
    printcolumn = r#"{"name":"Installed","type":"string","jsonPath":".status.installedVersion"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct KatibSpec {
    #[serde(flatten)]
    pub core: ComponentSpecCore,
    #[serde(default)]
    pub database: KatibDatabase,
}

/// KFServing model serving (`kfserving-crds`, `kfserving-install`).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "components.kubeflow.org", version = "v1alpha1", kind = "KFServing", plural = "kfservings",
    category = "kubeflow", namespaced, status = "ComponentStatus",
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".spec.version"}"#,
    printcolumn = r#"{"name":"Installed","type":"string","jsonPath":".status.installedVersion"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct KFServingSpec {
    #[serde(flatten)]
    pub core: ComponentSpecCore,
    /// Domain inference services get hostnames under, e.g. `models.example.com`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = crate::validation::DNS_SUBDOMAIN), length(max = 253))]
    pub ingress_domain: Option<String>,
    /// Istio gateway (`namespace/name`) inference services are exposed through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9]*[a-z0-9])?$"), length(max = 317))]
    pub ingress_gateway: Option<String>,
}

/// Pipelines' metadata database.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.host) || has(self.secretRef)",
    "message": "secretRef is required when host names an external database",
}]))]
pub struct PipelinesDatabase {
    /// External MySQL host; when empty Pipelines runs its own MySQL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretKeyRef>,
}

/// Pipelines' artifact store.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.endpoint) || has(self.secretRef)",
    "message": "secretRef is required when endpoint names an external object store",
}]))]
pub struct ObjectStore {
    /// External S3-compatible endpoint; when empty Pipelines runs its own store (MinIO up to 2.5.0,
    /// SeaweedFS behind the same Service from 2.15.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// S3 bucket name: 3 to 63 lower-case alphanumerics, `.` and `-`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-z0-9][-.a-z0-9]{1,61}[a-z0-9]$"), length(min = 3, max = 63))]
    pub bucket: Option<String>,
    /// Secret with `accesskey` and `secretkey`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretKeyRef>,
}

/// Kubeflow Pipelines (`api-service`, `pipelines-ui`, `minio`, `mysql`, `persistent-agent`, …).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "components.kubeflow.org", version = "v1alpha1", kind = "Pipelines", plural = "pipelines",
    category = "kubeflow", namespaced, status = "ComponentStatus",
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".spec.version"}"#,
    printcolumn = r#"{"name":"Installed","type":"string","jsonPath":".status.installedVersion"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct PipelinesSpec {
    #[serde(flatten)]
    pub core: ComponentSpecCore,
    #[serde(default)]
    pub database: PipelinesDatabase,
    #[serde(default)]
    pub object_store: ObjectStore,
}

/// Which mesh authorization objects a profile's namespace gets.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum MeshAuthorization {
    /// Whichever the installed Istio serves: `AuthorizationPolicy` (`security.istio.io`, Istio
    /// 1.4+) when present, else `ServiceRole`/`ServiceRoleBinding` (`rbac.istio.io`, Istio 1.3 as in
    /// Kubeflow 1.2), else none.
    #[default]
    Auto,
    AuthorizationPolicy,
    IstioRbac,
    /// No mesh authorization objects (no Istio).
    Disabled,
}

/// NetworkPolicies every profile namespace gets (opt-in).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProfileNetworkPolicies {
    /// Namespace of the ingress gateway users reach their notebooks and services through.
    #[serde(default = "default_istio_namespace")]
    #[schemars(regex(pattern = crate::validation::DNS_LABEL), length(min = 1, max = 63))]
    pub ingress_gateway_namespace: String,
    /// Namespaces of serverless components (Knative activator, Kourier) that call into profiles.
    #[serde(default = "default_knative_namespaces")]
    #[schemars(extend("x-kubernetes-list-type" = "set", "items" = {"type": "string", "pattern": crate::validation::DNS_LABEL, "maxLength": 63}))]
    pub serverless_namespaces: Vec<String>,
    /// Namespace of the Pipelines API server, which profile workloads may reach.
    #[serde(default = "default_kubeflow_namespace")]
    #[schemars(regex(pattern = crate::validation::DNS_LABEL), length(min = 1, max = 63))]
    pub pipelines_namespace: String,
}

fn default_istio_namespace() -> String {
    "istio-system".into()
}
fn default_knative_namespaces() -> Vec<String> {
    vec!["knative-serving".into()]
}
fn default_kubeflow_namespace() -> String {
    "kubeflow".into()
}

/// Tolerations written to profile namespaces so their pods may run on (and only they may use)
/// tainted GPU nodes (opt-in; needs the PodTolerationRestriction admission plugin).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProfileTolerations {
    /// `scheduler.alpha.kubernetes.io/defaultTolerations`: added to every pod of the namespace.
    #[serde(default)]
    pub default_tolerations: Vec<k8s_openapi::api::core::v1::Toleration>,
    /// `scheduler.alpha.kubernetes.io/tolerationsWhitelist`: the only tolerations pods may carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub whitelist: Option<Vec<k8s_openapi::api::core::v1::Toleration>>,
}

/// OpenShift Service Mesh control plane profile namespaces join (a `ServiceMeshMember` each).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceMeshControlPlane {
    #[schemars(regex(pattern = crate::validation::DNS_SUBDOMAIN), length(min = 1, max = 253))]
    pub name: String,
    #[schemars(regex(pattern = crate::validation::DNS_LABEL), length(min = 1, max = 63))]
    pub namespace: String,
}

/// Who may create Profiles through the KFAM API (`POST /kfam/v1/profiles`). Cluster admins
/// always may; ServiceAccounts never register a Profile for themselves.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Registration {
    /// Nobody but the cluster admins.
    Disabled,
    /// People a trusted proxy names (its user-id header), one Profile each, owned by themselves as
    /// a `User`, without plugins: upstream's dashboard registration.
    #[default]
    Users,
}

/// Kubeflow multi-tenancy: the Profile CRD, the `kubeflow-admin|edit|view` ClusterRoles, and the
/// controller that keeps one namespace per Profile (KfDef application `profiles`). The settings
/// below apply to every Profile; they come from one ProfileController, the cluster's settings: the
/// one the operator's `--settings <namespace>/<name>` names, else the oldest managed one in the
/// operator's own namespace. Any other is `Degraded` and changes nothing.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "components.kubeflow.org", version = "v1alpha1", kind = "ProfileController", plural = "profilecontrollers",
    category = "kubeflow", namespaced, status = "ComponentStatus",
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".spec.version"}"#,
    printcolumn = r#"{"name":"Installed","type":"string","jsonPath":".status.installedVersion"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ProfileControllerSpec {
    #[serde(flatten)]
    pub core: ComponentSpecCore,
    /// Header the ingress gateway puts the authenticated user in.
    #[serde(default = "default_user_id_header")]
    #[schemars(regex(pattern = r"^[A-Za-z0-9-]+$"), length(max = 256))]
    pub user_id_header: String,
    /// Prefix of the user in that header (e.g. `accounts.google.com:`).
    #[serde(default)]
    pub user_id_prefix: String,
    /// Labels of every profile namespace, over the defaults (`katib.kubeflow.org/metrics-collector-injection`,
    /// `serving.kubeflow.org/inferenceservice`, `pipelines.kubeflow.org/enabled`,
    /// `app.kubernetes.io/part-of`); an empty value removes that label.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend(
        "maxProperties" = crate::validation::OVERRIDE_MAX_ENTRIES,
        "additionalProperties" = {"type": "string", "maxLength": 63, "pattern": r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"},
        "x-kubernetes-validations" = [{
            "rule": format!("self.all(k, k.size() <= 317 && k.matches('{}'))", LABEL_KEY),
            "message": "keys must be label keys: an optional DNS-subdomain prefix and '/', then a name of at most 63 alphanumerics, '-', '_' or '.'",
        }],
    ))]
    pub namespace_labels: BTreeMap<String, String>,
    #[serde(default)]
    pub mesh_authorization: MeshAuthorization,
    /// Workload identities allowed to call into a profile on the owner's behalf (the ingress
    /// gateway, the Pipelines UI).
    #[serde(default = "default_trusted_principals")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub trusted_principals: Vec<String>,
    /// Users who may change any profile's contributors through the KFAM API.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub cluster_admins: Vec<String>,
    /// Who may create Profiles through the KFAM API: `Users` (the default; people a trusted proxy
    /// names, one Profile each, no plugins) or `Disabled` (cluster admins only).
    #[serde(default)]
    pub registration: Registration,
    /// The quota of every Profile a user registers through KFAM (`registration: Users`): the
    /// cluster admin's default, since a registrant may not set `spec.resourceQuotaSpec` (nor
    /// quota override labels). Unset: registered Profiles have no quota. It is copied into each
    /// Profile when registered; a change applies to later registrations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registered_quota: Option<k8s_openapi::api::core::v1::ResourceQuotaSpec>,
    /// Profile names reserved besides the built-in list (the cluster's, OLM's, these operators'
    /// and every namespace a known Kubeflow release or common platform install uses): the
    /// namespaces of this cluster's other platform installs. A trailing `*` matches any suffix.
    /// A Profile of such a name is refused (Ready false, nothing written or deleted for it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set", "maxItems" = 256, "items" = {"type": "string", "pattern": crate::validation::RESERVED_NAME_PATTERN}))]
    pub reserved_names: Vec<String>,
    /// Identities (TokenReview usernames, e.g. `system:serviceaccount:kubeflow:centraldashboard`)
    /// allowed to call the KFAM API on a user's behalf: only their requests may name the caller
    /// in `userIdHeader` and `groupsHeader`. Empty (the default): those headers are refused and
    /// every caller is the owner of its bearer token.
    #[serde(default = "default_trusted_proxies", skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set", "maxItems" = 64, "items" = {"type": "string", "minLength": 1, "maxLength": 256, "pattern": r"^\S+$"}))]
    pub trusted_proxies: Vec<String>,
    /// Header carrying the caller's groups (comma-separated), for owners that are Groups.
    #[serde(default = "default_groups_header")]
    #[schemars(regex(pattern = r"^[A-Za-z0-9-]+$"), length(max = 256))]
    pub groups_header: String,
    /// JWT claim Istio matches group contributors against (`request.auth.claims[<claim>]`).
    #[serde(default = "default_groups_claim")]
    pub groups_claim: String,
    /// A LimitRange `kf-limit-range` in every profile namespace (opt-in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_range: Option<k8s_openapi::api::core::v1::LimitRangeSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_policies: Option<ProfileNetworkPolicies>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_tolerations: Option<ProfileTolerations>,
    /// OpenShift Service Mesh: every profile namespace joins this control plane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_mesh: Option<ServiceMeshControlPlane>,
    /// Profile labels `<prefix><resource>` (e.g. `quotas.kubeflow.org/requests.cpu: "4"`)
    /// override that resource of the profile's quota (opt-in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?$"))]
    pub quota_override_label_prefix: Option<String>,
}

/// A label key (`prefix/name` or `name`), without backslashes so it is also a CEL string literal.
const LABEL_KEY: &str = "^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";

fn default_user_id_header() -> String {
    "kubeflow-userid".into()
}
fn default_groups_header() -> String {
    "kubeflow-groups".into()
}
fn default_groups_claim() -> String {
    "groups".into()
}
/// No proxy is trusted unless the ProfileController names it: KFAM callers bring their own token.
fn default_trusted_proxies() -> Vec<String> {
    Vec::new()
}
/// The ingress gateway and the Pipelines UI, as in Kubeflow's own profile controller.
pub fn default_trusted_principals() -> Vec<String> {
    vec![
        "cluster.local/ns/istio-system/sa/istio-ingressgateway-service-account".into(),
        "cluster.local/ns/kubeflow/sa/ml-pipeline-ui".into(),
    ]
}

/// How the applications' kustomize packages are built (kfctl's two modes).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RenderMode {
    /// kfctl v1.0.x: `base/` plus the listed `overlays/<name>/`, parameters written to `params.env`.
    #[default]
    PerApplication,
    /// kfctl v1.1+ (`kubeflow-apps` stacks): each path is built as it is.
    Stacks,
}

/// Any kfctl application, installed from its kustomize package: `spec.sources` name the
/// repository archive (`repoUri`, optional `repoSha256`), the package `path`, `overlays` and
/// `parameters`; the operator fetches and renders them with kfctl's semantics and installs the
/// objects like any component's (apply order, readiness, heal, prune, cleanup).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "components.kubeflow.org", version = "v1alpha1", kind = "KustomizeApplication", plural = "kustomizeapplications",
    category = "kubeflow", namespaced, status = "ComponentStatus",
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".spec.version"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct KustomizeApplicationSpec {
    #[serde(flatten)]
    pub core: ComponentSpecCore,
}

/// Access to the parts every component resource shares, so the framework can treat them alike.
pub trait ComponentResource:
    kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
    + Clone
    + fmt::Debug
    + Serialize
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
    const COMPONENT: ComponentKind;
    fn core(&self) -> &ComponentSpecCore;
    fn component_status(&self) -> Option<&ComponentStatus>;
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_plan_keeps_a_bounded_number_of_bounded_lines_and_counts_the_rest() {
        let mut plan = ChangePlan::default();
        for i in 0..ChangePlan::MAX_LINES + 3 {
            plan.push(PlanList::Change, format!("ConfigMap a/c{i}: data.x"));
        }
        plan.push(PlanList::Prune, format!("ConfigMap a/{}", "é".repeat(ChangePlan::MAX_LINE)));
        assert_eq!((plan.change.len(), plan.omitted), (ChangePlan::MAX_LINES, 3));
        assert_eq!(plan.change[0], "ConfigMap a/c0: data.x");
        assert!(plan.prune[0].len() <= ChangePlan::MAX_LINE + '…'.len_utf8() && plan.prune[0].ends_with('…'), "{}", plan.prune[0]);
        assert_eq!(plan.totals(), "0 to add, 40 to change, 1 to prune, 0 kept, 0 unchanged, 0 left as they are (not made by this resource) (3 lines omitted)");
        // Per application every object counts, omitted lines too.
        let mut plan = ChangePlan::default();
        for i in 0..ChangePlan::MAX_LINES + 2 {
            plan.record(Some("web"), PlanList::Change, format!("ConfigMap a/c{i}: data.x"));
        }
        plan.record(Some("minio"), PlanList::Keep, "PersistentVolumeClaim a/minio-pvc".into());
        plan.record(None, PlanList::Add, "Deployment a/seaweedfs".into());
        plan.record(Some("web"), PlanList::Leave, "Service a/web".into());
        assert_eq!(
            plan.applications,
            [ApplicationChanges { name: "web".into(), change: 42, ..Default::default() }, ApplicationChanges { name: "minio".into(), keep: 1, ..Default::default() }]
        );
    }

    use super::*;

    #[test]
    fn the_declaration_gives_names_kinds_applications_and_order() {
        assert_eq!(ComponentKind::ALL.map(ComponentKind::name), ["istio", "dex", "kfserving", "katib", "pipelines", "profiles", "kustomize"]);
        assert_eq!(ComponentKind::KFServing.kind(), "KFServing");
        assert_eq!(ComponentKind::from_application("katib-db-manager"), Some(ComponentKind::Katib));
        assert_eq!(ComponentKind::from_application("kfserving-gateway"), Some(ComponentKind::Istio));
        assert_eq!(ComponentKind::from_application("jupyter-web-app"), None);
        assert_eq!(ComponentKind::from_application("profiles"), None, "upstream's profile controller unless the KfDef asks for ours");
        assert_eq!(
            ComponentKind::upgrade_order(),
            [
                ComponentKind::Istio,
                ComponentKind::Dex,
                ComponentKind::KFServing,
                ComponentKind::Katib,
                ComponentKind::Pipelines,
                ComponentKind::ProfileController,
                ComponentKind::KustomizeApplication
            ]
        );
        assert_eq!(
            "seldon".parse::<ComponentKind>().unwrap_err().to_string(),
            "unknown component \"seldon\"; allowed: istio, dex, kfserving, katib, pipelines, profiles, kustomize"
        );
        assert_eq!(serde_json::to_value(ComponentKind::KFServing).unwrap(), "kfserving");
    }

    #[test]
    fn every_kind_names_its_resource_and_applications_belong_to_one_component() {
        for component in ComponentKind::ALL {
            assert_eq!(component.crd().spec.names.kind, component.kind());
            // The generic component has no fixed applications: it takes what no other covers;
            // the profiles component installs only what a KfDef names it for.
            let no_fixed_applications = [ComponentKind::KustomizeApplication, ComponentKind::ProfileController];
            assert_eq!(component.applications().is_empty(), no_fixed_applications.contains(&component), "{component}");
        }
        let mut applications: Vec<&str> = ComponentKind::ALL.iter().flat_map(|c| c.applications().iter().copied()).collect();
        let count = applications.len();
        applications.sort();
        applications.dedup();
        assert_eq!(applications.len(), count, "an application is declared for two components");
    }
}
