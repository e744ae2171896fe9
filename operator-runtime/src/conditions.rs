//! Condition bookkeeping shared by every status the operators write.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kubeflow_crds::common::{Condition, ConditionStatus};

/// Sets condition `type_`, keeping `lastTransitionTime` unless the status flips.
pub fn set_condition(conditions: &mut Vec<Condition>, type_: &str, status: ConditionStatus, reason: &str, message: &str, generation: Option<i64>, now: &Time) {
    let existing = conditions.iter_mut().find(|c| c.type_ == type_);
    match existing {
        Some(c) if c.status == status && c.reason == reason && c.message == message && c.observed_generation == generation => {}
        Some(c) => {
            if c.status != status {
                c.last_transition_time = Some(now.clone());
            }
            c.status = status;
            c.reason = reason.into();
            c.message = message.into();
            c.observed_generation = generation;
            c.last_update_time = Some(now.clone());
        }
        None => conditions.push(Condition {
            type_: type_.into(),
            status,
            observed_generation: generation,
            reason: reason.into(),
            message: message.into(),
            last_transition_time: Some(now.clone()),
            last_update_time: Some(now.clone()),
        }),
    }
}

