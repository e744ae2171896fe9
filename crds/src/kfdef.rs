//! `KfDef` (`kfdef.apps.kubeflow.org/v1`): a whole Kubeflow deployment in kfctl's format.
//!
//! The spec mirrors kfctl's v1 `KfDef` field for field so existing kfctl files apply unchanged;
//! plugin specs stay free-form because every kfctl plugin (GCP, AWS, existing-Arrikto…) has its
//! own shape. The status adds, beside kfctl's conditions, one entry per component and one per
//! application so nothing in the spec is silently ignored.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{Condition, NameValue};

/// Desired Kubeflow deployment (kfctl `KfDef` v1).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "kfdef.apps.kubeflow.org",
    version = "v1",
    kind = "KfDef",
    plural = "kfdefs",
    singular = "kfdef",
    category = "kubeflow",
    namespaced,
    status = "KfDefStatus",
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".spec.version"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Available","type":"string","jsonPath":".status.conditions[?(@.type==\"Available\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct KfDefSpec {
    /// Kubeflow version of the deployment, e.g. `v1.2.0`; components default to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Applications to install; each maps to one component (see the README's mapping table).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]), length(max = 256))]
    pub applications: Vec<Application>,
    /// kfctl platform plugins (`KfGcpPlugin`, `KfAwsPlugin`, …); kept as written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plugins: Vec<Plugin>,
    /// Secrets kfctl plugins read (literal values or environment variables).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub secrets: Vec<KfSecret>,
    /// Manifest repositories the applications' `repoRef`s point into.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]), length(max = 64))]
    pub repos: Vec<Repo>,
    /// ServiceAccount in the KfDef's namespace whose rights install its applications (every
    /// component operator impersonates it); default [`DEFAULT_INSTALLER`]. Not in kfctl's format:
    /// kfctl installed with its user's rights.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = crate::validation::DNS_SUBDOMAIN), length(min = 1, max = 253))]
    pub service_account_name: Option<String>,
    /// Whether objects the applications render that already exist, made by someone else (kfctl,
    /// by hand), are taken over instead of left as they are and reported (see the component
    /// resources' `spec.adoptExisting`). For moving an existing kfctl install under the operators.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adopt_existing: bool,
    /// What deleting the KfDef leaves behind: `Retain` (the default) keeps the namespaces the
    /// install made and the CRDs it installed; `Purge` deletes them too, once nothing of a
    /// user's is in them, listing in `status.purging` what it waits for. Not in kfctl's format.
    #[serde(default, skip_serializing_if = "crate::is_default")]
    pub deletion_policy: crate::component::DeletionPolicy,
    /// Mirrors of the remote bases the packages name (a git reference such as
    /// `github.com/argoproj/argo-workflows/manifests/base?ref=v3.7.3`, or a release asset),
    /// `PREFIX=URI`: one whose URL starts with PREFIX is fetched from URI and the rest, e.g.
    /// `https://github.com/=https://mirror.example.com/github/` on an air-gapped cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = crate::validation::MIRRORS_MAX), inner(length(max = crate::validation::URI_MAX_LENGTH), regex(pattern = crate::validation::MIRROR)))]
    pub remote_base_mirrors: Vec<String>,
    /// The hub's registered clusters to install this KfDef on ([`crate::fleet_cluster`]) instead
    /// of this cluster. Not in kfctl's format.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<crate::fleet_cluster::Placement>,
}

/// The ServiceAccount a KfDef's packages are installed as when it names none: in the KfDef's own
/// namespace, so what a KfDef may install is what its namespace's account may do. `deploy/`
/// ships it in `kubeflow`, bound to `cluster-admin`, for the platform admin's KfDef.
pub const DEFAULT_INSTALLER: &str = "kubeflow-installer";

/// One kfctl application: a kustomize package and how to configure it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Application {
    /// Application name, e.g. `istio-crds`, `katib-controller`, `pipelines-ui` (a DNS subdomain,
    /// as every kfctl application name is).
    #[schemars(regex(pattern = crate::validation::DNS_SUBDOMAIN), length(min = 1, max = 253))]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kustomize_config: Option<KustomizeConfig>,
    /// The component that installs this application, instead of the one that covers its name
    /// ([`crate::component::ComponentKind::from_application`]; else the generic `kustomize`,
    /// which installs the package as upstream builds it). The only way to have the `profiles`
    /// component (this project's own profile controller and KFAM API) install an application:
    /// by default a `profiles` application installs upstream's profile controller, whatever its
    /// name. An application with `kustomizeConfig.componentOf` (a Component) is built with the
    /// one it changes, by the generic component, whatever this says. Not in kfctl's format.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installed_by: Option<crate::component::ComponentKind>,
}

