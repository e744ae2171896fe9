//! `KfUpgrade` (`kfupgrade.apps.kubeflow.org/v1alpha1`): move a KfDef's components to new versions.
//!
//! kfctl's fields `currentKfDef` and `newKfDef` are kept. What kfctl left to its CLI — which
//! components move, in what order, how long each may take to become healthy and whether a failed
//! step rolls back — is spelled out here so the operator can execute (and resume) the upgrade.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::Condition;
use crate::component::{ChangePlan, ComponentKind};

/// A request to upgrade one KfDef.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "kfupgrade.apps.kubeflow.org",
    version = "v1alpha1",
    kind = "KfUpgrade",
    plural = "kfupgrades",
    singular = "kfupgrade",
    category = "kubeflow",
    namespaced,
    status = "KfUpgradeStatus",
    printcolumn = r#"{"name":"KfDef","type":"string","jsonPath":".spec.currentKfDef.name"}"#,
    printcolumn = r#"{"name":"From","type":"string","jsonPath":".spec.currentKfDef.version"}"#,
    printcolumn = r#"{"name":"To","type":"string","jsonPath":".spec.newKfDef.version"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        // Every field but `approved`, which is how a Manual upgrade is started.
        "rule": "has(self.currentKfDef) == has(oldSelf.currentKfDef) && (!has(self.currentKfDef) || self.currentKfDef == oldSelf.currentKfDef) && has(self.newKfDef) == has(oldSelf.newKfDef) && (!has(self.newKfDef) || self.newKfDef == oldSelf.newKfDef) && has(self.baseConfigPath) == has(oldSelf.baseConfigPath) && (!has(self.baseConfigPath) || self.baseConfigPath == oldSelf.baseConfigPath) && has(self.components) == has(oldSelf.components) && (!has(self.components) || self.components == oldSelf.components) && has(self.onlyListed) == has(oldSelf.onlyListed) && (!has(self.onlyListed) || self.onlyListed == oldSelf.onlyListed) && has(self.order) == has(oldSelf.order) && (!has(self.order) || self.order == oldSelf.order) && has(self.healthTimeoutSeconds) == has(oldSelf.healthTimeoutSeconds) && (!has(self.healthTimeoutSeconds) || self.healthTimeoutSeconds == oldSelf.healthTimeoutSeconds) && has(self.rollbackOnFailure) == has(oldSelf.rollbackOnFailure) && (!has(self.rollbackOnFailure) || self.rollbackOnFailure == oldSelf.rollbackOnFailure) && has(self.approval) == has(oldSelf.approval) && (!has(self.approval) || self.approval == oldSelf.approval) && has(self.waves) == has(oldSelf.waves) && (!has(self.waves) || self.waves == oldSelf.waves) && has(self.staleClusters) == has(oldSelf.staleClusters) && (!has(self.staleClusters) || self.staleClusters == oldSelf.staleClusters)",
        "message": "spec is immutable once the upgrade exists, except spec.approved and spec.approvedWaves; create a new KfUpgrade instead",
    },
    {
        "rule": "!has(oldSelf.approvedWaves) || (has(self.approvedWaves) && oldSelf.approvedWaves.all(w, w in self.approvedWaves))",
        "message": "spec.approvedWaves cannot lose a wave: the wave may already be writing",
        "fieldPath": ".approvedWaves",
    },
    {
        "rule": "!has(oldSelf.approved) || !oldSelf.approved || (has(self.approved) && self.approved)",
        "message": "spec.approved cannot be withdrawn: the upgrade may already be writing",
        "fieldPath": ".approved",
    },
    {
        // Upgrades move one KfDef in place.
        "rule": "self.newKfDef.name == self.currentKfDef.name",
        "message": "newKfDef.name must equal currentKfDef.name: an upgrade moves that KfDef in place",
        "fieldPath": ".newKfDef.name",
    },
    {
        "rule": "!self.onlyListed || (has(self.components) && size(self.components) > 0)",
        "message": "onlyListed needs at least one entry in components: otherwise nothing would move",
        "fieldPath": ".onlyListed",
    },
    {
        "rule": "!has(self.currentKfDef.version) || !has(self.newKfDef.version) || self.currentKfDef.version != self.newKfDef.version || (has(self.components) && size(self.components) > 0)",
        "message": "newKfDef.version equals currentKfDef.version and no components are listed: nothing would move",
        "fieldPath": ".newKfDef.version",
    },
]))]
pub struct KfUpgradeSpec {
    /// The installed KfDef (same namespace) and the version it runs.
    pub current_kf_def: KfDefReference,
    /// The KfDef describing the target; its `version` is the Kubeflow version to reach.
    pub new_kf_def: KfDefReference,
    /// kfctl's path to the new configuration; accepted and unused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_config_path: Option<String>,
    /// Explicit target version per component. Components not listed move to `newKfDef.version`;
    /// when the list is non-empty and `onlyListed` is true, only the listed components move.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["component"]))]
    pub components: Vec<ComponentTarget>,
    /// Upgrade only the components in `components`.
    #[serde(default)]
    pub only_listed: bool,
    /// Order to move components in; default Istio, Dex, KFServing, Katib, Pipelines.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub order: Vec<ComponentKind>,
    /// How long one component may take to report Ready at its new version.
    #[serde(default = "default_health_timeout")]
    #[schemars(range(min = 10, max = 86400))]
    pub health_timeout_seconds: i64,
    /// Roll every already-upgraded component back when a step fails or times out.
    #[serde(default = "default_true")]
    pub rollback_on_failure: bool,
    /// Whether the upgrade starts once its plan is computed (`Automatic`) or waits in phase
    /// `AwaitingApproval`, plan in status, until `approved` is set (`Manual`).
    #[serde(default)]
    pub approval: Approval,
    /// Starts a `Manual` upgrade whose plan has been read (with `waves`: every wave). Cannot be
    /// withdrawn.
    #[serde(default)]
    pub approved: bool,
    /// For a KfDef placed on fleet clusters (`spec.placement`), and only for one: its clusters
    /// move in these waves, one wave after the other, the first being the canary. A cluster
    /// belongs to the first wave that selects it, and every placed cluster must be in one (a last
    /// wave with `clusterSelector: {}` takes the rest). A wave starts once every cluster of the
    /// one before is Ready at its new versions; a cluster that is not, within
    /// `healthTimeoutSeconds`, stops the rollout and, with `rollbackOnFailure`, alone goes back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub waves: Vec<Wave>,
    /// Waves (by name) whose `approval` is Manual and which may start. Names can be added, not
    /// removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(regex(pattern = crate::validation::DNS_LABEL), length(min = 1, max = 63)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub approved_waves: Vec<String>,
    /// What a wave does with a cluster whose agent is not heard from (`Stale`) when the wave
    /// reaches it: wait until it is heard again, or leave it at its versions and go on.
    #[serde(default)]
    pub stale_clusters: StaleClusters,
}

