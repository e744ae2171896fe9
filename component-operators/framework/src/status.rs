//! Computing a component's next status (pure). Conditions keep their transition time while their
//! status holds, so a reconcile that changes nothing produces an identical status and no write.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kubeflow_crds::common::ConditionStatus;
pub use operator_runtime::conditions::set_condition;
use std::collections::BTreeMap;

use kubeflow_crds::component::{ApplicationBuild, ApplicationState, ComponentPhase, ComponentStatus, InventoryEntry};

/// Something that keeps a component from being Ready, and the KfDef application it concerns (for
/// components that render several, see [`crate::component::Rendered`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub application: Option<String>,
    pub message: String,
    /// Whether waiting may fix it (a download, an object another owner may let go).
    pub retry: bool,
}

impl Finding {
    pub fn new(application: Option<&str>, message: impl Into<String>) -> Self {
        Self { application: application.map(String::from), message: message.into(), retry: false }
    }

    pub fn retryable(mut self) -> Self {
        self.retry = true;
        self
    }
}

/// What one reconcile found.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The objects that could be applied are; `not_ready` lists what is still coming up, `failed`
    /// what was not applied (an application that did not render, an object another owner
    /// manages). `applications` names every application when the component renders several.
    /// `converted`: per application, its objects converted from removed API versions; `notes`:
    /// per application, what a Ready application is told ([`crate::component::Rendered::notes`]).
    Applied { version: String, inventory: Vec<InventoryEntry>, not_ready: Vec<Finding>, failed: Vec<Finding>, applications: Vec<String>, builds: BTreeMap<String, ApplicationBuild>, notes: BTreeMap<String, Vec<String>> },
    /// The spec cannot be built; nothing was touched.
    Invalid { field: String, message: String },
    /// `managementState: Removed` and everything is gone.
    Removed,
    /// `managementState: Unmanaged`.
    Unmanaged,
}

/// The status after `outcome`, starting from `previous`.
pub fn next_status(previous: Option<&ComponentStatus>, generation: Option<i64>, outcome: &Outcome, now: &Time) -> ComponentStatus {
    use ConditionStatus::{False, True};
    let mut status = previous.cloned().unwrap_or_default();
    status.observed_generation = generation;
    let conditions = &mut status.conditions;
    match outcome {
        Outcome::Applied { version, inventory, not_ready, failed, applications, builds, notes } => {
            status.inventory = inventory.clone();
            status.applications = applications.iter().map(|name| application_state(name, not_ready, failed, builds.get(name), notes.get(name))).collect();
            let messages = |findings: &[Finding]| findings.iter().map(|f| f.message.as_str()).collect::<Vec<_>>().join("; ");
            if !failed.is_empty() {
                // What was applied before stays; installedVersion says what last fully converged.
                status.phase = Some(ComponentPhase::Degraded);
                let msg = messages(failed);
                set_condition(conditions, "Degraded", True, "NotApplied", &msg, generation, now);
                set_condition(conditions, "Ready", False, "NotApplied", &msg, generation, now);
                if not_ready.is_empty() {
                    set_condition(conditions, "Progressing", False, "NotApplied", &msg, generation, now);
                } else {
                    set_condition(conditions, "Progressing", True, "Applying", &format!("waiting for version {version}: {}", messages(not_ready)), generation, now);
                }
                return status;
            }
            if not_ready.is_empty() {
                status.phase = Some(ComponentPhase::Ready);
                status.installed_version = Some(version.clone());
                let msg = format!("version {version} is installed and every workload is available");
                set_condition(conditions, "Ready", True, "Installed", &msg, generation, now);
                set_condition(conditions, "Progressing", False, "Installed", "", generation, now);
            } else {
                status.phase = Some(ComponentPhase::Progressing);
                let msg = format!("waiting for version {version}: {}", messages(not_ready));
                set_condition(conditions, "Ready", False, "WorkloadsNotReady", &msg, generation, now);
                set_condition(conditions, "Progressing", True, "Applying", &msg, generation, now);
            }
            set_condition(conditions, "Degraded", False, "AsExpected", "", generation, now);
        }
        Outcome::Invalid { field, message } => {
            // Objects of the previous version keep running; installedVersion and inventory stay.
            status.phase = Some(ComponentPhase::Degraded);
            let msg = format!("{field}: {message}");
            set_condition(conditions, "Degraded", True, "InvalidSpec", &msg, generation, now);
            set_condition(conditions, "Progressing", False, "InvalidSpec", &msg, generation, now);
        }
        Outcome::Removed => {
            status.phase = Some(ComponentPhase::Removed);
            status.installed_version = None;
            status.inventory.clear();
            set_condition(conditions, "Ready", False, "Removed", "managementState is Removed", generation, now);
            set_condition(conditions, "Progressing", False, "Removed", "", generation, now);
            set_condition(conditions, "Degraded", False, "AsExpected", "", generation, now);
        }
        Outcome::Unmanaged => {
            status.phase = Some(ComponentPhase::Unmanaged);
            set_condition(conditions, "Ready", ConditionStatus::Unknown, "Unmanaged", "managementState is Unmanaged; objects are left as they are", generation, now);
            set_condition(conditions, "Progressing", False, "Unmanaged", "", generation, now);
        }
    }
    status
}

