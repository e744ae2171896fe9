//! Computing a component's next status (pure). Conditions keep their transition time while their
//! status holds, so a reconcile that changes nothing produces an identical status and no write.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kubeflow_crds::common::ConditionStatus;
pub use operator_runtime::conditions::set_condition;
use kubeflow_crds::component::{ComponentPhase, ComponentStatus, InventoryEntry};

/// What one reconcile found.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Every object is applied; `not_ready` lists what is still coming up.
    Applied { version: String, inventory: Vec<InventoryEntry>, not_ready: Vec<String> },
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
        Outcome::Applied { version, inventory, not_ready } => {
            status.inventory = inventory.clone();
            if not_ready.is_empty() {
                status.phase = Some(ComponentPhase::Ready);
                status.installed_version = Some(version.clone());
                let msg = format!("version {version} is installed and every workload is available");
                set_condition(conditions, "Ready", True, "Installed", &msg, generation, now);
                set_condition(conditions, "Progressing", False, "Installed", "", generation, now);
            } else {
                status.phase = Some(ComponentPhase::Progressing);
                let msg = format!("waiting for version {version}: {}", not_ready.join("; "));
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

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflow_crds::common::Condition;

    fn time(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    fn applied(not_ready: &[&str]) -> Outcome {
        Outcome::Applied { version: "v1".into(), inventory: vec![], not_ready: not_ready.iter().map(|s| s.to_string()).collect() }
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
        let ok = next_status(None, Some(1), &Outcome::Applied { version: "v1".into(), inventory: vec![entry.clone()], not_ready: vec![] }, &t);
        let bad = next_status(Some(&ok), Some(2), &Outcome::Invalid { field: "spec.version".into(), message: "nope".into() }, &t);
        assert_eq!(bad.phase, Some(ComponentPhase::Degraded));
        assert_eq!(bad.installed_version.as_deref(), Some("v1"));
        assert_eq!(bad.inventory, vec![entry]);
        let degraded = bad.conditions.iter().find(|c| c.type_ == "Degraded").unwrap();
        assert_eq!(degraded.message, "spec.version: nope");
        assert_eq!(degraded.observed_generation, Some(2));
    }
}