/// One wave of a fleet upgrade: clusters by name and/or by label.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{"rule": "has(self.clusters) || has(self.clusterSelector)", "message": "a wave names clusters, selects them by label, or both"}]))]
pub struct Wave {
    #[schemars(regex(pattern = crate::validation::DNS_LABEL), length(min = 1, max = 63))]
    pub name: String,
    /// Registered clusters of the placement, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(regex(pattern = crate::validation::DNS_LABEL), length(min = 1, max = 63)))]
    pub clusters: Vec<String>,
    /// Clusters of the placement, by their registration's labels (`{}`: every one left).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    /// `Manual`: the wave waits, its clusters' plans in status, until `spec.approvedWaves` names
    /// it (or `spec.approved` is set). `spec.approval: Manual` makes every wave Manual.
    #[serde(default)]
    pub approval: Approval,
}

/// What a wave does with a cluster that is not heard from.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum StaleClusters {
    /// The wave waits until the cluster is heard from again, then moves it.
    #[default]
    Wait,
    /// The cluster keeps its versions (shown `Skipped`), and the wave goes on without it.
    Skip,
}

/// The versions one fleet cluster is pinned to, over the KfDef's `spec.version` and its own pins:
/// what a wave writes for a cluster, and what its rollback restores.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPins {
    /// Component name to version.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub components: BTreeMap<String, String>,
    /// Repositories of the generic component, by the names `spec.repos` uses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repos: Vec<crate::kfdef::Repo>,
}

/// One component of one cluster moving.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterMove {
    pub component: ComponentKind,
    pub from_version: String,
    pub to_version: String,
}

/// Progress of one wave.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum WavePhase {
    #[default]
    Pending,
    /// Its approval is Manual and `spec.approvedWaves` does not name it yet.
    AwaitingApproval,
    Upgrading,
    Succeeded,
    /// A cluster of the wave failed: the rollout stopped here.
    Failed,
}