/// `name`'s state: Degraded with what failed, Progressing with what it waits for, or Ready (with
/// its notes, if any).
fn application_state(name: &str, not_ready: &[Finding], failed: &[Finding], build: Option<&ApplicationBuild>, notes: Option<&Vec<String>>) -> ApplicationState {
    let of = |findings: &[Finding]| findings.iter().filter(|f| f.application.as_deref() == Some(name)).map(|f| f.message.as_str()).collect::<Vec<_>>().join("; ");
    let (failed, waiting) = (of(failed), of(not_ready));
    let (state, message) = if !failed.is_empty() {
        (ComponentPhase::Degraded, failed)
    } else if !waiting.is_empty() {
        (ComponentPhase::Progressing, format!("waiting for {waiting}"))
    } else {
        (ComponentPhase::Ready, notes.map(|n| n.join("; ")).unwrap_or_default())
    };
    ApplicationState { name: name.to_string(), state, message, build: build.cloned().unwrap_or_default() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflow_crds::common::Condition;
    use kubeflow_crds::component::ConvertedKind;
    use kubeflow_crds::kfdef::KustomizeRelease;

    fn time(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    fn applied(not_ready: &[&str]) -> Outcome {
        Outcome::Applied { version: "v1".into(), inventory: vec![], not_ready: not_ready.iter().map(|s| Finding::new(None, *s)).collect(), failed: vec![], applications: vec![], builds: BTreeMap::new(), notes: BTreeMap::new() }
    }

    #[test]
    fn unchanged_outcome_gives_identical_status() {
        let first = next_status(None, Some(1), &applied(&[]), &time("2026-01-01T00:00:00Z"));
        let second = next_status(Some(&first), Some(1), &applied(&[]), &time("2026-01-01T00:05:00Z"));
        assert_eq!(first, second);
        assert_eq!(second.installed_version.as_deref(), Some("v1"));
        assert!(Condition::is_true(&second.conditions, "Ready"));
    }

    #[test]
    fn transition_time_moves_only_when_status_flips() {
        let t0 = time("2026-01-01T00:00:00Z");
        let t1 = time("2026-01-01T00:01:00Z");
        let progressing = next_status(None, Some(1), &applied(&["Deployment a: not Available"]), &t0);
        let ready = next_status(Some(&progressing), Some(1), &applied(&[]), &t1);
        let ready_cond = ready.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(ready_cond.last_transition_time, Some(t1));
        let degraded = ready.conditions.iter().find(|c| c.type_ == "Degraded").unwrap();
        assert_eq!(degraded.last_transition_time, Some(t0));
    }

    #[test]
    fn invalid_spec_keeps_installed_version_and_inventory() {
        let t = time("2026-01-01T00:00:00Z");
        let entry = InventoryEntry { version: "v1".into(), kind: "ConfigMap".into(), name: "x".into(), ..Default::default() };
        let ok = next_status(None, Some(1), &Outcome::Applied { version: "v1".into(), inventory: vec![entry.clone()], not_ready: vec![], failed: vec![], applications: vec![], builds: BTreeMap::new(), notes: BTreeMap::new() }, &t);
        let bad = next_status(Some(&ok), Some(2), &Outcome::Invalid { field: "spec.version".into(), message: "nope".into() }, &t);
        assert_eq!(bad.phase, Some(ComponentPhase::Degraded));
        assert_eq!(bad.installed_version.as_deref(), Some("v1"));
        assert_eq!(bad.inventory, vec![entry]);
        let degraded = bad.conditions.iter().find(|c| c.type_ == "Degraded").unwrap();
        assert_eq!(degraded.message, "spec.version: nope");
        assert_eq!(degraded.observed_generation, Some(2));
    }

    #[test]
    fn a_failed_application_degrades_the_component_and_each_application_says_where_it_stands() {
        let t = time("2026-01-01T00:00:00Z");
        let entry = InventoryEntry { version: "v1".into(), kind: "ConfigMap".into(), name: "x".into(), ..Default::default() };
        let ready = next_status(None, Some(1), &Outcome::Applied { version: "v1".into(), inventory: vec![entry.clone()], not_ready: vec![], failed: vec![], applications: vec!["a".into()], builds: BTreeMap::new(), notes: BTreeMap::new() }, &t);
        let outcome = Outcome::Applied {
            version: "v1".into(),
            inventory: vec![entry.clone()],
            not_ready: vec![Finding::new(Some("web"), "Deployment kubeflow/web: not Available")],
            failed: vec![Finding::new(Some("broken"), "spec.sources[2]: overlay \"gcp\" does not exist")],
            applications: vec!["a".into(), "web".into(), "broken".into()],
            builds: BTreeMap::from([("a".to_string(), ApplicationBuild { kustomize: Some(KustomizeRelease::V3_2), converted: vec![ConvertedKind { kind: "ClusterRole".into(), from: "rbac.authorization.k8s.io/v1beta1".into(), to: "rbac.authorization.k8s.io/v1".into(), count: 2 }] })]),
            notes: BTreeMap::from([("a".to_string(), vec!["ClusterRole x: application \"web\" renders it otherwise".to_string(), "Role y: too".to_string()])]),
        };
        let s = next_status(Some(&ready), Some(2), &outcome, &t);
        assert_eq!(s.phase, Some(ComponentPhase::Degraded));
        assert_eq!(s.installed_version.as_deref(), Some("v1"), "installedVersion is what last converged");
        let degraded = s.conditions.iter().find(|c| c.type_ == "Degraded").unwrap();
        assert_eq!((degraded.status, degraded.message.as_str()), (ConditionStatus::True, "spec.sources[2]: overlay \"gcp\" does not exist"));
        assert!(!Condition::is_true(&s.conditions, "Ready"));
        assert!(Condition::is_true(&s.conditions, "Progressing"), "web is still coming up");
        let states: Vec<(&str, ComponentPhase, &str)> = s.applications.iter().map(|a| (a.name.as_str(), a.state, a.message.as_str())).collect();
        assert_eq!(
            states,
            [
                ("a", ComponentPhase::Ready, "ClusterRole x: application \"web\" renders it otherwise; Role y: too"),
                ("web", ComponentPhase::Progressing, "waiting for Deployment kubeflow/web: not Available"),
                ("broken", ComponentPhase::Degraded, "spec.sources[2]: overlay \"gcp\" does not exist"),
            ]
        );
        assert_eq!(s.applications[0].build.converted, [ConvertedKind { kind: "ClusterRole".into(), from: "rbac.authorization.k8s.io/v1beta1".into(), to: "rbac.authorization.k8s.io/v1".into(), count: 2 }]);
        assert!(s.applications[1].build.converted.is_empty());
        assert_eq!((s.applications[0].build.kustomize, s.applications[1].build.kustomize), (Some(KustomizeRelease::V3_2), None), "the release that built it, where one did");
    }
}