/// Where an application's manifests come from and how they are customised.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KustomizeConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo_ref: Option<RepoRef>,
    /// Kustomize overlays to apply, in order (e.g. `istio`, `application`): folder names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = crate::validation::OVERLAYS_MAX), inner(length(max = 253), regex(pattern = crate::validation::OVERLAY_NAME)))]
    pub overlays: Vec<String>,
    /// Parameters substituted into the package (kfctl `params.env`); names are unique, as kfctl
    /// itself keeps them (it replaces a parameter by name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]), length(max = crate::validation::PARAMETERS_MAX))]
    pub parameters: Vec<NameValue>,
    /// This application's package is a `kind: Component` applied to the application named here
    /// (of the same repository), as kubeflow/manifests' `example/kustomization.yaml` lists one
    /// under `components:`: built with it, in KfDef order, its patches and generators changing
    /// that application's objects. Not built on its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = crate::validation::DNS_SUBDOMAIN), length(min = 1, max = 253))]
    pub component_of: Option<String>,
}

/// A path inside one of `spec.repos`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct RepoRef {
    /// Name of an entry in `spec.repos`.
    #[serde(default)]
    pub name: String,
    /// Path of the package inside the repository: relative, without `..` segments.
    #[serde(default)]
    #[schemars(
        length(max = crate::validation::PATH_MAX_LENGTH),
        regex(pattern = crate::validation::PACKAGE_PATH),
        extend("x-kubernetes-validations" = [{"rule": crate::validation::NO_PARENT_SEGMENT, "message": "must stay inside the repository: no '..' segments"}])
    )]
    pub path: String,
}

/// A manifest repository.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct Repo {
    /// Repository name `repoRef.name` refers to, e.g. `manifests` (a DNS subdomain).
    #[schemars(regex(pattern = crate::validation::DNS_SUBDOMAIN), length(min = 1, max = 253))]
    pub name: String,
    /// Archive or repository URI, e.g. `https://github.com/kubeflow/manifests/archive/v1.2.0.tar.gz`.
    #[serde(default)]
    #[schemars(length(max = crate::validation::URI_MAX_LENGTH), regex(pattern = crate::validation::NO_WHITESPACE))]
    pub uri: String,
    /// Optional SHA-256 (lowercase hex) of the archive `uri` names. Not in kfctl's format (kfctl
    /// ignores unknown fields, so a KfDef with it still works there); when set, a downloaded archive
    /// is checked against it before anything is unpacked, and a mismatch fails the repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9a-f]{64}$"))]
    pub sha256: Option<String>,
    /// The kustomize release that renders this repository's packages (`v3`: 3.1.0, `v3.2`: 3.2.0,
    /// `v5`). Not in kfctl's format. Unset: the one the Kubeflow release (`spec.version`) names —
    /// 3.2.0 for 1.3 to 1.6 —, else chosen by the KfDef's [`Era`]: v5 for kubeflow/manifests'
    /// layout (Kubeflow 1.7 and later); for a kfctl-era KfDef v3.1.0 (the release kfctl linked),
    /// unless a package uses what v3.1.0 does not know (`components`, `labels`, `replacements`,
    /// `sortOptions`, a `kind: Component`), which v5 then renders.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kustomize: Option<KustomizeRelease>,
}

impl Repo {
    /// The kustomize release this repository's packages render with in a KfDef of Kubeflow
    /// `version`: its own choice, else the release's ([`KustomizeRelease::of_kubeflow`]); `None`:
    /// the package decides.
    pub fn kustomize_for(&self, version: Option<&str>) -> Option<KustomizeRelease> {
        self.kustomize.or_else(|| version.and_then(KustomizeRelease::of_kubeflow))
    }
}