/// Progress of one cluster in a wave.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ClusterUpgradePhase {
    #[default]
    Pending,
    /// Not heard from (`Stale`): the wave waits for it (`staleClusters: Wait`).
    Waiting,
    Upgrading,
    Succeeded,
    /// Already at its target versions: nothing to move.
    Unchanged,
    /// Not heard from, left at its versions (`staleClusters: Skip`).
    Skipped,
    Failed,
    RollingBack,
    RolledBack,
}

/// One cluster of a fleet upgrade: its plan (from the releases its own operators announced) and
/// its progress.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterUpgrade {
    pub name: String,
    #[serde(default)]
    pub phase: ClusterUpgradePhase,
    /// The components that move on this cluster, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub moves: Vec<ClusterMove>,
    /// The pins the cluster gets.
    #[serde(default)]
    pub target: ClusterPins,
    /// The cluster's pins before (none: it followed the KfDef), which a rollback restores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<ClusterPins>,
    /// What each move would change on this cluster, object by object, as its own component
    /// operators planned it before any wave started.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plan: Vec<StepPlan>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Time>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// One wave of a fleet upgrade and its clusters.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaveStatus {
    pub name: String,
    #[serde(default)]
    pub phase: WavePhase,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ClusterUpgrade>,
}

/// When an upgrade starts after its plan, as OLM's `installPlanApproval`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Approval {
    #[default]
    Automatic,
    Manual,
}

fn default_health_timeout() -> i64 {
    600
}
fn default_true() -> bool {
    true
}

/// A KfDef by name (in the KfUpgrade's namespace) and version.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct KfDefReference {
    #[schemars(regex(pattern = crate::validation::DNS_SUBDOMAIN), length(min = 1, max = 253))]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = crate::validation::VERSION), length(max = 64))]
    pub version: Option<String>,
    /// In `newKfDef`: the manifests repositories of the new version (by the names `spec.repos`
    /// uses, e.g. `manifests` → `…/archive/v1.3.0.tar.gz`). Every component that renders the
    /// KfDef's packages (the generic component, and a built-in whose applications name a
    /// package) renders them again from these, in its step, even at an unchanged version; a
    /// built-in release without packages moves its version only. Without it the generic
    /// component is not part of the upgrade, and a built-in's new version must run the packages
    /// it has now (else the plan fails, naming the image that says otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]), length(max = 32))]
    pub repos: Vec<crate::kfdef::Repo>,
}

/// Target version of one component.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct ComponentTarget {
    pub component: ComponentKind,
    #[schemars(regex(pattern = crate::validation::VERSION), length(max = 64))]
    pub version: String,
}

/// Phase of an upgrade.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum UpgradePhase {
    #[default]
    Pending,
    Validating,
    /// Validated; the component operators are computing what each step would change.
    Planning,
    /// The plan is in status; nothing was written. Set `spec.approved` to start.
    AwaitingApproval,
    Upgrading,
    RollingBack,
    Succeeded,
    Failed,
    RolledBack,
}

/// Phase of one component's step.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum StepPhase {
    #[default]
    Pending,
    Upgrading,
    Succeeded,
    Failed,
    RollingBack,
    RolledBack,
}

/// Why a step failed.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum StepFailure {
    /// The component did not report Ready at the new version within `healthTimeoutSeconds`.
    HealthTimeout,
}

/// Progress of one component.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeStep {
    pub component: ComponentKind,
    pub from_version: String,
    pub to_version: String,
    #[serde(default)]
    pub phase: StepPhase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Time>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Set on the step that failed (kept when it is rolled back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<StepFailure>,
    /// A step of a component that renders the KfDef's packages moves repositories too: those
    /// pinned before it (empty: `spec.repos`, no pin), restored by a rollback, and those it pins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub from_repos: Vec<crate::kfdef::Repo>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub to_repos: Vec<crate::kfdef::Repo>,
}

/// The plan of one step, as its component operator computed it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StepPlan {
    pub component: ComponentKind,
    pub from_version: String,
    pub to_version: String,
    /// `N to add, M to change, …`.
    pub summary: String,
    #[serde(flatten)]
    pub changes: ChangePlan,
}

/// Observed state of an upgrade.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KfUpgradeStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<UpgradePhase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// One entry per component that moves, in execution order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<UpgradeStep>,
    /// What each step will change, computed before anything is written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plan: Vec<StepPlan>,
    /// What the release notes of the Kubeflow releases this upgrade crosses ask of an operator
    /// by hand (data migrations, removed features), before or after the upgrade.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub manual_steps: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// A fleet upgrade's waves, in order, with each cluster's plan and progress.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waves: Vec<WaveStatus>,
}