/// Which rules build a KfDef's kustomize packages.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Era {
    /// Kubeflow 0.x–1.2, installed by kfctl v1.0–v1.2: kustomize v3.1.0, kfctl's generated
    /// kustomizations, parameters and namespaces (`kubeflow_manifests::kfctl` cites its rules).
    #[default]
    Kfctl,
    /// kubeflow/manifests since Kubeflow 1.3, and the dated releases: each path is built as
    /// upstream builds it (`kustomize build <path>`, kustomize v5); objects keep upstream's
    /// namespaces; overlays and parameters are not kfctl's to apply.
    Upstream,
    /// Decided from each repository: [`Era::Upstream`] when it has kubeflow/manifests'
    /// `example/kustomization.yaml` (which no kfctl-era release had), else [`Era::Kfctl`].
    FromRepository,
}

impl Era {
    /// The era of a KfDef's `spec.version`: v0.x–v1.2.x are kfctl's, every later version (1.3 on,
    /// dated releases) upstream's; without a version (or with one that is not a version, such as
    /// `master`) the repository decides.
    pub fn of_version(version: Option<&str>) -> Era {
        let Some(version) = version.filter(|v| crate::validation::is_version(v)) else {
            return Era::FromRepository;
        };
        let mut parts = version.trim_start_matches('v').split(['.', '-']).map(|p| p.parse::<u64>().unwrap_or(0));
        match (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) {
            (0, _) | (1, 0..=2) => Era::Kfctl,
            _ => Era::Upstream,
        }
    }
}

/// A kustomize release line the operators ship.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema)]
pub enum KustomizeRelease {
    /// kustomize v3.1.0, the engine kfctl v1.0–v1.2 linked: kfctl-era packages (`vars`, `bases`,
    /// generator `env:` files).
    #[serde(rename = "v3")]
    V3,
    /// kustomize v3.2.0, the release kubeflow/manifests 1.3 to 1.6 name: their generated
    /// ConfigMaps' names (content hashes) are v3's, not v5's.
    #[serde(rename = "v3.2")]
    V3_2,
    /// kustomize v5: kubeflow/manifests since Kubeflow 1.7 and the dated releases.
    #[serde(rename = "v5")]
    V5,
}

impl KustomizeRelease {
    pub const ALL: [KustomizeRelease; 3] = [KustomizeRelease::V3, KustomizeRelease::V3_2, KustomizeRelease::V5];

    pub fn as_str(self) -> &'static str {
        match self {
            KustomizeRelease::V3 => "v3",
            KustomizeRelease::V3_2 => "v3.2",
            KustomizeRelease::V5 => "v5",
        }
    }

    /// The release a Kubeflow release (`spec.version`) names for building its kubeflow/manifests:
    /// 3.2.0 for 1.3 to 1.6 (their README's prerequisites); `None` for the others, whose packages
    /// choose (kfctl's era: v3.1.0 unless a package needs v5; 1.7 and later: v5).
    pub fn of_kubeflow(version: &str) -> Option<KustomizeRelease> {
        let mut parts = version.trim_start_matches('v').split(['.', '-']);
        let (major, minor) = (parts.next()?.parse::<u32>().ok()?, parts.next()?.parse::<u32>().ok()?);
        (major == 1 && (3..=6).contains(&minor)).then_some(KustomizeRelease::V3_2)
    }
}

impl std::fmt::Display for KustomizeRelease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A kfctl plugin. Only `kind` is interpreted; the rest is kept as written.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Plugin {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::common::free_form_object")]
    pub metadata: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::common::free_form_object")]
    pub spec: Option<serde_json::Value>,
}

/// A kfctl secret (`spec.secrets[]`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KfSecret {
    #[schemars(length(min = 1))]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_source: Option<SecretSource>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub literal_source: Option<LiteralSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_source: Option<EnvSource>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct LiteralSource {
    #[serde(default)]
    pub value: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct EnvSource {
    #[serde(default)]
    pub name: String,
}

/// Summary phase of a KfDef.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum KfDefPhase {
    #[default]
    Pending,
    Progressing,
    Available,
    Degraded,
}

/// Observed state of a KfDef.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KfDefStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<KfDefPhase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// kfctl-style conditions: `Available`, `Progressing`, `Degraded`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// One entry per component, keyed by component name (`istio`, `dex`, …).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub components: BTreeMap<String, ComponentSummary>,
    /// One entry per application in the spec, mapped or not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applications: Vec<ApplicationStatus>,
    /// Detected platform, e.g. `Kubernetes` or `OpenShift`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    /// With a placement: one entry per selected cluster (and per named cluster that cannot be
    /// used), the KfDef's state there. `components` and `applications` stay empty then.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub clusters: Vec<crate::fleet_cluster::ClusterPlacementStatus>,
    /// kfctl's cache of downloaded repositories, kept for compatibility.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub repos_cache: BTreeMap<String, RepoCache>,
    /// Being deleted with `spec.deletionPolicy: Purge`: what each component still waits for
    /// (`katib: CustomResourceDefinition experiments.kubeflow.org: 1 custom resource left, e.g. team/e1`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub purging: Vec<String>,
}

/// State of one component as its operator reported it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComponentSummary {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default)]
    pub ready: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The hash of the component spec this summary reports on (empty: no report on the spec
    /// published now), so that `ready` is never read as the answer to a spec it was not about.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub spec_hash: String,
}

/// What became of one application of the spec.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationStatus {
    pub name: String,
    /// Component whose operator installs the application (`kustomize`: the generic component,
    /// from the application's own package).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component: Option<String>,
    /// `Ready`, or while it is not, its own state where its component reports one per
    /// application, else its component's (`Pending`, `Progressing`, `Degraded`,
    /// `WaitingForOperator`, …), with the reason in `message`.
    pub state: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// How its package was built (the kustomize release, the objects converted from removed API
    /// versions), as its component reports it.
    #[serde(flatten)]
    pub build: crate::component::ApplicationBuild,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RepoCache {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_path: Option<String>,
}

#[cfg(test)]
mod era_tests {
    use super::Era;

    #[test]
    fn the_era_follows_the_kubeflow_version() {
        for v in ["v0.7.1", "v1.0.2", "v1.1.0", "v1.2.0", "1.2", "v1.2.1-rc.1"] {
            assert_eq!(Era::of_version(Some(v)), Era::Kfctl, "{v}");
        }
        for v in ["v1.3.0", "v1.10.2", "v1.11.0", "v2.0.0", "v2025.10.0"] {
            assert_eq!(Era::of_version(Some(v)), Era::Upstream, "{v}");
        }
        for v in [None, Some(""), Some("master"), Some("v1.x")] {
            assert_eq!(Era::of_version(v), Era::FromRepository, "{v:?}");
        }
    }

    /// Upstream's READMEs: "kustomize 3.2.0" for 1.3 to 1.6; 1.7 moved to v5; kfctl's era chose
    /// per package.
    #[test]
    fn the_kustomize_release_follows_the_kubeflow_version() {
        use super::KustomizeRelease;
        for v in ["v1.3.1", "1.3.0", "v1.4.1", "v1.5.0-rc.1", "v1.6.1"] {
            assert_eq!(KustomizeRelease::of_kubeflow(v), Some(KustomizeRelease::V3_2), "{v}");
        }
        for v in ["v1.2.0", "v1.2-branch", "v1.7.0", "v1.10.2", "v1.11.0", "v2025.10.0", "master", ""] {
            assert_eq!(KustomizeRelease::of_kubeflow(v), None, "{v}");
        }
    }
}

#[cfg(test)]
mod schema_tests {
    use kube::CustomResourceExt;

    /// The API server refuses an installer that is no component, listing the ones there are.
    #[test]
    fn an_applications_installer_is_one_of_the_components() {
        let crd = serde_json::to_value(super::KfDef::crd()).unwrap();
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["applications"]["items"]["properties"]["installedBy"];
        let names: Vec<&str> = schema["enum"].as_array().unwrap_or_else(|| panic!("{schema}")).iter().filter_map(|v| v.as_str()).collect();
        assert_eq!(names, ["istio", "dex", "kfserving", "katib", "pipelines", "profiles", "kustomize"]);
    }
}
